"""`marathon best RUN -o -` writes the kernel's source, and only it, to stdout (issue 13, item 8)."""

from __future__ import annotations

import contextlib

from marathon.cli import main
from marathon.commands import connection

SOURCE = "import triton\n\n\ndef kernel(**inputs):\n    return None\n"


class FakeClient:
    def best(self, run_id):
        attempt = {"iteration": 3, "index": 1, "status": "ok", "speedup": 1.5, "timing_kind": "gpu"}
        return {"source": SOURCE, "attempt": attempt, "report": {}}


def test_best_to_stdout(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(connection, "connect", lambda args: contextlib.nullcontext(FakeClient()))
    monkeypatch.chdir(tmp_path)
    assert main(["best", "kda-123", "-o", "-"]) == 0
    out, err = capsys.readouterr()
    assert out == SOURCE
    assert "the best kernel of run kda-123" in err and "speedup 1.5x" in err
    assert not (tmp_path / "-").exists()

    assert main(["best", "kda-123", "-o", "best.py"]) == 0
    out, _ = capsys.readouterr()
    assert (tmp_path / "best.py").read_text() == SOURCE
    assert out.startswith("wrote the best kernel of run kda-123 to best.py")
