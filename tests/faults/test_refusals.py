"""Faults `up`, `status` and `doctor` must refuse cleanly before changing anything: the port held by another
process (with a stale lock left by a dead stackctl), a disk tier on a read-only filesystem, a read-only state
directory, an engine that does not answer."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from faultkit import half_written, read_only_dir, undo_read_only
from helpers import run_cli
from stacks import variant

pytestmark = [pytest.mark.docker]

BASE = {'name = "cpu-smoke"': 'name = "faults-refuse"', "port = 8000": "port = 8143"}


def _dead_pid() -> int:
    finished = subprocess.Popen(["true"])
    finished.wait()
    return finished.pid


def test_port_held_by_another_process_and_a_stale_lock(fault_env, watch, tmp_path, fault_report):
    recipe = variant(tmp_path, "refuse", BASE)
    holder = subprocess.Popen([sys.executable, "-c", "import socket, time; s = socket.socket(); "
                               "s.bind(('127.0.0.1', 8143)); s.listen(); print('ready', flush=True); time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        state = fault_env["STACKCTL_STATE_DIR"]
        lock = f"{state}/faults-refuse/lock"
        subprocess.run(["mkdir", "-p", f"{state}/faults-refuse"], check=True)
        dead = _dead_pid()
        with open(lock, "w") as handle:
            json.dump({"pid": dead, "command": "up", "since": "2026-01-01T00:00:00Z"}, handle)

        result = run_cli("up", str(recipe), env=fault_env, timeout=300)

        assert result.returncode == 1, result.stderr
        assert f"took over a stale lock (pid {dead} running `stackctl up` since 2026-01-01T00:00:00Z" in result.stderr
        assert f"port 8143 on 127.0.0.1 is already in use by pid {holder.pid} (" in result.stderr
        assert open(lock).read() == ""  # released
    finally:
        holder.kill()
        holder.wait()
    orphans = watch.orphans()
    lost = half_written(fault_env)
    fault_report.add("port already bound by another process", "exit 1 naming the holder pid; nothing started",
                     f"exit {result.returncode}: ...in use by pid {holder.pid} (python ...)", orphans, lost)
    fault_report.add("stale lock from a dead stackctl", "taken over, and said", "took over the lock of a dead pid",
                     orphans, lost)
    assert orphans == [] and lost == []


def test_disk_tier_on_a_read_only_filesystem(fault_env, watch, tmp_path, fault_report):
    readonly = tmp_path / "ro"
    read_only_dir(readonly)
    try:
        recipe = variant(tmp_path, "disk", {
            **BASE,
            'vllm = "0.32.0"': 'vllm = "0.32.0"\nlmcache = "0.5.6"',
            "[cache]\nenabled = false": "[cache]\nenabled = true",
            "[host]": f'[[cache.tiers]]\nkind = "cpu"\nsize_gb = 1\n\n[[cache.tiers]]\nkind = "disk"\n'
                      f'size_gb = 1\npath = "{readonly}/kv"\n\n[host]'})
        result = run_cli("up", str(recipe), env=fault_env, timeout=300)
    finally:
        undo_read_only(readonly)
    assert result.returncode == 1, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert f"{recipe}:" in line and f"cache.tiers[1].path: {readonly}/kv is not writable (Read-only file system)" in line
    orphans = watch.orphans()
    lost = half_written(fault_env)
    fault_report.add("disk tier path unwritable", "exit 1, one line with file:line and key; nothing built or started",
                     f"exit {result.returncode}: cache.tiers[1].path: ... is not writable (Read-only file system)",
                     orphans, lost)
    assert orphans == [] and lost == []


def test_read_only_state_directory(fault_env, watch, tmp_path, fault_report):
    recipe = variant(tmp_path, "state", BASE)
    readonly = tmp_path / "state-ro"
    read_only_dir(readonly)
    try:
        result = run_cli("up", str(recipe), env=dict(fault_env, STACKCTL_STATE_DIR=str(readonly)), timeout=300)
    finally:
        undo_read_only(readonly)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"stackctl: state directory {readonly}/faults-refuse "
                                                            "is not writable: Read-only file system")
    orphans = watch.orphans()
    fault_report.add("state dir read-only", "exit 1, one line with the fix; nothing started",
                     f"exit {result.returncode}: state directory ... is not writable", orphans, [])
    assert orphans == []


def test_engine_that_does_not_answer(fault_env, tmp_path, fault_report):
    # A listener that accepts connections and never replies: an engine that hangs, not one that is absent.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    env = dict(fault_env, DOCKER_HOST=f"tcp://127.0.0.1:{silent.getsockname()[1]}")
    recipe = variant(tmp_path, "engine", BASE)
    try:
        started = time.monotonic()
        status = run_cli("status", env=env, timeout=120)
        doctor = run_cli("doctor", str(recipe), "--scope", "server", "--format", "json", env=env, timeout=120)
        elapsed = time.monotonic() - started
    finally:
        silent.close()
    assert status.returncode == 2 and doctor.returncode == 2, status.stderr + doctor.stderr
    for result in (status, doctor):
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot reach the Docker engine at tcp://127.0.0.1:" in lines[0], result.stderr
    assert elapsed < 60
    fault_report.add("engine unreachable during status/doctor", "exit 2, one line, in seconds",
                     f"status exit {status.returncode}, doctor exit {doctor.returncode}, one line each, "
                     f"{elapsed:.0f} s together", [], [])
