"""This host's matmul speed per dtype, measured inside the stack's image (probes/matmul/peak.py).

The figures are the physical floor a prefill can reach: bench and doctor print a server's prefill rate as a share
of them, and the dtype decision (host/dtype.py) prefers them over the CPU flags. Figures are kept under the image
id, the environment, the CPU set and the CPU's features (state dir), since none of those change them without
changing the key; `fresh=True` measures again, and what is kept and returned is the best figure each dtype reached
(a probe that shared the CPUs with other work measured less than the host can do).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

PROBE_IN_CONTAINER = "/opt/stackctl/probes/matmul_peak.py"
TIMEOUT_S = 180


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


def cache_key(image_id: str, environment: dict, cpuset: dict, isa: dict, probe: bytes) -> str:
    """Everything the figures depend on: the image, the environment, the CPUs, the CPU's features and the probe."""
    import hashlib

    probe_hash = hashlib.sha256(probe).hexdigest()
    return hashlib.sha256(json.dumps([image_id, environment, cpuset, isa, probe_hash],
                                     sort_keys=True).encode()).hexdigest()[:16]


def measure(engine, image, *, environment: dict, cpuset: dict, isa: dict, stack: str,
            dtypes: tuple[str, ...] = ("float32", "bfloat16"), fresh: bool = False) -> MatmulPeak:
    """Run the probe in `image` (a docker-py image) with the stack's environment and CPU set; reuse the figures kept
    under the same key unless `fresh`. A fresh measurement is kept, and returned, as the best of it and the figures
    kept before: a peak is the best this host reaches, and a probe measured beside a running server (bench measures
    after its arms, with the server still polling) reads low, which once put a prefill at 120% of "the peak".
    Raises ValueError when the probe cannot measure."""
    from stackctl.engine import docker_adapter
    from stackctl.state.store import stack_dir, write_atomically
    from stackctl.resources import shipped

    probe = shipped("probes") / "matmul" / "peak.py"
    key = cache_key(image.id, environment, cpuset, isa, probe.read_bytes())
    cache_file = stack_dir(stack) / "matmul" / f"{key}.json"
    kept = _read_kept(cache_file)
    if kept is not None and not fresh:
        return kept
    output = docker_adapter.run_to_end(
        engine, image.id, ["python", PROBE_IN_CONTAINER, "--dtypes", ",".join(dtypes)],
        environment=environment, volumes={str(probe): {"bind": PROBE_IN_CONTAINER, "mode": "ro"}},
        timeout=TIMEOUT_S, **cpuset)
    best = parse_probe(output)
    best = best.best_of(kept) if kept else best
    write_atomically(cache_file, json.dumps(best.to_dict()))
    return best


def _read_kept(cache_file) -> MatmulPeak | None:
    """The figures kept under a key; None when there are none (a damaged file is measured again)."""
    if not cache_file.is_file():
        return None
    try:
        return MatmulPeak.from_dict(json.loads(cache_file.read_text()))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
