"""The plan's inputs and the scoring of errors, without running a judgement: the held-out
family drawn only when asked for, timed shapes nudged per judgement, several outputs per call
checked and carried one by one, errors near the gate flagged."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from kernels.judge import outputs, plan as planning, scoring
from kernels.kda.definition import PROBLEM as KDA
from kernels.mla.definition import PROBLEM as MLA
from kernels.problem import Problem
from tests.judge.toy import PROBLEM as TOY


def _plan(problem, held_out: bool, seed: int = 0, cpu: bool = False):
    return planning.build(problem, cpu=cpu, seeds=2, reps=5, warmup=1, rng=random.Random(seed), held_out=held_out)


@pytest.mark.parametrize("problem", [KDA, MLA], ids=lambda p: p.name)
def test_the_held_out_family_is_drawn_only_when_asked_for(problem):
    ordinary = {c.regime for seed in range(20) for c in _plan(problem, False, seed).checks}
    confirming = {c.regime for seed in range(20) for c in _plan(problem, True, seed).checks}
    assert ordinary == set(problem.regimes)  # every drawn regime, never a held-out one
    assert confirming == set(problem.regimes) | set(problem.held_out)
    for seed in range(5):  # a confirmation checks the held-out family every time
        assert {c.regime for c in _plan(problem, True, seed).checks} & set(problem.held_out)


def test_held_out_regimes_must_be_distinct_from_the_drawn_ones():
    with pytest.raises(ValueError, match="held-out regimes"):
        dataclasses.replace(KDA, held_out=("default",))
    with pytest.raises(ValueError, match="held-out regimes"):
        dataclasses.replace(KDA, held_out=("probe", "probe"))
    assert KDA.check_regime("probe") == "probe"
    with pytest.raises(ValueError, match="probe"):  # the message names the held-out ones too
        KDA.check_regime("nope")


def test_timed_shapes_are_nudged_by_a_few_tokens_per_judgement():
    listed = KDA.shape_set("bench")
    drawn = [tuple(tuple(b.shape) for b in _plan(KDA, False, seed).bench) for seed in range(30)]
    assert len(set(drawn)) > 20  # a different layout almost every judgement
    for shapes in drawn:
        for shape, base in zip(shapes, listed):
            assert shape[0] == base[0] and shape[2:] == base[2:]
            assert abs(shape[1] - base[1]) <= planning.BENCH_SPREAD * base[1] + 1
    # Graph replay follows the listed shape it stands for.
    graph = ((1, 64, 8192),)
    for seed in range(5):
        the_plan = planning.build(MLA, cpu=False, seeds=2, reps=5, warmup=1, rng=random.Random(seed),
                                  graph_shapes=graph)
        assert [b.graph for b in the_plan.bench] == [s in graph for s in MLA.shape_set("bench")]


def test_a_family_written_before_spreads_keeps_its_timed_shapes():
    old = dataclasses.replace(TOY, vary_shape=lambda shape, rng: (shape[0], shape[1] + 1, shape[2]))
    assert old.draw_shapes("cpu", random.Random(0), spread=0.01) == TOY.shape_set("cpu")
    assert old.draw_shapes("cpu", random.Random(0))[0][1] == TOY.shape_set("cpu")[0][1] + 1


def test_several_outputs_are_checked_one_by_one():
    shape = (1, 5, 1, 4)
    specs = KDA.output_specs(shape, "float32")
    assert [name for name, _, _ in specs] == ["out", "final_state"]
    good = (torch.zeros(shape), torch.zeros(1, 1, 4, 4))
    assert len(outputs.check(KDA, shape, "float32", good, "cpu")) == 2
    bad = [
        (torch.zeros(shape), "a tuple of 2 tensors"),
        ((torch.zeros(shape),), "2 tensors, got 1"),
        ((torch.zeros(shape), torch.zeros(1, 1, 4, 5)), "output 'final_state' must be (1, 1, 4, 4) float32"),
        ((torch.zeros(shape), torch.zeros(1, 1, 4, 4, dtype=torch.float64)), "got (1, 1, 4, 4) float64"),
        ((torch.zeros(shape), 0.0), "output 'final_state' must be a plain torch.Tensor"),
    ]
    for value, says in bad:
        with pytest.raises(outputs.OutputError, match=says.replace("(", r"\(").replace(")", r"\)")):
            outputs.check(KDA, shape, "float32", value, "cpu")
    one = outputs.check(TOY, (1, 3, 1), "float32", torch.zeros(1, 3, 1), "cpu")
    assert len(one) == 1 and outputs.packed(one) is one[0]


def test_every_output_crosses_the_pipe_and_is_read_back_one_by_one(tmp_path):
    from kernels.judge import drive

    shape = (1, 5, 1, 4)
    o, state = torch.randn(shape), torch.randn(1, 1, 4, 4)
    sizes = outputs.sizes(KDA, shape, "float32")
    assert sizes == (5 * 4 * 4, 16 * 4)
    assert drive.output_bytes(KDA, shape, "float32") == sum(sizes)  # the caller's bound counts both
    path = tmp_path / "out.bin"
    path.write_bytes(outputs.raw(torch, (o, state)))
    back = outputs.read_exact(torch, KDA, shape, "float32", str(path), "v0/seed0", "cpu")
    assert torch.equal(back[0], o) and torch.equal(back[1], state)
    path.write_bytes(outputs.raw(torch, (o,)))  # the output without its final state: refused
    said = outputs.read_exact(torch, KDA, shape, "float32", str(path), "v0/seed0", "cpu")
    assert isinstance(said, str) and "80 bytes, not the 144" in said and "(1, 1, 4, 4) float32" in said


def _entries(errors: dict[str, float], tolerance: float = 1e-4):
    spec = dataclasses.replace(TOY, tolerance={"float32": tolerance})
    the_plan = planning.Plan([planning.Call(k, [1, 8, 1], 1) for k in errors], [], 1)
    return spec, scoring.shapes(spec, the_plan, {"errors": errors}, "cpu")


def test_an_error_near_the_gate_is_flagged():
    _, entries = _entries({"v0/seed0": 2e-7, "v0/seed1": 3e-7})
    assert not entries[0]["near_gate"] and scoring.near_gate(entries) == ""
    _, entries = _entries({"v0/seed0": 2e-7, "v0/seed1": 0.7e-4})
    assert entries[0]["near_gate"]
    flag = scoring.near_gate(entries)
    assert "near the gate" in flag and "70%" in flag and "7.00e-05" in flag


def test_a_timed_call_near_the_gate_is_flagged():
    spec = dataclasses.replace(TOY, tolerance={"float32": 1e-4})
    the_plan = planning.Plan([planning.Call("v0/seed0", [1, 8, 1], 1)],
                             [planning.Bench(0, [1, 8, 1], [2, 3], "default",
                                             [planning.Batch(0, [4, 5], candidate_first=False)],
                                             planning.Call("b0/recheck", [1, 8, 1], 2))], 1)
    errors = {"v0/seed0": 2e-7, "b0/recheck": 2e-7, "b0/t0/0": 2e-7, "b0/t0/1": 0.8e-4}
    entries = scoring.shapes(spec, the_plan, {"errors": errors}, "cpu")
    assert entries[0]["near_gate"] and "80%" in scoring.near_gate(entries)


def test_problem_contract_defaults_keep_one_output():
    assert Problem.__dataclass_fields__["extra_outputs"].default is None
    assert TOY.output_specs((1, 3, 1), "float32") == (("out", (1, 3, 1), "float32"),)
    assert TOY.public()["extra_outputs"] is False and KDA.public()["extra_outputs"] is True


def test_a_confirmation_asks_for_the_held_out_family(monkeypatch):
    from kernels.judge import judge
    from tests.judge.corpus import TOY

    asked = []
    build = planning.build

    def spy(*args, **kwargs):
        asked.append(kwargs.get("held_out"))
        return build(*args, **kwargs)

    monkeypatch.setattr(planning, "build", spy)
    for confirm in (False, True):  # a source that stops at load: the plan is drawn all the same
        report = judge("def kernel(:\n", TOY, device="cpu", confirm=confirm, static_policy=False)
        assert report.status == "compile_error"
    assert asked == [False, True]
