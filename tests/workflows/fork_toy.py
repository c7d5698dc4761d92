"""The proposers' toy problem (double a vector, an 800-point knob space) under a name these tests
can load from anywhere: ``"tests.workflows.fork_toy:PROBLEM"``."""

from dataclasses import replace

from tests.activities.proposers.proposer_toy_problem import PROBLEM as _TOY

PROBLEM = replace(_TOY, space="tests.activities.proposers.proposer_toy_space")
OBJECT_PATH = "tests.workflows.fork_toy:PROBLEM"
