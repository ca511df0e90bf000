"""Live LMCache checks: LMCache itself serves a repeated prompt, serves it right, from every tier, and across
server processes.

How a hit is made to come from LMCache on a production server (no dev-mode endpoint): the repeat carries another
`cache_salt`. vLLM mixes the salt into the hash of a request's first block (vLLM 0.32
vllm/v1/core/kv_cache_utils.py:647-651), so the repeat finds nothing in HBM; LMCache 0.5.6's in-process connector
keys chunks by token ids alone (lmcache/integration/vllm/vllm_v1_adapter.py:1415-1435: `lookup(token_ids, ...)`),
so the same prompt is an LMCache hit. What counts is the server's own account: LMCache's lookup and `Retrieved`
lines in the log and vLLM's `vllm:external_prefix_cache_hits_total`, never the client's expectation.
"""

from __future__ import annotations

import math
import random
import re
import time

from stackctl import metrics
from stackctl.doctor.parsers.lmcache_log import ANSI, activity, throughput
from stackctl.doctor.registry import Unavailable, check, require_lmcache, failed, passed

# Tokens a proof request decodes: the first token is computed over the whole loaded prefix, and its five most likely
# tokens' log-probabilities (TOP_LOGPROBS, OpenAI's limit for completions; vLLM's default max_logprobs is 20) say
# whether that prefix is the one HBM holds. --deep decodes GENERATED_TOKENS and compares every one of them too.
GENERATED_TOKENS = 8
TOP_LOGPROBS = 5
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
FINISHED_REQUESTS = "vllm:request_success_total"
# After a response, LMCache writes its KV on to the slower tiers (disk, fs, S3) in background threads. On 2 cores those
# writes share the CPU with the next prefill: a prefix-cache hit right after a cold store took 140-170 ms against 66 ms
# for an LMCache load. The warm-up's writes are let finish before the cold figure is taken (once per new server):
# until the container is quiet (stackctl/engine/quiet.py), or for WARM_UP_DRAIN_S where this machine cannot see it.
WARM_UP_DRAIN_S = 1.0


def unique_words(words: int) -> str:
    """Random words no earlier request shares a prefix with (so a hit cannot be left over from one). The words
    are the smoke models' vocabulary ("w0".."w4087", one token each); other tokenizers split them, which is fine."""
    pick = random.SystemRandom()
    return " ".join(f"w{pick.randrange(4088)}" for _ in range(words))


def new_salt() -> str:
    return f"stackctl-{random.SystemRandom().getrandbits(64):016x}"


def aligned_length(wanted: int, block_size: int, chunk_size: int) -> int:
    """A prompt length (tokens) at which vLLM's prefix cache and LMCache hold the same prefix: a whole number of
    both vLLM blocks and LMCache chunks, plus the one token both leave to compute. The HBM answer and the LMCache
    answer then run the same kernels over the same prefix, so a correct load gives the HBM answer exactly."""
    unit = math.lcm(block_size, chunk_size)
    return max(unit, wanted // unit * unit) + 1


def block_size(metrics_text: str) -> int | None:
    """vLLM's KV block size, from the labels of its vllm:cache_config_info gauge."""
    match = re.search(r'^vllm:cache_config_info\{[^}]*\bblock_size="(\d+)"', metrics_text, re.M)
    return int(match[1]) if match else None


def hit_test_prompt(ctx) -> tuple[list[int], int]:
    """The live hit tests' prompt (token ids; `checks.hit_test_tokens` rounded to whole vLLM blocks and LMCache
    chunks) and vLLM's block size, with the server warmed up. A fresh server's first request pays a one-time warm-up
    (14 s on a new vLLM-CPU LMCache stack here), which is not the prompt's cold TTFT: a request of another prompt of
    the same length takes it (a short one left the first long prefill and LMCache's first store 2.5x slower than
    later ones). A server that has finished a request has paid it already."""
    url, model = ctx.base_url, ctx.recipe.served_name
    served_before = ctx.metrics()
    blocks = block_size(served_before) or 16
    prompt = token_prompt(url, model, aligned_length(ctx.recipe.checks.hit_test_tokens, blocks,
                                                     ctx.recipe.cache.chunk_size))
    if not has_finished_a_request(served_before):
        ask(url, model, token_prompt(url, model, len(prompt)))
        let_writes_finish(ctx)
    return prompt, blocks


def let_writes_finish(ctx) -> None:
    """Wait until the stack's container is quiet (LMCache's background writes done); a fixed pause where this
    machine cannot see the container's processes."""
    from stackctl.engine.quiet import wait_for_container

    if wait_for_container(ctx.container()) is None:
        time.sleep(WARM_UP_DRAIN_S)


def has_finished_a_request(metrics_text: str) -> bool:
    """Whether the server's own counter says it has finished a request (vLLM's `vllm:request_success_total`)."""
    finished = metrics.total(metrics_text, FINISHED_REQUESTS)
    return finished is not None and finished > 0


def token_prompt(url: str, model: str, length: int) -> list[int]:
    """`length` token ids of unique random words, through the server's own tokenizer (/tokenize)."""
    from stackctl.httpclient import post_json

    ids: list[int] = []
    while len(ids) < length:
        ids += post_json(f"{url}/tokenize", {"model": model, "prompt": unique_words(length)})["tokens"]
    return ids[:length]


def ask(url: str, model: str, prompt, salt: str | None = None, tokens: int = 1, logprobs: bool = True) -> dict:
    """One greedy completion of `tokens` tokens under `salt` (a fresh one by default); TTFT, text, generated tokens,
    and with `logprobs` their log-probabilities and the TOP_LOGPROBS most likely tokens' at each step.
    A server's first request with log-probabilities pays a one-time compile: vLLM 0.32 compiles its logprob op with
    the platform's compile backend (vllm/v1/sample/ops/logprobs.py:10), inductor on CPU, 16-18 s on 2 cores here.
    A request that compares no answers asks without them."""
    from stackctl.httpclient import stream_completion

    extra: dict = {"cache_salt": salt or new_salt()}
    if logprobs:
        extra["logprobs"] = TOP_LOGPROBS
    return stream_completion(url, model, prompt, max_tokens=tokens, extra=extra)


def decoded_tokens(ctx) -> int:
    """How many tokens the proof's requests decode: one (what a TTFT, a load and the comparison of the first
    token's distribution need), GENERATED_TOKENS with --deep (each costs a decode step: 30 ms on a 2-core CPU)."""
    return GENERATED_TOKENS if ctx.deep else 1


def logprob_delta(a: dict, b: dict) -> float:
    """The largest log-probability difference between two answers of the same tokens: the chosen tokens', and at each
    step the most likely tokens' (a token in one top list and not the other is compared with the other's lowest
    entry, which it must not exceed: a near-tie at the list's edge is not a difference)."""
    deltas = [abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"])]
    for one, other in zip(a.get("top_logprobs") or [], b.get("top_logprobs") or []):
        for first, second in ((one, other), (other, one)):
            floor = min(second.values(), default=0.0)
            for token, value in first.items():
                deltas.append(abs(value - second[token]) if token in second else max(0.0, value - floor))
    return max(deltas, default=0.0)


def settle(read_log, start: int, marker: str | tuple[str, ...] = "Stored", timeout: float = 15.0) -> str:
    """The log written since offset `start`, once it holds `marker` (or any of several: LMCache's store line reaches
    the log from the engine process a little after the response) or after `timeout` seconds."""
    markers = (marker,) if isinstance(marker, str) else marker
    deadline = time.monotonic() + timeout
    while True:
        tail = ANSI.sub("", read_log())[start:]
        if any(text in tail for text in markers) or time.monotonic() > deadline:
            return tail
        time.sleep(0.1)  # the line lands within a few hundred ms: a coarse poll was most of doctor's wait


def served_hit(ctx) -> dict:
    """Shared by the live checks: after a warm-up request, a unique prompt asked three times. Under salt A it is
    computed and stored by LMCache (cold); under salt A again vLLM's prefix cache answers (hbm); under salt B HBM
    misses and LMCache must load it (warm)."""

    def run():
        phases: dict[str, float] = {}  # where the proof's time goes, in seconds (the check's details)
        clock = [time.perf_counter()]

        def lap(name: str) -> None:
            now = time.perf_counter()
            phases[name] = round(now - clock[0], 3)
            clock[0] = now

        ctx.require_healthy()
        url, model, tokens = ctx.base_url, ctx.recipe.served_name, decoded_tokens(ctx)
        prompt, blocks = hit_test_prompt(ctx)
        salt = new_salt()
        lap("prompt")
        since = ctx.log_mark()
        cold = ask(url, model, prompt, salt, tokens)
        lap("cold")
        stored = activity(settle(lambda: ctx.log_since(since), 0))
        lap("stored")
        hbm = ask(url, model, prompt, salt, tokens)
        lap("hbm")
        since = ctx.log_mark()
        before = ctx.metrics()
        warm = ask(url, model, prompt, None, tokens)
        after = ctx.metrics()
        lap("warm")
        loaded = activity(settle(lambda: ctx.log_since(since), 0, marker="Retrieved", timeout=5.0))
        lap("loaded")
        hits = metrics.total(after, EXTERNAL_HITS)
        earlier = metrics.total(before, EXTERNAL_HITS)
        return {"prompt": prompt, "prompt_tokens": len(prompt), "block_size": blocks, "cold": cold, "hbm": hbm,
                "warm": warm, "stored": stored, "loaded": loaded, "phases_s": phases,
                "external_hits": None if hits is None or earlier is None else hits - earlier}

    return ctx.remember("lmcache_served", run)


def _require_lmcache(ctx) -> None:
    require_lmcache(ctx.spec)


@check("server.lmcache-hit", "server", "error",
       "a repeated prompt is loaded from LMCache (not from HBM, not recomputed)",
       "see server.lmcache-initialised; on platform cpu keep cache.cpu_connector on; a tier that stores nothing "
       "shows in server.tier-served")
def lmcache_hit(ctx):
    """The proof that LMCache serves: a unique prompt is sent, then sent again under another `cache_salt` so that
    vLLM's HBM prefix cache cannot answer it (see the module's docstring). Passes only when LMCache itself loaded
    tokens: its lookup line reports hit tokens, its `Retrieved N out of M required tokens` line appears, and the
    server's `vllm:external_prefix_cache_hits_total` rose by the same request. Reports tokens hit / needed, the
    bytes and time of the store and the load, and TTFT cold and warm (figures, not a gate: timings on a shared
    machine are noise; the bench measures them)."""
    _require_lmcache(ctx)
    result = served_hit(ctx)
    stored, loaded = result["stored"], result["loaded"]
    tokens = result["prompt_tokens"] or 0
    from stackctl.doctor.dtype_checks import cold_rate_text  # lazily: its checks register after this module's

    figures = (f"store {throughput(stored.stored_bytes, stored.store_ms)}, load "
               f"{throughput(loaded.retrieved_bytes, loaded.retrieve_ms)}; TTFT "
               f"{result['cold']['ttft_s'] * 1000:.0f} ms cold"
               f"{cold_rate_text(ctx, tokens, 0, result['cold']['ttft_s'])}, "
               f"{result['warm']['ttft_s'] * 1000:.0f} ms from LMCache")
    details = {"prompt_tokens": tokens, "external_hits": result["external_hits"], "stored": stored.to_dict(),
               "loaded": loaded.to_dict(), "cold_ttft_s": result["cold"]["ttft_s"],
               "warm_ttft_s": result["warm"]["ttft_s"], "phases_s": result.get("phases_s", {})}
    if result["external_hits"] is None:
        raise Unavailable(f"{EXTERNAL_HITS} is not in /metrics")
    if stored.stored_tokens <= 0:
        return failed(f"LMCache stored nothing for a {tokens}-token prompt (no `Stored` line)", **details)
    if loaded.hit_tokens <= 0 or loaded.retrieved_tokens <= 0 or result["external_hits"] <= 0:
        return failed(f"the repeat was not loaded from LMCache: lookup hit {loaded.hit_tokens} tokens, retrieved "
                      f"{loaded.retrieved_tokens}, {EXTERNAL_HITS} +{result['external_hits']:.0f} "
                      f"(stored {stored.stored_tokens} before)", **details)
    first = ctx.recipe.cache.tiers[0].kind if ctx.recipe.cache.tiers else "cpu buffer"
    return passed(f"{loaded.retrieved_tokens}/{tokens} prompt tokens loaded from LMCache (the {first} tier answers "
                  f"first); {figures}", **details)


@check("server.lmcache-hit-correct", "server", "error",
       "what LMCache loads gives the answer vLLM's own cache gives",
       "a KV layout mismatch between the connector and the attention kernel: rebuild the image (stackctl build "
       "--rebuild) and report the versions; switch the connector off meanwhile")
def lmcache_hit_correct(ctx):
    """A hit that loads the wrong bytes is worse than a miss: LMCache's issue threads report KV coming back
    silently corrupted after layout mismatches. The prompt's length is a whole number of vLLM blocks and LMCache
    chunks plus one token, so vLLM's prefix cache (HBM) and LMCache hold the same prefix, and the one remaining
    token runs the same kernels over it. The answer loaded from LMCache must then equal the HBM answer: the same
    greedy token, and the log-probabilities of the five most likely tokens equal up to float noise (measured 0
    here). That first token is computed over the whole loaded prefix, so its distribution is where wrong bytes show;
    `--deep` decodes eight tokens and compares each of them the same way. Both are compared with the recompute too,
    for the record: a full prefill sums in another order, so its log-probabilities differ by bf16 rounding. What
    this cannot see: tokens of a chunk loaded in the wrong order give the same output (K carries
    the rotary position, and attention over past tokens ignores order); the connector's bit-exact tests against
    vLLM's kernel cover that."""
    _require_lmcache(ctx)
    result = served_hit(ctx)
    if result["loaded"].retrieved_tokens <= 0:
        raise Unavailable("nothing was loaded from LMCache (server.lmcache-hit says why)")
    hbm, warm, cold = result["hbm"], result["warm"], result["cold"]
    if not (hbm["tokens"] and hbm["top_logprobs"] and warm["tokens"] and warm["top_logprobs"]):
        raise Unavailable("the server returned no generated tokens with log-probabilities to compare")
    delta = logprob_delta(hbm, warm)
    recompute_delta = logprob_delta(cold, warm)
    details = {"from_hbm": hbm["text"], "from_lmcache": warm["text"], "recomputed": cold["text"],
               "max_logprob_delta": delta, "max_logprob_delta_recompute": recompute_delta}
    if hbm["tokens"] != warm["tokens"]:
        at = next(i for i, (a, b) in enumerate(zip(hbm["tokens"] + [None], warm["tokens"] + [None])) if a != b)
        return failed(f"LMCache's answer differs from the HBM answer at generated token {at}: {hbm['text']!r} from "
                      f"HBM, {warm['text']!r} from LMCache", **details)
    if delta > LOGPROB_TOLERANCE:
        return failed(f"same {len(warm['tokens'])} tokens as the HBM answer, but their log-probabilities differ by up "
                      f"to {delta:.4f} (more than float noise, {LOGPROB_TOLERANCE})", **details)
    same = "same as the recompute" if cold["tokens"] == warm["tokens"] else "the recompute differs by bf16 rounding"
    return passed(f"{generated_text(warm)} identical to the HBM answer, log-probabilities of the {TOP_LOGPROBS} most "
                  f"likely tokens within {delta:.4f} ({same}: within {recompute_delta:.3f})", **details)


def generated_text(answer: dict) -> str:
    count = len(answer["tokens"])
    return "the generated token" if count == 1 else f"{count} generated tokens"


LOGPROB_TOLERANCE = 0.001
