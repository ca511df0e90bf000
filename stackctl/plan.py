"""KV-cache capacity planning: does the working set fit in HBM, and which LMCache tier has to hold it?

Pure: every fact comes in as an argument (the CLI gathers model shape, GPU memory, weights size, tier sizes and host
RAM/disk from the recipe and the host). All sizes are bytes; GB = 10^9 and GiB = 2^30 only appear when printing.

Tiers are inclusive, not additive: LMCache writes every stored chunk to each configured backend (CPU, then disk),
and vLLM's HBM prefix cache is a separate, smaller copy. So the working set must fit in one tier to be served
from it; the regime names the smallest tier that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from stackctl.errors import StackctlError
from stackctl.knowledge.kv_math import (
    GB,
    HEAD_DIM_FROM_HIDDEN,
    GiB,
    ModelShape,
    kv_footprint,
)

# Share of each GPU's VRAM kept out of the KV budget for what vLLM takes before it sizes the cache: the profiled
# activation peak (max_num_batched_tokens), HIP graph pools and non-torch allocations (RCCL buffers). 5% of an
# MI300X is ~10 GB; with it, 2x MI300X at 0.9 hold ~513k bf16 tokens of MiniMax-M2, in line with the ~500K that
# vLLM's MiniMax-M2 recipe quotes for 2x 192G AMD GPUs.
OVERHEAD_RESERVE_FRACTION = 0.05

# Host RAM the CPU tier must leave free for the OS, the vLLM processes (tokenizer, scheduler, pinned staging) and
# the page cache that model loading uses: the larger of 10% of RAM and 32 GiB.
HOST_RAM_HEADROOM_FRACTION = 0.10
HOST_RAM_HEADROOM_MIN_BYTES = 32 * GiB

REGIME_FITS_HBM = "fits-hbm"
REGIME_CPU_TIER = "cpu-tier-pays-off"
REGIME_DISK_TIER = "needs-disk-tier"
REGIME_REMOTE_TIER = "needs-remote-tier"  # only a remote store (S3, fs) holds the working set
REGIME_DOES_NOT_FIT = "does-not-fit"
REGIME_UNKNOWN = "unknown"  # GPU memory or weights size not known: no claim either way
REGIMES = (REGIME_FITS_HBM, REGIME_CPU_TIER, REGIME_DISK_TIER, REGIME_REMOTE_TIER, REGIME_DOES_NOT_FIT,
           REGIME_UNKNOWN)

# Published measurement behind "fits-hbm": the LMCache connector costs latency when it cannot help.
LOW_LOAD_OVERHEAD = "one benchmark saw +16% mean TTFT at low load"


@dataclass
class Plan:
    """The capacity plan for one recipe. Byte fields are exact integers; token fields are whole tokens."""

    model: str
    attention: str
    num_hidden_layers: int
    num_key_value_heads: int
    head_dim: int
    head_dim_source: str
    mla_latent_dim: int | None  # kv_lora_rank + qk_rope_head_dim for MLA models
    kv_cache_dtype: str
    model_dtype: str
    kv_dtype_bytes: int
    tensor_parallel: int
    kv_heads_per_gpu: int
    bytes_per_token_total: int  # model-wide unique
    bytes_per_token_per_gpu: int
    bytes_per_token_all_gpus: int  # per GPU x TP: what a token costs in HBM
    bytes_per_token_tier: int  # what a token costs in an LMCache tier
    gpu_memory_utilization: float
    gpu_vram_bytes: int | None
    weights_bytes: int | None
    usable_hbm_bytes: int | None  # TP x VRAM x utilization
    reserve_bytes: int | None
    hbm_kv_bytes: int | None
    hbm_tokens: int | None
    cpu_tier_bytes: int
    cpu_tier_tokens: int
    disk_tier_bytes: int
    disk_tier_tokens: int
    remote_tiers: list[str]  # kinds of the remote tiers (s3, fs): capacity is the store's, not this host's
    users: int
    context_tokens: int
    working_set_tokens: int
    working_set_bytes: int  # unique bytes: users x context x bytes_per_token_total
    working_set_hbm_bytes: int
    working_set_tier_bytes: int
    host_ram_bytes: int | None
    host_ram_headroom_bytes: int | None
    disk_free_bytes: int | None
    regime: str
    recommendation: str
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    host_ram_source: str = ""  # "--host-ram", or "this machine" when plan measured the host it runs on

    def to_dict(self) -> dict:
        """JSON-ready dict, with the constants the figures depend on."""
        data = asdict(self)
        data["constants"] = {
            "overhead_reserve_fraction": OVERHEAD_RESERVE_FRACTION,
            "host_ram_headroom_fraction": HOST_RAM_HEADROOM_FRACTION,
            "host_ram_headroom_min_bytes": HOST_RAM_HEADROOM_MIN_BYTES,
        }
        return data


def _gb(n: float) -> str:
    return f"{n / GB:,.1f} GB"


def _tokens(n: int) -> str:
    return f"{n:,} tokens"


def _check_inputs(
    tensor_parallel: int,
    gpu_memory_utilization: float,
    gpu_vram_bytes: int | None,
    weights_bytes: int | None,
    users: int,
    context_tokens: int,
    tiers: Sequence[tuple[str, int]],
) -> None:
    if not isinstance(tensor_parallel, int) or tensor_parallel < 1:
        raise StackctlError(f"tensor_parallel must be a positive integer, got {tensor_parallel!r}")
    if not 0 < gpu_memory_utilization <= 1:
        raise StackctlError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")
    if gpu_vram_bytes is not None and gpu_vram_bytes <= 0:
        raise StackctlError(f"GPU memory must be > 0 bytes, got {gpu_vram_bytes!r}")
    if weights_bytes is not None and weights_bytes < 0:
        raise StackctlError(f"weights size must be >= 0 bytes, got {weights_bytes!r}")
    if users < 1 or context_tokens < 1:
        raise StackctlError(f"users and context tokens must be >= 1, got {users!r} and {context_tokens!r}")
    for label, value in tiers:
        if value < 0:
            raise StackctlError(f"{label} must be >= 0 bytes, got {value!r}")


def host_ram_headroom(host_ram_bytes: int) -> int:
    """Host RAM the CPU tier must leave free: max(HOST_RAM_HEADROOM_FRACTION x RAM, HOST_RAM_HEADROOM_MIN_BYTES)."""
    return max(int(host_ram_bytes * HOST_RAM_HEADROOM_FRACTION), HOST_RAM_HEADROOM_MIN_BYTES)


def make_plan(
    model: ModelShape,
    *,
    tensor_parallel: int,
    kv_cache_dtype: str,
    gpu_memory_utilization: float,
    gpu_vram_bytes: int | None,
    weights_bytes: int | None,
    cpu_tier_bytes: int | None,
    disk_tier_bytes: int | None,
    users: int,
    context_tokens: int,
    host_ram_bytes: int | None = None,
    disk_free_bytes: int | None = None,
    serve_dtype: str = "auto",
    extra_notes: Sequence[str] = (),
    remote_tiers: Sequence[str] = (),
) -> Plan:
    """Size the KV cache of one serving setup against HBM and the LMCache tiers.

    Tier sizes of None mean no such tier; cpu_tier_bytes is the CPU tier over all TP ranks together.
    serve_dtype is vLLM --dtype (what kv_cache_dtype "auto" follows when set). extra_notes carry the caller's
    provenance (e.g. "GPU memory from the built-in table", "weights size approximate") into the plan's notes.
    remote_tiers names the recipe's remote tier kinds (s3, fs): their capacity is the store's, not planned here.
    """
    cpu_tier_bytes = int(cpu_tier_bytes or 0)
    disk_tier_bytes = int(disk_tier_bytes or 0)
    _check_inputs(
        tensor_parallel,
        gpu_memory_utilization,
        gpu_vram_bytes,
        weights_bytes,
        users,
        context_tokens,
        (("CPU tier size", cpu_tier_bytes), ("disk tier size", disk_tier_bytes)),
    )
    fp = kv_footprint(model, kv_cache_dtype, tensor_parallel, serve_dtype)
    warnings: list[str] = []
    notes: list[str] = list(extra_notes) + list(model.notes)

    # LMCache stores each TP rank's shard (so replicated heads are stored once per rank). For MLA every rank holds
    # the same latent and only the first rank stores it (save_only_first_rank defaults to use_mla; LMCache 0.5.6
    # lmcache/v1/cache_engine.py:116-119 and :303-321: only that rank creates a storage manager), so of a tier
    # sized across all ranks only the first rank's share (size / TP) ever holds data.
    tier_bpt = fp.total if model.is_mla else fp.across_gpus
    storing_ranks = 1 if model.is_mla else tensor_parallel

    usable = reserve = hbm_kv = hbm_tokens = None
    if gpu_vram_bytes is not None and weights_bytes is not None:
        usable = int(tensor_parallel * gpu_vram_bytes * gpu_memory_utilization)
        reserve = int(tensor_parallel * gpu_vram_bytes * OVERHEAD_RESERVE_FRACTION)
        hbm_kv = usable - weights_bytes - reserve
        hbm_tokens = max(hbm_kv, 0) // fp.across_gpus
    cpu_tokens = cpu_tier_bytes * storing_ranks // tensor_parallel // tier_bpt
    disk_tokens = disk_tier_bytes * storing_ranks // tensor_parallel // tier_bpt
    ws_tokens = users * context_tokens
    ws_tier_bytes = ws_tokens * tier_bpt

    headroom = None
    if host_ram_bytes is not None:
        headroom = host_ram_headroom(host_ram_bytes)
        if cpu_tier_bytes and cpu_tier_bytes > host_ram_bytes - headroom:
            warnings.append(
                f"CPU tier {_gb(cpu_tier_bytes)} exceeds host RAM {_gb(host_ram_bytes)} minus "
                f"{_gb(headroom)} headroom (= {_gb(max(host_ram_bytes - headroom, 0))} available); "
                f"shrink the tier or the host will swap or OOM-kill vLLM"
            )
    if disk_free_bytes is not None and disk_tier_bytes > disk_free_bytes:
        warnings.append(
            f"disk tier {_gb(disk_tier_bytes)} exceeds free disk {_gb(disk_free_bytes)} "
            f"by {_gb(disk_tier_bytes - disk_free_bytes)}; LMCache will fail writes once the disk is full"
        )

    if model.head_dim_source == HEAD_DIM_FROM_HIDDEN and not model.is_mla:
        notes.append(f"config.json has no head_dim: used hidden_size/num_attention_heads = {model.head_dim}")
    if fp.replicated and not model.is_mla:
        notes.append(
            f"tensor_parallel {tensor_parallel} > {model.num_key_value_heads} KV heads: each GPU holds a copy of "
            f"one head, so HBM holds {tensor_parallel // model.num_key_value_heads}x the unique KV bytes"
        )
    if model.is_mla and tensor_parallel > 1:
        notes.append(
            f"MLA: every GPU holds the full {fp.per_gpu:,} B/token latent; LMCache stores it on the first rank only, "
            f"so each tier holds 1/{tensor_parallel} of its size in KV (capacities above count that rank only); "
            f"give that rank more with cache.extra first_rank_max_local_cpu_size"
        )
    if usable is not None:
        notes.append(
            f"HBM for KV = TP x VRAM x utilization - weights - reserve ({OVERHEAD_RESERVE_FRACTION:.0%} of VRAM for "
            f"activations, graph pools and RCCL buffers)"
        )

    regime, recommendation = _judge(
        fp_dtype_bytes=fp.dtype_bytes,
        hbm_kv=hbm_kv,
        hbm_tokens=hbm_tokens,
        cpu_tier_bytes=cpu_tier_bytes,
        cpu_tokens=cpu_tokens,
        disk_tier_bytes=disk_tier_bytes,
        disk_tokens=disk_tokens,
        ws_tokens=ws_tokens,
        ws_tier_bytes=ws_tier_bytes,
        users=users,
        context_tokens=context_tokens,
        gpu_vram_bytes=gpu_vram_bytes,
        weights_bytes=weights_bytes,
        host_ram_bytes=host_ram_bytes,
        headroom=headroom,
        remote_tiers=tuple(remote_tiers),
    )
    return Plan(
        model=model.name,
        attention=model.attention,
        num_hidden_layers=model.num_hidden_layers,
        num_key_value_heads=model.num_key_value_heads,
        head_dim=model.head_dim,
        head_dim_source=model.head_dim_source,
        mla_latent_dim=model.mla_latent_dim,
        kv_cache_dtype=kv_cache_dtype,
        model_dtype=model.dtype if (serve_dtype or "auto").lower() == "auto" else serve_dtype,
        kv_dtype_bytes=fp.dtype_bytes,
        tensor_parallel=tensor_parallel,
        kv_heads_per_gpu=fp.kv_heads_per_gpu,
        bytes_per_token_total=fp.total,
        bytes_per_token_per_gpu=fp.per_gpu,
        bytes_per_token_all_gpus=fp.across_gpus,
        bytes_per_token_tier=tier_bpt,
        gpu_memory_utilization=gpu_memory_utilization,
        gpu_vram_bytes=gpu_vram_bytes,
        weights_bytes=weights_bytes,
        usable_hbm_bytes=usable,
        reserve_bytes=reserve,
        hbm_kv_bytes=hbm_kv,
        hbm_tokens=hbm_tokens,
        cpu_tier_bytes=cpu_tier_bytes,
        cpu_tier_tokens=cpu_tokens,
        disk_tier_bytes=disk_tier_bytes,
        disk_tier_tokens=disk_tokens,
        remote_tiers=list(remote_tiers),
        users=users,
        context_tokens=context_tokens,
        working_set_tokens=ws_tokens,
        working_set_bytes=ws_tokens * fp.total,
        working_set_hbm_bytes=ws_tokens * fp.across_gpus,
        working_set_tier_bytes=ws_tier_bytes,
        host_ram_bytes=host_ram_bytes,
        host_ram_headroom_bytes=headroom,
        disk_free_bytes=disk_free_bytes,
        regime=regime,
        recommendation=recommendation,
        warnings=warnings,
        notes=notes,
    )


def _judge(
    *,
    fp_dtype_bytes: int,
    hbm_kv: int | None,
    hbm_tokens: int | None,
    cpu_tier_bytes: int,
    cpu_tokens: int,
    disk_tier_bytes: int,
    disk_tokens: int,
    ws_tokens: int,
    ws_tier_bytes: int,
    users: int,
    context_tokens: int,
    gpu_vram_bytes: int | None,
    weights_bytes: int | None,
    host_ram_bytes: int | None,
    headroom: int | None,
    remote_tiers: tuple[str, ...] = (),
) -> tuple[str, str]:
    """The regime and one recommendation sentence with the figures that decided it."""
    ws = f"the working set of {_tokens(ws_tokens)} ({users} users x {context_tokens:,}, {_gb(ws_tier_bytes)})"
    fp8_hint = ' An fp8 KV cache (kv_cache_dtype = "fp8") would halve it.' if fp_dtype_bytes >= 2 else ""

    if hbm_kv is None:
        missing = " and ".join(
            label for label, value in (("GPU memory", gpu_vram_bytes), ("weights size", weights_bytes)) if value is None
        )
        return REGIME_UNKNOWN, (
            f"Cannot place {ws}: {missing} unknown. "
            + ("Name the GPU with --gpu (e.g. --gpu MI300X) or versions.gpu_arch, or run plan on the GPU host so "
               "stackctl can probe it. " if gpu_vram_bytes is None else "")
            + ("Point model.path at the weights (a directory with *.safetensors) or use a model of the built-in "
               "table." if weights_bytes is None else "")
        )
    assert hbm_tokens is not None and weights_bytes is not None  # both known whenever hbm_kv is
    if hbm_kv <= 0:
        return REGIME_DOES_NOT_FIT, (
            f"The weights ({_gb(weights_bytes)}) and the activation reserve leave no HBM for the KV cache "
            f"({_gb(hbm_kv)}): raise tensor_parallel or gpu_memory_utilization, or use a smaller or quantised model."
        )
    if ws_tokens <= hbm_tokens:
        tiers = cpu_tier_bytes or disk_tier_bytes
        advice = (
            f" The LMCache tiers add only overhead here ({LOW_LOAD_OVERHEAD}): turn the cache off unless you need "
            f"KV shared across instances or kept over restarts."
            if tiers
            else " LMCache would only add overhead (" + LOW_LOAD_OVERHEAD + "): serve HBM-only."
        )
        return REGIME_FITS_HBM, (f"HBM holds {_tokens(hbm_tokens)} ({_gb(hbm_kv)}), enough for {ws}.{advice}")
    share = f"HBM holds {_tokens(hbm_tokens)}, {hbm_tokens / ws_tokens:.0%} of {ws}"
    if ws_tokens <= cpu_tokens:
        extra = (
            " The disk tier is not needed for this working set (it only keeps KV warm across restarts)."
            if disk_tier_bytes
            else ""
        )
        return REGIME_CPU_TIER, (
            f"{share}; the CPU tier ({_gb(cpu_tier_bytes)}, {_tokens(cpu_tokens)}) holds all of it, so LMCache's "
            f"CPU tier pays off.{extra}"
        )
    if ws_tokens <= disk_tokens:
        cpu_part = (
            f"the CPU tier ({_gb(cpu_tier_bytes)}) holds {_tokens(cpu_tokens)} ({cpu_tokens / ws_tokens:.0%}) as the "
            f"hot set"
            if cpu_tier_bytes
            else "there is no CPU tier (LMCache's disk tier needs one in front of it)"
        )
        return REGIME_DISK_TIER, (
            f"{share}; {cpu_part}, and the disk tier ({_gb(disk_tier_bytes)}, {_tokens(disk_tokens)}) holds all "
            f"of it: keep the NVMe tier.{fp8_hint}"
        )
    if remote_tiers:
        local = max(cpu_tokens, disk_tokens)
        kinds = " and ".join(remote_tiers)
        return REGIME_REMOTE_TIER, (
            f"{share}; the local tiers hold {_tokens(local)} ({local / ws_tokens:.0%}); the rest lives in the "
            f"{kinds} tier, whose capacity is the store's (not this host's): every hit there pays a network fetch, "
            f"so keep the hot set local with a larger CPU or disk tier.{fp8_hint}"
        )
    # No configured tier holds it: say which tier could.
    if host_ram_bytes is not None and headroom is not None and ws_tier_bytes <= host_ram_bytes - headroom:
        fix = f"raise the CPU tier to at least {_gb(ws_tier_bytes)} (host RAM allows it)"
    else:
        fix = f"add or raise a disk tier to at least {_gb(ws_tier_bytes)}"
    largest = max(cpu_tokens, disk_tokens, hbm_tokens)
    return REGIME_DOES_NOT_FIT, (
        f"{share}; the largest tier holds {_tokens(largest)}, short of {ws}: {fix}, or serve fewer users or "
        f"shorter contexts; the rest is recomputed.{fp8_hint}"
    )


# ---------------------------------------------------------------------------------------------------------------
# Text output for people: one aligned table, bytes shown as exact bytes, GB (10^9) and GiB (2^30) side by side.


def _row(label: str, value: int | None, tokens: int | None = None, zero: str = "") -> tuple:
    if value is None:
        return (label, "unknown", "", "", "")
    if zero and value == 0:
        return (label, zero, "", "", "")
    return (
        label,
        f"{value:,}",
        f"{value / GB:,.2f}",
        f"{value / GiB:,.2f}",
        "" if tokens is None else f"{tokens:,}",
    )


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        lines.append(("  " + "  ".join(cells)).rstrip())
    return lines


def format_text(plan: Plan) -> str:
    """The plan as an aligned table plus the regime, recommendation, warnings and notes."""
    tp = plan.tensor_parallel
    gpus = f"{tp} GPU{'s' if tp > 1 else ''}"
    resolved = f" = {plan.model_dtype}" if plan.kv_cache_dtype.strip().lower() == "auto" else ""
    dtype = f"{plan.kv_cache_dtype}{resolved} ({plan.kv_dtype_bytes} byte{'s' if plan.kv_dtype_bytes > 1 else ''})"
    if plan.attention == "mla":
        shape = f"MLA, {plan.num_hidden_layers} layers x latent {plan.mla_latent_dim} (kv_lora_rank + qk_rope_head_dim)"
    else:
        shape = (
            f"{plan.attention.upper()}, {plan.num_hidden_layers} layers x {plan.num_key_value_heads} KV heads x "
            f"head_dim {plan.head_dim} ({plan.head_dim_source})"
        )
    lines = [
        f"KV capacity plan: {plan.model}",
        f"  {shape}; KV dtype {dtype}; tensor_parallel {tp}",
        "  GB = 10^9 bytes, GiB = 2^30 bytes",
        "",
    ]
    if plan.attention == "mla":
        held = "full latent"
    else:
        held = f"{plan.kv_heads_per_gpu} KV head{'s' if plan.kv_heads_per_gpu > 1 else ''}"
    per_token = [
        ("KV bytes per token", "bytes", "", "", ""),
        ("  model-wide (unique)", f"{plan.bytes_per_token_total:,}", "", "", ""),
        (f"  per GPU ({held})", f"{plan.bytes_per_token_per_gpu:,}", "", "", ""),
        (f"  all {gpus} (HBM cost)", f"{plan.bytes_per_token_all_gpus:,}", "", "", ""),
        ("  in an LMCache tier", f"{plan.bytes_per_token_tier:,}", "", "", ""),
    ]
    memory = [
        ("Memory", "bytes", "GB", "GiB", "tokens"),
        _row("  GPU VRAM, per GPU", plan.gpu_vram_bytes),
        _row(f"  x {gpus} x utilization {plan.gpu_memory_utilization:g}", plan.usable_hbm_bytes),
        _row("  - weights", plan.weights_bytes),
        _row(f"  - reserve ({OVERHEAD_RESERVE_FRACTION:.0%} of VRAM)", plan.reserve_bytes),
        _row("  = HBM for KV", plan.hbm_kv_bytes, plan.hbm_tokens),
        _row("  CPU tier", plan.cpu_tier_bytes, plan.cpu_tier_tokens, zero="none"),
        _row("  disk tier", plan.disk_tier_bytes, plan.disk_tier_tokens, zero="none"),
        *[(f"  remote tier ({kind})", "the store's", "", "", "") for kind in plan.remote_tiers],
        _row(
            f"  working set ({plan.users} x {plan.context_tokens:,} tokens)",
            plan.working_set_tier_bytes,
            plan.working_set_tokens,
        ),
    ]
    if plan.host_ram_bytes is not None and plan.host_ram_headroom_bytes is not None:
        source = {"this machine": "this machine's, not --host-ram"}.get(plan.host_ram_source, plan.host_ram_source)
        available = plan.host_ram_bytes - plan.host_ram_headroom_bytes
        memory.append(_row(f"  host RAM ({source})" if source else "  host RAM", plan.host_ram_bytes))
        memory.append(_row(f"  - headroom kept free, max({HOST_RAM_HEADROOM_FRACTION:.0%}, "
                           f"{HOST_RAM_HEADROOM_MIN_BYTES // GiB} GiB)", plan.host_ram_headroom_bytes))
        memory.append(_row("  = RAM a CPU tier may use", max(available, 0),
                           zero="0 (headroom > RAM)"))
    if plan.disk_free_bytes is not None:
        memory.append(_row("  free disk", plan.disk_free_bytes))
    table = _table(per_token + [("", "", "", "", "")] + memory)
    lines.extend(table)
    lines += ["", f"Regime: {plan.regime}", f"  {plan.recommendation}"]
    if plan.warnings:
        lines += ["", "Warnings:"] + [f"  ! {w}" for w in plan.warnings]
    if plan.notes:
        lines += ["", "Notes:"] + [f"  - {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"


def plan_recipe(recipe, *, users: int, context_tokens: int, gpu: str | None = None, host=None,
                host_ram_bytes: int | None = None) -> Plan:
    """The plan for a recipe: model shape from its config.json (else the built-in table), GPU memory from the host
    (else --gpu, else the recipe's gpu_arch), tier sizes from the recipe, RAM from --host-ram (else this host, and
    the plan says so) and disk free space from this host."""
    import os
    from pathlib import Path

    from stackctl.errors import StackctlError
    from stackctl.knowledge.gpu_table import lookup_gpu
    from stackctl.knowledge.model_table import lookup, recipe_shape
    from stackctl.knowledge.weights import weights_size

    model_dir = Path(recipe.model.path)
    resolved = recipe_shape(recipe)
    if resolved is None:
        raise StackctlError(f"{recipe.source}: model.path {recipe.model.path!r}: no config.json there and not in the "
                            "built-in model table (fix: run plan where the model directory is readable)")
    shape, shape_source = resolved
    notes = [f"model shape from {shape_source}"]
    weights = weights_size(model_dir) if model_dir.is_dir() else None
    weights_bytes = weights.bytes if weights else None
    if weights is None:
        entry = lookup(recipe.model.path)
        weights_bytes = entry.weights_bytes if entry else None
        if entry and weights_bytes:
            notes.append(f"weights size from the built-in table ({entry.weights_source})")
    vram = None
    if host is not None and host.gpus and recipe.stack.platform == "rocm":
        vram = min((g.vram_bytes for g in host.gpus if g.vram_bytes), default=None)
        if vram:
            notes.append(f"GPU memory probed on this host ({host.gpus[0].name})")
    if vram is None and recipe.stack.platform == "rocm":
        match = lookup_gpu(gpu or " ".join(recipe.versions.gpu_arch))
        if match:
            vram = match.spec.vram_bytes
            notes.append(f"GPU memory from the built-in table: {match.spec.name}" + (f" ({match.note})"
                                                                                       if match.note else ""))
    cpu = recipe.tiers_of("cpu") if recipe.cache.enabled else []
    disk = recipe.tiers_of("disk") if recipe.cache.enabled else []
    disk_free = None
    if disk and os.path.isdir(disk[0].path):
        stat = os.statvfs(disk[0].path)
        disk_free = stat.f_bavail * stat.f_frsize
    ram, ram_source = host_ram_bytes, "--host-ram"
    if ram is not None:
        notes.append(f"host RAM {ram / GiB:,.1f} GiB from --host-ram")
    elif host is not None and host.memory.total_bytes:
        ram, ram_source = host.memory.total_bytes, "this machine"
        notes.append(f"host RAM {ram / GiB:,.1f} GiB: this machine's; plan for the serving host with --host-ram GIB")
    remote = [t.kind for t in recipe.cache.tiers if t.kind in ("s3", "fs")] if recipe.cache.enabled else []
    plan = make_plan(
        shape, tensor_parallel=recipe.model.tensor_parallel, kv_cache_dtype=recipe.model.kv_cache_dtype,
        gpu_memory_utilization=recipe.serve.gpu_memory_utilization, gpu_vram_bytes=vram,
        weights_bytes=weights_bytes, cpu_tier_bytes=int(cpu[0].size_gb * GiB) if cpu else None,
        disk_tier_bytes=int(disk[0].size_gb * GiB) if disk else None, users=users, context_tokens=context_tokens,
        host_ram_bytes=ram, disk_free_bytes=disk_free, serve_dtype=recipe.model.dtype, extra_notes=notes,
        remote_tiers=remote)
    plan.host_ram_source = ram_source if ram is not None else ""
    limit = recipe.model.max_model_len
    if limit and context_tokens > limit:
        plan.warnings.append(f"--context {context_tokens:,} exceeds model.max_model_len {limit:,}: vLLM refuses "
                             f"longer requests; plan with --context {limit:,} or raise max_model_len")
    return plan
