"""What the server itself counts: its prefix-cache counters on /metrics, and the hit rate between two readings.

Every hit rate bench reports is read from these counters, never from what the client expects.
"""

from __future__ import annotations

from stackctl import metrics
from stackctl.httpclient import get_text


def cache_counters(base_url: str) -> dict:
    text = get_text(f"{base_url}/metrics")
    names = {"queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total",
             "external_queries": "vllm:external_prefix_cache_queries_total",
             "external_hits": "vllm:external_prefix_cache_hits_total"}
    return {key: metrics.total(text, name) or 0.0 for key, name in names.items()}


def hit_rate(before: dict, after: dict) -> float | None:
    """Share of prompt tokens served from any cache tier between two counter readings (server's numbers)."""
    queries = after["queries"] - before["queries"]
    hits = (after["hits"] - before["hits"]) + (after["external_hits"] - before["external_hits"])
    return hits / queries if queries > 0 else None


def kv_capacity(metrics_text: str) -> dict | None:
    """The KV cache the server allocated, from its own /metrics: vllm:cache_config_info's num_gpu_blocks and
    block_size labels (vllm 0.32.0 vllm/v1/metrics/loggers.py:1114-1136 makes a label of every CacheConfig field,
    vllm/config/cache.py:322-325, once the blocks are counted); tokens = blocks x block size. None when the server
    does not say."""
    for name, labels, _ in metrics.parse(metrics_text):
        if name != "vllm:cache_config_info":
            continue
        blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
        if blocks.isdigit() and size.isdigit():
            return {"num_gpu_blocks": int(blocks), "block_size": int(size), "tokens": int(blocks) * int(size)}
    return None
