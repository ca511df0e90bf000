"""What this host sees of a KV tier before anything starts: a tier directory missing, read-only or short of space;
an S3 endpoint, TLS setting, bucket or key that fails. The host checks report it (host.fs-tier, host.s3-tier), and
the round trip of image.tiers takes it as a tier's verdict instead of starting LMCache on a tier it cannot use:
LMCache does not fail there, it retries or waits (an S3 endpoint that refuses connections, a read-only disk) until
the round trip's 90 s per tier run out, for the cause this finds in milliseconds."""

from __future__ import annotations

from pathlib import Path

from stackctl.storage.registry import storage_of


def files_written_before(path: Path, since: float | None) -> tuple[int, int]:
    """(files, bytes) under `path` last written before `since` (seconds since the epoch; None: every file)."""
    count = size = 0
    for entry in path.rglob("*"):
        try:
            stat = entry.stat()
        except OSError:  # removed while we looked
            continue
        if entry.is_file() and (since is None or stat.st_mtime < since):
            count, size = count + 1, size + stat.st_size
    return count, size


def tier_problem(ctx, tier, want_bytes: int) -> str:
    """Why `tier` cannot store `want_bytes`, as seen from this host ('' when nothing is seen: the round trip
    decides): its storage's view (a CPU tier or a URL alone has nothing to see here)."""
    return storage_of(tier).host_problem(ctx, tier, want_bytes)
