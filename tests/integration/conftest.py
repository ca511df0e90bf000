"""Fixtures for tests against the real Docker engine: built images and running stacks.

Images are built with `stackctl build` itself (a local wheelhouse and CA bundle are passed when the machine has
them, the same inputs an air-gapped or proxied site gives). Stacks are started with `stackctl up` and always taken
down again, even when a test fails.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import RECIPES, run_cli

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def docker_available() -> str | None:
    """None when a Docker engine answers, else the reason."""
    try:
        import docker

        docker.from_env(timeout=10).ping()
    except Exception as exc:  # any failure means: no engine to test against
        return f"no Docker engine: {exc}"
    probe = subprocess.run(["docker", "image", "inspect", "debian:bookworm-slim"], capture_output=True)
    if probe.returncode != 0:
        return "base image debian:bookworm-slim missing (scripts/make-base-image.sh makes it)"
    return None


@pytest.fixture(scope="session")
def docker_engine():
    reason = docker_available()
    if reason:
        pytest.skip(reason)
    import docker

    return docker.from_env(timeout=600)


@pytest.fixture(scope="session")
def stack_env(tmp_path_factory) -> dict:
    """Environment for stackctl runs: an isolated state dir, and the site's build inputs when present."""
    env = dict(os.environ)
    env["STACKCTL_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    if Path(CA_BUNDLE).is_file():
        env.setdefault("STACKCTL_CA_BUNDLE", CA_BUNDLE)
    if "STACKCTL_WHEELHOUSE" not in env and list(Path("/opt/wheels").glob("torch-*.whl")):
        env["STACKCTL_WHEELHOUSE"] = "/opt/wheels"
    return env


def variant(tmp_dir: Path, name: str, replacements: dict[str, str], base: str = "cpu-smoke.toml") -> Path:
    """A recipe file derived from a shipped one by exact text replacements (each must apply)."""
    text = (RECIPES / base).read_text()
    for old, new in replacements.items():
        assert old in text, f"{old!r} not in {base}"
        text = text.replace(old, new, 1)
    path = tmp_dir / f"{name}.toml"
    path.write_text(text)
    return path


class Stack:
    """A stack brought up with `stackctl up` and taken down at the end."""

    def __init__(self, recipe: Path | str, env: dict):
        self.recipe, self.env = str(recipe), env

    def cli(self, *args, timeout=1800):
        return run_cli(*args, env=self.env, timeout=timeout)

    def up(self):
        result = self.cli("up", self.recipe)
        assert result.returncode == 0, f"stackctl up failed:\n{result.stdout}\n{result.stderr[-4000:]}"
        return result

    def down(self):
        return self.cli("down", self.recipe)


@pytest.fixture(scope="session")
def smoke_stack(docker_engine, stack_env):
    stack = Stack(RECIPES / "cpu-smoke.toml", stack_env)
    stack.first_up = stack.up()
    yield stack
    stack.down()
