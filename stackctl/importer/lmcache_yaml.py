"""Reading an LMCache config file: PyYAML when installed, else a reader for the flat `key: value` form."""

from __future__ import annotations

import json
import re

from stackctl.errors import StackctlError
from stackctl.importer.input_limits import check_yaml_size_and_aliases
from stackctl.importer.values import clean

# The plain words YAML 1.1 reads as true, false and null.
_YAML_WORDS = ((("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"), True),
               (("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"), False),
               (("", "~", "null", "Null", "NULL"), None))


def read_lmcache_yaml(text: str, source: str = "LMCache config") -> dict:
    """An LMCache config file as a dict: PyYAML when installed, else a reader for the flat `key: value` form."""
    check_yaml_size_and_aliases(text, source)
    try:
        import yaml
    except ImportError:
        return read_flat_yaml(text, source)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise StackctlError(f"{source}: not valid YAML: {clean(str(exc))}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise StackctlError(f"{source}: must be a mapping of LMCache keys")
    return data


def read_flat_yaml(text: str, source: str = "LMCache config") -> dict:
    """The flat YAML stackctl writes (and most hand-written LMCache configs): `key: value` lines, values as JSON or
    plain YAML scalars, comments. Anything nested needs PyYAML."""
    if text.lstrip().startswith("{"):
        try:
            return dict(json.loads(text))
        except ValueError as exc:
            raise StackctlError(f"{source}: not valid JSON: {exc}") from None
    data = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_.-]*)\s*:(?:\s+(.*))?", line.rstrip())
        if line[:1] in (" ", "\t") or not match:
            raise StackctlError(f"{source}:{number}: only flat `key: value` lines can be read without PyYAML "
                                "(fix: pip install pyyaml)")
        data[match.group(1)] = _yaml_scalar(match.group(2) or "", f"{source}:{number}")
    return data


def _yaml_scalar(text: str, where: str):
    text = text.strip()
    if text[:1] in ('"', "{", "["):
        try:
            value, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            raise StackctlError(f"{where}: cannot read {text!r} without PyYAML (fix: pip install pyyaml)") from None
        if text[end:].strip() and not text[end:].strip().startswith("#"):
            raise StackctlError(f"{where}: unexpected text after the value")
        return value
    if text[:1] == "'":
        end = re.match(r"'((?:[^']|'')*)'", text)
        if not end:
            raise StackctlError(f"{where}: unterminated quote")
        return end.group(1).replace("''", "'")
    text = re.split(r"\s+#", text, maxsplit=1)[0].strip()
    # Plain scalars resolve as in YAML 1.1 (PyYAML's safe_load, which LMCache uses): `1e5` is a string there.
    for words, value in _YAML_WORDS:
        if text in words:
            return value
    if re.fullmatch(r"[-+]?(0|[1-9][0-9]*)", text):
        return int(text)
    if re.fullmatch(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+][0-9]+)?", text):
        return float(text)
    if re.fullmatch(r"[-+]?[0-9][0-9_:xXoObB.]*|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)", text) and \
            not re.search(r"[eE]", text) or text[:1] in "&*!|>%@`" or ": " in text:
        raise StackctlError(f"{where}: cannot read {text!r} without PyYAML (fix: pip install pyyaml)")
    return text
