"""The physical floor of a prefill on this host: what a server's TTFT implies, against the matmul GFLOP/s this
host reaches in the dtype the server computes in.

A cold TTFT alone says nothing about why it is slow: 14.7 s can be a big model, a busy host or bf16 emulated on a
CPU without native bf16. Beside the model's FLOPs (knowledge/model_flops.py) and this host's matmul peak for the
served dtype (host/matmul.py), it reads as "recompute at 4% of this host's bfloat16 matmul peak", and the cause shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from stackctl.host.matmul import MatmulPeak
from stackctl.knowledge.model_flops import PrefillCost, prefill_rate, rate_text

# vLLM's engine start-up line holds its whole config, the dtype among it (vllm/config/vllm.py VllmConfig.__str__).
SERVED_DTYPE = re.compile(r"Initializing a V1 LLM engine .*?\bdtype=(?:torch\.)?(\w+)")


def served_dtype(log: str) -> str | None:
    """The dtype the engine reports it was initialised with (the last start in the log), or None."""
    found = SERVED_DTYPE.findall(log)
    return found[-1] if found else None


@dataclass(frozen=True)
class Floor:
    """What a TTFT is judged against: the model's cost, the dtype served and this host's matmul figures."""

    cost: PrefillCost | None
    dtype: str | None  # canonical: float32 | bfloat16 | float16
    peak: MatmulPeak | None
    missing: str = ""  # why a part is unknown

    @property
    def peak_gflops(self) -> float | None:
        return self.peak.gflops.get(self.dtype) if self.peak and self.dtype else None

    def rate(self, prompt_tokens: int, cached_tokens: int, ttft_s: float) -> dict | None:
        if self.cost is None:
            return None
        return prefill_rate(self.cost, prompt_tokens, cached_tokens, ttft_s, self.peak_gflops)

    def text(self, rate: dict | None) -> str:
        if rate is None:
            return f"prefill rate unknown: {self.missing or 'no model config'}"
        return rate_text(rate, self.dtype)

    def with_peak(self, peak: MatmulPeak | None, why: str = "") -> Floor:
        """This floor with the host's matmul figures (or, without them, the reason added to what is missing)."""
        return replace(self, peak=peak, missing="; ".join(part for part in (self.missing, why) if part))

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "peak_gflops": self.peak_gflops,
                "matmul": self.peak.to_dict() if self.peak else None, "missing": self.missing}
