"""What each place holds: HBM, the CPU and disk tiers and host RAM, in bytes and tokens, for one serving setup.

Pure arithmetic on the plan's inputs. All sizes are bytes; GB = 10^9 and GiB = 2^30 only appear when printing.
"""

from __future__ import annotations

from dataclasses import dataclass

from stackctl.knowledge.kv_math import GB, GiB, KVFootprint, ModelShape

# Share of each GPU's VRAM kept out of the KV budget for what vLLM takes before it sizes the cache: the profiled
# activation peak (max_num_batched_tokens), HIP graph pools and non-torch allocations (RCCL buffers). 5% of an
# MI300X is ~10 GB; with it, 2x MI300X at 0.9 hold ~513k bf16 tokens of MiniMax-M2, in line with the ~500K that
# vLLM's MiniMax-M2 recipe quotes for 2x 192G AMD GPUs.
OVERHEAD_RESERVE_FRACTION = 0.05

# Host RAM the CPU tier must leave free for the OS, the vLLM processes (tokenizer, scheduler, pinned staging) and
# the page cache that model loading uses: the larger of 10% of RAM and 32 GiB.
HOST_RAM_HEADROOM_FRACTION = 0.10
HOST_RAM_HEADROOM_MIN_BYTES = 32 * GiB


def host_ram_headroom(host_ram_bytes: int) -> int:
    """Host RAM the CPU tier must leave free: max(HOST_RAM_HEADROOM_FRACTION x RAM, HOST_RAM_HEADROOM_MIN_BYTES)."""
    return max(int(host_ram_bytes * HOST_RAM_HEADROOM_FRACTION), HOST_RAM_HEADROOM_MIN_BYTES)


def gb_text(n: float) -> str:
    return f"{n / GB:,.1f} GB"


def tokens_text(n: int) -> str:
    return f"{n:,} tokens"


@dataclass(frozen=True)
class Capacity:
    """Bytes and tokens per place. HBM figures are None when GPU memory or the weights size is unknown."""

    tier_bytes_per_token: int  # what a token costs in an LMCache tier
    usable_hbm_bytes: int | None  # TP x VRAM x utilization
    reserve_bytes: int | None
    hbm_kv_bytes: int | None
    hbm_tokens: int | None
    cpu_tier_bytes: int
    cpu_tokens: int
    disk_tier_bytes: int
    disk_tokens: int
    working_set_tokens: int
    working_set_tier_bytes: int
    host_ram_bytes: int | None
    headroom_bytes: int | None  # host RAM the CPU tier must leave free


def measure_capacity(
    model: ModelShape,
    fp: KVFootprint,
    *,
    tensor_parallel: int,
    gpu_memory_utilization: float,
    gpu_vram_bytes: int | None,
    weights_bytes: int | None,
    cpu_tier_bytes: int,
    disk_tier_bytes: int,
    working_set_tokens: int,
    host_ram_bytes: int | None,
    kv_cache_bytes: int | None = None,
) -> Capacity:
    """Size HBM and each tier in tokens of this model's KV cache. kv_cache_bytes is a KV cache size set outright
    (vLLM's --kv-cache-memory-bytes, which ignores gpu_memory_utilization): HBM for KV is then that, whatever the
    VRAM."""
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
    if kv_cache_bytes is not None:
        hbm_kv = kv_cache_bytes * tensor_parallel  # per GPU (vllm/config/cache.py: "Size of KV Cache per GPU")
        hbm_tokens = hbm_kv // fp.across_gpus
    return Capacity(
        tier_bytes_per_token=tier_bpt,
        usable_hbm_bytes=usable,
        reserve_bytes=reserve,
        hbm_kv_bytes=hbm_kv,
        hbm_tokens=hbm_tokens,
        cpu_tier_bytes=cpu_tier_bytes,
        cpu_tokens=cpu_tier_bytes * storing_ranks // tensor_parallel // tier_bpt,
        disk_tier_bytes=disk_tier_bytes,
        disk_tokens=disk_tier_bytes * storing_ranks // tensor_parallel // tier_bpt,
        working_set_tokens=working_set_tokens,
        working_set_tier_bytes=working_set_tokens * tier_bpt,
        host_ram_bytes=host_ram_bytes,
        headroom_bytes=None if host_ram_bytes is None else host_ram_headroom(host_ram_bytes),
    )


def host_warnings(capacity: Capacity, disk_free_bytes: int | None) -> list[str]:
    """Tiers larger than the host can give them: RAM after the headroom, free disk."""
    warnings = []
    ram, headroom, cpu = capacity.host_ram_bytes, capacity.headroom_bytes, capacity.cpu_tier_bytes
    if ram is not None and headroom is not None and cpu and cpu > ram - headroom:
        warnings.append(
            f"CPU tier {gb_text(cpu)} exceeds host RAM {gb_text(ram)} minus "
            f"{gb_text(headroom)} headroom (= {gb_text(max(ram - headroom, 0))} available); "
            f"shrink the tier or the host will swap or OOM-kill vLLM"
        )
    disk = capacity.disk_tier_bytes
    if disk_free_bytes is not None and disk > disk_free_bytes:
        warnings.append(
            f"disk tier {gb_text(disk)} exceeds free disk {gb_text(disk_free_bytes)} "
            f"by {gb_text(disk - disk_free_bytes)}; LMCache will fail writes once the disk is full"
        )
    return warnings
