"""Two independent float64 formulations of the KDA forward.

``kda_reference`` is the token-by-token recurrence: obviously right, slow, the judge's
reference. ``kda_chunked_reference`` is the chunkwise closed form (WY/UT representation with
a triangular solve), written from the math in the Kimi Linear report; tests check that the
two agree, which checks the math our Triton kernel implements.
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


def kda_chunked_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    chunk: int = 16,
) -> torch.Tensor:
    """The chunkwise closed form in float64, same signature as ``kda_reference`` plus ``chunk``.

    Per chunk with in-chunk cumulative gates G (G_r = sum of g over chunk tokens <= r):
      A_kk[r, i] = beta_r sum_d k_r k_i exp(G_r - G_i), i < r;  M = (I + A_kk)^-1
      W = M (beta exp(G) k),  U = M (beta v),  V' = U - W S
      O = scale (exp(G) q) S + A_qk V',  A_qk[r, i] = scale sum_d q_r k_i exp(G_r - G_i), i <= r
      S <- diag(exp(G_last)) S + (exp(G_last - G) k)^T V'
    Exponents of i <= r are <= 0, so float64 needs no anchor here.
    """
    _check(q, k, v, g, beta)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    batch, seq, heads, dim = q.shape
    scale = dim**-0.5 if scale is None else float(scale)
    # [B, H, T, D] so that the matrix algebra reads naturally.
    q, k, v, g = (x.double().transpose(1, 2) for x in (q, k, v, g))
    beta = beta.double().transpose(1, 2)
    state = q.new_zeros(batch, heads, dim, dim)
    out = q.new_empty(batch, heads, seq, dim)
    for start in range(0, seq, chunk):
        stop = min(start + chunk, seq)
        n = stop - start
        qc, kc, vc, bc = q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop], beta[:, :, start:stop]
        gcum = g[:, :, start:stop].cumsum(dim=2)
        # decay[r, i, d] = exp(G_r - G_i), kept only for i <= r
        diff = gcum[:, :, :, None, :] - gcum[:, :, None, :, :]
        lower = torch.ones(n, n, dtype=torch.bool).tril()
        decay = torch.where(lower[..., None], diff, torch.full_like(diff, -torch.inf)).exp()
        a_kk = torch.einsum("bhrd,bhid,bhrid->bhri", kc, kc, decay) * bc[..., None]
        a_kk = a_kk.tril(-1)
        a_qk = scale * torch.einsum("bhrd,bhid,bhrid->bhri", qc, kc, decay)
        unit = torch.eye(n, dtype=q.dtype)
        m = torch.linalg.solve_triangular(unit + a_kk, unit.expand_as(a_kk), upper=False, unitriangular=True)
        w = m @ (bc[..., None] * gcum.exp() * kc)
        u = m @ (bc[..., None] * vc)
        v_new = u - w @ state
        out[:, :, start:stop] = scale * (gcum.exp() * qc) @ state + a_qk @ v_new
        g_last = gcum[:, :, -1]
        k_decayed = (g_last[:, :, None, :] - gcum).exp() * kc
        state = g_last.exp()[..., None] * state + k_decayed.transpose(-1, -2) @ v_new
    return out.transpose(1, 2).float()
