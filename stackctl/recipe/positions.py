"""Where each key of a TOML document is written: key path -> (line, column), both 1-based.

tomllib returns plain dicts without positions, and error messages must point at the line the user wrote. This is a
small line scanner for the TOML that recipes use: tables, arrays of tables, dotted keys, inline tables and arrays
(one level of positions inside inline tables). It runs only on text tomllib already accepted, so it can be tolerant:
anything it does not understand is skipped, and lookups fall back to the nearest parent that has a position.

Key paths are tuples of str (table keys) and int (array-of-tables index), e.g. ("cache", "tiers", 1, "size_gb").
"""

from __future__ import annotations

import re

Path = tuple  # tuple[str | int, ...]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _string_end(text: str, start: int) -> int:
    """Index just after the one-line string that opens at text[start] (basic strings honour backslash escapes)."""
    quote = text[start]
    end = start + 1
    while end < len(text) and text[end] != quote:
        end += 2 if (quote == '"' and text[end] == "\\") else 1
    return end + 1


def _read_key(text: str, i: int) -> tuple[list[str], int]:
    """Read a (possibly dotted, possibly quoted) key starting at text[i]; return parts and the index after it."""
    parts: list[str] = []
    while True:
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] in "\"'":
            end = _string_end(text, i)
            parts.append(text[i + 1 : end - 1])
            i = end
        else:
            match = _BARE_KEY.match(text, i)
            if not match:
                return parts, i
            parts.append(match.group())
            i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == ".":
            i += 1
            continue
        return parts, i


def _skip_value(lines: list[str], row: int, col: int) -> tuple[int, int]:
    """Skip past a value that may span lines (arrays, multi-line strings); return the (row, col) after it."""
    depth = 0
    while row < len(lines):
        line = lines[row]
        while col < len(line):
            ch = line[col]
            if line.startswith('"""', col) or line.startswith("'''", col):
                fence = line[col : col + 3]
                close = line.find(fence, col + 3)
                while close < 0:
                    row += 1
                    if row >= len(lines):
                        return row, 0
                    line = lines[row]
                    close = line.find(fence)
                col = close + 3
                continue
            if ch in "\"'":
                col = _string_end(line, col)
                continue
            if ch == "#":
                break
            if ch in "[{":
                depth += 1
            elif ch in "]}":
                depth -= 1
            col += 1
        if depth <= 0:
            return row + 1, 0
        row += 1
        col = 0
    return row, 0


def index_positions(text: str) -> dict[Path, tuple[int, int]]:
    """Map every key path written in ``text`` to its (line, column)."""
    lines = text.splitlines()
    positions: dict[Path, tuple[int, int]] = {}
    array_counts: dict[Path, int] = {}
    current: Path = ()
    row = 0
    while row < len(lines):
        line = lines[row]
        stripped = line.lstrip()
        col = len(line) - len(stripped)
        if not stripped or stripped.startswith("#"):
            row += 1
            continue
        if stripped.startswith("[["):
            parts, _ = _read_key(line, col + 2)
            base = _resolve(tuple(parts), array_counts)
            index = array_counts.get(base, 0)
            array_counts[base] = index + 1
            current = base + (index,)
            positions.setdefault(base, (row + 1, col + 1))
            positions[current] = (row + 1, col + 1)
            row += 1
            continue
        if stripped.startswith("["):
            parts, _ = _read_key(line, col + 1)
            current = _resolve(tuple(parts), array_counts)
            positions.setdefault(current, (row + 1, col + 1))
            row += 1
            continue
        parts, after = _read_key(line, col)
        if not parts or after >= len(line) or line[after] != "=":
            row += 1
            continue
        key_path = current + tuple(parts)
        positions[key_path] = (row + 1, col + 1)
        value_col = after + 1
        while value_col < len(line) and line[value_col] in " \t":
            value_col += 1
        if value_col < len(line) and line[value_col] == "{":
            _index_inline_table(line, value_col, key_path, row, positions)
        row, _ = _skip_value(lines, row, value_col)
    return positions


def _index_inline_table(line: str, start: int, base: Path, row: int, positions: dict) -> None:
    """Record positions of the keys of a one-line inline table ``{a = 1, b.c = "x"}``."""
    i = start + 1
    while i < len(line):
        parts, after = _read_key(line, i)
        if not parts or after >= len(line) or line[after] != "=":
            return
        positions[base + tuple(parts)] = (row + 1, i + 1 + (len(line[i:]) - len(line[i:].lstrip())))
        # Skip the value to the next top-level comma.
        depth, j = 0, after + 1
        while j < len(line):
            ch = line[j]
            if ch in "\"'":
                j = _string_end(line, j)
                continue
            if ch in "[{":
                depth += 1
            elif ch in "]}":
                if depth == 0:
                    return
                depth -= 1
            elif ch == "," and depth == 0:
                break
            j += 1
        i = j + 1


def _resolve(parts: Path, array_counts: dict[Path, int]) -> Path:
    """A table header names keys; insert the current index wherever a prefix is an array of tables."""
    resolved: Path = ()
    for part in parts:
        resolved += (part,)
        if resolved in array_counts and resolved != parts:
            resolved += (array_counts[resolved] - 1,)
    return resolved


def lookup(positions: dict[Path, tuple[int, int]], path: Path) -> tuple[int, int]:
    """Position of ``path``, or of its nearest written parent; (1, 1) when nothing is known."""
    path = tuple(path)
    while path:
        if path in positions:
            return positions[path]
        path = path[:-1]
    return (1, 1)
