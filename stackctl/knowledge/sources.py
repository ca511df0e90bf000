"""Where each rule and doctor check gets its facts: stackctl/knowledge/sources.toml, one list of sources per id, shown
by `stackctl explain ID`. A source is "PACKAGE VERSION PATH:LINES (what it shows)"; stackctl's own Python code is cited
by name, "stackctl VERSION PATH::NAME[, ::NAME] (what it shows)", because its line numbers move with every edit; a
https:// address of a report may stand beside a source. New rules and checks add their table there; tests/unit/test_sources.py keeps every id cited."""

from __future__ import annotations

import functools
import os
import re

_SOURCES_FILE = os.path.join(os.path.dirname(__file__), "sources.toml")
# The forms of a source, as text: SOURCE, OWN_CODE and REPORT are compiled when first used (`__getattr__`), since
# only the tests and `explain` read them and compiling SOURCE cost `validate` ~1 ms at start-up.
_FORMS = {
    "SOURCE": r"^(?P<package>\S+) (?P<version>\S+) (?P<path>[^\s:]+):(?P<lines>\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)"
              r" \((?P<shows>.+)\)$",
    "OWN_CODE": r"^stackctl (?P<version>\S+) (?P<path>\S+\.py)::(?P<names>\w+(?:, ::\w+)*) \((?P<shows>.+)\)$",
    "REPORT": r"^https://\S+$",
}


def __getattr__(name: str) -> re.Pattern[str]:
    if name in _FORMS:
        return re.compile(_FORMS[name])  # re's cache compiles each once
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.lru_cache(maxsize=None)
def table() -> dict[str, list[str]]:
    """Every id's sources, as sources.toml lists them."""
    from stackctl import toml_parser

    with open(_SOURCES_FILE, encoding="utf-8") as handle:
        data = toml_parser.loads(handle.read())
    return {entry_id: list(entry.get("sources", [])) for entry_id, entry in data.items()}


@functools.lru_cache(maxsize=None)
def ids() -> frozenset[str]:
    """Every id with a table, read from the table headers alone: `validate` checks skip ids on its start-up path,
    where parsing the whole file as TOML took a tenth of the run (test_sources.py holds it to table())."""
    with open(_SOURCES_FILE, encoding="utf-8") as handle:
        headers = [line.strip()[1:-1] for line in handle if line.startswith("[") and line.strip().endswith("]")]
    return frozenset(header.strip('"') for header in headers)


def sources_of(entry_id: str) -> list[str]:
    """The sources of a rule or check id (empty when it has none)."""
    return table().get(entry_id, [])
