"""Faults while a stack starts from nothing (faults-fresh, port 8142): the server killed during the health wait
while a second `up` tries to run, Ctrl-C during the health wait, Ctrl-C during the image build."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from faultkit import half_written, history, remove_stack
from helpers import run_cli
from stacks import variant

pytestmark = [pytest.mark.docker, pytest.mark.slow]

STACK, PORT = "faults-fresh", 8142
CONTAINER = f"stackctl-{STACK}"
BASE = {'name = "cpu-smoke"': f'name = "{STACK}"', "port = 8000": f"port = {PORT}"}


@pytest.fixture(scope="module")
def recipe(tmp_path_factory, fault_env):
    path = variant(tmp_path_factory.mktemp("faults-fresh"), "fresh", BASE)
    yield path
    remove_stack(fault_env, path)


def test_kill_9_during_the_health_wait_and_a_concurrent_up(recipe, fault_env, engine, watch, background,
                                                           fault_report):
    first = background(["up", str(recipe)], fault_env)
    first.wait_for(f"started {CONTAINER}")

    second = run_cli("up", str(recipe), env=fault_env, timeout=120)
    assert second.returncode == 1, second.stderr
    assert f"another stackctl is changing this stack: pid {first.proc.pid} running `stackctl up` since" in \
        second.stderr
    subprocess.run(["docker", "kill", "--signal", "KILL", CONTAINER], check=True, capture_output=True)
    rc, output = first.finish()

    assert rc == 1, output
    assert "the server exited during start-up (exit code 137)" in output
    assert "Now: nothing runs (there was no previous deployment to go back to)" in output
    entries = history(fault_env, STACK)
    lost = [] if entries and entries[-1]["outcome"] == "failed" else ["history entry"]
    lost += [] if (Path(fault_env["STACKCTL_STATE_DIR"]) / STACK / "last-failure.log").is_file() else ["log"]
    lost += half_written(fault_env)
    orphans = watch.orphans()
    fault_report.add("kill -9 the server during up's health wait", "exit 1 naming exit code 137; nothing left",
                     f"exit {rc}; no container; log and history kept", orphans, lost)
    fault_report.add("two concurrent up on one stack", "second exits 1 naming the holder (pid, command, since)",
                     f"exit {second.returncode}: ...pid {first.proc.pid} running `stackctl up` since ...", orphans, lost)
    assert orphans == [] and lost == []


def test_ctrl_c_during_the_health_wait_of_a_new_stack(recipe, fault_env, watch, background, fault_report):
    job = background(["up", str(recipe)], fault_env)
    job.wait_for(f"started {CONTAINER}")
    job.proc.send_signal(2)

    rc, output = job.finish()

    assert rc == 130, output
    assert "interrupted: the new container was removed; nothing runs" in output
    entries = history(fault_env, STACK)
    lost = ([] if entries and entries[-1]["outcome"] == "interrupted" else ["history entry"]) + half_written(fault_env)
    orphans = watch.orphans()
    fault_report.add("Ctrl-C during up's health wait (new stack)", "exit 130; container removed; says nothing runs",
                     f"exit {rc}; no container", orphans, lost)
    assert orphans == [] and lost == []


def test_ctrl_c_during_the_image_build(fault_env, engine, watch, background, tmp_path, fault_report):
    # Another generated model path: the image's model step runs again (the steps before it come from the cache).
    recipe = variant(tmp_path, "building", {**BASE, 'name = "cpu-smoke"': 'name = "faults-build"',
                                            "tiny-random-llama\"\nserved": "tiny-faults-build\"\nserved"})
    try:
        job = background(["build", str(recipe)], fault_env)
        job.wait_for("make_tiny_model.py", timeout=600)
        building = watch.new_containers()  # the build step's container: the Ctrl-C lands inside it
        assert building, "no build container runs: the Ctrl-C would not land inside a build step"
        job.proc.send_signal(2)
        rc, output = job.finish()

        assert rc == 130, output
        assert "interrupted during the build of stackctl/faults-build:" in output
        assert engine.images.list(name="stackctl/faults-build") == []  # nothing tagged
        orphans = watch.orphans()
        lost = half_written(fault_env)
        fault_report.add("Ctrl-C during the image build", "exit 130; build cancelled; no build container left",
                         f"exit {rc}; no image tagged", orphans, lost)
        assert orphans == [] and lost == []
    finally:
        remove_stack(fault_env, recipe)
