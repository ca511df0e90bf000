"""`stackctl validate` stays a few standard-library imports above `python -c pass`: it imports none of the modules
only other commands need (click, jinja2, docker, psutil, doctor, the bundle renderer, ...). Held by the modules
`python -X importtime` names, never by a stopwatch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import RECIPES, REPO

# Each is imported by stackctl somewhere (another command, a rare path of a rule); on validate's path each would
# add whole milliseconds (click, jinja2, docker: tens of them) to a run of about forty.
NOT_ON_VALIDATE = ("click", "jinja2", "docker", "packaging", "yaml", "psutil", "dataclasses", "pathlib", "hashlib",
                   "difflib", "stackctl.doctor", "stackctl.bundle.render", "stackctl.engine", "stackctl.host")


def imported_by_validate(recipe: str) -> set[str]:
    # Without CI's coverage tracer: started in every interpreter by a .pth file, it imports dataclasses, pathlib and
    # hashlib itself, before stackctl runs a line.
    env = {k: v for k, v in os.environ.items() if k != "COVERAGE_PROCESS_START"}
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "stackctl", "validate", recipe], cwd=REPO,
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


@pytest.mark.parametrize("recipe", ["cpu-smoke.toml", "cpu-lmcache.toml"])
def test_validate_imports_nothing_only_other_commands_need(recipe):
    modules = imported_by_validate(str(RECIPES / recipe))
    assert "stackctl.rules.ruleset" in modules  # the run was read: validate's own modules are listed
    heavy = sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_ON_VALIDATE))
    assert heavy == []
