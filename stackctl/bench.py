"""Measure what the cache buys: a cold/warm probe, and a prefix-reuse workload shaped like agentic coding sessions.

Every hit rate reported here is read from the server's own counters (/metrics), never from what the client expects.
Workloads are bounded in request count and in time, and talk only to the stack's own address.
"""

from __future__ import annotations

import http.client
import json
import random
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stackctl import metrics
from stackctl.errors import StackctlError
from stackctl.httpclient import get_status, get_text, stream_completion

VOCAB_WORDS = 4088  # the smoke model's vocabulary of "wN" words; other tokenizers split them, which is fine


def words(count: int, offset: int) -> str:
    return " ".join(f"w{(offset + i) % VOCAB_WORDS}" for i in range(count))


def cache_counters(base_url: str) -> dict:
    text = get_text(f"{base_url}/metrics")
    names = {"queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total",
             "external_queries": "vllm:external_prefix_cache_queries_total",
             "external_hits": "vllm:external_prefix_cache_hits_total"}
    return {key: metrics.total(text, name) or 0.0 for key, name in names.items()}


def hit_rate(before: dict, after: dict) -> float | None:
    """Share of prompt tokens served from any cache tier between two counter readings (server's numbers)."""
    queries = after["queries"] - before["queries"]
    hits = (after["hits"] - before["hits"]) + (after["external_hits"] - before["external_hits"])
    return hits / queries if queries > 0 else None


# -- the probe: what each cache tier buys on the same prompts ------------------------------------------------------

ARMS = ("recompute", "hbm", "lmcache")
ARM_TITLES = {"recompute": "recompute (nothing cached)", "hbm": "vLLM prefix cache (HBM)",
              "lmcache": "LMCache (its tiers)"}


def _salted(base_url: str, model: str, prompt: str, salt: str) -> dict:
    return stream_completion(base_url, model, prompt, extra={"cache_salt": salt})


def tokens_recomputed(prompt_tokens: int | None, hits: float) -> int | None:
    """Prompt tokens the server computed itself for one request: its prompt tokens (the server's `usage`) minus
    the tokens it counted as hits in any cache (vLLM's prefix cache and the connector's, /metrics). None when the
    server did not say how long the prompt was."""
    if prompt_tokens is None:
        return None
    return max(0, int(prompt_tokens) - round(hits))


def probe(base_url: str, model: str, tokens: int = 1200, runs: int = 5, lmcache: bool = False) -> dict:
    """`runs` unique prompts, each asked three times on the same server: first under a new cache_salt (nothing is
    cached: the recompute arm), then under the same salt (vLLM's HBM prefix cache answers: the hbm arm), then, with
    LMCache on, under another salt (vLLM mixes the salt into its block hashes, so HBM misses; LMCache keys by
    tokens and answers: the lmcache arm). Per arm: TTFT median over the runs, the hit rate the server counted
    (/metrics) and the prompt tokens it recomputed (median over the runs: prompt tokens minus every hit the
    server counted for that request). The ratios compare medians measured in this one run."""
    pick = random.SystemRandom()
    samples: dict[str, list[float]] = {arm: [] for arm in ARMS}
    counted: dict[str, list[float]] = {arm: [0.0, 0.0] for arm in ARMS}  # hits, queries
    recomputed: dict[str, list[int]] = {arm: [] for arm in ARMS}
    prompt_tokens = None
    # One untimed request first: a server's first prefill of a length pays one-time costs (kernel selection, JIT,
    # allocations) that measured 10x a normal prefill here.
    _salted(base_url, model, " ".join(f"w{pick.randrange(VOCAB_WORDS)}" for _ in range(tokens)), "bench-warm-up")
    for _ in range(runs):
        prompt = " ".join(f"w{pick.randrange(VOCAB_WORDS)}" for _ in range(tokens))
        salt = f"bench-{pick.getrandbits(64):016x}"
        plan = [("recompute", salt), ("hbm", salt)] + ([("lmcache", salt + "-lmcache")] if lmcache else [])
        for arm, arm_salt in plan:
            before = cache_counters(base_url)
            answer = _salted(base_url, model, prompt, arm_salt)
            after = cache_counters(base_url)
            samples[arm].append(answer["ttft_s"])
            key = "external_hits" if arm == "lmcache" else "hits"
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
                     "tokens_recomputed_runs": recomputed[arm]}
    cold = arms["recompute"]["ttft_median_s"]
    for values in arms.values():
        values["over_recompute"] = values["ttft_median_s"] / cold if cold else None
    best = "lmcache" if lmcache else "hbm"
    return {"prompt_tokens": prompt_tokens, "runs": runs, "arms": arms, "cache_arm": best,
            "cold_ttft_s": cold, "warm_ttft_s": arms[best]["ttft_median_s"],
            "warm_over_cold": arms[best]["over_recompute"],
            "speedup": 1 / arms[best]["over_recompute"] if arms[best]["over_recompute"] else None,
            "hit_rate": arms[best]["hit_rate"]}


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
    return "\n".join(lines) + "\n"


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


# -- workloads --------------------------------------------------------------------------------------------------

@dataclass
class Request:
    """One request of a workload: when to send it (seconds from start), its prompt, how many tokens to generate."""

    at: float
    session: int
    prompt: str
    max_tokens: int


def agentic_sessions(users: int, turns: int, system_tokens: int, turn_tokens: int, output_tokens: int,
                     think_s: float = 0.0, seed: int = 0) -> list[list[Request]]:
    """Concurrent sessions whose context grows turn by turn: a shared system prefix, then each turn repeats the
    whole previous conversation and adds a new user message (the shape of agentic coding traffic)."""
    rng = random.Random(seed)
    system = words(system_tokens, 0)
    sessions = []
    for user in range(users):
        context = system
        requests = []
        for turn in range(turns):
            context += " " + words(turn_tokens, rng.randrange(VOCAB_WORDS))
            requests.append(Request(at=turn * think_s, session=user, prompt=context, max_tokens=output_tokens))
        sessions.append(requests)
    return sessions


def trace_sessions(path: Path, block_tokens: int = 64) -> list[list[Request]]:
    """A kv-cache-tester style trace: {"requests": [{"t", "type", "in", "out", "hash_ids"}...]} (64-token blocks).
    Each hash id becomes a fixed 64-word block, so requests sharing hash ids share prompt prefixes."""
    data = json.loads(Path(path).read_text())
    requests = data["requests"] if isinstance(data, dict) else data
    out = []
    for index, item in enumerate(requests):
        blocks = [words(block_tokens, (int(h) * 7919) % VOCAB_WORDS) for h in item.get("hash_ids", [])]
        prompt = " ".join(blocks)
        extra = int(item.get("in", 0)) - len(blocks) * block_tokens
        if extra > 0:
            prompt += " " + words(extra, index * 31)
        out.append([Request(at=float(item.get("t", 0.0)), session=index, prompt=prompt.strip() or "w0",
                            max_tokens=max(1, int(item.get("out", 1))))])
    return out


@dataclass
class RunResult:
    arm: str
    requests: list = field(default_factory=list)  # per request: start_s, ttft_s, e2e_s, in/out tokens, session
    errors: int = 0
    wall_s: float = 0.0
    hit_rate: float | None = None
    probe: dict | None = None
    first_error: str = ""        # what the first failed request saw
    server_lost: bool = False    # the server stopped answering during the run: the results are partial

    def summary(self) -> dict:
        ttft = sorted(r["ttft_s"] for r in self.requests)
        e2e = sorted(r["e2e_s"] for r in self.requests)
        tokens_in = sum(r["prompt_tokens"] for r in self.requests)
        tokens_out = sum(r["completion_tokens"] for r in self.requests)
        wall = self.wall_s or 1e-9
        return {
            "arm": self.arm, "completed": len(self.requests), "errors": self.errors,
            "ttft_p50_s": _pct(ttft, 50), "ttft_p95_s": _pct(ttft, 95), "ttft_max_s": ttft[-1] if ttft else None,
            "e2e_p50_s": _pct(e2e, 50), "e2e_p95_s": _pct(e2e, 95), "e2e_max_s": e2e[-1] if e2e else None,
            "input_tokens_per_s": tokens_in / wall, "output_tokens_per_s": tokens_out / wall,
            "hit_rate": self.hit_rate, "wall_s": self.wall_s, "partial": self.server_lost,
            "probe_cold_ttft_s": (self.probe or {}).get("cold_ttft_s"),
            "probe_warm_ttft_s": (self.probe or {}).get("warm_ttft_s"),
        }


def run_workload(base_url: str, model: str, sessions: list[list[Request]], arm: str, max_requests: int = 200,
                 max_seconds: float = 300.0) -> RunResult:
    """Each session runs in its own thread, its requests in order; the whole run stops at max_requests or
    max_seconds, whichever comes first."""
    result = RunResult(arm=arm)
    lock = threading.Lock()
    budget = {"left": max_requests}
    started = time.perf_counter()
    deadline = started + max_seconds
    before = cache_counters(base_url)

    def session_worker(requests: list[Request]) -> None:
        for request in requests:
            wait = started + request.at - time.perf_counter()
            if wait > 0:
                time.sleep(min(wait, max(0.0, deadline - time.perf_counter())))
            with lock:
                if budget["left"] <= 0 or time.perf_counter() >= deadline:
                    return
                budget["left"] -= 1
            begin = time.perf_counter()
            try:
                timing = stream_completion(base_url, model, request.prompt, max_tokens=request.max_tokens,
                                           timeout=max(5.0, deadline - begin + 60))
            except (OSError, ValueError, http.client.HTTPException) as exc:  # counted and kept, never hidden
                with lock:
                    result.errors += 1
                    result.first_error = result.first_error or f"{type(exc).__name__}: {exc}"
                continue
            usage = timing["usage"]
            with lock:
                result.requests.append({
                    "session": request.session, "start_s": begin - started, "ttft_s": timing["ttft_s"],
                    "e2e_s": timing["e2e_s"], "prompt_tokens": usage.get("prompt_tokens", 0),
                    "completion_tokens": usage.get("completion_tokens", 0)})

    threads = [threading.Thread(target=session_worker, args=(s,), daemon=True) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.perf_counter()) + 120)
    result.wall_s = time.perf_counter() - started
    if result.errors and get_status(f"{base_url}/health", timeout=5) != 200:
        result.server_lost = True  # no counters to read either: the hit rate stays unknown
        return result
    result.hit_rate = hit_rate(before, cache_counters(base_url))
    return result


def require_plotting() -> None:
    """bench.png needs matplotlib: say so before any arm is brought up, not after the measurements."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise StackctlError("bench needs matplotlib to draw bench.png (fix: pip install matplotlib, or "
                            "pip install 'stackctl[test]')") from None


def _pct(values: list, pct: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(pct) - 1]


# -- reports ----------------------------------------------------------------------------------------------------

def markdown_table(summaries: list[dict]) -> str:
    columns = [("arm", "arm", "{}"), ("completed", "requests", "{}"), ("errors", "errors", "{}"),
               ("ttft_p50_s", "TTFT p50 (s)", "{:.3f}"), ("ttft_p95_s", "TTFT p95 (s)", "{:.3f}"),
               ("ttft_max_s", "TTFT max (s)", "{:.3f}"), ("e2e_p50_s", "E2E p50 (s)", "{:.3f}"),
               ("e2e_p95_s", "E2E p95 (s)", "{:.3f}"), ("input_tokens_per_s", "in tok/s", "{:.0f}"),
               ("output_tokens_per_s", "out tok/s", "{:.1f}"), ("hit_rate", "hit rate (server)", "{:.1%}"),
               ("probe_cold_ttft_s", "probe cold TTFT (s)", "{:.3f}"),
               ("probe_warm_ttft_s", "probe warm TTFT (s)", "{:.3f}")]
    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |",
             "|" + "---|" * len(columns)]
    for summary in summaries:
        cells = [fmt.format(summary[key]) if summary.get(key) is not None else "-" for key, _, fmt in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results: list[RunResult], path: Path) -> Path:
    """TTFT over time per arm, and the cold vs warm probe bars, side by side (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (timeline, bars) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100,
                                            gridspec_kw={"width_ratios": [2, 1]})
    for result in results:
        points = sorted((r["start_s"], r["ttft_s"]) for r in result.requests)
        if points:
            timeline.scatter([p[0] for p in points], [p[1] for p in points], s=14, label=result.arm)
    timeline.set_xlabel("request start (s)")
    timeline.set_ylabel("TTFT (s)")
    timeline.set_title("TTFT over time")
    timeline.legend()
    timeline.grid(alpha=0.3)
    names = [r.arm for r in results]
    cold = [(r.probe or {}).get("cold_ttft_s") or 0 for r in results]
    warm = [(r.probe or {}).get("warm_ttft_s") or 0 for r in results]
    positions = range(len(names))
    bars.bar([p - 0.2 for p in positions], cold, width=0.4, label="cold")
    bars.bar([p + 0.2 for p in positions], warm, width=0.4, label="warm (repeat)")
    bars.set_xticks(list(positions), names)
    bars.set_ylabel("TTFT (s)")
    bars.set_title("single prompt: cold vs warm")
    bars.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def write_reports(results: list[RunResult], out_dir: Path) -> dict:
    from stackctl.state.store import write_atomically

    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = [r.summary() for r in results]
    payload = {"summaries": summaries, "runs": [asdict(r) for r in results],
               "partial": any(r.server_lost for r in results)}
    write_atomically(out_dir / "bench.json", json.dumps(payload, indent=2))
    write_atomically(out_dir / "bench.md", markdown_table(summaries))
    plot(results, out_dir / "bench.png")
    return {"json": out_dir / "bench.json", "markdown": out_dir / "bench.md", "png": out_dir / "bench.png"}
