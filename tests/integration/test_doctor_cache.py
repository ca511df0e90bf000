"""Doctor keeps what image.parsers read in the cpu-smoke image (a container that imports vLLM, seconds a run): the
first doctor starts one parser container, a second one starts none and gives the same verdict from the state dir,
and `--fresh` starts one again. Containers are counted from the engine's own event stream."""

from __future__ import annotations

import time

import pytest
from helpers import RECIPES
from stacks import stackctl_env
from test_doctor import doctor

from stackctl.doctor.all_checks import load_all
from stackctl.doctor.own_parsers import PARSERS_LABEL

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RECIPE = RECIPES / "cpu-smoke.toml"
# image.parsers alone: the other image checks share one probe run of their own, which this test does not count.
OTHER_IMAGE_CHECKS = [c.id for c in load_all().values() if c.scope == "image" and c.id != "image.parsers"]


def parsers_doctor(engine, env, *args) -> tuple[dict, int]:
    """One `doctor --scope image` of image.parsers alone: its result, and how many parser containers the engine
    created for the cpu-smoke stack meanwhile."""
    since = int(time.time())
    skips = [arg for check_id in OTHER_IMAGE_CHECKS for arg in ("--skip", check_id)]
    _, results = doctor(env, RECIPE, "--scope", "image", *skips, *args)
    until = int(time.time()) + 1
    events = engine.events(since=since, until=until, decode=True,
                           filters={"type": "container", "event": "create", "label": f"{PARSERS_LABEL}=cpu-smoke"})
    return results["image.parsers"], sum(1 for _ in events)


def test_a_second_doctor_starts_no_parser_container_and_fresh_starts_one(smoke_image, docker_engine, tmp_path):
    env = stackctl_env(tmp_path / "state")  # nothing kept yet
    first, created = parsers_doctor(docker_engine, env)
    assert first["status"] == "pass", first["message"]
    assert created == 1
    kept = list((tmp_path / "state" / "cpu-smoke" / "image-parsers").glob("*.json"))
    assert len(kept) == 1

    second, created = parsers_doctor(docker_engine, env)
    assert created == 0
    assert (second["status"], second["message"]) == (first["status"], first["message"])

    fresh, created = parsers_doctor(docker_engine, env, "--fresh")
    assert created == 1
    assert fresh["message"] == first["message"]
    assert list((tmp_path / "state" / "cpu-smoke" / "image-parsers").glob("*.json")) == kept
