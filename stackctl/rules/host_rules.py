"""Rules judged against the host `validate` runs on: a recipe can be right on one CPU and many times slower on
another, and nothing in the recipe alone shows it."""

from __future__ import annotations

from stackctl.knowledge.kinds import platform_of
from stackctl.rules.registry import Hit, rule

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time
    from collections.abc import Iterator


@rule("cpu-dtype-emulated", "error",
      "a CPU stack serves a 16-bit dtype this CPU has no native matmuls for: prefill 100-300x slower than float32",
      'set model.dtype = "auto" (stackctl picks float32 where bf16 is emulated) or "float32"')
def _cpu_dtype_emulated(spec) -> Iterator[Hit]:
    """vLLM's CPU platform declares bfloat16 and float16 supported on every x86 and aarch64 CPU and serves bf16 first,
    whatever the CPU has. Without AVX512-BF16 or AMX (x86: the commonest cloud AMD EPYC and older Xeon hosts) torch
    runs bf16 matmuls emulated: a prefill GEMM measured 0.4 GFLOP/s in bf16 against 124 in float32 on a 2-core EPYC
    host, and a 2,000-token prompt of a 150M model took 33 s instead of well under a second. Nothing errors or warns.

    The rule reads this host's CPU features (/proc/cpuinfo: `avx512_bf16`, `amx_bf16`; `bf16` on aarch64;
    `avx512_fp16`, `amx_fp16` for float16), capped by ONEDNN_MAX_CPU_ISA when the recipe's serve.env sets it (oneDNN does
    torch's CPU matmuls; ATEN_CPU_CAPABILITY alone leaves bf16 native), and judges an explicit `model.dtype`. With `model.dtype = "auto"` `stackctl up` decides per
    host (bfloat16 where native, else float32) and prints the decision; `stackctl doctor` (host.cpu-dtype) measures
    the matmul speed of each dtype in the stack's image and names the factor.

    It judges the host validate runs on: validate on a host of the kind the stack will run on.
    """
    if not platform_of(spec.recipe).cpu_computes or spec.recipe.model.dtype.strip().lower() == "auto":
        return  # `up` decides per host (host/dtype.py): nothing to judge, and validate reads no host facts
    from stackctl.host.isa import canonical_dtype, read_isa

    served = canonical_dtype(spec.recipe.model.dtype)
    if served in (None, "float32"):
        return
    from stackctl.host.dtype import stack_isa

    isa = stack_isa(spec.recipe, read_isa())
    if isa.native(served) is False:
        yield (("model", "dtype"), f"model.dtype = {spec.recipe.model.dtype!r}: this CPU has no native {served} matmuls "
                                   f"({isa.native_text()}); the server would run 100-300x slower than in float32")
