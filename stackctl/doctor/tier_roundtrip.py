"""image.tiers: LMCache's storage round trip for every tier the recipe names, in the stack's image, with the stack's
LMCache config, tier mounts, environment and secrets.

One container run executes probes/tiers/roundtrip.py, which drives LMCache's own StorageManager once per tier with a
config holding only that tier (a lower tier with `local_cpu: false`, so reads cannot be served from RAM) and a fresh
model name (stale objects cannot fake a pass). Every tier moves the same object: one real KV chunk of the recipe's
model (`chunk_size` tokens x the bytes a token costs one tensor-parallel rank, stackctl/knowledge/kv_math.py), enough
of them that the MB/s figures are rates over at least ROUND_TRIP_MIN_BYTES, not the latency of one small object.
stackctl then sees the objects where the tier keeps them, removes them, and judges each tier from the counts (absent
before the put, stored after it, read back equal).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from stackctl.engine import docker_adapter as dk
from stackctl.knowledge.kinds import TIER_KIND_RECORDS, kind_of
from stackctl.knowledge.kv_math import GiB, MiB
from stackctl.resources import shipped
from stackctl.storage.registry import storage_of
from stackctl.text import size_text

# Keys of LMCache's config that name a tier; each tier's config keeps everything else of the stack's config.
TIER_KEYS = (*(key for kind in TIER_KIND_RECORDS for key in kind.lmcache_keys), "remote_serde")
TIER_EXTRA_KEYS = tuple(key for kind in TIER_KIND_RECORDS for key in kind.lmcache_extra_keys)
CHECK_CPU_GB = 0.05              # the smallest CPU buffer of the check (GiB, as LMCache reads max_local_cpu_size)
ROUND_TRIP_MIN_BYTES = 16 * MiB  # each tier moves at least this much each way (unless MAX_KEYS chunks are fewer)
MIN_KEYS, MAX_KEYS = 4, 64
STAND_IN_CHUNK_BYTES = MiB       # the chunk when the model's shape is unknown
TIER_TIMEOUT_S = 90
DRIVER = "/opt/stackctl/doctor/roundtrip.py"
SPEC_DIR = "/opt/stackctl/doctor/spec"
DTYPE_NAMES = {1: "uint8", 2: "bfloat16", 4: "float32"}  # torch dtype of a chunk, by KV element size


@dataclass(frozen=True)
class KVChunk:
    """One LMCache chunk of the recipe's model as one rank stores it: [kv, layers, tokens, hidden] elements."""

    model: str
    layers: int
    kv_size: int  # 2 (K and V) or 1 (an MLA latent)
    tokens: int
    hidden: int   # KV heads of one rank x head_dim, or the MLA latent width
    dtype_bytes: int
    stand_in: str = ""  # why the shape is not the model's, when it is not

    @property
    def bytes(self) -> int:
        return self.kv_size * self.layers * self.tokens * self.hidden * self.dtype_bytes

    def spec(self) -> dict:
        return {"layers": self.layers, "kv_size": self.kv_size, "tokens": self.tokens, "hidden": self.hidden,
                "dtype": DTYPE_NAMES[self.dtype_bytes]}

    def describe(self) -> str:
        if self.stand_in:
            return f"{size_text(self.bytes)} stand-in chunks ({self.stand_in})"
        return (f"{size_text(self.bytes)} KV chunks ({self.model}: {self.tokens} tokens x "
                f"{self.bytes // self.tokens:,} B)")


@dataclass
class TierOutcome:
    kind: str
    ok: bool
    message: str
    figures: dict = field(default_factory=dict)


def kv_chunk(recipe) -> KVChunk:
    """The chunk the recipe's server stores: its model's shape (config.json beside the weights, else the built-in
    table), KV dtype and tensor-parallel split, times cache.chunk_size tokens; a 1 MiB stand-in when the shape is
    unknown."""
    from stackctl.errors import StackctlError
    from stackctl.knowledge.kv_math import kv_footprint
    from stackctl.knowledge.model_table import recipe_shape

    tokens = recipe.cache.chunk_size
    try:
        resolved = recipe_shape(recipe)
        if resolved is None:
            raise StackctlError(f"model {recipe.model.path} is not in the built-in table and has no config.json here")
        shape = resolved[0]
        footprint = kv_footprint(shape, recipe.model.kv_cache_dtype, recipe.model.tensor_parallel,
                                 recipe.model.dtype)
    except StackctlError as exc:
        hidden = STAND_IN_CHUNK_BYTES // (2 * tokens * 2)
        return KVChunk(recipe.model.path, 1, 2, tokens, hidden, 2, stand_in=f"model shape unknown: {exc}")
    name = shape.name.rsplit("/", 1)[-1]
    if shape.is_mla:
        return KVChunk(name, shape.num_hidden_layers, 1, tokens, shape.mla_latent_dim or 0, footprint.dtype_bytes)
    return KVChunk(name, shape.num_hidden_layers, 2, tokens, footprint.kv_heads_per_gpu * shape.head_dim,
                   footprint.dtype_bytes)


def keys_per_tier(chunk_bytes: int) -> int:
    """Chunks each tier stores and reads back: enough for ROUND_TRIP_MIN_BYTES, within MIN_KEYS..MAX_KEYS."""
    return max(MIN_KEYS, min(MAX_KEYS, math.ceil(ROUND_TRIP_MIN_BYTES / chunk_bytes)))


def cpu_buffer_gib(chunk_bytes: int, keys: int) -> float:
    """LMCache's CPU buffer for the check: the cpu tier keeps every chunk, and a get allocates one more."""
    return max(CHECK_CPU_GB, math.ceil((keys + 2) * chunk_bytes * 1.25 / GiB * 100) / 100)


def tier_configs(spec, cpu_gib: float = CHECK_CPU_GB) -> dict[str, dict]:
    """One LMCache config per tier kind, derived from the stack's own config (its StackSpec's)."""
    full = spec.lmcache_config or {}  # empty when the cache is off: there are no tiers to check
    extra = {k: v for k, v in full.get("extra_config", {}).items() if k not in TIER_EXTRA_KEYS}
    base = {k: v for k, v in full.items() if k not in TIER_KEYS and k != "extra_config"}
    configs = {}
    for tier in spec.recipe.cache.tiers:
        config = dict(base, local_cpu=False, max_local_cpu_size=cpu_gib)
        settings, own_extra = spec.tier_lmcache(tier)
        config.update(settings, max_local_cpu_size=cpu_gib)  # the check's CPU buffer, whatever the tier's size
        if kind_of(tier).remote:
            config["remote_serde"] = "naive"
        tier_extra = dict(extra, **own_extra)
        if tier_extra:
            config["extra_config"] = tier_extra
        configs[tier.kind] = config
    return configs


def tier_specs(spec, chunk: KVChunk, keys: int, model: str, spec_dir: str, mounted_at: str = SPEC_DIR,
               kinds: set[str] | None = None) -> list:
    """Write one LMCache config per tier (of `kinds`, default all) into spec_dir and return the driver's spec list
    (paths as mounted)."""
    specs = []
    for kind, config in tier_configs(spec, cpu_buffer_gib(chunk.bytes, keys)).items():
        if kinds is not None and kind not in kinds:
            continue
        Path(spec_dir, f"{kind}.json").write_text(json.dumps(config))  # JSON is YAML
        tier = spec.recipe.tiers_of(kind)[0]
        specs.append({"tier": kind, "config": f"{mounted_at}/{kind}.json", "model": model,
                      "path": storage_of(tier).round_trip_path(tier), "chunk": chunk.spec(), "keys": keys})
    Path(spec_dir, "specs.json").write_text(json.dumps(specs))
    return specs


def run(ctx, chunk: KVChunk | None = None, keys: int | None = None) -> tuple[KVChunk, list[TierOutcome]]:
    """Run the round trip of every tier in one container; the chunk moved and one outcome per tier, in recipe
    order. A tier this host already sees failing (tier_preflight.py) gets that cause, without a round trip."""
    from stackctl.doctor.tier_preflight import tier_problem

    recipe = ctx.recipe
    chunk = chunk or kv_chunk(recipe)
    keys = keys or keys_per_tier(chunk.bytes)
    seen = {tier.kind: tier_problem(ctx, tier, chunk.bytes * keys) for tier in recipe.cache.tiers}
    runnable = {kind for kind, problem in seen.items() if not problem}
    model = f"stackctl-check-{uuid.uuid4().hex[:12]}"
    reports = _round_trips(ctx, chunk, keys, model, runnable) if runnable else {}
    outcomes = []
    for tier in recipe.cache.tiers:
        if seen[tier.kind]:
            outcomes.append(TierOutcome(tier.kind, False, f"{tier.kind} failed: {seen[tier.kind]} (seen from this "
                                                          "host: no round trip)"))
        else:
            outcomes.append(judge(tier, reports.get(tier.kind), model, chunk.bytes))
    return chunk, outcomes


def _round_trips(ctx, chunk: KVChunk, keys: int, model: str, kinds: set[str]) -> dict[str, dict]:
    """The driver's report per tier kind, from one check container running the round trip of `kinds`."""
    engine = ctx.engine()
    environment = dict(ctx.spec.environment)
    for container_var, host_var in ctx.spec.secret_references.items():
        if os.environ.get(host_var):
            environment[container_var] = os.environ[host_var]
    volumes = {m["host"]: {"bind": m["container"], "mode": m["mode"]} for m in ctx.spec.volumes}
    with tempfile.TemporaryDirectory(prefix="stackctl-tiers-") as spec_dir:
        specs = tier_specs(ctx.spec, chunk, keys, model, spec_dir, kinds=kinds)
        volumes[spec_dir] = {"bind": SPEC_DIR, "mode": "ro"}
        volumes[str(shipped("probes") / "tiers" / "roundtrip.py")] = {"bind": DRIVER, "mode": "ro"}
        command = ["python", DRIVER, "--spec", f"{SPEC_DIR}/specs.json", "--timeout", str(TIER_TIMEOUT_S)]
        output = dk.run_to_end(engine, ctx.image_tag, command, environment=environment, volumes=volumes,
                               timeout=TIER_TIMEOUT_S * len(specs) + 60)
    return read_reports(output)


def read_reports(output: str) -> dict[str, dict]:
    """The driver's per-tier JSON lines, by tier kind."""
    reports = {}
    for line in output.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
            reports[report["tier"]] = report
    return reports


def judge(tier, report: dict | None, model: str, chunk_bytes: int) -> TierOutcome:
    """One tier's verdict: ok when every chunk was absent before, stored after its put, and read back equal."""
    if report is None:
        return TierOutcome(tier.kind, False, f"{tier.kind}: no result (the check container did not finish)")
    figures = _figures(report, chunk_bytes)
    keys = report.get("keys", 0)
    ok = (keys > 0 and not report.get("error") and
          all(report.get(name) == keys for name in ("absent_before", "stored", "equal")))
    if not ok:
        return TierOutcome(tier.kind, False, f"{tier.kind} failed: {cause(tier, report, chunk_bytes)}", figures)
    seen, kind = storage_of(tier).seen_and_removed(tier, report, model), kind_of(tier)
    # LMCache's CPU backend keeps the chunk object itself (0.5.6 local_cpu_backend.py:163-168): no copy, no MB/s
    if not kind.lower:
        text = (f"cpu ok: put {figures['put_ms']:.3g} ms, get {figures['get_ms']:.3g} ms a chunk (kept in RAM by "
                "reference, no copy)")
    else:
        text = (f"{tier.kind} ok: put {figures['put_ms']:.3g} ms ({figures['put_mb_s']:,.0f} MB/s), get "
                f"{figures['get_ms']:.3g} ms ({figures['get_mb_s']:,.0f} MB/s)")
    return TierOutcome(tier.kind, True, text + (f"; {seen}" if seen else ""), figures)


def _figures(report: dict, chunk_bytes: int) -> dict:
    """Median latency of one operation, and MB/s (10^6 bytes) over all the bytes the tier moved."""
    figures = {"chunk_bytes": chunk_bytes, "keys": report.get("keys", 0)}
    for name in ("put", "get"):
        seconds = report.get(f"{name}_s") or []
        if seconds and sum(seconds) > 0:
            figures[f"{name}_ms"] = statistics.median(seconds) * 1000
            figures[f"{name}_bytes"] = chunk_bytes * len(seconds)
            figures[f"{name}_mb_s"] = chunk_bytes * len(seconds) / sum(seconds) / 1e6
    return figures


def counts(report: dict) -> str:
    keys = report.get("keys", 0)
    return (f"absent before {report.get('absent_before', 0)}/{keys}, stored {report.get('stored', 0)}/{keys}, read "
            f"back equal {report.get('equal', 0)}/{keys}")


def cause(tier, report: dict, chunk_bytes: int) -> str:
    """The cause in words, from the tier's own facts first and LMCache's log second."""
    log = "\n".join(report.get("log_tail", []))
    facts = counts(report) if "keys" in report else "no result"
    own = storage_of(tier).failure_cause(tier, report, chunk_bytes, log, facts)
    if own:
        return own
    if report.get("error"):
        return f"{report['error']} ({facts})"
    keys = report.get("keys", 0)
    if keys and report.get("stored") == keys and not report.get("get_missing") and report.get("equal", 0) < keys:
        return f"content mismatch: chunks read back differ ({facts})"
    if report.get("still_in_flight"):
        return f"{report['still_in_flight']} write(s) still in flight after 30 s ({facts})"
    if report.get("timed_out"):
        return f"timed out after {report.get('seconds')} s ({facts}); last log line: {_last(log)}"
    return f"round trip failed ({facts}); last log line: {_last(log)}"


def _last(log: str) -> str:
    lines = [line for line in log.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "none"

