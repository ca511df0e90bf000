"""Workloads: prompts made of the smoke model's "wN" words, agentic sessions (a conversation growing turn by turn),
and the driver that sends them to a server, bounded in request count and time.
Talks only to the stack's own address.
"""

from __future__ import annotations

import http.client
import random
import statistics
import threading
import time
from dataclasses import dataclass, field

from stackctl.bench.server import cache_counters, hit_rate
from stackctl.httpclient import get_status, stream_completion

VOCAB_WORDS = 4088  # the smoke model's vocabulary of "wN" words; other tokenizers split them, which is fine


def words(count: int, offset: int) -> str:
    return " ".join(f"w{(offset + i) % VOCAB_WORDS}" for i in range(count))


@dataclass
class Request:
    """One request of a workload: when to send it (seconds from start), its prompt, how many tokens to generate,
    and how long its user thinks after the previous answer before sending it."""

    at: float
    session: int
    prompt: str
    max_tokens: int
    think_s: float = 0.0


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


def conversations(users: int, turns: int, context_tokens: int, output_tokens: int, think_s: float,
                  seed: int) -> list[list[Request]]:
    """Agentic users without a shared prefix: each its own conversation of random words that grows turn by turn to
    `context_tokens` by its last turn, every turn re-sending the whole conversation so far, and a think time after
    each answer. The same seed gives the same prompts; another seed gives prompts no cache has seen (a sweep gives
    each load point its own, so no point is served from an earlier point's cache)."""
    step = max(1, context_tokens // turns)
    first = max(1, context_tokens - step * (turns - 1))
    sessions = []
    for user in range(users):
        rng = random.Random(f"{seed}-{user}")
        spoken = [f"w{rng.randrange(VOCAB_WORDS)}" for _ in range(first + step * (turns - 1))]
        sessions.append([Request(at=0.0, session=user, prompt=" ".join(spoken[:first + step * turn]),
                                 max_tokens=output_tokens, think_s=think_s if turn else 0.0)
                         for turn in range(turns)])
    return sessions


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
            "ttft_p50_s": percentile(ttft, 50), "ttft_p95_s": percentile(ttft, 95), "ttft_max_s": ttft[-1] if ttft else None,
            "e2e_p50_s": percentile(e2e, 50), "e2e_p95_s": percentile(e2e, 95), "e2e_max_s": e2e[-1] if e2e else None,
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
            wait = max(started + request.at - time.perf_counter(), request.think_s)
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


def percentile(values: list, pct: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(pct) - 1]
