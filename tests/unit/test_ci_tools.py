"""CI's own tools: which interpreters start coverage (scripts/coverage_startup.py) and how the phase times of a run
add up (benchmarks/ci_time.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from helpers import COVERAGE_START, REPO


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


coverage_startup = _load("coverage_startup", "scripts/coverage_startup.py")
ci_time = _load("ci_time", "benchmarks/ci_time.py")


@pytest.mark.parametrize(("argv", "program", "measured"), [
    (["/v/bin/python", "-m", "stackctl", "up", "r.toml"], "stackctl", True),
    (["/v/bin/python", "/v/bin/stackctl", "doctor"], "stackctl", True),
    (["/v/bin/python", "-X", "importtime", "-m", "stackctl", "validate"], "stackctl", True),
    (["/v/bin/python", "-c", "import stackctl"], "-c", True),
    (["/v/bin/python", "-u", "scripts/update-golden.py", "--check"], "update-golden.py", True),
    (["/v/bin/python3", "/v/bin/ansible-playbook", "-i", "hosts.ini", "rollout.yml"], "ansible-playbook", False),
    (["/v/bin/python", "/root/.ansible/tmp/x/AnsiballZ_command.py"], "AnsiballZ_command.py", False),
    (["/v/bin/python", "-m", "pip", "wheel", "."], "pip", False),
    (["/v/bin/python", "-m", "mypy", "stackctl"], "mypy", False),
])
def test_coverage_starts_where_stackctl_can_run_and_not_in_the_tools(argv, program, measured):
    assert coverage_startup.program(argv) == program
    assert coverage_startup.measured(argv) is measured


_REPORT = ("import sys; sys.path.insert(0, {scripts!r}); import coverage_startup; coverage_startup.start(); "
           "import coverage, os; print(coverage.Coverage.current() is not None, "
           "'COVERAGE_PROCESS_START' in os.environ)")


@pytest.mark.parametrize(("name", "started"), [("stackctl-like", True), ("ansible-playbook", False)])
def test_the_startup_measures_a_program_by_its_name_and_hands_no_variable_down(tmp_path, name, started):
    """A real interpreter: a script named NAME calls start() as the .pth does. Coverage runs in it or not by the
    name, and coverage's own variable is gone again either way (a child decides for itself)."""
    script = tmp_path / name
    script.write_text(_REPORT.format(scripts=str(REPO / "scripts")))
    env = dict(os.environ, **{COVERAGE_START: str(REPO / "pyproject.toml"),
                              "COVERAGE_FILE": str(tmp_path / ".coverage")})
    env.pop("COVERAGE_PROCESS_START", None)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(started), "False"]
    assert bool(list(tmp_path.glob(".coverage.*"))) is started  # a measured process writes its data file


_LOG = """\
==> wall time per phase
      7 s  setup: venv
   1514 s  tests: HIP build (in the background)
   2900 s  pytest tests connector/tests
    731 s    tests/faults (test time, inside the pytest phase)
   3094 s    tests/integration (test time, inside the pytest phase)
   2950 s  total
"""


def test_a_background_phase_is_listed_and_the_wall_time_is_the_runs_own_total():
    listed, wall = ci_time.phases(_LOG)
    assert [name for name, _ in listed] == ["setup: venv", "tests: HIP build (in the background)",
                                            "pytest tests connector/tests",
                                            "tests/faults (test time, inside the pytest phase)",
                                            "tests/integration (test time, inside the pytest phase)"]
    assert wall == 2950
    without_total = _LOG.replace("   2950 s  total\n", "")
    # Neither the background phase nor the test folders' shares of the pytest phase are added.
    assert ci_time.phases(without_total)[1] == 7 + 2900
