"""The CLI as users run it: help everywhere, exit codes, one-line errors."""

import json

import pytest
from helpers import FIXTURES, RECIPES, run_cli

from stackctl.cli import COMMANDS


def test_python_m_and_top_level_help():
    result = run_cli("--help", check=True)
    for name in COMMANDS:
        assert name in result.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_has_help(command):
    result = run_cli(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout


def test_validate_shipped_recipes_exits_zero():
    result = run_cli("validate", *sorted(str(p) for p in RECIPES.glob("*.toml")))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 error(s)" in result.stderr


def test_validate_failing_fixture_exits_one_with_location():
    path = FIXTURES / "rules" / "lmcache-hash-seed" / "fail.toml"
    result = run_cli("validate", str(path))
    assert result.returncode == 1
    assert f"{path}:" in result.stdout and "error[lmcache-hash-seed]" in result.stdout


def test_warnings_fail_only_with_strict():
    path = str(FIXTURES / "rules" / "removed-env-var" / "fail.toml")
    assert run_cli("validate", path).returncode == 0
    assert run_cli("validate", "--strict", path).returncode == 1


def test_validate_json():
    path = FIXTURES / "rules" / "save-decode-cache" / "fail.toml"
    payload = json.loads(run_cli("validate", "--format", "json", str(path)).stdout)
    assert payload[0]["findings"][0]["rule_id"] == "save-decode-cache"
    assert payload[0]["findings"][0]["line"] > 1


def test_bad_recipe_is_one_line_per_problem_no_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[stack]\nname = "x"\nplatfrom = "cpu"\n[model]\npath = "/m"\n')
    result = run_cli("validate", str(bad))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    assert f"{bad}:3:1: stack.platfrom: unknown key (fix: did you mean `platform`?)" in result.stdout


def test_shipped_recipe_by_name_and_unknown_file():
    assert run_cli("validate", "cpu-smoke").returncode == 0
    result = run_cli("validate", "no-such-recipe.toml")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "no such recipe file" in result.stderr


def test_explain_rules_and_schema():
    page = run_cli("explain", "lmcache-hash-seed", check=True).stdout
    assert "PYTHONHASHSEED" in page
    # The fix is printed once, from the rule's fix=.
    assert [line for line in page.splitlines() if "Fix:" in line] == [
        "Fix: set cache.hash_seed = 0 (any fixed value, the same everywhere), or pre_caching_hash_algorithm = "
        "sha256_cbor on vLLM 0.29 or later"]
    unknown = run_cli("explain", "lmcache-hash-sed")
    assert unknown.returncode == 1 and "did you mean `lmcache-hash-seed`" in unknown.stderr
    assert "atom-cuda-graphs" in run_cli("rules", check=True).stdout
    schema = json.loads(run_cli("schema", check=True).stdout)
    assert schema["properties"]["cache"]["properties"]["tiers"]["items"]["properties"]["kind"]["enum"] == [
        "cpu", "disk", "s3", "fs"]


def test_init_preset_round_trips_through_validate(tmp_path):
    out = tmp_path / "mine.toml"
    run_cli("init", "--preset", "atom-lmcache-cpu", "-o", str(out), check=True)
    assert run_cli("validate", str(out)).returncode == 0
    again = run_cli("init", "--preset", "atom-lmcache-cpu", "-o", str(out))
    assert again.returncode == 1 and "already exists" in again.stderr


def test_readme_recipe_reference_is_in_step():
    from helpers import REPO

    from stackctl.recipe.schema import markdown_reference

    readme = (REPO / "README.md").read_text()
    start, end = "<!-- recipe-reference:start -->\n", "<!-- recipe-reference:end -->"
    assert start in readme and end in readme, "README lacks the recipe reference markers"
    current = readme.split(start, 1)[1].split(end, 1)[0]
    assert current == markdown_reference(), "regenerate it: python scripts/update-readme.py"


def test_validate_host_reports_tiers_this_host_cannot_hold(tmp_path):
    recipe = tmp_path / "big.toml"
    recipe.write_text((RECIPES / "atom-lmcache-cpu.toml").read_text().replace("size_gb = 200", "size_gb = 100000"))
    assert "host.cpu-tier-ram" not in run_cli("validate", str(recipe)).stdout  # host-independent by default
    result = run_cli("validate", "--host", str(recipe))
    assert result.returncode == 0, result.stderr
    assert "warning[host.cpu-tier-ram] cache.tiers[0]: on this host: CPU tier 100000.0 GiB" in result.stdout
    assert run_cli("validate", "--host", "--strict", str(recipe)).returncode == 1


def test_ctrl_c_exits_130_and_bugs_are_one_line_without_debug(monkeypatch, capsys):
    import stackctl.cli as cli_module

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "_run", interrupted)
    with pytest.raises(SystemExit) as info:
        cli_module.main(["validate", "x.toml"])
    assert info.value.code == 130 and "interrupted" in capsys.readouterr().err

    def bug(argv):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(cli_module, "_run", bug)
    with pytest.raises(SystemExit) as info:
        cli_module.main(["validate", "x.toml"])
    err = capsys.readouterr().err
    assert info.value.code == 70 and err.count("\n") == 1 and "internal error: ZeroDivisionError: boom" in err
    with pytest.raises(ZeroDivisionError):
        cli_module.main(["--debug", "validate", "x.toml"])


def _command_paths(command, path=()):
    """Every command path of the CLI object, the group itself first: (), ("validate",), ("fleet", "rollout"), ..."""
    import click

    yield path
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from _command_paths(command.get_command(ctx, name), (*path, name))


def test_every_verb_exits_1_on_bad_usage(capsys):
    """A usage error is a user error: exit 1 (not click's 2, which is stackctl's could-not-run), click's usage line
    and one `Error:` line naming the option. Walks the CLI object, so a new verb or subcommand is covered too."""
    import stackctl.cli as cli_module

    paths = list(_command_paths(cli_module._build_cli()))
    assert {p[0] for p in paths if p} == set(COMMANDS) and ("fleet", "rollout") in paths
    for path in paths:
        with pytest.raises(SystemExit) as info:
            cli_module.main([*path, "--no-such-option"])
        captured = capsys.readouterr()
        errors = [line for line in captured.err.splitlines() if line.startswith("Error:")]
        shown = " ".join(("stackctl", *path))
        assert info.value.code == 1, (shown, info.value.code, captured.err)
        assert errors == ["Error: No such option '--no-such-option'."], (shown, captured.err)
        assert captured.err.startswith(f"Usage: {shown} ") and captured.out == "", (shown, captured)


def test_top_level_help_lists_every_exit_status():
    from stackctl.errors import ExitCode

    epilog = run_cli("--help", check=True).stdout.split("Exit status:", 1)[1]
    assert [int(line.split()[0]) for line in epilog.strip().splitlines()] == [int(code) for code in ExitCode]


def test_doctor_exits_2_when_it_cannot_reach_the_engine(tmp_path):
    import os

    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock", STACKCTL_STATE_DIR=str(tmp_path))
    result = run_cli("doctor", "cpu-smoke", "--scope", "image", "--format", "json", env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    results = {r["id"]: r for r in json.loads(result.stdout)["results"]}
    assert results["image.cuda-only-packages"]["status"] == "skip"
    assert "no Docker engine" in results["image.cuda-only-packages"]["message"]


def test_plan_for_the_nvme_arm_at_32_users_100k_overflows_hbm():
    result = run_cli("plan", "atom-lmcache-cpu-nvme", "--users", "32", "--context", "100000", "--gpu", "MI300X",
                     "--format", "json", check=True)
    plan = json.loads(result.stdout)
    assert plan["bytes_per_token_total"] == 126_976  # MiniMax-M2.5, fp8 KV
    assert plan["working_set_tokens"] == 3_200_000 and plan["working_set_bytes"] == 406_323_200_000
    assert plan["hbm_tokens"] < plan["working_set_tokens"]
    assert plan["regime"] == "needs-disk-tier"
    text = run_cli("plan", "atom-lmcache-cpu-nvme", "--gpu", "MI300X", check=True).stdout
    assert "Regime: needs-disk-tier" in text and "406.3 GB" in text


def test_up_refuses_a_rocm_stack_on_a_host_without_gpus_before_building(tmp_path):
    import os
    from pathlib import Path

    if Path("/dev/kfd").exists():
        pytest.skip("this host has /dev/kfd")
    env = dict(os.environ, STACKCTL_STATE_DIR=str(tmp_path), DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock")
    result = run_cli("up", "atom-lmcache-cpu", env=env)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "platform rocm but /dev/kfd is missing" in result.stderr


def test_bench_checks_matplotlib_before_bringing_any_arm_up(tmp_path):
    import os
    import subprocess
    import sys

    # matplotlib made unimportable; the engine address leads nowhere, so any arm start would fail differently.
    code = ("import sys; sys.modules['matplotlib'] = None; from stackctl.cli import main; "
            "main(['bench', 'cpu-smoke', '--arms', 'cpu-smoke', '-o', sys.argv[1]])")
    env = dict(os.environ, STACKCTL_STATE_DIR=str(tmp_path), DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == ("stackctl: bench needs matplotlib to draw bench.png (fix: pip install "
                                     "matplotlib, or pip install 'stackctl[test]')")
    assert not (tmp_path / "out").exists()
