"""Image checks: what is installed in the stack's image, read by the image probe without importing torch."""

from __future__ import annotations

from stackctl.doctor.registry import Unavailable, check, require_lmcache, failed, passed, warned
from stackctl.knowledge import compat
from stackctl.knowledge.kinds import platform_of
from stackctl.knowledge.serving_engines import serving_engine_of


def _distributions(ctx) -> dict[str, str]:
    return {d["name"]: d["version"] for d in ctx.probe().get("distributions") or []}


def _lmcache_on(ctx) -> None:
    require_lmcache(ctx.spec, in_server=False)


CPU_SOURCE_FIX = ("build LMCache from source (build.lmcache_from = \"source\"): stackctl's cpu image compiles its "
                  "CPU extension and leaves the GPU kernels out (NO_GPU_EXT=1)")


@check("image.lmcache-backend", "image", "error",
       "LMCache's native modules are the platform's build (HIP for the recipe's GPUs; on cpu its CPU extension)",
       "build LMCache from source with BUILD_WITH_HIP=1 (build.lmcache_from = \"source\"), for versions.gpu_arch")
def lmcache_backend(ctx):
    """Reads the ELF of LMCache's native modules without importing them.

    On rocm, the GPU module (`cuda_ops` from 0.5.4, `c_ops` up to 0.5.3: the 0.5.3 and 0.5.4 PyPI wheels; a source
    build keeps the name, LMCache 0.5.6 setup_extensions/build_profiles/rocm.py:146) must be a HIP build with
    offload bundles for the recipe's gfx targets; a CUDA build (the PyPI wheel, linked to libcudart) or no native
    module (the slow torch/Python fallback) is the 1.7x-slower-than-no-cache failure.

    On cpu there is no GPU kernel to run: the right build is LMCache's CPU extension `lmcache_native` (from 0.5.4;
    compiled with the common extensions even with NO_GPU_EXT=1, and imported by its platform layer on every device,
    lmcache/v1/platform/base/device_ops.py:24) and no GPU module. Without the CPU extension LMCache cannot load its
    platform layer; a GPU module (the PyPI CUDA wheel) is dead weight that links libraries a CPU host lacks. Releases
    before 0.5.4 have no CPU extension and run as pure Python."""
    from stackctl.doctor.lmcache_backend import classify_backend

    _lmcache_on(ctx)
    probe = ctx.probe()
    lmcache = probe.get("lmcache") or {}
    cpu = platform_of(ctx.recipe).ships_cpu_connector
    if not lmcache.get("found"):
        return failed("LMCache is not installed in the image", fix=CPU_SOURCE_FIX if cpu else "")
    if cpu:
        return _cpu_lmcache_build(probe, lmcache.get("version"))
    verdict = classify_backend(probe, lmcache.get("version"), list(ctx.recipe.versions.gpu_arch))
    evidence = "; ".join(verdict.evidence[:3])
    details = {"kind": verdict.kind, "module": verdict.module, "targets": verdict.targets,
               "evidence": verdict.evidence}
    if verdict.kind == "hip":
        return _hip_build(verdict, list(ctx.recipe.versions.gpu_arch), details)
    if verdict.kind == "cuda":
        return failed(f"CUDA build of {verdict.module} (the PyPI wheel): {evidence}", **details)
    if verdict.kind == "fallback":
        return failed(f"no native {verdict.module or 'GPU'} module: LMCache falls back to slow torch ops", **details)
    raise Unavailable(f"native module not classified: {evidence or 'no evidence'}")


def _hip_build(verdict, gpu_arch: list[str], details: dict):
    """image.lmcache-backend for a HIP build: code objects for exactly the recipe's gpu_arch, and the HIP runtime
    linked (without DT_NEEDED libamdhip64 the module cannot register its kernels: a build that did not go through
    hipcc's link)."""
    details["hip_runtime"] = verdict.hip_runtime
    has = ", ".join(verdict.targets) or "none"
    if verdict.missing_archs:
        return failed(f"HIP build of {verdict.module} lacks {', '.join(verdict.missing_archs)} (has {has}; "
                      f"versions.gpu_arch: {', '.join(gpu_arch)})", **details)
    if not verdict.hip_runtime:
        return failed(f"HIP build of {verdict.module} ({has}) does not link the HIP runtime (no DT_NEEDED "
                      "libamdhip64.so.N)", **details)
    if not verdict.targets_known:
        raise Unavailable(f"HIP build of {verdict.module} links {verdict.hip_runtime}, but its offload bundles are "
                          f"compressed: the code-object targets cannot be listed (seen: {has})")
    kernels = _kernel_verdict(verdict, details)
    if kernels["failed"]:
        return failed(f"HIP build of {verdict.module} ({has}): {kernels['failed']}", **details)
    if verdict.extra_archs:
        return warned(f"HIP build of {verdict.module} also carries {', '.join(verdict.extra_archs)}, which "
                      f"versions.gpu_arch does not name (has {has}): not built from this recipe; "
                      f"{kernels['summary']}", **details)
    return passed(f"HIP build of {verdict.module}: code objects for {has} (exactly versions.gpu_arch), "
                  f"links {verdict.hip_runtime}; {kernels['summary']}", **details)


def _kernel_verdict(verdict, details: dict) -> dict:
    """Each target's kernels from its code objects (every offload bundle of the module), against the kernels the
    release's HIP sources launch: {"failed": why or "", "summary": per target}. A kernel with no code object for a
    target, or compiled for a wavefront other than 64 (every CDNA GPU runs 64), fails; spills and scratch are
    figures. A release whose kernels are unknown makes the summary say none was judged; kernels the release launches
    that cannot be seen (no code object metadata, or missing where some code objects are unreadable) skip the check
    with the reason: they may be there."""
    details["kernels"] = [vars(k) for k in verdict.kernels]
    if not verdict.kernels:
        if verdict.kernels_launched:
            raise Unavailable(f"HIP build of {verdict.module}: no code object in its offload bundles carries the "
                              "AMDGPU metadata its kernels are read from, so the kernels LMCache launches cannot be "
                              "checked")
        return {"failed": "", "summary": "kernels not read (no code object metadata in its offload bundles)"}
    for target in verdict.kernels:
        if target.missing and target.unreadable:
            raise Unavailable(f"HIP build of {verdict.module}: {len(target.missing)} kernel(s) LMCache launches not "
                              f"seen on {target.target} ({', '.join(target.missing[:2])}), but {target.unreadable} "
                              "of its code objects could not be read: they may be there")
        if target.missing:
            return {"failed": f"no code object for {len(target.missing)} kernel(s) on {target.target}: "
                              f"{', '.join(target.missing[:3])} (the release's HIP sources launch them)",
                    "summary": ""}
        if target.not_wave64:
            return {"failed": f"{len(target.not_wave64)} kernel(s) for {target.target} compiled for a wavefront "
                              f"other than 64, which its GPUs run: {target.not_wave64[0][:80]}", "summary": ""}
    launched = verdict.kernels_launched
    parts = []
    for target in verdict.kernels:
        costs = "no spills or scratch" if not (target.spills or target.scratch) else \
            f"{target.spills} spill(s), {target.scratch} kernel(s) using scratch"
        unread = f", {target.unreadable} code object(s) unreadable" if target.unreadable else ""
        parts.append(f"{target.target}: {target.count} kernel instances in {target.bundles} bundle(s){unread}, "
                     f"wavefront 64, {costs}")
    whose = (f"all {launched} kernels its HIP sources launch have code" if launched
             else "this release's kernel list is not known: none judged missing")
    return {"failed": "", "summary": f"{'; '.join(parts)} ({whose})"}


def _cpu_lmcache_build(probe: dict, version: str | None):
    """image.lmcache-backend on platform cpu: the CPU extension present, no GPU module."""
    from stackctl.doctor.lmcache_backend import classify_cpu_build

    build = classify_cpu_build(probe, version)
    release = f"LMCache {version or '(version unknown)'}"
    details = {"kind": "cpu", "cpu_extension": build.extension, "cpu_extension_found": build.extension_found,
               "gpu_module": build.gpu.kind, "evidence": build.gpu.evidence}
    if build.extension and not build.extension_found:
        return failed(f"{release}'s CPU extension lmcache.{build.extension} is missing: its platform layer imports "
                      "it, so LMCache cannot load", fix=CPU_SOURCE_FIX, **details)
    if build.extension is None and not build.extension_found:
        raise Unavailable(f"{release}: cannot tell whether this release has a CPU extension (pin versions.lmcache)")
    if build.extension_gpu_markers:
        return warned(f"the CPU extension lmcache.{build.extension or 'lmcache_native'} carries GPU code "
                      f"({'; '.join(build.extension_gpu_markers[:2])}): a GPU build on platform cpu",
                      fix=CPU_SOURCE_FIX, **details)
    have = (f"CPU extension lmcache.{build.extension or 'lmcache_native'}" if build.extension_found
            else "no CPU extension (this release has none: pure Python)")
    if build.gpu.kind in ("cuda", "hip"):
        return warned(f"{release}: {have}, but also a {build.gpu.kind.upper()} build of {build.gpu.module}, which "
                      "cannot run on platform cpu (the PyPI wheel is a CUDA build)", fix=CPU_SOURCE_FIX, **details)
    return passed(f"{release}: {have} and no GPU module: the right build for platform cpu", **details)


@check("image.cuda-only-packages", "image", "error", "no CUDA-only Python distribution in the image",
       "let stackctl purge them (build.purge_cuda_packages = true) and rebuild")
def cuda_only_packages(ctx):
    """CUDA-only wheels (nixl, cupy-cudaXXx, cuda-python and the cuda-core/cuda-bindings/cuda-pathfinder it pulls,
    cufile-python, nvidia-*) fail on ROCm at model load (`libcuda.so.1`/`libcudart` ImportError) or with
    cudaErrorInsufficientDriver. `nvtx` does not fail: it is unused on ROCm (LMCache 0.5.6 lmcache/utils.py:20-27
    imports it optionally), so it is dead weight that the purge removes. On platform cpu, the
    nvidia-* runtime wheels a PyPI (CUDA) torch depends on are tolerated: torch needs them to import, and they do
    nothing there."""
    installed = _distributions(ctx)
    tolerated = platform_of(ctx.recipe).tolerated_packages
    found = sorted(name for name in installed
                   if compat.is_cuda_only(name) and not (tolerated and name.startswith(tolerated)))
    if found:
        reasons = compat.table().get("cuda_only_reasons", {})
        named = [f"{name} ({reasons[name]})" if name in reasons else name for name in found]
        return failed(f"{len(found)} CUDA-only distribution(s): {'; '.join(named)}", found=found)
    return passed(f"none among {len(installed)} distributions")


@check("image.aiofile", "image", "error", "aiofile is installed where LMCache needs it",
       "install aiofile in the image (stackctl's Dockerfiles do)")
def aiofile(ctx):
    """LMCache 0.5.x imports its GDS backend, which imports `aiofile` at top level, whenever the storage backends
    load: without it the connector import fails."""
    _lmcache_on(ctx)
    if (ctx.probe().get("aiofile") or {}).get("found"):
        return passed("aiofile importable")
    return failed("aiofile is not installed")


@check("image.atom-plugin", "image", "error", "ATOM's vLLM platform plugin is registered",
       "use an ATOM image (rocm/atom-dev) or install ATOM; do not set ATOM_DISABLE_VLLM_PLUGIN")
def atom_plugin(ctx):
    """ATOM registers through the `vllm.platform_plugins` entry point `atom`; without it vLLM runs its stock ROCm
    platform and the recipe's ATOM tuning does nothing."""
    if not serving_engine_of(ctx.recipe).atom_plugin:
        raise Unavailable("engine is not atom-vllm")
    plugins = (ctx.probe().get("entry_points") or {}).get("vllm.platform_plugins") or []
    atom = [p for p in plugins if p.get("name") == "atom"]
    if not atom:
        return failed("no `atom` entry point in vllm.platform_plugins")
    return passed(f"atom -> {atom[0].get('value')}")


@check("image.versions", "image", "error", "installed versions match the recipe's pins",
       "rebuild the image (`stackctl build --rebuild`), or fix the pins in [versions]")
def versions(ctx):
    """The recipe pins vLLM, LMCache and torch; rules and checks key their expectations on those versions, so the
    image must carry exactly them."""
    probe = ctx.probe()
    pins = ctx.spec.versions
    actual = {
        "vllm": (probe.get("vllm") or {}).get("version"),
        "lmcache": (probe.get("lmcache") or {}).get("version"),
        "torch": (probe.get("torch") or {}).get("version"),
    }
    wrong, shown = [], []
    for name in ("vllm", "lmcache", "torch"):
        pin = pins.get(name)
        if not pin:
            continue
        have = actual[name]
        shown.append(f"{name} {have}")
        if have is None or have.split("+")[0] != pin.split("+")[0]:
            wrong.append(f"{name} {have or 'missing'} (pinned {pin})")
    if wrong:
        return failed("; ".join(wrong), actual=actual, pins=pins)
    if not shown:
        raise Unavailable("the recipe pins no versions")
    return passed(", ".join(shown), actual=actual)


@check("image.torch-build", "image", "error", "torch is the build the platform needs (ROCm on rocm)",
       "use a ROCm base image (its torch is built for HIP); never pip install torch from PyPI into it")
def torch_build(ctx):
    """A CUDA torch in a ROCm image cannot see the GPUs; a stray `pip install` can silently replace the base image's
    ROCm torch with PyPI's CUDA one."""
    torch = ctx.probe().get("torch") or {}
    if not torch.get("found"):
        return failed("torch is not installed")
    build = torch.get("build")
    if build is None:
        raise Unavailable("torch build not readable from torch/version.py")
    wanted = platform_of(ctx.recipe).torch_build
    if wanted:
        if build != wanted:
            return failed(f"torch {torch.get('version')} is a {build} build")
        return passed(f"torch {torch.get('version')} (HIP {torch.get('hip')})")
    if build == "cuda":
        return warned(f"torch {torch.get('version')} is a CUDA build on a CPU stack (runs, carries unused CUDA)")
    return passed(f"torch {torch.get('version')} ({build})")


@check("image.hash-seed", "image", "error", "two fresh processes compute the same cache keys",
       "set cache.hash_seed (PYTHONHASHSEED) to one fixed value")
def hash_seed(ctx):
    """Two fresh processes, with the stack's environment, hash the same tokens into prefix block hashes using the
    image's own vLLM (`init_none_hash` + `hash_block_tokens`) and the hash the shared cache is keyed with (LMCache:
    Python's builtin hash; else vLLM's prefix-caching hash). Different results mean no process ever finds another's
    entries: 0% hits across restarts, TP ranks and hosts. The probes run vLLM's hashing source files without
    importing vllm and torch (mode "source"), falling back to a normal import; both are fresh interpreters, never
    forks, because Python's str-hash secret is fixed when an interpreter starts."""
    runs = ctx.image_facts()["hash_runs"]
    probes = [run.get("hash_probe") or {} for run in runs]
    errors = [p.get("error") for p in probes if p.get("error")]
    if errors:
        raise Unavailable(f"hash probe could not run: {errors[0]}")
    first, second = probes[0].get("hashes"), probes[1].get("hashes")
    if not first or not second:
        raise Unavailable("hash probe returned no hashes")
    algo = probes[0].get("algo")
    seed = (runs[0].get("env") or {}).get("PYTHONHASHSEED")
    sources = _seed_sources(ctx) if seed is None else ""
    if first != second:
        return failed(f"{algo} block hashes differ between two processes (PYTHONHASHSEED "
                      f"{'unset' if seed is None else repr(seed)}){sources}", first=first[0], second=second[0])
    return passed(f"{algo}: identical block hashes in two processes (PYTHONHASHSEED "
                  f"{'unset' if seed is None else repr(seed)}, seed {probes[0].get('seed')}, "
                  f"vLLM code run by {probes[0].get('mode') or 'import'}){sources}", mode=probes[0].get("mode"))


def _seed_sources(ctx) -> str:
    """What the packages' sources say about this stack's keys without a seed (knowledge/hash_seed.py), beside what
    the two processes showed: which configurations need PYTHONHASHSEED, in the message."""
    if not ctx.recipe.cache.enabled:
        return ""
    from stackctl.rules.seed import seed_need

    need = seed_need(ctx.spec)
    return f"; from the sources, the seed is {'needed' if need.needed else 'not needed'} here: {need.why}"


@check("image.parsers", "image", "error",
       "the image's own vLLM parses the serve arguments and its own LMCache loads lmcache.yaml",
       "fix the flag or key the package's message names (serve.extra_args, cache.extra), or the pins")
def own_parsers(ctx):
    """stackctl's rules judge flags and keys from facts read out of the packages' sources; this asks the packages
    in the image itself, which also covers a custom base image or a release newer than the facts. In one container
    run (probes/parsers/parse_config.py): vLLM's `make_arg_parser(FlexibleArgumentParser())` (vLLM 0.32.0
    vllm/entrypoints/launchers/cli_args.py:421, the parser `vllm serve` builds) parses the model and the serve
    arguments serve.sh passes, and LMCache's `LMCacheEngineConfig.from_file` (LMCache 0.5.6
    lmcache/v1/config.py:1057, `_from_file` at config_base.py:318-348) loads the rendered lmcache.yaml. A parser
    error fails the
    check with the package's own message (e.g. `vllm serve: error: unrecognized arguments: true`); warnings
    LMCache's loader logs (unknown keys, values it could not convert) warn. Skips, saying why, when the image has
    no vLLM (and checks no LMCache where the image or the recipe has none)."""
    from stackctl.doctor.own_parsers import run

    report = run(ctx)
    vllm = report.get("vllm") or {}
    if not vllm.get("found"):
        raise Unavailable(f"the image has no vLLM to ask ({vllm.get('error') or 'not found'})")
    problems, notes, warnings = [], [], []
    if vllm.get("ok"):
        notes.append(f"vLLM {vllm.get('version')} parses the serve arguments")
    else:
        problems.append(f"vLLM {vllm.get('version')}: {vllm.get('error')}")
    lmcache = report.get("lmcache")
    if lmcache is None:
        notes.append("no LMCache in the server: no lmcache.yaml to load")
    elif not lmcache.get("found"):
        notes.append(f"LMCache not checked: the image has none ({lmcache.get('error')})")
    elif not lmcache.get("ok"):
        problems.append(f"LMCache {lmcache.get('version')}: {lmcache.get('error')}")
    else:
        warnings = [w for w in lmcache.get("warnings") or [] if "nknown" in w or "convert" in w or "parse" in w]
        notes.append(f"LMCache {lmcache.get('version')} loads lmcache.yaml")
    if problems:
        return failed("; ".join(problems), report=report)
    if warnings:
        return warned(f"LMCache {lmcache.get('version')} loaded lmcache.yaml with warnings: " + "; ".join(warnings),
                      report=report)
    return passed("; ".join(notes), report=report)
