"""A finding: one problem (or note) about a recipe, located at the line that caused it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    col: int
    key: str  # dotted key path, e.g. cache.tiers[1].size_gb
    message: str
    fix: str = ""
    rule_id: str = ""  # empty for load errors (syntax, types, unknown keys)
    severity: str = "error"

    def format(self) -> str:
        """``recipe.toml:12:5: cache.tiers[1].size_gb: must be > 0 (fix: ...)`` with the rule id when there is one."""
        where = f"{self.file}:{self.line}:{self.col}"
        tag = f" {self.severity}[{self.rule_id}]" if self.rule_id else ""
        key = f" {self.key}:" if self.key else ""
        fix = f" (fix: {self.fix})" if self.fix else ""
        return f"{where}:{tag}{key} {self.message}{fix}"

    def to_dict(self) -> dict:
        return asdict(self)


def key_path_text(path) -> str:
    """("cache", "tiers", 1, "size_gb") -> "cache.tiers[1].size_gb"."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
