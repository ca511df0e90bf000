"""The interface of a tier's storage, with what a storage that keeps nothing outside the server does: mount nothing,
check nothing, prove nothing shared. A storage module subclasses Storage and says only what differs."""

from __future__ import annotations

import os


def url_place(tier) -> str:
    """A tier's URL as fleet compares hosts: the same store whatever the case of its letters or a trailing /."""
    return tier.url.lower().rstrip("/") if tier.url else ""


class Absent(Exception):
    """A fleet marker is not where its writer put it."""


class StoreError(Exception):
    """A marker store could not be used (the message says why: cause first, as doctor's tier checks say it)."""


class Storage:
    """One storage; every method takes a recipe tier (cache.tiers[i])."""

    name = ""
    # Tier field -> the standard variable it names (the recipe's references to host credentials).
    key_env: dict[str, str] = {}
    # Tier field -> where the container sees the file it names (mounted read-only).
    mounted_files: dict[str, str] = {}
    # The class of fleet doctor's marker (put, get, delete; raising Absent or StoreError), or None: hosts sharing
    # such a tier cannot be proven to share it.
    marker_store_class: type | None = None
    # LMCache's remote_url of the tier names a directory (fs://HOST/PATH): the importer reads it as the tier's path.
    directory_in_url = False

    def volumes(self, tier) -> list[dict]:
        """Host paths the container mounts for the tier: {"host", "container", "mode"}."""
        return [{"host": getattr(tier, field), "container": path, "mode": "ro"}
                for field, path in self.mounted_files.items() if getattr(tier, field)]

    def environment(self, tier) -> dict[str, str]:
        """Non-secret variables of the server process for the tier."""
        return {}

    def secret_references(self, tier) -> dict[str, str]:
        """Container variable -> the host variable the tier names for it (read at run time only)."""
        return {variable: getattr(tier, field) for field, variable in self.key_env.items() if getattr(tier, field)}

    def prepare(self, tier) -> list[tuple[str, str]]:
        """What `up` makes ready on the host before the container starts: (tier field, problem) for each that fails,
        the problem with its fix."""
        return []

    def mount_problems(self, tier) -> list[tuple[str, str]]:
        """(tier field, problem) for each file the container mounts that this host cannot give: Docker would make an
        empty directory at a missing mount source."""
        problems = []
        for field in self.mounted_files:
            path = getattr(tier, field)
            if not path or (os.path.isfile(path) and os.access(path, os.R_OK)):
                continue
            problem = ("is not readable" if os.path.isfile(path) else "is not a file" if os.path.exists(path)
                       else "does not exist")
            problems.append((field, f"{path} {problem} (fix: point it at a readable file on this host)"))
        return problems

    def host_problem(self, ctx, tier, want_bytes: int) -> str:
        """Why the tier cannot store `want_bytes`, as doctor sees it from this host ('' when nothing is seen)."""
        return ""

    def round_trip_path(self, tier) -> str | None:
        """The directory the round trip's driver looks in for the tier's files (None: it keeps none there)."""
        return None

    def seen_and_removed(self, tier, report: dict, model: str) -> str:
        """After a passed round trip: what was seen where the tier keeps its data, and removed ('' when nothing)."""
        return ""

    def failure_cause(self, tier, report: dict, chunk_bytes: int, log: str, facts: str) -> str:
        """A failed round trip's cause in the tier's own terms ('' when the storage has none to add)."""
        return ""

    def fresh_directory(self, tier, run_id: str) -> str:
        """A directory of its own below the tier's for a second server, '' when the tier has no directory."""
        return ""

    def place(self, tier) -> str:
        """Where a shared tier keeps its data, as fleet compares hosts ('' when it has no place outside the
        server)."""
        return ""

    def group_key(self, tier) -> str:
        """Hosts whose tiers have the same key are meant to share one store."""
        return f"{tier.kind} {self.place(tier)}"

    def label(self, tier) -> str:
        """The tier as messages name it."""
        return f"{tier.kind} tier {tier.url or tier.path}"

    def marker_store(self, tier, marker_id: str):
        """Fleet doctor's marker in the tier's store."""
        if self.marker_store_class is None:
            raise StoreError(f"a {tier.kind} tier has no shared-tier marker store")
        return self.marker_store_class(tier, marker_id)

    def credentials_unset(self, tier) -> bool:
        """The tier reads credentials and the recipe names none (rule s3-credentials-unset)."""
        return False

    def tls_on_plain_port(self, tier) -> bool:
        """TLS is on towards a port known to speak plain HTTP (rule s3-tls-plain-port)."""
        return False
