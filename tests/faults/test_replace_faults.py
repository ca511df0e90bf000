"""Faults while a running stack is replaced, and while it serves a benchmark. One stack (faults-main, port 8141)
goes through the cases in order: it is brought up once, survives a replacement that fails health, a Ctrl-C during
a replacement, a failed gate, a build that fails and a Ctrl-C during the build inside `up`, and an `up` killed
(kill -9) mid-replacement; its server is then killed under a running `bench`, and `up` over the stopped container
brings the stack back."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from faultkit import history, remove_stack
from helpers import run_cli
from stacks import variant

from stackctl import metrics
from stackctl.httpclient import get_status, get_text, post_json
from stackctl.recipe import load_recipe
from stackctl.engine.health import stop_reason
from stackctl.engine.records import ContainerState
from stackctl.bundle.stackspec import recipe_hash

pytestmark = [pytest.mark.docker, pytest.mark.slow]

STACK, PORT = "faults-main", 8141
CONTAINER = f"stackctl-{STACK}"
BASE = {'name = "cpu-smoke"': f'name = "{STACK}"', "port = 8000": f"port = {PORT}"}
MODEL_PATH = 'path = "/opt/stackctl/models/tiny-random-llama"'


@pytest.fixture(scope="module")
def recipes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faults-main")
    good = variant(folder, "good", BASE)
    # Same image, a server that cannot start: vLLM rejects an unknown flag.
    broken = variant(folder, "broken", {**BASE, '"1G"]': '"1G", "--no-such-flag"]'})
    # Same image, a healthy server with another recipe hash.
    other = variant(folder, "other", {**BASE, "max_num_batched_tokens = 4096": "max_num_batched_tokens = 2048"})
    # Same image, a healthy server that is not what the recipe says: prefix caching forced off behind the recipe's
    # back (a rule error, let through with --ignore-errors), so the doctor's server checks must fail the gate.
    drifted = variant(folder, "drifted", {**BASE, '"1G"]': '"1G", "--no-enable-prefix-caching"]'})
    # Another image whose build fails for real, fast: the model step cannot create its directory.
    unbuildable = variant(folder, "unbuildable", {**BASE, MODEL_PATH: 'path = "/dev/null/tiny-random-llama"'})
    # Another image that builds (the model step runs again; the steps before it come from the cache).
    rebuilt = variant(folder, "rebuilt", {**BASE, MODEL_PATH: 'path = "/opt/stackctl/models/tiny-faults-main"'})
    return {"good": good, "broken": broken, "other": other, "drifted": drifted, "unbuildable": unbuildable,
            "rebuilt": rebuilt}


@pytest.fixture(scope="module")
def main_stack(engine, fault_env, recipes):
    result = run_cli("up", str(recipes["good"]), env=fault_env, timeout=1800)
    assert result.returncode == 0, result.stderr[-4000:]
    yield engine.containers.get(CONTAINER)
    remove_stack(fault_env, recipes["good"])


def _completion() -> dict:
    return post_json(f"http://127.0.0.1:{PORT}/v1/completions",
                     {"model": "tiny", "prompt": "w1 w2 w3 w4", "max_tokens": 4, "temperature": 0})


def _wait_healthy(timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while get_status(f"http://127.0.0.1:{PORT}/health", timeout=2) != 200:
        assert time.monotonic() < deadline, f"{STACK} not healthy within {timeout} s"
        time.sleep(1)


def _served_requests() -> float:
    return metrics.total(get_text(f"http://127.0.0.1:{PORT}/metrics", timeout=5), "vllm:request_success_total") or 0.0


def _wait_for_served_requests(count: int, timeout: float = 120) -> None:
    """Returns once the server has finished `count` more requests than when called."""
    start, deadline = _served_requests(), time.monotonic() + timeout
    while _served_requests() < start + count:
        assert time.monotonic() < deadline, f"{STACK} finished fewer than {count} requests within {timeout} s"
        time.sleep(0.1)


def test_a_failed_replacement_leaves_the_previous_stack_serving(main_stack, recipes, fault_env, watch,
                                                                 fault_report):
    good_hash = recipe_hash(load_recipe(recipes["good"]))
    before = len(history(fault_env, STACK))

    result = run_cli("up", str(recipes["broken"]), "--ignore-errors", env=fault_env, timeout=1800)

    assert result.returncode == 1, result.stderr[-4000:]
    assert "the server exited during start-up" in result.stderr  # names the failing check
    assert f"Now: rolled back: {CONTAINER} serves recipe {good_hash}" in result.stderr  # says what runs now
    answer = _completion()  # the previous stack serves completions
    assert answer["usage"]["completion_tokens"] == 4
    container = watch.engine.containers.get(CONTAINER)
    assert container.id == main_stack.id and container.labels["dev.stackctl.recipe-hash"] == good_hash
    entries = history(fault_env, STACK)[before:]
    assert [e["outcome"] for e in entries] == ["failed", "restored"]
    log = f"{fault_env['STACKCTL_STATE_DIR']}/{STACK}/last-failure.log"
    lost = [] if "no-such-flag" in open(log).read() else ["last-failure.log"]
    lost += [] if len(entries) == 2 else ["history entries"]
    orphans = watch.orphans()
    shown = run_cli("status", str(recipes["good"]), "--history", env=fault_env, check=True).stdout
    fault_report.notes["status --history after a rollback"] = shown
    fault_report.add("new recipe's server fails health", "exit 1 naming the check; previous stack back, serving",
                     f"exit {result.returncode}; completion answered by recipe {good_hash}", orphans, lost)
    assert orphans == [] and lost == []
    assert "restored" in shown and "failed" in shown


def test_ctrl_c_during_a_replacement_brings_the_previous_container_back(main_stack, recipes, fault_env, watch,
                                                                        background, fault_report):
    good_hash = recipe_hash(load_recipe(recipes["good"]))
    before = len(history(fault_env, STACK))
    job = background(["up", str(recipes["other"])], fault_env)
    job.wait_for(f"started {CONTAINER}")
    job.proc.send_signal(2)  # SIGINT, as Ctrl-C sends it

    rc, output = job.finish()

    assert rc == 130, output
    assert f"interrupted: the new container was removed; the previous container (recipe {good_hash}" in output
    container = watch.engine.containers.get(CONTAINER)
    assert container.id == main_stack.id and container.status == "running"
    entries = history(fault_env, STACK)[before:]
    assert [e["outcome"] for e in entries] == ["interrupted", "restored"]
    _wait_healthy()
    assert _completion()["usage"]["completion_tokens"] == 4
    orphans = watch.orphans()
    lost = [] if len(entries) == 2 else ["history entries"]
    fault_report.add("Ctrl-C during up's health wait (replacing)", "exit 130; new container removed, previous back",
                     f"exit {rc}; previous container running and serving", orphans, lost)
    assert orphans == [] and lost == []


def test_a_replacement_that_fails_the_gate_brings_the_previous_stack_back(main_stack, recipes, fault_env, watch,
                                                                         fault_report):
    _wait_healthy()
    good_hash = recipe_hash(load_recipe(recipes["good"]))
    before = len(history(fault_env, STACK))

    result = run_cli("up", str(recipes["drifted"]), "--ignore-errors", "--gate", "server", env=fault_env,
                     timeout=1800)

    assert result.returncode == 1, result.stderr[-4000:]
    assert "gate failed (doctor --scope server)" in result.stderr and "server.engine-config" in result.stderr
    assert f"Now: rolled back: {CONTAINER} serves recipe {good_hash}" in result.stderr
    _wait_healthy()
    assert _completion()["usage"]["completion_tokens"] == 4  # the previous stack serves completions
    container = watch.engine.containers.get(CONTAINER)
    assert container.id == main_stack.id and container.labels["dev.stackctl.recipe-hash"] == good_hash
    entries = history(fault_env, STACK)[before:]
    assert entries and entries[-1]["outcome"] == "restored"
    orphans = watch.orphans()
    fault_report.add("replacement healthy but fails `--gate server`", "exit 1 naming the check; previous back, serving",
                     f"exit {result.returncode}; completion answered by recipe {good_hash}", orphans, [])
    assert orphans == []


def test_no_rollback_leaves_the_stack_down_and_rollback_brings_the_previous_recipe_back(
        main_stack, recipes, fault_env, watch, fault_report):
    _wait_healthy()
    good_hash = recipe_hash(load_recipe(recipes["good"]))

    failed = run_cli("up", str(recipes["broken"]), "--no-rollback", "--ignore-errors", env=fault_env, timeout=1800)

    assert failed.returncode == 1, failed.stderr[-3000:]
    assert f"Now: nothing runs (--no-rollback): `stackctl rollback {recipes['broken']}` brings recipe {good_hash} " \
           "back" in failed.stderr
    assert watch.engine.containers.list(all=True, filters={"name": CONTAINER}) == []
    back = run_cli("rollback", str(recipes["broken"]), env=fault_env, timeout=1800)
    assert back.returncode == 0, back.stderr[-3000:]
    assert f"rolling back to {recipes['good']}" in back.stderr
    assert _completion()["usage"]["completion_tokens"] == 4
    container = watch.engine.containers.get(CONTAINER)
    assert container.labels["dev.stackctl.recipe-hash"] == good_hash
    entries = history(fault_env, STACK)
    assert [(e["command"], e["outcome"]) for e in entries[-2:]] == [("up", "failed"), ("rollback", "deployed")]
    orphans = watch.orphans(CONTAINER)
    fault_report.add("replacement fails with --no-rollback, then `stackctl rollback`",
                     "exit 1, stack down and said; rollback serves the previous recipe",
                     f"exit {failed.returncode}, then rollback exit {back.returncode}: recipe {good_hash} serving",
                     orphans, [])
    assert orphans == []


def test_a_build_that_fails_inside_up_leaves_the_running_stack_serving(main_stack, recipes, fault_env, watch,
                                                                      fault_report):
    _wait_healthy()
    good_hash = recipe_hash(load_recipe(recipes["good"]))
    running = watch.engine.containers.get(CONTAINER)
    before = len(history(fault_env, STACK))

    result = run_cli("up", str(recipes["unbuildable"]), env=fault_env, timeout=1800)

    assert result.returncode == 1, result.stderr[-4000:]
    assert "image build failed: The command" in result.stderr and "returned a non-zero code: 1" in result.stderr
    assert "NotADirectoryError" in result.stderr  # the build output's end shows why
    entries = history(fault_env, STACK)[before:]
    assert [e["outcome"] for e in entries] == ["failed"], entries
    assert entries[0]["detail"].startswith("build: image build failed: The command")
    assert entries[0]["recipe_hash"] == recipe_hash(load_recipe(recipes["unbuildable"]))
    container = watch.engine.containers.get(CONTAINER)  # the running stack was not touched
    assert container.id == running.id and container.status == "running"
    assert container.labels["dev.stackctl.recipe-hash"] == good_hash
    assert _completion()["usage"]["completion_tokens"] == 4
    orphans = watch.orphans()
    lost = [] if len(entries) == 1 else ["history entry"]
    fault_report.add("image build fails inside `up` over a running stack",
                     "exit 1 with the build's error; failed recorded; running stack untouched",
                     f"exit {result.returncode}; history `failed` (build: ...); recipe {good_hash} still serving",
                     orphans, lost)
    assert orphans == [] and lost == []


def test_ctrl_c_during_the_build_inside_up_leaves_the_running_stack_serving(main_stack, recipes, fault_env, watch,
                                                                            background, fault_report):
    _wait_healthy()
    good_hash = recipe_hash(load_recipe(recipes["good"]))
    running = watch.engine.containers.get(CONTAINER)
    images = {tag for image in watch.engine.images.list(name=f"stackctl/{STACK}") for tag in image.tags}
    before = len(history(fault_env, STACK))
    job = background(["up", str(recipes["rebuilt"])], fault_env)
    job.wait_for("make_tiny_model.py", timeout=600)
    building = watch.new_containers()  # the build step's container: the Ctrl-C lands inside it
    assert building, "no build container runs: the Ctrl-C would not land inside a build step"
    job.proc.send_signal(2)  # SIGINT, as Ctrl-C sends it

    rc, output = job.finish()

    assert rc == 130, output
    assert f"interrupted during the build of stackctl/{STACK}:" in output
    assert f"{STACK}: {CONTAINER} is running with recipe {good_hash} (unchanged)" in output  # says what runs
    container = watch.engine.containers.get(CONTAINER)
    assert container.id == running.id and container.status == "running"
    assert _completion()["usage"]["completion_tokens"] == 4
    assert {tag for image in watch.engine.images.list(name=f"stackctl/{STACK}") for tag in image.tags} == images
    entries = history(fault_env, STACK)[before:]
    lost = [] if [(e["outcome"], e.get("detail")) for e in entries] == [
        ("interrupted", "build: interrupted (Ctrl-C)")] else ["history entry"]
    orphans = watch.orphans()
    fault_report.add("Ctrl-C during the build inside `up` over a running stack",
                     "exit 130; no image tagged; says the running stack is unchanged; interrupted recorded",
                     f"exit {rc}; recipe {good_hash} still serving", orphans, lost)
    assert orphans == [] and lost == []


def test_kill_9_mid_replacement_then_up_puts_the_previous_container_back(main_stack, recipes, fault_env, watch,
                                                                        background, fault_report):
    _wait_healthy()
    good_hash = recipe_hash(load_recipe(recipes["good"]))
    previous_id = watch.engine.containers.get(CONTAINER).id
    before = history(fault_env, STACK)
    job = background(["up", str(recipes["other"])], fault_env)
    job.wait_for(f"started {CONTAINER}")
    aside = watch.engine.containers.get(f"{CONTAINER}-previous")
    assert aside.id == previous_id and aside.status == "exited"
    # Power lost mid-replacement: stackctl dies (kill -9) between setting the previous container aside and
    # finishing, and the replacement dies with it.
    job.proc.kill()
    job.finish()
    subprocess.run(["docker", "kill", "--signal", "KILL", CONTAINER], check=True, capture_output=True)

    result = run_cli("up", str(recipes["good"]), env=fault_env, timeout=1800)

    assert result.returncode == 0, result.stderr[-4000:]
    assert f"{CONTAINER}: an earlier up was cut short; putting the previous container back" in result.stderr
    assert f"{STACK}: rolled back: {CONTAINER} serves recipe {good_hash}" in result.stderr
    assert f"{CONTAINER} is running recipe {good_hash} already: nothing to do" in result.stderr
    assert _completion()["usage"]["completion_tokens"] == 4  # serving as soon as up returns
    container = watch.engine.containers.get(CONTAINER)
    assert container.id == previous_id and container.labels["dev.stackctl.recipe-hash"] == good_hash
    entries = history(fault_env, STACK)
    added = [(e["command"], e["outcome"], e["recipe_hash"], e.get("detail")) for e in entries[len(before):]]
    lost = [] if entries[:len(before)] == before else ["earlier history entries"]
    lost += [] if added == [("up", "restored", good_hash, "an earlier up was cut short")] else ["restore entry"]
    orphans = watch.orphans()
    fault_report.add("kill -9 stackctl and the replacement mid-replacement, then `up`",
                     "up puts the previous container back, waits for it, says and records it",
                     f"exit {result.returncode}; previous container back, recipe {good_hash} serving; "
                     "history `restored`", orphans, lost)
    assert orphans == [] and lost == []


def test_server_killed_during_bench_fails_cleanly_and_keeps_partial_results(main_stack, recipes, fault_env, watch,
                                                                            background, tmp_path, fault_report):
    _wait_healthy()
    out = tmp_path / "bench"
    # Far more requests than complete before the kill on any machine (a fast one serves ~100/s, so a fixed sleep
    # let the whole run finish first); short prompts stay within max_model_len.
    job = background(["bench", str(recipes["good"]), "--users", "4", "--turns", "400", "--system-tokens", "64",
                      "--turn-tokens", "8", "--output-tokens", "4", "--max-requests", "1600", "--max-seconds", "120",
                      "-o", str(out)], fault_env)
    job.wait_for(f"bench: {STACK}: probe, then workload")
    _wait_for_served_requests(10)  # the kill lands mid-workload, after some requests completed
    subprocess.run(["docker", "kill", "--signal", "KILL", CONTAINER], check=True, capture_output=True)

    rc, output = job.finish(timeout=600)

    assert rc == 1, output
    assert "the server stopped answering during the run" in output and "partial results in" in output
    lost = []
    try:
        report = json.loads((out / "bench.json").read_text())
        assert report["partial"] is True and report["summaries"][0]["completed"] > 0
    except (OSError, ValueError, AssertionError):
        lost.append("bench.json with the completed requests")
    status = run_cli("status", str(recipes["good"]), env=fault_env, check=True).stdout
    assert "killed (SIGKILL" in status, status  # status says why the server stopped
    orphans = watch.orphans()
    fault_report.add("server killed during bench", "exit 1; partial results saved; status says why",
                     f"exit {rc}; bench.json partial, {report['summaries'][0]['completed']} requests kept"
                     if not lost else f"exit {rc}", orphans, lost)
    assert orphans == [] and lost == []


def test_up_over_a_stopped_container_removes_it_and_serves_again(main_stack, recipes, fault_env, watch,
                                                                 fault_report):
    subprocess.run(["docker", "stop", CONTAINER], check=True, capture_output=True)  # stopped already after bench
    stopped = watch.engine.containers.get(CONTAINER)
    assert stopped.status == "exited"
    reason = stop_reason(ContainerState.from_engine(stopped.attrs["State"]))
    server_log = stopped.logs().decode(errors="replace")
    good_hash = recipe_hash(load_recipe(recipes["good"]))

    result = run_cli("up", str(recipes["good"]), env=fault_env, timeout=1800)

    assert result.returncode == 0, result.stderr[-4000:]
    assert f"{CONTAINER} was not running ({reason}): removing it" in result.stderr
    assert f"{STACK} is healthy on http://127.0.0.1:{PORT}" in result.stderr
    assert _completion()["usage"]["completion_tokens"] == 4
    container = watch.engine.containers.get(CONTAINER)
    assert container.id != stopped.id and container.labels["dev.stackctl.recipe-hash"] == good_hash
    log = Path(fault_env["STACKCTL_STATE_DIR"]) / STACK / "last-failure.log"
    lost = [] if log.read_bytes().decode(errors="replace") == server_log else ["the stopped server's log (last-failure.log)"]
    entries = history(fault_env, STACK)
    lost += [] if (entries[-1]["outcome"], entries[-1]["recipe_hash"]) == ("deployed", good_hash) else ["history"]
    orphans = watch.orphans(CONTAINER)
    fault_report.add("`up` over the stack's stopped (exited) container",
                     "says why it was not running, keeps its log, removes it, serves again",
                     f"exit {result.returncode}: ...was not running ({reason}): removing it; recipe {good_hash} "
                     "serving", orphans, lost)
    assert orphans == [] and lost == []
