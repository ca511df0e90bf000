"""A finding: one problem (or note) about a recipe, located at the line that caused it."""

from __future__ import annotations

_FIELDS = ("file", "line", "col", "key", "message", "fix", "rule_id", "severity")


class Finding:  # a plain class, not a dataclass: `validate` imports it, and dataclasses costs its start-up budget
    """file, line, col; key: dotted key path (cache.tiers[1].size_gb); rule_id: empty for load errors."""

    __slots__ = _FIELDS

    def __init__(self, file: str, line: int, col: int, key: str, message: str, fix: str = "", rule_id: str = "",
                 severity: str = "error"):
        self.file, self.line, self.col, self.key = file, line, col, key
        self.message, self.fix, self.rule_id, self.severity = message, fix, rule_id, severity

    def __eq__(self, other):
        return isinstance(other, Finding) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return f"Finding({self.format()!r})"

    def format(self) -> str:
        """``recipe.toml:12:5: cache.tiers[1].size_gb: must be > 0 (fix: ...)`` with the rule id when there is one."""
        where = f"{self.file}:{self.line}:{self.col}"
        tag = f" {self.severity}[{self.rule_id}]" if self.rule_id else ""
        key = f" {self.key}:" if self.key else ""
        fix = f" (fix: {self.fix})" if self.fix else ""
        return f"{where}:{tag}{key} {self.message}{fix}"

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in _FIELDS}


def key_path_text(path) -> str:
    """("cache", "tiers", 1, "size_gb") -> "cache.tiers[1].size_gb"."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
