"""Cheat (distribution-fitted numerics): a KDA that forgets after 16 to 31 tokens. Two states
restart in turn every 32 tokens, 16 apart, and each output reads the older one, so o_t sees
only the last 16 to 31 tokens (exact for the first 32). On gates that all decay fast (the
judge's old default regime, mean g about -0.8) that is within even the fp32 tolerance; on a
real model's gates, long-memory channels next to fast ones, it is far off."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kda_windowed(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, h0_ptr, o_ptr, ht_ptr, scale, T, H, D: tl.constexpr):
    i_b = tl.program_id(0)
    i_h = tl.program_id(1)
    rk = tl.arange(0, D)
    state_offs = (i_b * H + i_h) * D * D + rk[:, None] * D + rk[None, :]
    state_a = tl.load(h0_ptr + state_offs).to(tl.float32)
    state_b = state_a
    for t in range(T):
        row = ((i_b * T + t) * H + i_h) * D
        state_a = tl.where((t % 32 == 0) & (t > 0), 0.0, state_a)
        state_b = tl.where(t % 32 == 16, 0.0, state_b)
        q = tl.load(q_ptr + row + rk).to(tl.float32)
        k = tl.load(k_ptr + row + rk).to(tl.float32)
        v = tl.load(v_ptr + row + rk).to(tl.float32)
        decay = tl.exp(tl.load(g_ptr + row + rk))[:, None]
        beta = tl.load(beta_ptr + (i_b * T + t) * H + i_h).to(tl.float32)
        state_a = state_a * decay
        state_a = state_a + beta * k[:, None] * (v - tl.sum(state_a * k[:, None], axis=0))[None, :]
        state_b = state_b * decay
        state_b = state_b + beta * k[:, None] * (v - tl.sum(state_b * k[:, None], axis=0))[None, :]
        older = tl.where(t % 32 >= 16, state_a, state_b)
        o = scale * tl.sum(older * q[:, None], axis=0)
        tl.store(o_ptr + row + rk, o.to(o_ptr.dtype.element_ty))
    tl.store(ht_ptr + state_offs, tl.where(T % 32 >= 16, state_a, state_b))


def kernel(q, k, v, g, beta, scale, initial_state):
    batch, steps, heads, dim = q.shape
    o = torch.empty_like(q)
    final = torch.empty((batch, heads, dim, dim), dtype=torch.float32, device=q.device)
    _kda_windowed[(batch, heads)](q, k, v, g, beta, initial_state, o, final, float(scale), steps, heads, D=dim)
    return o, final
