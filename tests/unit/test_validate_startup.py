"""`stackctl validate` stays a few standard-library imports above `python -c pass`: it imports none of the modules
only other commands need (click, jinja2, docker, psutil, doctor, the bundle renderer, ...), and compiles none of
the patterns a clean recipe does not need. Held by the modules `python -X importtime` names and the patterns `re`
is asked to compile, never by a stopwatch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import RECIPES, REPO, without_coverage

# Each is imported by stackctl somewhere (another command, a rare path of a rule); on validate's path each would
# add whole milliseconds (click, jinja2, docker: tens of them) to a run of about forty.
# typing and string: tomli (compiled) needs neither, so stackctl's own modules must not bring them (tomllib, the
# standard library's pure-Python parser, would bring both).
NOT_ON_VALIDATE = ("click", "jinja2", "docker", "packaging", "yaml", "psutil", "dataclasses", "pathlib", "hashlib",
                   "difflib", "typing", "string", "tomllib", "stackctl.doctor", "stackctl.bundle.render",
                   "stackctl.engine", "stackctl.host")


def imported_by_validate(recipe: str) -> set[str]:
    # Without CI's coverage tracer: started in every interpreter by a .pth file, it imports dataclasses, pathlib and
    # hashlib itself, before stackctl runs a line.
    env = without_coverage(os.environ)
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "stackctl", "validate", recipe], cwd=REPO,
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


@pytest.mark.parametrize("recipe", ["cpu-smoke.toml", "cpu-lmcache.toml"])
def test_validate_imports_nothing_only_other_commands_need(recipe):
    modules = imported_by_validate(str(RECIPES / recipe))
    assert "stackctl.rules.ruleset" in modules  # the run was read: validate's own modules are listed
    assert "tomli" in modules  # the compiled parser (stackctl/toml_parser.py): a dependency, so it is installed
    heavy = sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in NOT_ON_VALIDATE))
    assert heavy == []


# Run `stackctl validate RECIPE` as `python -m stackctl` does, printing every pattern `re` compiled (its cache misses
# go through re._compile) as JSON on the last line.
_LOG_PATTERNS = """
import json, re, runpy, sys
compiled, compile_ = [], re._compile
def logged(pattern, flags):
    compiled.append(getattr(pattern, "pattern", pattern))
    return compile_(pattern, flags)
re._compile = logged
sys.argv = ["stackctl", "validate", sys.argv[1]]
try:
    runpy.run_module("stackctl", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(json.dumps([p for p in compiled if isinstance(p, str)]))
"""


def patterns_compiled_by_validate(recipe: str) -> set[str]:
    env = without_coverage(os.environ)
    result = subprocess.run([sys.executable, "-c", _LOG_PATTERNS, recipe], cwd=REPO, capture_output=True, text=True,
                            env=env)
    assert result.returncode == 0 and ": ok" in result.stdout, result.stdout + result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.parametrize("recipe", ["cpu-smoke.toml", "cpu-lmcache.toml"])
def test_validate_compiles_no_pattern_a_clean_recipe_does_not_need(recipe):
    """The secret detector tries a name pattern only on a name holding a secret word and a value shape only on a
    value holding its literal; the forms of a source compile only when read (tests, explain). Compiling them all
    at import cost validate ~3 ms of a run of about forty."""
    from stackctl import secrets
    from stackctl.knowledge import sources
    from stackctl.recipe.model import NAME_PATTERN

    compiled = patterns_compiled_by_validate(str(RECIPES / recipe))
    assert NAME_PATTERN in compiled  # the log was read: the loader's stack.name pattern is on every run's path
    not_needed = {secrets._SECRET_NAME, secrets._NOT_SECRET_NAME, secrets.SECRET_FLAG, secrets._URL_CREDENTIALS,
                  *(pattern for _, _, pattern in secrets._SHAPES), *sources._FORMS.values()}
    assert sorted(not_needed & compiled) == []


@pytest.mark.parametrize(("call", "frozen"), [("main()", True), ("main(['validate', RECIPE])", False)])
def test_validate_as_the_program_spares_the_shutdown_collections(call, frozen):
    """Run as the program (main() reading the command line), validate runs without the cyclic collector and moves its
    objects to the collector's permanent generation before it exits, so the interpreter's collections at shutdown
    skip them; called with an argument list, as a library caller does, it leaves the collector alone."""
    recipe = str(RECIPES / "cpu-smoke.toml")
    code = (f"import atexit, gc, sys; RECIPE = {recipe!r}; sys.argv = ['stackctl', 'validate', RECIPE]; "
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0, 'collecting', gc.isenabled())); "
            f"from stackctl.cli import main; {call}")
    env = without_coverage(os.environ)
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [f"{recipe}: ok", f"frozen {frozen} collecting {not frozen}"]
