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


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor) -> None:
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, D], got shape {tuple(q.shape)}")
    for name, x in (("k", k), ("v", v), ("g", g)):
        if x.shape != q.shape:
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)}, got {tuple(x.shape)}")
    if beta.shape != q.shape[:3]:
        raise ValueError(f"beta must be [B, T, H] = {tuple(q.shape[:3])}, got {tuple(beta.shape)}")


def kda_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    method: str = "auto",
) -> torch.Tensor:
    """The KDA forward in float64. q, k, v, g: [B, T, H, D]; beta: [B, T, H] -> o [B, T, H, D] float32.

    ``method``: "loop" is the token-by-token recurrence (``kda_loop_reference``), "chunked" the
    chunkwise closed form (``kda_chunked_reference``); "auto" takes the loop on the CPU (small
    shapes, the most obviously right form) and the chunked form on a GPU, where the loop is
    launch-bound (7.3 s at (1, 32768, 32, 128) on an H200). Tests check that both agree.
    """
    if method == "auto":
        method = "chunked" if q.is_cuda else "loop"
    if method == "loop":
        return kda_loop_reference(q, k, v, g, beta, scale)
    if method == "chunked":
        return kda_chunked_reference(q, k, v, g, beta, scale)
    raise ValueError(f"method must be 'auto', 'loop' or 'chunked', got {method!r}")


def kda_loop_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """The recurrence in float64. q, k, v, g: [B, T, H, D]; beta: [B, T, H] -> o [B, T, H, D] float32.

    S_t = diag(exp(g_t)) S_{t-1};  S_t += beta_t k_t (v_t - S_t^T k_t)^T;  o_t = scale S_t^T q_t.
    """
    _check(q, k, v, g, beta)
    batch, seq, heads, dim = q.shape
    scale = dim**-0.5 if scale is None else float(scale)
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    state = q.new_zeros(batch, heads, dim, dim)
    out = q.new_empty(batch, seq, heads, dim)
    for t in range(seq):
        state = state * g[:, t].exp()[..., None]
        error = v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], state)
        state = state + torch.einsum("bhk,bhv->bhkv", beta[:, t, :, None] * k[:, t], error)
        out[:, t] = scale * torch.einsum("bhk,bhkv->bhv", q[:, t], state)
    return out.float()


# Bytes of the [chunks, C, C, D] decay tensor the chunked form builds at once (float64).
SLAB_BYTES = 1 << 29


def kda_chunked_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    chunk: int = 32,
    slab_bytes: int = SLAB_BYTES,
) -> torch.Tensor:
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
    scale = dim**-0.5 if scale is None else float(scale)
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
    state = q.new_zeros(batch, heads, dim, dim, dtype=torch.float64)
    out = torch.empty_like(vc)
    for n in range(n_chunks):
        v_new = u[:, :, n] - w[:, :, n] @ state
        out[:, :, n] = q_decayed[:, :, n] @ state + a_qk[:, :, n] @ v_new
        state = g_last[:, :, n, :, None].exp() * state + k_to_end[:, :, n].transpose(-1, -2) @ v_new
    return out.reshape(batch, heads, padded, dim)[:, :, :seq].transpose(1, 2).float()
