"""Version facts as data (compat.toml), and the small range logic the rules and templates use."""

from __future__ import annotations

import functools
import os
import re

from stackctl import toml_parser

_COMPAT_FILE = os.path.join(os.path.dirname(__file__), "compat.toml")


@functools.lru_cache(maxsize=None)
def table() -> dict:
    """The parsed compatibility table."""
    with open(_COMPAT_FILE, encoding="utf-8") as handle:
        return toml_parser.loads(handle.read())


_PLAIN_RELEASE = re.compile(r"^\d+(\.\d+)*$")


class ParsedVersion:
    """A version the rules compare. Plain releases ("0.32.0", the usual case) compare as numbers, the way packaging
    orders them (0.5 == 0.5.0); anything else ("0.10.2rc1", "0.5.6+rocm") is compared by packaging's Version. The
    split keeps packaging, whose import and pattern cost `stackctl validate` ~2.5 ms at start-up, off the common path."""

    __slots__ = ("text", "release", "plain")

    def __init__(self, text: str, release: tuple[int, ...], plain: bool):
        self.text, self.release, self.plain = text, release, plain

    def _keys(self, other: ParsedVersion):
        if self.plain and other.plain:
            return _trimmed(self.release), _trimmed(other.release)
        from packaging.version import Version

        return Version(self.text), Version(other.text)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ParsedVersion):
            return NotImplemented
        mine, theirs = self._keys(other)
        return mine == theirs

    def __lt__(self, other: ParsedVersion) -> bool:
        mine, theirs = self._keys(other)
        return mine < theirs

    def __le__(self, other: ParsedVersion) -> bool:
        mine, theirs = self._keys(other)
        return mine <= theirs

    def __gt__(self, other: ParsedVersion) -> bool:
        return other < self

    def __ge__(self, other: ParsedVersion) -> bool:
        return other <= self

    def __hash__(self):  # equal versions hash alike: plain releases by their trimmed numbers
        return hash(_trimmed(self.release)) if self.plain else hash(self.text)

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"ParsedVersion({self.text!r})"


def _trimmed(release: tuple[int, ...]) -> tuple[int, ...]:
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    return release


@functools.lru_cache(maxsize=256)  # the rules ask about the same few versions dozens of times per recipe
def parse_version(text: str | None) -> ParsedVersion | None:
    """A comparable version, or None when the text is missing or not a version (e.g. a git ref)."""
    if not text:
        return None
    text = text.lstrip("v")
    if _PLAIN_RELEASE.match(text):
        return ParsedVersion(text, tuple(int(part) for part in text.split(".")), True)
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(text)
    except InvalidVersion:
        return None
    plain = parsed.epoch == 0 and (parsed.pre, parsed.post, parsed.dev, parsed.local) == (None, None, None, None)
    return ParsedVersion(str(parsed), parsed.release, plain)


def version_key(text: str) -> ParsedVersion:
    """parse_version for text known to be a version (stackctl's own data: facts files, compat ranges)."""
    parsed = parse_version(text)
    if parsed is None:
        raise ValueError(f"not a version: {text!r}")
    return parsed


def in_range(version: str | None, since: str | None = None, until: str | None = None) -> bool | None:
    """since <= version < until; None when the version is unknown (callers decide what unknown means)."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    if since and parsed < version_key(since):
        return False
    return not (until and parsed >= version_key(until))


def describe_range(since: str | None, until: str | None) -> str:
    if since and until:
        return f">= {since}, < {until}"
    return f">= {since}" if since else f"< {until}"


def lmcache_native_module(version: str | None) -> dict | None:
    """The native-module entry for an LMCache version, or None when the version is unknown."""
    return _entry_for("lmcache_native_module", version)


def is_cuda_only(distribution: str) -> bool:
    """True for a Python distribution that only works with NVIDIA CUDA (name compared PEP 503-normalised)."""
    name = normalize_name(distribution)
    data = table()["cuda_only"]
    return name in {normalize_name(n) for n in data["names"]} or any(name.startswith(p) for p in data["prefixes"])


def normalize_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _entry_for(section: str, version: str | None) -> dict | None:
    for entry in table().get(section, []):
        if in_range(version, entry.get("since"), entry.get("until")):
            return entry
    return None


def lmcache_build_requirements(version: str | None) -> list[str]:
    """LMCache's build requirements for a release; a git build (version unknown) gets the newest list."""
    entry = _entry_for("lmcache_build_requirements", version) or table()["lmcache_build_requirements"][0]
    return list(entry["packages"])


def lmcache_cpu_extension(version: str | None) -> str | None:
    """The module of LMCache's CPU extension for a release ("" when the release has none), None when unknown."""
    entry = _entry_for("lmcache_cpu_extension", version) if version else None
    return None if entry is None else entry["module"]


def lmcache_storage_api(version: str | None) -> dict | None:
    """The entry saying a release has the StorageManager API the tier round trip drives, or None."""
    return _entry_for("lmcache_storage_api", version)


def lmcache_renamed_key(key: str, version: str | None) -> str | None:
    """What to tell a user of `key` with this LMCache release when the release knows it under another name
    (compat.toml [[lmcache_renamed_keys]]); None when it is not a renamed key or the version is unknown."""
    for entry in table().get("lmcache_renamed_keys", []):
        old = f"`{entry['old']}`" + (f" (in {entry['old_in']})" if entry.get("old_in") else "")
        if key == entry["old"] and in_range(version, entry["until"]):
            return f"LMCache {entry['until']} renamed it `{entry['new']}` (LMCache#2858): use `{entry['new']}`"
        if key == entry["new"] and in_range(version, None, entry["until"]):
            return f"releases before {entry['until']} name it {old} (LMCache#2858): use that, or a newer LMCache"
    return None
