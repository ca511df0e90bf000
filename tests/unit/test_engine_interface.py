"""The engine interface (stackctl/engine/interface.py) and its two implementations: docker_adapter, which talks to
Docker, and the unit tests' in-memory FakeEngine (fake_engine.py). Both carry the interface's functions with the same
signatures (mypy checks the types too: fake_engine.py's last lines); every engine function a caller uses is part of
it; and what stackctl does through the interface behaves the same on the fake (down and status below, with no
Docker at all)."""

from __future__ import annotations

import inspect
import re

import pytest
from fake_engine import FakeEngine, interface_names
from helpers import RECIPES, REPO

from stackctl.bundle.stackspec import StackSpec
from stackctl.engine import docker_adapter
from stackctl.engine.handles import Container, Image
from stackctl.engine.interface import EngineInterface
from stackctl.engine.records import ContainerState
from stackctl.recipe import load_recipe

NAMES = interface_names(EngineInterface)
# docker_adapter's public names that are not the engine's: pure helpers, label names and the light engine's classes
NOT_THE_ENGINES = {"build_kwargs", "demultiplex", "short_form", "LightEngine", "LightImage", "LightContainer"}


def signature_without_self(function) -> str:
    signature = inspect.signature(function)
    parameters = [p for p in signature.parameters.values() if p.name != "self"]
    return str(signature.replace(parameters=parameters))


def test_the_interface_names_every_engine_function_once():
    assert len(NAMES) == len(set(NAMES)) == 38
    assert {"client", "find_container", "container_state", "run_to_end", "remove_container"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_both_implementations_have_the_interfaces_signature(name):
    wanted = signature_without_self(getattr(EngineInterface, name))
    assert signature_without_self(getattr(docker_adapter, name)) == wanted, f"docker_adapter.{name}"
    assert signature_without_self(getattr(FakeEngine, name)) == wanted, f"FakeEngine.{name}"


def test_every_public_function_of_the_adapter_is_in_the_interface_or_touches_no_engine():
    public = {name for name, value in vars(docker_adapter).items()
              if callable(value) and not name.startswith("_")
              and getattr(value, "__module__", "") == docker_adapter.__name__}
    assert public - set(NAMES) == NOT_THE_ENGINES
    assert set(NAMES) <= public


def test_every_adapter_name_a_caller_uses_is_in_the_interface_or_a_label_or_pure():
    used: set[str] = set()
    for path in (REPO / "stackctl").rglob("*.py"):
        if path.name == "docker_adapter.py":
            continue
        text = path.read_text()
        used |= set(re.findall(r"\b(?:dk|docker_adapter)\.(?!py\b)([A-Za-z_]+)", text))  # not the file's name
        used |= {name.strip() for group in re.findall(r"from stackctl\.engine\.docker_adapter import ([\w, ]+)", text)
                 for name in group.split(",")}
    outside = {name for name in used if not name.startswith("LABEL_") and name not in NAMES}
    assert outside <= NOT_THE_ENGINES, outside
    assert {"client", "find_container", "engine_version"} <= used  # the scan sees both spellings


def test_the_scan_of_signatures_fails_on_a_mismatch():
    def image_size(image: Image, extra: int) -> int:
        return 0

    assert signature_without_self(image_size) != signature_without_self(EngineInterface.image_size)


def test_install_routes_every_interface_function_to_the_fake(monkeypatch):
    engine = FakeEngine().install(monkeypatch)
    for name in NAMES:
        assert getattr(docker_adapter, name).__self__ is engine, name


# -- stackctl's commands on the fake engine: what they do through the interface, with no Docker --

def labelled(stack: str) -> dict:
    return {docker_adapter.LABEL_STACK: stack, docker_adapter.LABEL_RECIPE_HASH: "h1"}


@pytest.fixture
def smoke(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKCTL_STATE_DIR", str(tmp_path / "state"))
    return StackSpec(load_recipe(RECIPES / "cpu-smoke.toml"))


def test_down_removes_the_stacks_containers_and_images_and_leaves_other_stacks_alone(monkeypatch, smoke):
    from stackctl.lifecycle.down import down

    engine = FakeEngine().install(monkeypatch)
    engine.add_image("stackctl/cpu-smoke:abc", labels=labelled(smoke.name))
    engine.add_image("stackctl/other:def", labels=labelled("other"))
    engine.add_container(smoke.name, image="stackctl/cpu-smoke:abc", labels=labelled(smoke.name))
    engine.add_container("other", image="stackctl/other:def", labels=labelled("other"))
    engine.add_container("not-stackctls")
    said: list[str] = []
    assert down(smoke, remove_image=True, say=said.append) == 0
    assert set(engine.container_records) == {"other", "not-stackctls"}
    assert [image.tags for image in engine.image_records] == [["stackctl/other:def"]]
    assert said == [f"removed container {smoke.name}", "removed image stackctl/cpu-smoke:abc"]
    said.clear()
    down(smoke, say=said.append)
    assert said == [f"{smoke.name}: no container to remove"]


def test_status_reads_state_image_seed_and_why_a_server_stopped_through_the_interface(monkeypatch, smoke):
    from stackctl.lifecycle.status import status_rows

    engine = FakeEngine().install(monkeypatch)
    engine.add_image("stackctl/cpu-smoke:abc", labels=labelled(smoke.name))
    engine.add_container(smoke.name, image="stackctl/cpu-smoke:abc", labels=labelled(smoke.name), status="exited",
                         state=ContainerState(status="exited", exit_code=137, oom_killed=True),
                         env={"PYTHONHASHSEED": "0"})
    [row] = status_rows(smoke)
    assert row["container"] == smoke.name and row["state"] == "exited" and row["image"] == "stackctl/cpu-smoke:abc"
    assert row["hash_seed"] == "0" and row["health"] is None and row["recipe_current"] is False
    assert row["stopped_because"] == "killed by the kernel: out of memory"
    engine.image_records.clear()  # the image was removed under the container: status names the id it ran
    [row] = status_rows(smoke)
    assert row["image"] == engine.container_records[smoke.name].image_id


def test_the_fake_refuses_what_the_engine_refuses(monkeypatch):
    engine = FakeEngine()
    handle = engine.client()
    first = engine.run_detached(handle, image="x", name="one")
    with pytest.raises(Exception, match="already in use"):
        engine.run_detached(handle, image="x", name="one")
    engine.remove_container(first)
    assert engine.find_container(handle, "one") is None
    with pytest.raises(Exception, match="is gone"):
        engine.start_container(first)
    assert isinstance(engine.run_detached(handle, image="x", name="one"), Container)
