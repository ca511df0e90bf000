"""`--batch` and `--max-fail`: parsing them, and the batches Ansible's `serial` makes of the hosts."""

from __future__ import annotations

import re

from stackctl.errors import StackctlError


def parse_batch(text: str | None) -> int | str | None:
    """`--batch`: "2" -> 2 hosts per batch, "50%" -> "50%" of the hosts, None -> all hosts at once."""
    if text is None or str(text).strip() == "":
        return None
    value = str(text).strip()
    match = re.fullmatch(r"(\d+)(%?)", value)
    if not match or int(match.group(1)) == 0 or (match.group(2) and int(match.group(1)) > 100):
        raise StackctlError(f"--batch: {value!r} is not a host count (> 0) or a percentage (1%-100%) "
                            "(fix: e.g. --batch 2 or --batch 25%)")
    return f"{int(match.group(1))}%" if match.group(2) else int(match.group(1))


def parse_percent(text: str | int, option: str = "--max-fail") -> int:
    """A percentage 0-100 written "10", "10%" (Ansible's max_fail_percentage)."""
    value = str(text).strip()
    match = re.fullmatch(r"(\d+)%?", value)
    if not match or int(match.group(1)) > 100:
        raise StackctlError(f"{option}: {value!r} is not a percentage 0-100 (fix: e.g. {option} 0 or {option} 25%)")
    return int(match.group(1))


def batches(hosts: list[str], batch: int | str | None) -> list[list[str]]:
    """The batches Ansible's `serial` makes of `hosts` (same rounding: a percentage rounds down, at least 1)."""
    if not hosts:
        return []
    if batch is None:
        size = len(hosts)
    elif isinstance(batch, str) and batch.endswith("%"):
        size = max(1, int(len(hosts) * int(batch[:-1]) / 100))
    else:
        size = int(batch)
    return [hosts[i:i + size] for i in range(0, len(hosts), size)]
