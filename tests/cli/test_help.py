"""`marathon` alone and every `--help` (issue 13, item 8): a usage with one line per command, not
a developer docstring; every subcommand and argument explained, with an example."""

from __future__ import annotations

import argparse

import pytest

from marathon.cli import build_parser, main


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_marathon_alone_prints_usage_with_one_line_per_command(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: marathon COMMAND [options]")
    assert "Each subcommand lives in" not in out and "``" not in out
    commands = _subparsers(build_parser())
    lines = out.splitlines()
    for name in commands:
        [line] = [line for line in lines if line.split()[:1] == [name] and line.startswith("    ")]
        assert len(line.split()) > 2, line  # the name and its summary on the same line
    assert "marathon run kda" in out


@pytest.mark.parametrize("name", sorted(_subparsers(build_parser())))
def test_every_subcommand_and_argument_has_help_and_an_example(capsys, name):
    parser = _subparsers(build_parser())[name]
    assert parser.description and not parser.description.startswith(("``", '"""'))
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help and action.help is not argparse.SUPPRESS, f"{name}: {action.dest} has no help"
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: marathon {name} ")
    assert "example" in out
    assert f"  marathon {name}" in out.split("example")[-1] or f" marathon {name} " in out.split("example")[-1]
