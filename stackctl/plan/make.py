"""The capacity plan of one serving setup: the Plan record and make_plan, which sizes HBM and the tiers
(capacity.py), judges the regime (regime.py) and collects the notes that explain the figures.

Pure: every fact comes in as an argument (plan_recipe in recipe.py gathers model shape, GPU memory, weights size,
tier sizes and host RAM/disk from the recipe and the host).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from stackctl.errors import StackctlError
from stackctl.knowledge.kv_math import (
    HEAD_DIM_FROM_HIDDEN,
    KVFootprint,
    ModelShape,
    kv_footprint,
)
from stackctl.plan.capacity import (
    HOST_RAM_HEADROOM_FRACTION,
    HOST_RAM_HEADROOM_MIN_BYTES,
    OVERHEAD_RESERVE_FRACTION,
    host_warnings,
    measure_capacity,
)
from stackctl.plan.regime import judge


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
    kv_cache_bytes: int | None = None,
) -> Plan:
    """Size the KV cache of one serving setup against HBM and the LMCache tiers.

    Tier sizes of None mean no such tier; cpu_tier_bytes is the CPU tier over all TP ranks together.
    serve_dtype is vLLM --dtype (what kv_cache_dtype "auto" follows when set). extra_notes carry the caller's
    provenance (e.g. "GPU memory from the built-in table", "weights size approximate") into the plan's notes.
    remote_tiers names the recipe's remote tier kinds (s3, fs): their capacity is the store's, not planned here.
    kv_cache_bytes is a KV cache size per GPU set outright (--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE).
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
    ws_tokens = users * context_tokens
    cap = measure_capacity(
        model, fp, tensor_parallel=tensor_parallel, gpu_memory_utilization=gpu_memory_utilization,
        gpu_vram_bytes=gpu_vram_bytes, weights_bytes=weights_bytes, cpu_tier_bytes=cpu_tier_bytes,
        disk_tier_bytes=disk_tier_bytes, working_set_tokens=ws_tokens, host_ram_bytes=host_ram_bytes,
        kv_cache_bytes=kv_cache_bytes)
    regime, recommendation = judge(
        cap, users=users, context_tokens=context_tokens, kv_dtype_bytes=fp.dtype_bytes,
        gpu_vram_bytes=gpu_vram_bytes, weights_bytes=weights_bytes, remote_tiers=remote_tiers)
    notes = list(extra_notes) + list(model.notes) + shape_notes(model, fp, hbm_known=cap.usable_hbm_bytes is not None)
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
        bytes_per_token_tier=cap.tier_bytes_per_token,
        gpu_memory_utilization=gpu_memory_utilization,
        gpu_vram_bytes=gpu_vram_bytes,
        weights_bytes=weights_bytes,
        usable_hbm_bytes=cap.usable_hbm_bytes,
        reserve_bytes=cap.reserve_bytes,
        hbm_kv_bytes=cap.hbm_kv_bytes,
        hbm_tokens=cap.hbm_tokens,
        cpu_tier_bytes=cpu_tier_bytes,
        cpu_tier_tokens=cap.cpu_tokens,
        disk_tier_bytes=disk_tier_bytes,
        disk_tier_tokens=cap.disk_tokens,
        remote_tiers=list(remote_tiers),
        users=users,
        context_tokens=context_tokens,
        working_set_tokens=ws_tokens,
        working_set_bytes=ws_tokens * fp.total,
        working_set_hbm_bytes=ws_tokens * fp.across_gpus,
        working_set_tier_bytes=cap.working_set_tier_bytes,
        host_ram_bytes=host_ram_bytes,
        host_ram_headroom_bytes=cap.headroom_bytes,
        disk_free_bytes=disk_free_bytes,
        regime=regime,
        recommendation=recommendation,
        warnings=host_warnings(cap, disk_free_bytes),
        notes=notes,
    )


def shape_notes(model: ModelShape, fp: KVFootprint, *, hbm_known: bool) -> list[str]:
    """What the reader needs to trust the figures: a derived head_dim, replicated KV heads, MLA's first-rank
    storage, and how HBM for KV was computed (when it was)."""
    tensor_parallel = fp.tensor_parallel
    notes = []
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
    if hbm_known:
        notes.append(
            f"HBM for KV = TP x VRAM x utilization - weights - reserve ({OVERHEAD_RESERVE_FRACTION:.0%} of VRAM for "
            f"activations, graph pools and RCCL buffers)"
        )
    return notes


def chunk_advice(chunk_size: int, block_size: int | None, cpu_computes: bool) -> tuple[str, str]:
    """What LMCache's chunk size costs a hit, beside vLLM's KV block: LMCache stores and finds whole chunks, vLLM's
    prefix cache whole blocks, so each recomputes the prompt's last partial chunk or block. ("warning", text) on
    a CPU platform (`cpu_computes`) when the chunk is the larger (rule lmcache-chunk-above-block: there that tail is most of a hit's
    TTFT), else ("note", text); block_size None: unknown (a GPU's attention backend picks it)."""
    if block_size is None:
        return "note", (f"LMCache stores whole {chunk_size}-token chunks: a hit from LMCache recomputes the prompt's "
                        f"last partial chunk (up to {chunk_size - 1} tokens), one from vLLM's prefix cache its last "
                        "partial KV block")
    if chunk_size > block_size and cpu_computes:
        return "warning", (f"cache.chunk_size {chunk_size} > vLLM's block size {block_size}: a hit from LMCache "
                           f"recomputes up to {chunk_size - 1} tokens at the end of a prompt, one from vLLM's prefix "
                           f"cache at most {block_size}, and on a CPU that tail is most of the time to first token: "
                           f"set cache.chunk_size = {block_size} (stackctl explain lmcache-chunk-above-block)")
    if chunk_size > block_size:
        return "note", (f"LMCache stores whole {chunk_size}-token chunks, vLLM's prefix cache whole {block_size}-token "
                        f"blocks: a hit from LMCache recomputes up to {chunk_size - 1} tokens at the end of a prompt, "
                        f"one from vLLM's prefix cache at most {block_size}")
    return "note", (f"LMCache stores whole {chunk_size}-token chunks, vLLM's prefix cache whole {block_size}-token "
                    "blocks: a hit from LMCache recomputes no more of a prompt than one from vLLM's prefix cache")
