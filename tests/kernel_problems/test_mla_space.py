"""The MLA search space: validation, description, and rendered candidates that run correctly."""

import ast
import importlib.util

import pytest

from kernels.mla import decode, space
from kernels.mla.definition import PROBLEM, make_inputs
from kernels.mla.reference import reference

ALLOWED_IMPORTS = {"torch", "triton", "triton.language", "math", "functools"}
POINTS = {
    "small-tiles-many-splits": {**space.DEFAULT, "block_n": 32, "block_h": 16, "num_warps": 4,
                                "min_split_tokens": 32, "split_overhead_tokens": 0, "combine_block_s": 8,
                                "combine_block_dv": 64},
    "bf16-partials-few-splits": {**space.DEFAULT, "partial_dtype": "bfloat16", "min_split_tokens": 256,
                                 "split_overhead_tokens": 512, "combine_block_dv": 512, "combine_num_warps": 8},
    "block-n-16": {**space.DEFAULT, "block_n": 16, "num_stages": 4, "block_h": 32, "sm_count": 66},
    # Both test shapes (batch x heads 16 and 6) take the small-batch knobs, the plain ones unused.
    "small-batch-class": {**space.DEFAULT, "small_batch_heads": 128, "small_block_n": 32, "small_block_h": 16,
                          "small_num_warps": 4, "small_num_stages": 4, "small_min_split_tokens": 128,
                          "small_pdl": True, "small_warp_specialize": True, "block_n": 16, "num_stages": 1},
    # The value-split streaming kernel (its own jitted function) in a standalone candidate.
    "value-split": {**space.DEFAULT, "value_split": 2, "block_n": 32, "block_h": 16, "num_warps": 4,
                    "min_split_tokens": 32},
}


def load_candidate(source, path):
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_default_is_the_kernel_config_and_valid():
    assert space.DEFAULT == decode.CONFIG
    assert set(space.DEFAULT) == set(space.SPACE)
    assert space.validate(space.DEFAULT) == []


def test_render_of_the_default_is_the_kernel_source():
    assert space.render(space.DEFAULT) == space._DECODE_PATH.read_text()
    assert PROBLEM.seed_source() == space._DECODE_PATH.read_text()


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"block_n": 48}, "block_n=48 is not one of"),
        ({"tile": 3}, "unknown knobs: ['tile']"),
        ({"num_stages": 4, "block_n": 128}, "shared memory estimate"),
        ({"block_h": 128, "num_warps": 8}, "accumulator needs 256 registers per thread"),
        ({"small_batch_heads": 256, "small_num_stages": 4, "small_block_n": 128}, "small_shared memory estimate"),
        ({"small_batch_heads": 256, "small_block_h": 128, "small_num_warps": 4}, "(small_block_h=128, small_num_warps=4)"),
    ],
)
def test_validate_names_what_is_wrong(change, reason):
    problems = space.validate({**space.DEFAULT, **change})
    assert any(reason in p for p in problems), problems


def test_value_split_halves_the_accumulator_estimate():
    point = {**space.DEFAULT, "block_h": 64, "num_warps": 4}
    assert space.accumulator_registers(point) == 256 and space.validate(point)
    assert space.accumulator_registers({**point, "value_split": 2}) == 128
    assert space.validate({**point, "value_split": 2}) == []


def test_validate_reports_missing_knobs_and_render_refuses():
    point = dict(space.DEFAULT)
    del point["block_n"]
    assert space.validate(point) == ["missing knobs: ['block_n']"]
    with pytest.raises(ValueError, match="missing knobs"):
        space.render(point)


def test_describe_mentions_the_knobs():
    text = space.describe(POINTS["small-tiles-many-splits"])
    assert "block_n=32" in text and "block_h=16" in text and "combine_block_dv=64 combine_block_s=8" in text
    assert set(space.KNOBS) == set(space.SPACE)


@pytest.mark.parametrize("name", list(POINTS))
def test_rendered_candidate_is_standalone_and_correct(name, tmp_path):
    point = POINTS[name]
    assert space.validate(point) == []
    source = space.render(point)
    tree = ast.parse(source)
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= ALLOWED_IMPORTS, imported
    module = load_candidate(source, tmp_path / f"candidate_{name.replace('-', '_')}.py")
    assert module.CONFIG == point
    for shape in ((1, 16, 300), (2, 3, 130)):
        inputs = make_inputs(shape, seed=21, dtype="float32")
        out = module.kernel(**inputs)
        ref = reference(**inputs)
        error = float((out.double() - ref.double()).norm() / ref.double().norm())
        assert error < PROBLEM.tolerance["float32"], (name, shape, error)
    if name == "small-batch-class":
        plan = module.split_plan(1, 16, 300)
        assert (plan["block_n"], plan["block_h"], plan["num_warps"], plan["num_stages"]) == (32, 16, 4, 4)
        assert plan["split_len"] % 32 == 0 and plan["split_len"] >= 128 and plan["pdl"]
    if name == "value-split":
        plan = module.split_plan(2, 3, 130)
        assert plan["value_split"] == 2 and plan["num_splits"] > 1
    if name == "small-tiles-many-splits":
        plan = module.split_plan(1, 16, 300)
        assert plan["num_splits"] > point["combine_block_s"]  # the combine loop runs more than once
