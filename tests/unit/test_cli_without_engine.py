"""The lifecycle commands through the real CLI on a machine where no Docker engine answers (DOCKER_HOST names a
socket path where nothing listens): one line naming the address and the fix, exit 2, nothing recorded. `up --dry-run`
needs no engine: it prints the docker-py arguments. bench --probe without a server says where it looked."""

from __future__ import annotations

import json
import os
import socket

import pytest
from helpers import RECIPES, run_cli


@pytest.fixture
def no_engine(tmp_path):
    return dict(os.environ, STACKCTL_STATE_DIR=str(tmp_path / "state"), DOCKER_HOST=f"unix://{tmp_path}/none.sock")


@pytest.mark.parametrize("args", [["status"], ["status", "cpu-smoke"], ["down", "cpu-smoke"], ["logs", "cpu-smoke"],
                                  ["build", "cpu-smoke"], ["up", "cpu-smoke"], ["rollback", "cpu-smoke"]],
                         ids=lambda a: " ".join(a))
def test_no_engine_is_one_line_and_exit_2(args, no_engine, tmp_path):
    result = run_cli(*args, env=no_engine)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("stackctl: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    assert errors[0].startswith(f"stackctl: cannot reach the Docker engine at unix://{tmp_path}/none.sock: ")
    assert errors[0].endswith("(fix: start dockerd, or set DOCKER_HOST)")
    state = tmp_path / "state"
    assert not list(state.rglob("*.json")), "nothing is recorded when the engine was never reached"


def test_status_history_needs_a_recipe(no_engine):
    result = run_cli("status", "--history", env=no_engine)
    assert result.returncode == 1
    assert result.stderr == "stackctl: --history needs a RECIPE (fix: stackctl status RECIPE --history)\n"


def test_up_dry_run_prints_the_pinning_and_the_container_arguments_without_an_engine(no_engine):
    result = run_cli("up", "cpu-smoke", "--dry-run", env=no_engine, check=True)
    said = result.stderr.splitlines()  # the decision on stderr; stdout is the JSON alone
    assert "pinning: cpuset: none (not pinned)" in said
    launcher = next(line for line in said if line.startswith("pinning: launcher: "))
    assert "--port 8000" in launcher and "--enable-prefix-caching" in launcher
    kwargs = json.loads(result.stdout)
    assert kwargs["name"] == "stackctl-cpu-smoke" and kwargs["network_mode"] == "host"
    assert kwargs["image"].startswith("stackctl/cpu-smoke:") and kwargs["environment"]["PYTHONHASHSEED"] == "0"


def test_bench_probe_without_a_server_names_the_address(tmp_path, no_engine):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    recipe = tmp_path / "probe.toml"
    recipe.write_text((RECIPES / "cpu-smoke.toml").read_text().replace("port = 8000", f"port = {port}"))
    result = run_cli("bench", str(recipe), "--probe", env=no_engine)
    assert result.returncode == 1
    assert result.stderr == (f"stackctl: cpu-smoke: no healthy server at http://127.0.0.1:{port} (fix: stackctl up "
                             f"{recipe})\n")


def test_bench_connector_says_what_it_needs(tmp_path, no_engine):
    """--connector measures stackctl's CPU connector inside the running stack: a recipe without it, or a stack
    that does not run, is one line naming what to do."""
    result = run_cli("bench", str(RECIPES / "cpu-smoke.toml"), "--connector", env=no_engine)
    assert result.returncode == 1
    assert result.stderr.startswith("stackctl: ") and "needs stackctl's CPU connector (platform cpu, cache.enabled " \
        "and cache.cpu_connector on)" in result.stderr
    result = run_cli("bench", str(RECIPES / "cpu-lmcache.toml"), "--connector", env=no_engine)
    assert result.returncode == 2 and "cannot reach the Docker engine" in result.stderr
