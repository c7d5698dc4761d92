"""The KDA search space: validation, description, and rendered candidates that run correctly
under the Triton interpreter."""

import ast
import importlib.util
import random

import pytest

from kernels.kda import chunk, space
from kernels.kda.definition import make_inputs
from kernels.kda.reference import kda_reference


def load_source(source: str, tmp_path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_valid_points(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    points = []
    while len(points) < count:
        point = {knob: rng.choice(values) for knob, values in space.SPACE.items()}
        if not space.validate(point) and point != space.DEFAULT:
            points.append(point)
    return points


def test_default_is_the_kernel_config_and_valid():
    assert space.DEFAULT == chunk.CONFIG
    assert space.validate(space.DEFAULT) == []
    assert set(space.SPACE) == set(space.DEFAULT)
    assert all(space.DEFAULT[knob] in values for knob, values in space.SPACE.items())


def test_validate_names_what_is_wrong():
    point = dict(space.DEFAULT, chunk=48)
    assert space.validate(point) == ["chunk=48 is not one of [16, 32, 64]"]
    assert space.validate({"chunk": 32}) and "missing knobs" in space.validate({"chunk": 32})[0]
    assert "unknown knobs: ['colour']" in space.validate(dict(space.DEFAULT, colour=1))
    heavy = dict(space.DEFAULT, chunk=64, inter_dtype="float32", scan_num_stages=3)
    assert any("shared memory" in why for why in space.validate(heavy))
    assert space.validate(dict(space.DEFAULT, prep_variant="blocks")) == [
        "prep_variant='blocks' is not one of ['flat', 'split', 'subchunk']"]
    crowded = dict(space.DEFAULT, scan_block_v=128, scan_num_warps=2)
    assert any("registers" in why for why in space.validate(crowded))


def test_describe_is_one_line():
    line = space.describe(space.DEFAULT)
    assert "\n" not in line and f"chunk={space.DEFAULT['chunk']}" in line
    assert set(space.KNOBS) == set(space.SPACE)


def test_render_rejects_invalid_points():
    with pytest.raises(ValueError, match="chunk=48"):
        space.render(dict(space.DEFAULT, chunk=48))


def test_rendered_source_is_standalone():
    source = space.render(space.DEFAULT)
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported <= {"torch", "triton", "math"}
    assert "def kernel(q, k, v, g, beta, scale, initial_state)" in source


@pytest.mark.parametrize(
    "point",
    [space.DEFAULT, dict(space.DEFAULT, prep_variant="flat", chunk=64),
     dict(space.DEFAULT, prep_variant="subchunk", chunk=64, prep_block_k=32)] + random_valid_points(3, seed=2026),
    ids=lambda p: space.describe(p).replace(" ", "_")
)
def test_rendered_candidates_are_correct(point, tmp_path):
    module = load_source(space.render(point), tmp_path, "kda_candidate")
    assert module.CONFIG == point
    for shape, seed in (((1, 50, 2, 32), 1), ((2, 33, 1, 32), 2)):
        inputs = make_inputs(shape, seed=seed, device="cpu", dtype="float32")
        out, final = module.kernel(**inputs)
        ref, ref_final = kda_reference(**inputs, output_final_state=True)
        assert ((out - ref).norm() / ref.norm()).item() < 1e-4
        assert ((final - ref_final).norm() / ref_final.norm()).item() < 1e-4
