"""Checks on values before they enter the draft recipe: control characters, the recipe fields' limits, nulls."""

from __future__ import annotations

import math
import re

CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def clean(text: str) -> str:
    """Text on one line: control characters (newlines) would end a TOML comment or an error line."""
    return CONTROL.sub(" ", text)


def fits(cls, key: str, value) -> bool:
    """Whether value meets the recipe field's declared constraints, so the imported recipe loads."""
    meta = cls._fields[key].meta
    if isinstance(value, str) and CONTROL.search(value):
        return False
    if "choices" in meta and value not in meta["choices"]:
        return False
    if "pattern" in meta and isinstance(value, str) and not re.match(meta["pattern"], value):
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if "minimum" in meta and value < meta["minimum"] or "maximum" in meta and value > meta["maximum"]:
            return False
        if "exclusive_minimum" in meta and value <= meta["exclusive_minimum"]:
            return False
    return True


def drop_nulls(config: dict, prefix: str = "") -> list[str]:
    """Remove null values (and lists holding one) from a nested config in place; return their dotted names."""
    dropped = []
    for key in list(config):
        if config[key] is None:
            del config[key]
            dropped.append(prefix + key)
        elif isinstance(config[key], dict):
            dropped += drop_nulls(config[key], f"{prefix}{key}.")
        elif isinstance(config[key], list) and any(item is None for item in config[key]):
            del config[key]
            dropped.append(prefix + key)
    return dropped
