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
@click.option("--min-over-memcpy", type=float,
              help="With --connector: exit 1 unless both store and load reach this share of memcpy's GB/s, measured "
                   "in the same run (a ratio, so the host's speed cancels out; leave margin below the 0.5 target for "
                   "a 2-core host's noise).")
@click.option("--trace", type=click.Path(exists=True, dir_okay=False),
              help="A kv-cache-tester trace (one conversation's JSON) replayed by --users users (with --sweep: by each "
                   "load point's users, fitted to each --sweep-context), its hash_ids as shared prompt blocks.")
@click.option("--users", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--turns", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--system-tokens", type=click.IntRange(min=0), default=512, show_default=True)
@click.option("--turn-tokens", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--output-tokens", type=click.IntRange(min=1), default=16, show_default=True)
@click.option("--max-requests", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--max-seconds", type=click.FloatRange(min=1), default=180, show_default=True)
@click.option("--sweep", "sweep_load", is_flag=True,
              help="Sweep load on RECIPE's image: agentic users (--sweep-users) x contexts (--sweep-context), each arm "
                   "(--sweep-arms) a server of its own with a KV cache the upper half of the loads overflows; p50/p95 "
                   "TTFT, tokens/s and the server's hit rates per point, the load where the offload arm's p50 TTFT "
                   "beats HBM-only by more than 10% (the crossover) beside `stackctl plan`'s prediction; sweep.json, "
                   "sweep.md and sweep.png. Figures only, never a gate.")
@click.option("--sweep-users", default="1,2,4,8", show_default=True, help="Concurrent users per load point.")
@click.option("--sweep-context", default="1536", show_default=True,
              help="Context tokens each user's conversation reaches by its last turn (comma-separated for several).")
@click.option("--sweep-arms", default="hbm,lmcache", show_default=True,
              help="Arms: hbm (vLLM prefix cache, no offload), lmcache (LMCache's CPU tier).")
@click.option("--kv-tokens", type=click.IntRange(min=1),
              help="The arms' KV cache in tokens (default: between the working sets of the two middle loads).")
@click.option("--think-s", type=click.FloatRange(min=0), default=0.5, show_default=True,
              help="With --sweep: each user's pause after an answer.")
@click.option("--port-base", type=click.IntRange(min=1024, max=65000),
              help="With --sweep: the arms' servers on this port and the next (default: ports the kernel picks).")
@click.option("-o", "--output", "out_dir", default="bench-results", show_default=True, type=click.Path(file_okay=False))
@click.pass_context
def bench(ctx, recipe, arms, probe_only, min_speedup, min_hit_rate, tokens, runs, connector_only, min_over_memcpy, trace,
          users, turns, system_tokens, turn_tokens, output_tokens, max_requests, max_seconds, sweep_load, sweep_users, sweep_context, sweep_arms,
          kv_tokens, think_s, port_base, out_dir):
    """Run a prefix-reuse workload shaped like agentic coding sessions against RECIPE's stack (and each --arms
    recipe), and report TTFT/E2E percentiles, throughput and the server's hit rate as JSON, Markdown and a PNG."""
    from pathlib import Path

    from stackctl.bench import report, setups
    from stackctl.bench import workload as workloads
    from stackctl.cli.common import check_rules, load
    from stackctl.errors import StackctlError

    main = load(recipe)
    if probe_only:
        _probe(main, tokens, runs, min_speedup, min_hit_rate, Path(out_dir))
        return
    if connector_only:
        _connector(main, Path(out_dir), min_over_memcpy)
        return
    if sweep_load:
        _sweep(main, sweep_users, sweep_context, sweep_arms, turns, output_tokens, think_s, kv_tokens,
               max_seconds, port_base, Path(out_dir), trace)
        return
    report.require_plotting()
    arm_stacks = [main] + [load(name.strip()) for name in (arms or "").split(",") if name.strip()]
    for arm in arm_stacks:  # arms are brought up: as `up` does, no stack with rule errors
        check_rules(arm, arm.source, "bench")
    if trace:
        from stackctl.bench import trace as traces

        replayed = traces.read_trace(Path(trace))
        context = main.recipe.model.max_model_len or replayed.longest  # scaled only when the recipe caps the context
        used = traces.fit(replayed, context, max_seconds * 0.5)
        _err(f"bench: {traces.describe(replayed, used, context)}")
        sessions = traces.replay_sessions(replayed, users, used, seed=0)
    else:
        sessions = workloads.agentic_sessions(users, turns, system_tokens, turn_tokens, output_tokens)
    results = []
    for arm in arm_stacks:
        result = setups.run_arm(arm, sessions, tokens, max_requests, max_seconds, say=_err)
        results.append(result)
        if result.server_lost:
            # Keep what was measured (this arm's completed requests, earlier arms whole), then stop cleanly.
            paths = report.write_reports(results, Path(out_dir))
            raise StackctlError(
                f"bench: {arm.name}: the server stopped answering during the run ({len(result.requests)} "
                f"request(s) completed, {result.errors} failed: {result.first_error}); partial results in "
                f"{paths['json']} (why it stopped: stackctl status {arm.source}; its log: stackctl logs "
                f"{arm.source})")
    paths = report.write_reports(results, Path(out_dir))
    click.echo(paths["markdown"].read_text(), nl=False)
    click.echo(f"wrote {paths['json']}, {paths['markdown']}, {paths['png']}", err=True)


def _err(message: str) -> None:
    click.echo(message, err=True)


def _probe(stack, tokens, runs, min_speedup, min_hit_rate, out_dir) -> None:
    """The arms table, probe.json and probe.png; exit 1 naming what missed a gate."""
    from stackctl.bench import probe as probes
    from stackctl.bench import setups
    from stackctl.errors import StackctlError

    result = setups.run_probe(stack, tokens, runs, out_dir, say=click.echo)
    ratio, arm = result["speedup"], probes.ARM_TITLES[result["cache_arm"]]
    computed = result["arms"][result["cache_arm"]]["tokens_recomputed"]
    tail = "" if computed is None else f", {computed:.0f} of {result['prompt_tokens']} prompt tokens recomputed"
    click.echo(f"{arm}: {ratio:.1f}x faster than recompute, hit rate {probes.percent(result['hit_rate'])} (server "
               f"/metrics){tail}; wrote {out_dir / 'probe.json'}, {out_dir / 'probe.png'}")
    failed = probes.gate_failures(result, min_speedup, min_hit_rate)
    if failed:
        raise StackctlError(f"bench: {arm} misses the gate: " + "; ".join(failed))


def _connector(stack, out_dir, min_over_memcpy: float | None) -> None:
    """The connector's copy figures in the stack's container, printed; connector.json written; exit 1 naming the
    direction under `min_over_memcpy`."""
    from stackctl.bench import setups
    from stackctl.errors import StackctlError

    figures, shape = setups.connector_figures(stack, out_dir)
    click.echo(f"CPU connector ({figures['isa']}, {figures['threads']} thread, {figures['bytes'] / 1e6:.0f} MB of "
               f"{shape.name} KV per run): store {figures['store_gb_s']:.2f} GB/s "
               f"({figures['store_over_memcpy']:.2f}x memcpy), load {figures['load_gb_s']:.2f} GB/s "
               f"({figures['load_over_memcpy']:.2f}x memcpy); memcpy on one core {figures['memcpy_gb_s']:.2f} GB/s")
    under = [f"{way} {figures[f'{way}_over_memcpy']:.2f}x memcpy < {min_over_memcpy}x" for way in ("store", "load")
             if min_over_memcpy is not None and figures[f"{way}_over_memcpy"] < min_over_memcpy]
    if under:
        raise StackctlError(f"bench --connector: the connector misses the gate: {'; '.join(under)} (fix: python "
                            "benchmarks/cpu_connector.py shows each copy layout against memcpy)")


def _sweep(stack, users, contexts, arm_names, turns, output_tokens, think_s, kv_tokens, max_seconds, port_base,
           out_dir, trace=None) -> None:
    """The sweep's table and crossover printed; sweep.json, sweep.md and sweep.png written."""
    from pathlib import Path

    from stackctl.bench import sweep, sweep_report
    from stackctl.bench.report import require_plotting
    from stackctl.bench.trace import read_trace
    from stackctl.cli.common import check_rules

    require_plotting()
    check_rules(stack, stack.source, "bench")
    spec = sweep.SweepSpec(users=_counts("--sweep-users", users), contexts=_counts("--sweep-context", contexts),
                           turns=turns, output_tokens=output_tokens, think_s=think_s, kv_tokens=kv_tokens,
                           max_seconds=max_seconds, port_base=port_base,
                           trace=read_trace(Path(trace)) if trace else None)
    names = [name.strip() for name in arm_names.split(",") if name.strip()]
    result = sweep.run_sweep(stack, names, spec, say=_err)
    paths = sweep_report.write(result, out_dir)
    click.echo(paths["markdown"].read_text(), nl=False)
    click.echo(f"wrote {paths['json']}, {paths['markdown']}, {paths['png']}", err=True)


def _counts(option: str, text: str) -> list[int]:
    """A comma-separated list of positive integers, or a usage error naming the option."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r}: comma-separated positive integers (e.g. 1,2,4,8)", param_hint=option)
    return values
