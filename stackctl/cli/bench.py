"""`stackctl bench`: what the cache buys, measured against real stacks (hit rates from the server's /metrics)."""

from __future__ import annotations

import click


@click.command()
@click.argument("recipe")
@click.option("--arms", help="More recipes to compare with RECIPE (comma-separated); each is brought up in turn.")
@click.option("--probe", "probe_only", is_flag=True,
              help="Only the probe on RECIPE's stack: the same prompts recomputed, from vLLM's prefix cache (HBM) "
                   "and, with LMCache, from LMCache; TTFT medians, the server's hit rates and the prompt tokens "
                   "each arm still recomputed, side by side.")
@click.option("--min-speedup", type=float,
              help="With --probe: exit 1 unless recompute TTFT / cache TTFT (medians; the LMCache arm when LMCache "
                   "is on, else HBM) >= this. Gate on it only where prefill dominates TTFT (not a tiny model).")
@click.option("--min-hit-rate", type=float,
              help="With --probe: exit 1 unless the cache arm's hit rate (server /metrics) >= this.")
@click.option("--tokens", type=click.IntRange(min=16), default=1200, show_default=True, help="Probe prompt length.")
@click.option("--runs", type=click.IntRange(min=1, max=50), default=5, show_default=True,
              help="Probe prompts (each asked once per arm); medians over these.")
@click.option("--connector", "connector_only", is_flag=True,
              help="Only the CPU connector's own copy throughput inside RECIPE's running container (store and load "
                   "GB/s for the recipe's model shape) beside one core's memcpy, measured in the same run.")
@click.option("--trace", type=click.Path(exists=True, dir_okay=False), help="kv-cache-tester style trace JSON.")
@click.option("--users", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--turns", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--system-tokens", type=click.IntRange(min=0), default=512, show_default=True)
@click.option("--turn-tokens", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--output-tokens", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--max-requests", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--max-seconds", type=click.FloatRange(min=1), default=180, show_default=True)
@click.option("-o", "--output", "out_dir", default="bench-results", show_default=True, type=click.Path(file_okay=False))
@click.pass_context
def bench(ctx, recipe, arms, probe_only, min_speedup, min_hit_rate, tokens, runs, connector_only, trace, users, turns, system_tokens,
          turn_tokens, output_tokens, max_requests, max_seconds, out_dir):
    """Run a prefix-reuse workload shaped like agentic coding sessions against RECIPE's stack (and each --arms
    recipe), and report TTFT/E2E percentiles, throughput and the server's hit rate as JSON, Markdown and a PNG."""
    from pathlib import Path

    from stackctl import (
        bench as workload,  # the workload driver (the command itself is `bench`)
    )
    from stackctl.cli.common import check_rules, load
    from stackctl.errors import StackctlError

    main = load(recipe)
    if probe_only:
        _probe(main, tokens, runs, min_speedup, min_hit_rate, Path(out_dir))
        return
    if connector_only:
        _connector(main, Path(out_dir))
        return
    workload.require_plotting()
    arm_recipes = [main] + [load(name.strip()) for name in (arms or "").split(",") if name.strip()]
    for arm in arm_recipes:  # arms are brought up: as `up` does, no stack with rule errors
        check_rules(arm, arm.source, "bench")
    if trace:
        sessions = workload.trace_sessions(Path(trace))
    else:
        sessions = workload.agentic_sessions(users, turns, system_tokens, turn_tokens, output_tokens)
    results = []
    for arm in arm_recipes:
        result = _run_arm(arm, sessions, tokens, max_requests, max_seconds)
        results.append(result)
        if result.server_lost:
            # Keep what was measured (this arm's completed requests, earlier arms whole), then stop cleanly.
            paths = workload.write_reports(results, Path(out_dir))
            raise StackctlError(
                f"bench: {arm.stack.name}: the server stopped answering during the run ({len(result.requests)} "
                f"request(s) completed, {result.errors} failed: {result.first_error}); partial results in "
                f"{paths['json']} (why it stopped: stackctl status {arm.source}; its log: stackctl logs "
                f"{arm.source})")
    paths = workload.write_reports(results, Path(out_dir))
    click.echo(paths["markdown"].read_text(), nl=False)
    click.echo(f"wrote {paths['json']}, {paths['markdown']}, {paths['png']}", err=True)


def _probe(recipe, tokens, runs, min_speedup, min_hit_rate, out_dir) -> None:
    """The arms table, probe.json and probe.png; exit 1 naming what missed a gate."""
    import json

    from stackctl import bench as workload
    from stackctl.errors import StackctlError
    from stackctl.state.store import write_atomically

    workload.require_plotting()
    url = _running_url(recipe)
    result = workload.probe(url, recipe.served_name, tokens, runs, lmcache=recipe.cache.enabled)
    click.echo(workload.probe_table(result), nl=False)
    _prefill_floor(recipe, result)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(out_dir / "probe.json", json.dumps(result, indent=2))
    workload.plot_probe(result, out_dir / "probe.png", recipe.stack.name)
    ratio, arm = result["speedup"], workload.ARM_TITLES[result["cache_arm"]]
    computed = result["arms"][result["cache_arm"]]["tokens_recomputed"]
    tail = "" if computed is None else f", {computed:.0f} of {result['prompt_tokens']} prompt tokens recomputed"
    click.echo(f"{arm}: {ratio:.1f}x faster than recompute, hit rate {_pct(result['hit_rate'])} (server /metrics)"
               f"{tail}; wrote {out_dir / 'probe.json'}, {out_dir / 'probe.png'}")
    failed = []
    if min_speedup is not None and (ratio or 0) < min_speedup:
        failed.append(f"speedup {ratio:.2f}x < {min_speedup}x")
    if min_hit_rate is not None and (result["hit_rate"] or 0) < min_hit_rate:
        failed.append(f"hit rate {_pct(result['hit_rate'])} < {min_hit_rate:.0%}")
    if failed:
        raise StackctlError(f"bench: {arm} misses the gate: " + "; ".join(failed))


def _connector(recipe, out_dir) -> None:
    """Run the connector's own benchmark module in the stack's container; print its figures, write connector.json."""
    import json

    from stackctl.bundle import stackspec
    from stackctl.engine import docker_adapter as dk
    from stackctl.errors import StackctlError
    from stackctl.knowledge.model_table import resolve_shape
    from stackctl.state.store import write_atomically

    if not stackspec.cpu_connector_enabled(recipe):
        raise StackctlError(f"{recipe.source}: bench --connector needs stackctl's CPU connector (platform cpu, "
                            "cache.enabled and cache.cpu_connector on)")
    resolved = resolve_shape(recipe.model.path)
    if resolved is None:
        raise StackctlError(f"{recipe.source}: model.path: shape of {recipe.model.path} unknown (fix: a model "
                            "stackctl's model table knows, or a local directory with config.json)")
    shape = resolved[0]
    container = dk.find_container(dk.client(), stackspec.container_name(recipe))
    if container is None or container.status != "running":
        raise StackctlError(f"{recipe.stack.name}: not running (fix: stackctl up {recipe.source})")
    command = ["python", "-m", "stackctl_lmcache_cpu.bench", "--layers", str(shape.num_hidden_layers),
               "--kv-heads", str(shape.num_key_value_heads), "--head-size", str(shape.head_dim),
               "--chunk", str(recipe.cache.chunk_size)]
    exit_code, out, err = dk.exec_in(container, command)
    if exit_code != 0:
        raise StackctlError(f"bench --connector: {' '.join(command)} exited {exit_code}: {err.strip()[-400:]}")
    figures = json.loads(out.strip().splitlines()[-1])
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(out_dir / "connector.json", json.dumps(figures, indent=2))
    click.echo(f"CPU connector ({figures['isa']}, {figures['threads']} thread, {figures['bytes'] / 1e6:.0f} MB of "
               f"{shape.name} KV per run): store {figures['store_gb_s']:.2f} GB/s "
               f"({figures['store_over_memcpy']:.2f}x memcpy), load {figures['load_gb_s']:.2f} GB/s "
               f"({figures['load_over_memcpy']:.2f}x memcpy); memcpy on one core {figures['memcpy_gb_s']:.2f} GB/s")


def _running_url(recipe) -> str:
    from stackctl.errors import StackctlError
    from stackctl.httpclient import get_status
    from stackctl.lifecycle.preflight import client_host

    url = f"http://{client_host(recipe.serve.host)}:{recipe.serve.port}"
    if get_status(f"{url}/health", timeout=5) != 200:
        raise StackctlError(f"{recipe.stack.name}: no healthy server at {url} (fix: stackctl up {recipe.source})")
    return url


def _run_arm(recipe, sessions, tokens, max_requests, max_seconds):
    """Use the arm's stack if it runs this recipe already; otherwise bring it up, measure, and take it down."""
    from stackctl import bench as workload
    from stackctl.httpclient import get_status
    from stackctl.lifecycle.down import down
    from stackctl.engine.health import save_failure_log, stop_reason
    from stackctl.lifecycle.preflight import client_host
    from stackctl.lifecycle.status import status_rows
    from stackctl.lifecycle.up import up

    url = f"http://{client_host(recipe.serve.host)}:{recipe.serve.port}"
    rows = [r for r in status_rows(recipe) if r["recipe_current"] and r["health"] == "healthy"]
    started_here = False
    if not rows:
        if get_status(f"{url}/health", timeout=2) is not None:
            from stackctl.errors import StackctlError

            raise StackctlError(f"{recipe.stack.name}: port {recipe.serve.port} is taken by another server "
                                "(fix: stop it, or give the arms different serve.port values)")
        click.echo(f"bench: bringing up {recipe.stack.name}", err=True)
        up(recipe, say=lambda m: click.echo(m, err=True))
        started_here = True
    try:
        click.echo(f"bench: {recipe.stack.name}: probe, then workload", err=True)
        probe = workload.probe(url, recipe.served_name, tokens, runs=1, lmcache=recipe.cache.enabled)
        result = workload.run_workload(url, recipe.served_name, sessions, recipe.stack.name, max_requests, max_seconds)
        result.probe = probe
        return result
    finally:
        if started_here:
            container = _stack_container(recipe)
            if container is not None and container.status != "running":
                kept = save_failure_log(recipe, container)
                click.echo(f"bench: {recipe.stack.name} stopped ({stop_reason(container.attrs['State'])}); "
                           f"its log: {kept}", err=True)
            down(recipe, say=lambda m: click.echo(m, err=True))


def _prefill_floor(recipe, result: dict) -> None:
    """Each arm's prefill rate beside this host's matmul peak for the served dtype, measured now (after the arms, so
    the probe and the server do not share the CPUs): how far from the physical floor the cold figure is. Added to
    the probe's result and printed."""
    from stackctl.bundle import stackspec
    from stackctl.engine import docker_adapter as dk
    from stackctl.host import PinningError, discover, pinning_for
    from stackctl.host.matmul import measure
    from stackctl.host.placement import placement
    from stackctl.host.prefill import model_floor

    container = _stack_container(recipe)
    if container is None:
        return
    facts = discover()
    environment = stackspec.environment(recipe)
    try:
        cpuset = placement(pinning_for(recipe, facts)).cpuset
    except PinningError:
        cpuset = {}
    floor = model_floor(container, recipe.model.path)
    try:
        peak = measure(dk.client(), container.image, environment=environment, cpuset=cpuset,
                       isa=facts.isa.for_environment(environment).to_dict(), stack=recipe.stack.name,
                       dtypes=tuple(sorted({"float32", floor.dtype or "bfloat16"})), fresh=True)
        floor = floor.with_peak(peak)
    except ValueError as exc:
        floor = floor.with_peak(None, str(exc))
    result["floor"] = floor.to_dict()
    prompt = result.get("prompt_tokens") or 0
    if floor.peak_gflops is not None:
        click.echo(f"this host's {floor.dtype} matmul peak, measured now in the stack's image: "
                   f"{floor.peak_gflops:,.1f} GFLOP/s ({floor.peak.threads if floor.peak else '?'} threads)")
    for arm, values in result["arms"].items():
        recomputed = values.get("tokens_recomputed")  # what the server counted; the hit rate only as a fallback
        cached = prompt - round(recomputed) if recomputed is not None else round(prompt * (values["hit_rate"] or 0))
        rate = floor.rate(prompt, cached, values["ttft_median_s"])
        values["prefill"] = rate
        click.echo(f"  {arm}: {floor.text(rate)}")


def _stack_container(recipe):
    from stackctl.bundle.stackspec import container_name
    from stackctl.engine import docker_adapter as dk

    container = dk.find_container(dk.client(), container_name(recipe))
    return dk.refresh(container) if container is not None else None


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"
