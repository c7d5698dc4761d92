"""Marathon: durable, long-horizon GPU kernel optimization on Temporal.

This package holds the CLI, settings, the embedded dev stack and the worker entry points.
It must stay light to import: workflow modules may import settings and types from here.
"""

__version__ = "0.1.0"
