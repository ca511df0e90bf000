"""Small readers for sysfs/procfs files under a root directory, so the same code reads the live machine ("/")
and captured fixture trees. Every reader returns None when the file is absent or unreadable: a missing fact is
data (a VM has no cpufreq), never an exception."""

from __future__ import annotations

from pathlib import Path


def under(root: Path, path: str) -> Path:
    """`path` (absolute, as on a live machine) inside `root`."""
    return Path(root) / path.lstrip("/")


def read_text(root: Path, path: str) -> str | None:
    """The file's text without its trailing newline, or None."""
    try:
        return under(root, path).read_text(encoding="utf-8", errors="replace").rstrip("\n")
    except OSError:
        return None


def read_int(root: Path, path: str) -> int | None:
    """The file's content as an integer, or None when absent or not a number."""
    text = read_text(root, path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def read_properties(root: Path, path: str) -> dict[str, str] | None:
    """A KFD-style properties file (`name value` per line) as a dict, or None when absent."""
    text = read_text(root, path)
    if text is None:
        return None
    properties = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        if name:
            properties[name] = value.strip()
    return properties


def is_live(root: Path) -> bool:
    """True when `root` is the running machine's own root, where libraries and psutil see the same facts."""
    try:
        return Path(root).resolve() == Path("/")
    except OSError:
        return False
