"""This host's matmul speed per dtype, as the probe (probes/matmul/peak.py) prints it: the figures and how to read
them. Running the probe is measure/matmul.py's.

The figures are the physical floor a prefill can reach: bench and doctor print a server's prefill rate as a share
of them, and the dtype decision (host/dtype.py) prefers them over the CPU flags.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

@dataclass(frozen=True)
class MatmulPeak:
    """GFLOP/s per dtype (None where it could not be measured), with how it was measured."""

    gflops: dict[str, float | None]
    threads: int | None = None
    capability: str | None = None
    torch: str | None = None
    errors: dict[str, str] = field(default_factory=dict)
    memcpy_gb_s: float | None = None  # one core's copy bandwidth, measured beside the matmuls

    def share(self, dtype: str) -> float | None:
        """dtype's GFLOP/s over float32's; None when either is unmeasured."""
        value, base = self.gflops.get(dtype), self.gflops.get("float32")
        return value / base if value is not None and base else None

    def gflops_text(self, dtype: str) -> str:
        value = self.gflops.get(dtype)
        if value is None:
            return "?"
        return f"{value:.0f}" if value >= 10 else f"{value:.2g}"

    def factor_text(self, dtype: str) -> str:
        """"310x slower than float32" / "2.1x faster than float32"."""
        share = self.share(dtype)
        if share is None:
            return "no ratio"
        if share < 1:
            return f"{1 / share:.0f}x slower than float32" if share < 0.1 else f"{1 / share:.1f}x slower than float32"
        return f"{share:.1f}x faster than float32"

    def to_dict(self) -> dict:
        return {"gflops": dict(self.gflops), "threads": self.threads, "capability": self.capability,
                "torch": self.torch, "errors": dict(self.errors), "memcpy_gb_s": self.memcpy_gb_s}

    def best_of(self, other: MatmulPeak) -> MatmulPeak:
        """Per dtype, the higher of the two figures: a peak is the best this host does, and a lower figure measured
        on the same key was the load of its moment (this host kept bf16 at 1,017 GFLOP/s from one measurement, and
        measures 2,200-2,600 idle)."""
        dtypes = dict.fromkeys([*self.gflops, *other.gflops])
        best = {d: max((v for v in (self.gflops.get(d), other.gflops.get(d)) if v is not None), default=None)
                for d in dtypes}
        memcpy = max((v for v in (self.memcpy_gb_s, other.memcpy_gb_s) if v is not None), default=None)
        return MatmulPeak(best, self.threads, self.capability, self.torch,
                          {d: e for d, e in {**other.errors, **self.errors}.items() if best.get(d) is None}, memcpy)

    @classmethod
    def from_dict(cls, data: dict) -> MatmulPeak:
        return cls(dict(data.get("gflops", {})), data.get("threads"), data.get("capability"), data.get("torch"),
                   dict(data.get("errors", {})), data.get("memcpy_gb_s"))


def parse_probe(output: str) -> MatmulPeak:
    """The probe's JSON line -> MatmulPeak; ValueError when there is none or it reports a failure."""
    line = next((text for text in reversed(output.splitlines()) if text.startswith("{")), None)
    if line is None:
        raise ValueError(f"the matmul probe printed no result: {output[-300:]!r}")
    data = json.loads(line)
    if data.get("error"):
        raise ValueError(f"the matmul probe failed: {data['error']}")
    dtypes = data.get("dtypes", {})
    return MatmulPeak({name: entry.get("gflops") for name, entry in dtypes.items()}, data.get("threads"),
                      data.get("capability"), data.get("torch"),
                      {name: entry["error"] for name, entry in dtypes.items() if entry.get("error")},
                      (data.get("memcpy") or {}).get("gb_s"))
