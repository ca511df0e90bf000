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
