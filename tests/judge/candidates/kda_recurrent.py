"""Honest: KDA as the token-by-token recurrence, one Triton program per (sequence, head), from
the initial state, handing over the final state. Slow on a GPU, exact; the numeric cheats
(``tests/judge/numeric_corpus.py``) are this file with one change each."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kda_recurrent(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, h0_ptr, o_ptr, ht_ptr, scale, T, H, D: tl.constexpr):
    i_b = tl.program_id(0)
    i_h = tl.program_id(1)
    rk = tl.arange(0, D)
    state_offs = (i_b * H + i_h) * D * D + rk[:, None] * D + rk[None, :]
    state = tl.load(h0_ptr + state_offs).to(tl.float32)  # CHEAT-SITE: initial state
    for t in range(T):
        row = ((i_b * T + t) * H + i_h) * D
        q = tl.load(q_ptr + row + rk).to(tl.float32)
        k = tl.load(k_ptr + row + rk).to(tl.float32)
        v = tl.load(v_ptr + row + rk).to(tl.float32)
        g = tl.load(g_ptr + row + rk)
        beta = tl.load(beta_ptr + (i_b * T + t) * H + i_h).to(tl.float32)
        state = state * tl.exp(g)[:, None]
        error = v - tl.sum(state * k[:, None], axis=0)  # CHEAT-SITE: delta correction
        state = state + beta * k[:, None] * error[None, :]
        o = scale * tl.sum(state * q[:, None], axis=0)
        tl.store(o_ptr + row + rk, o.to(o_ptr.dtype.element_ty))  # CHEAT-SITE: output
    tl.store(ht_ptr + state_offs, state)  # CHEAT-SITE: final state


def kernel(q, k, v, g, beta, scale, initial_state):
    batch, steps, heads, dim = q.shape
    o = torch.empty_like(q)
    final = torch.empty((batch, heads, dim, dim), dtype=torch.float32, device=q.device)
    _kda_recurrent[(batch, heads)](q, k, v, g, beta, initial_state, o, final, float(scale), steps, heads, D=dim)
    return o, final
