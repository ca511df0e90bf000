"""Live checks of an offload engine other than LMCache in the server (cache.offload): LMCache's own server answers
and holds what the recipe says (lmcache-mp), and a prompt emptied from HBM comes back through the engine, answering
as HBM does.

How a hit is made to come from the offload: vLLM's dev endpoint POST /reset_prefix_cache empties HBM's prefix cache
and leaves the connector's store alone (vLLM 0.32 vllm/entrypoints/serve/dev/cache/api_router.py:20-36: the
connector is reset only with reset_external=true; it answers success=false while offload transfers are in flight,
so it is asked again). The repeat carries the same `cache_salt` as the first request, because the LMCacheMPConnector
vLLM loads (LMCache's own, LMCache 0.5.6 lmcache/integration/vllm/lmcache_mp_connector.py:916-936) passes the salt to
the LMCache server: another salt would be another key there, unlike LMCache in the server.
"""

from __future__ import annotations

import re
import time

from stackctl import metrics
from stackctl.doctor.lmcache_live import (
    EXTERNAL_HITS,
    LOGPROB_TOLERANCE,
    ask,
    decoded_tokens,
    generated_text,
    hit_test_prompt,
    logprob_delta,
    new_salt,
    settle,
)
from stackctl.doctor.registry import Unavailable, check, failed, passed

# The LMCache server's own account of a load, in the container's log (serve.sh prefixes its lines): LMCache 0.5.6
# lmcache/v1/multiprocess/modules/engine_driven_transfer.py:514 logs `Retrieved N tokens in S seconds`.
SERVER_RETRIEVED = re.compile(r"^\[lmcache-server\] .*Retrieved (\d+) tokens in ([0-9.]+) seconds", re.M)
RESET_WAIT_S = 15.0
STORE_WAIT_S = 15.0  # the LMCache server stores after the response; its /status shows it within a second here


def _offload_engine(ctx):
    """The recipe's offload engine when it is not LMCache in the server (whose own checks prove it)."""
    from stackctl.knowledge.kinds import engine_of

    if not ctx.recipe.cache.enabled:
        raise Unavailable("KV offload is off in the recipe")
    engine = engine_of(ctx.recipe)
    if engine.lmcache_in_server:
        raise Unavailable("cache.offload = 'lmcache': server.lmcache-hit and server.lmcache-hit-correct prove it")
    return engine


def lmcache_server_status(ctx) -> dict:
    """The LMCache server's /status (lmcache-mp), read from the host (host networking)."""
    from stackctl.httpclient import get_json

    url = ctx.spec.lmcache_server_url + "/status"
    try:
        return get_json(url, timeout=5.0)
    except (OSError, ValueError) as exc:
        raise Unavailable(f"the LMCache server does not answer {url}: {exc}") from exc


def _stored_objects(status: dict) -> int:
    managers = (status.get("storage_manager") or {}).get("l1_managers") or {}
    return sum(int(m.get("total_object_count") or 0) for m in managers.values())


def _l1_bytes(status: dict) -> int:
    managers = (status.get("storage_manager") or {}).get("l1_managers") or {}
    return sum(int(m.get("memory_total_bytes") or 0) for m in managers.values())


@check("server.lmcache-server", "server", "error",
       "LMCache's own server (cache.offload = \"lmcache-mp\") is healthy and holds the cpu tier's size",
       "read the container's log (its lines start with [lmcache-server]); the server must start before vLLM")
def lmcache_server(ctx):
    """With cache.offload = "lmcache-mp", serve.sh starts `lmcache server` before vLLM; its HTTP API answers
    /healthcheck and /status (LMCache 0.5.6 lmcache/v1/multiprocess/http_apis/info_api.py:41-63). Passes when the
    server says it is healthy, with an L1 of the cpu tier's size (memory_total_bytes, `--l1-size-gb`), the chunk size
    of the recipe, and how many objects it holds."""
    engine = _offload_engine(ctx)
    if not engine.lmcache_server:
        raise Unavailable(f"cache.offload = {engine.name!r} runs no LMCache server")
    status = lmcache_server_status(ctx)
    tier = ctx.recipe.tiers_of("cpu")[0]
    want = int(tier.size_gb * (1 << 30))
    details = {"l1_bytes": _l1_bytes(status), "objects": _stored_objects(status),
               "chunk_size": status.get("chunk_size"), "healthy": status.get("is_healthy")}
    if status.get("is_healthy") is not True:
        return failed(f"the LMCache server reports itself unhealthy: {str(status)[:300]}", **details)
    if details["l1_bytes"] != want:
        return failed(f"the LMCache server's L1 holds {details['l1_bytes']} bytes, the cpu tier says {want} "
                      f"({tier.size_gb:g} GiB)", **details)
    if status.get("chunk_size") != ctx.recipe.cache.chunk_size:
        return failed(f"the LMCache server runs chunk size {status.get('chunk_size')}, the recipe says "
                      f"{ctx.recipe.cache.chunk_size}", **details)
    return passed(f"healthy, L1 {tier.size_gb:g} GiB, chunk size {status.get('chunk_size')}, "
                  f"{details['objects']} objects held", **details)


def served_offload(ctx) -> dict:
    """Shared by the checks: a unique prompt computed (cold, its KV offloaded), HBM's prefix cache emptied, and the
    same prompt again (warm: loaded through the engine's connector)."""

    def run():
        ctx.require_healthy()
        if not ctx.recipe.serve.dev_endpoints:
            raise Unavailable("serve.dev_endpoints is off: without POST /reset_prefix_cache HBM cannot be emptied, "
                              "so a repeat would be an HBM hit")
        engine = _offload_engine(ctx)
        url, model, tokens = ctx.base_url, ctx.recipe.served_name, decoded_tokens(ctx)
        prompt, _ = hit_test_prompt(ctx)
        objects_before = _stored_objects(lmcache_server_status(ctx)) if engine.lmcache_server else None
        salt = new_salt()
        cold = ask(url, model, prompt, salt, tokens)
        objects_after = objects_before
        if engine.lmcache_server:
            deadline = time.monotonic() + STORE_WAIT_S
            while objects_after == objects_before and time.monotonic() < deadline:
                time.sleep(0.2)
                objects_after = _stored_objects(lmcache_server_status(ctx))
        hbm = ask(url, model, prompt, salt, tokens)  # vLLM's own prefix cache answers: the reference for a correct load
        _empty_hbm(url)
        start = len(ctx.fresh_log())
        before = ctx.metrics()
        warm = ask(url, model, prompt, salt, tokens)
        after = ctx.metrics()
        retrieved = None
        if engine.lmcache_server:
            lines = SERVER_RETRIEVED.findall(settle(ctx.fresh_log, start, marker="Retrieved", timeout=5.0))
            retrieved = sum(int(tokens) for tokens, _ in lines)
        hits, earlier = metrics.total(after, EXTERNAL_HITS), metrics.total(before, EXTERNAL_HITS)
        return {"engine": engine.name, "prompt_tokens": len(prompt), "cold": cold, "hbm": hbm, "warm": warm,
                "stored_objects": None if objects_before is None else objects_after - objects_before,
                "server_retrieved_tokens": retrieved,
                "external_hits": None if hits is None or earlier is None else hits - earlier}

    return ctx.remember("offload_served", run)


def _empty_hbm(url: str) -> None:
    from stackctl.httpclient import post_json

    deadline = time.monotonic() + RESET_WAIT_S
    while True:
        answer = post_json(f"{url}/reset_prefix_cache", timeout=30.0)
        if not isinstance(answer, dict) or answer.get("success") is not False:
            return
        if time.monotonic() > deadline:
            raise Unavailable(f"POST /reset_prefix_cache kept answering success=false for {RESET_WAIT_S:.0f} s")
        time.sleep(0.2)


@check("server.offload-hit", "server", "error",
       "a prompt emptied from HBM is loaded through the offload engine and answers as HBM does",
       "see server.lmcache-server (lmcache-mp) and the server log; keep serve.dev_endpoints on for this check")
def offload_hit(ctx):
    """The proof that an offload engine other than LMCache-in-the-server serves: a unique prompt is computed, its KV
    offloaded by the engine; HBM's prefix cache is emptied (see the module's docstring); the prompt again must be
    loaded by the connector: `vllm:external_prefix_cache_hits_total` (the connector's hits, counted by vLLM's
    scheduler) rises by the repeat, and for lmcache-mp the LMCache server's /status counted new objects after the
    first request and logged `Retrieved N tokens` for the repeat. The loaded answer must equal the answer vLLM gives
    from its own prefix cache (asked before HBM is emptied): the prompt is a whole number of blocks and chunks plus
    one token, so both run the same kernels over the same prefix: the same greedy token (eight with --deep), and the
    log-probabilities of the five most likely tokens at each within float noise. The recompute is compared too, for the record: a full prefill sums in another order, so in bf16 its
    log-probabilities differ by rounding (in float32 they agree within 1e-5 here). Reports tokens hit and TTFT cold
    and warm (figures, not a gate)."""
    _offload_engine(ctx)
    result = served_offload(ctx)
    cold, hbm, warm = result["cold"], result["hbm"], result["warm"]
    hits = result["external_hits"]
    delta = logprob_delta(hbm, warm)
    recompute_delta = logprob_delta(cold, warm)
    details = {"engine": result["engine"], "prompt_tokens": result["prompt_tokens"], "external_hits": hits,
               "stored_objects": result["stored_objects"],
               "server_retrieved_tokens": result["server_retrieved_tokens"], "cold_ttft_s": cold["ttft_s"],
               "warm_ttft_s": warm["ttft_s"],
               "recomputed": cold["text"], "from_hbm": hbm["text"], "from_offload": warm["text"],
               "max_logprob_delta": delta, "max_logprob_delta_recompute": recompute_delta}
    if hits is None:
        raise Unavailable(f"{EXTERNAL_HITS} is not in /metrics")
    if result["stored_objects"] is not None and result["stored_objects"] <= 0:
        return failed(f"the LMCache server stored nothing for a {result['prompt_tokens']}-token prompt", **details)
    if hits <= 0 or result["server_retrieved_tokens"] == 0:
        retrieved = result["server_retrieved_tokens"]
        server = "" if retrieved is None else f"; the LMCache server logged {retrieved} tokens retrieved"
        return failed(f"the repeat was not loaded through {result['engine']}: {EXTERNAL_HITS} +{hits:.0f} after HBM "
                      f"was emptied{server}", **details)
    if not (hbm["tokens"] and warm["tokens"]):
        raise Unavailable("the server returned no generated tokens with log-probabilities to compare")
    if hbm["tokens"] != warm["tokens"]:
        return failed(f"the answer loaded through {result['engine']} differs from the HBM answer: {warm['text']!r}, "
                      f"from HBM {hbm['text']!r} (recomputed {cold['text']!r})", **details)
    if delta > LOGPROB_TOLERANCE:
        return failed(f"same tokens as the HBM answer, but log-probabilities differ from it by up to {delta:.4f} "
                      f"(more than float noise, {LOGPROB_TOLERANCE})", **details)
    recompute = ("identical to the recompute" if cold["tokens"] == warm["tokens"]
                 else "the recompute differs by the dtype's rounding")
    return passed(f"{hits:.0f}/{result['prompt_tokens']} prompt tokens loaded through {result['engine']} after HBM "
                  f"was emptied; {generated_text(warm)} identical to the HBM answer, {recompute} "
                  f"(log-probabilities within {delta:.4f} of HBM's, {recompute_delta:.3f} of the recompute's); "
                  f"TTFT {cold['ttft_s'] * 1000:.0f} ms cold, {warm['ttft_s'] * 1000:.0f} ms "
                  "loaded", **details)
