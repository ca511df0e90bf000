"""The lifecycle's pure and local parts: the per-stack lock (real flock across real processes), history and kept
deployments in the state dir, the port preflight against a real listening socket, why a server stopped."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from stackctl.state import store
from stackctl.errors import StackctlError
from stackctl.state.lock import StackLock
from stackctl.lifecycle.preflight import ensure_port_free, port_holder
from stackctl.engine.health import stop_reason
from stackctl.engine.records import ContainerState
from stackctl.bundle.stackspec import StackSpec

HOLD = """
import sys, time
from stackctl.state.lock import StackLock
with StackLock(sys.argv[1], "demo", "up"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_command_on_a_locked_stack_names_the_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StackctlError) as refused, StackLock(tmp_path, "demo", "down"):
            pass
        message = str(refused.value)
        assert f"demo: another stackctl is changing this stack: pid {holder.pid} running `stackctl up` since" in message
    finally:
        holder.kill()
        holder.wait()
    # The holder died without unlocking: the kernel released the flock; the file still names the dead process.
    said = []
    with StackLock(tmp_path, "demo", "down", say=said.append):
        assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
    assert said == [f"demo: took over a stale lock (pid {holder.pid} running `stackctl up` since "
                    f"{said[0].split(' since ')[1]}"]
    assert (tmp_path / "lock").read_text() == ""


def test_history_keeps_the_last_entries_and_last_good_skips_failures(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKCTL_STATE_DIR", str(tmp_path))
    for index in range(store.HISTORY_KEEP + 3):
        store.record_deployment("s", {"outcome": "deployed", "recipe_hash": f"h{index}"})
    store.record_deployment("s", {"outcome": "failed", "recipe_hash": "bad"})
    entries = store.read_history("s")
    assert len(entries) == store.HISTORY_KEEP and entries[-1]["recipe_hash"] == "bad" and "time" in entries[-1]
    last = f"h{store.HISTORY_KEEP + 2}"
    assert store.last_good("s")["recipe_hash"] == last
    assert store.last_good("s", exclude_hash=last)["recipe_hash"] == f"h{store.HISTORY_KEEP + 1}"
    (tmp_path / "s" / "history.json").write_text("{not json")
    assert store.read_history("s") == []  # a damaged file is not a crash


def test_prune_keeps_the_running_and_the_recent_deployments(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKCTL_STATE_DIR", str(tmp_path))
    for name in ("a", "b", "c", "d"):
        (tmp_path / "s" / "deployments" / name).mkdir(parents=True)
        store.record_deployment("s", {"outcome": "deployed", "recipe_hash": name})
    store.prune_deployments("s", {"a"})
    assert sorted(p.name for p in (tmp_path / "s" / "deployments").iterdir()) == ["a", "c", "d"]


def test_state_dir_that_cannot_be_written_is_refused_with_the_fix(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StackctlError, match=r"state directory .*/file/s is not writable: .*fix: make it writable"):
        store.ensure_writable(blocker / "s")


def test_port_preflight_names_the_listening_process():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert port_holder(port).startswith(f"pid {os.getpid()} (")
        with pytest.raises(StackctlError, match=rf"stack: port {port} on 127.0.0.1 is already in use by pid "
                                                rf"{os.getpid()} "):
            ensure_port_free("127.0.0.1", port, "stack")
    ensure_port_free("127.0.0.1", port, "stack")  # free again


@pytest.mark.parametrize("engine_state, said", [
    ({"ExitCode": 137, "FinishedAt": "2026-01-02T03:04:05.123Z"}, "killed (SIGKILL: kill -9, or the engine's stop "
                                                                  "timeout) at 2026-01-02T03:04:05Z"),
    ({"ExitCode": 137, "OOMKilled": True}, "killed by the kernel: out of memory"),
    ({"ExitCode": 1, "FinishedAt": "0001-01-01T00:00:00Z"}, "exited with code 1"),
    ({"ExitCode": 0}, "exited normally (code 0)"),
    ({"ExitCode": 143, "FinishedAt": "2026-01-02T03:04:05Z"}, "stopped (SIGTERM) at 2026-01-02T03:04:05Z"),
    ({"Status": "created"}, "state created"),
    ({"ExitCode": 127, "Error": "exec: \"vllm\": executable file not found"},
     "exited with code 127: exec: \"vllm\": executable file not found"),
])
def test_stop_reason_from_the_engines_record(engine_state, said):
    assert stop_reason(ContainerState.from_engine(engine_state)) == said


class BuiltImage:  # the two attributes of a docker-py Image that the build decision reads
    def __init__(self, base_id: str | None):
        self.labels = {} if base_id is None else {"dev.stackctl.base-image-id": base_id}


def test_build_rebuilds_when_the_base_image_changed_and_only_then():
    from stackctl.lifecycle.build import rebuild_reason

    assert rebuild_reason(None, "sha256:aaaa") == "no image with these build inputs yet"
    assert rebuild_reason(BuiltImage("sha256:aaaa"), "sha256:aaaa") is None
    assert "base image changed" in rebuild_reason(BuiltImage("sha256:aaaa"), "sha256:bbbb")
    assert "unrecorded" in rebuild_reason(BuiltImage(None), "sha256:bbbb")


def test_build_up_compose_and_manifest_name_one_image(tmp_path):
    """The tag `stackctl build` makes is the one compose.yaml, manifest.json and `up` name (one function)."""
    import json

    import yaml
    from helpers import RECIPES

    from stackctl.bundle import render
    from stackctl.engine.container import container_kwargs
    from stackctl.recipe import load_recipe

    recipe = load_recipe(RECIPES / "cpu-smoke.toml")
    files = render.render_files(StackSpec(recipe))
    tag = render.image_tag(StackSpec(recipe), files)
    assert tag == f"stackctl/cpu-smoke:{render.image_hash(files)}"
    compose = yaml.safe_load(files["compose.yaml"])
    assert [service["image"] for service in compose["services"].values()] == [tag]
    assert json.loads(files["manifest.json"])["image"] == tag
    assert container_kwargs(StackSpec(recipe), files, tmp_path / "bundle", None)["image"] == tag


def test_rollback_returns_to_the_deployment_before_the_running_one(tmp_path, monkeypatch):
    from helpers import RECIPES

    from stackctl.lifecycle.up import rollback_recipe
    from stackctl.recipe import load_recipe
    from stackctl.bundle.stackspec import recipe_hash

    monkeypatch.setenv("STACKCTL_STATE_DIR", str(tmp_path / "state"))
    first = tmp_path / "first.toml"
    first.write_text((RECIPES / "cpu-smoke.toml").read_text())
    second = tmp_path / "second.toml"
    second.write_text(first.read_text().replace("port = 8000", "port = 8001"))
    one, two = recipe_hash(load_recipe(first)), recipe_hash(load_recipe(second))
    kept = store.deployment_dir("cpu-smoke", one) / "recipe.toml"
    kept.parent.mkdir(parents=True)
    kept.write_text(first.read_text())
    store.record_deployment("cpu-smoke", {"outcome": "deployed", "recipe_hash": one, "recipe": str(first)})
    store.record_deployment("cpu-smoke", {"outcome": "failed", "recipe_hash": "broken", "recipe": "/x.toml"})
    store.record_deployment("cpu-smoke", {"outcome": "deployed", "recipe_hash": two, "recipe": str(second)})

    assert rollback_recipe(StackSpec(load_recipe(second)), two) == str(first)  # the original file, unchanged since
    first.write_text(first.read_text().replace("port = 8000", "port = 8002"))
    assert rollback_recipe(StackSpec(load_recipe(second)), two) == str(kept)  # changed since: the kept copy
    (tmp_path / "state" / "cpu-smoke" / "history.json").unlink()
    with pytest.raises(StackctlError, match="no earlier deployment to return to"):
        rollback_recipe(StackSpec(load_recipe(second)), two)


def test_a_containers_start_reads_as_seconds_since_the_epoch():
    """The engine writes nanoseconds (Python reads microseconds) and the zero time for a container never started."""
    state = ContainerState.from_engine({"StartedAt": "2026-11-28T18:58:00.123456789Z"})
    assert state.started_epoch == pytest.approx(1795892280.123456)
    for never in ("", "0001-01-01T00:00:00Z", "not a time"):
        assert ContainerState.from_engine({"StartedAt": never}).started_epoch is None
