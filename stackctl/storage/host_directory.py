"""A tier kept in a host directory (disk, fs: tier.path), mounted read-write into the container at the same path."""

from __future__ import annotations

import os

from stackctl.storage.base import Absent, Storage, StoreError

TYPE_CHECKING = False  # typing is not imported at run time (`validate` loads this module: start-up cost)
if TYPE_CHECKING:  # annotations only
    from pathlib import Path

GiB = 1024 ** 3
MARKER_PREFIX = ".stackctl-marker-"  # fleet doctor's marker file in the directory


def path_problem(path: Path, want_bytes: int) -> str:
    """Why a tier directory cannot take the tier ('' when it can): missing, not writable (a probe file is written
    and removed: read-only mounts pass os.access), or short of space."""
    import uuid

    if not path.is_dir():
        return f"path not found: {path} does not exist"
    probe = path / f".stackctl-probe-{uuid.uuid4().hex[:12]}"
    try:
        probe.write_bytes(b"stackctl")
        probe.unlink()
    except OSError as exc:
        cause = "no space" if exc.errno == 28 else "path not writable"
        return f"{cause}: {path}: {exc.strerror}"
    stat = os.statvfs(path)
    free = stat.f_bavail * stat.f_frsize
    if free < want_bytes:
        return f"no space: {path} has {free / GiB:.2f} GiB free < {want_bytes / GiB:.2f} GiB"
    return ""


class DirectoryMarker:
    """Fleet doctor's marker as a file in the tier's directory."""

    not_there = "the marker {writer} wrote there is not on this host"

    def __init__(self, tier, marker_id: str):
        from pathlib import Path

        self.path = Path(os.path.normpath(tier.path)) / f"{MARKER_PREFIX}{marker_id}"

    def put(self, content: str) -> None:
        if not self.path.parent.is_dir():
            raise StoreError(f"path not found: {self.path.parent} does not exist")
        self._do(self.path.write_text, content)

    def get(self) -> str:
        return self._do(self.path.read_text)

    def delete(self) -> None:
        self._do(self.path.unlink, missing_ok=True)

    def _do(self, action, *args, **kwargs):
        try:
            return action(*args, **kwargs)
        except FileNotFoundError:
            raise Absent() from None
        except OSError as exc:
            raise StoreError(f"{self.path}: {exc.strerror or exc}") from None


class HostDirectory(Storage):
    name = "host-directory"
    marker_store_class = DirectoryMarker
    directory_in_url = True

    def volumes(self, tier) -> list[dict]:
        # The loader requires the path of these kinds.
        return [{"host": tier.path, "container": tier.path, "mode": "rw"}] if tier.path else []

    def prepare(self, tier) -> list[tuple[str, str]]:
        # The directory exists (or can be made) and takes a file: LMCache would otherwise start, fail to write its
        # first chunk, and serve on without the tier.
        from pathlib import Path

        if not tier.path:
            return []
        try:
            Path(tier.path).mkdir(parents=True, exist_ok=True)
            probe = Path(tier.path) / f".stackctl-write-test.{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            return [("path", f"{tier.path} is not writable ({exc.strerror or exc}) (fix: create it writable for the "
                             "server, or choose another directory)")]
        return []

    def host_problem(self, ctx, tier, want_bytes: int) -> str:
        from pathlib import Path

        return path_problem(Path(tier.path), want_bytes) if tier.path else ""

    def round_trip_path(self, tier) -> str | None:
        return tier.path

    def seen_and_removed(self, tier, report: dict, model: str) -> str:
        return f"{report.get('files_seen', 0)} file(s) seen in {tier.path}, removed"

    def failure_cause(self, tier, report: dict, chunk_bytes: int, log: str, facts: str) -> str:
        if report.get("read_only") or "Read-only file system" in log or "Permission denied" in log:
            return f"path not writable: {tier.path} ({facts})"
        if "No space left" in log or report.get("free_bytes", 1 << 40) < chunk_bytes * 2:
            return f"no space: {tier.path} has {report.get('free_bytes', 0)} bytes free ({facts})"
        return ""

    def fresh_directory(self, tier, run_id: str) -> str:
        return f"{tier.path.rstrip('/')}/stackctl-second-{run_id}"

    def place(self, tier) -> str:
        return os.path.normpath(tier.path) if tier.path else ""

    def label(self, tier) -> str:
        return f"{tier.kind} tier {self.place(tier)}"


HOST_DIRECTORY = HostDirectory()
