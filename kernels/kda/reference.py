"""Two independent float64 formulations of the KDA forward.

``kda_loop_reference`` is the token-by-token recurrence: obviously right, slow.
``kda_chunked_reference`` is the chunkwise closed form (WY/UT representation with a
triangular solve), written from the math in the Kimi Linear report, vectorised over chunks:
fast on a GPU. ``kda_reference`` (the judge's reference) takes the loop on the CPU and the
chunked form on a GPU; tests check that the two agree on every input regime, strong and
unbounded decays included, which also checks the math our Triton kernel implements.
"""

from __future__ import annotations

import torch

# On a GPU, sequences up to this many tokens (the judge's short verify shapes) are referenced by
# the token-by-token loop: about 5 launches a token, some 50 ms at T = 1000.
LOOP_STEPS = 2048


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor) -> None:
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, D], got shape {tuple(q.shape)}")
    for name, x in (("k", k), ("v", v), ("g", g)):
        if x.shape != q.shape:
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)}, got {tuple(x.shape)}")
    if beta.shape != q.shape[:3]:
        raise ValueError(f"beta must be [B, T, H] = {tuple(q.shape[:3])}, got {tuple(beta.shape)}")


def _check_state(q: torch.Tensor, initial_state: torch.Tensor | None, sequences: int) -> None:
    dim, heads = q.shape[3], q.shape[2]
    if initial_state is not None and tuple(initial_state.shape) != (sequences, heads, dim, dim):
        raise ValueError(f"initial_state must be [N, H, D, D] = {(sequences, heads, dim, dim)}, "
                         f"got {tuple(initial_state.shape)}")


def sequence_bounds(q: torch.Tensor, cu_seqlens: torch.Tensor | None) -> list[tuple[int, int]]:
    """[(begin, end)] of each sequence along T: the B rows of q, or with ``cu_seqlens`` [N + 1]
    (FLA's packed form: q is [1, total, H, D], cu_seqlens[0] = 0, cu_seqlens[-1] = total,
    non-decreasing) the N packed sequences. Raises with the numbers on anything else."""
    batch, seq = q.shape[0], q.shape[1]
    if cu_seqlens is None:
        return [(0, seq)] * batch
    if batch != 1:
        raise ValueError(f"with cu_seqlens the batch must be 1 (sequences packed along T), got B = {batch}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cu_seqlens must be a 1-D int32/int64 tensor of N + 1 >= 2 offsets, got "
                         f"{tuple(cu_seqlens.shape)} {cu_seqlens.dtype}")
    offsets = [int(x) for x in cu_seqlens.tolist()]
    if offsets[0] != 0 or offsets[-1] != seq or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"cu_seqlens must start at 0, end at T = {seq} and never decrease, got "
                         f"{offsets[:4]}{'...' if len(offsets) > 4 else ''} ending at {offsets[-1]}")
    return list(zip(offsets, offsets[1:]))


def kda_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    method: str = "auto",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The KDA forward in float64, with FLA's forward interface.

    q, k, v, g: [B, T, H, D]; beta: [B, T, H]; ``initial_state`` [N, H, D, D] (keys x values),
    N = B, or the number of packed sequences with ``cu_seqlens`` [N + 1] (then B = 1).
    Returns o [B, T, H, D] float32, or ``(o, final_state [N, H, D, D] float32)`` when
    ``output_final_state``.

    ``method``: "loop" is the token-by-token recurrence (``kda_loop_reference``), "chunked" the
    chunkwise closed form (``kda_chunked_reference``); "auto" takes the loop on the CPU and on
    a GPU up to ``LOOP_STEPS`` tokens (the fp64 token-by-token oracle: no algebra shared with a
    chunked kernel), the chunked form beyond, where the loop is launch-bound (7.3 s at
    (1, 32768, 32, 128) on an H200). Tests check that both agree.
    """
    if method == "auto":
        method = "chunked" if q.is_cuda and q.shape[1] > LOOP_STEPS else "loop"
    if method not in ("loop", "chunked"):
        raise ValueError(f"method must be 'auto', 'loop' or 'chunked', got {method!r}")
    _check(q, k, v, g, beta)
    one = kda_loop_reference if method == "loop" else kda_chunked_reference
    if cu_seqlens is None:
        return one(q, k, v, g, beta, scale, initial_state, output_final_state)
    bounds = sequence_bounds(q, cu_seqlens)
    _check_state(q, initial_state, len(bounds))
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    finals = []
    for n, (begin, end) in enumerate(bounds):
        part = [x[:, begin:end] for x in (q, k, v, g, beta)]
        state = initial_state[n:n + 1] if initial_state is not None else None
        o, final = one(*part, scale, state, True)
        out[:, begin:end] = o
        finals.append(final)
    return (out, torch.cat(finals)) if output_final_state else out


def kda_loop_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, scale: float | None = None,
    initial_state: torch.Tensor | None = None, output_final_state: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The recurrence in float64. q, k, v, g: [B, T, H, D]; beta: [B, T, H]; ``initial_state``
    [B, H, D, D] -> o [B, T, H, D] float32 (and the final state [B, H, D, D] float32 when
    ``output_final_state``).

    S_t = diag(exp(g_t)) S_{t-1};  S_t += beta_t k_t (v_t - S_t^T k_t)^T;  o_t = scale S_t^T q_t.
    """
    _check(q, k, v, g, beta)
    batch, seq, heads, dim = q.shape
    _check_state(q, initial_state, batch)
    scale = dim**-0.5 if scale is None else float(scale)
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    state = initial_state.double().clone() if initial_state is not None else q.new_zeros(batch, heads, dim, dim)
    out = q.new_empty(batch, seq, heads, dim)
    for t in range(seq):
        state = state * g[:, t].exp()[..., None]
        error = v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], state)
        state = state + torch.einsum("bhk,bhv->bhkv", beta[:, t, :, None] * k[:, t], error)
        out[:, t] = scale * torch.einsum("bhk,bhkv->bhv", q[:, t], state)
    return (out.float(), state.float()) if output_final_state else out.float()


# Bytes of the [chunks, C, C, D] decay tensor the chunked form builds at once (float64).
SLAB_BYTES = 1 << 29
# Heads are independent: above this many values per float64 copy of q, the chunked form runs on
# groups of heads, so its working set (about a dozen such copies) stays near 2 GB. Whole, the
# bench shape (1, 32768, 32, 128) peaked over 12 GB per referee, and four judgements at once ran
# an H200 out of memory.
HEAD_GROUP_VALUES = 1 << 24


def kda_chunked_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    chunk: int = 32,
    slab_bytes: int = SLAB_BYTES,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The chunkwise closed form in float64, same signature as ``kda_loop_reference`` plus
    ``chunk`` (tokens per chunk) and ``slab_bytes`` (memory for the decay tensor at once).

    Per chunk with in-chunk cumulative gates G (G_r = sum of g over chunk tokens <= r):
      A_kk[r, i] = beta_r sum_d k_r k_i exp(G_r - G_i), i < r;  M = (I + A_kk)^-1
      W = M (beta exp(G) k),  U = M (beta v),  V' = U - W S
      O = scale (exp(G) q) S + A_qk V',  A_qk[r, i] = scale sum_d q_r k_i exp(G_r - G_i), i <= r
      S <- diag(exp(G_last)) S + (exp(G_last - G) k)^T V'
    Every exponent is <= 0 for log-decays g <= 0 (i <= r; G <= 0; G_last <= G), so nothing
    overflows however strong the decay, and no anchor is needed: what underflows is below
    float64's resolution of the result. Everything but the state is computed for all chunks at
    once (in slabs of chunks); only the state scan is sequential, T / chunk small steps.
    """
    _check(q, k, v, g, beta)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    batch, seq, heads, dim = q.shape
    _check_state(q, initial_state, batch)
    scale = dim**-0.5 if scale is None else float(scale)
    group = max(1, HEAD_GROUP_VALUES // max(1, batch * seq * dim))
    if heads > group:
        outs, finals = [], []
        for first in range(0, heads, group):
            part = slice(first, min(first + group, heads))
            state = initial_state[:, part] if initial_state is not None else None
            found = kda_chunked_reference(q[:, :, part], k[:, :, part], v[:, :, part], g[:, :, part],
                                          beta[:, :, part], scale, state, True, chunk, slab_bytes)
            outs.append(found[0])
            finals.append(found[1])
        out = torch.cat(outs, dim=2)
        return (out, torch.cat(finals, dim=1)) if output_final_state else out
    n_chunks = -(-seq // chunk)
    padded = n_chunks * chunk

    def blocks(x: torch.Tensor) -> torch.Tensor:
        # [B, T, H, ...] -> [B, H, NT, C, ...], zero-padded: a padded token has beta = 0 and
        # k = 0, so it changes no state, and g = 0 decays nothing.
        x = x.double().transpose(1, 2)
        x = torch.nn.functional.pad(x, (0, 0, 0, padded - seq)) if x.dim() == 4 else \
            torch.nn.functional.pad(x, (0, padded - seq))
        return x.reshape(batch, heads, n_chunks, chunk, *x.shape[3:])

    qc, kc, vc, gc, bc = blocks(q), blocks(k), blocks(v), blocks(g), blocks(beta)
    gcum = gc.cumsum(dim=3)  # [B, H, NT, C, D]
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    unit = torch.eye(chunk, dtype=torch.float64, device=q.device)
    w = torch.empty_like(kc)
    u = torch.empty_like(vc)
    a_qk = torch.empty(batch, heads, n_chunks, chunk, chunk, dtype=torch.float64, device=q.device)
    per_chunk = batch * heads * chunk * chunk * dim * 8
    step = max(1, slab_bytes // max(1, per_chunk))
    for first in range(0, n_chunks, step):
        part = slice(first, min(first + step, n_chunks))
        G, kp, qp, bp = gcum[:, :, part], kc[:, :, part], qc[:, :, part], bc[:, :, part]
        diff = G[..., :, None, :] - G[..., None, :, :]  # [.., r, i, D]
        decay = torch.where(lower[..., None], diff, torch.full_like(diff, -torch.inf)).exp()
        del diff
        k_decayed = kp[..., None, :, :] * decay  # [.., r, i, D]: k_i exp(G_r - G_i)
        del decay
        a_kk = (torch.einsum("...rd,...rid->...ri", kp, k_decayed) * bp[..., None]).tril(-1)
        a_qk[:, :, part] = scale * torch.einsum("...rd,...rid->...ri", qp, k_decayed)
        del k_decayed
        m = torch.linalg.solve_triangular(unit + a_kk, unit.expand_as(a_kk), upper=False, unitriangular=True)
        w[:, :, part] = m @ (bp[..., None] * G.exp() * kp)
        u[:, :, part] = m @ (bp[..., None] * vc[:, :, part])
    g_last = gcum[:, :, :, -1]  # [B, H, NT, D]
    q_decayed = scale * gcum.exp() * qc
    k_to_end = (g_last[..., None, :] - gcum).exp() * kc
    if initial_state is not None:
        state = initial_state.to(device=q.device, dtype=torch.float64).clone()
    else:
        state = q.new_zeros(batch, heads, dim, dim, dtype=torch.float64)
    out = torch.empty_like(vc)
    for n in range(n_chunks):
        v_new = u[:, :, n] - w[:, :, n] @ state
        out[:, :, n] = q_decayed[:, :, n] @ state + a_qk[:, :, n] @ v_new
        state = g_last[:, :, n, :, None].exp() * state + k_to_end[:, :, n].transpose(-1, -2) @ v_new
    out = out.reshape(batch, heads, padded, dim)[:, :, :seq].transpose(1, 2).float()
    return (out, state.float()) if output_final_state else out


def kda_state_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                        scale: float, initial_state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``kda_reference`` from an initial state, handing over the final state (problems ``kda``
    and ``kda-general``): q, k, v, g [B, T, H, D], beta [B, T, H], initial_state [B, H, D, D].
    Returns (o [B, T, H, D], final_state [B, H, D, D]), float32."""
    return kda_reference(q, k, v, g, beta, scale, initial_state, True)


def kda_varlen_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                         scale: float, initial_state: torch.Tensor,
                         cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``kda_reference`` from an initial state over packed sequences (problem ``kda-varlen``):
    q, k, v, g [1, T, H, D], beta [1, T, H], initial_state [N, H, D, D], cu_seqlens [N + 1].
    Returns (o [1, T, H, D], final_state [N, H, D, D]), float32."""
    return kda_reference(q, k, v, g, beta, scale, initial_state, True, cu_seqlens)
