"""The code itself stays clean: pyflakes, pycodestyle and bugbear rules through ruff (line length is not checked
here). A bug class this caught once: lambdas made in a loop all binding the loop's last value."""

import subprocess

from helpers import REPO, tool


def test_ruff_finds_nothing():
    ruff = tool("ruff")
    result = subprocess.run([ruff, "check", "--select", "E,F,W,B", "--ignore", "E501", "stackctl", "checks",
                             "scripts", "benchmarks", "tests"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
