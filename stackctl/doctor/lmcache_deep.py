"""`doctor --deep`: LMCache facts only a second server process can show (stackctl/doctor/clients/second_server.py).

For every tier below the CPU tier, one second server starts from the stack's image with LMCache told to search
that tier alone (`LMCACHE_RETRIEVE_LOCATIONS`). It is asked the prompt the stack already stored (served_hit), then
the same prompt again under another salt:
- the first answer shows whether a NEW process finds what the stack stored: the hash-seed proof, on a tier that
  outlives a process (fs, s3);
- the second shows the tier itself serves a load: the chunks the second server just stored there come back from it.
The second servers start together and are asked one after another; the stack is not touched, and the second servers
are removed when every tier is done. server.hash-seed-proof needs only the first fs or s3 tier's server
(`--skip server.tier-served` starts just that one).
"""

from __future__ import annotations

import time

from stackctl.doctor.lmcache_live import ask, served_hit, settle
from stackctl.doctor.parsers.lmcache_log import ANSI, Activity, activity, throughput
from stackctl.doctor.registry import Unavailable, check, require_lmcache, failed, passed
from stackctl.knowledge.kinds import kind_of
from stackctl.storage.registry import storage_of

STORE_WAIT_S = 20.0  # remote puts are asynchronous: how long the second ask keeps trying for the tier to answer


def _own_directory(tier, run_id: str) -> str:
    """A directory only one server's index knows (LMCache's local_disk, which outlives no process): a second server
    gets its own ('' for a tier that needs none)."""
    return "" if kind_of(tier).survives_restart else storage_of(tier).fresh_directory(tier, run_id)


def tier_env(tier, run_id: str) -> dict[str, str]:
    """LMCache overrides for a second server proving `tier`: search only it. A disk tier gets a fresh directory
    of its own below the tier's path (two LocalDiskBackends must not share one directory's files)."""
    # The LMCache storage backend names and whether a tier outlives a process: knowledge/kinds.py's records.
    env = {"LMCACHE_RETRIEVE_LOCATIONS": kind_of(tier).backend}
    own = _own_directory(tier, run_id)
    if own:
        env["LMCACHE_LOCAL_DISK"] = f"file://{own}/"
    return env


def prove_tiers(ctx, tiers: list, prompt: list[int]) -> dict[str, dict]:
    """Start one second server per tier, all at once, ask each the stack's prompt twice, and return what LMCache
    logged, by tier kind. Only the log counts here, so the asks want no log-probabilities (and the second servers
    no logprob compile). The asks go one server after another, so no figure is taken while another server works."""
    import shutil
    import uuid

    from stackctl.doctor.clients.second_server import Planned, image_of, second_servers

    from stackctl.engine import docker_adapter as dk
    from stackctl.host.dtype import DTYPE_ENV

    run_id = uuid.uuid4().hex[:8]
    image = image_of(ctx.container())
    # The second server computes in the dtype `up` decided for the stack (its container's variable): without it vLLM
    # picks bf16, which a CPU without native bf16 emulates (minutes a request), and its KV would differ in dtype.
    decided = {k: v for k, v in dk.container_env(ctx.container()).items() if k == DTYPE_ENV}
    planned = [Planned(ctx.spec, f"second-{tier.kind}", {**decided, **tier_env(tier, run_id)}) for tier in tiers]
    started = time.monotonic()
    accounts = {}
    try:
        with second_servers(image, planned, ctx.recipe.checks.startup_timeout_s, ctx.say) as servers:
            start_s = round(time.monotonic() - started, 1)
            for tier, server in zip(tiers, servers):
                asked = time.monotonic()
                first, second = _ask_twice(server, prompt)
                accounts[tier.kind] = {"tier": tier.kind, "first": first, "second": second, "start_s": start_s,
                                       "seconds": round(time.monotonic() - asked, 1)}
    finally:
        for tier in tiers:
            if _own_directory(tier, run_id):
                shutil.rmtree(_own_directory(tier, run_id), ignore_errors=True)
    return accounts


def _ask_twice(server, prompt: list[int]) -> tuple[Activity, Activity]:
    """What the second server's LMCache logged for the stack's prompt (found in the tier, or stored there), then for
    the same prompt again (loaded back from the tier; remote puts are asynchronous, so it is asked again a while)."""
    offset = len(ANSI.sub("", server.log()))
    ask(server.base_url, server.model, prompt, logprobs=False)
    # A tier that holds the prompt loads it (and stores nothing new); one that does not computes and stores it.
    # Waiting for the store line alone cost a tier that held the prompt the whole timeout, 15 s.
    first = activity(settle(server.log, offset, marker=("Stored", "Retrieved")))
    second = Activity()
    deadline = time.monotonic() + STORE_WAIT_S
    while second.retrieved_tokens <= 0 and time.monotonic() < deadline:
        offset = len(ANSI.sub("", server.log()))
        ask(server.base_url, server.model, prompt, logprobs=False)
        second = activity(settle(server.log, offset, marker="Retrieved", timeout=3.0))
        if second.retrieved_tokens <= 0:
            time.sleep(1.0)
    return first, second


def _require_deep(ctx) -> None:
    if not ctx.deep:
        raise Unavailable("runs with --deep only (starts a second server per tier beside the stack)")
    require_lmcache(ctx.spec)


def deep_results(ctx, tiers: list) -> list[dict]:
    """The second servers' accounts for `tiers`, each computed once per doctor run (both checks read them): the tiers
    not proven yet get their second servers together."""
    _require_deep(ctx)
    prompt = served_hit(ctx)["prompt"]  # stored by the stack in every tier first
    proven = ctx.remember("lmcache_deep", dict)  # tier kind -> account, filled as tiers are proven
    todo = [tier for tier in tiers if tier.kind not in proven]
    if todo:
        proven.update(prove_tiers(ctx, todo, prompt))
    return [proven[tier.kind] for tier in tiers]


def lower_tiers(ctx) -> list:
    return [tier for tier in ctx.recipe.cache.tiers if kind_of(tier).lower]


@check("server.tier-served", "server", "error",
       "(--deep) every tier below the CPU tier stores a request's KV and serves it back",
       "read the second server's LMCache lines in the details; check the tier's path, bucket and credentials "
       "(stackctl doctor --scope host,image)")
def tier_served(ctx):
    """The served round trip, per tier: a second server whose LMCache searches only that tier (LMCache 0.5.6
    `retrieve_locations`, lmcache/v1/config.py:159-163) computes a prompt, stores it, and must load it back from
    the tier on the repeat (`Retrieved N out of M required tokens`). The cpu tier is proven on the stack itself
    (server.lmcache-hit). A tier that stores but never loads is reported dead with its store and load counts.
    image.tiers is the fast storage-only check; this one goes through serving."""
    _require_deep(ctx)
    if not lower_tiers(ctx):
        raise Unavailable("no tier below the cpu tier in the recipe (the cpu tier: server.lmcache-hit)")
    results = deep_results(ctx, lower_tiers(ctx))
    lines, dead = [], []
    for item in results:
        stored = item["first"].stored_bytes + item["second"].stored_bytes
        stored_ms = item["first"].store_ms + item["second"].store_ms
        loaded = item["second"]
        # A tier the stack already filled (fs, s3) answers the second server's first ask: it stores nothing new.
        put = (f"stored {throughput(stored, stored_ms)}" if stored else
               f"held the stack's {item['first'].hit_tokens} tokens")
        line = (f"{item['tier']}: {put}, loaded {loaded.retrieved_tokens} tokens, "
                f"{throughput(loaded.retrieved_bytes, loaded.retrieve_ms)}")
        lines.append(line)
        if loaded.retrieved_tokens <= 0:
            dead.append(f"{item['tier']} (stored {item['first'].stored_tokens + item['second'].stored_tokens} "
                        f"tokens, loaded 0)")
    details = {item["tier"]: {"first": item["first"].to_dict(), "second": item["second"].to_dict(),
                              "start_s": item["start_s"], "seconds": item["seconds"]} for item in results}
    if dead:
        return failed(f"dead tier(s): {', '.join(dead)}; " + "; ".join(lines), **details)
    return passed("; ".join(lines), **details)


@check("server.hash-seed-proof", "server", "error",
       "(--deep) a new server process finds the chunks the stack stored (keys agree across processes)",
       "set cache.hash_seed (PYTHONHASHSEED) and run `stackctl up` again: every process of every host sharing a "
       "tier needs the same seed")
def hash_seed_proof(ctx):
    """The seeds' silent failure, caught live: without a fixed PYTHONHASHSEED each server process chains its
    chunk keys from a per-process seed (before vLLM 0.29 init_none_hash draws os.urandom; from 0.29 it hashes the
    fixed string "vllm-none-hash", which LMCache's default `builtin` pre-caching hash, Python's hash(), still turns
    into a per-process value; only sha256 / sha256_cbor there need no seed: knowledge/hash_seed.py, `stackctl explain
    lmcache-hash-seed`), so a restarted server or another host
    computes other keys and gets 0 hits from a shared tier, with no error anywhere. A second server with the
    recipe's environment asks for the prompt the stack stored; on a tier that outlives a process (fs, s3) it must
    hit. LMCache's local_disk keeps its index in process memory (lmcache/v1/storage_backend/local_disk_backend.py:135
    in 0.5.6), so disk is no proof, and 0 hits there are not a seed problem."""
    from stackctl.engine import docker_adapter as dk

    _require_deep(ctx)
    shared = [tier for tier in lower_tiers(ctx) if kind_of(tier).survives_restart]
    if not shared:
        raise Unavailable("no tier outlives a server process (fs, s3): the cpu tier is process memory and LMCache's "
                          "local_disk re-indexes nothing after a restart; image.hash-seed checks the seed itself")
    if served_hit(ctx)["stored"].stored_tokens <= 0:
        raise Unavailable("the stack stored nothing to find (server.lmcache-hit says why)")
    [item] = deep_results(ctx, shared[:1])
    if item["first"].stored_tokens + item["second"].stored_tokens <= 0 and not item["first"].lookups:
        raise Unavailable("the second server's LMCache did nothing (no lookup, no store): see its log")
    hits = item["first"].hit_tokens
    running = dk.container_env(ctx.container()).get("PYTHONHASHSEED")
    wanted = ctx.spec.hash_seed
    details = {"tier": item["tier"], "hit_tokens": hits, "stack_seed": running, "recipe_seed": wanted,
               "lookups": item["first"].lookups}
    if hits > 0:
        return passed(f"a new server process found {hits} tokens the stack stored in the {item['tier']} tier "
                      f"(PYTHONHASHSEED={running})", **details)
    if running is None:
        from stackctl.rules.seed import seed_need

        need = seed_need(ctx.spec)
        cause = ("PYTHONHASHSEED is not set in the stack: each process chains its keys from a random seed, so no "
                 f"other process (a restart, another host) ever hits what it stored ({need.why})" if need.needed else
                 f"PYTHONHASHSEED is not set, which the sources say this configuration does not need ({need.why}); "
                 "yet the keys differ, or the tier lost the chunks")
    elif running != wanted:
        cause = (f"the stack runs PYTHONHASHSEED={running} but the recipe says {wanted}: processes started from the "
                 "recipe compute other keys")
    else:
        cause = (f"PYTHONHASHSEED={running} is set alike, yet the keys differ (pre_caching_hash_algorithm, model or "
                 "chunk size differ?) or the tier lost the chunks")
    return failed(f"0 LMCache hit tokens in a new server process for a prompt the stack stored in the "
                  f"{item['tier']} tier: {cause}", **details)
