"""``problem check`` beyond the default point and the tiny shapes: the space at many points,
the bench shapes built once, declared input dtypes, and the warnings (no regime beyond the
default, an input that holds one value); and an object path ``problem check`` accepts is one
``marathon judge`` accepts too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from kernels.problem_check import check_problem
from kernels.space_check import space_points
from tests.problems.installed import REPO


def findings(name: str, build_bench: bool = False) -> dict[str, list]:
    found: dict[str, list] = {}
    for f in check_problem(name, run_judge=False, build_bench=build_bench):
        found.setdefault(f.check, []).append(f)
    return found


def test_a_validate_that_crashes_off_the_default_fails_with_where_it_crashed():
    space = findings("tests.problems.broken:SPACE_CRASHES_OFF_DEFAULT")["space"][0]
    assert not space.ok
    assert space.message.startswith("at 2 of 3 points, e.g. {'block': 16}: validate raised KeyError: 'blok' (at "
                                    "broken_validate.py:9 in validate: return [] if point[\"blok\"] > 0")


def test_a_large_space_is_sampled_around_its_default_and_at_random():
    space = {f"k{i}": tuple(range(4)) for i in range(6)}  # 4096 points
    default = {k: 0 for k in space}
    points = space_points(space, default)
    assert len(points) == 256 and points[0] == default
    assert all({**default, k: v} in points for k in space for v in space[k])
    assert points == space_points(space, default)  # the same points every time


def test_a_reference_that_fails_only_at_a_bench_shape_is_found_on_the_cpu():
    build = findings("tests.problems.broken:FAILS_AT_SIZE", build_bench=True)["bench build"][0]
    assert not build.ok
    assert build.message.startswith("at bench shape N=1048576: raised MemoryError: this reference holds a "
                                    "1048576 x 1048576 matrix")


def test_a_sound_problem_says_what_the_bench_build_covered():
    build = findings("tests.problems.scaled:PROBLEM", build_bench=True)["bench build"][0]
    assert build.ok and not build.warning
    assert "built once at each bench shape on the CPU: N=1048576 built in" in build.message


def test_an_input_whose_declared_dtype_is_lost_fails_the_inputs_check():
    inputs = findings("tests.problems.argmin:MASK_CAST_TO_FLOAT")["inputs"][0]
    assert not inputs.ok
    assert ("make_inputs(dtype='float32') gives 'mask' as float32; input_dtypes says bool: cast with "
            "kernels.problem.place_inputs") in inputs.message


def test_no_regime_beyond_the_default_is_a_warning_with_the_usual_ones():
    found = findings("tests.problems.scaled:PROBLEM")
    warning = found["regimes"][0]
    assert warning.ok and warning.warning and warning.render().startswith("warn  regimes: no input regime beyond")
    assert "signs, ties, zeros, extremes" in warning.message
    assert "regimes" not in findings("tests.problems.argmin:PROBLEM")  # it declares 'ties'


def test_an_input_of_one_value_everywhere_is_a_warning():
    found = findings("tests.problems.broken:CONSTANT_WEIGHT")
    assert all(f.ok for fs in found.values() for f in fs if not f.warning), found
    messages = [f.message for f in found["input values"]]
    assert messages == ["input 'weight' holds one value everywhere (1) at N=100: a kernel that ignores it passes; "
                        "draw varied values (weights are inputs)"]


def test_an_object_path_next_to_you_works_in_judge_as_in_problem_check(tmp_path):
    # The `marathon` console script, not `python -m` (which puts the current directory on the
    # path by itself): that is what a user runs.
    package = tmp_path / "my_scaled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    scaled = (REPO / "tests" / "problems" / "scaled.py").read_text()
    (package / "definition.py").write_text(scaled.replace("tests.problems.scaled", "my_scaled.definition"))
    candidate = tmp_path / "candidate.py"
    candidate.write_text(scaled_seed())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    script = shutil.which("marathon", path=os.path.dirname(sys.executable))
    assert script, "the marathon console script is installed next to this interpreter"
    result = subprocess.run([script, "judge", str(candidate), "--problem", "my_scaled.definition:PROBLEM",
                             "--device", "cpu", "--quiet"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok: accepted")


def scaled_seed() -> str:
    from tests.problems.scaled import DEFAULT, render

    return render(DEFAULT)
