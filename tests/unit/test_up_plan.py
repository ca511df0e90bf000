"""`up` derives its plan once (lifecycle/plan.py) and then acts on it: the plan holds the bundle, the tag the bundle
names, the container's arguments and what is said of the pinning; it cannot be changed by what reads it; `up`
(dry run here; the real one in tests/integration) and the build take the bundle from it instead of rendering again."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, RECIPES

from stackctl.bundle import render
from stackctl.bundle.stackspec import StackSpec
from stackctl.errors import ExitCode
from stackctl.host import discover
from stackctl.lifecycle.plan import plan_up
from stackctl.lifecycle.up import up
from stackctl.recipe import load_recipe

CPU_ONLY = discover(FIXTURES / "sysfs" / "cpu-only-1node")


def smoke_plan():
    return plan_up(StackSpec(load_recipe(RECIPES / "cpu-smoke.toml")), facts=CPU_ONLY)


def test_the_plan_names_the_image_its_own_bundle_hashes_to_and_the_container_runs_it():
    planned = smoke_plan()
    assert planned.tag == render.image_tag(planned.spec, dict(planned.files))
    assert planned.container["image"] == planned.tag
    assert planned.container_name == planned.spec.container_name == "stackctl-cpu-smoke"
    assert planned.bundle_dir.name == "bundle" and planned.bundle_dir.parent.name == planned.recipe_hash
    assert planned.container["volumes"][str(planned.bundle_dir)]["mode"] == "ro"
    assert [note.split(":")[1].strip() for note in planned.notes[-2:]] == ["cpuset", "launcher"]


def test_nothing_that_reads_the_plan_can_change_it():
    planned = smoke_plan()
    with pytest.raises(TypeError):
        planned.container["image"] = "another:tag"  # type: ignore[index]
    with pytest.raises(TypeError):
        planned.files["Dockerfile"] = b""  # type: ignore[index]
    with pytest.raises(AttributeError):
        planned.tag = "another:tag"  # type: ignore[misc]
    args = planned.container_args({"STACKCTL_DTYPE": "float32"})
    args["image"] = "another:tag"
    assert args["environment"]["STACKCTL_DTYPE"] == "float32"
    assert "STACKCTL_DTYPE" not in planned.container["environment"] and planned.container["image"] == planned.tag


def test_up_acts_on_the_plan_without_rendering_again(monkeypatch, capsys):
    planned = smoke_plan()

    def render_again(*args, **kwargs):
        raise AssertionError("up rendered the bundle a second time")

    monkeypatch.setattr(render, "render_files", render_again)
    monkeypatch.setattr(render, "image_tag", render_again)
    said: list[str] = []
    assert up(planned, dry_run=True, say=said.append) == ExitCode.OK
    assert said[:len(planned.notes)] == list(planned.notes)
    assert said[-1].startswith("dtype: ")  # a CPU stack: decided from the host's CPU flags in a dry run
    printed = json.loads(capsys.readouterr().out)
    assert printed["image"] == planned.tag and printed["name"] == planned.container_name
    assert printed["environment"]["STACKCTL_DTYPE"]  # the decision is in what would run, not in the plan
    assert "STACKCTL_DTYPE" not in planned.container["environment"]
