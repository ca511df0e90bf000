"""What this host sees of a KV tier before anything starts: a tier directory missing, read-only or short of space;
an S3 endpoint, TLS setting, bucket or key that fails. The host checks report it (host.fs-tier, host.s3-tier), and
the round trip of image.tiers takes it as a tier's verdict instead of starting LMCache on a tier it cannot use:
LMCache does not fail there, it retries or waits (an S3 endpoint that refuses connections, a read-only disk) until
the round trip's 90 s per tier run out, for the cause this finds in milliseconds."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from stackctl.knowledge.kinds import kind_of

GiB = 1024 ** 3


def path_problem(path: Path, want_bytes: int) -> str:
    """Why a tier directory cannot take the tier ('' when it can): missing, not writable (a probe file is written
    and removed: read-only mounts pass os.access), or short of space."""
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


def bucket_verdict(ctx, tier):
    """check_bucket's verdict on an S3 tier, asked once per doctor run: host.s3-tier and image.tiers share it (each
    ask puts, reads back and deletes a test object in the user's bucket)."""
    from stackctl.doctor.clients.s3_access import check_bucket

    return ctx.remember(f"s3-bucket:{tier.url}", lambda: check_bucket(tier))


def tier_problem(ctx, tier, want_bytes: int) -> str:
    """Why `tier` cannot store `want_bytes`, as seen from this host ('' when nothing is seen: the round trip
    decides). A tier of another kind (CPU, a URL alone) has nothing to see here."""
    kind = kind_of(tier)
    if kind.s3_bucket:
        verdict = bucket_verdict(ctx, tier)
        return "" if verdict.ok else verdict.message
    if kind.host_directory and tier.path:
        return path_problem(Path(tier.path), want_bytes)
    return ""
