"""The sweep's arithmetic, pure: one load point's figures from its requests and the server's counters, the crossover
load (the smallest load at which an offload arm's p50 TTFT beats the HBM-only arm's by more than TIE, interpolated
between the points around it) and its interval from the spread of both arms' TTFT, `stackctl plan`'s prediction for
the same loads, and the sentence that explains a difference from the figures themselves."""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

from stackctl.bench.workload import percentile


def point_figures(requests: list[dict], errors: int, wall_s: float, before: dict, after: dict) -> dict:
    """One arm at one load point: TTFT p50/p95 over its requests, its spread (p25-p75) and an interval of its median,
    throughput (prompt and generated tokens per second of wall time) and the hit rates the server counted between
    the two counter readings: its own prefix cache (HBM) and the connector's (LMCache's hit tokens; vLLM's external
    prefix cache counters)."""
    ttft = sorted(r["ttft_s"] for r in requests)
    tokens_in = sum(r["prompt_tokens"] for r in requests)
    tokens_out = sum(r["completion_tokens"] for r in requests)
    queries = after["queries"] - before["queries"]
    hbm_hits = after["hits"] - before["hits"]
    offload_hits = after["external_hits"] - before["external_hits"]
    wall = wall_s or 1e-9
    return {
        "completed": len(requests), "errors": errors, "wall_s": wall_s,
        "ttft_p50_s": percentile(ttft, 50), "ttft_p95_s": percentile(ttft, 95),
        "ttft_p25_s": percentile(ttft, 25), "ttft_p75_s": percentile(ttft, 75),
        "ttft_p50_ci_s": median_interval(ttft),
        "tokens_per_s": (tokens_in + tokens_out) / wall, "output_tokens_per_s": tokens_out / wall,
        "prompt_tokens": tokens_in, "queried_tokens": queries,
        "hbm_hit_tokens": hbm_hits, "offload_hit_tokens": offload_hits,
        "hbm_hit_rate": hbm_hits / queries if queries > 0 else None,
        "offload_hit_rate": offload_hits / queries if queries > 0 else None,
    }


# A p50 within this share of HBM-only's is a tie, not a win: a sweep point holds 3-24 requests, and two arms with no
# offload hit at all (one user, nothing overflowing) differed by up to 4% between runs on an idle 2-core host.
TIE = 0.10


def crossover(loads: Sequence[float], baseline: Sequence[float | None], arm: Sequence[float | None]) -> dict:
    """The smallest load at which `arm`'s p50 TTFT is below `baseline`'s by more than TIE, over loads in ascending
    order.

    Between the last point where the arm does not win and the first where it does, the load is interpolated
    linearly on the arm's p50 less (1 - TIE) x the baseline's (where that crosses zero); `between` is that pair of
    loads, as far as the points can tell. `kind` says what was found: "interpolated", "below-range" (winning already
    at the smallest load: the crossover is at or below it) or "none" (never winning in the range). Points missing
    either figure are left out."""
    pairs = [(x, a - b * (1 - TIE)) for x, b, a in zip(loads, baseline, arm) if a is not None and b is not None]
    previous = None
    for load, gap in pairs:
        if gap < 0:
            if previous is None:
                return {"kind": "below-range", "load": load, "between": [0, load]}
            x0, g0 = previous
            return {"kind": "interpolated", "load": x0 + (load - x0) * g0 / (g0 - gap), "between": [x0, load]}
        previous = (load, gap)
    return {"kind": "none", "load": None, "between": [pairs[-1][0], None] if pairs else None}


MEDIAN_CONFIDENCE = 0.90


def median_interval(ordered: Sequence[float], confidence: float = MEDIAN_CONFIDENCE) -> list[float] | None:
    """A distribution-free interval for the median of sorted ORDERED: the order statistics x(j) and x(n+1-j) with
    the largest j whose binomial tail P(Bin(n, 1/2) < j) stays within (1 - confidence) / 2 on each side (8
    requests: x(2)..x(7), 93%); the whole range when n is too small for that. None without requests."""
    n = len(ordered)
    if n == 0:
        return None
    tail, j = 0.0, 0
    while j < n // 2:
        tail += comb(n, j) / 2 ** n
        if tail > (1 - confidence) / 2:
            break
        j += 1
    j = max(j, 1)
    return [ordered[j - 1], ordered[n - j]]


def crossover_interval(loads: Sequence[float], baseline_spread: Sequence[tuple[float, float] | None],
                       arm_spread: Sequence[tuple[float, float] | None]) -> dict:
    """Where the crossover can lie given each point's interval of its median TTFT (low, high per load): from the
    earliest load the arm could win (its low against the baseline's high) to the latest it surely wins (its high
    against the baseline's low). `low`/`high` are loads; `low` None means at or below the smallest load, `high`
    None beyond the largest (the arm's high never beats the baseline's low in range). `kind` "none" when even the
    arm's low never wins."""
    def end(spreads, index):  # one end of each interval; crossover() leaves out a point missing either arm's
        return [spread[index] if spread else None for spread in spreads]

    earliest = crossover(loads, end(baseline_spread, 1), end(arm_spread, 0))
    latest = crossover(loads, end(baseline_spread, 0), end(arm_spread, 1))
    if earliest["kind"] == "none":
        return {"kind": "none", "low": None, "high": None}
    low = None if earliest["kind"] == "below-range" else earliest["load"]
    return {"kind": "interval", "low": low, "high": latest["load"] if latest["kind"] != "none" else None}


def crossover_text(found: dict, unit: str = "users") -> str:
    if found["kind"] == "none":
        text = "none in range"
    elif found["kind"] == "below-range":
        text = f"at or below {found['load']:g} {unit}"
    else:
        text = f"{found['load']:.1f} {unit}"
    interval = found.get("interval")
    if interval:
        text += f" ({interval_text(interval, unit)})"
    return text


def interval_text(interval: dict, unit: str = "users") -> str:
    """The interval in words, saying what it is drawn from."""
    if interval["kind"] == "none":
        return "not even the low end of the offload arm's median interval beats HBM-only's high end in range"
    low = "at or below the smallest load" if interval["low"] is None else f"{interval['low']:.1f}"
    high = "beyond the largest load" if interval["high"] is None else f"{interval['high']:.1f} {unit}"
    return f"somewhere from {low} to {high}, by both arms' {MEDIAN_CONFIDENCE:.0%} intervals of the median TTFT"


def predicted_crossover(hbm_tokens: int | None, context_tokens: int) -> float | None:
    """The load plan predicts the offload tier starts paying off at: the users whose working set (users x context)
    just fills what plan says HBM holds. None when plan cannot say how much HBM holds."""
    if not hbm_tokens or context_tokens <= 0:
        return None
    return hbm_tokens / context_tokens


def explain(measured: dict, plan_hbm_tokens: int | None, server_tokens: int | None, context_tokens: int,
            loads: Sequence[float], baseline: Sequence[float | None], arm: Sequence[float | None],
            arm_title: str = "LMCache", served: tuple[float, float] | None = None) -> str:
    """One paragraph, computed from the figures: plan's predicted crossover beside the measured one, and when they
    differ, why: the capacity plan assumed against the one the server reported, what the offload arm costs where
    HBM still holds everything, and (`served`: the share of prompt tokens the server served from any cache at the
    largest load, HBM-only's and the arm's) whether the arm's hits were too few or too slow."""
    predicted = predicted_crossover(plan_hbm_tokens, context_tokens)
    held = predicted_crossover(server_tokens, context_tokens)
    parts = []
    if predicted is None:
        parts.append("plan cannot predict the crossover (it does not know how much KV HBM holds)")
    else:
        parts.append(f"plan assumes HBM holds {plan_hbm_tokens:,} tokens, so the working set ({context_tokens:,} "
                     f"tokens per user) overflows HBM above {predicted:.1f} users and {arm_title} should win from "
                     "there")
    parts.append(f"measured crossover: {crossover_text(measured)}")
    if server_tokens is not None and plan_hbm_tokens is not None and server_tokens != plan_hbm_tokens:
        parts.append(f"the server held {server_tokens:,} tokens of KV ({server_tokens / plan_hbm_tokens:.2f}x plan's "
                     f"figure), which moves the overflow to {held:.1f} users")
    reference = held if held is not None else predicted
    between = measured.get("between")
    if reference is not None and between:
        low, high = between
        overhead = _overhead_below(reference, loads, baseline, arm)
        if high is None and low <= reference:
            parts.append(f"the largest load swept ({low:g} users) never overflowed HBM: sweep further")
        elif high is None:
            cost = "" if overhead is None else f"{arm_title} is {overhead:+.0%} p50 TTFT against HBM-only where HBM " \
                                               "holds everything, and "
            parts.append(f"{cost}overflow up to {low:g} users never made up for it")
            if served is not None and served[1] > served[0] and arm[-1] is not None and baseline[-1]:
                parts.append(f"at {loads[-1]:g} users the server served {served[1]:.1%} of prompt tokens from cache "
                             f"with {arm_title} against {served[0]:.1%} HBM-only, yet its p50 TTFT was "
                             f"{arm[-1] / baseline[-1] - 1:+.0%}: what its hits save in prefill is less than what it "
                             "adds per request on this host")
        elif reference < low:
            cost = "" if overhead is None else f"{arm_title} is {overhead:+.0%} p50 TTFT against HBM-only where HBM " \
                                               "holds everything, so "
            parts.append(f"{cost}it needs more overflow than {reference:.1f} users to pay for itself")
        elif reference > high:
            parts.append("HBM-only fell behind before its KV cache was full: requests waiting for KV blocks, or "
                         "prefix blocks evicted while the cache still had room for the working set")
        else:
            parts.append(f"they agree (the overflow falls between the points at {low:g} and {high:g} users, where "
                         "the measured order changes)")
    return "; ".join(parts) + "."


def _overhead_below(limit: float, loads: Sequence[float], baseline: Sequence[float | None],
                    arm: Sequence[float | None]) -> float | None:
    """The arm's p50 TTFT over the baseline's minus one, at the largest load where HBM still holds the working
    set (None when no such point has both figures)."""
    fitting = [(x, b, a) for x, b, a in zip(loads, baseline, arm) if x <= limit and a is not None and b]
    if not fitting:
        return None
    _, base, value = fitting[-1]
    return value / base - 1
