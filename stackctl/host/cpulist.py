"""The kernel's cpulist format ("0-3,8,10-11"), as in sysfs, /proc/cmdline and docker's --cpuset-cpus."""

from __future__ import annotations

import re
from collections.abc import Iterable

# One item of a cpulist: N, N-M, or N-M:used/group (the kernel's strided form, e.g. 0-15:2/4).
_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?$")


def parse_cpulist(text: str) -> list[int]:
    """Sorted, de-duplicated CPU (or node) numbers of a cpulist; "" gives []. Raises ValueError when malformed."""
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return []
    for item in text.split(","):
        match = _ITEM.match(item.strip())
        if not match:
            raise ValueError(f"not a cpulist: {text!r} (bad item {item!r})")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"not a cpulist: {text!r} (range {item!r} runs backwards)")
        if match.group(3) is not None:
            used, group = int(match.group(3)), int(match.group(4))
            if group == 0 or used == 0 or used > group:
                raise ValueError(f"not a cpulist: {text!r} (stride {used}/{group} in {item!r})")
            cpus.update(cpu for cpu in range(first, last + 1) if (cpu - first) % group < used)
        else:
            cpus.update(range(first, last + 1))
    return sorted(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """The shortest cpulist for a set of numbers: [0, 1, 2, 3, 8, 10, 11] -> "0-3,8,10-11"; [] -> ""."""
    ordered = sorted(set(cpus))
    if ordered and ordered[0] < 0:
        raise ValueError(f"negative CPU number {ordered[0]}")
    parts: list[tuple[int, int]] = []  # runs of consecutive numbers: (first, last)
    for cpu in ordered:
        if parts and cpu == parts[-1][1] + 1:
            parts[-1] = (parts[-1][0], cpu)  # extends the current run
        else:
            parts.append((cpu, cpu))
    return ",".join(_span(first, last) for first, last in parts)


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"
