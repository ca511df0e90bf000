"""`stackctl bench`: what the cache buys, measured against real stacks (hit rates from the server's /metrics)."""

from __future__ import annotations

import click


@click.command()
@click.argument("recipe")
@click.option("--arms", help="More recipes to compare with RECIPE (comma-separated); each is brought up in turn.")
@click.option("--probe", "probe_only", is_flag=True, help="Only the cold/warm single-prompt probe on RECIPE's stack.")
@click.option("--min-speedup", type=float, help="With --probe: exit 1 unless cold TTFT / warm TTFT >= this.")
@click.option("--min-hit-rate", type=float, help="With --probe: exit 1 unless the server's hit rate >= this.")
@click.option("--tokens", type=click.IntRange(min=16), default=1200, show_default=True, help="Probe prompt length.")
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
def bench(ctx, recipe, arms, probe_only, min_speedup, min_hit_rate, tokens, trace, users, turns, system_tokens,
          turn_tokens, output_tokens, max_requests, max_seconds, out_dir):
    """Run a prefix-reuse workload shaped like agentic coding sessions against RECIPE's stack (and each --arms
    recipe), and report TTFT/E2E percentiles, throughput and the server's hit rate as JSON, Markdown and a PNG."""
    from pathlib import Path

    from stackctl import bench as workload  # the workload driver (the command itself is `bench`)
    from stackctl.cli.common import check_rules, load
    from stackctl.errors import StackctlError

    main = load(recipe)
    if probe_only:
        result = workload.probe(_running_url(main), main.served_name, tokens)
        ratio = result["speedup"]
        click.echo(f"cold TTFT {result['cold_ttft_s'] * 1000:.1f} ms, warm TTFT {result['warm_ttft_s'] * 1000:.1f} "
                   f"ms, warm/cold {result['warm_over_cold']:.3f} ({ratio:.1f}x faster), "
                   f"hit rate {_pct(result['hit_rate'])} (server /metrics), {result['prompt_tokens']} prompt tokens")
        failed = []
        if min_speedup is not None and (ratio or 0) < min_speedup:
            failed.append(f"speedup {ratio:.2f}x < {min_speedup}x")
        if min_hit_rate is not None and (result["hit_rate"] or 0) < min_hit_rate:
            failed.append(f"hit rate {_pct(result['hit_rate'])} < {min_hit_rate:.0%}")
        if failed:
            raise StackctlError("bench: the warm path is not fast enough: " + "; ".join(failed))
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


def _running_url(recipe) -> str:
    from stackctl.errors import StackctlError
    from stackctl.httpclient import get_status
    from stackctl.preflight import client_host

    url = f"http://{client_host(recipe.serve.host)}:{recipe.serve.port}"
    if get_status(f"{url}/health", timeout=5) != 200:
        raise StackctlError(f"{recipe.stack.name}: no healthy server at {url} (fix: stackctl up {recipe.source})")
    return url


def _run_arm(recipe, sessions, tokens, max_requests, max_seconds):
    """Use the arm's stack if it runs this recipe already; otherwise bring it up, measure, and take it down."""
    from stackctl import bench as workload
    from stackctl import runner
    from stackctl.httpclient import get_status
    from stackctl.preflight import client_host

    url = f"http://{client_host(recipe.serve.host)}:{recipe.serve.port}"
    rows = [r for r in runner.status_rows(recipe) if r["recipe_current"] and r["health"] == "healthy"]
    started_here = False
    if not rows:
        if get_status(f"{url}/health", timeout=2) is not None:
            from stackctl.errors import StackctlError

            raise StackctlError(f"{recipe.stack.name}: port {recipe.serve.port} is taken by another server "
                                "(fix: stop it, or give the arms different serve.port values)")
        click.echo(f"bench: bringing up {recipe.stack.name}", err=True)
        runner.up(recipe, say=lambda m: click.echo(m, err=True))
        started_here = True
    try:
        click.echo(f"bench: {recipe.stack.name}: probe, then workload", err=True)
        probe = workload.probe(url, recipe.served_name, tokens)
        result = workload.run_workload(url, recipe.served_name, sessions, recipe.stack.name, max_requests, max_seconds)
        result.probe = probe
        return result
    finally:
        if started_here:
            container = _stack_container(recipe)
            if container is not None and container.status != "running":
                kept = runner.save_failure_log(recipe, container)
                click.echo(f"bench: {recipe.stack.name} stopped ({runner.stop_reason(container.attrs['State'])}); "
                           f"its log: {kept}", err=True)
            runner.down(recipe, say=lambda m: click.echo(m, err=True))


def _stack_container(recipe):
    from stackctl.engine import docker_adapter as dk
    from stackctl.stackspec import container_name

    container = dk.find_container(dk.client(), container_name(recipe))
    if container is not None:
        container.reload()
    return container


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"
