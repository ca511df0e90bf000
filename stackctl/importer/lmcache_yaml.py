"""Reading an LMCache config file: PyYAML when installed, else a reader for the flat `key: value` form; and the
limits on what the importer reads (a launch script or LMCache config is a few kilobytes, so a huge input or a YAML
alias bomb is refused with a clear message in well under a second, instead of eating memory and time)."""

from __future__ import annotations

import json
import re

from stackctl.errors import StackctlError
from stackctl.importer.draft import clean

# -- limits on what the importer reads -----------------------------------------------------------------------------

MAX_INPUT_BYTES = 1_000_000  # launch scripts and LMCache configs in the wild are under 20 kB
MAX_YAML_NODES = 100_000  # values once aliases are expanded; an LMCache config has a few dozen


def check_yaml_size_and_aliases(text: str, source: str) -> None:
    """Refuse a YAML text that is too large, or whose aliases expand to more values than a config could hold (a
    "billion laughs" document is small, but every walk over its loaded value visits billions of nodes)."""
    if len(text) > MAX_INPUT_BYTES:
        raise StackctlError(f"{source}: {len(text):,} characters, more than an LMCache config can be "
                            f"({MAX_INPUT_BYTES:,}) (fix: check the file)")
    if "*" not in text:
        return
    try:
        import yaml
    except ImportError:
        return  # the flat reader accepts no aliases at all
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError):
        return  # the loader reports the problem itself
    if root is not None and _expanded_size(root) > MAX_YAML_NODES:
        raise StackctlError(f"{source}: its YAML aliases (*name) expand to more than {MAX_YAML_NODES:,} values: "
                            "refused, an LMCache config is a few dozen (fix: write the values out)")


def _expanded_size(root) -> int:
    """Number of nodes with every alias expanded, counted once per distinct node (aliases share the node object),
    children before parents, without recursion."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # a node inside itself (`&a [*a]`) never ends: as good as infinite
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else \
            list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if children_done or not children:
            sizes[id(node)] = min(1 + sum(sizes.get(id(c), 1) for c in children), MAX_YAML_NODES + 1)
            open_nodes.discard(id(node))
        elif id(node) in open_nodes:
            return MAX_YAML_NODES + 1
        else:
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]


# -- the reader ----------------------------------------------------------------------------------------------------

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
        quoted = re.match(r"'((?:[^']|'')*)'", text)
        if not quoted:
            raise StackctlError(f"{where}: unterminated quote")
        return quoted.group(1).replace("''", "'")
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
