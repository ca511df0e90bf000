"""The dtype a CPU stack serves in: a decision made once per host, like pinning, and printed with its reason.

`model.dtype = "auto"` on the CPU platform means "the fastest dtype this CPU runs natively": bfloat16 where the CPU
has AVX512-BF16 or AMX (half the memory traffic, native matmuls), float32 where bf16 would be emulated (vLLM's CPU
platform would pick bf16 there too, 100-300x slower, and say nothing). The matmul probe's figures, when measured in
the stack's image on this host, decide over the flags: they are what the server will get.

An explicit dtype is the user's: the decision keeps it and says whether this CPU emulates it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stackctl.host.isa import CpuIsa, canonical_dtype
from stackctl.host.matmul import MatmulPeak
from stackctl.knowledge.kinds import platform_of
from stackctl.recipe.model import Recipe

# What a 16-bit dtype's matmul share of float32's says. Measured: emulated bf16 runs at 0.3% of float32 (AVX2),
# native bf16 at 60% (AVX512-BF16 without AMX) to 2-10x (AMX). A share at or above NATIVE_SHARE is native, one under
# EMULATED_SHARE emulated; in between the CPU's flags decide. The band is the margin: the probe times one dtype after
# the other, and each figure halves while other work holds the CPUs (measured: 269 -> 131 and 165 -> 82 GFLOP/s), so
# a burst between the two timings reads 62% as 31%. A decision that flipped with the load would replace a running
# server on the next `up`, and split a fleet's shared cache tier by dtype (LMCache's chunk keys carry the dtype).
NATIVE_SHARE = 0.5
EMULATED_SHARE = 0.1
DTYPE_ENV = "STACKCTL_DTYPE"  # serve.sh passes it to vLLM as --dtype


@dataclass(frozen=True)
class DtypeDecision:
    """`dtype`: what serve.sh adds as --dtype (None: the recipe's own flag stands, or vLLM decides); `served`: the
    dtype the server computes in; `emulated`: True when this host emulates it (None: unknown)."""

    dtype: str | None
    served: str | None
    emulated: bool | None
    reason: str
    measured: MatmulPeak | None = field(default=None, compare=False)

    def environment(self) -> dict[str, str]:
        """The container variable serve.sh reads; empty when the recipe's flag stands."""
        return {DTYPE_ENV: self.dtype} if self.dtype else {}

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "served": self.served, "emulated": self.emulated, "reason": self.reason,
                "measured": self.measured.to_dict() if self.measured else None}


def host_decides(recipe: Recipe) -> bool:
    """Whether the host picks the dtype: a CPU stack with model.dtype = "auto"."""
    return platform_of(recipe).cpu_computes and recipe.model.dtype.strip().lower() == "auto"


def decide_dtype(recipe: Recipe, isa: CpuIsa, measured: MatmulPeak | None = None) -> DtypeDecision:
    """The decision for `recipe` on a CPU with `isa` (already capped by the stack's environment), with the matmul
    figures of this host when they were measured."""
    if not platform_of(recipe).cpu_computes:
        return DtypeDecision(None, canonical_dtype(recipe.model.dtype), None,
                             f"platform {recipe.stack.platform}: vLLM picks the dtype for the GPU")
    if not host_decides(recipe):
        served = canonical_dtype(recipe.model.dtype)
        emulated = emulated_on(served, isa, measured)
        how = {True: f"emulated on this CPU ({evidence(served, isa, measured)})",
               False: f"native on this CPU ({evidence(served, isa, measured)})",
               None: "not judged (CPU features unknown)"}[emulated]
        return DtypeDecision(None, served, emulated, f"{recipe.model.dtype} (model.dtype), {how}", measured)
    bf16_emulated = emulated_on("bfloat16", isa, measured)
    if bf16_emulated is False:
        return DtypeDecision("bfloat16", "bfloat16", False,
                             f"bfloat16 (this CPU runs bf16 natively: {evidence('bfloat16', isa, measured)})",
                             measured)
    why = ("CPU features unknown: float32 is never emulated" if bf16_emulated is None else
           f"this CPU has no native bf16: {evidence('bfloat16', isa, measured)}")
    return DtypeDecision("float32", "float32", False, f"float32 ({why})", measured)


def stack_isa(recipe: Recipe, isa: CpuIsa) -> CpuIsa:
    """This CPU as the stack's server sees it: `isa` capped by the ONEDNN_MAX_CPU_ISA / ATEN_CPU_CAPABILITY in the
    stack's environment. The caps come from the recipe's serve.env alone (a user's, or STACKCTL_CPU_ISA_CAP's put
    there by the loader); the variables the bundle adds to the server's environment never cap the CPU."""
    return isa.for_environment(recipe.serve.env)


def decide_by_flags(recipe: Recipe, isa: CpuIsa) -> DtypeDecision:
    """`up`'s decision where nothing is measured: from the CPU's flags as the stack's environment caps them."""
    return decide_dtype(recipe, stack_isa(recipe, isa))


def emulated_on(dtype: str | None, isa: CpuIsa, measured: MatmulPeak | None) -> bool | None:
    """Whether this CPU emulates `dtype`: from the measured figures when they are clear, else from the flags (the
    figures alone when the flags are unknown); None when neither can tell."""
    if dtype is None:
        return None
    share = measured.share(dtype) if measured else None
    if share is not None and not _too_close(share):
        return share < EMULATED_SHARE
    native = isa.native(dtype)
    if native is None:
        return None if share is None else share < NATIVE_SHARE
    return not native


def _too_close(share: float) -> bool:
    """Figures in the band where the CPU's flags decide."""
    return EMULATED_SHARE <= share < NATIVE_SHARE


def evidence(dtype: str | None, isa: CpuIsa, measured: MatmulPeak | None) -> str:
    """The figures when measured ("bf16 matmul 0.4 GFLOP/s vs float32 124"), else the flags; both when the figures
    fall in the band where the flags decide."""
    share = measured.share(dtype) if dtype and measured else None
    if share is None or measured is None or dtype is None or dtype == "float32":
        return f"flags {isa.native_text()}"
    figures = (f"{dtype} matmul {measured.gflops_text(dtype)} GFLOP/s vs float32 "
               f"{measured.gflops_text('float32')}, {measured.factor_text(dtype)}")
    if _too_close(share) and isa.native(dtype) is not None:
        return f"{figures}, too close to call, so the flags decide: {isa.native_text()}"
    return figures
