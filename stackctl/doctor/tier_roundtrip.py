"""image.tiers: LMCache's storage round trip for every tier the recipe names, in the stack's image, with the stack's
LMCache config, tier mounts, environment and secrets.

One container run executes checks/tiers/roundtrip.py, which runs LMCache's check tool once per tier with a config
holding only that tier (a lower tier with `local_cpu: false`, so reads cannot be served from RAM) and a fresh model
name (stale objects cannot fake a pass). stackctl then sees the objects where the tier keeps them, removes them, and
judges each tier from the EXISTS and content columns (the tool's exit code and PUT column say nothing).
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from stackctl import stackspec
from stackctl.resources import shipped

# Keys of LMCache's config that name a tier; each tier's config keeps everything else of the stack's config.
TIER_KEYS = ("local_cpu", "max_local_cpu_size", "local_disk", "max_local_disk_size", "remote_url",
             "remote_storage_plugins", "remote_serde")
TIER_EXTRA_KEYS = ("s3_region", "disable_tls", "remote_storage_plugin.fs.base_path")
CHECK_CPU_GB = 0.05      # the CPU buffer of the check: small, so the check needs ~0.4 GB of RAM, not the tier's size
OBJ_ELEMENTS = 32768     # 64 KiB bf16 chunks: 4 KiB aligned, which the S3 connector needs
# LMCache 0.5.6's check tool builds S3 objects for a 256-token chunk of its own synthetic layout (4 bytes a token):
# its S3 connector accepts exactly that size, 1 KiB, and refuses any other as a partial chunk.
S3_OBJ_ELEMENTS = 512
NUM_KEYS = 5
TIER_TIMEOUT_S = 60
DRIVER = "/opt/stackctl/doctor/roundtrip.py"
SPEC_DIR = "/opt/stackctl/doctor/spec"


@dataclass
class TierOutcome:
    kind: str
    ok: bool
    message: str
    figures: dict = field(default_factory=dict)


def tier_configs(recipe) -> dict[str, dict]:
    """One LMCache config per tier kind, derived from the stack's own config."""
    full = stackspec.lmcache_config(recipe) or {}  # empty when the cache is off: there are no tiers to check
    extra = {k: v for k, v in full.get("extra_config", {}).items() if k not in TIER_EXTRA_KEYS}
    base = {k: v for k, v in full.items() if k not in TIER_KEYS and k != "extra_config"}
    configs = {}
    for tier in recipe.cache.tiers:
        config = dict(base, local_cpu=tier.kind == "cpu", max_local_cpu_size=CHECK_CPU_GB)
        tier_extra = dict(extra)
        if tier.kind == "disk":
            config.update(local_disk=full["local_disk"], max_local_disk_size=full["max_local_disk_size"])
        elif tier.kind == "fs":
            config.update(remote_storage_plugins=["fs"], remote_serde="naive")
            tier_extra["remote_storage_plugin.fs.base_path"] = tier.path
        elif tier.kind == "s3":
            config.update(remote_url=tier.url, remote_serde="naive")
            tier_extra["s3_region"] = tier.region
            if tier.disable_tls:
                tier_extra["disable_tls"] = True
            # The 1 KiB object must not be padded to the allocator's 4 KiB: the S3 connector refuses a size other
            # than its part size.
            tier_extra["local_cpu.pinned_align_bytes"] = 1024
        if tier_extra:
            config["extra_config"] = tier_extra
        configs[tier.kind] = config
    return configs


def run(ctx, check_tool: dict, obj_elements: int = OBJ_ELEMENTS, num_keys: int = NUM_KEYS) -> list[TierOutcome]:
    """Run the round trip of every tier in one container; returns one outcome per tier, in recipe order."""
    recipe = ctx.recipe
    engine = ctx.engine()
    environment = dict(stackspec.environment(recipe))
    for container_var, host_var in stackspec.secret_references(recipe).items():
        if os.environ.get(host_var):
            environment[container_var] = os.environ[host_var]
    model = f"stackctl-check-{uuid.uuid4().hex[:12]}"
    volumes = {m["host"]: {"bind": m["container"], "mode": m["mode"]} for m in stackspec.volumes(recipe)}
    with tempfile.TemporaryDirectory(prefix="stackctl-tiers-") as spec_dir:
        specs = []
        for kind, config in tier_configs(recipe).items():
            Path(spec_dir, f"{kind}.json").write_text(json.dumps(config))  # JSON is YAML
            tier = recipe.tiers_of(kind)[0]
            specs.append({"tier": kind, "config": f"{SPEC_DIR}/{kind}.json", "model": model,
                          "path": tier.path if kind in ("disk", "fs") else None,
                          "obj_size": S3_OBJ_ELEMENTS if kind == "s3" else obj_elements})
        Path(spec_dir, "specs.json").write_text(json.dumps(specs))
        volumes[spec_dir] = {"bind": SPEC_DIR, "mode": "ro"}
        volumes[str(shipped("checks") / "tiers" / "roundtrip.py")] = {"bind": DRIVER, "mode": "ro"}
        command = ["python", DRIVER, "--spec", f"{SPEC_DIR}/specs.json", "--module", check_tool["module"],
                   "--mode", check_tool["mode"], "--num-keys", str(num_keys), "--obj-size", str(obj_elements),
                   "--timeout", str(TIER_TIMEOUT_S)]
        container = engine.containers.run(ctx.image_tag, command, entrypoint="", detach=True, network_mode="host",
                                          environment=environment, volumes=volumes)
        try:
            container.wait(timeout=TIER_TIMEOUT_S * len(specs) + 60)
            output = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        finally:
            container.remove(force=True)
    reports = {}
    for line in output.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
            reports[report["tier"]] = report
    return [judge(tier, reports.get(tier.kind), model, 2 * (S3_OBJ_ELEMENTS if tier.kind == "s3" else obj_elements))
            for tier in recipe.cache.tiers]


def judge(tier, report: dict | None, model: str, chunk_bytes: int = OBJ_ELEMENTS * 2) -> TierOutcome:
    """One tier's verdict: ok when every chunk was absent before, present after, and read back equal."""
    if report is None:
        return TierOutcome(tier.kind, False, f"{tier.kind}: no result (the check container did not finish)")
    rows = report.get("rows", {})
    figures = _figures(rows, chunk_bytes)
    seen = ""
    if tier.kind == "s3":
        seen = _s3_seen_and_removed(tier, model)
    elif tier.kind in ("disk", "fs"):
        seen = f"{report.get('files_seen', 0)} file(s) seen in {tier.path}, removed"
    total = rows.get("GET", {}).get("total", 0)
    ok = bool(rows) and all(rows.get(op, {}).get("passed") == total
                            for op in ("EXISTS (non-exist)", "EXISTS (exist)", "GET"))
    if ok:
        text = (f"{tier.kind} ok: put {figures['put_ms']:.2f} ms ({figures['put_mb_s']:.1f} MB/s), get "
                f"{figures['get_ms']:.2f} ms ({figures['get_mb_s']:.1f} MB/s)")
        return TierOutcome(tier.kind, True, text + (f"; {seen}" if seen else ""), figures)
    return TierOutcome(tier.kind, False, f"{tier.kind} failed: {cause(tier, report, chunk_bytes)}", figures)


def _figures(rows: dict, chunk_bytes: int) -> dict:
    figures = {"chunk_bytes": chunk_bytes}
    for op, name in (("PUT", "put"), ("GET", "get")):
        avg = rows.get(op, {}).get("avg_ms")
        if avg:
            figures[f"{name}_ms"] = avg
            figures[f"{name}_mb_s"] = chunk_bytes / (avg / 1000) / 1e6
    return figures


def cause(tier, report: dict, chunk_bytes: int) -> str:
    """The cause in words, from the tier's own facts first and LMCache's log second."""
    log = "\n".join(report.get("log_tail", []))
    rows = report.get("rows", {})
    counts = ", ".join(f"{op} {r['passed']}/{r['total']}" for op, r in rows.items()) or "no result table"
    if tier.kind in ("disk", "fs"):
        if report.get("read_only") or "Read-only file system" in log or "Permission denied" in log:
            return f"path not writable: {tier.path} ({counts})"
        if "No space left" in log or report.get("free_bytes", 1 << 40) < chunk_bytes * 2:
            return f"no space: {tier.path} has {report.get('free_bytes', 0)} bytes free ({counts})"
    if tier.kind == "s3":
        from stackctl.doctor import s3_probe

        verdict = s3_probe.check_bucket(tier)
        if not verdict.ok:
            return f"{verdict.message} ({counts})"
    get = rows.get("GET")
    if get and rows.get("EXISTS (exist)", {}).get("passed") == get["total"] and get["passed"] < get["total"]:
        return f"content mismatch: chunks read back differ ({counts})"
    if report.get("timed_out"):
        return f"timed out after {report.get('seconds')} s ({counts}); last log line: {_last(log)}"
    return f"round trip failed ({counts}); last log line: {_last(log)}"


def _last(log: str) -> str:
    lines = [line for line in log.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "none"


def _s3_seen_and_removed(tier, model: str) -> str:
    from stackctl.doctor import s3_probe

    try:
        keys = s3_probe.list_keys(tier, model)
        s3_probe.delete_keys(tier, keys)
        left = s3_probe.list_keys(tier, model)
    except Exception as exc:  # listing is evidence, not the verdict
        return f"objects not listed ({type(exc).__name__}: {exc})"
    return f"{len(keys)} object(s) seen in bucket {s3_probe.endpoint_of(tier).bucket}, removed" + (
        f" ({len(left)} left)" if left else "")
