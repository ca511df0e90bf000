"""Pinning on the real engine: the live vLLM server's processes run exactly where the pinning decision says.

This machine has one NUMA node and CPUs 0-1. A variant of cpu-smoke (own name and port) is brought up with
`isolcpus = "0-1"`, then `"1"` (a runtime change: the container is replaced, the image kept); the test reads each
server process's Cpus_allowed_list from /proc inside the container itself and compares with `doctor`'s
server.pinning. A CPU the host lacks is refused before any container starts; a cpuset changed after the start
(`docker update`) and an image without numactl fail server.pinning.
"""

from __future__ import annotations

import json
import time

import pytest
from helpers import run_cli
from stacks import Stack, variant

from stackctl.doctor.affinity import PROC_SCRIPT, parse_proc
from stackctl.host.cpulist import parse_cpulist

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NAME = "cpu-smoke-pin"
CONTAINER = f"stackctl-{NAME}"


def pinned_recipe(tmp_path, cpus: str):
    return variant(tmp_path, f"pin-{cpus}", {'name = "cpu-smoke"': f'name = "{NAME}"', "port = 8000": "port = 8032",
                                              'isolcpus = "auto"': f'isolcpus = "{cpus}"'})


def server_processes(docker_engine):
    """PID 1 of the container and its descendants, read from /proc inside the container."""
    output = docker_engine.containers.get(CONTAINER).exec_run(["sh", "-c", PROC_SCRIPT]).output.decode()
    return parse_proc(output).processes


def pinning_result(env, recipe) -> dict:
    result = run_cli("doctor", str(recipe), "--scope", "server", "--format", "json", env=env, timeout=600)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    (check,) = [r for r in json.loads(result.stdout)["results"] if r["id"] == "server.pinning"]
    return check


@pytest.fixture
def pin_stack(docker_engine, stack_env, tmp_path):
    stack = Stack(pinned_recipe(tmp_path, "0-1"), stack_env)
    yield stack
    stack.down()
    assert docker_engine.containers.list(all=True, filters={"name": CONTAINER}) == []


def test_a_cpu_the_host_lacks_is_refused_before_any_container_starts(docker_engine, stack_env, tmp_path):
    recipe = pinned_recipe(tmp_path, "7")
    result = run_cli("up", str(recipe), env=stack_env, timeout=600)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"stackctl: {recipe}:") and "host.isolcpus: names CPU(s) 7 this host does not have" in line
    assert "(fix: " in line
    assert docker_engine.containers.list(all=True, filters={"name": CONTAINER}) == []


def test_live_server_affinity_equals_the_decision(docker_engine, stack_env, tmp_path, pin_stack):
    # Both CPUs: the server process has exactly 0-1; vLLM's CPU worker may bind itself to part of them.
    both = pinned_recipe(tmp_path, "0-1")
    dry = run_cli("up", str(both), "--dry-run", env=stack_env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["cpuset_cpus"] == "0-1"
    assert "pinning: launcher: numactl --physcpubind=0-1 python -m vllm" in dry.stderr
    assert pin_stack.recipe == str(both)
    pin_stack.up()
    first = docker_engine.containers.get(CONTAINER)
    processes = server_processes(docker_engine)
    assert processes[0].pid == 1 and processes[0].cpus == {0, 1} and len(processes) >= 2
    assert all(p.cpus <= {0, 1} and p.cpus for p in processes)
    assert docker_engine.containers.get(CONTAINER).attrs["HostConfig"]["CpusetCpus"] == "0-1"
    check = pinning_result(stack_env, both)
    assert check["status"] == "pass", check
    assert check["details"]["placement"]["cpus"] == "0-1" and "on CPUs 0-1" in check["message"]

    # CPU 1 only: every process of the server, read from /proc by this test and by doctor, is on exactly CPU 1.
    # A runtime-only change: the container is replaced, the image is not rebuilt.
    one = pinned_recipe(tmp_path, "1")
    pin_stack.recipe = str(one)
    started = time.monotonic()
    replaced = pin_stack.up()
    assert time.monotonic() - started < 900  # a replacement, not a rebuild (the bound test_stack.py's test had)
    assert "up to date" in replaced.stderr and f"replacing {CONTAINER}" in replaced.stderr, replaced.stderr[-3000:]
    second = docker_engine.containers.get(CONTAINER)
    assert second.id != first.id and second.image.id == first.image.id
    processes = server_processes(docker_engine)
    assert [p.cpus for p in processes] == [{1}] * len(processes) and len(processes) >= 2
    check = pinning_result(stack_env, one)
    assert check["status"] == "pass", check
    assert "on CPUs 1 (node 0)" in check["message"]
    assert {p["pid"]: parse_cpulist(p["cpus"]) for p in check["details"]["processes"]} == \
        {p.pid: sorted(p.cpus) for p in processes}
    assert "stackctl: launcher: numactl --physcpubind=1" in docker_engine.containers.get(CONTAINER).logs().decode()

    # Drift: the cpuset changed under the running server fails the check, naming the process and both lists.
    docker_engine.containers.get(CONTAINER).update(cpuset_cpus="0")
    check = pinning_result(stack_env, one)
    assert check["status"] == "fail", check
    assert "container cpuset cpus 0, asked for 1" in check["message"]
    assert "(pid 1) has CPUs 0, asked for 1" in check["message"]

    # An image without numactl: serve.sh would have fallen back to taskset; doctor fails and says so.
    docker_engine.containers.get(CONTAINER).update(cpuset_cpus="1")
    moved = docker_engine.containers.get(CONTAINER).exec_run(["mv", "/usr/bin/numactl", "/usr/bin/numactl.away"])
    assert moved.exit_code == 0, moved.output
    check = pinning_result(stack_env, one)
    assert check["status"] == "fail" and "numactl is not in the image" in check["message"], check
