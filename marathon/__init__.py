"""Marathon: durable, long-horizon GPU kernel optimization on Temporal.

This package holds the CLI, settings, the embedded dev stack and the worker entry points: the
edges where settings are read and passed down. Nothing below it (store/, activities/, workflows/,
kernels/) imports it (tests/test_import_boundaries.py).
"""

__version__ = "0.1.0"
