'''The files of an exported kernel package (kernels/export.py), with ``{{NAME}}`` placeholders.

Kept as Python strings, not data files, so they travel with Marathon however it is installed.
The generated package imports only torch, triton and the standard library.
'''

INIT = '''"""{{TITLE}}: the best kernel Marathon found, as a function.

    from {{PACKAGE}} import {{FUNCTION}}
    out = {{FUNCTION}}({{PARAMETERS}})

``{{FUNCTION}}`` takes the problem's inputs (problem ``{{PROBLEM}}``) and returns its output. It
launches Triton kernels and allocates with torch, nothing else (the rules it was judged under),
so on a GPU it can be captured in a CUDA graph: ``graphed(...)`` does it for fixed inputs.

``MEASURED`` is what the judge measured (device, baseline, ratios per shape, date) and
``PROVENANCE`` where the kernel came from (run, attempt, versions); README.md shows both.
Test it: ``python -m {{PACKAGE}}.test_kernel`` (set TRITON_INTERPRET=1 on a machine without a GPU).
"""

from __future__ import annotations

import json
from pathlib import Path

from {{PACKAGE}}.kernel import kernel

_HERE = Path(__file__).parent
MEASURED = json.loads((_HERE / "measured.json").read_text())
PROVENANCE = json.loads((_HERE / "provenance.json").read_text())

__all__ = ["MEASURED", "PROVENANCE", "{{FUNCTION}}", "graphed", "kernel"]


def {{FUNCTION}}({{PARAMETERS}}):
    """The problem's function, computed by the exported kernel (shapes and dtypes as the problem
    ``{{PROBLEM}}`` defines them; see README.md)."""
    return kernel({{ARGUMENTS}})


def graphed(**inputs):
    """A function of no arguments that replays one CUDA graph of ``{{FUNCTION}}(**inputs)``:
    write new values into the same ``inputs`` tensors, call it, read the returned tensor.
    Warms up (Triton compiles) on a side stream first, as CUDA graph capture requires."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("graphed() needs a CUDA GPU: CUDA graphs do not exist on the CPU")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            kernel(**inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = kernel(**inputs)

    def replay():
        graph.replay()
        return out

    return replay
'''

TEST = '''"""The reference test of the exported kernel: its output against float64 references saved at
export (the problem's small shapes), compared by the rule its judge used. Runs on a GPU when
there is one, else on the CPU under Triton's interpreter (set TRITON_INTERPRET=1 before Python
starts). On a GPU it also checks that a CUDA graph of the function gives the same output.

    python -m {{PACKAGE}}.test_kernel          (or: pytest --pyargs {{PACKAGE}}.test_kernel)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from {{PACKAGE}} import graphed, {{FUNCTION}}

CASES = Path(__file__).with_name("cases.pt")


def _device() -> str:
    return "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


def _moved(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _verdict(out, ref, rule) -> str | None:
    if tuple(out.shape) != tuple(ref.shape):
        return f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if rule["kind"] == "exact":
        wrong = int((out.cpu().long() != ref.long()).sum())
        return f"{wrong} values differ (compared exactly)" if wrong else None
    out = out.detach().cpu().double()
    if not bool(torch.isfinite(out).all()):
        return "NaN/Inf in the output"
    if rule["kind"] == "allclose":
        excess = (out - ref).abs() - (rule["atol"] + rule["rtol"] * ref.abs())
        return f"{int((excess > 0).sum())} values outside atol/rtol" if bool((excess > 0).any()) else None
    error = float((out - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt().clamp_min(1e-30))
    return f"relative RMS error {error:.3e} > {rule['rms']:.1e}" if error > rule["rms"] else None


def test_the_kernel_matches_the_reference():
    device = _device()
    cases = torch.load(CASES, weights_only=True)[device]
    assert cases, "no saved cases"
    for case in cases:
        inputs = {k: _moved(v, device) for k, v in case["inputs"].items()}
        wrong = _verdict({{FUNCTION}}(**inputs), case["reference"], case["rule"])
        assert wrong is None, f"at {case['shape']} on {device}: {wrong}"


def test_a_cuda_graph_of_it_gives_the_same_output():
    if _device() != "cuda":
        print("skipped: CUDA graphs need a GPU")
        return
    case = torch.load(CASES, weights_only=True)["cuda"][0]
    inputs = {k: _moved(v, "cuda") for k, v in case["inputs"].items()}
    eager = {{FUNCTION}}(**inputs).clone()
    replay = graphed(**inputs)
    assert torch.equal(replay(), eager)


if __name__ == "__main__":
    test_the_kernel_matches_the_reference()
    test_a_cuda_graph_of_it_gives_the_same_output()
    print(f"{{PACKAGE}}: the kernel matches its reference on {_device()}")
    sys.exit(0)
'''

PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{{PACKAGE}}"
version = "{{VERSION}}"
description = "{{TITLE}}: the best kernel of Marathon run {{RUN}}"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["torch", "triton"]

[tool.setuptools]
packages = ["{{PACKAGE}}"]

[tool.setuptools.package-data]
"{{PACKAGE}}" = ["*.json", "*.pt"]
'''

README = '''# {{PACKAGE}}

{{TITLE}}: the best kernel of Marathon run `{{RUN}}` (problem `{{PROBLEM}}`), as a package.

```
pip install .                           # in the folder holding this README
python -m {{PACKAGE}}.test_kernel       # TRITON_INTERPRET=1 on a machine without a GPU
```

```python
from {{PACKAGE}} import {{FUNCTION}}, graphed
out = {{FUNCTION}}({{PARAMETERS}})       # inputs as the problem defines them
replay = graphed({{ARGUMENTS}})          # GPU: one CUDA graph of it, for fixed input tensors
```

## Measured

{{TABLE}}

## Provenance

{{PROVENANCE}}
'''
