"""Facts read from vLLM's and LMCache's own source releases (stackctl/knowledge/facts/PACKAGE-VERSION.json, written
by scripts/extract-facts.py): which `vllm serve` flags, compilation/pass config keys, KV connectors and environment
variables a vLLM release knows, which config keys, variables and remote_url schemes an LMCache release knows, each
with the file:line it was read from.

A recipe is judged against the facts of its pinned release; when that exact release has no file, the nearest one
(the newest earlier patch of the same minor, else the closest release) stands in, and the findings say so.
"""

from __future__ import annotations

import functools
import json
import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

FACTS_DIR = os.path.join(os.path.dirname(__file__), "facts")


class Release:
    """The facts of one release, and which release the recipe asked for."""

    def __init__(self, data: dict, wanted: str):
        self.data = data
        self.package: str = data["package"]
        self.version: str = data["version"]
        self.wanted = wanted

    @property
    def exact(self) -> bool:
        return self.version == self.wanted

    @property
    def name(self) -> str:
        return f"{'vLLM' if self.package == 'vllm' else 'LMCache'} {self.version}"

    def label(self) -> str:
        """How a finding names the facts it used: the release, and the stand-in when it is not the pinned one."""
        if self.exact:
            return self.name
        return f"{self.name} (no facts for {self.wanted}: nearest release)"

    def cite(self, where: str) -> str:
        return f"{self.package} {self.version} {where}"

    def section(self, name: str) -> dict:
        return self.data.get(name) or {}


def versions(package: str) -> list[str]:
    """The releases with a facts file, oldest first."""
    return list(_versions(package))


@functools.lru_cache(maxsize=None)
def _versions(package: str) -> tuple[str, ...]:
    from stackctl.knowledge.compat import version_key

    prefix = f"{package}-"
    found = [name[len(prefix):-len(".json")] for name in os.listdir(FACTS_DIR)
             if name.startswith(prefix) and name.endswith(".json")]
    return tuple(sorted(found, key=version_key))


@functools.lru_cache(maxsize=None)
def load(package: str, version: str) -> dict:
    with open(os.path.join(FACTS_DIR, f"{package}-{version}.json"), encoding="utf-8") as handle:
        return json.load(handle)


def nearest(package: str, version: str) -> str | None:
    """The release whose facts stand in for VERSION: itself, else a release of the same minor (the newest earlier
    patch, else the oldest later one), else the closest earlier release, else the oldest one; None when the version
    is not a version."""
    from stackctl.knowledge.compat import parse_version, version_key

    wanted = parse_version(version)
    if wanted is None:
        return None
    if os.path.isfile(os.path.join(FACTS_DIR, f"{package}-{wanted}.json")):
        return str(wanted)  # the release itself (the usual case): no need to list and order the others
    known = versions(package)
    if not known:
        return None
    parsed = [(version_key(v), v) for v in known]
    same_minor = [(p, v) for p, v in parsed if p.release[:2] == wanted.release[:2]]
    if same_minor:
        earlier_patch = [v for p, v in same_minor if p <= wanted]
        return earlier_patch[-1] if earlier_patch else same_minor[0][1]
    earlier = [v for p, v in parsed if p <= wanted]
    return earlier[-1] if earlier else known[0]


def release(package: str, version: str | None) -> Release | None:
    """The facts a recipe pinned to VERSION is judged against (None when the version is unknown)."""
    if not version:
        return None
    chosen = nearest(package, version)
    return Release(load(package, chosen), version) if chosen else None


def history(package: str, section: str, name: str) -> list[tuple[str, Any]]:
    """(release, entry) of every release whose SECTION has NAME, oldest first."""
    out = []
    for version in versions(package):
        entry = (load(package, version).get(section) or {}).get(name)
        if entry is not None:
            out.append((version, entry))
    return out


def known_anywhere(package: str, section: str) -> set[str]:
    """Every name SECTION holds in any release (to tell a removed name from one that never existed)."""
    return {name for version in versions(package) for name in (load(package, version).get(section) or {})}
