"""Judge which backend LMCache's native GPU module was built for, and whether its CPU extension is there, from the
image probe's ELF facts.

The image probe (probes/probe_image.py) reads the ELF files without importing anything; this module
only interprets its JSON. The native modules' names depend on the LMCache version: those tables are data
in stackctl/knowledge/compat.toml ([[lmcache_native_module]], [[lmcache_cpu_extension]]).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from stackctl.knowledge import compat

# Modules to look for when the LMCache version is unknown (a git ref, or no metadata), newest first.
UNKNOWN_VERSION_MODULES: tuple[str, ...] = ("cuda_ops", "c_ops")

# Markers of a CUDA build: DT_NEEDED patterns, section names, registration symbol.
CUDA_NEEDED = (re.compile(r"^libcudart\.so(\.\d+)*$"), re.compile(r"^libc10_cuda\.so$"),
               re.compile(r"^libtorch_cuda\.so$"))
CUDA_SECTIONS = (".nv_fatbin", ".nvFatBinSegment")
CUDA_SYMBOL = "__cudaRegisterFatBinary"

# Markers of a HIP (ROCm) build.
HIP_NEEDED = (re.compile(r"^libamdhip64\.so(\.\d+)*$"),)
HIP_SECTIONS = (".hip_fatbin", ".hipFatBinSegment")
HIP_SYMBOL = "__hipRegisterFatBinary"

KINDS = ("hip", "cuda", "fallback", "unknown")

# LMCache's pure-Python/torch stand-in for its native ops, under both names it has had (LMCache#3338 renamed
# non_cuda_equivalents, 0.4.1-0.4.5, to python_ops_fallback, 0.4.6-0.5.2): a stack running on either is on the slow
# fallback, never on a native module, whatever file a build leaves under that name.
FALLBACK_MODULES: tuple[str, ...] = ("non_cuda_equivalents", "python_ops_fallback")


def fallback_module(lmcache_version: str | None) -> str | None:
    """The fallback module the LMCache release ships (facts/lmcache-VERSION.json, read from its source)."""
    from stackctl.knowledge import facts

    release = facts.release("lmcache", lmcache_version) if lmcache_version else None
    return (release.section("python_fallback").get("module") if release is not None else None) or None


@dataclass(frozen=True)
class BackendVerdict:
    """What the native GPU module of LMCache is: hip, cuda, fallback (no module) or unknown."""

    kind: str
    module: str | None
    targets: list[str] = field(default_factory=list)  # gfx archs in the HIP offload bundles
    targets_known: bool = False  # False when bundles are compressed or unreadable
    missing_archs: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    extra_archs: list[str] = field(default_factory=list)  # targets in the module that the recipe does not name
    hip_runtime: str | None = None  # the HIP runtime the module links (DT_NEEDED libamdhip64.so.N)
    kernels: list[TargetKernels] = field(default_factory=list)  # per target, from its code objects' metadata
    kernels_launched: int = 0  # kernels the release's HIP sources launch (0: not known for this version)


@dataclass(frozen=True)
class TargetKernels:
    """One target's kernels across every offload bundle of the module, against those the release launches."""

    target: str
    bundles: int
    unreadable: int  # code objects whose metadata could not be read: the count below is then incomplete
    count: int  # kernel symbols (template instances each)
    missing: list[str]  # kernels the release's HIP sources launch with no code object here, with where each is
    not_wave64: list[str]  # kernels compiled for another wavefront size (CDNA GPUs run 64)
    spills: int  # SGPR + VGPR spills, summed over kernels
    scratch: int  # kernels with a private segment (scratch) or a dynamic stack


def has_kernel(symbols: list[str], name: str) -> bool:
    """Whether a mangled kernel symbol is an instance of the source kernel NAME: an Itanium-mangled name carries each
    identifier as <length><identifier>, so `41load_and_reshape_multi_layer_fused_kernel` is that kernel and not
    `load_and_reshape_multi_layer_kernel` (35)."""
    token = f"{len(name)}{name}"
    return any(token in symbol for symbol in symbols)


def target_kernels(elf: dict[str, Any], launched: dict[str, str]) -> list[TargetKernels]:
    """Per target with code objects: its kernels against `launched` (name -> where the release defines it; empty
    when the release's kernels are not known)."""
    found = []
    for target, seen in sorted(((elf.get("hip_offload") or {}).get("code_objects") or {}).items()):
        kernels = seen.get("kernels") or []
        symbols = [k[0] or "" for k in kernels]
        found.append(TargetKernels(
            base_arch(target), seen.get("bundles", 0), seen.get("unreadable", 0), len(kernels),
            [f"{name} ({where})" for name, where in launched.items() if not has_kernel(symbols, name)],
            [k[0] for k in kernels if k[1] != 64], sum((k[2] or 0) + (k[3] or 0) for k in kernels),
            sum(1 for k in kernels if (k[4] or 0) > 0 or k[5])))
    return found


def launched_kernels(lmcache_version: str | None) -> dict[str, str]:
    """The kernels the release's HIP sources launch (facts/lmcache-VERSION.json, hip_kernels), {} when unknown."""
    from stackctl.knowledge import facts

    release = facts.release("lmcache", lmcache_version) if lmcache_version else None
    return dict(release.section("hip_kernels").get("kernels") or {}) if release is not None else {}


def expected_modules(lmcache_version: str | None) -> tuple[str, ...]:
    """Native GPU module names LMCache of this version loads; all candidates when the version is unknown."""
    entry = compat.lmcache_native_module(lmcache_version)
    return (entry["module"],) if entry else UNKNOWN_VERSION_MODULES


def base_arch(target_id: str) -> str:
    """gfx90a:xnack- -> gfx90a (target features do not change which GPU the code runs on)."""
    return target_id.split(":", 1)[0]


def cuda_markers(elf: dict[str, Any]) -> list[str]:
    return _markers(elf, CUDA_NEEDED, CUDA_SECTIONS, CUDA_SYMBOL)


def hip_markers(elf: dict[str, Any]) -> list[str]:
    return _markers(elf, HIP_NEEDED, HIP_SECTIONS, HIP_SYMBOL)


def _markers(elf: dict[str, Any], needed: tuple[re.Pattern, ...], sections: tuple[str, ...],
             symbol: str) -> list[str]:
    found = [f"DT_NEEDED {lib}" for lib in elf.get("needed") or [] if any(p.match(lib) for p in needed)]
    found += [f"section {name}" for name in elf.get("sections") or [] if name in sections]
    state = (elf.get("symbols") or {}).get(symbol)
    if state in ("referenced", "defined"):
        found.append(f"symbol {symbol} ({state})")
    return found


def _find_module(modules: list[dict[str, Any]], names: tuple[str, ...]) -> dict[str, Any] | None:
    for name in names:
        for module in modules:
            if module.get("module") == name and name not in FALLBACK_MODULES:
                return module
    return None


def hip_runtime(elf: dict[str, Any]) -> str | None:
    """The HIP runtime library the module links (hipcc adds libamdhip64.so.N at link time), None when it links none."""
    return next((lib for lib in elf.get("needed") or [] if any(p.match(lib) for p in HIP_NEEDED)), None)


def extra_archs(targets: list[str], expected_archs: list[str]) -> list[str]:
    """Targets the module carries beyond the recipe's gpu_arch (none judged when the recipe names none)."""
    wanted = {base_arch(a) for a in expected_archs}
    return [t for t in targets if t not in wanted] if wanted else []


def _hip_targets(elf: dict[str, Any], expected_archs: list[str]) -> tuple[list[str], bool, list[str], list[str]]:
    """(targets, known, missing archs, evidence) from the probe's hip_offload facts."""
    offload = elf.get("hip_offload") or {}
    targets = sorted({base_arch(t) for t in offload.get("targets") or []})
    known = bool(offload.get("targets_complete"))
    evidence = [f"offload targets {', '.join(targets)}"] if targets else []
    if offload.get("compressed_bundles"):
        evidence.append(f"{offload['compressed_bundles']} compressed offload bundle(s): target list incomplete")
    if not offload:
        evidence.append("no .hip_fatbin section to read targets from")
    wanted = [base_arch(a) for a in expected_archs]
    # An arch seen is present even in a compressed bundle; an arch not seen is only missing when the list is complete.
    missing = [a for a in wanted if a not in targets] if known else []
    return targets, known, missing, evidence


def classify_backend(probe: dict[str, Any], lmcache_version: str | None,
                     expected_archs: list[str]) -> BackendVerdict:
    """Classify LMCache's native GPU module from the full image-probe JSON.

    lmcache_version: the installed version (falls back to probe["lmcache"]["version"]); None or a
    non-version string means "look for either module name". expected_archs: the recipe's gpu_arch list.
    """
    lmcache = probe.get("lmcache") or {}
    version = lmcache_version or lmcache.get("version")
    if not lmcache.get("found"):
        return BackendVerdict("unknown", None, evidence=["LMCache package not found in the image"])
    names = expected_modules(version)
    evidence = [f"LMCache {version or 'version unknown'} loads lmcache.{' or lmcache.'.join(names)}"]
    modules = lmcache.get("native_modules") or []
    module = _find_module(modules, names)
    if module is None:
        others = sorted(m.get("module") for m in modules if m.get("module") in UNKNOWN_VERSION_MODULES)
        evidence.append(f"no {'/'.join(names)}*.so in {lmcache.get('package_dir')}: torch baseline ops")
        fallback = fallback_module(version)
        if fallback:
            evidence.append(f"LMCache {version} runs {fallback} instead")
        if others:
            evidence.append(f"found {', '.join(others)} instead, which this version does not load")
        return BackendVerdict("fallback", None, evidence=evidence)
    name, elf = module["module"], module.get("elf")
    if not elf:
        evidence.append(f"{module.get('file')}: ELF unreadable ({module.get('error') or 'no facts'})")
        return BackendVerdict("unknown", name, evidence=evidence)
    cuda, hip = cuda_markers(elf), hip_markers(elf)
    evidence += cuda + hip
    if cuda and not hip:
        return BackendVerdict("cuda", name, evidence=evidence)
    if hip and not cuda:
        targets, known, missing, target_evidence = _hip_targets(elf, expected_archs)
        extra = extra_archs(targets, expected_archs) if known else []
        launched = launched_kernels(version)
        return BackendVerdict("hip", name, targets, known, missing, evidence + target_evidence, extra,
                              hip_runtime(elf), target_kernels(elf, launched), len(launched))
    evidence.append("both CUDA and HIP markers" if cuda else "no CUDA or HIP markers")
    return BackendVerdict("unknown", name, evidence=evidence)


@dataclass(frozen=True)
class CpuBuild:
    """LMCache on platform cpu: its CPU extension (expected by version, found or not) beside its GPU module."""

    extension: str | None  # the module the version builds for any device; "" none; None: version unknown
    extension_found: bool
    extension_gpu_markers: list[str]  # CUDA/HIP markers in the CPU extension itself (there should be none)
    gpu: BackendVerdict  # the GPU module: "fallback" (absent) is what a CPU image should have


def classify_cpu_build(probe: dict[str, Any], lmcache_version: str | None) -> CpuBuild:
    """What a cpu image holds: LMCache's CPU extension (compat.toml [[lmcache_cpu_extension]]) and its GPU module."""
    from stackctl.knowledge import compat

    lmcache = probe.get("lmcache") or {}
    version = lmcache_version or lmcache.get("version")
    extension = compat.lmcache_cpu_extension(version)
    modules = lmcache.get("native_modules") or []
    wanted = (extension,) if extension else (("lmcache_native",) if extension is None else ())
    module = _find_module(modules, wanted) if wanted else None
    elf = (module or {}).get("elf") or {}
    markers = cuda_markers(elf) + hip_markers(elf)
    return CpuBuild(extension, module is not None, markers, classify_backend(probe, version, []))
