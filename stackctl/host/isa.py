"""The CPU's vector and matrix features, and which model dtypes it multiplies natively.

A CPU without native bf16 (x86 without AVX512-BF16 or AMX, the commonest cloud EPYC and older Xeon) runs bf16
matmuls emulated, two to three orders of magnitude slower than float32; vLLM's CPU platform serves bf16 there all
the same and says nothing. The flags are the positive marker of native support: /proc/cpuinfo `flags` on x86,
`Features` on aarch64.

The stack's environment can take features away from the libraries that do the math: oneDNN (torch's CPU linear
layers) honours ONEDNN_MAX_CPU_ISA and ATen's dispatch ATEN_CPU_CAPABILITY. A cap below the level that carries bf16
makes bf16 emulated inside that stack, whatever the host has (measured in torch 2.13: ONEDNN_MAX_CPU_ISA=AVX2 on an
AMX host takes bf16 matmuls from 42 to 0.7 GFLOP/s); `for_environment` applies it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from stackctl.host.sysfs import read_text

CPUINFO = "/proc/cpuinfo"
# The features that decide a model dtype's speed; the rest of the flags line is not kept.
X86_FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
ARM_FEATURES = ("asimd", "fphp", "asimdhp", "bf16", "sve", "i8mm")
BF16_MARKERS = {"avx512_bf16", "amx_bf16", "bf16"}
FP16_MARKERS = {"avx512_fp16", "amx_fp16", "fphp", "asimdhp"}

# oneDNN's ISA levels from lowest to highest (its ONEDNN_MAX_CPU_ISA values, upper case) and the features each level
# lets oneDNN use; the features of higher levels are taken away by a cap below them.
ONEDNN_LEVELS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
                 "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16")
_FIRST_LEVEL_WITH = {"avx2": "AVX2", "avx512f": "AVX512_CORE", "avx512_bf16": "AVX512_CORE_BF16",
                     "avx512_fp16": "AVX512_CORE_FP16", "amx_tile": "AVX512_CORE_AMX",
                     "amx_bf16": "AVX512_CORE_AMX", "amx_fp16": "AVX512_CORE_AMX_FP16"}
# ATen's capability names (ATEN_CPU_CAPABILITY): the vector features its own kernels lose. Its bf16 and fp16 matmuls
# go through oneDNN all the same (measured: ATEN_CPU_CAPABILITY=avx2 alone leaves bf16 at AMX speed), so only
# ONEDNN_MAX_CPU_ISA decides a dtype's speed.
_ATEN_DROPS = {"default": {"avx2", "avx512f"}, "avx2": {"avx512f"}}
DTYPE_ALIASES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "half": "float16", "float16": "float16",
                 "fp16": "float16", "float": "float32", "float32": "float32", "fp32": "float32"}


@dataclass(frozen=True)
class CpuIsa:
    """The dtype-relevant features of the CPU, and what capped them (empty when nothing did)."""

    arch: str | None  # "x86_64" | "aarch64" | None when /proc/cpuinfo was unreadable
    features: tuple[str, ...]
    model_name: str | None = None
    capped_by: tuple[str, ...] = ()  # e.g. ("ONEDNN_MAX_CPU_ISA=AVX2",)

    @property
    def known(self) -> bool:
        return self.arch is not None

    def native(self, dtype: str) -> bool | None:
        """Whether the CPU multiplies `dtype` natively; None when the CPU is unknown or the dtype is no float."""
        name = canonical_dtype(dtype)
        if not self.known or name is None:
            return None
        if name == "float32":
            return True
        markers = BF16_MARKERS if name == "bfloat16" else FP16_MARKERS
        return bool(markers & set(self.features))

    def native_text(self) -> str:
        """e.g. "avx2 avx512f, no avx512_bf16/amx_bf16, capped by ONEDNN_MAX_CPU_ISA=AVX2" for messages."""
        parts = [" ".join(self.features) or "no AVX2/AVX-512/AMX"]
        missing = [flag for flag in ("avx512_bf16", "amx_bf16") if flag not in self.features]
        if self.arch == "x86_64" and missing:
            parts.append(f"no {'/'.join(missing)}")
        if self.capped_by:
            parts.append(f"capped by {', '.join(self.capped_by)}")
        return ", ".join(parts)

    def for_environment(self, environment: dict) -> CpuIsa:
        """The features left to a process whose environment caps oneDNN or ATen below what the CPU has."""
        dropped: set[str] = set()
        caps = []
        onednn = str(environment.get("ONEDNN_MAX_CPU_ISA") or environment.get("DNNL_MAX_CPU_ISA") or "").upper()
        if onednn in ONEDNN_LEVELS:
            limit = ONEDNN_LEVELS.index(onednn)
            dropped |= {f for f, level in _FIRST_LEVEL_WITH.items() if ONEDNN_LEVELS.index(level) > limit}
            caps.append(f"ONEDNN_MAX_CPU_ISA={onednn}")
        aten = str(environment.get("ATEN_CPU_CAPABILITY") or "").lower()
        if aten in _ATEN_DROPS:
            dropped |= _ATEN_DROPS[aten]
            caps.append(f"ATEN_CPU_CAPABILITY={aten}")
        kept = tuple(f for f in self.features if f not in dropped)
        if kept == self.features:
            return self
        return replace(self, features=kept, capped_by=tuple(caps))

    def to_dict(self) -> dict:
        return {"arch": self.arch, "features": list(self.features), "model_name": self.model_name,
                "capped_by": list(self.capped_by)}

    @classmethod
    def from_dict(cls, data: dict) -> CpuIsa:
        return cls(data.get("arch"), tuple(data.get("features", ())), data.get("model_name"),
                   tuple(data.get("capped_by", ())))


def onednn_levels_with(feature: str) -> tuple[str, ...]:
    """The ONEDNN_MAX_CPU_ISA values that leave oneDNN the instructions of `feature` (for serve.sh, which decides a
    dtype from the CPU's flags where `stackctl up` did not)."""
    return ONEDNN_LEVELS[ONEDNN_LEVELS.index(_FIRST_LEVEL_WITH[feature]):]


def canonical_dtype(dtype: str | None) -> str | None:
    """vLLM's --dtype spellings (and torch's) -> float32 | bfloat16 | float16; None for auto or anything else."""
    return DTYPE_ALIASES.get(str(dtype or "").strip().lower().removeprefix("torch."))


def parse_cpuinfo(text: str) -> CpuIsa:
    """The first processor's features (every core of a host has the same ones)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    if "flags" in fields:
        flags = set(fields["flags"].split())
        return CpuIsa("x86_64", tuple(f for f in X86_FEATURES if f in flags), fields.get("model name"))
    if "features" in fields:
        flags = set(fields["features"].split())
        return CpuIsa("aarch64", tuple(f for f in ARM_FEATURES if f in flags), fields.get("model name"))
    return CpuIsa(None, ())


def read_isa(root: Path = Path("/")) -> CpuIsa:
    return parse_cpuinfo(read_text(root, CPUINFO) or "")
