"""The probe: the same prompts recomputed, from vLLM's prefix cache (HBM) and, with LMCache, from LMCache; what
each cache tier buys, with the hit rates the server counted."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from pathlib import Path

from stackctl.bench.server import cache_counters
from stackctl.bench.workload import VOCAB_WORDS
from stackctl.httpclient import post_json, stream_completion

ARMS = ("recompute", "hbm", "lmcache", "offload")
ARM_TITLES = {"recompute": "recompute (nothing cached)", "hbm": "vLLM prefix cache (HBM)",
              "lmcache": "LMCache (its tiers)", "offload": "offload engine (HBM emptied)"}


def _salted(base_url: str, model: str, prompt: str, salt: str) -> dict:
    return stream_completion(base_url, model, prompt, extra={"cache_salt": salt})


def tokens_recomputed(prompt_tokens: int | None, hits: float) -> int | None:
    """Prompt tokens the server computed itself for one request: its prompt tokens (the server's `usage`) minus
    the tokens it counted as hits in any cache (vLLM's prefix cache and the connector's, /metrics). None when the
    server did not say how long the prompt was."""
    if prompt_tokens is None:
        return None
    return max(0, int(prompt_tokens) - round(hits))


def probe(base_url: str, model: str, tokens: int = 1200, runs: int = 5, lmcache: bool = False,
          offload: bool = False, settle: Callable[[], float | None] | None = None,
          loaded: Callable[[], tuple[int, float]] | None = None) -> dict:
    """`runs` unique prompts, each asked three times on the same server: first under a new cache_salt (nothing is
    cached: the recompute arm), then under the same salt (vLLM's HBM prefix cache answers: the hbm arm), then, with
    LMCache on, under another salt (vLLM mixes the salt into its block hashes, so HBM misses; LMCache keys by
    tokens and answers: the lmcache arm). Per arm: TTFT median over the runs, the hit rate the server counted
    (/metrics) and the prompt tokens it recomputed (median over the runs: prompt tokens minus every hit the
    server counted for that request). The ratios compare medians measured in this one run. With `offload` (an offload
    engine keyed by the salt too, like LMCache's own server), the offload arm empties HBM's prefix cache (the dev
    endpoint POST /reset_prefix_cache) and asks under the same salt: the engine must load it.

    `settle` (stackctl/engine/quiet.py) waits before each arm until the server has gone quiet: LMCache writes what the
    recompute arm stored on to its lower tiers in background threads, and an arm asked meanwhile shares the CPU with
    those writes. Its waits are in the result (`settled_s`; None where it could not tell).

    `loaded` returns what LMCache has loaded so far as it logged it (bytes, milliseconds): read around each request
    of the lmcache arm, it gives that request's load (`loads`), which bench sets beside the TTFT."""
    pick = random.SystemRandom()
    samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
    counted: dict[str, list[float]] = {arm: [0.0, 0.0] for arm in ARMS}  # hits, queries
    recomputed: dict[str, list[int]] = {arm: [] for arm in ARMS}
    loads: dict[str, list[tuple[int, float]]] = {arm: [] for arm in ARMS}
    prompt_tokens = None
    settled: list[float | None] = []
    # One untimed request first: a server's first prefill of a length pays one-time costs (kernel selection, JIT,
    # allocations) that measured 10x a normal prefill here.
    _salted(base_url, model, " ".join(f"w{pick.randrange(VOCAB_WORDS)}" for _ in range(tokens)), "bench-warm-up")
    for _ in range(runs):
        prompt = " ".join(f"w{pick.randrange(VOCAB_WORDS)}" for _ in range(tokens))
        salt = f"bench-{pick.getrandbits(64):016x}"
        plan = [("recompute", salt), ("hbm", salt)] + ([("lmcache", salt + "-lmcache")] if lmcache else [])
        plan += [("offload", salt)] if offload else []
        for arm, arm_salt in plan:
            if settle is not None:
                settled.append(settle())
            if arm == "offload":
                post_json(f"{base_url}/reset_prefix_cache", timeout=30.0)
            watch = loaded if arm == "lmcache" else None
            loaded_before = watch() if watch is not None else (0, 0.0)
            before = cache_counters(base_url)
            answer = _salted(base_url, model, prompt, arm_salt)
            after = cache_counters(base_url)
            if watch is not None:
                loaded_after = watch()
                loads[arm].append((loaded_after[0] - loaded_before[0], loaded_after[1] - loaded_before[1]))
            samples[arm].append(answer["ttft_s"])
            key = "external_hits" if arm in ("lmcache", "offload") else "hits"
            counted[arm][0] += after[key] - before[key]
            counted[arm][1] += after["queries"] - before["queries"]
            served = sum(after[name] - before[name] for name in ("hits", "external_hits"))
            computed = tokens_recomputed(answer["usage"].get("prompt_tokens"), served)
            if computed is not None:
                recomputed[arm].append(computed)
            prompt_tokens = answer["usage"].get("prompt_tokens") or prompt_tokens
    arms: dict[str, dict] = {}
    for arm in ARMS:
        if not samples[arm]:
            continue
        hits, queries = counted[arm]
        arms[arm] = {"ttft_median_s": statistics.median(samples[arm]), "ttft_s": samples[arm],
                     "hit_rate": hits / queries if queries > 0 else None,
                     "tokens_recomputed": statistics.median(recomputed[arm]) if recomputed[arm] else None,
                     "tokens_recomputed_runs": recomputed[arm],
                     "loads": [list(load) for load in loads[arm]] if loads[arm] else None}
    cold = arms["recompute"]["ttft_median_s"]
    for values in arms.values():
        values["over_recompute"] = values["ttft_median_s"] / cold if cold else None
    best = "lmcache" if lmcache else "offload" if offload else "hbm"
    return {"prompt_tokens": prompt_tokens, "runs": runs, "arms": arms, "cache_arm": best,
            "cold_ttft_s": cold, "warm_ttft_s": arms[best]["ttft_median_s"],
            "warm_over_cold": arms[best]["over_recompute"],
            "speedup": 1 / arms[best]["over_recompute"] if arms[best]["over_recompute"] else None,
            "hit_rate": arms[best]["hit_rate"], "settled_s": settled if settle is not None else None}


def probe_table(result: dict) -> str:
    """The arms side by side, Markdown."""
    lines = [f"| arm ({result['prompt_tokens']}-token prompts, median of {result['runs']}) | TTFT (ms) | "
             "x recompute | hit rate (server) | tokens recomputed |", "|---|---|---|---|---|"]
    for arm, values in result["arms"].items():
        rate = "-" if values["hit_rate"] is None else f"{values['hit_rate']:.1%}"
        computed = values.get("tokens_recomputed")  # probe.json files written before the column have none
        computed_text = "-" if computed is None else f"{computed:.0f}"
        lines.append(f"| {ARM_TITLES[arm]} | {values['ttft_median_s'] * 1000:.0f} | "
                     f"{values['over_recompute']:.2f} | {rate} | {computed_text} |")
    return "\n".join(lines) + "\n" + settled_text(result.get("settled_s"))


def settled_text(settled: list | None) -> str:
    """How long the arms waited for a quiet server, one line (empty when the probe did not wait)."""
    if settled is None:
        return ""
    known = [s for s in settled if s is not None]
    if not known:
        return "each arm asked without knowing whether the server was quiet (its container's CPU use is not visible here)\n"
    unknown = f"; {len(settled) - len(known)} without knowing" if len(known) < len(settled) else ""
    return (f"each arm asked once the server was quiet (LMCache's writes to its lower tiers done): waited "
            f"{min(known):.1f}-{max(known):.1f} s{unknown}\n")


def plot_probe(result: dict, path: Path, title: str) -> Path:
    """TTFT per arm, the median as a bar and every run as a dot (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.5, 4.2), dpi=100)
    names = list(result["arms"])
    for index, arm in enumerate(names):
        values = result["arms"][arm]
        axes.bar(index, values["ttft_median_s"] * 1000, width=0.6, label=ARM_TITLES[arm])
        axes.scatter([index] * len(values["ttft_s"]), [v * 1000 for v in values["ttft_s"]], color="black", s=10,
                     zorder=3)
    axes.set_xticks(range(len(names)), [ARM_TITLES[arm].split(" (")[0] for arm in names])
    axes.set_ylabel("TTFT (ms)")
    axes.set_title(f"{title}: {result['prompt_tokens']}-token prompts")
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def gate_failures(result: dict, min_speedup: float | None, min_hit_rate: float | None) -> list[str]:
    """What of the probe's gates the cache arm missed (empty: none)."""
    failed = []
    ratio = result["speedup"]
    if min_speedup is not None and (ratio or 0) < min_speedup:
        failed.append(f"speedup {ratio:.2f}x < {min_speedup}x")
    if min_hit_rate is not None and (result["hit_rate"] or 0) < min_hit_rate:
        failed.append(f"hit rate {percent(result['hit_rate'])} < {min_hit_rate:.0%}")
    return failed


def percent(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"
