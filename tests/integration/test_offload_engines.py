"""LMCache's own server as the offload engine (cache.offload = "lmcache-mp") on vLLM-CPU, for real: serve.sh starts
`lmcache server` in the stack's container before vLLM, vLLM's LMCacheMPConnector reaches it, and doctor proves a
prompt emptied from HBM comes back through it with the recompute's answer. The recipe is recipes/cpu-lmcache.toml
with another name, port and engine, and the cpu tier alone: the same Dockerfile, so the build reuses that image's
layers. The engines that cannot run on platform cpu (vLLM's OffloadingConnector and SimpleCPUOffloadConnector) are
refused by `validate` (rule offload-engine-platform), shown here on the same recipe."""

from __future__ import annotations

import json
import re

import pytest
from helpers import RECIPES, run_cli
from stacks import Stack, replace_outside_comments

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = "cpu-lmcache-mp"
PORT, SERVER_PORT, SERVER_HTTP_PORT = 8120, 8121, 8122


def mp_recipe(folder, offload: str = "lmcache-mp"):
    """recipes/cpu-lmcache.toml with its own name and ports, the offload engine OFFLOAD, and a 1 GiB cpu tier only
    (the LMCache server's L1)."""
    text = (RECIPES / "cpu-lmcache.toml").read_text()
    head, _, rest = text.partition("[[cache.tiers]]")
    tail = rest[rest.index("[host]"):]
    text = head + '[[cache.tiers]]\nkind = "cpu"\nsize_gb = 1\n\n' + tail
    for old, new in {'name = "cpu-lmcache"': f'name = "{NAME}"', "port = 8020": f"port = {PORT}\ndev_endpoints = true",
                     "[cache]\nenabled = true": f'[cache]\nenabled = true\noffload = "{offload}"\n'
                                                f"server_port = {SERVER_PORT}\nserver_http_port = {SERVER_HTTP_PORT}",
                     "hit_test_tokens = 128": "hit_test_tokens = 512"}.items():
        text = replace_outside_comments(text, old, new, "cpu-lmcache.toml")
    path = folder / f"{NAME}-{offload}.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def mp_stack(docker_engine, stack_env, tmp_path_factory):
    stack = Stack(mp_recipe(tmp_path_factory.mktemp("offload")), stack_env)
    stack.up()
    yield stack
    stack.down()


def test_lmcache_server_serves_a_prompt_emptied_from_hbm(mp_stack):
    result = mp_stack.cli("doctor", mp_stack.recipe, "--scope", "server", "--format", "json", timeout=1800)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    results = {r["id"]: r for r in json.loads(result.stdout)["results"]}
    server, hit = results["server.lmcache-server"], results["server.offload-hit"]
    assert server["status"] == "pass", server["message"]
    assert server["details"]["l1_bytes"] == 1 << 30
    assert hit["status"] == "pass", hit["message"]
    details = hit["details"]
    assert details["external_hits"] > 0 and details["stored_objects"] > 0 and details["server_retrieved_tokens"] > 0
    assert details["from_offload"] == details["recomputed"] == details["from_hbm"]
    # The checks of LMCache in the server process skip, and say why.
    for check_id in ("server.lmcache-initialised", "server.lmcache-hit", "server.lmcache-hit-correct"):
        assert results[check_id]["status"] == "skip", results[check_id]
        assert "lmcache-mp" in results[check_id]["message"], results[check_id]["message"]


def test_lmcache_server_runs_in_the_stack_container_with_its_own_log_lines(mp_stack, docker_engine):
    logs = run_cli("logs", mp_stack.recipe, "--tail", "0", env=mp_stack.env, timeout=120)
    text = logs.stdout + logs.stderr
    assert re.search(r"^\[lmcache-server\] .*LMCache zmq cache server is running on 127\.0\.0\.1:8121", text, re.M), \
        text[-3000:]
    assert "stackctl: LMCache server up" in text


@pytest.mark.parametrize("offload", ["vllm-native", "vllm-simple"])
def test_vllm_own_offload_is_refused_on_platform_cpu(tmp_path, stack_env, offload):
    result = run_cli("validate", str(mp_recipe(tmp_path, offload)), env=stack_env, timeout=120)
    assert result.returncode != 0
    assert f"error[offload-engine-platform] cache.offload: offload engine '{offload}' does not run on platform cpu" \
        in result.stdout + result.stderr


def test_bench_probe_measures_the_lmcache_server_arm(mp_stack, tmp_path):
    """bench --probe's offload arm: HBM emptied, the same salt again; the server counts the repeat as the
    connector's hits (hit rate from /metrics, a gate on what was served, not on time)."""
    result = mp_stack.cli("bench", mp_stack.recipe, "--probe", "--tokens", "513", "--runs", "2",
                          "--min-hit-rate", "0.5", "-o", str(tmp_path), timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe["cache_arm"] == "offload" and "lmcache" not in probe["arms"]
    assert probe["arms"]["offload"]["hit_rate"] >= 0.5
