"""A toy problem (double a vector) whose space is ``proposer_toy_space``: enough for proposers."""

from kernels.problem import Problem


def make_inputs(shape, seed, device="cpu", dtype="float32", regime="default"):
    """``x`` [N]; the one regime is ``"default"``."""
    import torch

    PROBLEM.check_regime(regime)

    gen = torch.Generator(device="cpu").manual_seed(seed)
    return {"x": torch.randn(shape[0], generator=gen).to(device=device, dtype=getattr(torch, dtype))}


PROBLEM = Problem(
    name="toy-double",
    title="Double a vector (toy problem for proposer tests)",
    input_names=("x",),
    dims=("N",),
    shapes={"bench": ((4096,), (65536,)), "verify": ((1000,),), "cpu": ((100,),)},
    tolerance={"float32": 1e-6, "bfloat16": 1e-2},
    make_inputs=make_inputs,
    output=lambda shape, dtype: ((shape[0],), dtype),
    flops=lambda shape, dtype="float32": float(shape[0]),
    bytes_moved=lambda shape, dtype="float32": 8.0 * shape[0],
    reference="proposer_toy_problem:make_inputs",
    baselines="proposer_toy_problem:make_inputs",
    ours="proposer_toy_problem:make_inputs",
    space="proposer_toy_space",
    notes="Memory-bound; toy.",
)

OBJECT_PATH = "proposer_toy_problem:PROBLEM"
