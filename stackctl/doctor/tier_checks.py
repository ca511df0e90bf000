"""KV tier checks: host-side checks of the S3 and fs tiers (fast, no image: runs on fleet hosts too), and the
round trip through LMCache's own code inside the stack's image (image.tiers)."""

from __future__ import annotations

import os
from pathlib import Path

from stackctl.doctor.registry import Unavailable, check, failed, passed, require_lmcache, require_this_machine
from stackctl.storage.host_directory import GiB, path_problem
from stackctl.storage.s3_bucket import bucket_verdict


def _tier(ctx, kind: str):
    tiers = ctx.recipe.tiers_of(kind) if ctx.recipe.cache.enabled else []
    if not tiers:
        raise Unavailable(f"no {kind} tier in the recipe")
    return tiers[0]


@check("host.s3-tier", "host", "error",
       "the S3 tier's endpoint resolves, connects, speaks TLS or HTTP as configured; bucket and credentials work",
       "fix the tier's url / disable_tls / ca_file, create the bucket, or fix the credentials the recipe names")
def s3_tier(ctx):
    """From this host, without the image: BUCKET.HOST resolves (LMCache's S3 client addresses buckets as virtual
    hosts), TCP connects, the server speaks TLS (or plain HTTP with `disable_tls`; when it speaks the other one, the
    message says which), the bucket exists, and the recipe's credentials can put, read back and delete a probe
    object (botocore). A wrong endpoint, TLS setting, bucket or key otherwise shows only as silent recomputation."""
    tier = _tier(ctx, "s3")
    require_this_machine(ctx, "the S3 endpoint as this machine reaches it")
    verdict = bucket_verdict(ctx, tier)
    if verdict.ok:
        return passed(verdict.message, **verdict.facts)
    return failed(verdict.message, cause=verdict.cause, **verdict.facts)


@check("host.fs-tier", "host", "error", "the fs tier's path exists, is writable and has the space",
       "mount the shared filesystem at the tier's path on this host, writable, with the space the tier needs")
def fs_tier(ctx):
    """LMCache's fs connector writes chunk files under the tier's path; a missing mount, a read-only mount or a full
    filesystem makes every store fail without an error reaching the client. `size_gb` (optional) is the free space
    required."""
    tier = _tier(ctx, "fs")
    require_this_machine(ctx, "the fs tier's mounted path")
    want = int((tier.size_gb or 0) * GiB)
    problem = path_problem(Path(tier.path), want)
    if problem:
        return failed(problem)
    stat = os.statvfs(tier.path)
    return passed(f"{tier.path}: writable, {stat.f_bavail * stat.f_frsize / GiB:.1f} GiB free")


# The host check a tier kind names (TierKind.host_check) when it is a URL alone and needs no check of its own.
ENDPOINT_CHECK = "host.tier-endpoint"


@check(ENDPOINT_CHECK, "host", "error",
       "each tier that is a URL alone (its kind has no host check of its own) resolves and accepts a TCP connection",
       "start the tier's server, or fix the host and port in the tier's url")
def tier_endpoint(ctx):
    """A tier of a kind whose record names this check is only a URL to LMCache: a server that is down, or a wrong
    host or port, shows only as silent recomputation. From this host: the URL has the host and port LMCache's
    parser requires, the host resolves and the port accepts a TCP connection."""
    import socket
    from urllib.parse import urlsplit

    from stackctl.knowledge.kinds import kind_of

    tiers = [tier for tier in (ctx.recipe.cache.tiers if ctx.recipe.cache.enabled else [])
             if kind_of(tier).host_check == ENDPOINT_CHECK]
    if not tiers:
        raise Unavailable("no tier in the recipe is checked by its endpoint alone")
    require_this_machine(ctx, "the tier's endpoint as this machine reaches it")
    problems, reached = [], []
    for tier in tiers:
        try:
            parts = urlsplit(tier.url)
            host, port = parts.hostname, parts.port
        except ValueError as exc:
            problems.append(f"{tier.kind} tier {tier.url}: {exc}")
            continue
        if not host or port is None:
            problems.append(f"{tier.kind} tier {tier.url}: no host and port (LMCache's parser requires both)")
            continue
        try:
            socket.create_connection((host, port), timeout=5).close()
        except OSError as exc:
            problems.append(f"{tier.kind} tier {tier.url}: {host}:{port}: {exc.strerror or exc}")
            continue
        reached.append(f"{tier.kind} tier {host}:{port} accepts TCP")
    if problems:
        return failed("; ".join(problems))
    return passed("; ".join(reached))


def _stack_runs(ctx) -> bool:
    try:
        ctx.container()
    except Unavailable:
        return False
    return True


@check("image.tiers", "image", "error",
       "every KV tier stores and returns data through LMCache's own code, in the stack's image",
       "fix the tier the message names (its cause says what: endpoint, TLS, bucket, credentials, path, space)")
def tiers(ctx):
    """Inside the stack's image, with the stack's LMCache config, tier mounts, environment and secrets, LMCache's
    own StorageManager (the API its check tool drives) puts chunks into each tier, waits until each write is done,
    checks they exist, reads them back and compares contents. Every tier moves the same object, one real KV chunk of
    the recipe's model (`cache.chunk_size` tokens x the KV bytes a token costs one rank), and at least 16 MiB each
    way, so MB/s figures compare across tiers. Lower tiers run with `local_cpu: false` so the read cannot come from
    RAM; the objects are seen where the tier keeps them (files, bucket) and removed. Reports per tier the median
    put/get latency of one chunk and MB/s over all chunks, or the failing tier and its cause. A tier this host
    already sees failing (a directory missing, read-only or full; an S3 endpoint, TLS setting, bucket or key) fails
    with that cause at once: LMCache would retry or wait there until the tier's 90 s ran out.

    On a running stack it runs with --deep only: it starts a container and moves real data (15 s and more), and
    there the live checks prove the tiers through serving (server.lmcache-hit the first tier on every run,
    server.tier-served each lower tier with --deep); before `up` it is the tiers' proof."""
    from stackctl.doctor.tier_roundtrip import keys_per_tier, run as run_roundtrips
    from stackctl.knowledge import compat

    if not ctx.recipe.cache.tiers:
        raise Unavailable("no LMCache tiers in the recipe")
    require_lmcache(ctx.spec)
    if not ctx.deep and _stack_runs(ctx):
        raise Unavailable("the stack runs: server.lmcache-hit proves its first tier serves; `doctor --deep` runs "
                          "this round trip and proves every tier through serving (server.tier-served)")
    lmcache = ctx.probe().get("lmcache") or {}
    if not lmcache.get("found"):
        return failed("LMCache is not installed in the image")
    if compat.lmcache_storage_api(lmcache.get("version")) is None:
        raise Unavailable(f"LMCache {lmcache.get('version') or '(version unknown)'} is not known to have the storage "
                          "API the round trip drives (compat.toml lmcache_storage_api)")
    from stackctl.errors import StackctlError
    from stackctl.lifecycle.preflight import ensure_tier_files_readable

    try:  # the check container mounts them: Docker would make an empty directory at a missing one
        ensure_tier_files_readable(ctx.recipe)
    except StackctlError as exc:
        return failed(str(exc))
    chunk, outcomes = run_roundtrips(ctx)
    keys = keys_per_tier(chunk.bytes)
    details = {o.kind: {"ok": o.ok, "message": o.message, **o.figures} for o in outcomes}
    head = f"{keys} x {chunk.describe()} per tier: "
    bad = [o for o in outcomes if not o.ok]
    if bad:
        return failed(head + "; ".join(o.message for o in bad), tiers=details, chunk_bytes=chunk.bytes)
    return passed(head + "; ".join(o.message for o in outcomes), tiers=details, chunk_bytes=chunk.bytes)
