"""Helpers for tests against the real Docker engine: recipe variants and stacks brought up with stackctl."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from helpers import RECIPES, REPO, run_cli

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


def engine_or_skip():
    """A docker-py client of the engine the tests run against; skips, with the reason, where there is none."""
    import pytest

    reason = docker_available()
    if reason:
        pytest.skip(reason)
    import docker

    return docker.from_env(timeout=600)


def stackctl_env(state_dir: Path) -> dict:
    """Environment for stackctl runs: its own state dir, and the site's build inputs when present (the same inputs
    an air-gapped or proxied site gives)."""
    env = dict(os.environ)
    env["STACKCTL_STATE_DIR"] = str(state_dir)
    if Path(CA_BUNDLE).is_file():
        env.setdefault("STACKCTL_CA_BUNDLE", CA_BUNDLE)
    if "STACKCTL_WHEELHOUSE" not in env and list(Path("/opt/wheels").glob("torch-*.whl")):
        env["STACKCTL_WHEELHOUSE"] = "/opt/wheels"
    return env


def variant(tmp_dir: Path, name: str, replacements: dict[str, str], base: str = "cpu-smoke.toml") -> Path:
    """A recipe file derived from a shipped one by exact text replacements (each must apply), named NAME.toml."""
    text = (RECIPES / base).read_text()
    for old, new in replacements.items():
        text = replace_outside_comments(text, old, new, base)
    path = tmp_dir / (name if name.endswith(".toml") else f"{name}.toml")
    path.write_text(text)
    return path


def replace_outside_comments(text: str, old: str, new: str, source: str) -> str:
    """TEXT with the first occurrence of OLD that does not start inside a comment replaced by NEW: a shipped recipe's
    comments may quote the very lines a test changes (`[checks]`, `port = 8000`)."""
    start = 0
    while (at := text.find(old, start)) >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        if "#" not in text[line_start:at]:
            return text[:at] + new + text[at + len(old):]
        start = at + 1
    raise AssertionError(f"{old!r} not in {source} outside its comments")


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


@dataclass
class SmokeJob:
    """One run of the main job (scripts/smoke.sh): its exit status, everything it printed, and where it wrote."""

    returncode: int
    output: str
    seconds: float
    folder: Path  # its log (job.log), phase outputs and bench results
    link: Path  # where it was told to put `stackctl`
    env: dict


def run_smoke_job(env: dict, folder: Path) -> SmokeJob:
    """`bash scripts/smoke.sh` as README says, with the given environment (state dir, build inputs), its output and
    stackctl link kept in `folder`."""
    link = folder / "bin" / "stackctl"
    link.parent.mkdir(parents=True)
    job_env = {k: v for k, v in env.items() if k != "STACKCTL_JOB_LOG"}
    job_env.update(STACKCTL_BIN_LINK=str(link), STACKCTL_SMOKE_OUT=str(folder / "out"))
    started = time.monotonic()
    result = subprocess.run(["bash", str(REPO / "scripts" / "smoke.sh")], cwd=REPO, env=job_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=5400)
    print(f"scripts/smoke.sh exited {result.returncode} after {time.monotonic() - started:.0f} s")
    return SmokeJob(result.returncode, result.stdout, time.monotonic() - started, folder / "out", link, job_env)
