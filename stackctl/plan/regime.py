"""The regime a working set falls in (the smallest place that holds it) and one recommendation sentence.

Tiers are inclusive, not additive: LMCache writes every stored chunk to each configured backend (CPU, then disk),
and vLLM's HBM prefix cache is a separate, smaller copy. So the working set must fit in one tier to be served
from it; the regime names the smallest tier that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence

from stackctl.plan.capacity import Capacity, gb_text, tokens_text

REGIME_FITS_HBM = "fits-hbm"
REGIME_CPU_TIER = "cpu-tier-pays-off"
REGIME_DISK_TIER = "needs-disk-tier"
REGIME_REMOTE_TIER = "needs-remote-tier"  # only a remote store (S3, fs) holds the working set
REGIME_DOES_NOT_FIT = "does-not-fit"
REGIME_UNKNOWN = "unknown"  # GPU memory or weights size not known: no claim either way

# Published measurement behind "fits-hbm": the LMCache connector costs latency when it cannot help.
LOW_LOAD_OVERHEAD = "one benchmark saw +16% mean TTFT at low load"


def judge(
    cap: Capacity,
    *,
    users: int,
    context_tokens: int,
    kv_dtype_bytes: int,
    gpu_vram_bytes: int | None,
    weights_bytes: int | None,
    remote_tiers: Sequence[str] = (),
) -> tuple[str, str]:
    """The regime and one recommendation sentence with the figures that decided it."""
    ws = (f"the working set of {tokens_text(cap.working_set_tokens)} ({users} users x {context_tokens:,}, "
          f"{gb_text(cap.working_set_tier_bytes)})")
    if cap.hbm_kv_bytes is None or cap.hbm_tokens is None:
        return REGIME_UNKNOWN, _unknown(ws, gpu_vram_bytes, weights_bytes)
    if cap.hbm_kv_bytes <= 0:
        return REGIME_DOES_NOT_FIT, (
            f"The weights ({gb_text(weights_bytes or 0)}) and the activation reserve leave no HBM for the KV cache "
            f"({gb_text(cap.hbm_kv_bytes)}): raise tensor_parallel or gpu_memory_utilization, or use a smaller or "
            f"quantised model."
        )
    if cap.working_set_tokens <= cap.hbm_tokens:
        return REGIME_FITS_HBM, _fits_hbm(cap, ws)
    fp8_hint = ' An fp8 KV cache (kv_cache_dtype = "fp8") would halve it.' if kv_dtype_bytes >= 2 else ""
    share = (f"HBM holds {tokens_text(cap.hbm_tokens)}, {cap.hbm_tokens / cap.working_set_tokens:.0%} of {ws}")
    in_tier = _in_a_tier(cap, share, fp8_hint, tuple(remote_tiers))
    if in_tier is not None:
        return in_tier
    return REGIME_DOES_NOT_FIT, _short_of_every_tier(cap, share, ws, fp8_hint)


def _unknown(ws: str, gpu_vram_bytes: int | None, weights_bytes: int | None) -> str:
    missing = " and ".join(
        label for label, value in (("GPU memory", gpu_vram_bytes), ("weights size", weights_bytes)) if value is None
    )
    return (
        f"Cannot place {ws}: {missing} unknown. "
        + ("Name the GPU with --gpu (e.g. --gpu MI300X) or versions.gpu_arch, or run plan on the GPU host so "
           "stackctl can probe it. " if gpu_vram_bytes is None else "")
        + ("Point model.path at the weights (a directory with *.safetensors) or use a model of the built-in "
           "table." if weights_bytes is None else "")
    )


def _fits_hbm(cap: Capacity, ws: str) -> str:
    assert cap.hbm_tokens is not None and cap.hbm_kv_bytes is not None
    advice = (
        f" The LMCache tiers add only overhead here ({LOW_LOAD_OVERHEAD}): turn the cache off unless you need "
        f"KV shared across instances or kept over restarts."
        if cap.cpu_tier_bytes or cap.disk_tier_bytes
        else " LMCache would only add overhead (" + LOW_LOAD_OVERHEAD + "): serve HBM-only."
    )
    return f"HBM holds {tokens_text(cap.hbm_tokens)} ({gb_text(cap.hbm_kv_bytes)}), enough for {ws}.{advice}"


def _in_a_tier(cap: Capacity, share: str, fp8_hint: str, remote_tiers: tuple[str, ...]) -> tuple[str, str] | None:
    """The CPU, disk or remote tier that holds the working set HBM cannot, smallest first; None if none does."""
    ws_tokens = cap.working_set_tokens
    if ws_tokens <= cap.cpu_tokens:
        extra = (
            " The disk tier is not needed for this working set (it only keeps KV warm across restarts)."
            if cap.disk_tier_bytes
            else ""
        )
        return REGIME_CPU_TIER, (
            f"{share}; the CPU tier ({gb_text(cap.cpu_tier_bytes)}, {tokens_text(cap.cpu_tokens)}) holds all of it, "
            f"so LMCache's CPU tier pays off.{extra}"
        )
    if ws_tokens <= cap.disk_tokens:
        cpu_part = (
            f"the CPU tier ({gb_text(cap.cpu_tier_bytes)}) holds {tokens_text(cap.cpu_tokens)} "
            f"({cap.cpu_tokens / ws_tokens:.0%}) as the hot set"
            if cap.cpu_tier_bytes
            else "there is no CPU tier (LMCache's disk tier needs one in front of it)"
        )
        return REGIME_DISK_TIER, (
            f"{share}; {cpu_part}, and the disk tier ({gb_text(cap.disk_tier_bytes)}, {tokens_text(cap.disk_tokens)}) "
            f"holds all of it: keep the NVMe tier.{fp8_hint}"
        )
    if remote_tiers:
        local = max(cap.cpu_tokens, cap.disk_tokens)
        kinds = " and ".join(remote_tiers)
        return REGIME_REMOTE_TIER, (
            f"{share}; the local tiers hold {tokens_text(local)} ({local / ws_tokens:.0%}); the rest lives in the "
            f"{kinds} tier, whose capacity is the store's (not this host's): every hit there pays a network fetch, "
            f"so keep the hot set local with a larger CPU or disk tier.{fp8_hint}"
        )
    return None


def _short_of_every_tier(cap: Capacity, share: str, ws: str, fp8_hint: str) -> str:
    """No configured tier holds the working set: say which tier could."""
    assert cap.hbm_tokens is not None
    need = cap.working_set_tier_bytes
    ram, headroom = cap.host_ram_bytes, cap.headroom_bytes
    if ram is not None and headroom is not None and need <= ram - headroom:
        fix = f"raise the CPU tier to at least {gb_text(need)} (host RAM allows it)"
    else:
        fix = f"add or raise a disk tier to at least {gb_text(need)}"
    largest = max(cap.cpu_tokens, cap.disk_tokens, cap.hbm_tokens)
    return (
        f"{share}; the largest tier holds {tokens_text(largest)}, short of {ws}: {fix}, or serve fewer users or "
        f"shorter contexts; the rest is recomputed.{fp8_hint}"
    )
