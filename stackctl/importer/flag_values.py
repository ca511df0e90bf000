"""How vLLM reads a flag and its value: the flag's spelling (underscores, dotted config keys), human-readable integers
(32k, 32K), JSON and dotted forms of the config flags merged as vLLM merges them, and values a recipe can hold on one
line."""

from __future__ import annotations

import json
import re

from stackctl.importer.draft import CONTROL

INVALID = object()  # a config flag's value that is neither JSON nor a dotted key's plain value


def flag_name(token: str) -> str:
    """vLLM's spelling of a flag: underscores become dashes in the name (before any `.` or `=`)."""
    if not token.startswith("--"):
        return token.split("=", 1)[0]
    name = token.split("=", 1)[0]
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail


def convert(value: str, converter):
    """value through converter (a type, or "human_int"); None when it does not convert."""
    try:
        if converter == "human_int":
            return _human_int(value)
        if converter is float:
            return float(value)
        return converter(value)
    except ValueError:
        return None


def _human_int(value: str) -> int:
    """vLLM's human-readable integers: 32k = 32000, 32K = 32768."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", value.strip())
    if not match:
        return int(value)
    number, suffix = match.groups()
    if suffix.islower():
        return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
    return int(number) * 1024 ** ("KMGT".index(suffix) + 1)


def merge_dict_flags(entries: list) -> dict | None:
    """Merge JSON / dotted forms of a config flag the way vLLM does; None when one is not a JSON object."""
    merged: dict = {}
    for _, dotted, value in entries:
        if value is INVALID:
            return None
        if dotted:
            target = merged
            keys = dotted.split(".")
            for key in keys[:-1]:
                target = target.setdefault(key, {})
                if not isinstance(target, dict):
                    return None
            target[keys[-1]] = value
        elif isinstance(value, dict):
            merged.update(value)
        else:
            return None
    return merged


def has_control(value) -> bool:
    """Whether a string, or any key or value nested in a dict or list, holds a control character."""
    if isinstance(value, str):
        return bool(CONTROL.search(value))
    if isinstance(value, dict):
        return any(has_control(k) or has_control(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_control(item) for item in value)
    return False


def one_line(token: str) -> str | None:
    """A token without control characters (the loader refuses them): multi-line JSON is compacted."""
    if not CONTROL.search(token):
        return token
    try:
        return json.dumps(json.loads(token), separators=(",", ":"))
    except ValueError:
        return None
