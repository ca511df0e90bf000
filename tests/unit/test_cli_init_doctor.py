"""`stackctl init` and `stackctl doctor` through the real CLI: listing, option errors (one line, exit 1), output to
stdout or a file, doctor without a recipe (this host, host scope only), and doctor when no Docker engine answers
(exit 2, one line on stderr, the report still written)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from helpers import RECIPES, run_cli

from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS

load_all()
SHIPPED = sorted(p.stem for p in RECIPES.glob("*.toml"))


def env_without_engine(tmp_path):
    import os

    return dict(os.environ, STACKCTL_STATE_DIR=str(tmp_path / "state"),
                DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")


def test_init_lists_every_shipped_preset_with_its_platform_and_whole_description():
    import tomllib

    result = run_cli("init", "--list", check=True)
    lines = result.stdout.splitlines()
    rows = lines[:len(SHIPPED)]
    assert [line.split()[0] for line in rows] == SHIPPED
    for name, line in zip(SHIPPED, rows):
        stack = tomllib.loads((RECIPES / f"{name}.toml").read_text())["stack"]
        # Whole: the description as written, never cut at a line of the header comment.
        assert line.split()[1] == stack.get("platform", "rocm") and line.endswith(stack["description"]), line
    assert lines[-1] == "stackctl init --preset NAME -o my.toml writes one, with its comments."


def test_init_needs_exactly_one_source():
    for args in ([], ["--preset", "cpu-smoke", "--from-command", "x.sh"]):
        result = run_cli("init", *args)
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr == "stackctl: init: give exactly one of --preset NAME or --from-command FILE (see --list)\n"


def test_init_names_the_presets_when_one_is_unknown():
    result = run_cli("init", "--preset", "cpu-smok")
    assert result.returncode == 1
    assert result.stderr.strip() == f"stackctl: init: unknown preset 'cpu-smok' (fix: one of {', '.join(SHIPPED)})"


def test_init_prints_the_preset_without_o_and_writes_it_with_o(tmp_path):
    printed = run_cli("init", "--preset", "cpu-smoke", check=True)
    assert printed.stdout == (RECIPES / "cpu-smoke.toml").read_text()
    out = tmp_path / "mine.toml"
    written = run_cli("init", "--preset", "cpu-smoke", "-o", str(out), check=True)
    assert out.read_text() == printed.stdout and written.stdout == ""
    assert written.stderr.strip() == f"wrote {out}; next: stackctl validate {out}"
    forced = run_cli("init", "--preset", "atom-hbm-only", "-o", str(out), "--force", check=True)
    assert forced.returncode == 0 and out.read_text() == (RECIPES / "atom-hbm-only.toml").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["mine.toml"]  # no temporary file left


def test_doctor_lists_every_check():
    result = run_cli("doctor", "--list", check=True)
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(CHECKS)
    assert "host.docker-engine           host   error   the Docker engine answers" in result.stdout


def test_doctor_without_a_recipe_checks_this_host_only(tmp_path):
    result = run_cli("doctor", "--format", "json", env=env_without_engine(tmp_path))
    report = json.loads(result.stdout)
    assert (report["stack"], report["recipe"], report["scopes"]) == ("this-host", "<this host>", ["host"])
    assert {r["scope"] for r in report["results"]} == {"host"}
    assert len(report["results"]) == sum(1 for c in CHECKS.values() if c.scope == "host")
    engine = next(r for r in report["results"] if r["id"] == "host.docker-engine")
    assert engine["status"] == "fail" and engine["fix"]
    assert result.returncode == 1  # a check failed (the engine); doctor itself ran


def test_doctor_without_an_engine_exits_2_and_still_writes_the_report(tmp_path):
    out = tmp_path / "junit.xml"
    result = run_cli("doctor", str(RECIPES / "cpu-smoke.toml"), "--scope", "host,image", "--format", "junit",
                     "-o", str(out), env=env_without_engine(tmp_path))
    assert result.returncode == 2, result.stderr
    stderr = result.stderr.splitlines()
    assert stderr[0].startswith(f"stackctl: cannot reach the Docker engine at unix://{tmp_path}/no-engine.sock: ")
    assert stderr[-1] == f"wrote {out}" and result.stdout == ""
    suite = ET.parse(out).getroot().find("testsuite")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert cases["host.docker-engine"].find("failure") is not None
    image_cases = [case for name, case in cases.items() if name.startswith("image.")]
    assert image_cases and all(case.find("skipped") is not None for case in image_cases)


def test_doctor_prints_its_table_and_writes_the_same_results_as_json_in_one_run(tmp_path):
    """--json FILE: the table for the reader and the JSON for a program from one run (a --deep run takes minutes)."""
    out = tmp_path / "doctor.json"
    result = run_cli("doctor", str(RECIPES / "cpu-smoke.toml"), "--scope", "host,image", "--json", str(out),
                     env=env_without_engine(tmp_path))
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == f"wrote {out}"
    table = {line.split()[1]: line.split()[0] for line in result.stdout.splitlines()
             if line.split()[:1] and line.split()[0] in ("ok", "FAIL", "WARN", "skip")}
    written = {entry["id"]: entry["status"] for entry in json.loads(out.read_text())["results"]}
    assert table and table == {check: {"pass": "ok", "fail": "FAIL", "warning": "WARN", "skip": "skip"}[status]
                               for check, status in written.items()}


def test_a_preset_without_a_description_is_summed_up_by_its_first_sentence(tmp_path):
    from stackctl.cli.init import preset_summary

    recipe = tmp_path / "r.toml"
    recipe.write_text("# A stack for the lab. It has a second sentence\n# that goes on.\n\n[stack]\nname = \"x\"\n"
                      "platform = \"cpu\"\n")
    assert preset_summary(recipe) == ("cpu", "A stack for the lab.")
