"""The plan as text for people: one aligned table, bytes shown as exact bytes, GB (10^9) and GiB (2^30) side by
side, then the regime, the recommendation, warnings and notes."""

from __future__ import annotations

from stackctl.knowledge.kv_math import GB, GiB
from stackctl.plan.capacity import (
    HOST_RAM_HEADROOM_FRACTION,
    HOST_RAM_HEADROOM_MIN_BYTES,
    OVERHEAD_RESERVE_FRACTION,
)
from stackctl.plan.make import Plan


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
