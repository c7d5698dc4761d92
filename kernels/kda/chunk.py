"""KDA forward in Triton: a chunk-parallel preparation kernel and a fused state scan.

The chunkwise form (Kimi Linear report, Eq. 2-9). Per chunk of BT tokens with in-chunk
cumulative log-decay G (G_r = g_0 + ... + g_r, a vector over the D key channels):

    A_kk[r, i] = beta_r sum_d k_r k_i e^(G_r - G_i)   (i < r),   M = (I + A_kk)^-1
    A_qk[r, i] = scale sum_d q_r k_i e^(G_r - G_i)    (i <= r)
    W = M (beta e^G k),   U = M (beta v)
    V' = U - W S,   O = scale (e^G q) S + A_qk V',   S <- diag(e^G_last) S + (e^(G_last - G) k)^T V'

1. The preparation, all chunks in parallel: G, A_qk, the triangular inverse M, W, U, and the
   decayed q and k the scan needs. Two variants (``prep_variant``):
   - "flat": one program per (chunk, batch x head) holds A_kk, A_qk, M and the W/U tiles at
     once, in two passes. ``_prepare_flat_kernel`` factors the diagonal blocks (141 registers
     on an H200, Triton 3.6) and flags the chunks whose span passes SAFE_SPAN, stopping after
     their first channel tile where it can; ``_prepare_exact_kernel`` redoes only those, with
     exact diagonal blocks (240 registers). With both in one kernel the fast path had 255
     registers and spilled, and the whole forward was 12 % slower on bounded gates.
   - "split": ``_intra_kernel`` per (chunk, batch x head) writes A_qk and M (fp32), then
     ``_wy_kernel`` per (chunk, batch x head, channel tile) writes W, U, qg, kg: each kernel
     holds half as much, and the second has D / BK times the programs.
   - "subchunk": ``_subchunk_kernel`` per (chunk, batch x head, sub-chunk of 16) writes its row
     block of A_qk and of a block solve [P | D^-1] (16 x 16 inverses only; no [BT, BT] tile),
     then ``_wy_kernel`` solves by blocks (``_apply_inverse``): the split variant's work in
     register-light programs, BT / 16 times as many, for a preparation that is not latency-bound.
2. ``_scan_kernel``, one program per (value tile, batch x head), sequential over chunks:
   the state S stays in registers in fp32 and the output is written in the same loop, so
   the per-chunk states never go to memory.
   With ``scan_segments`` (a count, or "auto" from the shape) each equal-length sequence is cut
   into segments: their state maps in parallel, the state entering each segment, then their
   outputs in parallel (``_scan_in_segments``): for few sequences x heads, where one program
   per value tile leaves most SMs idle.

Numerical safety. e^(G_r - G_i) is split around an anchor a at or before i, within
sub-chunks of BC = 16 tokens: e^(G_r - G_a) e^(G_a - G_i). For keys before the query's
sub-chunk, a lies in or just before that sub-chunk and after the key, so both factors are
<= 1. Inside a sub-chunk the key factor is at most e^span, span the sub-chunk's decay (at most
16 x 5 = 80 for gates >= -5), inside fp32. Where a span exceeds ``SAFE_SPAN`` (unbounded
gates: masked gates, strong decay, the Kimi model's -exp(A_log) softplus(.) gates), the
diagonal blocks are formed by halving (``_exact_diagonal_blocks``; the flat variant's exact
pass for the whole chunk, the split variant per tile): each
pair anchored where its two tokens first fall into different halves, every factor <= 1; four
more products per tile, exact, never inf. Everything else (off-diagonal blocks, W, U, the scan)
only ever takes e^x with x <= 0. An anchor never lies after the query, so future tokens
cannot reach earlier outputs. The flat kernel anchors at each sub-chunk's first token, the
split one just before it.

The inverse: M = (I + N)(I + N^2)(I + N^4)... with N = -A_kk strictly lower (nilpotent:
N^BT = 0), log2(BT) - 1 pairs of products (``_unit_lower_inverse``).

The host code only allocates and launches. Packed sequences (FLA's ``cu_seqlens``) reach the
kernels as chunk tables built in ``kernels/kda/varlen.py``, outside this file (a candidate).
"""

import torch
import triton
import triton.language as tl

# The knobs of the search space (kernels/kda/space.py rewrites this literal).
CONFIG = {
    "prep_variant": "flat",
    "chunk": 32,
    "prep_block_k": 16,
    "prep_num_warps": 2,
    "prep_num_stages": 1,
    "prep_precision": "tf32",
    "wy_block_k": 64,
    "wy_num_warps": 4,
    "inter_dtype": "input",
    "scan_block_v": 32,
    "scan_num_warps": 4,
    "scan_num_stages": 3,
    "scan_precision": "tf32",
    "scan_segments": 1,
}

SUB_CHUNK = 16
LOG2_SUB_CHUNK = tl.constexpr(4)  # the halving levels of ``_exact_diagonal_blocks``
# The largest in-sub-chunk decay span (nats) the factored diagonal blocks take: e^84 = 3.0e36 and
# e^-84 = 3.3e-37 are normal fp32 numbers. Gates >= -5 span at most 80 (16 steps); beyond it a
# chunk's tile takes the exact halving form (``_exact_diagonal_blocks``), decided per tile on
# the GPU: no host synchronisation, no silent inf.
SAFE_SPAN = tl.constexpr(84.0)  # a global a jitted function reads must be a constexpr instance
# The split preparation centres its factors: e^(+-SAFE_SPAN / 2) (``_intra_kernel``).
ANCHOR_SHIFT = tl.constexpr(42.0)
# Channels per tile of the subchunk preparation's exact diagonal blocks (``_subchunk_kernel``).
EXACT_BLOCK_K = tl.constexpr(16)


@triton.jit
def _locate_chunk(chunk_seq_ptr, chunk_local_ptr, cu_ptr, T, NTS, H, IS_VARLEN: tl.constexpr):
    """Which sequence the program's chunk belongs to and where it lies: (chunk index i_c over all
    sequences, head i_h, chunk index in its sequence i_t, first token row bos, sequence length)."""
    i_c = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_t, bos, seq_len = _chunk_position(i_c, chunk_seq_ptr, chunk_local_ptr, cu_ptr, T, NTS, IS_VARLEN)
    return i_c, i_h, i_t, bos, seq_len


@triton.jit
def _chunk_position(i_c, chunk_seq_ptr, chunk_local_ptr, cu_ptr, T, NTS, IS_VARLEN: tl.constexpr):
    """Chunk i_c (int64, over all sequences): its index in its sequence i_t, the sequence's first
    token row bos and its length."""
    if IS_VARLEN:
        i_n = tl.load(chunk_seq_ptr + i_c).to(tl.int64)
        i_t = tl.load(chunk_local_ptr + i_c).to(tl.int64)
        bos = tl.load(cu_ptr + i_n).to(tl.int64)
        seq_len = tl.load(cu_ptr + i_n + 1).to(tl.int64) - bos
    else:
        i_n = i_c // NTS
        i_t = i_c % NTS
        bos = i_n * T
        seq_len = T + 0 * i_n
    return i_t, bos, seq_len


# Lengths and head counts vary per call: not specialized, so one compile serves every shape.
@triton.jit(do_not_specialize=["T", "NT", "NTS", "H"])
def _intra_kernel(
    q_ptr, k_ptr, g_ptr, beta_ptr, minv_ptr, aqk_ptr,
    cu_ptr, chunk_seq_ptr, chunk_local_ptr,
    scale, T, NT, NTS, H,
    D: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, NC: tl.constexpr,
    LOG2_BT: tl.constexpr, PRECISION: tl.constexpr, IS_VARLEN: tl.constexpr,
):
    """The split preparation's first kernel: A_qk and M = (I + A_kk)^-1 of one chunk, both to
    memory (M in fp32, for ``_wy_kernel``). One anchor per sub-chunk n, a_n = G just before it
    (0 for the first) less ANCHOR_SHIFT; the queries of sub-chunk n meet every key up to the end
    of n. With span <= SAFE_SPAN, queries take e^(G_r - a_n) and keys of n e^(a_n - G_i), both
    within e^(+-SAFE_SPAN / 2), so neither overflows nor underflows; keys before n take at most
    e^-ANCHOR_SHIFT (where one underflows, the term it belongs to is below e^-45). The shift is
    a constant, not the sub-chunk's own decay: an anchor from later gates would let them reach
    earlier outputs through rounding. The NC anchors are stacked along the contraction
    (``_anchored_products``): one [BT, NC x BK] @ [NC x BK, BT] product per channel tile for
    A_qk and one for A_kk. Whether the factored diagonal blocks are exact is decided once per
    chunk, from its largest span; a chunk past SAFE_SPAN is recomputed with exact diagonal
    blocks (slower; unbounded gates only)."""
    i_c, i_h, i_t, bos, seq_len = _locate_chunk(chunk_seq_ptr, chunk_local_ptr, cu_ptr, T, NTS, H, IS_VARLEN)
    in_base = (bos * H + i_h) * D
    chunk_row0 = (i_h * NT + i_c) * BT
    r2 = tl.arange(0, BT)[:, None]
    c2 = tl.arange(0, BT)[None, :]
    rows2 = i_t * BT + r2
    valid2 = rows2 < seq_len
    a_kk = tl.zeros([BT, BT], dtype=tl.float32)
    a_qk = tl.zeros([BT, BT], dtype=tl.float32)
    spans = tl.zeros([BT, BK], dtype=tl.float32)  # running elementwise maximum over channel tiles
    for kd in range(0, D, BK):
        a_qk, a_kk, spans = _anchored_products(
            q_ptr, k_ptr, g_ptr, in_base + rows2 * H * D + kd + tl.arange(0, BK)[None, :],
            valid2 & (kd + tl.arange(0, BK)[None, :] < D), r2, scale, a_qk, a_kk, spans,
            BK, BT, BC, NC, False, PRECISION)
    if tl.max(tl.max(spans, axis=1), axis=0) > SAFE_SPAN:
        # Unbounded gates: off-diagonal blocks as before (their factors are <= 1 whatever the
        # gates), diagonal blocks by halving (``_exact_diagonal_blocks``): factors <= 1 too.
        a_kk = tl.zeros([BT, BT], dtype=tl.float32)
        a_qk = tl.zeros([BT, BT], dtype=tl.float32)
        for kd in range(0, D, BK):
            d2 = kd + tl.arange(0, BK)[None, :]
            offs2 = in_base + rows2 * H * D + d2
            load2 = valid2 & (d2 < D)
            a_qk, a_kk, spans = _anchored_products(
                q_ptr, k_ptr, g_ptr, offs2, load2, r2, scale, a_qk, a_kk, spans, BK, BT, BC, NC, True, PRECISION)
            a_qk, a_kk = _exact_diagonal_blocks(
                tl.load(q_ptr + offs2, mask=load2, other=0.0).to(tl.float32),
                tl.load(k_ptr + offs2, mask=load2, other=0.0).to(tl.float32),
                tl.load(g_ptr + offs2, mask=load2, other=0.0).to(tl.float32),
                r2, c2, scale, a_qk, a_kk, BT, BK, LOG2_SUB_CHUNK, PRECISION)

    b2 = tl.load(beta_ptr + bos * H + i_h + rows2 * H, mask=valid2, other=0.0).to(tl.float32)  # [BT, 1]
    tile = (chunk_row0 + r2) * BT + c2
    tl.store(aqk_ptr + tile, tl.where(c2 <= r2, a_qk, 0.0).to(aqk_ptr.dtype.element_ty))
    tl.store(minv_ptr + tile, _unit_lower_inverse(tl.where(c2 < r2, a_kk * b2, 0.0), r2, c2, LOG2_BT, PRECISION))


@triton.jit
def _anchored_products(
    q_ptr, k_ptr, g_ptr, offs2, load2, r2, scale, a_qk, a_kk, spans,
    BK: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, NC: tl.constexpr,
    OFF_DIAGONAL_ONLY: tl.constexpr, PRECISION: tl.constexpr,
):
    """One channel tile's share of A_qk and A_kk (``_intra_kernel``). Slot n of the stacked
    operands holds the queries (keys) of sub-chunk n scaled to anchor n, other rows zero, and
    every key up to the end of n (the start of n when OFF_DIAGONAL_ONLY) scaled from anchor n:
    the contraction over NC x BK sums each anchor's product. Returns the accumulators and the
    running maximum of each row's decay since its anchor."""
    block_r = r2 // BC
    g2 = tl.load(g_ptr + offs2, mask=load2, other=0.0).to(tl.float32)
    G2 = tl.cumsum(g2, axis=0)
    a1 = tl.sum(tl.where(r2 < BC, g2, 0.0), axis=0)[None, :]
    a2 = tl.sum(tl.where(r2 < 2 * BC, g2, 0.0), axis=0)[None, :]
    a3 = tl.sum(tl.where(r2 < 3 * BC, g2, 0.0), axis=0)[None, :]
    G_anchor = tl.where(block_r == 1, a1, tl.where(block_r == 2, a2, tl.where(block_r == 3, a3, 0.0)))
    spans = tl.maximum(spans, G_anchor - G2)
    to_anchor = tl.exp(G2 - G_anchor + ANCHOR_SHIFT)
    q_t = tl.load(q_ptr + offs2, mask=load2, other=0.0).to(tl.float32) * to_anchor * scale
    k2 = tl.load(k_ptr + offs2, mask=load2, other=0.0).to(tl.float32)
    k_t = k2 * to_anchor
    last: tl.constexpr = 0 if OFF_DIAGONAL_ONLY else 1
    # Keys past the slot's sub-chunk are zeroed (the minimum keeps the discarded factor finite).
    kh0 = tl.where(r2 < last * BC, k2 * tl.exp(tl.minimum(-ANCHOR_SHIFT - G2, ANCHOR_SHIFT)), 0.0)
    if NC == 1:
        q_s = q_t
        k_s = k_t
        kh_s = kh0
    else:
        kh1 = tl.where(r2 < (1 + last) * BC, k2 * tl.exp(tl.minimum(a1 - ANCHOR_SHIFT - G2, ANCHOR_SHIFT)), 0.0)
        if NC == 2:
            q_s = tl.reshape(tl.join(tl.where(block_r == 0, q_t, 0.0), tl.where(block_r == 1, q_t, 0.0)), [BT, 2 * BK])
            k_s = tl.reshape(tl.join(tl.where(block_r == 0, k_t, 0.0), tl.where(block_r == 1, k_t, 0.0)), [BT, 2 * BK])
            kh_s = tl.reshape(tl.join(kh0, kh1), [BT, 2 * BK])
        else:
            kh2 = tl.where(r2 < (2 + last) * BC, k2 * tl.exp(tl.minimum(a2 - ANCHOR_SHIFT - G2, ANCHOR_SHIFT)), 0.0)
            kh3 = tl.where(r2 < (3 + last) * BC, k2 * tl.exp(tl.minimum(a3 - ANCHOR_SHIFT - G2, ANCHOR_SHIFT)), 0.0)
            q_s = tl.reshape(tl.join(tl.join(tl.where(block_r == 0, q_t, 0.0), tl.where(block_r == 1, q_t, 0.0)),
                                     tl.join(tl.where(block_r == 2, q_t, 0.0), tl.where(block_r == 3, q_t, 0.0))),
                             [BT, 4 * BK])
            k_s = tl.reshape(tl.join(tl.join(tl.where(block_r == 0, k_t, 0.0), tl.where(block_r == 1, k_t, 0.0)),
                                     tl.join(tl.where(block_r == 2, k_t, 0.0), tl.where(block_r == 3, k_t, 0.0))),
                             [BT, 4 * BK])
            kh_s = tl.reshape(tl.join(tl.join(kh0, kh1), tl.join(kh2, kh3)), [BT, 4 * BK])
    a_qk = tl.dot(q_s, tl.trans(kh_s), acc=a_qk, input_precision=PRECISION)
    a_kk = tl.dot(k_s, tl.trans(kh_s), acc=a_kk, input_precision=PRECISION)
    return a_qk, a_kk, spans


@triton.jit
def _exact_diagonal_blocks(q2, k2, g2, r2, c2, scale, a_qk, a_kk,
                           BT: tl.constexpr, BK: tl.constexpr, LOG2_BC: tl.constexpr, PRECISION: tl.constexpr):
    """Adds one channel tile's diagonal BC x BC blocks (BC = 2^LOG2_BC) to A_qk [BT, BT] and
    A_kk [BT, BT], exact for any gates: q2, k2, g2 [BT, BK] fp32 (g2 the raw log-decays).

    A pair r > i first falls into different halves of a block of 2b tokens at one level b
    (b = 1, 2, ..., BC / 2). Anchored at the last token m of the left half, e^(G_r - G_i) =
    e^(G_r - G_m) e^(G_m - G_i): the query's factor sums the gates from the right half's start
    to r, the key's those after i to the end of its half, both <= 0, so neither factor
    overflows and one that underflows belongs to a term below e^-87. One masked product per
    level and matrix: 2 log2(BC) products in place of BC^2 exponentials per row."""
    # r == i: no decay (A_kk's diagonal is never read: M inverts I + strictly lower A_kk).
    a_qk += tl.where(r2 == c2, tl.sum(q2 * k2, axis=1)[:, None] * scale, 0.0)
    for level in tl.static_range(LOG2_BC):
        # Halves of b = 2^level tokens (shifts: a constexpr cannot be rebound in the loop).
        halves = tl.reshape(g2, [BT >> level, 1 << level, BK])
        # From the start of the row's half to the row, and from the row to the half's end.
        since_start = tl.reshape(tl.cumsum(halves, axis=1), [BT, BK])
        to_end = tl.reshape(tl.cumsum(halves, axis=1, reverse=True), [BT, BK]) - g2
        right = ((r2 >> level) & 1) == 1  # [BT, 1]
        to_anchor = tl.exp(since_start)
        q_f = tl.where(right, q2 * to_anchor * scale, 0.0)
        k_f = tl.where(right, k2 * to_anchor, 0.0)
        k_l = tl.where(right, 0.0, k2 * tl.exp(to_end))
        pair = (r2 >> (level + 1)) == (c2 >> (level + 1))
        a_qk += tl.where(pair, tl.dot(q_f, tl.trans(k_l), input_precision=PRECISION), 0.0)
        a_kk += tl.where(pair, tl.dot(k_f, tl.trans(k_l), input_precision=PRECISION), 0.0)
    return a_qk, a_kk


@triton.jit
def _unit_lower_inverse(a, r2, c2, LOG2_BT: tl.constexpr, PRECISION: tl.constexpr):
    """(I + a)^-1 for strictly lower a [BT, BT]: with N = -a, (I + N)(I + N^2)(I + N^4)...,
    exact because N^BT = 0; the factors commute."""
    power = -a
    m_inv = tl.where(c2 == r2, 1.0, 0.0) + power
    for _ in tl.static_range(1, LOG2_BT):
        power = tl.dot(power, power, input_precision=PRECISION)
        m_inv = m_inv + tl.dot(m_inv, power, input_precision=PRECISION)
    return m_inv


@triton.jit(do_not_specialize=["T", "NT", "NTS", "H"])
def _subchunk_kernel(
    q_ptr, k_ptr, g_ptr, beta_ptr, solve_ptr, aqk_ptr,
    cu_ptr, chunk_seq_ptr, chunk_local_ptr,
    scale, T, NT, NTS, H,
    D: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, NC: tl.constexpr,
    PRECISION: tl.constexpr, IS_VARLEN: tl.constexpr,
):
    """The subchunk preparation's first kernel, one program per (chunk, head, sub-chunk n of BC
    tokens): row block n of A_qk (to memory, final) and of the block solve the WY kernel applies,
    [P_n | D_n^-1 | 0] in fp32: D_n = I + beta A_kk's diagonal block (its inverse by
    ``_unit_lower_inverse`` on [BC, BC]), P_n = -D_n^-1 beta A_kk[n, :n] (the rows' keys before
    the sub-chunk). No [BT, BT] tile: each product is [BC, BK] @ [BK, BT] or [BK, BC], NC times
    the programs of ``_intra_kernel`` and no NC-fold redundant contraction. Everything anchors at
    the sub-chunk's first token (a0 its own gate): queries take e^(G_r - G_0) <= 1, earlier keys
    e^(G_0 - G_i) <= 1 (a suffix sum of gates, no difference of large cumulative sums), keys of
    the sub-chunk e^(G_0 - G_i) <= e^span; rows whose span passes SAFE_SPAN take the diagonal
    block by halving (``_exact_diagonal_blocks``), decided per row. The anchor is at or before
    every query, and no row's choice looks past it: causal."""
    # The NC programs of a chunk are neighbours in the grid (dimension 0 is the fastest): the
    # earlier keys that sub-chunk n re-reads were just read by sub-chunks < n, from L2.
    i_c = (tl.program_id(0) // NC).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    i_t, bos, seq_len = _chunk_position(i_c, chunk_seq_ptr, chunk_local_ptr, cu_ptr, T, NTS, IS_VARLEN)
    n0 = (tl.program_id(0) % NC) * BC  # the sub-chunk's first row in the chunk
    in_base = (bos * H + i_h) * D
    rs = tl.arange(0, BC)[:, None]
    cs = tl.arange(0, BC)[None, :]
    r2 = tl.arange(0, BT)[:, None]
    c2 = tl.arange(0, BT)[None, :]
    sub_valid = i_t * BT + n0 + rs < seq_len  # [BC, 1]
    before = (r2 < n0) & (i_t * BT + r2 < seq_len)  # [BT, 1]: keys before the sub-chunk
    off_qk = tl.zeros([BC, BT], dtype=tl.float32)
    off_kk = tl.zeros([BC, BT], dtype=tl.float32)
    d_qk = tl.zeros([BC, BC], dtype=tl.float32)
    d_kk = tl.zeros([BC, BC], dtype=tl.float32)
    span = tl.zeros([BC, BK], dtype=tl.float32)
    for kd in range(0, D, BK):
        d2 = kd + tl.arange(0, BK)[None, :]
        sub_offs = in_base + (i_t * BT + n0 + rs) * H * D + d2
        sub_load = sub_valid & (d2 < D)
        g_s = tl.load(g_ptr + sub_offs, mask=sub_load, other=0.0).to(tl.float32)
        L_s = tl.cumsum(g_s, axis=0)
        a0 = tl.sum(tl.where(rs == 0, g_s, 0.0), axis=0)[None, :]  # = L_s's first row
        span = tl.maximum(span, a0 - L_s)
        to_anchor = tl.exp(L_s - a0)  # <= 1
        q_t = tl.load(q_ptr + sub_offs, mask=sub_load, other=0.0).to(tl.float32) * to_anchor * scale
        k_s = tl.load(k_ptr + sub_offs, mask=sub_load, other=0.0).to(tl.float32)
        k_t = k_s * to_anchor
        # Inside the sub-chunk: >= 1, at most e^span (inf past it: then not used).
        k_hat = k_s * tl.exp(a0 - L_s)
        d_qk = tl.dot(q_t, tl.trans(k_hat), acc=d_qk, input_precision=PRECISION)
        d_kk = tl.dot(k_t, tl.trans(k_hat), acc=d_kk, input_precision=PRECISION)
        if NC > 1:
            b_offs = in_base + (i_t * BT + r2) * H * D + d2
            b_load = before & (d2 < D)
            g_b = tl.load(g_ptr + b_offs, mask=b_load, other=0.0).to(tl.float32)
            # G_0 - G_i = a0 + the gates after i up to the sub-chunk (rows from n0 on load 0).
            after_i = tl.cumsum(g_b, axis=0, reverse=True) - g_b
            k_b = tl.load(k_ptr + b_offs, mask=b_load, other=0.0).to(tl.float32) * tl.exp(a0 + after_i)
            off_qk = tl.dot(q_t, tl.trans(k_b), acc=off_qk, input_precision=PRECISION)
            off_kk = tl.dot(k_t, tl.trans(k_b), acc=off_kk, input_precision=PRECISION)
    d_qk, d_kk = _exact_rows_past_the_span(q_ptr, k_ptr, g_ptr, in_base + (i_t * BT + n0 + rs) * H * D, sub_valid,
                                           rs, cs, scale, tl.max(span, axis=1), d_qk, d_kk, D, BC, PRECISION)
    b_s = tl.load(beta_ptr + bos * H + i_h + (i_t * BT + n0 + rs) * H, mask=sub_valid, other=0.0).to(tl.float32)
    d_inv = _unit_lower_inverse(tl.where(cs < rs, d_kk * b_s, 0.0), rs, cs, LOG2_SUB_CHUNK, PRECISION)
    rows = (i_h * NT + i_c) * BT + n0 + rs
    # Three disjoint column ranges per row block: before n0, the diagonal block, after it (zeros).
    outside = (c2 < n0) | (c2 >= n0 + BC)
    tl.store(aqk_ptr + rows * BT + c2, tl.where(c2 < n0, off_qk, 0.0).to(aqk_ptr.dtype.element_ty), mask=outside)
    tl.store(aqk_ptr + rows * BT + n0 + cs, tl.where(cs <= rs, d_qk, 0.0).to(aqk_ptr.dtype.element_ty))
    p = -tl.dot(d_inv, off_kk * b_s, input_precision=PRECISION)  # [BC, BT], zero from n0 on
    tl.store(solve_ptr + rows * BT + c2, tl.where(c2 < n0, p, 0.0), mask=outside)
    tl.store(solve_ptr + rows * BT + n0 + cs, d_inv)


@triton.jit
def _exact_rows_past_the_span(q_ptr, k_ptr, g_ptr, row_offs, row_valid, rs, cs, scale, row_span, d_qk, d_kk,
                              D: tl.constexpr, BC: tl.constexpr, PRECISION: tl.constexpr):
    """``_subchunk_kernel``'s diagonal blocks d_qk, d_kk [BC, BC] with the rows whose span
    row_span [BC] passes SAFE_SPAN redone by halving (``_exact_diagonal_blocks``); row_offs
    [BC, 1] the rows' offsets in q, k, g. Row r's factored entries use keys up to r only, so
    they hold while the span up to r does (g <= 0: the span grows along the rows); a row's
    choice never depends on later tokens: causal to the last bit."""
    if tl.max(row_span, axis=0) > SAFE_SPAN:
        e_qk = tl.zeros([BC, BC], dtype=tl.float32)
        e_kk = tl.zeros([BC, BC], dtype=tl.float32)
        # Narrow channel tiles whatever the kernel's BK: the halving's 3D tiles at BK = 32 made
        # the whole kernel spill (255 registers, 72 B of stack on sm_90; 148 at BK = 16).
        for kd in range(0, D, EXACT_BLOCK_K):
            d2 = kd + tl.arange(0, EXACT_BLOCK_K)[None, :]
            offs = row_offs + d2
            load = row_valid & (d2 < D)
            e_qk, e_kk = _exact_diagonal_blocks(
                tl.load(q_ptr + offs, mask=load, other=0.0).to(tl.float32),
                tl.load(k_ptr + offs, mask=load, other=0.0).to(tl.float32),
                tl.load(g_ptr + offs, mask=load, other=0.0).to(tl.float32),
                rs, cs, scale, e_qk, e_kk, BC, EXACT_BLOCK_K, LOG2_SUB_CHUNK, PRECISION)
        d_qk = tl.where(row_span[:, None] > SAFE_SPAN, e_qk, d_qk)
        d_kk = tl.where(row_span[:, None] > SAFE_SPAN, e_kk, d_kk)
    return d_qk, d_kk


@triton.jit(do_not_specialize=["T", "NT", "NTS", "H"])
def _wy_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, minv_ptr,
    w_ptr, u_ptr, qg_ptr, kg_ptr, decay_ptr,
    cu_ptr, chunk_seq_ptr, chunk_local_ptr,
    scale, T, NT, NTS, H,
    D: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, PRECISION: tl.constexpr, IS_VARLEN: tl.constexpr,
    BC: tl.constexpr, BLOCK_SOLVE: tl.constexpr,
):
    """The split and subchunk preparations' second kernel, one program per (chunk, head, channel
    tile of BK): W, U and the decayed q and k the scan reads, from ``_intra_kernel``'s M or, with
    BLOCK_SOLVE, from ``_subchunk_kernel``'s block solve [P | D^-1] (``_apply_inverse``)."""
    if BLOCK_SOLVE:
        # Grid (channel tiles x chunks, heads): a chunk's tiles are neighbours, so its block solve
        # [BT, BT] fp32 is read from DRAM once and from L2 by the other tiles.
        NK: tl.constexpr = (D + BK - 1) // BK
        i_c = (tl.program_id(0) // NK).to(tl.int64)
        i_h = tl.program_id(1).to(tl.int64)
        i_t, bos, seq_len = _chunk_position(i_c, chunk_seq_ptr, chunk_local_ptr, cu_ptr, T, NTS, IS_VARLEN)
        kd = (tl.program_id(0) % NK) * BK
    else:
        i_c, i_h, i_t, bos, seq_len = _locate_chunk(chunk_seq_ptr, chunk_local_ptr, cu_ptr, T, NTS, H, IS_VARLEN)
        kd = tl.program_id(2) * BK
    chunk_row0 = (i_h * NT + i_c) * BT
    r2 = tl.arange(0, BT)[:, None]
    rows2 = i_t * BT + r2
    valid2 = rows2 < seq_len
    m_inv = tl.load(minv_ptr + (chunk_row0 + r2) * BT + tl.arange(0, BT)[None, :])
    b2 = tl.load(beta_ptr + bos * H + i_h + rows2 * H, mask=valid2, other=0.0).to(tl.float32)  # [BT, 1]
    _store_scan_inputs(
        m_inv, b2, q_ptr, k_ptr, v_ptr, g_ptr, w_ptr, u_ptr, qg_ptr, kg_ptr, decay_ptr,
        (bos * H + i_h) * D, chunk_row0, rows2, valid2, scale, i_h, i_c, NT, H, kd, kd + BK,
        D, BK, BT, PRECISION, BC, BLOCK_SOLVE,
    )


@triton.jit
def _store_scan_inputs(
    m_inv, b2, q_ptr, k_ptr, v_ptr, g_ptr, w_ptr, u_ptr, qg_ptr, kg_ptr, decay_ptr,
    in_base, chunk_row0, rows2, valid2, scale, i_h, i_c, NT, H, k_first, k_end,
    D: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, PRECISION: tl.constexpr,
    BC: tl.constexpr, BLOCK_SOLVE: tl.constexpr,
):
    """Over the channel tiles in [k_first, k_end): W = M (beta e^G k), U = M (beta v), and what
    the scan needs besides: scale e^G q, e^(G_last - G) k, e^G_last. Rows past T hold g = 0,
    so the last row's G is the last valid token's."""
    last2 = tl.arange(0, BT)[:, None] == BT - 1
    for kd in range(k_first, k_end, BK):
        d2 = kd + tl.arange(0, BK)[None, :]
        offs2 = in_base + rows2 * H * D + d2
        load2 = valid2 & (d2 < D)
        q2 = tl.load(q_ptr + offs2, mask=load2, other=0.0).to(tl.float32)
        k2 = tl.load(k_ptr + offs2, mask=load2, other=0.0).to(tl.float32)
        g2 = tl.load(g_ptr + offs2, mask=load2, other=0.0).to(tl.float32)
        v2 = tl.load(v_ptr + offs2, mask=load2, other=0.0).to(tl.float32)
        G2 = tl.cumsum(g2, axis=0)
        G_last = tl.sum(tl.where(last2, G2, 0.0), axis=0)  # [BK]
        decay2 = tl.exp(G2)
        w = _apply_inverse(m_inv, k2 * decay2 * b2, BT, BC, PRECISION, BLOCK_SOLVE)
        u = _apply_inverse(m_inv, v2 * b2, BT, BC, PRECISION, BLOCK_SOLVE)
        out2 = (chunk_row0 + tl.arange(0, BT)[:, None]) * D + d2
        d_ok = d2 < D
        tl.store(w_ptr + out2, w.to(w_ptr.dtype.element_ty), mask=d_ok)
        tl.store(u_ptr + out2, u.to(u_ptr.dtype.element_ty), mask=d_ok)
        tl.store(qg_ptr + out2, (q2 * decay2 * scale).to(qg_ptr.dtype.element_ty), mask=d_ok)
        tl.store(kg_ptr + out2, (k2 * tl.exp(G_last[None, :] - G2)).to(kg_ptr.dtype.element_ty), mask=d_ok)
        d1 = kd + tl.arange(0, BK)
        tl.store(decay_ptr + (i_h * NT + i_c) * D + d1, tl.exp(G_last), mask=d1 < D)


@triton.jit
def _apply_inverse(m, x, BT: tl.constexpr, BC: tl.constexpr, PRECISION: tl.constexpr, BLOCK_SOLVE: tl.constexpr):
    """(I + beta A_kk)^-1 x for x [BT, BK]. BLOCK_SOLVE False: m [BT, BT] is the inverse. True:
    m holds the block solve [P | D^-1] by sub-chunks of BC rows (``_subchunk_kernel``): with
    y = D^-1 x, the solution is the fixed point of X = y + P X. P is strictly lower by blocks,
    so BT / BC - 1 steps from X = y are exact (step s makes block s right): block forward
    substitution as [BT, BT] @ [BT, BK] products, the tensor cores' shape."""
    if BLOCK_SOLVE:
        rb = tl.arange(0, BT)[:, None] // BC
        cb = tl.arange(0, BT)[None, :] // BC
        y = tl.dot(tl.where(rb == cb, m, 0.0), x, input_precision=PRECISION)
        p = tl.where(cb < rb, m, 0.0)
        out = y
        for _ in tl.static_range(BT // BC - 1):
            out = y + tl.dot(p, out, input_precision=PRECISION)
        return out
    else:
        return tl.dot(m, x, input_precision=PRECISION)


@triton.jit(do_not_specialize=["T", "NT", "NTS", "H"])
def _prepare_flat_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr,
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr,
    cu_ptr, chunk_seq_ptr, chunk_local_ptr, exact_flags_ptr,
    scale, T, NT, NTS, H,
    D: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, NC: tl.constexpr,
    LOG2_BT: tl.constexpr, PRECISION: tl.constexpr, IS_VARLEN: tl.constexpr,
):
    """The flat preparation's first pass, one program per (chunk, head): the factored diagonal
    blocks. A chunk whose decay span passes SAFE_SPAN stores nothing and is flagged
    (exact_flags[i_c x H + i_h] = 1, else 0) for ``_prepare_exact_kernel``."""
    i_c = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    exceeded = _prepare_flat_chunk(
        q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr,
        cu_ptr, chunk_seq_ptr, chunk_local_ptr, i_c, i_h, scale, T, NT, NTS, H,
        D, BK, BT, BC, NC, LOG2_BT, PRECISION, IS_VARLEN, False)
    tl.store(exact_flags_ptr + i_c * H + i_h, exceeded)


@triton.jit(do_not_specialize=["T", "NT", "NTS", "H"])
def _prepare_exact_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr,
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr,
    cu_ptr, chunk_seq_ptr, chunk_local_ptr, exact_flags_ptr,
    scale, T, NT, NTS, H,
    D: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, NC: tl.constexpr,
    LOG2_BT: tl.constexpr, PRECISION: tl.constexpr, IS_VARLEN: tl.constexpr,
):
    """The flat preparation's second pass, on the first one's grid: the chunks it flagged, with
    exact diagonal blocks (``_exact_diagonal_blocks``). With bounded gates nothing is flagged
    and every program returns after one load. (A fixed grid working through a queue of the
    flagged chunks spilled registers and was 5 % slower on Kimi gates.)"""
    i_c = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    if tl.load(exact_flags_ptr + i_c * H + i_h) != 0:
        _prepare_flat_chunk(
            q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr,
            cu_ptr, chunk_seq_ptr, chunk_local_ptr, i_c, i_h, scale, T, NT, NTS, H,
            D, BK, BT, BC, NC, LOG2_BT, PRECISION, IS_VARLEN, True)


@triton.jit
def _prepare_flat_chunk(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr,
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr,
    cu_ptr, chunk_seq_ptr, chunk_local_ptr, i_c, i_h,
    scale, T, NT, NTS, H,
    D: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, NC: tl.constexpr,
    LOG2_BT: tl.constexpr, PRECISION: tl.constexpr, IS_VARLEN: tl.constexpr, EXACT: tl.constexpr,
):
    """All the scan's inputs for chunk i_c of head i_h from 2D tiles only (``_flat_tile``), and
    M = (I + A)^-1 = prod_k (I + (-A)^(2^k)), exact because A^BT = 0.

    EXACT False: the diagonal blocks factored around each sub-chunk's first row (fast; exact
    while the span stays within SAFE_SPAN). Returns 1 where a channel tile's span passes it:
    then nothing is stored, and where the first tile already passes it (gates like the Kimi
    model's) the other tiles are skipped. EXACT True: the diagonal blocks by halving, exact for
    any gates; returns 0. Two kernels rather than one branch: the halving code in the same
    kernel held the fast path at 255 registers (141 without it on the H200) and cost 12 %
    of the whole forward on bounded gates."""
    i_t, bos, seq_len = _chunk_position(i_c, chunk_seq_ptr, chunk_local_ptr, cu_ptr, T, NTS, IS_VARLEN)
    in_base = (bos * H + i_h) * D
    chunk_row0 = (i_h * NT + i_c) * BT
    r2 = tl.arange(0, BT)[:, None]
    c2 = tl.arange(0, BT)[None, :]
    rows2 = i_t * BT + r2
    valid2 = rows2 < seq_len
    a_kk = tl.zeros([BT, BT], dtype=tl.float32)
    a_qk = tl.zeros([BT, BT], dtype=tl.float32)
    exceeded = tl.zeros([], dtype=tl.int32)
    a_qk, a_kk, exceeded = _flat_tile(q_ptr, k_ptr, g_ptr, in_base, H * D, rows2, valid2, r2, c2, 0, scale,
                                      a_qk, a_kk, exceeded, D, BK, BT, BC, NC, PRECISION, EXACT)
    # A loop bound, not a branch (a branch around the loop costs the fast path registers).
    for kd in range(BK, D - exceeded * (D - BK), BK):
        a_qk, a_kk, exceeded = _flat_tile(q_ptr, k_ptr, g_ptr, in_base, H * D, rows2, valid2, r2, c2, kd, scale,
                                          a_qk, a_kk, exceeded, D, BK, BT, BC, NC, PRECISION, EXACT)
    if exceeded == 0:
        b2 = tl.load(beta_ptr + bos * H + i_h + rows2 * H, mask=valid2, other=0.0).to(tl.float32)  # [BT, 1]
        a_qk = tl.where(c2 <= r2, a_qk, 0.0)
        tl.store(aqk_ptr + (chunk_row0 + r2) * BT + c2, a_qk.to(aqk_ptr.dtype.element_ty))
        m_inv = _unit_lower_inverse(tl.where(c2 < r2, a_kk * b2, 0.0), r2, c2, LOG2_BT, PRECISION)
        _store_scan_inputs(
            m_inv, b2, q_ptr, k_ptr, v_ptr, g_ptr, w_ptr, u_ptr, qg_ptr, kg_ptr, decay_ptr,
            in_base, chunk_row0, rows2, valid2, scale, i_h, i_c, NT, H, 0, D, D, BK, BT, PRECISION, BC, False,
        )
    return exceeded


@triton.jit
def _flat_tile(q_ptr, k_ptr, g_ptr, in_base, row_stride, rows2, valid2, r2, c2, kd, scale, a_qk, a_kk, exceeded,
               D: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, NC: tl.constexpr,
               PRECISION: tl.constexpr, EXACT: tl.constexpr):
    """Channels [kd, kd + BK)'s share of A_qk and A_kk [BT, BT]: each anchor its own
    [BT, BK] @ [BK, BT] product (NC-fold redundant work on the tensor cores instead of 3D and 4D
    layouts). Returns them and ``exceeded`` (EXACT False: raised to 1 where this tile's decay
    span inside a sub-chunk passes SAFE_SPAN; the products may then hold inf and are not used)."""
    block_r = r2 // BC
    block_c = c2 // BC
    d2 = kd + tl.arange(0, BK)[None, :]
    offs2 = in_base + rows2 * row_stride + d2
    load2 = valid2 & (d2 < D)
    q2 = tl.load(q_ptr + offs2, mask=load2, other=0.0).to(tl.float32)
    k2 = tl.load(k_ptr + offs2, mask=load2, other=0.0).to(tl.float32)
    g2 = tl.load(g_ptr + offs2, mask=load2, other=0.0).to(tl.float32)
    G2 = tl.cumsum(g2, axis=0)
    # Each row's anchor: the first row of its sub-chunk.
    G_anchor = tl.zeros([BT, BK], dtype=tl.float32)
    for n in tl.static_range(NC):
        G_anchor = tl.where(block_r == n, tl.sum(tl.where(r2 == n * BC, G2, 0.0), axis=0)[None, :], G_anchor)
    to_anchor = tl.exp(G2 - G_anchor)  # <= 1
    q_t = q2 * to_anchor * scale
    k_t = k2 * to_anchor
    if EXACT:
        # Diagonal blocks by halving: every factor <= 1, whatever the decay.
        a_qk, a_kk = _exact_diagonal_blocks(q2, k2, g2, r2, c2, scale, a_qk, a_kk, BT, BK, LOG2_SUB_CHUNK, PRECISION)
    else:
        # The largest decay span inside a sub-chunk: the factored diagonal blocks are exact only
        # while e^span and e^-span are normal fp32 numbers.
        exceeded = tl.maximum(exceeded, (tl.max(tl.max(G_anchor - G2, axis=1), axis=0) > SAFE_SPAN).to(tl.int32))
        k_hat = k2 * tl.exp(G_anchor - G2)  # >= 1, at most e^span
        same = block_r == block_c
        a_kk += tl.where(same, tl.dot(k_t, tl.trans(k_hat), input_precision=PRECISION), 0.0)
        a_qk += tl.where(same, tl.dot(q_t, tl.trans(k_hat), input_precision=PRECISION), 0.0)
    # Sub-chunk n against every earlier key, anchored at n's first row: factors <= 1.
    for n in tl.static_range(1, NC):
        anchor = tl.sum(tl.where(r2 == n * BC, G2, 0.0), axis=0)[None, :]
        # Rows at or after the anchor are masked out; the minimum keeps their (unused) factor finite.
        k_f = tl.where(r2 < n * BC, k2 * tl.exp(tl.minimum(anchor - G2, 0.0)), 0.0)
        rows_n = (block_r == n) & (c2 < n * BC)
        a_kk += tl.where(rows_n, tl.dot(k_t, tl.trans(k_f), input_precision=PRECISION), 0.0)
        a_qk += tl.where(rows_n, tl.dot(q_t, tl.trans(k_f), input_precision=PRECISION), 0.0)
    return a_qk, a_kk, exceeded


@triton.jit(do_not_specialize=["T", "NT", "NTS", "H"])
def _scan_kernel(
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr, o_ptr, h0_ptr, ht_ptr,
    cu_ptr, chunk_offsets_ptr,
    T, NT, NTS, H,
    D: tl.constexpr, DP: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    PRECISION: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_H0: tl.constexpr, STORE_HT: tl.constexpr,
):
    """One program per (value tile, sequence x head): the state [D, BV] in registers, sequential
    over the sequence's chunks; D is padded to DP (a power of two) with masked channels."""
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1).to(tl.int64)
    i_n = i_nh // H
    i_h = i_nh % H
    if IS_VARLEN:
        bos = tl.load(cu_ptr + i_n).to(tl.int64)
        seq_len = tl.load(cu_ptr + i_n + 1).to(tl.int64) - bos
        first = tl.load(chunk_offsets_ptr + i_n).to(tl.int64)
        count = (tl.load(chunk_offsets_ptr + i_n + 1).to(tl.int64) - first).to(tl.int32)
    else:
        bos = i_n * T
        seq_len = T + 0 * i_n
        first = i_n * NTS
        count = (NTS + 0 * i_n).to(tl.int32)
    dk = tl.arange(0, DP)
    dv = i_v * BV + tl.arange(0, BV)
    k_ok = dk < D
    v_ok = dv < D
    o_base = (bos * H + i_h) * D
    state_offs = ((i_n * H + i_h) * D + dk[:, None]) * D + dv[None, :]
    state_ok = k_ok[:, None] & v_ok[None, :]
    state = tl.zeros([DP, BV], dtype=tl.float32)
    if HAS_H0:
        state = tl.load(h0_ptr + state_offs, mask=state_ok, other=0.0).to(tl.float32)
    for j in range(count):
        state = _scan_step(w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr, o_ptr, state, first + j, j, i_h,
                           o_base, seq_len, dk, dv, k_ok, v_ok, NT, H, D, BT, PRECISION, True)
    if STORE_HT:
        tl.store(ht_ptr + state_offs, state, mask=state_ok)


@triton.jit
def _scan_step(w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr, o_ptr, state, i_c, j, i_h, o_base, seq_len,
               dk, dv, k_ok, v_ok, NT, H, D: tl.constexpr, BT: tl.constexpr, PRECISION: tl.constexpr,
               WRITE_O: tl.constexpr):
    """One chunk of the scan: the output rows of chunk i_c (the j-th of its sequence; WRITE_O)
    and the state [DP, BV] after it; U's columns where v_ok is False read as 0 (with v_ok all
    False, the chunk's map of the state alone, S -> (diag(e^G_last) - kg^T W) S)."""
    dot_dtype = w_ptr.dtype.element_ty
    rows = tl.arange(0, BT)
    row0 = (i_h * NT + i_c) * BT
    offs_k = (row0 + rows[:, None]) * D + dk[None, :]
    # The plain scan's load order (a reordering changed its sm_90 code and spills).
    w = tl.load(w_ptr + offs_k, mask=k_ok[None, :], other=0.0)  # [BT, DP]
    if WRITE_O:
        qg = tl.load(qg_ptr + offs_k, mask=k_ok[None, :], other=0.0)  # [BT, DP]
    kg = tl.load(kg_ptr + offs_k, mask=k_ok[None, :], other=0.0)  # [BT, DP]
    u = tl.load(u_ptr + (row0 + rows[:, None]) * D + dv[None, :], mask=v_ok[None, :], other=0.0).to(tl.float32)
    if WRITE_O:
        a_qk = tl.load(aqk_ptr + (row0 + rows[:, None]) * BT + rows[None, :])  # zero above the diagonal
    decay = tl.load(decay_ptr + (i_h * NT + i_c) * D + dk, mask=k_ok, other=0.0)  # [DP]

    state_d = state.to(dot_dtype)
    # [BT, DP] @ [DP, BV] -> [BT, BV]
    v_new = u - tl.dot(w, state_d, input_precision=PRECISION)
    v_new_d = v_new.to(dot_dtype)
    if WRITE_O:
        out = tl.dot(qg, state_d, input_precision=PRECISION)
        out = tl.dot(a_qk, v_new_d, acc=out, input_precision=PRECISION)
        t_rows = j * BT + rows
        tl.store(
            o_ptr + o_base + t_rows[:, None] * H * D + dv[None, :],
            out.to(o_ptr.dtype.element_ty),
            mask=(t_rows[:, None] < seq_len) & v_ok[None, :],
        )
    # [DP, BT] @ [BT, BV] -> [DP, BV]
    return state * decay[:, None] + tl.dot(tl.trans(kg), v_new_d, input_precision=PRECISION)


@triton.jit(do_not_specialize=["T", "NT", "NTS", "H", "SEG", "NSEG"])
def _scan_segment_kernel(
    w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr, o_ptr, states_ptr, ht_ptr,
    T, NT, NTS, H, SEG, NSEG,
    D: tl.constexpr, DP: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    PRECISION: tl.constexpr, SUMMARY: tl.constexpr, STORE_HT: tl.constexpr,
):
    """The scan split along the sequence (equal lengths only): segment s holds chunks
    [s SEG, (s + 1) SEG) of each sequence; one program per (value tile, sequence x head, segment).
    The state after a segment is affine in the state before it, S_end = A S_start + B.

    SUMMARY: segments 0 .. NSEG - 2 write [A | B] to states_ptr [NSEG - 1, N H, DP, 2 DP] fp32;
    programs i_v < DP / BV make A's columns (from the identity, U read as 0), the others B's
    (from zero, with U). Otherwise: segment s's outputs from its entering state, states_ptr
    [NSEG, N H, D, D] fp32 (``_segment_states_kernel``); the last segment stores the final state."""
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1).to(tl.int64)
    seg = tl.program_id(2)
    n_nh = tl.num_programs(1)
    i_n = i_nh // H
    i_h = i_nh % H
    bos = i_n * T
    first = i_n * NTS
    j_end = tl.minimum((seg + 1) * SEG, NTS)
    dk = tl.arange(0, DP)
    k_ok = dk < D
    o_base = (bos * H + i_h) * D
    if SUMMARY:
        NV: tl.constexpr = DP // BV
        dv = (i_v % NV) * BV + tl.arange(0, BV)
        column_ok = dv < D
        of_b = i_v + 0 * tl.arange(0, BV) >= NV  # [BV], all equal: this program makes B's columns
        state = tl.where((dk[:, None] == dv[None, :]) & (column_ok & ~of_b)[None, :], 1.0, 0.0)
        u_ok = column_ok & of_b
        for j in range(seg * SEG, j_end):
            state = _scan_step(w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr, o_ptr, state, first + j, j, i_h,
                               o_base, T, dk, dv, k_ok, u_ok, NT, H, D, BT, PRECISION, False)
        summary = ((seg * n_nh + i_nh) * DP + dk[:, None]) * (2 * DP) + i_v * BV + tl.arange(0, BV)[None, :]
        tl.store(states_ptr + summary, state)
    else:
        dv = i_v * BV + tl.arange(0, BV)
        v_ok = dv < D
        state_ok = k_ok[:, None] & v_ok[None, :]
        state = tl.load(states_ptr + ((seg * n_nh + i_nh) * D + dk[:, None]) * D + dv[None, :], mask=state_ok,
                        other=0.0)
        for j in range(seg * SEG, j_end):
            state = _scan_step(w_ptr, u_ptr, qg_ptr, kg_ptr, aqk_ptr, decay_ptr, o_ptr, state, first + j, j, i_h,
                               o_base, T, dk, dv, k_ok, v_ok, NT, H, D, BT, PRECISION, True)
        if STORE_HT:
            if seg == NSEG - 1:
                tl.store(ht_ptr + (i_nh * D + dk[:, None]) * D + dv[None, :], state, mask=state_ok)


@triton.jit(do_not_specialize=["NSEG"])
def _segment_states_kernel(
    summary_ptr, h0_ptr, states_ptr, NSEG,
    D: tl.constexpr, DP: tl.constexpr, BV: tl.constexpr, HAS_H0: tl.constexpr,
):
    """The state entering each segment, one program per (value tile, sequence x head):
    S_0 = h0 (or 0), S_(s+1) = A_s S_s + B_s, to states_ptr [NSEG, N H, D, D] fp32. fp32
    products (tf32x3): these compose whole segments, so their rounding is not averaged away."""
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1).to(tl.int64)
    n_nh = tl.num_programs(1)
    dk = tl.arange(0, DP)
    dv = i_v * BV + tl.arange(0, BV)
    state_ok = (dk < D)[:, None] & (dv < D)[None, :]
    state = tl.zeros([DP, BV], dtype=tl.float32)
    if HAS_H0:
        state = tl.load(h0_ptr + (i_nh * D + dk[:, None]) * D + dv[None, :], mask=state_ok, other=0.0)
    tl.store(states_ptr + (i_nh * D + dk[:, None]) * D + dv[None, :], state, mask=state_ok)
    for s in range(NSEG - 1):
        rows = ((s * n_nh + i_nh) * DP + dk[:, None]) * (2 * DP)
        a = tl.load(summary_ptr + rows + dk[None, :])  # [DP, DP]
        b = tl.load(summary_ptr + rows + DP + dv[None, :])  # [DP, BV]
        state = tl.dot(a, state, input_precision="tf32x3") + b
        tl.store(states_ptr + (((s + 1) * n_nh + i_nh) * D + dk[:, None]) * D + dv[None, :], state, mask=state_ok)


MAX_HEAD_DIM = 256


def _check_inputs(q, k, v, g, beta) -> None:
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, D], got shape {tuple(q.shape)}")
    for name, x in (("k", k), ("v", v), ("g", g)):
        if tuple(x.shape) != tuple(q.shape):
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)}, got {tuple(x.shape)}")
    if tuple(beta.shape) != tuple(q.shape[:3]):
        raise ValueError(f"beta must be [B, T, H] = {tuple(q.shape[:3])}, got {tuple(beta.shape)}")
    dim = q.shape[3]
    if dim < 1 or dim > MAX_HEAD_DIM:
        raise ValueError(f"head dim D must be in [1, {MAX_HEAD_DIM}], got {dim}")
    if q.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"q must be bfloat16, float16 or float32, got {q.dtype}")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise ValueError(f"{name} must have q's dtype {q.dtype}, got {x.dtype}")
    for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous (strides {tuple(x.stride())})")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device}, q on {q.device}")


class EqualLengths:
    """Where each chunk lies when the B rows are the sequences: N = B sequences of T tokens,
    ``per_sequence`` chunks each, ``chunks`` in all. Packed sequences (``cu_seqlens``) have a
    layout of their own with the same attributes, built outside the kernel's file
    (``kernels/kda/varlen.py``): ``varlen``, ``sequences``, ``chunks``, ``per_sequence`` and the
    int32 tables ``cu``, ``chunk_seq``, ``chunk_local``, ``chunk_offsets``."""

    varlen = False

    def __init__(self, q, chunk: int) -> None:
        batch, seq = q.shape[0], q.shape[1]
        self.sequences, self.per_sequence = batch, triton.cdiv(seq, chunk)
        self.chunks = batch * self.per_sequence
        # Unused without packed sequences, but every pointer argument needs a tensor.
        self.cu = self.chunk_seq = self.chunk_local = self.chunk_offsets = q.new_empty(1, dtype=torch.int32)


def _padded_dim(dim: int) -> int:
    """The power of two (at least 16, for the tensor cores) the kernels tile D with."""
    return max(16, triton.next_power_of_2(dim))


def _prepare(q, k, v, g, beta, scale, layout):
    """Launch the preparation kernel; returns the intermediates the scan reads."""
    _, seq, heads, dim = q.shape
    chunk = CONFIG["chunk"]
    if chunk % SUB_CHUNK or chunk > 64:
        raise ValueError(f"chunk must be 16, 32 or 64, got {chunk}")
    inter_dtype = q.dtype if CONFIG["inter_dtype"] == "input" else getattr(torch, CONFIG["inter_dtype"])
    rows = (heads, layout.chunks * chunk)
    w = torch.empty(*rows, dim, dtype=inter_dtype, device=q.device)
    u = torch.empty_like(w)
    qg = torch.empty_like(w)
    kg = torch.empty_like(w)
    a_qk = torch.empty(*rows, chunk, dtype=inter_dtype, device=q.device)
    decay = torch.empty(heads, layout.chunks, dim, dtype=torch.float32, device=q.device)
    intermediates = (w, u, qg, kg, a_qk, decay)
    if layout.chunks == 0:
        return intermediates
    block_k = min(CONFIG["prep_block_k"], _padded_dim(dim))
    shape_args = dict(D=dim, BK=block_k, BT=chunk, BC=SUB_CHUNK, NC=chunk // SUB_CHUNK)
    launch_args = dict(num_warps=CONFIG["prep_num_warps"], num_stages=CONFIG["prep_num_stages"])
    grid = (layout.chunks, heads)
    log2_chunk = chunk.bit_length() - 1
    precision = CONFIG["prep_precision"]
    if CONFIG["prep_variant"] == "flat":
        # The first pass flags the chunks its factored form cannot take (unbounded gates); the
        # second redoes just those, exactly. No host synchronisation: the flags stay on the GPU.
        flags = torch.empty(layout.chunks * heads, dtype=torch.int32, device=q.device)
        passes = dict(**shape_args, LOG2_BT=log2_chunk, PRECISION=precision, IS_VARLEN=layout.varlen, **launch_args)
        args = (q, k, v, g, beta, *intermediates, layout.cu, layout.chunk_seq, layout.chunk_local, flags,
                scale, seq, layout.chunks, layout.per_sequence, heads)
        _prepare_flat_kernel[grid](*args, **passes)
        _prepare_exact_kernel[grid](*args, **passes)
        return intermediates
    # "split": A_qk and M to memory, then W, U, qg, kg per channel tile. "subchunk": A_qk and
    # the block solve [P | D^-1] per sub-chunk (NC times the programs), then the same per tile.
    m_inv = torch.empty(*rows, chunk, dtype=torch.float32, device=q.device)
    tables = (layout.cu, layout.chunk_seq, layout.chunk_local, scale, seq, layout.chunks, layout.per_sequence, heads)
    block_solve = CONFIG["prep_variant"] == "subchunk"
    if block_solve:
        _subchunk_kernel[(layout.chunks * (chunk // SUB_CHUNK), heads)](
            q, k, g, beta, m_inv, a_qk, *tables, **shape_args, PRECISION=precision, IS_VARLEN=layout.varlen,
            **launch_args
        )
    else:
        _intra_kernel[grid](
            q, k, g, beta, m_inv, a_qk, *tables, **shape_args, LOG2_BT=log2_chunk, PRECISION=precision,
            IS_VARLEN=layout.varlen, **launch_args
        )
    wy_block_k = min(CONFIG["wy_block_k"], _padded_dim(dim))
    tiles = triton.cdiv(dim, wy_block_k)
    _wy_kernel[(layout.chunks * tiles, heads) if block_solve else (layout.chunks, heads, tiles)](
        q, k, v, g, beta, m_inv, w, u, qg, kg, decay, *tables,
        D=dim, BK=wy_block_k, BT=chunk, PRECISION=precision, IS_VARLEN=layout.varlen,
        BC=SUB_CHUNK, BLOCK_SOLVE=block_solve, num_warps=CONFIG["wy_num_warps"], num_stages=1,
    )
    return intermediates


# "auto" splits the scan only where its summaries fit beside each other: 2 (value tile x
# sequence x head) programs per segment and SM (2 scan CTAs fit an sm_90 SM at the default
# point), at least 4 segments (below that, the summaries' 2x work eats the gain) and at least
# this many chunks per segment.
MIN_SEGMENT_CHUNKS = 16


def scan_segments(setting, programs: int, per_sequence: int, sms: int, varlen: bool) -> int:
    """How many segments the scan of each sequence is cut into: ``setting`` (1: none, a count, or
    "auto"), ``programs`` = value tiles x sequences x heads of the plain scan, ``per_sequence``
    chunks per sequence, ``sms`` streaming multiprocessors. Packed sequences take the plain scan."""
    if varlen or setting == 1 or per_sequence < 2:
        return 1
    if setting == "auto":
        count = 1
        while 2 * programs * (2 * count - 1) <= 2 * sms and per_sequence >= 2 * count * MIN_SEGMENT_CHUNKS:
            count *= 2
        return count if count >= 4 else 1
    return min(int(setting), per_sequence)


def _scan(q, intermediates, layout, initial_state, output_final_state: bool):
    """Launch the state scan over the intermediates; returns o (shaped and typed like q) and the
    final state [N, H, D, D] fp32, or None."""
    _, seq, heads, dim = q.shape
    w, u, qg, kg, a_qk, decay = intermediates
    padded = _padded_dim(dim)
    block_v = min(CONFIG["scan_block_v"], padded)
    out = torch.empty_like(q)
    final = torch.empty(layout.sequences, heads, dim, dim, dtype=torch.float32, device=q.device) \
        if output_final_state else None
    if layout.sequences == 0 or heads == 0:
        return out, final
    tiles = triton.cdiv(dim, block_v)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.device.type == "cuda" else 132
    segments = scan_segments(CONFIG["scan_segments"], tiles * layout.sequences * heads, layout.per_sequence, sms,
                             layout.varlen)
    if segments > 1:
        return _scan_in_segments(q, intermediates, layout, initial_state, out, final, segments, block_v)
    _scan_kernel[(triton.cdiv(dim, block_v), layout.sequences * heads)](
        w, u, qg, kg, a_qk, decay, out,
        initial_state if initial_state is not None else decay, final if final is not None else decay,
        layout.cu, layout.chunk_offsets,
        seq, layout.chunks, layout.per_sequence, heads,
        D=dim, DP=padded, BT=CONFIG["chunk"], BV=block_v,
        PRECISION=CONFIG["scan_precision"], IS_VARLEN=layout.varlen,
        HAS_H0=initial_state is not None, STORE_HT=final is not None,
        num_warps=CONFIG["scan_num_warps"], num_stages=CONFIG["scan_num_stages"],
    )
    return out, final


def _scan_in_segments(q, intermediates, layout, initial_state, out, final, segments, block_v):
    """The scan cut along the sequence (``_scan_segment_kernel``): the segments' maps [A | B] in
    parallel, the states entering each segment (a short sequential pass), then every segment's
    outputs in parallel. Three launches; (segments - 1) / segments x 2 of the scan's work more,
    spread over ``segments`` times the programs."""
    _, seq, heads, dim = q.shape
    padded = _padded_dim(dim)
    seg_chunks = triton.cdiv(layout.per_sequence, segments)
    segments = triton.cdiv(layout.per_sequence, seg_chunks)
    pairs = layout.sequences * heads
    tiles = triton.cdiv(padded, block_v)
    summary = torch.empty(segments - 1, pairs, padded, 2 * padded, dtype=torch.float32, device=q.device)
    states = torch.empty(segments, pairs, dim, dim, dtype=torch.float32, device=q.device)
    sizes = (seq, layout.chunks, layout.per_sequence, heads, seg_chunks, segments)
    shape_args = dict(D=dim, DP=padded, BT=CONFIG["chunk"], BV=block_v, PRECISION=CONFIG["scan_precision"])
    launch = dict(num_warps=CONFIG["scan_num_warps"], num_stages=CONFIG["scan_num_stages"])
    if segments > 1:
        _scan_segment_kernel[(2 * tiles, pairs, segments - 1)](
            *intermediates, out, summary, states, *sizes, **shape_args, SUMMARY=True, STORE_HT=False, **launch)
    _segment_states_kernel[(tiles, pairs)](
        summary, initial_state if initial_state is not None else states, states, segments,
        D=dim, DP=padded, BV=block_v, HAS_H0=initial_state is not None, num_warps=8)
    _scan_segment_kernel[(tiles, pairs, segments)](
        *intermediates, out, states, final if final is not None else states, *sizes, **shape_args,
        SUMMARY=False, STORE_HT=final is not None, **launch)
    return out, final


def kda_forward(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, layout=None):
    """KDA forward. q, k, v: [B, T, H, D] (bf16, fp16 or fp32; any D up to 256), g: [B, T, H, D]
    log-decay (<= 0, any magnitude; fp32 recommended), beta: [B, T, H], scale: float (default
    D ** -0.5), initial_state: [N, H, D, D] (keys x values; fp32 recommended) or None (zeros),
    N = B. Returns o [B, T, H, D] in q's dtype, or ``(o, final_state [N, H, D, D] fp32)`` when
    ``output_final_state``. ``layout`` is for packed sequences: ``kernels.kda.kda_forward``
    (FLA's interface, with ``cu_seqlens``) passes one; leave it None.
    """
    _check_inputs(q, k, v, g, beta)
    scale = q.shape[3] ** -0.5 if scale is None else float(scale)
    layout = layout if layout is not None else EqualLengths(q, CONFIG["chunk"])
    if initial_state is not None:
        expected = (layout.sequences, q.shape[2], q.shape[3], q.shape[3])
        if tuple(initial_state.shape) != expected:
            raise ValueError(f"initial_state must be [N, H, D, D] = {expected}, got {tuple(initial_state.shape)}")
        if initial_state.device != q.device or not initial_state.is_contiguous():
            raise ValueError(f"initial_state must be contiguous and on {q.device}, got {initial_state.device}, "
                             f"strides {tuple(initial_state.stride())}")
    out, final = _scan(q, _prepare(q, k, v, g, beta, scale, layout), layout, initial_state, output_final_state)
    return (out, final) if output_final_state else out


def kernel(q, k, v, g, beta, scale, initial_state):
    return kda_forward(q, k, v, g, beta, scale, initial_state, True)
