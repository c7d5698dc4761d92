"""Checks every request model inherits (``Checked``): text the store can keep, and a bounded
number of keys per object.

The key bound keeps validation cheap: pydantic writes one error per unknown key, each echoing its
value, so an object with 60,000 unknown keys cost seconds of the event loop; refused up front it
costs one ``len``.
"""

from __future__ import annotations

from typing import Any, Optional, get_args

from pydantic import BaseModel, ValidationInfo, field_validator, model_validator

from api.text_safety import unstorable

# More keys than any request object has (fields plus the goal shorthand), with room to grow.
MAX_KEYS = 64
# How many of the keys a refusal names.
NAMED_KEYS = 5


def too_many_keys_message(count: int, names: list[str]) -> str:
    shown = ", ".join(repr(name[:40]) for name in names[:NAMED_KEYS])
    more = f" and {count - NAMED_KEYS} more" if count > NAMED_KEYS else ""
    return (
        f"an object in this request takes at most {MAX_KEYS} keys, this one has {count} ({shown}{more}): "
        "send only the fields the schema lists"
    )


class Checked(BaseModel):
    """Base of the request models: refuses objects with too many keys before pydantic looks at
    them one by one, and any string field holding text that cannot be stored or echoed."""

    @model_validator(mode="before")
    @classmethod
    def _bounded_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and len(data) > MAX_KEYS:
            names = [str(key) for _, key in zip(range(NAMED_KEYS), data)]
            raise ValueError(too_many_keys_message(len(data), names))
        if isinstance(data, dict):
            for key in data:
                reason = unstorable(key) if isinstance(key, str) else None
                if reason is not None:
                    raise ValueError(f"a key {reason}")
        return data

    # Before pydantic's own checks: a pattern, for one, cannot even read such a string.
    @field_validator("*", mode="before")
    @classmethod
    def _storable_text(cls, value: Any, info: ValidationInfo) -> Any:
        reason = unstorable(value) if isinstance(value, str) else None
        if reason is not None:
            raise ValueError(f"{info.field_name} {reason}")
        if isinstance(value, float) and value.is_integer() and _takes_int(cls, info.field_name):
            # JSON Schema's integer includes 3.0; the models are strict (no "3", no true), not stricter.
            return int(value)
        return value


def _takes_int(model: type[BaseModel], name: Optional[str]) -> bool:
    field = model.model_fields.get(name or "")
    if field is None:
        return False
    kinds = (field.annotation, *get_args(field.annotation))
    return int in kinds and float not in kinds
