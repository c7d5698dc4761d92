"""The mla-decode-paged problem (kernels/mla/paged_definition.py): its inputs hold what a paged
cache holds in an engine (ragged requests, shuffled pages, garbage elsewhere), its reference is
mla-decode's through the pages, its baseline agrees, and its seed is a standalone candidate."""

from __future__ import annotations

import ast

import pytest
import torch

from kernels.judge import policy
from kernels.mla.definition import make_inputs as dense_inputs
from kernels.mla.paged_baseline import mla_decode_paged_torch
from kernels.mla.paged_definition import PROBLEM, lengths, make_inputs
from kernels.mla.reference import paged_reference, reference
from kernels.registry import get_problem


def test_lengths_are_ragged_and_fixed_by_the_shape():
    assert lengths(1, 777) == [777]
    assert lengths(4, 100) == [100, 84, 67, 50]
    assert lengths(3, 1) == [1, 1, 1]
    shape = (4, 2, 100, 16)
    assert PROBLEM.flops(shape) == 2.0 * 2 * (100 + 84 + 67 + 50) * (576 + 512)
    assert PROBLEM.bytes_moved(shape, "bfloat16") == 2.0 * ((100 + 84 + 67 + 50) * 576 + 4 * 2 * (576 + 512))


@pytest.mark.parametrize("regime", PROBLEM.regimes)
def test_the_cache_holds_each_requests_tokens_through_shuffled_pages(regime):
    batch, heads, seq, page = 3, 2, 70, 16
    inputs = make_inputs((batch, heads, seq, page), seed=5, device="cpu", dtype="float32", regime=regime)
    dense = dense_inputs((batch, heads, seq), seed=5, device="cpu", dtype="float32", regime=regime)
    assert list(inputs) == list(PROBLEM.input_names)
    assert torch.equal(inputs["q"], dense["q"]) and inputs["scale"] == dense["scale"]
    table, cache = inputs["block_table"], inputs["kv_cache"]
    assert table.dtype == torch.int32 and tuple(table.shape) == (batch, 5)
    assert inputs["cache_seqlens"].tolist() == lengths(batch, seq)
    used = table.flatten().tolist()
    assert len(set(used)) == len(used) and cache.shape[0] > len(used)  # distinct pages, and spares
    assert used != sorted(used)  # not in order
    owned = torch.zeros(cache.shape[:2], dtype=torch.bool)
    for b, length in enumerate(lengths(batch, seq)):
        t = torch.arange(length)
        assert torch.equal(cache[table[b, t // page].long(), t % page], dense["kv"][b, :length])
        owned[table[b, t // page].long(), t % page] = True
    # Every slot no request owns holds a stale token of the requests' own scale: nothing but
    # cache_seqlens tells it apart, so a kernel that masks by magnitude instead is wrong.
    rest, mine = cache[~owned], cache[owned]
    assert rest.numel() > 0 and 0.7 < float(rest.pow(2).mean().sqrt() / mine.pow(2).mean().sqrt()) < 1.4
    assert float(rest.abs().max()) < 2 * float(mine.abs().max())
    # Reading them is wrong by far: the softmax over every slot the table names.
    from kernels.mla.reference import paged_reference
    capacity = dict(inputs, cache_seqlens=torch.full_like(inputs["cache_seqlens"], table.shape[1] * page))
    ref = paged_reference(**inputs)
    assert float((paged_reference(**capacity) - ref).norm() / ref.norm()) > 0.05


def test_inputs_are_deterministic_per_seed_and_the_seed_moves_the_pages():
    first = make_inputs((2, 2, 40, 8), seed=3, dtype="float32")
    again = make_inputs((2, 2, 40, 8), seed=3, dtype="float32")
    other = make_inputs((2, 2, 40, 8), seed=4, dtype="float32")
    for name in ("q", "kv_cache", "block_table", "cache_seqlens"):
        assert torch.equal(first[name], again[name]), name
    assert not torch.equal(first["block_table"], other["block_table"])
    assert not torch.equal(first["kv_cache"], other["kv_cache"])


def test_the_reference_is_mla_decodes_over_each_requests_tokens():
    batch, heads, seq = 3, 4, 50
    inputs = make_inputs((batch, heads, seq, 1), seed=2, dtype="float32", regime="peaked")
    dense = dense_inputs((batch, heads, seq), seed=2, dtype="float32", regime="peaked")
    out = paged_reference(**inputs)
    for b, length in enumerate(lengths(batch, seq)):
        want = reference(dense["q"][b:b + 1], dense["kv"][b:b + 1, :length], dense["scale"])
        assert torch.equal(out[b:b + 1], want)


def test_the_pytorch_baseline_agrees_with_the_reference():
    inputs = make_inputs((3, 4, 90, 16), seed=1, dtype="float32")
    got = mla_decode_paged_torch(**inputs)
    want = paged_reference(**inputs)
    assert float((got - want).norm() / want.norm()) < PROBLEM.tolerance["float32"]
    # A request of length 0 gets zeros, not NaN.
    inputs["cache_seqlens"][1] = 0
    assert torch.equal(mla_decode_paged_torch(**inputs)[1], torch.zeros(4, 512))


def test_shapes_and_families():
    assert PROBLEM.dims == ("B", "H", "S", "P")
    assert {s[3] for s in PROBLEM.shape_set("bench")} == {64, 1}
    assert any(s[2] == 1 for s in PROBLEM.shape_set("verify"))  # a cache of one token
    rng = __import__("random").Random(0)
    varied = PROBLEM.draw_shapes("verify", rng)
    for listed, drawn in zip(PROBLEM.shape_set("verify"), varied):
        assert (drawn[0], drawn[1], drawn[3]) == (listed[0], listed[1], listed[3])
    with pytest.raises(ValueError, match=r"\(B, H, S, P\)"):
        make_inputs((1, 2, 3), seed=0)


def test_the_seed_is_a_standalone_candidate_of_the_paged_kernel():
    problem = get_problem("mla-decode-paged")
    source = problem.seed_source()
    assert policy.scan(source) == []  # imports only torch, triton, math (and functools)
    tree = ast.parse(source)
    kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel"]
    assert len(kernels) == 1 and [a.arg for a in kernels[0].args.args] == list(problem.input_names)
    space = problem.load_space()
    assert "fused" in space.SPACE and space.SPACE["fused"] == (False,)
    with pytest.raises(ValueError, match="fused must be one of"):
        space.render({**space.DEFAULT, "fused": True})
    # A point of the space renders with its CONFIG, as mla-decode's does.
    point = {**space.DEFAULT, "block_n": 32}
    assert '"block_n": 32' in space.render(point)


def test_splicing_says_which_file_lost_its_shape(tmp_path):
    from kernels.config_source import splice

    extension = tmp_path / "extension.py"
    extension.write_text('"""Doc."""\nimport torch\nfrom base import f\n\ndef g():\n    return f()\n')
    spliced = splice("def f():\n    return 1\n\n\ndef kernel():\n    return f()\n", "\n\ndef kernel():\n    return f()\n",
                     extension, "from base import f\n", "", "\n\ndef kernel():\n    return g()\n")
    namespace: dict = {}
    exec(compile(spliced, "spliced", "exec"), namespace)
    assert namespace["kernel"]() == 1 and "# Doc." in spliced and "import torch" not in spliced
    with pytest.raises(ValueError, match="no longer ends with"):
        splice("def f(): pass\n", "\ndef kernel(): pass\n", extension, "from base import f\n", "", "")
    with pytest.raises(ValueError, match="no longer has the import line"):
        splice("x\ndef kernel(): pass\n", "\ndef kernel(): pass\n", extension, "from elsewhere import f\n", "", "")
