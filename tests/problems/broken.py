"""Problems that each break one clause of the contract (tests/problems/test_problem_check.py)."""

from __future__ import annotations

from dataclasses import replace

from tests.problems.scaled import PROBLEM, make_inputs

NOT_A_PROBLEM = {"name": "scaled"}


def _global_rng_inputs(shape, seed, device="cpu", dtype="float32", regime="default"):
    import torch

    return {"x": torch.randn(shape[0]).to(device), "scale": 1.5}


def _seed_ignored(shape, seed, device="cpu", dtype="float32", regime="default"):
    return make_inputs(shape, 7, device, dtype, regime)


def _wrong_names(shape, seed, device="cpu", dtype="float32", regime="default"):
    inputs = make_inputs(shape, seed, device, dtype, regime)
    return {"y": inputs["x"], "scale": inputs["scale"]}


def reference_off_by_a_bit(x, scale):
    return (x.double() * scale * 1.001).float()


def reference_wrong_shape(x, scale):
    return (x.double() * scale).float()[:-1]


def baselines_wrong(device):
    return {"eager": lambda x, scale: x * (scale + 0.1)}


NONDETERMINISTIC = replace(PROBLEM, make_inputs=_global_rng_inputs)
SEED_IGNORED = replace(PROBLEM, make_inputs=_seed_ignored)
WRONG_INPUT_NAMES = replace(PROBLEM, make_inputs=_wrong_names)
NO_CPU_TOLERANCE = replace(PROBLEM, tolerance={"bfloat16": 1e-2})
NEGATIVE_TOLERANCE = replace(PROBLEM, tolerance={"float32": -1e-5, "bfloat16": 1e-2})
NO_CPU_SHAPES = replace(PROBLEM, shapes={"verify": ((100,),), "bench": ((1 << 20,),)})
BAD_SHAPE = replace(PROBLEM, shapes={"verify": ((100, 3),), "bench": ((1 << 20,),), "cpu": ((0,),)})
ZERO_FLOPS = replace(PROBLEM, flops=lambda shape, dtype="float32": 0.0)
DISAGREEING_CHECK = replace(PROBLEM, reference_check="tests.problems.broken:reference_off_by_a_bit")
WRONG_OUTPUT_SHAPE = replace(PROBLEM, reference="tests.problems.broken:reference_wrong_shape", reference_check=None)
WRONG_BASELINE = replace(PROBLEM, baselines="tests.problems.broken:baselines_wrong")
BAD_NAME = replace(PROBLEM, name="Scaled Add")
DEFAULT_OUTSIDE_SPACE = replace(PROBLEM, space="tests.problems.broken_default")


def reference_small_only(x, scale):
    if x.numel() > 1000:
        raise MemoryError(f"this reference holds a {x.numel()} x {x.numel()} matrix")
    return (x.double() * scale).float()


def _constant_inputs(shape, seed, device="cpu", dtype="float32", regime="default"):
    inputs = make_inputs(shape, seed, device, dtype, regime)
    return {"x": inputs["x"], "scale": inputs["scale"], "weight": inputs["x"] * 0 + 1}


SPACE_CRASHES_OFF_DEFAULT = replace(PROBLEM, space="tests.problems.broken_validate")
FAILS_AT_SIZE = replace(PROBLEM, reference="tests.problems.broken:reference_small_only", reference_check=None)
CONSTANT_WEIGHT = replace(PROBLEM, input_names=("x", "scale", "weight"), make_inputs=_constant_inputs,
                          reference="tests.problems.broken:reference_with_weight", reference_check=None,
                          baselines="tests.problems.broken:baselines_with_weight")


def reference_with_weight(x, scale, weight):
    return (x.double() * scale * weight.double()).float()


def baselines_with_weight(device):
    return {"eager": lambda x, scale, weight: x * scale * weight}
