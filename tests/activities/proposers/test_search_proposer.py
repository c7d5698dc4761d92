"""The search proposer on a toy space: deterministic, never repeats, avoids failures and
invalid points, learns which knobs matter, and finds the good region of a synthetic objective."""

from __future__ import annotations

import ast
import itertools
import math
import random

import proposer_toy_space as toy
import pytest

from activities.proposers.base import PastAttempt
from kernels.hints import knob_overrides
from kernels.knob_space import KnobSpace
from activities.proposers.search import KnobStatistics, Scored, choose_points, generator_for

SPACE = KnobSpace(toy)
OPTIMUM = {"BLOCK": 128, "num_warps": 4, "num_stages": 3, "SPLIT": 4, "USE_FAST": True}


def objective(point):
    """Speedup peaking at OPTIMUM (3x); num_stages does not matter except that 4 stages on a
    256-wide tile fail to compile (None)."""
    if point["BLOCK"] == 256 and point["num_stages"] == 4:
        return None
    distance = sum(
        (toy.SPACE[k].index(point[k]) - toy.SPACE[k].index(OPTIMUM[k])) ** 2 for k in ("BLOCK", "num_warps", "SPLIT")
    )
    distance += 0 if point["USE_FAST"] else 1.5
    return 3.0 * math.exp(-0.35 * distance)


def evaluate(iteration, points):
    attempts = []
    for index, point in enumerate(points):
        speedup = objective(point)
        status = "ok" if speedup is not None else "compile_error"
        attempts.append(PastAttempt(iteration, index, toy.describe(point), dict(point), status, speedup))
    return attempts


def run_search(seed, generations, count=4):
    history = []
    for iteration in range(generations):
        chosen = choose_points(SPACE, history, count, generator_for("toy", seed, iteration))
        history += evaluate(iteration, [point for point, _ in chosen])
    return history


def best_speedup(history):
    return max((a.speedup or 0.0) for a in history)


def test_first_iteration_is_default_and_its_neighbours():
    chosen = choose_points(SPACE, [], 5, generator_for("toy", 0, 0))
    points = [point for point, _ in chosen]
    assert points[0] == toy.DEFAULT
    neighbours = [SPACE.key(p) for p in SPACE.neighbours(toy.DEFAULT)]
    assert all(SPACE.key(p) in neighbours for p in points[1:])
    assert all(parent == toy.DEFAULT for _, parent in chosen[1:])


def test_same_seed_and_history_give_the_same_points_and_another_seed_differs():
    first = run_search(seed=3, generations=4)
    again = run_search(seed=3, generations=4)
    other = run_search(seed=4, generations=4)
    assert [a.knobs for a in first] == [a.knobs for a in again]
    assert [a.knobs for a in first] != [a.knobs for a in other]


def test_never_proposes_a_point_twice_nor_an_invalid_one():
    history = run_search(seed=1, generations=25)
    keys = [SPACE.key(a.knobs) for a in history]
    assert len(keys) == 100
    assert len(set(keys)) == len(keys)
    assert all(toy.validate(a.knobs) == [] for a in history)


def test_failed_points_are_not_proposed_again_and_failing_values_lose_weight():
    # Everything with 4 stages failed so far, everything else was mediocre.
    history = []
    for index, point in enumerate(SPACE.neighbours(toy.DEFAULT) + [dict(toy.DEFAULT, num_stages=4, BLOCK=64)]):
        failed = point["num_stages"] == 4
        history.append(PastAttempt(0, index, "", point, "compile_error" if failed else "ok", None if failed else 1.0))
    failed_keys = {SPACE.key(a.knobs) for a in history if a.status != "ok"}
    proposed = []
    for iteration in range(1, 6):
        chosen = choose_points(SPACE, history, 4, generator_for("toy", 0, iteration))
        proposed += [p for p, _ in chosen]
        history += [PastAttempt(iteration, i, "", p, "ok", 1.0) for i, (p, _) in enumerate(chosen)]
    assert not failed_keys & {SPACE.key(p) for p in proposed}
    stats = KnobStatistics(SPACE, [Scored(p, 0.0) for p in proposed], [toy.DEFAULT | {"num_stages": 4}])
    assert stats.failure_rate("num_stages", 4) > stats.failure_rate("num_stages", 2)
    assert stats.score("num_stages", 4) < stats.score("num_stages", 2)


def test_learns_which_knobs_matter():
    history = run_search(seed=0, generations=8)
    accepted = [Scored(a.knobs, math.log(a.speedup)) for a in history if a.status == "ok"]
    failed = [a.knobs for a in history if a.status != "ok"]
    stats = KnobStatistics(SPACE, accepted, failed)
    # USE_FAST multiplies the speedup by exp(0.525) and BLOCK moves it a lot; stages never do.
    assert stats.signal("USE_FAST") > stats.signal("num_stages")
    assert stats.signal("BLOCK") > stats.signal("num_stages")
    assert stats.mean("USE_FAST", True) > stats.mean("USE_FAST", False)


def test_converges_toward_the_better_region_and_beats_random_search():
    valid = [dict(zip(SPACE.knobs, v)) for v in itertools.product(*toy.SPACE.values())]
    valid = [p for p in valid if not toy.validate(p)]
    budget = 40
    searched, randomly = [], []
    for seed in range(6):
        history = run_search(seed, generations=budget // 4)
        searched.append(best_speedup(history))
        sample = random.Random(seed).sample(valid, budget)
        randomly.append(max(objective(p) or 0.0 for p in sample))
        first, last = history[:4], history[-8:]
        assert max(a.speedup or 0 for a in last) > max(a.speedup or 0 for a in first), f"seed {seed}"
    # The default scores 0.22x; the optimum 3x. Search gets within reach of it on every seed.
    assert min(searched) >= 2.0, searched
    assert sorted(searched)[3] > sorted(randomly)[3], (searched, randomly)


def test_hints_in_the_notebook_steer_the_next_points():
    history = run_search(seed=0, generations=2)
    rng = generator_for("toy", 0, 2)
    chosen = choose_points(SPACE, history, 4, rng, hints=["try SPLIT=16 with block=64", "nothing useful here"])
    first = chosen[0][0]
    assert first["SPLIT"] == 16 and first["BLOCK"] == 64
    assert knob_overrides(SPACE, ["use_fast: true", "BT=32", "num_warps=3"]) == [{"USE_FAST": True}]


def test_a_small_space_runs_out_and_says_so():
    import types

    tiny = types.ModuleType("tiny_space")
    tiny.SPACE = {"A": (1, 2), "B": ("x", "y")}
    tiny.DEFAULT = {"A": 1, "B": "x"}
    tiny.render = lambda p: f"A = {p['A']}\n"
    space = KnobSpace(tiny)
    history = []
    for iteration in range(3):
        chosen = choose_points(space, history, 3, generator_for("tiny", 0, iteration))
        history += [PastAttempt(iteration, i, "", p, "ok", 1.0) for i, (p, _) in enumerate(chosen)]
    assert len(history) == 4
    assert choose_points(space, history, 3, generator_for("tiny", 0, 9)) == []


def test_rendered_candidates_are_python_defining_kernel_with_their_knobs():
    for point, _ in choose_points(SPACE, run_search(0, 3), 4, generator_for("toy", 0, 3)):
        source = toy.render(point)
        tree = ast.parse(source)
        assert "kernel" in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert f"BLOCK = {point['BLOCK']}" in source


def test_history_from_another_space_version_is_ignored_not_fatal():
    history = [
        PastAttempt(0, 0, "", {"BLOCK": 48, "num_warps": 2}, "ok", 1.2),
        PastAttempt(0, 1, "", None, "proposal_error", None),
        PastAttempt(0, 2, "", {"BLOCK": 64, "old_knob": 1}, "ok", 1.1),
    ]
    chosen = choose_points(SPACE, history, 4, generator_for("toy", 0, 1))
    assert len(chosen) == 4
    assert SPACE.key(dict(toy.DEFAULT, BLOCK=64)) not in {SPACE.key(p) for p, _ in chosen}


@pytest.mark.parametrize("count", [0, -1])
def test_count_must_be_positive(count):
    with pytest.raises(ValueError, match=f"got {count}"):
        choose_points(SPACE, [], count, generator_for("toy", 0, 0))


@pytest.mark.parametrize("count", [1, 2, 5])
def test_hints_never_push_the_batch_past_count(count):
    chosen = choose_points(SPACE, [], count, generator_for("toy", 0, 0), hints=["SPLIT=4", "BLOCK=64", "num_warps=8"])
    assert len(chosen) == count
    assert chosen[0][0]["SPLIT"] == 4


def test_a_roofline_goal_follows_the_roofline_not_the_speedup():
    # Two accepted points: A is faster than the baseline, B closer to the roofline.
    a = dict(toy.DEFAULT, BLOCK=16)
    b = dict(toy.DEFAULT, BLOCK=256)
    history = [
        PastAttempt(0, 0, "", a, "ok", speedup=3.0, roofline=0.1),
        PastAttempt(0, 1, "", b, "ok", speedup=1.0, roofline=0.9),
    ]

    def parents(objective):
        chosen = choose_points(SPACE, history, 8, generator_for("toy", 0, 1), objective=objective)
        return [parent["BLOCK"] for _, parent in chosen if parent is not None]

    assert parents("roofline").count(256) > parents("roofline").count(16)
    assert parents("speedup").count(16) > parents("speedup").count(256)


def test_a_retry_on_another_worker_process_proposes_the_same(tmp_path):
    """String hashing differs between processes; the proposal must not."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import json, sys\n"
        "from kernels.knob_space import KnobSpace\n"
        "from activities.proposers.search import choose_points, generator_for\n"
        "from activities.proposers.base import PastAttempt\n"
        "import kernels.mla.space as m\n"
        "space = KnobSpace(m)\n"
        "history = []\n"
        "for it in range(4):\n"
        "    chosen = choose_points(space, history, 4, generator_for('mla-decode', 5, it), hints=['num_warps=8'])\n"
        "    history += [PastAttempt(it, i, '', p, 'ok', 1.0 + 0.1 * i) for i, (p, _) in enumerate(chosen)]\n"
        "print(json.dumps([h.knobs for h in history]))\n"
    )
    outputs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
            cwd=Path(__file__).resolve().parents[3],
        )
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1] and len(outputs[0]) == 16
