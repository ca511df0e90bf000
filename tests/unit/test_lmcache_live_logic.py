"""The live LMCache checks' judgment on recorded server accounts: LMCache's log lines (in LMCache 0.5.6's formats,
lmcache/integration/vllm/vllm_v1_adapter.py:1476 and lmcache/v1/cache_engine.py:588, :985) and counter deltas
from /metrics. The same checks run against a real LMCache stack in tests/integration/test_lmcache_live.py and
fail on real faults in tests/faults/test_lmcache_faults.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_engine import FakeEngine
from helpers import RECIPES

from stackctl.doctor.parsers import lmcache_log
from stackctl.doctor.lmcache_deep import tier_env
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS, Unavailable
from stackctl.doctor.clients.second_server import derived_recipe
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec
from stackctl.engine.records import ContainerState

load_all()

LOOKUP = ("[2026-11-24 18:01:02,345] LMCache INFO: Reqid: cmpl-{id}-0, Total tokens {total}, Inference Engine "
          "computed tokens: 0, LMCache hit tokens: {hit}, need to load: {hit} (vllm_v1_adapter.py:1476:lmcache)")
STORED = ("[2026-11-24 18:01:03,100] LMCache INFO: [req_id=cmpl-{id}-0] Stored {n} out of total {n} tokens. "
          "size: {gb} GB, cost {ms} ms, throughput: 0.4000 GB/s; offload_time: 80.0000 ms, put_time: 13.0000 ms")
RETRIEVED = ("[2026-11-24 18:01:04,200] LMCache INFO: [req_id=cmpl-{id}-0] Retrieved {n} out of {n} required tokens "
             "(from {total} total tokens). size: {gb} gb, cost {ms} ms, throughput: 0.7000 GB/s;")


def lines(*templates_and_values) -> str:
    return "\n".join(template.format(**values) for template, values in templates_and_values) + "\n"


def stored(n=768, gb="0.0176", ms="93.0000", total=1000):
    return lines((LOOKUP, {"id": 1, "total": total, "hit": 0}), (STORED, {"id": 1, "n": n, "gb": gb, "ms": ms}))


def loaded(n=768, gb="0.0176", ms="56.0000", total=1000):
    return lines((LOOKUP, {"id": 2, "total": total, "hit": n}),
                 (RETRIEVED, {"id": 2, "n": n, "gb": gb, "ms": ms, "total": total}))


def recipe():
    return load_recipe(RECIPES / "cpu-lmcache.toml")


@pytest.fixture(autouse=True)
def engine(monkeypatch):
    """The fake engine these tests run on: the stack's container, as the checks read it, is one of its containers."""
    engine = FakeEngine().install(monkeypatch)
    monkeypatch.setattr(Context, "engine", engine, raising=False)
    monkeypatch.setattr(StubServerContext, "engine", engine, raising=False)
    return engine


def stack_container(engine, env: dict, pid: int = 0):
    """The stack's container: its environment, its image; pid 0, so this machine's /proc does not hold it."""
    engine.add_container("stack", image="sha256:abc", env=env, state=ContainerState(status="running", pid=pid))
    return engine.find_container(engine.client(), "stack")


class Context:
    """What the live checks read: the recipe, recorded results under their cache keys, the stack's container."""

    def __init__(self, recipe, recorded=None, deep=False, env=None):
        self.recipe, self.deep, self._recorded = recipe, deep, recorded or {}
        self.spec = StackSpec(self.recipe)
        self._env = {"PYTHONHASHSEED": "0"} if env is None else env

    def remember(self, key, compute):
        if key not in self._recorded:
            raise Unavailable(f"nothing recorded for {key}")
        return self._recorded[key]

    def container(self):
        return stack_container(self.engine, self._env)


def answer(tokens=("w5", "w9"), logprobs=(-1.2, -0.7), ttft=1.3, top=None):
    """A parsed completion; `top` the most likely tokens' log-probabilities at each step (by default the chosen token
    and one other, a nat below it)."""
    top = top or [{token: value, "w1": value - 1.0} for token, value in zip(tokens, logprobs)]
    return {"ttft_s": ttft, "text": " " + " ".join(tokens), "tokens": list(tokens), "logprobs": list(logprobs),
            "top_logprobs": top, "usage": {"prompt_tokens": 1000}}


def served(stored_log=None, loaded_log=None, external=768.0, warm=None, cold=None):
    return {"prompt": [9, 10], "prompt_tokens": 1000, "cold": cold or answer(logprobs=(-1.25, -0.7)),
            "hbm": answer(ttft=0.1), "warm": warm or answer(ttft=0.28),
            "stored": lmcache_log.activity(stored() if stored_log is None else stored_log),
            "loaded": lmcache_log.activity(loaded() if loaded_log is None else loaded_log),
            "external_hits": external}


def run(check_id, context):
    return CHECKS[check_id].run(context)


# -- the log account ----------------------------------------------------------------------------------------------

def test_activity_sums_lmcaches_lookup_store_and_load_lines_colour_codes_and_all():
    text = "\x1b[32m" + stored() + "\x1b[0m" + loaded() + "an unrelated line\n"
    seen = lmcache_log.activity(text)
    assert seen.lookups == [(1000, 0, 0), (1000, 768, 768)] and seen.hit_tokens == 768
    assert (seen.stored_tokens, seen.retrieved_tokens) == (768, 768)
    assert seen.stored_bytes == round(0.0176 * 1024 ** 3) and seen.store_ms == 93.0
    assert lmcache_log.throughput(41_000_000, 93.0) == "41.0 MB in 93 ms (0.44 GB/s)"
    assert lmcache_log.throughput(41_000_000, 0) == "41.0 MB"


# -- server.lmcache-hit -------------------------------------------------------------------------------------------

def test_lmcache_hit_passes_only_on_lmcaches_own_load_and_the_servers_counter():
    result = run("server.lmcache-hit", Context(recipe(), {"lmcache_served": served()}))
    assert result.status == "pass"
    assert result.message.startswith("768/1000 prompt tokens loaded from LMCache (the cpu tier answers first); "
                                     "store 18.9 MB in 93 ms (0.20 GB/s), load 18.9 MB in 56 ms (0.34 GB/s); TTFT "
                                     "1300 ms cold (prefill rate unknown: nothing recorded for prefill-floor), 280 "
                                     "ms from LMCache")


class StubServerContext:
    """The live checks' view of a server, with the HTTP side the local stub (tests/openai_stub.py) and a log that
    gains LMCache's store and load lines on every read."""

    def __init__(self, url, deep=False):
        self.recipe, self.base_url, self.reads, self.deep = recipe(), url, 0, deep
        self.spec = StackSpec(self.recipe)

    def require_healthy(self):
        pass

    def metrics(self):
        from stackctl.httpclient import get_text
        return get_text(f"{self.base_url}/metrics")

    def log_mark(self):
        return self.reads

    def log_since(self, mark):
        self.reads += 1
        return stored() + loaded()

    def remember(self, key, compute):
        return compute()

    def container(self):  # a container this machine's /proc does not hold: the warm-up's pause is the fixed one
        return stack_container(self.engine, {})


def test_the_served_hit_warms_the_server_up_before_timing_the_cold_prompt(monkeypatch):
    """The cold TTFT is the prompt's prefill, not a fresh server's first-request warm-up (seconds on vLLM-CPU): a
    request with another prompt of the same length goes first, its background tier writes are let finish, then the
    prompt under salt A, A again, and another salt."""
    from openai_stub import Server

    from stackctl.doctor import lmcache_live
    from stackctl.doctor.lmcache_live import WARM_UP_DRAIN_S, served_hit

    pauses: list[float] = []
    monkeypatch.setattr(lmcache_live.time, "sleep", pauses.append)
    with Server(caches=True, lmcache=True) as stub:
        result = served_hit(StubServerContext(stub.url))
    assert pauses[:1] == [WARM_UP_DRAIN_S]  # before the cold request, not after it
    asked = [body for path, body in stub.received if path == "/v1/completions"]
    assert len(asked) == 4
    warm_up, cold, hbm, warm = asked
    assert len(warm_up["prompt"]) == len(result["prompt"]) and warm_up["prompt"] != result["prompt"]
    assert cold["prompt"] == hbm["prompt"] == warm["prompt"] == result["prompt"]
    assert cold["cache_salt"] == hbm["cache_salt"] != warm["cache_salt"]
    assert result["external_hits"] == len(result["prompt"]) * stub.hit_share  # only the repeat under salt B
    # Each request decodes one token (its TTFT, the load and the first token's distribution are the proof) and
    # asks for the five most likely tokens' log-probabilities, which come back parsed.
    assert {(body["max_tokens"], body["logprobs"]) for body in asked[1:]} == {(1, 5)}
    assert list(result["phases_s"]) == ["prompt", "cold", "stored", "hbm", "warm", "loaded"]  # where time went
    assert result["warm"]["tokens"] == [" w5"] and len(result["warm"]["top_logprobs"][0]) == 6


def test_deep_decodes_eight_tokens_for_the_comparison():
    from openai_stub import Server

    from stackctl.doctor.lmcache_live import GENERATED_TOKENS, served_hit

    with Server(caches=True, lmcache=True) as stub:
        served_hit(StubServerContext(stub.url, deep=True))
    asked = [body for path, body in stub.received if path == "/v1/completions"]
    assert {body["max_tokens"] for body in asked[1:]} == {GENERATED_TOKENS}


def test_a_server_that_has_finished_a_request_is_not_warmed_up_again(monkeypatch):
    """The warm-up is a fresh server's one-time cost; vLLM's own `vllm:request_success_total` says it is paid, and
    doctor then sends only the three requests of the proof, with no pause (a warm doctor stays fast)."""
    from openai_stub import Server

    from stackctl.doctor import lmcache_live
    from stackctl.doctor.lmcache_live import WARM_UP_DRAIN_S, has_finished_a_request, served_hit

    pauses: list[float] = []
    monkeypatch.setattr(lmcache_live.time, "sleep", pauses.append)
    with Server(caches=True, lmcache=True) as stub:
        served_hit(StubServerContext(stub.url))
        stub.received.clear()
        pauses.clear()
        served_hit(StubServerContext(stub.url))
    assert WARM_UP_DRAIN_S not in pauses
    asked = [body["prompt"] for path, body in stub.received if path == "/v1/completions"]
    assert len(asked) == 3 and asked[0] == asked[1] == asked[2]  # the proof's prompt only: no warm-up
    assert not has_finished_a_request("vllm:request_success_total{finished_reason=\"length\"} 0.0\n")
    assert not has_finished_a_request("vllm:other 3\n")  # no counter: warm up, as on a fresh server


def test_lmcache_hit_fails_when_nothing_was_stored_or_loaded_or_counted():
    nothing_stored = served(stored_log=lines((LOOKUP, {"id": 1, "total": 1000, "hit": 0})))
    result = run("server.lmcache-hit", Context(recipe(), {"lmcache_served": nothing_stored}))
    assert (result.status, result.message) == ("fail", "LMCache stored nothing for a 1000-token prompt (no `Stored` "
                                                       "line)")
    missed = served(loaded_log=lines((LOOKUP, {"id": 2, "total": 1000, "hit": 0})), external=0.0)
    result = run("server.lmcache-hit", Context(recipe(), {"lmcache_served": missed}))
    assert result.status == "fail"
    assert result.message == ("the repeat was not loaded from LMCache: lookup hit 0 tokens, retrieved 0, "
                              "vllm:external_prefix_cache_hits_total +0 (stored 768 before)")
    uncounted = served(external=0.0)  # the log says loaded, the server's counter does not: no pass
    assert run("server.lmcache-hit", Context(recipe(), {"lmcache_served": uncounted})).status == "fail"


def test_lmcache_hit_skips_without_lmcache_or_without_the_counter():
    smoke = load_recipe(RECIPES / "cpu-smoke.toml")
    assert run("server.lmcache-hit", Context(smoke)).message == "LMCache is off in the recipe"
    result = run("server.lmcache-hit", Context(recipe(), {"lmcache_served": served(external=None)}))
    assert (result.status, result.message) == ("skip", "vllm:external_prefix_cache_hits_total is not in /metrics")


# -- server.lmcache-hit-correct -----------------------------------------------------------------------------------

def test_a_loaded_answer_must_equal_the_answer_from_vllms_own_cache_of_the_same_prefix():
    result = run("server.lmcache-hit-correct", Context(recipe(), {"lmcache_served": served()}))
    assert (result.status, result.message) == ("pass", "2 generated tokens identical to the HBM answer, "
                                                       "log-probabilities of the 5 most likely tokens within 0.0000 "
                                                       "(same as the recompute: within 0.050)")
    wrong = served(warm=answer(tokens=("w5", "w7")))
    result = run("server.lmcache-hit-correct", Context(recipe(), {"lmcache_served": wrong}))
    assert result.status == "fail"
    assert result.message == ("LMCache's answer differs from the HBM answer at generated token 1: ' w5 w9' from "
                              "HBM, ' w5 w7' from LMCache")
    drifted = served(warm=answer(logprobs=(-1.2, -0.71)))
    result = run("server.lmcache-hit-correct", Context(recipe(), {"lmcache_served": drifted}))
    assert result.status == "fail" and "differ by up to 0.0100 (more than float noise" in result.message
    unloaded = served(loaded_log=lines((LOOKUP, {"id": 2, "total": 1000, "hit": 0})))
    result = run("server.lmcache-hit-correct", Context(recipe(), {"lmcache_served": unloaded}))
    assert result.status == "skip"


def test_one_decoded_token_is_judged_by_the_most_likely_tokens_log_probabilities():
    """Without --deep the proof decodes one token: the same greedy token is not enough, the distribution it was
    picked from must be HBM's too (a wrong prefix moves the runners-up first)."""
    one = answer(tokens=("w5",), logprobs=(-1.2,), top=[{"w5": -1.2, "w7": -1.9, "w8": -2.5}])
    result = run("server.lmcache-hit-correct", Context(recipe(), {"lmcache_served": {**served(warm=one),
                                                                                     "hbm": one}}))
    assert (result.status, result.message.split(" (")[0]) == (
        "pass", "the generated token identical to the HBM answer, log-probabilities of the 5 most likely tokens "
                "within 0.0000")
    moved = answer(tokens=("w5",), logprobs=(-1.2,), top=[{"w5": -1.2, "w7": -1.5, "w8": -2.5}])
    result = run("server.lmcache-hit-correct", Context(recipe(), {"lmcache_served": {**served(warm=moved),
                                                                                     "hbm": one}}))
    assert result.status == "fail" and "differ by up to 0.4000" in result.message
    bare = {**one, "tokens": [], "logprobs": [], "top_logprobs": []}  # a server that sent no log-probabilities
    result = run("server.lmcache-hit-correct", Context(recipe(), {"lmcache_served": {**served(warm=bare),
                                                                                     "hbm": bare}}))
    assert result.status == "skip" and "no generated tokens with log-probabilities" in result.message


def test_the_log_probability_difference_reads_the_top_lists_edge_as_a_bound():
    from stackctl.doctor.lmcache_live import logprob_delta

    hbm = answer(tokens=("a",), logprobs=(-1.0,), top=[{"a": -1.0, "b": -2.0, "c": -3.0}])
    tie = answer(tokens=("a",), logprobs=(-1.0,), top=[{"a": -1.0, "b": -2.0, "d": -3.0}])  # c and d swap at the edge
    assert logprob_delta(hbm, tie) == 0.0
    climbed = answer(tokens=("a",), logprobs=(-1.0,), top=[{"a": -1.0, "b": -2.0, "d": -2.5}])  # d above hbm's edge
    assert logprob_delta(hbm, climbed) == 0.5
    assert logprob_delta(answer(), answer(logprobs=(-1.2, -0.75))) == 0.050000000000000044


def test_the_hit_prompt_is_whole_blocks_and_chunks_plus_one_token():
    from stackctl.doctor.lmcache_live import aligned_length, block_size

    assert aligned_length(1000, 128, 256) == 769 and aligned_length(100, 16, 256) == 257
    assert aligned_length(2000, 16, 256) == 1793
    text = 'vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto"} 1.0\n'
    assert block_size(text) == 128 and block_size("vllm:other 1\n") is None


# -- --deep: server.tier-served and server.hash-seed-proof ----------------------------------------------------------

def deep(first_hits=768, second_loads=768):
    """Per tier: the second server's first ask (hits = found what the stack stored) and its repeat (loads)."""
    def account(kind):
        first = lmcache_log.activity(lines((LOOKUP, {"id": 3, "total": 1000, "hit": first_hits if kind != "disk"
                                                     else 0})) + stored())
        second = lmcache_log.activity(loaded(n=second_loads) if second_loads else
                                      lines((LOOKUP, {"id": 4, "total": 1000, "hit": 0})))
        return {"tier": kind, "first": first, "second": second, "start_s": 40.0, "seconds": 3.0}
    return {"lmcache_deep": {kind: account(kind) for kind in ("disk", "fs", "s3")}}


def test_deep_checks_skip_unless_deep_and_lmcache():
    assert run("server.tier-served", Context(recipe())).message.startswith("runs with --deep only")
    smoke = load_recipe(RECIPES / "cpu-smoke.toml")
    assert run("server.hash-seed-proof", Context(smoke, deep=True)).message == "LMCache is off in the recipe"


def test_every_lower_tier_must_load_back_what_it_stored():
    recorded = {"lmcache_served": served(), **deep()}
    result = run("server.tier-served", Context(recipe(), recorded, deep=True))
    assert result.status == "pass" and set(result.details) == {"disk", "fs", "s3"}
    assert result.message.startswith("disk: stored 18.9 MB in 93 ms (0.20 GB/s), loaded 768 tokens, 18.9 MB in 56 ms")
    dead = {"lmcache_served": served(), **deep(second_loads=0)}
    result = run("server.tier-served", Context(recipe(), dead, deep=True))
    assert result.status == "fail"
    assert result.message.startswith("dead tier(s): disk (stored 768 tokens, loaded 0), fs (stored 768 tokens, "
                                     "loaded 0), s3 (stored 768 tokens, loaded 0); ")


def test_hash_seed_proof_names_the_cause_of_zero_hits_in_a_new_process():
    recorded = {"lmcache_served": served(), **deep()}
    result = run("server.hash-seed-proof", Context(recipe(), recorded, deep=True))
    assert (result.status, result.message) == ("pass", "a new server process found 768 tokens the stack stored in "
                                                       "the fs tier (PYTHONHASHSEED=0)")
    missed = {"lmcache_served": served(), **deep(first_hits=0)}
    result = run("server.hash-seed-proof", Context(recipe(), missed, deep=True, env={}))
    assert result.status == "fail" and "PYTHONHASHSEED is not set in the stack" in result.message
    result = run("server.hash-seed-proof", Context(recipe(), missed, deep=True, env={"PYTHONHASHSEED": "7"}))
    assert "the stack runs PYTHONHASHSEED=7 but the recipe says 0" in result.message
    result = run("server.hash-seed-proof", Context(recipe(), missed, deep=True))
    assert "is set alike, yet the keys differ" in result.message


def test_hash_seed_proof_skips_where_no_tier_outlives_a_process():
    only_local = recipe()
    only_local.cache.tiers = [t for t in only_local.cache.tiers if t.kind in ("cpu", "disk")]
    result = run("server.hash-seed-proof", Context(only_local, {"lmcache_served": served()}, deep=True))
    assert result.status == "skip" and "local_disk re-indexes nothing after a restart" in result.message


def test_the_second_server_searches_only_its_tier_and_keeps_the_stack_untouched():
    stack = recipe()
    disk = stack.tiers_of("disk")[0]
    assert tier_env(disk, "abc") == {"LMCACHE_RETRIEVE_LOCATIONS": "LocalDiskBackend",
                                     "LMCACHE_LOCAL_DISK": "file:///tmp/stackctl-tiers/disk/stackctl-second-abc/"}
    assert tier_env(stack.tiers_of("s3")[0], "abc") == {"LMCACHE_RETRIEVE_LOCATIONS": "RemoteBackend"}
    second = derived_recipe(stack, "second-disk", 18123, tier_env(disk, "abc"))
    assert (second.stack.name, second.serve.port) == ("cpu-lmcache-second-disk", 18123)
    assert second.serve.env["LMCACHE_RETRIEVE_LOCATIONS"] == "LocalDiskBackend"
    assert (stack.stack.name, stack.serve.port, stack.serve.env) == ("cpu-lmcache", 8020, {})


def test_hash_seed_proof_does_not_blame_the_seed_when_the_stack_stored_nothing():
    """A degraded stack stores nothing: 0 hits in a new process then say nothing about the seed."""
    nothing = served(stored_log=lines((LOOKUP, {"id": 1, "total": 1000, "hit": 0})))
    result = run("server.hash-seed-proof", Context(recipe(), {"lmcache_served": nothing, **deep()}, deep=True))
    assert (result.status, result.message) == ("skip", "the stack stored nothing to find (server.lmcache-hit says "
                                                       "why)")


def test_a_second_server_computes_in_the_dtype_up_decided_for_the_stack(monkeypatch, engine):
    """On a CPU without native bf16 the stack runs float32 by up's decision (its container's STACKCTL_DTYPE); the
    second server of --deep gets the same variable, or vLLM would serve it bf16, emulated. The Docker edge is faked:
    the running container (the fake engine's) and the second server itself."""
    from contextlib import contextmanager

    from stackctl.doctor import lmcache_deep
    from stackctl.doctor.clients import second_server

    started = {}

    @contextmanager
    def fake_second_servers(image, planned, timeout, say):
        started.update(planned[0].env)
        raise Unavailable("stop here: the environment is what this test reads")
        yield  # pragma: no cover - a generator for contextmanager

    monkeypatch.setattr(second_server, "second_servers", fake_second_servers)
    running = stack_container(engine, {"STACKCTL_DTYPE": "float32", "PYTHONHASHSEED": "0", "OTHER": "x"})
    stack = recipe()
    ctx = type("Ctx", (), {"recipe": stack, "spec": StackSpec(stack), "container": lambda self: running,
                           "say": lambda self, m: None})()
    tier = stack.tiers_of("fs")[0]
    try:
        lmcache_deep.prove_tiers(ctx, [tier], [1, 2, 3])
    except Unavailable:
        pass
    assert started["STACKCTL_DTYPE"] == "float32" and "OTHER" not in started
    assert set(tier_env(tier, "x")) <= set(started)  # the tier's own settings still go on top


def test_a_second_servers_asks_want_no_log_probabilities(monkeypatch, engine):
    """--deep's second servers are judged by LMCache's log alone. A request with log-probabilities makes a new
    vLLM-CPU server compile its logprob op first (16-18 s each, three second servers a run), so their asks go
    without. The Docker edge and the HTTP edge are faked: the second server, and `ask`."""
    from contextlib import contextmanager

    from stackctl.doctor import lmcache_deep
    from stackctl.doctor.clients import second_server

    asked, log = [], [""]
    lines = ["Stored 128 out of total 129 tokens. size: 0.01 GB, cost 1.0 ms",
             "Retrieved 128 out of 128 required tokens (from 129 total tokens). size: 0.01 gb, cost 1.0 ms"]
    server = type("Server", (), {"base_url": "http://127.0.0.1:1", "model": "m", "log": lambda self: log[0]})()

    def ask(url, model, prompt, **options):  # the server logs its store, then its load
        asked.append(options)
        log[0] += lines[min(len(asked), 2) - 1] + "\n"

    @contextmanager
    def fake_second_servers(image, planned, timeout, say):
        yield (server,)

    monkeypatch.setattr(second_server, "second_servers", fake_second_servers)
    monkeypatch.setattr(lmcache_deep, "ask", ask)
    running = stack_container(engine, {})
    stack = recipe()
    ctx = type("Ctx", (), {"recipe": stack, "spec": StackSpec(stack), "container": lambda self: running,
                           "say": lambda self, m: None})()
    result = lmcache_deep.prove_tiers(ctx, stack.tiers_of("fs"), [1, 2, 3])["fs"]
    assert result["second"].retrieved_tokens == 128
    assert asked == [{"logprobs": False}, {"logprobs": False}]


def test_the_tiers_second_servers_start_together_once_and_are_asked_one_after_another(monkeypatch, engine):
    """Each second server's start is most of its time: every lower tier's server starts at once (one
    second_servers call), each is asked in turn, and server.hash-seed-proof then reuses the fs tier's account."""
    from contextlib import contextmanager

    from stackctl.doctor import lmcache_deep
    from stackctl.doctor.clients import second_server

    starts, asked = [], []

    class Server:
        base_url, model = "http://127.0.0.1:1", "m"

        def __init__(self, label):
            self.label, self.text = label, ""

        def log(self):
            return self.text

    @contextmanager
    def fake_second_servers(image, planned, timeout, say):
        starts.append([plan.label for plan in planned])
        yield tuple(Server(plan.label) for plan in planned)

    def ask(url, model, prompt, **options):
        server = current[0]
        asked.append(server.label)
        server.text += stored() + loaded()  # what the tier found, and stored

    current: list = []
    original = lmcache_deep._ask_twice

    def ask_twice(server, prompt):
        current[:] = [server]
        return original(server, prompt)

    monkeypatch.setattr(second_server, "second_servers", fake_second_servers)
    monkeypatch.setattr(lmcache_deep, "ask", ask)
    monkeypatch.setattr(lmcache_deep, "_ask_twice", ask_twice)
    stack_container(engine, {"PYTHONHASHSEED": "0"})
    ctx = Context(recipe(), {"lmcache_served": served()}, deep=True)
    ctx.remember = lambda key, compute, kept={}: kept.setdefault(key, compute()) if key != "lmcache_served" \
        else served()
    ctx.say = lambda message: None
    assert run("server.tier-served", ctx).status == "pass"
    assert starts == [["second-disk", "second-fs", "second-s3"]]
    assert asked == ["second-disk", "second-disk", "second-fs", "second-fs", "second-s3", "second-s3"]
    assert run("server.hash-seed-proof", ctx).status == "pass"
    assert len(starts) == 1  # the fs tier's account was kept: no second server started again


def test_second_servers_are_all_removed_when_one_never_becomes_healthy(monkeypatch, engine):
    """Started together, removed together: a server that fails its start takes the others' containers and bundles
    with it, and none is left in the engine."""
    from stackctl.doctor.clients import second_server
    from stackctl.engine import health
    from stackctl.errors import StackctlError

    def wait_for_health(name, url, container, timeout, say):
        if name.endswith("second-fs"):
            raise StackctlError(f"{name} did not become healthy")

    made, real_mkdtemp = [], second_server.tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(health, "wait_for_health", wait_for_health)
    monkeypatch.setattr(second_server.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setenv("STACKCTL_S3_ACCESS_KEY", "test-access")  # the recipe's S3 tier reads its keys from these
    monkeypatch.setenv("STACKCTL_S3_SECRET_KEY", "test-secret")
    spec = StackSpec(recipe())
    planned = [second_server.Planned(spec, f"second-{kind}", {}) for kind in ("disk", "fs", "s3")]
    with pytest.raises(StackctlError, match="second-fs did not become healthy"):
        with second_server.second_servers("sha256:abc", planned, 60, lambda message: None):
            raise AssertionError("not reached: one server never became healthy")
    assert [name for name, _ in engine.calls if name == "run_detached"] == ["run_detached"] * 3
    assert engine.container_records == {}
    assert len(made) >= 3 and not [path for path in made if Path(path).exists()]


def test_the_log_settles_at_the_first_of_several_markers():
    """A second server's first ask ends in LMCache's store line (the tier missed) or its retrieve line (the tier held
    the prompt): waiting for the store line alone cost a tier that held it the whole timeout."""
    from stackctl.doctor.lmcache_live import settle

    reads = []

    def read_log():
        reads.append(1)
        return "old line\n" + loaded()

    assert "Retrieved 768" in settle(read_log, len("old line\n"), marker=("Stored", "Retrieved"), timeout=60)
    assert len(reads) == 1  # found at the first read: no wait
    reads.clear()
    assert "Stored" not in settle(read_log, 0, marker="Stored", timeout=0.0)  # not there: returned at the timeout
