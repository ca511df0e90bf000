"""Host memory from /proc/meminfo (psutil on the live machine when /proc is unreadable)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stackctl.host.sysfs import is_live, read_text

MEMINFO = "/proc/meminfo"


@dataclass(frozen=True)
class MemoryFacts:
    total_bytes: int | None
    available_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryFacts:
        return cls(data.get("total_bytes"), data.get("available_bytes"))


def parse_meminfo(text: str) -> dict[str, int]:
    """`MemTotal:  1584999968 kB` lines -> {"MemTotal": bytes}; counts without a unit (HugePages_*) as given."""
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if not parts or not parts[0].isdigit():
            continue
        factor = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
        values[name.strip()] = int(parts[0]) * factor
    return values


def read_memory(root: Path = Path("/")) -> MemoryFacts:
    text = read_text(root, MEMINFO)
    if text is not None:
        values = parse_meminfo(text)
        return MemoryFacts(values.get("MemTotal"), values.get("MemAvailable"))
    if is_live(root):
        try:
            import psutil  # noqa: PLC0415 - optional fallback
            memory = psutil.virtual_memory()
            return MemoryFacts(memory.total, memory.available)
        except (ImportError, OSError):  # no psutil, or /proc unreadable: the amount is unknown
            pass
    return MemoryFacts(None, None)
