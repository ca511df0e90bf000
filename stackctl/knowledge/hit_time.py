"""What a cache hit's time to first token is made of: the cached tokens' KV loaded (bytes at GB/s, beside this
host's memcpy), the prefill of the tokens the server still recomputed, and the rest (scheduling, sampling, the HTTP
round trip).

A hit's TTFT divided into "GFLOP/s" means nothing: 80 recomputed tokens' FLOPs over a time that is mostly load and
overhead. Each part is estimated from something measured in the same run instead: the recomputed tokens at the rate
the recompute arm reached, the load as the engine itself timed it (LMCache logs each retrieve), the rest what is left.
"""

from __future__ import annotations

from stackctl.knowledge.model_flops import PrefillCost

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def kv_bytes_per_token(cost: PrefillCost, dtype: str | None) -> int | None:
    """K and V of every layer for one token, in the served dtype (None when the dtype is unknown)."""
    size = DTYPE_BYTES.get(dtype or "")
    return 2 * cost.layers * cost.kv_heads * cost.head_dim * size if size else None


def hit_breakdown(cost: PrefillCost, prompt_tokens: int, cached_tokens: int, ttft_s: float, *,
                  recompute_gflops: float | None, kv_bytes_token: int | None, moved: bool,
                  load: tuple[int, float] | None = None, memcpy_gb_s: float | None = None) -> dict:
    """A hit's TTFT in parts. `recompute_gflops`: the rate the cold arm reached in this run; `moved`: whether the
    cached KV is copied in (LMCache, an offload engine) or already in place (vLLM's prefix cache); `load`: the bytes
    and milliseconds the engine reported for the load of one request, when it reports them; `memcpy_gb_s`: this host's
    memcpy, measured in the stack's image."""
    recomputed = max(0, prompt_tokens - cached_tokens)
    if not recomputed:
        prefill_s: float | None = 0.0
    else:
        prefill_s = cost.flops(cached_tokens, prompt_tokens) / (recompute_gflops * 1e9) if recompute_gflops else None
    kv_bytes: int | None
    load_s: float | None
    if not moved:  # vLLM's own prefix cache: the KV is where the attention reads it
        kv_bytes, load_s = 0, 0.0
    elif load:
        kv_bytes, load_s = load[0], load[1] / 1000
    else:
        kv_bytes, load_s = (cached_tokens * kv_bytes_token if kv_bytes_token else None), None
    rest_s = ttft_s - prefill_s - (load_s or 0.0) if prefill_s is not None else None
    load_gb_s = kv_bytes / load_s / 1e9 if kv_bytes and load_s else None
    return {"ttft_s": ttft_s, "cached_tokens": cached_tokens, "tokens_recomputed": recomputed, "moved": moved,
            "kv_bytes": kv_bytes, "load_s": load_s, "load_gb_s": load_gb_s,
            "load_over_memcpy": load_gb_s / memcpy_gb_s if load_gb_s and memcpy_gb_s else None,
            "memcpy_gb_s": memcpy_gb_s, "prefill_s": prefill_s, "rest_s": rest_s}


def breakdown_text(parts: dict) -> str:
    """e.g. "1,920 cached tokens loaded: 94.4 MB in 41 ms (2.30 GB/s = 0.55x memcpy); 80 tokens recomputed ~ 23 ms
    at the recompute arm's rate; the rest 66 ms (scheduling, sampling, HTTP)"."""
    cached = f"{parts['cached_tokens']:,} cached tokens"
    if not parts["moved"]:
        load = f"{cached} in place in vLLM's prefix cache (nothing moved)"
    elif parts["load_s"] is None:
        size = f"{parts['kv_bytes'] / 1e6:.1f} MB" if parts["kv_bytes"] else "KV of unknown size"
        load = f"{cached} loaded ({size}; the engine does not report how long: inside the rest)"
    else:
        load = f"{cached} loaded: {parts['kv_bytes'] / 1e6:.1f} MB in {parts['load_s'] * 1000:.0f} ms"
        if parts["load_gb_s"] is not None:
            load += f" ({parts['load_gb_s']:.2f} GB/s"
            if parts["load_over_memcpy"] is not None:
                load += f" = {parts['load_over_memcpy']:.2f}x this host's memcpy"
            load += ")"
    if parts["prefill_s"] is None:
        return f"{load}; {parts['tokens_recomputed']:,} tokens recomputed (time unknown: no recompute rate)"
    recompute = (f"{parts['tokens_recomputed']:,} tokens recomputed ~ {parts['prefill_s'] * 1000:.0f} ms at the "
                 "recompute arm's rate")
    rest_ms = parts["rest_s"] * 1000
    rest = (f"the rest {rest_ms:.0f} ms (scheduling, sampling, HTTP)" if rest_ms >= 0 else
            f"the parts add up to {-rest_ms:.0f} ms more than the TTFT (they overlap, or the short prefill ran faster "
            "than the cold arm's rate)")
    return f"{load}; {recompute}; {rest}"
