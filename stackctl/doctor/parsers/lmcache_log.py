"""What LMCache says about each request in the server's log, parsed into figures (pure; no I/O).

The lines come from LMCache 0.5.6 (colour codes stripped first):
- lookup, per request (lmcache/integration/vllm/vllm_v1_adapter.py:1476-1485):
  `Reqid: R, Total tokens N, Inference Engine computed tokens: C, LMCache hit tokens: H, need to load: L`;
- store (lmcache/v1/cache_engine.py:588-599 and :780-790):
  `[req_id=R] Stored S out of total T tokens. size: X GB, cost Y ms, throughput: Z GB/s; ...`;
- load (lmcache/v1/cache_engine.py:985-995):
  `[req_id=R] Retrieved G out of Q required tokens (from N total tokens). size: X gb, cost Y ms, ...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LOOKUP = re.compile(r"Reqid: (\S+), Total tokens (\d+), Inference Engine computed tokens: (\d+), "
                    r"LMCache hit tokens: (\d+), need to load: (\d+)")
STORED = re.compile(r"Stored (\d+) out of total (\d+) tokens\. size: ([0-9.]+) GB, cost ([0-9.]+) ms")
RETRIEVED = re.compile(r"Retrieved (\d+) out of (\d+) required tokens \(from (\d+) total tokens\)\. "
                       r"size: ([0-9.]+) gb, cost ([0-9.]+) ms")
GIB = 1024 ** 3


@dataclass
class Activity:
    """LMCache's own account of what happened in a stretch of log: lookups, stores and loads, summed."""
    lookups: list[tuple[int, int, int]] = field(default_factory=list)  # (total, hit, need_to_load) per lookup
    stored_tokens: int = 0
    stored_bytes: int = 0
    store_ms: float = 0.0
    retrieved_tokens: int = 0
    retrieved_bytes: int = 0
    retrieve_ms: float = 0.0

    @property
    def hit_tokens(self) -> int:
        """The most tokens any lookup in the stretch found (callers read the stretch of one request, whose lookup
        the scheduler may repeat), 0 when there was none."""
        return max((hit for _, hit, _ in self.lookups), default=0)

    def to_dict(self) -> dict:
        return {"lookups": [list(item) for item in self.lookups], "stored_tokens": self.stored_tokens,
                "stored_bytes": self.stored_bytes, "store_ms": round(self.store_ms, 2),
                "retrieved_tokens": self.retrieved_tokens, "retrieved_bytes": self.retrieved_bytes,
                "retrieve_ms": round(self.retrieve_ms, 2)}


def activity(log: str) -> Activity:
    """Sum LMCache's lookup, store and load lines of `log` (a slice of the server log)."""
    seen = Activity()
    for raw in log.splitlines():
        line = ANSI.sub("", raw)
        if match := LOOKUP.search(line):
            seen.lookups.append((int(match[2]), int(match[4]), int(match[5])))
        elif match := STORED.search(line):
            seen.stored_tokens += int(match[1])
            seen.stored_bytes += round(float(match[3]) * GIB)
            seen.store_ms += float(match[4])
        elif match := RETRIEVED.search(line):
            seen.retrieved_tokens += int(match[1])
            seen.retrieved_bytes += round(float(match[4]) * GIB)
            seen.retrieve_ms += float(match[5])
    return seen


def throughput(num_bytes: int, ms: float) -> str:
    """`41.0 MB in 93 ms (0.44 GB/s)`; without a time, only the size."""
    size = f"{num_bytes / 1e6:.1f} MB"
    if ms <= 0:
        return size
    return f"{size} in {ms:.0f} ms ({num_bytes / ms / 1e6:.2f} GB/s)"
