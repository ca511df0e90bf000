"""The stacks and containers bench measures on: a stack found running (never stopped here), or one brought up for
the measurement and taken down again (its log kept when it stopped on its own). `say` prints progress."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stackctl.bench import probe as probes
from stackctl.bench import workload as workloads
from stackctl.bench.report import require_plotting
from stackctl.errors import StackctlError
from stackctl.httpclient import get_status

Say = Callable[[str], None]


def stack_url(spec) -> str:
    from stackctl.httpclient import client_host

    return f"http://{client_host(spec.recipe.serve.host)}:{spec.recipe.serve.port}"


def running_url(spec) -> str:
    """The stack's address; refused unless a healthy server answers there."""
    url = stack_url(spec)
    if get_status(f"{url}/health", timeout=5) != 200:
        raise StackctlError(f"{spec.name}: no healthy server at {url} (fix: stackctl up {spec.source})")
    return url


def stack_container(spec):
    from stackctl.engine import docker_adapter as dk

    container = dk.find_container(dk.client(), spec.container_name)
    return dk.refresh(container) if container is not None else None


@contextmanager
def stack_for(spec, say: Say) -> Iterator[str]:
    """The arm's stack: used as it runs when it runs this recipe already; otherwise brought up, yielded, and taken
    down again whatever happens."""
    from stackctl.lifecycle.down import down
    from stackctl.engine import docker_adapter as dk
    from stackctl.engine.health import save_failure_log, stop_reason
    from stackctl.lifecycle.status import status_rows
    from stackctl.lifecycle.plan import plan_up
    from stackctl.lifecycle.up import up

    url = stack_url(spec)
    rows = [r for r in status_rows(spec) if r["recipe_current"] and r["health"] == "healthy"]
    started_here = False
    if not rows:
        if get_status(f"{url}/health", timeout=2) is not None:
            raise StackctlError(f"{spec.name}: port {spec.recipe.serve.port} is taken by another server "
                                "(fix: stop it, or give the arms different serve.port values)")
        say(f"bench: bringing up {spec.name}")
        up(plan_up(spec), say=say)
        started_here = True
    try:
        yield url
    finally:
        if started_here:
            container = stack_container(spec)
            if container is not None and container.status != "running":
                kept = save_failure_log(spec.recipe, container)
                why = stop_reason(dk.container_state(container))
                say(f"bench: {spec.name} stopped ({why}); its log: {kept}")
            down(spec, say=say)


def run_arm(spec, sessions, tokens: int, max_requests: int, max_seconds: float, say: Say):
    """One arm of the workload comparison: a one-run probe, then the workload, on the arm's stack."""
    with stack_for(spec, say) as url:
        say(f"bench: {spec.name}: probe, then workload")
        probe = probes.probe(url, spec.recipe.served_name, tokens, runs=1, lmcache=lmcache_arm(spec),
                             offload=offload_arm(spec), settle=settler(spec))
        result = workloads.run_workload(url, spec.recipe.served_name, sessions, spec.name, max_requests,
                                        max_seconds)
        result.probe = probe
        return result


def settler(spec) -> Callable[[], float | None] | None:
    """What the probe calls before each arm: wait until the stack's container is quiet (stackctl/engine/quiet.py);
    it returns None, at once, where this machine cannot see the container's processes. No wait (None) for a stack
    without a KV offload: nothing writes in the background there, and a wait would sit through vLLM's one-second
    poll after every request for nothing."""
    from stackctl.engine.quiet import wait_for_container

    if not spec.recipe.cache.enabled:
        return None
    container = stack_container(spec)
    return (lambda: wait_for_container(container)) if container is not None else (lambda: None)


def lmcache_arm(spec) -> bool:
    """Whether the probe has an LMCache arm: LMCache in the server only. Its repeat under another cache_salt is a hit
    there (LMCache keys by tokens); LMCache's own server (lmcache-mp) keys by the salt too, so that repeat would be a
    miss, not a measurement of the offload (doctor's server.offload-hit proves that engine)."""

    return spec.lmcache_in_server


def offload_arm(spec) -> bool:
    """Whether the probe has an offload arm: another engine than LMCache in the server, and the dev endpoint that
    empties HBM (serve.dev_endpoints), without which the repeat would be an HBM hit."""

    return spec.recipe.cache.enabled and not spec.lmcache_in_server and spec.recipe.serve.dev_endpoints


def run_probe(spec, tokens: int, runs: int, out_dir: Path, say: Say) -> dict:
    """The probe on the running stack, the prefill floor beside it, probe.json and probe.png written."""
    from stackctl.state.store import write_atomically

    require_plotting()
    url = running_url(spec)
    result = probes.probe(url, spec.recipe.served_name, tokens, runs, lmcache=lmcache_arm(spec), offload=offload_arm(spec),
                          settle=settler(spec), loaded=lmcache_loaded(spec) if lmcache_arm(spec) else None)
    say(probes.probe_table(result).rstrip("\n"))
    prefill_floor(spec, result, say)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(out_dir / "probe.json", json.dumps(result, indent=2))
    probes.plot_probe(result, out_dir / "probe.png", spec.name)
    return result


def lmcache_loaded(spec) -> Callable[[], tuple[int, float]] | None:
    """What LMCache has loaded so far in the stack's server, as its log says (bytes, ms); None without a container."""
    from stackctl.doctor.parsers.lmcache_log import activity
    from stackctl.engine import docker_adapter as dk

    container = stack_container(spec)
    if container is None:
        return None

    def so_far() -> tuple[int, float]:
        seen = activity(dk.logs_text(container))
        return seen.retrieved_bytes, seen.retrieve_ms
    return so_far


def prefill_floor(spec, result: dict, say: Say) -> None:
    """The cold arm's prefill rate beside this host's matmul peak for the served dtype (the best this host reached,
    measured again now that the arms are done), and each hit arm's TTFT in its parts (knowledge/hit_time.py): how
    far from the physical floor the figures are. Added to the probe's result and printed."""
    from stackctl.engine import docker_adapter as dk
    from stackctl.host import discover
    from stackctl.host.placement import cpuset_kwargs
    from stackctl.measure.matmul import measure
    from stackctl.measure.prefill import model_floor

    container = stack_container(spec)
    if container is None:
        return
    facts = discover()
    environment = dict(spec.environment)
    # The CPUs the server runs on, as the engine confines it (not derived again from the recipe).
    cpuset = cpuset_kwargs(*dk.container_cpuset(container))
    floor = model_floor(container, spec.recipe.model.path)
    try:
        peak = measure(dk.client(), dk.container_image_id(container), environment=environment, cpuset=cpuset,
                       isa=facts.isa.for_environment(environment).to_dict(), stack=spec.name,
                       dtypes=tuple(sorted({"float32", floor.dtype or "bfloat16"})), fresh=True)
        floor = floor.with_peak(peak)
    except ValueError as exc:
        floor = floor.with_peak(None, str(exc))
    result["floor"] = floor.to_dict()
    if floor.peak_gflops is not None:
        say(f"this host's {floor.dtype} matmul peak, the best measured in the stack's image: "
            f"{floor.peak_gflops:,.1f} GFLOP/s ({floor.peak.threads if floor.peak else '?'} threads)")
    for arm, values in result["arms"].items():
        values.update(arm_figures(floor, arm, values, result))
        say(f"  {arm}: {values['prefill_text']}")


def arm_figures(floor, arm: str, values: dict, result: dict) -> dict:
    """One arm's line and figures: the cold arm's prefill rate against the peak; a hit arm's TTFT in its parts (its
    recomputed tokens at the cold arm's rate, the load as LMCache logged it, the rest)."""
    from stackctl.knowledge.hit_time import breakdown_text, hit_breakdown, kv_bytes_per_token

    prompt = result.get("prompt_tokens") or 0
    recomputed = values.get("tokens_recomputed")  # what the server counted; the hit rate only as a fallback
    cached = prompt - round(recomputed) if recomputed is not None else round(prompt * (values["hit_rate"] or 0))
    if cached <= 0 or floor.cost is None:
        rate = floor.rate(prompt, cached, values["ttft_median_s"])
        return {"prefill": rate, "prefill_text": floor.text(rate)}
    cold = result["arms"].get("recompute", {}).get("prefill") or {}
    loads = values.get("loads")
    load = (statistics.median(b for b, _ in loads), statistics.median(ms for _, ms in loads)) if loads else None
    parts = hit_breakdown(floor.cost, prompt, cached, values["ttft_median_s"],
                          recompute_gflops=None if cold.get("error") else cold.get("gflops"),
                          kv_bytes_token=kv_bytes_per_token(floor.cost, floor.dtype), moved=arm != "hbm",
                          load=load, memcpy_gb_s=floor.peak.memcpy_gb_s if floor.peak else None)
    return {"prefill": None, "breakdown": parts, "prefill_text": breakdown_text(parts)}


def connector_figures(spec, out_dir: Path) -> tuple[dict, Any]:
    """The connector's own benchmark module run in the stack's container; its figures (written to connector.json)
    and the model shape they are for."""
    from stackctl.engine import docker_adapter as dk
    from stackctl.knowledge.model_table import resolve_shape
    from stackctl.state.store import write_atomically

    if not spec.cpu_connector_enabled:
        raise StackctlError(f"{spec.source}: bench --connector needs stackctl's CPU connector (platform cpu, "
                            "cache.enabled and cache.cpu_connector on)")
    resolved = resolve_shape(spec.recipe.model.path)
    if resolved is None:
        raise StackctlError(f"{spec.source}: model.path: shape of {spec.recipe.model.path} unknown (fix: a model "
                            "stackctl's model table knows, or a local directory with config.json)")
    shape = resolved[0]
    container = dk.find_container(dk.client(), spec.container_name)
    if container is None or container.status != "running":
        raise StackctlError(f"{spec.name}: not running (fix: stackctl up {spec.source})")
    command = ["python", "-m", "stackctl_lmcache_cpu.bench", "--layers", str(shape.num_hidden_layers),
               "--kv-heads", str(shape.num_key_value_heads), "--head-size", str(shape.head_dim),
               "--chunk", str(spec.recipe.cache.chunk_size)]
    exit_code, out, err = dk.exec_in(container, command)
    if exit_code != 0:
        raise StackctlError(f"bench --connector: {' '.join(command)} exited {exit_code}: {err.strip()[-400:]}")
    figures = json.loads(out.strip().splitlines()[-1])
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(out_dir / "connector.json", json.dumps(figures, indent=2))
    return figures, shape
