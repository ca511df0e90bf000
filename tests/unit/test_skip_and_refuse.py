"""Skip lists name only known ids and every report says what was skipped; render, build and up refuse a recipe
with rule errors unless --ignore-errors, which is loud and recorded in manifest.json. Through the real CLI."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, run_cli

FAILING = FIXTURES / "rules" / "extra-args-shadow-flag" / "fail.toml"  # an error of a rule this suite owns
PASSING = FIXTURES / "rules" / "extra-args-shadow-flag" / "pass.toml"


@pytest.mark.parametrize("args", [
    ("validate", "--skip", "extra-args-shadow-fla", str(PASSING)),
    ("validate", str(PASSING), "--skip=extra-args-shadow-fla", "--format", "json"),  # the click path
    ("doctor", str(PASSING), "--scope", "host", "--skip", "host.cpu-governr"),
])
def test_unknown_skip_id_is_one_line_with_did_you_mean(args):
    result = run_cli(*args)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a rule or check id" in lines[0] and "did you mean" in lines[0], lines


def test_unknown_id_in_recipe_checks_skip(tmp_path):
    result = run_cli("validate", str(FIXTURES / "rules" / "skip-unknown-id" / "fail.toml"))
    assert result.returncode == 1
    assert "skip-unknown-id" in result.stdout and "did you mean `host.cpu-governor`?" in result.stdout
    doctor = run_cli("doctor", str(FIXTURES / "rules" / "skip-unknown-id" / "fail.toml"), "--scope", "host")
    assert doctor.returncode == 1 and "checks.skip" in doctor.stderr and "host.cpu-governr" in doctor.stderr


def test_validate_reports_what_was_skipped(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(FAILING.read_text() + '\n[checks]\nskip = ["lmcache-tp-known-stall", "host.cpu-governor"]\n')
    text = run_cli("validate", str(recipe), "--skip", "extra-args-shadow-flag")
    assert text.returncode == 0, text.stdout + text.stderr
    assert "2 rule(s) skipped: extra-args-shadow-flag, lmcache-tp-known-stall" in text.stderr
    as_json = run_cli("validate", str(recipe), "--skip", "extra-args-shadow-flag", "--format", "json")
    assert json.loads(as_json.stdout)[0]["skipped"] == ["extra-args-shadow-flag", "lmcache-tp-known-stall"]
    nothing = run_cli("validate", str(PASSING))
    assert "0 rules skipped" in nothing.stderr


def test_doctor_reports_what_was_skipped(tmp_path):
    table = run_cli("doctor", str(PASSING), "--scope", "host", "--skip", "host.cpu-governor", "--skip", "host.isolcpus")
    assert table.returncode in (0, 1), table.stderr
    assert "(2 by request: host.cpu-governor, host.isolcpus)" in table.stdout
    as_json = run_cli("doctor", str(PASSING), "--scope", "host", "--skip", "host.cpu-governor", "--format", "json")
    assert json.loads(as_json.stdout)["skipped_by_request"] == ["host.cpu-governor"]


@pytest.mark.parametrize("verb", ["render", "build", "up"])
def test_lifecycle_refuses_rule_errors(verb, tmp_path):
    args = [verb, str(FAILING)] + (["-o", str(tmp_path / "bundle")] if verb == "render" else [])
    if verb == "up":
        args.append("--dry-run")
    result = run_cli(*args)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "extra-args-shadow-flag" in result.stderr and f"{verb} refused: 1 rule error(s)" in result.stderr
    assert "--ignore-errors" in result.stderr
    assert not (tmp_path / "bundle").exists()


def test_ignore_errors_is_loud_and_recorded(tmp_path):
    bundle = tmp_path / "bundle"
    result = run_cli("render", str(FAILING), "-o", str(bundle), "--ignore-errors")
    assert result.returncode == 0, result.stderr
    assert "WARNING: --ignore-errors: render goes ahead DESPITE 1 rule error(s) (extra-args-shadow-flag)" in result.stderr
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [e["rule_id"] for e in manifest["ignored_errors"]] == ["extra-args-shadow-flag"]
    clean = run_cli("render", str(PASSING), "-o", str(tmp_path / "clean"))
    assert clean.returncode == 0 and "ignored_errors" not in (tmp_path / "clean" / "manifest.json").read_text()


def test_bench_refuses_to_bring_up_an_arm_with_rule_errors(tmp_path):
    result = run_cli("bench", str(PASSING), "--arms", str(FAILING), "-o", str(tmp_path / "out"))
    assert result.returncode == 1 and "bench refused: 1 rule error(s) (extra-args-shadow-flag)" in result.stderr
    assert not (tmp_path / "out").exists()
