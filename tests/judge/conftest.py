"""The judge's tests load their toy problem and corpus as ``tests.judge.*`` (the same object
path the judge's child processes use), so the project root must be importable here too."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.append(ROOT)
