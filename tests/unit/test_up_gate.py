"""`up` renders the bundle once and hands it on: to the build (which renders only when called alone) and to the
gate, which the CLI composes from doctor (`doctor/gate.py`), so the lifecycle never imports doctor."""

from __future__ import annotations

import pytest
from fake_engine import FakeEngine
from helpers import RECIPES

from stackctl.bundle import render
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.context import DoctorContext
from stackctl.doctor.gate import gate_for
from stackctl.doctor.registry import CHECKS
from stackctl.engine import docker_adapter as dk
from stackctl.errors import StackctlError
from stackctl.lifecycle import build
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec


def refuse_rendering(monkeypatch) -> None:
    def render_again(*args, **kwargs):
        raise AssertionError("the bundle was rendered a second time")

    monkeypatch.setattr(render, "render_files", render_again)


def test_build_takes_the_bundle_and_tag_up_planned_and_does_not_render_again(monkeypatch):
    spec = StackSpec(load_recipe(RECIPES / "cpu-smoke.toml"))
    files = render.render_files(spec)
    tag = render.image_tag(spec, files)
    base = "unresolved:" + spec.base_image
    engine = FakeEngine().install(monkeypatch)
    engine.add_image(tag, labels={dk.LABEL_BASE_ID: base})  # built before from this bundle and this base
    refuse_rendering(monkeypatch)
    said: list[str] = []
    assert build.build_image(spec, files, tag, engine=engine.client(), say=said.append) == (tag, False)
    assert engine.calls == []  # nothing built
    assert said == [f"image {tag} is up to date (same build inputs, same base image): not rebuilding"]


def test_the_gate_judges_the_bundle_it_is_given_and_names_the_failing_check(monkeypatch):
    load_all()
    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")
    recipe.tiers_of("cpu")[0].size_gb = 1 << 20  # 1 PiB: host.cpu-tier-ram fails on any host
    recipe.checks.skip = [c for c in CHECKS if CHECKS[c].scope == "host" and c != "host.cpu-tier-ram"]
    files = render.render_files(StackSpec(recipe))
    refuse_rendering(monkeypatch)
    assert DoctorContext(StackSpec(recipe), files=files).image_tag == render.image_tag(StackSpec(recipe), files)
    said: list[str] = []
    with pytest.raises(StackctlError, match=r"cpu-lmcache: gate failed \(doctor --scope host\): host.cpu-tier-ram: "
                                            r"CPU tier 1048576.0 GiB"):
        gate_for("host")(StackSpec(recipe), files, said.append)
    assert said == ["gate: stackctl doctor --scope host"]
    recipe.checks.skip.append("host.cpu-tier-ram")  # skipped by request: nothing fails, the gate lets it through
    assert gate_for("host")(StackSpec(recipe), files, said.append) is None


def test_a_gate_value_naming_no_scope_fails_before_anything_runs():
    with pytest.raises(StackctlError, match=r"--gate: unknown scope servr \(fix: use host, image, server\)"):
        gate_for("servr")
