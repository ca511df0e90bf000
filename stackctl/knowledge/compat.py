"""Version facts as data (compat.toml), and the small range logic the rules and templates use."""

from __future__ import annotations

import functools
import os
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_COMPAT_FILE = os.path.join(os.path.dirname(__file__), "compat.toml")


@functools.lru_cache(maxsize=None)
def table() -> dict:
    """The parsed compatibility table."""
    with open(_COMPAT_FILE, encoding="utf-8") as handle:
        return tomllib.loads(handle.read())


@functools.lru_cache(maxsize=256)  # the rules ask about the same few versions dozens of times per recipe
def parse_version(text: str | None):
    """A packaging Version, or None when the text is missing or not a version (e.g. a git ref)."""
    if not text:
        return None
    from packaging.version import (  # packaging is cheap, but only rules need it
        InvalidVersion,
        Version,
    )

    try:
        return Version(text.lstrip("v"))
    except InvalidVersion:
        return None


def in_range(version: str | None, since: str | None = None, until: str | None = None) -> bool | None:
    """since <= version < until; None when the version is unknown (callers decide what unknown means)."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    if since and parsed < parse_version(since):
        return False
    if until and parsed >= parse_version(until):
        return False
    return True


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
    import re

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
