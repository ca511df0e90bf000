"""Bad input is one line and exit 1, never an internal error (exit 70), never a hang, never half-written output.
Every case runs the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import FIXTURES, RECIPES, REPO, run_cli, without_coverage

PASSING = FIXTURES / "rules" / "host-path-unsafe" / "pass.toml"


def one_line_error(result, *expected: str) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip() and "recipe(s)" not in line]
    assert len(lines) == 1, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("body", [
    'x = ' + '[' * 500 + ']' * 500,
    '[cache]\nextra = ' + '{a=' * 500 + '1' + '}' * 500,
    '[serve]\ncompilation_config = ' + '{a=' * 40 + '1' + '}' * 40,
])
def test_deeply_nested_toml(body, tmp_path):
    recipe = tmp_path / "deep.toml"
    recipe.write_text(body + "\n")
    result = run_cli("validate", str(recipe))
    assert result.returncode == 1 and "nested more than 32 deep" in result.stdout
    assert "internal error" not in result.stderr


def test_huge_tier_size_in_plan(tmp_path):
    recipe = tmp_path / "huge.toml"
    recipe.write_text((RECIPES / "atom-lmcache-cpu.toml").read_text().replace("size_gb = 200", "size_gb = 1e300"))
    result = run_cli("plan", str(recipe), "--gpu", "MI300X")
    assert result.returncode == 1 and "internal error" not in result.stderr
    assert "size_gb: must be <= 1048576, got 1e+300" in result.stderr


def test_output_under_a_file(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    one_line_error(run_cli("render", str(PASSING), "-o", str(blocker / "bundle")), "is a file, not a directory")
    one_line_error(run_cli("init", "--preset", "cpu-smoke", "-o", str(blocker / "r.toml")), "cannot write")
    doctor = run_cli("doctor", str(PASSING), "--scope", "host", "-o", str(blocker / "junit.xml"))
    assert doctor.returncode == 1 and "cannot write: Not a directory" in doctor.stderr
    assert "internal error" not in doctor.stderr


@pytest.mark.parametrize("target", ["/proc/stackctl-bundle", "/sys/stackctl/bundle"])
def test_output_in_pseudo_filesystems(target):
    one_line_error(run_cli("render", str(PASSING), "-o", target), "cannot write the bundle there")


@pytest.fixture
def open_tmp():
    """A temporary directory everyone may read (pytest's own are private to root, and `nobody` must reach it)."""
    folder = Path(tempfile.mkdtemp(prefix="stackctl-ro-"))
    folder.chmod(0o755)
    yield folder
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    shutil.rmtree(folder)


def test_read_only_output_directory_leaves_nothing(open_tmp):
    """A directory the user may not write: as root the check runs as `nobody` (root writes anywhere)."""
    parent = open_tmp / "ro"
    parent.mkdir()
    bundle = parent / "bundle"
    assert run_cli("render", str(PASSING), "-o", str(bundle)).returncode == 0  # an earlier bundle to replace
    parent.chmod(0o555)
    command = [sys.executable, "-m", "stackctl", "render", str(PASSING), "-o", str(bundle)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "util-linux setpriv is needed to drop root"
        command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] + command
    env = dict(os.environ, HOME=str(open_tmp), PYTHONDONTWRITEBYTECODE="1")
    if os.geteuid() == 0:
        # Under CI's coverage every interpreter writes a data file into the repository, which `nobody` may not:
        # that error would be printed, not stackctl's. This one process runs unmeasured.
        env = without_coverage(env)
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    parent.chmod(0o755)
    one_line_error(result, "cannot write the bundle there", "Permission denied")
    assert sorted(p.name for p in parent.iterdir()) == ["bundle"]  # no .old or staging leftovers
    assert (bundle / "manifest.json").is_file()  # the earlier bundle is intact


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("verb", ["validate", "render", "init"])
def test_special_files_as_input_never_hang(kind, verb, tmp_path):
    if kind == "fifo":
        path = tmp_path / "recipe.toml"
        os.mkfifo(path)
    else:
        path = "/dev/zero"
    args = {"validate": ["validate", str(path)], "render": ["render", str(path), "-o", str(tmp_path / "b")],
            "init": ["init", "--from-command", str(path)]}[verb]
    started = time.monotonic()
    one_line_error(run_cli(*args, timeout=30), "not a regular file")
    assert time.monotonic() - started < 10


def test_lmcache_config_fifo(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("vllm serve /m\n")
    fifo = tmp_path / "lmcache.yaml"
    os.mkfifo(fifo)
    one_line_error(run_cli("init", "--from-command", str(script), "--lmcache-config", str(fifo), timeout=30),
                   "not a regular file")


def _bomb(levels: int = 10, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\nchunk_size: 256\n"


@pytest.mark.parametrize("yaml_text,expected", [
    (_bomb(), "expand to more than 100,000 values"),
    ("a: &a [1, *a]\n", "expand to more than 100,000 values"),
    ("x: " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
])
def test_yaml_bombs_are_refused_quickly(yaml_text, expected, tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("vllm serve /m\n")
    config = tmp_path / "lmcache.yaml"
    config.write_text(yaml_text)
    # Timed without CI's coverage tracer, which alone can triple the parse time of the deeply nested case.
    env = without_coverage(os.environ)
    started = time.monotonic()
    one_line_error(run_cli("init", "--from-command", str(script), "--lmcache-config", str(config), timeout=60,
                           env=env), expected)
    # A bomb that got through would expand for minutes; a refused one takes a CLI start (under 1 s idle). The bound
    # keeps a 10x margin so a busy 2-core machine cannot flip it.
    assert time.monotonic() - started < 10.0


def test_yaml_with_a_few_aliases_still_imports(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("vllm serve /m\n")
    config = tmp_path / "lmcache.yaml"
    config.write_text("base: &base {blocking_timeout_secs: 10}\nother: *base\nchunk_size: 512\n")
    result = run_cli("init", "--from-command", str(script), "--lmcache-config", str(config))
    assert result.returncode == 0 and "chunk_size = 512" in result.stdout


@pytest.mark.parametrize("which", ["script", "yaml"])
def test_50_mb_inputs_are_refused_quickly(which, tmp_path):
    big = tmp_path / "big"
    with open(big, "w") as handle:
        handle.write("vllm serve /m\n" if which == "script" else "chunk_size: 256\n")
        handle.write(("# " + "x" * 98 + "\n") * 500_000)
    script = tmp_path / "launch.sh"
    script.write_text("vllm serve /m\n")
    args = ["--from-command", str(big)] if which == "script" else ["--from-command", str(script),
                                                                    "--lmcache-config", str(big)]
    started = time.monotonic()
    one_line_error(run_cli("init", *args, timeout=60), "over the limit")
    # A bomb that got through would expand for minutes; a refused one takes a CLI start (under 1 s idle). The bound
    # keeps a 10x margin so a busy 2-core machine cannot flip it.
    assert time.monotonic() - started < 10.0


def test_deep_json_in_a_flag(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("vllm serve /m --compilation-config '" + '{"a":' * 3000 + "1" + "}" * 3000 + "'\n")
    one_line_error(run_cli("init", "--from-command", str(script)), "nested too deeply")
    script.write_text("vllm serve /m --compilation-config '" + '{"a":' * 200 + "1" + "}" * 200 + "'\n")
    result = run_cli("init", "--from-command", str(script))
    assert result.returncode == 0 and "serve.compilation_config dropped: nested more than" in result.stdout


@pytest.mark.parametrize("scope", ["", " , "])
def test_empty_doctor_scope(scope):
    one_line_error(run_cli("doctor", str(PASSING), "--scope", scope), "--scope: no scope given")


def test_doctor_exit_codes_match_its_help():
    help_text = run_cli("doctor", "--help").stdout
    assert "0 no check failed, 1 a check failed or the input is wrong" in " ".join(help_text.split())
    one_line_error(run_cli("doctor", str(PASSING), "--scope", "gpu"), "unknown scope")
    one_line_error(run_cli("doctor", "/no/such/recipe.toml"), "no such recipe file")


@pytest.mark.parametrize("body,message", [
    ("[host]\ngpus = [0, -1]", "host.gpus: must be >= 0, got -1"),
    ("[host]\nnuma = -1", "host.numa: must be >= 0, got -1"),
    ("[host]\nnuma = [0, -2]", "host.numa: must be >= 0, got -2"),
    ("[cache]\nhash_seed = -5", "cache.hash_seed: must be >= 0, got -5"),
])
def test_negative_numbers_say_so(body, message, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('[stack]\nname = "n"\n[model]\npath = "/m"\n' + body + "\n")
    result = run_cli("validate", str(recipe))
    assert result.returncode == 1 and message in result.stdout, result.stdout
    assert "not an integer" not in result.stdout and "not an array" not in result.stdout
