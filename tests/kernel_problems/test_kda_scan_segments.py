"""The scan cut along the sequence (``scan_segments``): the segments' state maps, the states
entering each segment and the segments' outputs, against the float64 recurrence in the
interpreter (fp32 and fp16), with initial and final states; packed sequences take the plain
scan; and the shape rule behind "auto"."""

from __future__ import annotations

import pytest
import torch

from kernels.kda import chunk, kda_forward
from kernels.kda.reference import kda_reference
from tests.kernel_problems.test_kda_interface import FLA_BAR, FP32_BAR, fla_style_inputs, rel_rms


@pytest.mark.parametrize(("segments", "chunk_size", "dim", "gates", "variant"), [
    (2, 16, 32, "normalizer", "flat"),  # 5 chunks: segments of 3 and 2
    (4, 16, 60, "kimi", "subchunk"),  # padded head dim; segments of 2, 2 and 1
    (8, 32, 32, "masked", "split"),  # more segments asked than chunks: one chunk each
])
def test_segmented_scan_matches_the_recurrence(monkeypatch, segments, chunk_size, dim, gates, variant):
    monkeypatch.setitem(chunk.CONFIG, "scan_segments", segments)
    monkeypatch.setitem(chunk.CONFIG, "scan_block_v", 16)
    monkeypatch.setitem(chunk.CONFIG, "chunk", chunk_size)
    monkeypatch.setitem(chunk.CONFIG, "prep_variant", variant)
    inputs = fla_style_inputs(2, 70, 2, dim, gates, seed=12)
    h0 = torch.randn(2, 2, dim, dim, generator=torch.Generator().manual_seed(13)) * 0.1
    out, final = kda_forward(**inputs, initial_state=h0, output_final_state=True)
    ref, ref_final = kda_reference(**inputs, initial_state=h0, output_final_state=True)
    assert torch.isfinite(out).all() and torch.isfinite(final).all()
    assert rel_rms(out, ref) < FP32_BAR and rel_rms(final, ref_final) < FP32_BAR


def test_segmented_scan_without_states_in_fp16(monkeypatch):
    monkeypatch.setitem(chunk.CONFIG, "scan_segments", 4)
    inputs = fla_style_inputs(1, 128, 2, 64, "kimi", seed=14, dtype=torch.float16)
    out = kda_forward(**inputs)
    assert out.dtype == torch.float16 and rel_rms(out, kda_reference(**inputs)) < FLA_BAR


def test_packed_sequences_take_the_plain_scan(monkeypatch):
    monkeypatch.setitem(chunk.CONFIG, "scan_segments", 4)
    cu = torch.tensor([0, 40, 40, 90], dtype=torch.int32)
    inputs = fla_style_inputs(1, 90, 1, 32, "normalizer", seed=15)
    h0 = torch.randn(3, 1, 32, 32, generator=torch.Generator().manual_seed(16)) * 0.1
    out, final = kda_forward(**inputs, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    ref, ref_final = kda_reference(**inputs, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    assert rel_rms(out, ref) < FP32_BAR and rel_rms(final, ref_final) < FP32_BAR


def test_auto_splits_only_where_b_times_h_leaves_sms_idle():
    # Value tiles of 32 at D = 128: 4 programs per sequence and head; chunks of 32; 132 SMs.
    def auto(batch, seq, heads):
        return chunk.scan_segments("auto", 4 * batch * heads, seq // 32, 132, False)

    assert auto(1, 4096, 4) == 8  # 16 programs: 224 summary programs fit 2 per SM
    assert auto(1, 32768, 4) == 8
    assert auto(1, 8192, 8) == 4
    assert auto(1, 8192, 16) == 1  # 64 programs: 4 segments would not fit at once
    assert auto(1, 32768, 32) == 1
    assert auto(1, 1024, 4) == 1  # 32 chunks: segments of 16 chunks at most 2, below 4
    assert chunk.scan_segments("auto", 16, 128, 132, True) == 1  # packed sequences
    assert chunk.scan_segments(4, 16, 3, 132, False) == 3  # a fixed count: at most one chunk each
    assert chunk.scan_segments(1, 16, 128, 132, False) == 1
