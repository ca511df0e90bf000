"""`bench --sweep`: the same agentic workload at rising load, once per arm, and where the offload arm overtakes HBM.

Each arm is a second server from the stack's image (doctor/clients/second_server.py: its own port and container, removed on
every way out; the stack itself is never touched), made from the stack's recipe by the arm's change, with a KV
cache small enough that the upper half of the sweep overflows it. The arms' servers run side by side and take the
load points in turn, in ascending order (one arm measured at a time, so they never share the CPUs; background load
on the host falls on every arm alike); every point has prompts of its own, so no point is served from an earlier
point's cache. Figures are printed and written, never gated.

An arm is one record in SWEEP_ARMS: an offload engine the recipe gains is one more record.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from stackctl.bench import crossover as math
from stackctl.bench.server import cache_counters, kv_capacity
from stackctl.bench.sweep_lock import sweep_lock
from stackctl.bench.trace import Trace, describe, fit, replay_sessions
from stackctl.bench.workload import conversations, run_workload, words
from stackctl.doctor.parsers.omp_log import RESERVE_ENV, parse_binding
from stackctl.errors import StackctlError
from stackctl.httpclient import get_text, stream_completion
from stackctl.knowledge.kinds import kind_of, platform_of

Say = Callable[[str], None]
KV_FLAG = "--kv-cache-memory-bytes"
KV_ENV = "VLLM_CPU_KVCACHE_SPACE"  # vLLM applies it over the flag on cpu (vllm/platforms/cpu.py:324-327)


def _hbm_only(recipe) -> None:
    recipe.cache.enabled = False
    recipe.cache.tiers = []  # nor their mounts and credentials


def _lmcache_first_tier(recipe) -> None:
    """LMCache with its first tier only (the CPU tier): what answers first, without writing the sweep's KV to the
    recipe's disks and shared stores."""
    recipe.cache.tiers = [tier for tier in recipe.cache.tiers if not kind_of(tier).lower]


def _has_lmcache(recipe) -> bool:
    return bool(recipe.cache.enabled and any(not kind_of(tier).lower for tier in recipe.cache.tiers))


@dataclass(frozen=True)
class SweepArm:
    """One way of serving the sweep: its name (--sweep-arms), its title, how the stack's recipe becomes it, whether
    the stack's image can serve it, and whether it is the baseline the others are compared with."""

    name: str
    title: str
    change: Callable[[object], None]
    serves: Callable[[object], bool]
    baseline: bool = False


SWEEP_ARMS = (
    SweepArm("hbm", "HBM only (vLLM prefix cache, no offload)", _hbm_only, lambda recipe: True, baseline=True),
    SweepArm("lmcache", "LMCache (CPU tier)", _lmcache_first_tier, _has_lmcache),
)


def arms_named(names: list[str], recipe) -> list[SweepArm]:
    """The arms asked for, the baseline first; refused when one is unknown or the stack's image cannot serve it."""
    known = {arm.name: arm for arm in SWEEP_ARMS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise StackctlError(f"bench --sweep-arms: unknown arm {', '.join(unknown)} (fix: one of "
                            f"{', '.join(known)})")
    chosen = [known[name] for name in dict.fromkeys(names)]
    for arm in chosen:
        if not arm.serves(recipe):
            raise StackctlError(f"{recipe.source}: cache: the {arm.name} arm needs LMCache with a CPU tier in the "
                                f"recipe (fix: cache.enabled = true and a [[cache.tiers]] kind = \"cpu\", or "
                                f"--sweep-arms without {arm.name})")
    if not any(arm.baseline for arm in chosen):
        raise StackctlError("bench --sweep-arms: the sweep compares with the hbm arm (fix: include hbm)")
    return sorted(chosen, key=lambda arm: not arm.baseline)


def arm_recipe(recipe, arm: SweepArm, kv_bytes: int, max_model_len: int):
    """The stack's recipe as the arm serves it: the arm's change, the sweep's KV cache size (replacing the
    recipe's flag and variable) and a max_model_len the sweep's contexts need (vLLM refuses to start when the KV
    cache cannot hold one request of max_model_len)."""
    served = copy.deepcopy(recipe)
    arm.change(served)
    args, skip = [], False
    for value in served.serve.extra_args:
        if skip:
            skip = False
            continue
        if value == KV_FLAG:
            skip = True
            continue
        if not value.startswith(KV_FLAG + "="):
            args.append(value)
    served.serve.extra_args = args + [KV_FLAG, str(kv_bytes)]
    served.serve.env = {k: v for k, v in served.serve.env.items() if k != KV_ENV}
    if platform_of(served).cpu_computes:
        # vLLM-CPU reserves one core per worker for its scheduler and one more with a KV connector, and none at all
        # where the host has no more cores than that (doctor: server.omp-binding): on a small host the offload arm
        # would compute on more cores than HBM-only. Every arm reserves what a server without a connector does.
        served.serve.env.setdefault(RESERVE_ENV, str(served.model.tensor_parallel))
    served.model.max_model_len = max_model_len
    return served


def default_kv_tokens(users: list[int], context_tokens: int, floor_tokens: int) -> int:
    """A KV cache the lower half of the loads fits in and the upper half overflows: halfway between the working
    sets of the two middle loads (and at least floor_tokens, what vLLM needs to start)."""
    ordered = sorted(users)
    upper = ordered[len(ordered) // 2]
    lower = ordered[len(ordered) // 2 - 1] if len(ordered) > 1 else upper / 2
    return max(int((lower + upper) / 2 * context_tokens), floor_tokens)


def model_max_len(context_tokens: int, output_tokens: int, block: int = 128) -> int:
    """The longest request of the sweep, rounded up to whole KV blocks."""
    need = context_tokens + output_tokens + 8
    return -(-need // block) * block


def stack_image(stack, say: Say) -> tuple[str, dict[str, str]]:
    """The image the arms run (the running stack's, else the built one) and the dtype variable its servers need
    (the running stack's decision, else this host's decision from its CPU flags, as `up` makes it). stack: the
    stack's StackSpec."""
    from stackctl.bundle import render
    from stackctl.doctor.clients.second_server import image_of
    from stackctl.engine import docker_adapter as dk
    from stackctl.host import discover
    from stackctl.host.dtype import DTYPE_ENV, decide_by_flags

    engine = dk.client()
    container = dk.find_container(engine, stack.container_name)
    if container is not None and dk.refresh(container).status == "running":
        decided = {k: v for k, v in dk.container_env(container).items() if k == DTYPE_ENV}
        return image_of(container), decided
    tag = render.image_tag(stack, render.render_files(stack, guard=False))
    if dk.find_image(engine, tag) is None:
        raise StackctlError(f"{stack.name}: image {tag} not built (fix: stackctl build {stack.source})")
    facts = discover()
    decision = decide_by_flags(stack.recipe, facts.isa)
    say(f"bench: dtype {decision.reason}")
    return tag, decision.environment()


@dataclass
class SweepSpec:
    """What to sweep: users per point, contexts, the conversation's shape and the arms' KV cache."""

    users: list[int]
    contexts: list[int]
    turns: int
    output_tokens: int
    think_s: float
    kv_tokens: int | None  # None: default_kv_tokens
    max_seconds: float  # per point and arm
    port_base: int | None = None  # arms on port_base, port_base + 1, ...; None: ports the kernel picks
    trace: Trace | None = None  # a kv-cache-tester trace replayed instead of the built-in conversations


# A trace's timeline is compressed into this share of a point's time, so its last requests are sent in time.
TRACE_TIME_SHARE = 0.5


def run_sweep(stack, arm_names: list[str], spec: SweepSpec, say: Say) -> dict:
    """Every arm through every load point; the crossover per offload arm and context, and plan's prediction.
    stack: the stack's StackSpec; each arm is a second server of a recipe made from its recipe."""
    from stackctl.doctor.clients.second_server import Planned, second_servers
    from stackctl.host.dtype import DTYPE_ENV
    from stackctl.plan import plan_recipe

    recipe = stack.recipe
    arms = arms_named(arm_names, recipe)
    users = sorted(set(spec.users))
    contexts = sorted(set(spec.contexts))
    longest = model_max_len(max(contexts), spec.output_tokens)
    with ExitStack() as running:
        # Held from before the first arm's setup to the last point: another sweep of this stack would replace its
        # arms (same names) and empty their caches.
        running.enter_context(sweep_lock(recipe.stack.name, say))
        image, dtype_env = stack_image(stack, say)
        # Sized for the dtype the arms compute in: float32 where the CPU has no native bf16, twice the KV bytes.
        footprint = plan_recipe(recipe, users=1, context_tokens=max(contexts), serve_dtype=dtype_env.get(DTYPE_ENV))
        per_token = footprint.bytes_per_token_all_gpus
        kv_tokens = spec.kv_tokens or default_kv_tokens(users, contexts[len(contexts) // 2], longest)
        if kv_tokens < longest:
            raise StackctlError(f"bench --kv-tokens {kv_tokens}: vLLM needs room for one request of {longest} tokens "
                                f"(fix: --kv-tokens {longest} or more, or a shorter --sweep-context)")
        kv_bytes = kv_tokens * per_token
        if spec.trace is not None:
            for context in contexts:  # refused before any arm starts when the trace cannot fit a context
                used = fit(spec.trace, context, spec.max_seconds * TRACE_TIME_SHARE)
                say(f"bench: {describe(spec.trace, used, context)}")
        result: dict = {"stack": recipe.stack.name, "model": recipe.served_name, "users": users, "contexts": contexts,
                        "turns": spec.turns, "output_tokens": spec.output_tokens, "think_s": spec.think_s,
                        "kv_tokens": kv_tokens, "kv_cache_bytes": kv_bytes, "bytes_per_token_planned": per_token,
                        "arms": [], "points": []}
        if spec.trace is not None:
            fits = {c: fit(spec.trace, c, spec.max_seconds * TRACE_TIME_SHARE) for c in contexts}
            result["trace"] = {"name": spec.trace.name, "requests": len(spec.trace.requests),
                               "block_size": spec.trace.block_size,
                               "fits": {str(c): vars(used) for c, used in fits.items()},
                               "replay": [describe(spec.trace, used, c) for c, used in fits.items()]}
        planned = []
        for index, arm in enumerate(arms):
            served = arm_recipe(recipe, arm, kv_bytes, longest)
            port = spec.port_base + index if spec.port_base else None
            say(f"bench: sweep arm {arm.name}: {arm.title}, KV cache {kv_bytes:,} bytes (~{kv_tokens:,} tokens)")
            planned.append(Planned(stack.with_recipe(served), f"sweep-{arm.name}", dtype_env, port))
        # The arms' servers start together (a start is mostly each server's own work), and are measured in turn.
        started = running.enter_context(second_servers(image, planned, recipe.checks.startup_timeout_s, say))
        servers = []
        for arm, server in zip(arms, started):
            binding = parse_binding(server.log())
            result["arms"].append({"name": arm.name, "title": arm.title, "baseline": arm.baseline,
                                   "server_kv": kv_capacity(get_text(f"{server.base_url}/metrics")),
                                   "omp_binding": binding.describe() if binding else None})
            # Untimed: a server's first prefill pays one-time costs (kernel selection, allocations); the same
            # prompt again under a cache_salt misses vLLM's prefix cache, so an offload arm's first load is paid too.
            warm = words(min(longest - 64, 512), 17)
            stream_completion(server.base_url, server.model, warm, max_tokens=1)
            stream_completion(server.base_url, server.model, warm, max_tokens=1, extra={"cache_salt": "warm-up"})
            servers.append((arm, server))
        # Point by point, the arms in turn: whatever else loads the host meanwhile loads every arm alike.
        for context in contexts:
            for load in users:
                for arm, server in servers:
                    figures = _point(server.base_url, server.model, load, context, spec)
                    figures.update(arm=arm.name, users=load, context_tokens=context,
                                   working_set_tokens=load * context)
                    result["points"].append(figures)
                    say(f"bench: {arm.name} {load} users x {context:,} tokens: TTFT p50 "
                        f"{_seconds(figures['ttft_p50_s'])}, p95 {_seconds(figures['ttft_p95_s'])}, "
                        f"{figures['tokens_per_s']:.0f} tokens/s, {figures['completed']} requests")
    _judge(result, recipe, arms, kv_bytes, dtype_env.get(DTYPE_ENV))
    return result


def point_sessions(load: int, context: int, spec: SweepSpec) -> list:
    """A load point's requests, prompts of its own: `load` agentic users of the built-in shape, or `load` replays
    of the trace fitted to `context` tokens and the point's time."""
    seed = context * 1000 + load
    if spec.trace is not None:
        used = fit(spec.trace, context, spec.max_seconds * TRACE_TIME_SHARE)
        return replay_sessions(spec.trace, load, used, seed)
    return conversations(load, spec.turns, context, spec.output_tokens, spec.think_s, seed=seed)


def _point(url: str, model: str, load: int, context: int, spec: SweepSpec) -> dict:
    """One load point on one arm's server: the counters read around the workload."""
    sessions = point_sessions(load, context, spec)
    before = cache_counters(url)
    started = time.perf_counter()
    run = run_workload(url, model, sessions, f"{load}x{context}", max_requests=sum(map(len, sessions)),
                       max_seconds=spec.max_seconds)
    wall = time.perf_counter() - started
    if run.server_lost:
        raise StackctlError(f"bench --sweep: the arm's server stopped answering at {load} users x {context} tokens "
                            f"({run.first_error})")
    figures = math.point_figures(run.requests, run.errors, wall, before, cache_counters(url))
    figures["first_error"] = run.first_error
    return figures


def _judge(result: dict, recipe, arms: list[SweepArm], kv_bytes: int, serve_dtype: str | None = None) -> None:
    """The crossover per offload arm and context, plan's regime per point, and the sentence between them (the plan
    for the dtype the arms computed in)."""
    from stackctl.plan import plan_recipe

    baseline = next(arm for arm in arms if arm.baseline)
    server_kv = {a["name"]: a["server_kv"] for a in result["arms"]}
    result["crossovers"], result["plan"] = [], []
    for context in result["contexts"]:
        for load in result["users"]:
            longest = model_max_len(max(result["contexts"]), result["output_tokens"])
            planned = plan_recipe(arm_recipe(recipe, arms[-1], kv_bytes, longest), users=load,
                                  context_tokens=context, serve_dtype=serve_dtype)
            result["plan"].append({"users": load, "context_tokens": context, "regime": planned.regime,
                                   "hbm_tokens": planned.hbm_tokens})
        plan_tokens = next(p["hbm_tokens"] for p in result["plan"] if p["context_tokens"] == context)
        base = _p50s(result, baseline.name, context)
        held = (server_kv.get(baseline.name) or {}).get("tokens")
        for arm in arms:
            if arm.baseline:
                continue
            other = _p50s(result, arm.name, context)
            found = math.crossover(result["users"], base, other)
            found["interval"] = math.crossover_interval(result["users"], _spreads(result, baseline.name, context),
                                                        _spreads(result, arm.name, context))
            top = {p["arm"]: p for p in result["points"]
                   if p["context_tokens"] == context and p["users"] == result["users"][-1]}
            served = None
            if baseline.name in top and arm.name in top:
                served = (_served(top[baseline.name]), _served(top[arm.name]))
            result["crossovers"].append({
                "arm": arm.name, "context_tokens": context, **found,
                "predicted_users": math.predicted_crossover(plan_tokens, context),
                "server_users": math.predicted_crossover(held, context),
                "explanation": math.explain(found, plan_tokens, held, context, result["users"], base, other,
                                            arm.title.split(" (")[0], served)})


def _p50s(result: dict, arm: str, context: int) -> list[float | None]:
    by_load = {p["users"]: p["ttft_p50_s"] for p in result["points"]
               if p["arm"] == arm and p["context_tokens"] == context}
    return [by_load.get(load) for load in result["users"]]


def _spreads(result: dict, arm: str, context: int) -> list[tuple[float, float] | None]:
    """Each load's interval of the arm's median TTFT (low, high), None where a point lacks one."""
    by_load = {p["users"]: p.get("ttft_p50_ci_s") for p in result["points"]
               if p["arm"] == arm and p["context_tokens"] == context}
    return [tuple(by_load[load]) if by_load.get(load) else None for load in result["users"]]


def _served(point: dict) -> float:
    """The share of prompt tokens the server served from any cache at one point."""
    return (point["hbm_hit_rate"] or 0.0) + (point["offload_hit_rate"] or 0.0)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"
