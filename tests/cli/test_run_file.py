"""Run files: `marathon run -f run.toml` takes every field of POST /runs; flags override
the file; `--print-config` prints the merged body as a run file that loads back to the same body; every
mistake names the file and the key. No stack here: these runs are printed, never started
(test_client_commands starts one from a file against a live API)."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.schemas import RunCreate
from marathon.cli import main
from marathon.commands.run_file import HEADER, check_body, load_run_file, to_toml, tomllib
from tests.cli.stack import REPO, free_ports

# Every field of POST /runs, each set away from its default, as a person would write it.
FULL_RUN_FILE = """\
problem = "kda"
candidates_per_iteration = 3
evaluations_in_flight = 6
gpu_arch = "cpu"
from_run = "kda-20261202-parent"

[goal]
objective = "roofline"
target = 0.6
tolerance = 0.05
intent = "beat FLA at long contexts"

[budget]
iterations = 120
hours = 12
gpu_seconds = 3600
tokens = 2_000_000
plateau_iterations = 25
usd = 3.5

[proposer]
kind = "llm"
model = "qwen2.5-coder"
base_url = "http://127.0.0.1:8080/v1"
temperature = 0.4
seed = 7
max_tool_calls = 20
max_output_tokens = 2048
usd_per_million_tokens = 0.5
"""
FULL_BODY = {
    "problem": "kda",
    "candidates_per_iteration": 3,
    "evaluations_in_flight": 6,
    "gpu_arch": "cpu",
    "from_run": "kda-20261202-parent",
    "goal": {"objective": "roofline", "target": 0.6, "tolerance": 0.05, "intent": "beat FLA at long contexts"},
    "budget": {"iterations": 120, "hours": 12.0, "gpu_seconds": 3600.0, "tokens": 2_000_000, "plateau_iterations": 25,
               "usd": 3.5},
    "proposer": {
        "kind": "llm", "model": "qwen2.5-coder", "base_url": "http://127.0.0.1:8080/v1", "temperature": 0.4, "seed": 7,
        "max_tool_calls": 20, "max_output_tokens": 2048, "usd_per_million_tokens": 0.5,
    },
}


def cli(capsys, *argv):
    """``marathon ARGV`` in-process: (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path, text, name="run.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def printed_body(capsys, *argv):
    """The body `marathon run ARGV --print-config` prints, parsed back; the header is checked too."""
    code, out, err = cli(capsys, "run", *argv, "--print-config")
    assert (code, err) == (0, ""), err
    assert out.startswith(HEADER)
    return tomllib.loads(out)


def schema_keys(model=RunCreate, prefix="") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        keys.add(prefix + name)
        nested = field.annotation
        if isinstance(nested, type) and hasattr(nested, "model_fields"):
            keys |= schema_keys(nested, f"{prefix}{name}.")
    return keys


def body_keys(body, prefix="") -> set[str]:
    keys = set()
    for name, value in body.items():
        keys.add(prefix + name)
        if isinstance(value, dict):
            keys |= body_keys(value, f"{prefix}{name}.")
    return keys


# ---- parse -------------------------------------------------------------------------------------


def test_a_run_file_takes_every_field_of_post_runs(tmp_path):
    assert body_keys(FULL_BODY) == schema_keys(), (
        "POST /runs gained or lost a field: FULL_RUN_FILE here and the README's run file should show it"
    )
    body = load_run_file(write(tmp_path, FULL_RUN_FILE))
    assert body == FULL_BODY
    assert isinstance(body["budget"]["hours"], float) and isinstance(body["budget"]["tokens"], int)
    # The API's own schema takes the body as it is and keeps every value.
    assert RunCreate.model_validate(body).model_dump(exclude_none=True) == FULL_BODY


def test_dotted_keys_inline_tables_and_the_goal_shorthand(tmp_path):
    text = (
        'problem = "mla-decode"\nbudget.iterations = 40\nproposer = {kind = "search", seed = 3}\n'
        "[goal]\nspeedup = 2\n"
    )
    body = load_run_file(write(tmp_path, text))
    assert body == {
        "problem": "mla-decode",
        "budget": {"iterations": 40},
        "proposer": {"kind": "search", "seed": 3},
        "goal": {"objective": "speedup", "target": 2.0},
    }
    RunCreate.model_validate(body)


# ---- flags override the file -------------------------------------------------------------------


def test_flags_override_the_file_key_by_key(capsys, tmp_path):
    path = write(tmp_path, FULL_RUN_FILE)
    body = printed_body(
        capsys, "mla-decode", "-f", str(path), "--goal", "2.5", "--objective", "speedup", "--iterations", "9",
        "--proposer", "search", "--candidates", "1",
    )
    assert body["problem"] == "mla-decode"
    # A flag replaces one key of a table; the file's other keys in that table stay.
    assert body["goal"] == {**FULL_BODY["goal"], "objective": "speedup", "target": 2.5}
    assert body["budget"] == {**FULL_BODY["budget"], "iterations": 9}
    assert body["proposer"] == {**FULL_BODY["proposer"], "kind": "search"}
    assert body["candidates_per_iteration"] == 1 and body["gpu_arch"] == "cpu"


def test_without_flags_the_file_is_the_body_and_without_a_file_the_flags_are(capsys, tmp_path):
    assert printed_body(capsys, "-f", str(write(tmp_path, FULL_RUN_FILE))) == FULL_BODY
    assert printed_body(capsys, "kda", "--goal", "2", "--seed", "4") == {
        "problem": "kda", "goal": {"target": 2.0}, "proposer": {"seed": 4},
    }


def test_a_flag_target_replaces_the_files_goal_shorthand(capsys, tmp_path):
    path = write(tmp_path, 'problem = "kda"\ngoal = {roofline = 0.5}\n')
    assert printed_body(capsys, "-f", str(path), "--goal", "0.7")["goal"] == {"objective": "roofline", "target": 0.7}


# ---- --print-config round-trips, and starts nothing ----------------------------------------------


def test_printing_then_feeding_back_gives_the_same_body_and_the_same_text(capsys, tmp_path):
    intent = 'quotes " and \\ backslashes, a tab\t, a newline\n, unicode ✓, DEL \x7f and a bell \x07'
    path = write(tmp_path, FULL_RUN_FILE)
    first = cli(capsys, "run", "-f", str(path), "--iterations", "77", "--print-config")[1]
    body = tomllib.loads(first)
    printed = write(tmp_path, first, "printed.toml")
    second = cli(capsys, "run", "-f", str(printed), "--print-config")[1]
    assert second == first
    assert load_run_file(printed) == body == {**FULL_BODY, "budget": {**FULL_BODY["budget"], "iterations": 77}}

    odd = write(tmp_path, to_toml({"problem": "kda", "goal": {"intent": intent, "target": 1e-05}}), "odd.toml")
    assert load_run_file(odd) == {"problem": "kda", "goal": {"intent": intent, "target": 1e-05}}


TOML_TEXT = st.text(st.characters(blacklist_categories=("Cs",)))
SCALARS = st.one_of(
    TOML_TEXT, st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False),
    st.lists(st.one_of(TOML_TEXT, st.integers(-(2**63), 2**63 - 1)), max_size=3),
)
BODIES = st.dictionaries(
    TOML_TEXT, st.one_of(SCALARS, st.dictionaries(TOML_TEXT, SCALARS, max_size=4)), max_size=5
)


@given(BODIES)
def test_to_toml_writes_any_body_tomllib_reads_back_unchanged(body):
    assert tomllib.loads(to_toml(body)) == body


@pytest.mark.parametrize("body", [{"0\n": ""}, {"0\n": {}}, {"goal\n": {"speedup\n": 2.0}}])
def test_a_key_ending_in_a_newline_is_quoted(body):
    # Hypothesis found these: a "$" pattern took "0\n" for a bare key and wrote it unquoted.
    assert tomllib.loads(to_toml(body)) == body


def test_print_config_never_reaches_the_api(capsys):
    (port,) = free_ports(1)  # nothing listens there: a request would fail with exit 1
    code, out, err = cli(capsys, "run", "kda", "--api-url", f"http://127.0.0.1:{port}", "--print-config")
    assert (code, err) == (0, "")
    assert tomllib.loads(out) == {"problem": "kda"}


# ---- what is wrong, in words that name the file and the key -------------------------------------


def errors(capsys, tmp_path, text):
    """The lines `marathon run -f FILE` prints for a bad file; it exits 2 and starts nothing."""
    path = write(tmp_path, text) if isinstance(text, str) else write_bytes(tmp_path, text)
    code, out, err = cli(capsys, "run", "-f", str(path), "--api-url", "http://127.0.0.1:9", "--print-config")
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert all(line.startswith(f"marathon: {path}: ") for line in lines), err
    return [line.removeprefix(f"marathon: {path}: ") for line in lines]


def write_bytes(tmp_path, data):
    path = tmp_path / "run.toml"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'problem = "kda"\n[budget]\niteration = 5\n',
            "unknown key `budget.iteration` (did you mean `budget.iterations`?)",
        ),
        ('problem = "kda"\n[proposr]\nkind = "llm"\n', "unknown key `proposr` (did you mean `proposer`?)"),
        ('problem = "kda"\niterations = 5\n', "unknown key `iterations` (did you mean `budget.iterations`?)"),
        ('problem = "kda"\n[budget]\nkind = "llm"\n', "unknown key `budget.kind` (did you mean `proposer.kind`?)"),
        ('problem = "kda"\ncandidates = 2\n', "unknown key `candidates` (did you mean `candidates_per_iteration`?)"),
        (
            'problem = "kda"\ncolour = "red"\n',
            "unknown key `colour`; a run file takes: "
            "problem, goal, budget, proposer, candidates_per_iteration, evaluations_in_flight, gpu_arch, from_run",
        ),
        (
            'problem = "kda"\n[goal]\nzzz = 1\n',
            "unknown key `goal.zzz`; [goal] takes: objective, target, tolerance, intent, speedup, roofline",
        ),
    ],
    ids=["close-in-table", "close-table", "other-table", "other-table-exact", "prefix", "none-top", "none-goal"],
)
def test_unknown_keys_get_a_did_you_mean_or_the_keys_there_are(capsys, tmp_path, text, message):
    assert errors(capsys, tmp_path, text) == [message]


@pytest.mark.parametrize(
    "text, message",
    [
        ('budget.iterations = "200"\n', '`budget.iterations` must be an integer, got a string ("200")'),
        ('problem = "kda"\n[budget]\niterations = 2.5\n', "`budget.iterations` must be an integer, got a float (2.5)"),
        ('problem = "kda"\nbudget.iterations = true\n', "`budget.iterations` must be an integer, got a boolean (true)"),
        ('problem = "kda"\n[budget]\nhours = 2024-01-01\n', "`budget.hours` must be a number, got a date (2024-01-01)"),
        ('problem = "kda"\ngoal.target = "2x"\n', '`goal.target` must be a number, got a string ("2x")'),
        ("problem = 7\n", "`problem` must be a string, got an integer (7)"),
        ('problem = ["kda"]\n', "`problem` must be a string, got an array"),
        ('problem = "kda"\ngoal = 2.0\n', "`goal` must be a table ([goal] with its keys below), got a float (2.0)"),
        ('problem = "kda"\n[goal]\nspeedup = "2"\n', '`goal.speedup` must be a number, got a string ("2")'),
        (
            'problem = "kda"\n[goal]\nspeedup = 2\ntarget = 3\n',
            '`goal.speedup` is short for objective = "speedup" and target: give one or the other, not both',
        ),
    ],
    ids=["string-for-int", "float-for-int", "bool-for-int", "date-for-number", "string-for-number", "int-for-string",
         "array-for-string", "number-for-table", "shorthand-type", "shorthand-and-target"],
)
def test_a_wrong_type_names_the_key_and_the_type_expected(capsys, tmp_path, text, message):
    assert errors(capsys, tmp_path, text) == [message]


def test_every_mistake_in_a_file_is_reported_at_once(capsys, tmp_path):
    text = 'problem = "kda"\nseed = 3\n[budget]\nhours = "two"\niteratons = 4\n'
    assert errors(capsys, tmp_path, text) == [
        "unknown key `seed` (did you mean `proposer.seed`?)",
        '`budget.hours` must be a number, got a string ("two")',
        "unknown key `budget.iteratons` (did you mean `budget.iterations`?)",
    ]


def test_toml_syntax_errors_give_the_line(capsys, tmp_path):
    [line] = errors(capsys, tmp_path, 'problem = "kda"\n\n[budget\niterations = 3\n')
    assert line.startswith("not valid TOML: ") and "(at line 3, column" in line, line
    [line] = errors(capsys, tmp_path, 'problem = "kda"\ngoal = \n')
    assert line.startswith("not valid TOML: ") and "(at line 2, column" in line, line


def test_a_file_that_cannot_be_read_or_is_not_text(capsys, tmp_path):
    assert errors(capsys, tmp_path, b'problem = "k\xffda"\n') == [
        "not UTF-8 text (byte 12); a run file is TOML, in UTF-8"
    ]
    missing = tmp_path / "missing.toml"
    code, out, err = cli(capsys, "run", "-f", str(missing), "--print-config")
    assert (code, out, err) == (2, "", f"marathon: {missing}: cannot read the run file: No such file or directory\n")


def test_a_run_without_a_problem_is_a_usage_error(capsys, tmp_path):
    path = write(tmp_path, "[budget]\niterations = 3\n")
    code, out, err = cli(capsys, "run", "-f", str(path), "--print-config")
    assert (code, out) == (2, "")
    assert "usage: marathon run" in err and f'problem = "kda" in {path}' in err
    code, _, err = cli(capsys, "run", "--goal", "2")
    assert code == 2 and "which problem? give it as `marathon run PROBLEM`" in err


def test_the_printed_body_is_what_post_runs_takes(capsys, tmp_path):
    body = printed_body(capsys, "-f", str(write(tmp_path, FULL_RUN_FILE)), "--hours", "0.5")
    parsed = RunCreate.model_validate(json.loads(json.dumps(body)))
    assert parsed.budget.hours == 0.5 and math.isclose(parsed.goal.target, 0.6)



def test_the_readmes_run_file_is_one():
    # The README's other TOML (a package's entry points, "Your own kernel") is not a run file.
    [example] = [block for block in re.findall(r"```toml\n(.*?)```", (REPO / "README.md").read_text(), re.S)
                 if "entry-points" not in block]
    body = check_body(tomllib.loads(example), "README.md")
    assert body["problem"] == "kda" and body["budget"] == {"iterations": 200, "hours": 24.0}
    RunCreate.model_validate(body)
