"""The `vllm serve` arguments of a recipe judged against one vLLM release's facts, the way its parser reads them.

vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py) turns underscores in a flag name into dashes, reads
`--flag.key=value` as one key of a JSON flag, and `-O3` as `--optimization-level 3`; the rest is argparse: a
`--x/--no-x` or store_true flag takes no value (a following word is an unrecognised argument, `--x=true` an error),
other flags take one (lists one or more), a unique prefix of a flag name stands for it, and anything unknown stops
the server with "unrecognized arguments".
"""

from __future__ import annotations

import functools
import json

from stackctl.knowledge import facts as factdb

NO_VALUE = ("bool", "flag")
# problem kinds: removed, unknown, value, deprecated


class Problem:
    def __init__(self, index: int, kind: str, flag: str, message: str):
        self.index, self.kind, self.flag, self.message = index, kind, flag, message


def flag_table(release: factdb.Release) -> dict[str, tuple[str, dict]]:
    """Every option string the release accepts -> (primary flag, its facts); `--no-x` for --x/--no-x flags."""
    return _flag_table(release.package, release.version)


@functools.lru_cache(maxsize=None)  # four rules judge the same flags against the same release (facts.load is cached)
def _flag_table(package: str, version: str) -> dict[str, tuple[str, dict]]:
    table: dict[str, tuple[str, dict]] = {}
    for flag, entry in (factdb.load(package, version).get("flags") or {}).items():
        table[flag] = (flag, entry)
        for alias in entry.get("aliases", []):
            table[alias] = (flag, entry)
        if entry["kind"] == "bool":
            table["--no-" + flag[2:]] = (flag, entry)
    return table


def normalise(token: str) -> tuple[str, str | None, str | None]:
    """(flag name, dotted key or None, inline value or None) of an option token."""
    name, _, value = token.partition("=")
    inline = value if "=" in token else None
    if token.startswith("-O") and not token.startswith("--") and token != "-O":
        return "--optimization-level", None, token[3:] if token[2:3] == "=" else token[2:]
    if name.startswith("--"):
        head, dot, key = name[2:].partition(".")
        return "--" + head.replace("_", "-"), key if dot else None, inline
    return name, None, inline


def is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not token[1:2].isdigit() and not token.startswith("-.")


def judge(args: list[str], release: factdb.Release) -> list[Problem]:
    """Problems of a serve argument list (flags only: the model path comes before them)."""
    table = flag_table(release)
    problems: list[Problem] = []
    index = 0
    while index < len(args):
        token = args[index]
        if not is_option(token):
            problems.append(Problem(index, "value", token, f"{token!r} is not an option: vLLM stops with "
                                                           "\"unrecognized arguments\""))
            index += 1
            continue
        name, key, inline = normalise(token)
        if token == "-O" and index + 1 < len(args):
            name, inline, index = "--optimization-level", args[index + 1], index + 1
        resolved = table.get(name) or _prefix(name, table)
        if resolved is None:
            problems.append(_missing(index, name, release))
            index += 1
            while index < len(args) and not is_option(args[index]):  # its value goes with it
                index += 1
            continue
        flag, entry = resolved
        start = index
        index += 1
        values: list[str] = [] if inline is None else [inline]
        if entry["kind"] not in NO_VALUE and inline is None:
            many = entry["kind"] == "list" and not entry.get("repeat")
            while index < len(args) and not is_option(args[index]) and (many or not values):
                values.append(args[index])
                index += 1
        if entry.get("deprecated"):
            problems.append(Problem(start, "deprecated", flag, f"{flag} is deprecated in {release.label()}: "
                                                               f"{entry['deprecated']} ({release.cite(entry['at'])})"))
        problem = _value_problem(flag, name, key, values, entry, release)
        if problem:
            problems.append(Problem(start, "value", flag, problem))
        if entry["kind"] in NO_VALUE:  # a word after a boolean flag is a stray argument
            stray_start = index
            while index < len(args) and not is_option(args[index]):
                index += 1
            if index > stray_start:
                words = " ".join(args[stray_start:index])
                problems.append(Problem(start, "value", flag,
                                        f"{flag} takes no value, but is followed by {words!r}: vLLM stops with "
                                        f"\"unrecognized arguments: {words}\" (write {_bool_form(flag, words)}; "
                                        f"{release.cite(entry['at'])})"))
    return problems


def _prefix(name: str, table: dict) -> tuple[str, dict] | None:
    """argparse's allow_abbrev: a unique prefix of a long option names it."""
    if not name.startswith("--") or len(name) < 4:
        return None
    matches = {table[option][0] for option in table if option.startswith(name)}
    return table[matches.pop()] if len(matches) == 1 else None


def _bool_form(flag: str, words: str) -> str:
    negative = words.strip().lower() in ("false", "0", "no", "off")
    return f"--no-{flag[2:]}" if negative else flag


def _value_problem(flag: str, name: str, key: str | None, values: list[str], entry: dict,
                   release: factdb.Release) -> str | None:
    kind = entry["kind"]
    cite = release.cite(entry["at"])
    if key is not None:
        return None if kind in ("json", "json_or_str") else f"{flag} is not a JSON option, {name}.{key} is not " \
                                                             f"accepted ({cite})"
    if kind == "bool" or kind == "flag":
        if values:  # --x=value
            return f"{flag} takes no value (\"ignored explicit argument {values[0]!r}\"); write " \
                   f"{_bool_form(flag, values[0])} ({cite})"
        if name.startswith("--no-") and kind == "flag":
            return f"{name} does not exist: {flag} is a plain switch ({cite})"
        return None
    if not values:
        if kind == "optional_value":
            return None
        return f"{flag} expects a value ({cite})"
    for value in values:
        problem = _one_value(value, kind if kind != "list" else entry.get("element", "str"), entry)
        if problem:
            return f"{flag} {value!r}: {problem} ({cite})"
    return None


def _one_value(value: str, kind: str, entry: dict) -> str | None:
    if entry.get("nullable") and value in ("", "None"):
        return None
    choices = entry.get("choices")
    if choices and value not in choices:
        import difflib  # only for a misspelt value: kept off validate's start-up

        close = difflib.get_close_matches(value, choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"invalid choice, expected one of {', '.join(choices)}{hint}"
    if kind == "int":
        try:
            int(value)
        except ValueError:
            if not _human_int(value):
                return "not an integer"
    elif kind == "float":
        try:
            float(value)
        except ValueError:
            return "not a number"
    elif kind == "json":
        try:
            json.loads(value)
        except ValueError as exc:
            return f"not valid JSON ({exc})"
    return None


def _human_int(value: str) -> bool:
    """vLLM reads 1k, 2M, 1G (and `auto` for --max-model-len) where it takes token counts."""
    text = value.strip()
    return text.lower() == "auto" or (len(text) > 1 and text[-1] in "kKmMgGtT" and
                                      text[:-1].replace(".", "", 1).isdigit())


def _missing(index: int, name: str, release: factdb.Release) -> Problem:
    """A flag the release does not accept: removed (an earlier release had it), added later, or unknown."""
    base = "--" + name[5:] if name.startswith("--no-") else name
    seen = factdb.history("vllm", "flags", base)
    if seen:
        from stackctl.knowledge.compat import version_key

        target = version_key(release.version)
        earlier = [(v, e) for v, e in seen if version_key(v) < target]
        if earlier:
            last, entry = earlier[-1]
            return Problem(index, "removed", name, f"{name} was removed: vLLM {last} was the last release with it "
                                                   f"(vllm {last} {entry['at']}), {release.label()} has no such "
                                                   f"flag{_replacement(base, entry, release)}")
        first = seen[0][0]
        return Problem(index, "unknown", name, f"{name} is not in {release.label()}: it first appears in vLLM "
                                               f"{first}")
    known = list(flag_table(release))
    import difflib  # only for an unknown flag: kept off validate's start-up

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return Problem(index, "unknown", name, f"{name} is not a flag of {release.label()} or of any release stackctl "
                                           f"has facts for{hint}")


def _replacement(flag: str, entry: dict, release: factdb.Release) -> str:
    """The flag to use instead: one the last release's deprecation text names that this release has, or
    `--no-enable-X` for a removed `--disable-X` when `--enable-X` is a --x/--no-x flag here."""
    import re

    table = flag_table(release)
    for named in re.findall(r"--[a-z0-9][a-z0-9.-]*[a-z0-9]", entry.get("deprecated", "")):
        if named != flag and named.split(".")[0] in table:
            return f"; use {named} (its deprecation notice said: {entry['deprecated']})"
    if flag.startswith("--disable-"):
        positive = "--enable-" + flag[len("--disable-"):]
        if table.get(positive, ("", {}))[1].get("kind") == "bool":
            return f"; use --no-{positive[2:]} ({release.cite(table[positive][1]['at'])})"
    if entry.get("deprecated"):
        return f" (its deprecation notice said: {entry['deprecated']})"
    return ""


def json_flag_values(args: list[str], names: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(index, object) of every JSON-object value given to one of the flags NAMES (`--flag VALUE`, `--flag=VALUE`,
    underscores read as dashes); values that are not a JSON object are left to the rules that judge them."""
    found = []
    for index, token in enumerate(args):
        name, _, inline = token.partition("=")
        if name.replace("_", "-") not in names:
            continue
        text = inline if "=" in token else (args[index + 1] if index + 1 < len(args) else "")
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append((index, value))
    return found


def human_int(value: str) -> int | None:
    """The integer vLLM reads from a human-readable count: 1k = 1,000, 1K = 1,024, 1G = 2**30, 25.6k = 25,600
    (vllm 0.32.0 vllm/utils/argparse_utils.py:29-54, human_readable_int); None when it is not one."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    if len(text) > 1 and text[-1] in "kmgt" and text[:-1].replace(".", "", 1).isdigit():
        return int(float(text[:-1]) * 10 ** (3 * ("kmgt".index(text[-1]) + 1)))
    if len(text) > 1 and text[-1] in "KMGT" and text[:-1].replace(".", "", 1).isdigit():
        return int(float(text[:-1]) * 2 ** (10 * ("KMGT".index(text[-1]) + 1)))
    return None
