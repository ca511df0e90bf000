"""The code itself stays clean: pyflakes, pycodestyle and bugbear rules through ruff (line length is not checked
here), and one typing style: built-in generics and `X | None` (pyupgrade's UP006/UP007/UP035/UP045, for the oldest
Python pyproject.toml allows). A bug class this caught once: lambdas made in a loop all binding the loop's last value."""

import subprocess
import sys

from helpers import REPO, tool


def test_ruff_finds_nothing():
    ruff = tool("ruff")
    result = subprocess.run([ruff, "check", "--select", "E,F,W,B,UP006,UP007,UP035,UP045",
                             "--target-version", "py39", "--ignore", "E501", "stackctl", "probes",
                             "scripts", "benchmarks", "tests", "templates/files",
                             "connector"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing(tmp_path):
    """The package type-checks clean (settings in pyproject.toml [tool.mypy])."""
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_two_test_modules_share_a_name():
    """The test folders are not packages, so pytest imports each test module by its file name: two files of one name
    in different folders stop the whole run at collection ("import file mismatch")."""
    seen: dict[str, list[str]] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        if "fixtures" not in path.relative_to(REPO / "tests").parts:
            seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
