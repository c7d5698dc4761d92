"""Run files: the body of ``POST /runs`` written as TOML, for ``marathon run -f run.toml``.

The keys and their types are read from the API's own schema (``api.schemas.RunCreate``), so a field
the API gains is a key the file accepts, and the two cannot disagree. Here only the shape is checked
(known keys, TOML types, tables where the body nests); the values' limits stay with the API, which
says what is wrong with them. ``to_toml`` writes a body back as a run file that loads to the same body.
"""

from __future__ import annotations

import datetime
import difflib
import functools
import json
import re
import typing
from pathlib import Path
from typing import Any, Union

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib  # type: ignore[no-redef]

HEADER = (
    "# A Marathon run file: `marathon run -f FILE` starts this run (the body of POST /runs).\n"
    "# Keys left out take the API's defaults; flags given next to -f override the file.\n"
)
# Where the value itself is in the wrong place or form, in words a person reads.
EXPECTED = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false"}
ACCEPTS = {
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "boolean": lambda value: isinstance(value, bool),
    # A key whose type the schema does not name here: anything JSON can carry (no TOML dates).
    "any": lambda value: not isinstance(value, (datetime.date, datetime.time)),
}
TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean"}
# fullmatch: "$" would also match before a trailing newline, and "0\n" is no bare key.
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class RunFileError(ValueError):
    """What is wrong with a run file: one line per problem, each naming the file and the key."""

    def __init__(self, path: Union[str, Path], problems: list[str]):
        self.lines = [f"{path}: {problem}" for problem in problems]
        super().__init__("\n".join(self.lines))


@functools.lru_cache(maxsize=None)
def body_fields() -> dict[str, Any]:
    """Each key of the POST /runs body: its type's name, or for a table, the table's own keys."""
    from api.schemas import RunCreate

    return _model_fields(RunCreate)


def _model_fields(model) -> dict[str, Any]:
    from pydantic import BaseModel

    fields: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        # Optional[X] is X here: TOML has no null, and a key left out takes the API's default.
        choices = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if typing.get_origin(annotation) is Union and len(choices) == 1:
            annotation = choices[0]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields[name] = _model_fields(annotation)
        else:
            fields[name] = TYPE_NAMES.get(annotation, "any")
    return fields


def _shorthands() -> dict[str, tuple[str, ...]]:
    """Keys a table takes as short for others: ``[goal] speedup = 2.0`` means objective and target."""
    from workflows.types import OBJECTIVES

    return {"goal": tuple(OBJECTIVES)}


def load_run_file(path: Union[str, Path]) -> dict[str, Any]:
    """The POST /runs body in the run file at ``path``; ``RunFileError`` says what is wrong."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as error:
        raise RunFileError(path, [f"cannot read the run file: {error.strerror or error}"]) from None
    except UnicodeDecodeError as error:
        raise RunFileError(path, [f"not UTF-8 text (byte {error.start}); a run file is TOML, in UTF-8"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RunFileError(path, [f"not valid TOML: {error}"]) from None
    return check_body(data, path)


def check_body(data: dict[str, Any], path: Union[str, Path]) -> dict[str, Any]:
    """``data`` (a parsed run file) as a POST /runs body: numbers as floats where the API takes
    floats, the goal's shorthand spelled out. Raises ``RunFileError`` with every problem found."""
    problems: list[str] = []
    body = _check_table(data, body_fields(), "", problems)
    if problems:
        raise RunFileError(path, problems)
    return body


def _check_table(data: dict[str, Any], fields: dict[str, Any], prefix: str, problems: list[str]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    shorthand = _shorthands().get(prefix.rstrip("."), ())
    for key, value in data.items():
        where = f"`{prefix}{key}`"
        if key in shorthand:
            if not ACCEPTS["number"](value):
                problems.append(f"{where} must be a number, got {_describe(value)}")
            elif "objective" in data or "target" in data or any(other in data for other in shorthand if other != key):
                problems.append(
                    f"{where} is short for objective = {_toml_value(key)} and target: "
                    f"give one or the other, not both"
                )
            else:
                table["objective"], table["target"] = key, float(value)
            continue
        if key not in fields:
            problems.append(f"unknown key {where}{_suggestion(key, fields, prefix)}")
            continue
        expected = fields[key]
        if isinstance(expected, dict):
            if isinstance(value, dict):
                table[key] = _check_table(value, expected, f"{prefix}{key}.", problems)
            else:
                problems.append(
                    f"{where} must be a table ([{prefix}{key}] with its keys below), got {_describe(value)}"
                )
        elif not ACCEPTS[expected](value):
            problems.append(f"{where} must be {EXPECTED.get(expected, 'no date or time')}, got {_describe(value)}")
        else:
            table[key] = float(value) if expected == "number" else value
    return table


def _all_keys(fields: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for name, expected in fields.items():
        keys.append(prefix + name)
        if isinstance(expected, dict):
            keys += _all_keys(expected, f"{prefix}{name}.")
    return keys


def _suggestion(key: str, fields: dict[str, Any], prefix: str) -> str:
    """`` (did you mean `budget.iterations`?)``, or the keys this table takes when nothing is close."""
    names = list(fields) + list(_shorthands().get(prefix.rstrip("."), ()))
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if close:
        return f" (did you mean `{prefix}{close[0]}`?)"
    # The key may belong in another table (`iterations` at the top is `budget.iterations`).
    everywhere = [path for path in _all_keys(body_fields()) if path != prefix + key]
    leaf = {path: path.rsplit(".", 1)[-1] for path in everywhere}
    same = [path for path, name in leaf.items() if name == key]
    close = same or [path for path, name in leaf.items() if difflib.get_close_matches(key, [name], cutoff=0.8)]
    close = close or [path for path, name in leaf.items() if len(key) >= 4 and key in name]
    if close:
        return f" (did you mean `{close[0]}`?)"
    where = f"[{prefix.rstrip('.')}]" if prefix else "a run file"
    return f"; {where} takes: " + ", ".join(names)


def _describe(value: Any) -> str:
    """How a TOML value reads in a message: its type, and the value when it is short."""
    if isinstance(value, bool):
        return f"a boolean ({_toml_value(value)})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({_toml_value(value)})"
    if isinstance(value, str):
        return f"a string ({_toml_value(value if len(value) <= 40 else value[:37] + '...')})"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__.replace('datetime', 'date-time')} ({value})"


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it, table by table: a key in both takes override's value."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def to_toml(body: dict[str, Any]) -> str:
    """``body`` as a run file: the header, the plain keys, then one ``[table]`` per nested table."""
    return HEADER + "\n".join(_table_lines(body, ())) + "\n"


def _table_lines(table: dict[str, Any], path: tuple[str, ...]) -> list[str]:
    lines = [f"{_toml_key(key)} = {_toml_value(value)}" for key, value in table.items() if not isinstance(value, dict)]
    for key, value in table.items():
        if isinstance(value, dict):
            lines += ["", "[" + ".".join(_toml_key(part) for part in (*path, key)) + "]"]
            lines += _table_lines(value, (*path, key))
    return lines


def _toml_key(key: str) -> str:
    return key if BARE_KEY.fullmatch(key) else _toml_value(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        # repr keeps every digit of a float and writes 2.0, 1e-05, inf and nan as TOML does.
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(key)} = {_toml_value(item)}" for key, item in value.items()) + "}"
    raise TypeError(f"a run file cannot hold {type(value).__name__} values ({value!r})")
