"""import_source: a rendered point becomes a module of this process with the point's knobs."""

import pytest

from kernels.config_source import import_source
from kernels.mla import space


def test_a_rendered_point_imports_with_its_knobs(tmp_path):
    point = {**space.DEFAULT, "block_h": 32, "num_warps": 4}
    module = import_source(space.render(point), "mla_point_bh32", tmp_path / "points")
    assert module.CONFIG == point
    assert (tmp_path / "points" / "mla_point_bh32.py").read_text() == space.render(point)
    assert callable(module.kernel)


def test_a_module_name_that_python_cannot_import_is_refused(tmp_path):
    with pytest.raises(ValueError, match="identifier"):
        import_source("x = 1\n", "fused-bf16", tmp_path)
