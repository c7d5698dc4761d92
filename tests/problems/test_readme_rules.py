"""The README states the candidate rules where a user reads first, and they are the judge's:
the allowed modules listed there are exactly the policy's."""

from __future__ import annotations

import re

from kernels.judge.policy import ALLOWED_IMPORTS
from tests.problems.installed import REPO


def test_the_readme_lists_exactly_the_modules_the_judge_allows_before_its_first_command():
    readme = (REPO / "README.md").read_text()
    rules = readme[:readme.index("## Two commands")]
    listed = re.search(r"import only these modules:\s*(.*?);", rules, re.S)
    assert listed, "the candidate rules come before the first command"
    assert set(re.findall(r"`([\w_]+)`", listed.group(1))) == set(ALLOWED_IMPORTS)
    assert "compute only inside its own `@triton.jit` kernels" in rules
