"""A small TOML emitter for the values a recipe holds (no dependency): strings, integers, floats, booleans, arrays
and inline tables. Tests check that tomllib reads back the same values."""

from __future__ import annotations

import math
import re

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def toml_key(key: str) -> str:
    """A key, bare when TOML allows it, else quoted."""
    if not isinstance(key, str):
        raise TypeError(f"TOML keys are strings, not {type(key).__name__}")
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_string(text: str) -> str:
    """A basic (double-quoted) TOML string; control characters escaped."""
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError("a lone surrogate cannot be written as TOML")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_value(value) -> str:
    """One value in TOML syntax (maps as inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -2 ** 63 <= value < 2 ** 63:
            raise ValueError(f"{value} does not fit a TOML integer")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")
