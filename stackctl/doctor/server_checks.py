"""Server checks: the live stack, judged by what it says about itself (startup log, /metrics) and by a hit test."""

from __future__ import annotations

import random
import re

from stackctl import metrics
from stackctl.doctor.registry import Unavailable, check, require_lmcache, failed, passed, warned
from stackctl.engine import docker_adapter as dk
from stackctl.host.cpulist import parse_cpulist
from stackctl.knowledge.kinds import platform_of
from stackctl.knowledge.serving_engines import serving_engine_of

ENGINE_CONFIG = re.compile(r"Initializing a V1 LLM engine \(v([^)]*)\) with config: (.*)")
DEGRADED = "degraded mode (recompute)"
STALL = "No available shared memory broadcast block found"
# What LMCache logs when it runs without its native module: 0.5.4+ (cuda_ops), 0.4.x-0.5.x (c_ops), and 0.4.1-0.4.5
# naming its fallback module non_cuda_equivalents (later python_ops_fallback, which logs no line of its own).
NATIVE_MISSING = ("compiled extension not found", "Failed to import backend lmcache.c_ops",
                  "Fallback to python backend lmcache.non_cuda_equivalents")
NATIVE_OK = "Using backend: lmcache.c_ops"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LMCACHE_ERROR = re.compile(r"LMCache ERROR")
LMCACHE_READY = "Initialize storage manager on rank"


@check("server.health", "server", "error", "/health answers 200",
       "read `stackctl logs RECIPE`; restart with `stackctl up RECIPE`")
def health(ctx):
    """vLLM's /health is 200 when the engine is alive, 503 when it died; it refuses connections while loading."""
    from stackctl.httpclient import get_status

    ctx.container()
    code = get_status(f"{ctx.base_url}/health", timeout=5.0)
    if code == 200:
        return passed(f"{ctx.base_url}/health 200")
    return failed(f"{ctx.base_url}/health {'did not answer' if code is None else code}")


@check("server.models", "server", "error", "/v1/models lists the recipe's served name",
       "set model.served_name to what clients use, and restart")
def models(ctx):
    """Clients address the model by its served name; a mismatch makes every request fail with 404."""
    from stackctl.httpclient import get_json

    ctx.require_healthy()
    names = [m.get("id") for m in get_json(f"{ctx.base_url}/v1/models").get("data", [])]
    if ctx.recipe.served_name in names:
        return passed(f"serves {ctx.recipe.served_name}")
    return failed(f"serves {names}, recipe says {ctx.recipe.served_name}")


def engine_config(ctx) -> dict:
    """Effective settings from the one startup line that prints the engine config."""
    for line in ctx.server_log().splitlines():
        match = ENGINE_CONFIG.search(line)
        if match:
            text = match.group(2)
            found = {"vllm_version": match.group(1)}
            for key, pattern in (("enforce_eager", r"enforce_eager=(True|False)"),
                                 ("kv_cache_dtype", r"kv_cache_dtype=([\w.]+)"),
                                 ("enable_prefix_caching", r"enable_prefix_caching=(True|False|None)"),
                                 ("cudagraph_mode", r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")):
                value = re.search(pattern, text)
                found[key] = value.group(1) if value else None
            return found
    raise Unavailable("the engine config line is not in the log (log rotated, or not a vLLM V1 server)")


@check("server.engine-config", "server", "error", "the running engine has the recipe's settings",
       "the server ignored or overrode a flag: read the startup warnings in `stackctl logs RECIPE`")
def engine_settings(ctx):
    """Compares the startup line `Initializing a V1 LLM engine ... with config:` with the recipe: enforce_eager,
    KV cache dtype, prefix caching, and the CUDA-graph mode (ROCm; on CPU there are no graphs). vLLM silently
    downgrades some settings (e.g. FULL to PIECEWISE with LMCache layer-wise), which only this line shows."""
    config = engine_config(ctx)
    recipe = ctx.recipe
    wrong = []
    expect = {
        "enforce_eager": str(recipe.serve.enforce_eager),
        "enable_prefix_caching": str(recipe.serve.prefix_caching),
    }
    if recipe.model.kv_cache_dtype != "auto":
        expect["kv_cache_dtype"] = recipe.model.kv_cache_dtype
    for key, value in expect.items():
        if config.get(key) is not None and config[key] != value:
            wrong.append(f"{key}={config[key]} (recipe: {value})")
    mode = config.get("cudagraph_mode")
    if platform_of(recipe).cuda_graphs:
        wanted = (recipe.serve.cudagraph_mode or "").upper()
        if wanted and mode and mode != wanted:
            wrong.append(f"cudagraph_mode={mode} (recipe: {wanted})")
        elif serving_engine_of(recipe).needs_cuda_graphs and mode == "NONE":
            wrong.append("cudagraph_mode=NONE on ATOM (3-5x throughput loss)")
    if wrong:
        return failed("; ".join(wrong), config=config)
    shown = ", ".join(f"{k}={config[k]}" for k in ("enforce_eager", "enable_prefix_caching", "kv_cache_dtype",
                                                  "cudagraph_mode") if config.get(k) is not None)
    return passed(f"vLLM {config['vllm_version']}: {shown}", config=config)


@check("server.atom-activated", "server", "error", "the ATOM platform plugin is active",
       "unset ATOM_DISABLE_VLLM_PLUGIN; use the ATOM image")
def atom_activated(ctx):
    """vLLM logs `Platform plugin atom is activated` when ATOM took over the platform."""
    if not serving_engine_of(ctx.recipe).atom_plugin:
        raise Unavailable("engine is not atom-vllm")
    if "Platform plugin atom is activated" in ctx.server_log():
        return passed("Platform plugin atom is activated")
    return failed("no `Platform plugin atom is activated` in the startup log")


@check("server.lmcache-initialised", "server", "error", "LMCache's engine initialised its storage (not degraded mode)",
       "LMCache could not attach to the device: on ROCm rebuild it for HIP; on platform cpu keep "
       "cache.cpu_connector on (stackctl's connector for vLLM-CPU), or turn cache.enabled off")
def lmcache_initialised(ctx):
    """Passes only on LMCache's own positive marker: after the KV caches are registered, a working engine logs
    `Post initializing LMCacheEngine` and `Initialize storage manager on rank N, ...` (LMCache 0.5.6
    lmcache/v1/cache_engine.py:303 and :315-322) before it builds its storage backends. A server whose LMCache
    failed is still healthy: LMCacheManager logs `... System will operate in degraded mode (recompute).` at ERROR
    (lmcache/v1/manager.py:107-111, :235-238) and skips post_init, so the marker never appears; on vLLM's CPU
    build it says `No supported cpu connector found.` first. Any LMCache ERROR line fails the check too (a backend
    that could not be created, a lookup socket timing out)."""
    require_lmcache(ctx.spec)
    lines = [ANSI.sub("", line).strip() for line in ctx.server_log().splitlines()]
    degraded = [line for line in lines if DEGRADED in line or "No supported" in line]
    if degraded:
        return failed(f"LMCache in degraded mode: {_from_message(degraded[-1])}", lines=degraded[-5:])
    errors = [line for line in lines if LMCACHE_ERROR.search(line)]
    if errors:
        return failed(f"{len(errors)} LMCache ERROR line(s): {errors[0][-160:]}", lines=errors[:5])
    ready = [line for line in lines if LMCACHE_READY in line]
    if ready:
        return passed(f"LMCache storage initialised: {ready[0][ready[0].index(LMCACHE_READY):][:120]}")
    if not any("LMCache" in line or "lmcache" in line for line in lines):
        return failed("no LMCache line in the log: the connector did not load")
    return failed(f"no `{LMCACHE_READY}` line: LMCache's engine never initialised its storage (still starting, or "
                  "post_init was skipped)")


def _from_message(line: str) -> str:
    """A log line from its message on (logging's prefix and LMCache's leading punctuation dropped), at most 160
    characters."""
    for marker in ("No supported", "System will operate", "Failed to"):
        if marker in line:
            return line[line.index(marker):][:160]
    return line[-160:]


@check("server.lmcache-native", "server", "error", "LMCache runs its native kernels, not the slow fallback",
       "build LMCache from source for HIP (build.lmcache_from = \"source\")")
def lmcache_native(ctx):
    """LMCache 0.5.6 logs `lmcache.cuda_ops compiled extension not found; CudaDeviceOps stays on the torch
    baseline` (lmcache/v1/platform/devices/cuda/device_ops.py:129), 0.4.x `Failed to import backend lmcache.c_ops`,
    when the native module cannot load; healthy 0.4.x
    logs `Using backend: lmcache.c_ops`."""
    require_lmcache(ctx.spec)
    log = ctx.server_log()
    for marker in NATIVE_MISSING:
        for line in log.splitlines():
            if marker in line:
                return failed(f"native module not loaded: {line.strip()[-160:]}")
    if NATIVE_OK in log:
        return passed(NATIVE_OK)
    raise Unavailable("no native-backend line in the log (this LMCache release logs none when healthy)")


@check("server.broadcast-stall", "server", "error", "no shared-memory broadcast stall in the log",
       "a known deadlock class with the connector at TP>=2: retry with cudagraph_mode PIECEWISE, or enforce_eager "
       "to narrow it down")
def broadcast_stall(ctx):
    """`No available shared memory broadcast block found in 60 seconds` repeating means the workers wait on each
    other and no request makes progress."""
    hits = [line for line in ctx.server_log().splitlines() if STALL in line]
    if len(hits) >= 2:
        return failed(f"{len(hits)} broadcast stall lines: {hits[-1].strip()[-140:]}")
    if hits:  # one during start-up compilation is normal (vLLM says so in the same line)
        return passed("one broadcast wait during start-up (compilation), not repeating")
    return passed("none")


def hit_test(ctx) -> dict:
    """Send one unique long prompt twice; read the HBM prefix-cache counters from /metrics around the second."""
    from stackctl.httpclient import stream_completion

    def run():
        ctx.require_healthy()
        words = ctx.recipe.checks.hit_test_tokens
        offset = random.SystemRandom().randrange(4000)
        prompt = " ".join(f"w{(offset + i) % 4088}" for i in range(words))
        model = ctx.recipe.served_name
        # A short request first, so the cold figure is prefill of the prompt and not the server's first-request
        # warm-up (on a fresh vLLM-CPU server that alone can take longer than the prefill); a server that has
        # finished a request has paid it already.
        from stackctl.doctor.lmcache_live import has_finished_a_request

        if not has_finished_a_request(ctx.metrics()):
            stream_completion(ctx.base_url, model, "stackctl warm-up")
        cold = stream_completion(ctx.base_url, model, prompt)
        before = ctx.metrics()
        warm = stream_completion(ctx.base_url, model, prompt)
        after = ctx.metrics()

        def delta(name):
            a, b = metrics.total(after, name), metrics.total(before, name)
            return None if a is None or b is None else a - b

        return {
            "prompt": prompt, "prompt_tokens": warm["usage"].get("prompt_tokens"),
            "cold_ttft_s": cold["ttft_s"], "warm_ttft_s": warm["ttft_s"],
            "queries": delta("vllm:prefix_cache_queries_total"), "hbm_hits": delta("vllm:prefix_cache_hits_total"),
        }

    return ctx.remember("hit_test", run)


@check("server.hit-test", "server", "error", "a repeated prompt is served from vLLM's prefix cache (HBM)",
       "turn serve.prefix_caching on; see image.hash-seed")
def cache_hits(ctx):
    """The proof that the HBM tier works: the same long prompt, twice; the second request's prompt tokens must
    come from vLLM's prefix cache, read from the server's own counter (vllm:prefix_cache_hits_total), not from
    what a client expects. With LMCache on, server.lmcache-hit is the hit test: an HBM hit says nothing about
    LMCache (a degraded LMCache, which stores nothing and waits out a lookup timeout per request, still has HBM
    hits), so this check leaves it to that one."""
    if ctx.recipe.cache.enabled:
        if ctx.spec.lmcache_in_server:
            raise Unavailable("LMCache is on: server.lmcache-hit is the hit test (an HBM hit proves nothing about it)")
        raise Unavailable(f"KV offload is on (cache.offload = {ctx.recipe.cache.offload!r}): server.offload-hit is "
                          "the hit test (an HBM hit proves nothing about the offload)")
    result = hit_test(ctx)
    tokens = result["prompt_tokens"] or 0
    from stackctl.doctor.dtype_checks import cold_rate_text  # lazily: its checks register after this module's

    figures = (f"TTFT {result['cold_ttft_s'] * 1000:.0f} ms cold{cold_rate_text(ctx, tokens, 0, result['cold_ttft_s'])}"
               f" -> {result['warm_ttft_s'] * 1000:.0f} ms warm, "
               f"{tokens} prompt tokens")
    details = {k: v for k, v in result.items() if k != "prompt"}
    if result["hbm_hits"] is None:
        raise Unavailable("vllm:prefix_cache_hits_total not in /metrics")
    hits = result["hbm_hits"] or 0
    if hits <= 0 or (tokens and hits < 0.5 * tokens):
        return failed(f"{hits:.0f}/{tokens} prompt tokens hit the prefix cache on the repeat ({figures})", **details)
    return passed(f"{hits:.0f}/{tokens} tokens from the HBM prefix cache; {figures}", **details)


@check("server.pinning", "server", "error", "the server's processes run on the CPUs and memory nodes decided for them",
       "run `stackctl up RECIPE` again (it restores the decided cpuset); install numactl in the image if it is missing")
def server_pinning(ctx):
    """Reads Cpus_allowed_list and Mems_allowed_list of the server process (PID 1 in the container) and its worker
    processes from /proc (this machine's, where the container's processes are certainly the ones read; else inside
    the container through `docker exec`), and the container's cpuset from the engine, and compares them with
    the pinning decision `up` made (the same host facts and recipe) and with the GPUs' NUMA nodes. The server
    process must have exactly the decided CPUs and nodes; workers may narrow themselves inside them (vLLM's CPU
    backend binds each worker to its OpenMP cores) but not step outside. A container whose cpuset was changed
    after the start (`docker update --cpuset-cpus`), or an image without numactl, fails."""
    from stackctl.doctor.affinity import PROC_SCRIPT, Expected, compare, host_proc_text, narrowed, parse_proc
    from stackctl.host.cpulist import format_cpulist
    from stackctl.host.pinning import PinningError, pinning_for, select_gpus
    from stackctl.host.placement import placement

    recipe, host = ctx.recipe, ctx.host
    explicit = (recipe.host.numa, recipe.host.isolcpus) != ("auto", "auto") or recipe.host.gpus is not None
    if not host.gpus and not explicit:
        raise Unavailable("no GPU facts on this host and the recipe asks for no pinning (numa and isolcpus auto): "
                          "nothing to place the server near")
    try:
        decision = pinning_for(recipe, host)
    except PinningError as exc:
        return failed(f"no pinning decision for this host: {exc}")
    container = ctx.container()
    launcher = placement(decision).launcher
    init_pid = dk.container_state(container).pid
    seen = host_proc_text(container.id, init_pid, dk.container_env(container).get("PATH", ""),
                          bool(launcher)) if init_pid else None
    view = parse_proc(seen if seen is not None else dk.exec_output(container, ["sh", "-c", PROC_SCRIPT]))
    expected = Expected(set(parse_cpulist(decision.cpuset_cpus or "")),
                                 set(parse_cpulist(decision.cpuset_mems or "")),
                                 decision.cpuset_cpus or "", decision.cpuset_mems or "")
    problems = compare(view, expected, dk.container_cpuset(container))
    if launcher and view.numactl is None:
        problems.append(f"numactl is not in the image: serve.sh could not run `{' '.join(launcher)}` and fell back "
                        "to taskset (memory is not bound by the launcher)")
    if not view.processes:
        return failed("; ".join(problems))
    main = view.processes[0]
    used = select_gpus(host.gpus, recipe.model.tensor_parallel, recipe.host.gpus)
    gpu_nodes = {g.numa_node for g in used if g.numa_node is not None}
    remote = gpu_nodes - main.mems if main.mems else set()
    nodes = sorted({n for n in (host.cpu.node_of(cpu) for cpu in main.cpus) if n is not None})
    where = {"nodes": format_cpulist(nodes), "cpus": format_cpulist(main.cpus), "mems": format_cpulist(main.mems),
             "decided": decision.to_dict(), "launcher": list(launcher)}
    details = {"placement": where, "processes": [
        {"pid": p.pid, "name": p.name, "cpus": format_cpulist(p.cpus), "mems": format_cpulist(p.mems)}
        for p in view.processes]}
    if remote and not problems:
        message = (f"{main.label()} has memory on node(s) {format_cpulist(main.mems)}, its GPU(s) are on node(s) "
                   f"{format_cpulist(remote)}")
        if recipe.host.numa == "auto":
            problems.append(message)
        else:
            return warned(message + " (host.numa in the recipe)", **details)
    if problems:
        return failed("; ".join(problems), **details)
    inside = narrowed(view, expected)
    summary = (f"{main.label()} and {len(view.processes) - 1} worker process(es) on CPUs {where['cpus']} "
               f"(node {where['nodes'] or '?'}), memory node(s) {where['mems'] or '?'}")
    how = f"as decided ({decision.kind}" + (f", {' '.join(launcher)})" if launcher else ")")
    return passed(f"{summary}, {how}" + (f"; narrowed inside: {', '.join(inside)}" if inside else ""), **details)
