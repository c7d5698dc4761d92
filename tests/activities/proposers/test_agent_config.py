"""Choosing the agent proposer: ``[proposer] kind = "agent"`` in a run file, the REST body and the
CLI flag, with its caps; values out of range are refused with what is wrong."""

from __future__ import annotations

import pytest

from api.schemas import RunCreate
from marathon.commands.run_file import load_run_file
from workflows.types import Budget, ProposerConfig

AGENT_RUN_FILE = """\
problem = "kda"

[budget]
iterations = 10
tokens = 500_000
usd = 2.5

[proposer]
kind = "agent"
base_url = "http://127.0.0.1:11434/v1"
model = "qwen2.5-coder:32b"
max_tool_calls = 30
max_output_tokens = 4096
usd_per_million_tokens = 0.6
"""


def test_a_run_file_chooses_the_agent_with_its_caps(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text(AGENT_RUN_FILE)
    body = load_run_file(path)
    run = RunCreate.model_validate(body)
    config = run.proposer.to_config()
    assert config == ProposerConfig(kind="agent", model="qwen2.5-coder:32b", base_url="http://127.0.0.1:11434/v1",
                                    max_tool_calls=30, max_output_tokens=4096, usd_per_million_tokens=0.6)
    assert run.budget.to_budget() == Budget(iterations=10, tokens=500_000, usd=2.5)


def test_left_out_caps_keep_their_defaults():
    config = RunCreate.model_validate({"problem": "kda", "proposer": {"kind": "agent"}}).proposer.to_config()
    assert config.max_tool_calls == 12 and config.max_output_tokens is None and config.problems() == []


@pytest.mark.parametrize("config, message", [
    (ProposerConfig(kind="agent", max_tool_calls=201), "proposer max_tool_calls must be between 0 and 200, got 201"),
    (ProposerConfig(kind="agent", max_output_tokens=8), "proposer max_output_tokens must be >= 16, got 8"),
    (ProposerConfig(kind="agent", usd_per_million_tokens=-1.0), "proposer usd_per_million_tokens must be >= 0, got -1.0"),
])
def test_caps_out_of_range_say_why(config, message):
    assert config.problems() == [message]


def test_a_money_budget_must_be_positive():
    assert Budget(usd=0.0).problems() == ["budget usd must be > 0, got 0.0"]


def test_the_cli_flag_takes_agent(capsys):
    from marathon.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", "kda", "--proposer", "oracle", "--print-config"])
    assert exit_.value.code == 2
    assert "choose from search, llm, agent" in capsys.readouterr().err.replace("'", "")


def test_a_spent_money_budget_stops_the_run_and_agent_use_shows_in_budget_used():
    from workflows import rules
    from workflows.types import Goal, RunState

    spent = RunState(usd=1.2, tool_calls=7, model_calls=9, tokens=5000)
    assert rules.stop_reason(Goal(), Budget(usd=1.0), spent, 0.1) == "budget_usd"
    assert rules.stop_reason(Goal(), Budget(usd=2.0), spent, 0.1) == ""
    assert rules.budget_used(spent, 0.1) == {"iterations": 0.0, "hours": 0.1, "gpu_seconds": 0.0, "tokens": 5000.0,
                                             "usd": 1.2, "tool_calls": 7.0, "model_calls": 9.0}
    # Runs of the other proposers keep the four keys they always had.
    assert set(rules.budget_used(RunState(tokens=10), 0.1)) == {"iterations", "hours", "gpu_seconds", "tokens"}
