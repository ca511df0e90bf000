"""`stackctl render`: golden bundles, determinism, atomic writes, no shell injection, lint-clean output, no secrets.

Golden bundles live in tests/golden/<recipe>/; after an intended change run `python scripts/update-golden.py` and
review `git diff tests/golden` (tests/golden/README.md).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import RECIPES, REPO, run_cli, tool

from stackctl.bundle import keys
from stackctl.bundle import render, stackspec
from stackctl.errors import RecipeError, StackctlError
from stackctl.importer.writer import toml_value
from stackctl.recipe.loader import load_recipe, load_recipe_text
from stackctl.bundle.stackspec import StackSpec

GOLDEN = REPO / "tests" / "golden"
SHIPPED = sorted(RECIPES.glob("*.toml"), key=lambda p: p.stem)
UPDATE_HINT = ("if the change is intended, run `python scripts/update-golden.py` and review `git diff tests/golden` "
               "(see tests/golden/README.md)")


def on_disk(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def rendered(path: Path) -> dict[str, bytes]:
    return render.render_files(StackSpec(load_recipe(path)))


def golden_view(files: dict[str, bytes]) -> dict[str, bytes]:
    """What golden bundles keep: everything rendered, not the files copied verbatim from probes/, templates/files/ and connector/
    (test_verbatim_files_are_exact_copies covers those)."""
    copied = render.copied_sources()
    return {name: content for name, content in files.items() if name not in copied}


# -- golden bundles ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_bundle_matches_golden_files(path):
    files, golden = golden_view(rendered(path)), on_disk(GOLDEN / path.stem)
    where = f"tests/golden/{path.stem}/"
    if sorted(files) != sorted(golden):
        pytest.fail(f"{where}: rendered files {sorted(set(files) - set(golden))} are not in the golden bundle, "
                    f"golden files {sorted(set(golden) - set(files))} are no longer rendered; {UPDATE_HINT}")
    for name in sorted(files):
        if files[name] != golden[name]:
            diff = "".join(list(difflib.unified_diff(
                golden[name].decode(errors="replace").splitlines(True),
                files[name].decode(errors="replace").splitlines(True), f"golden/{name}", f"rendered/{name}"))[:40])
            pytest.fail(f"{where}{name} differs from what `stackctl render` writes now; {UPDATE_HINT}\n{diff}")


def test_verbatim_files_are_exact_copies():
    files = rendered(RECIPES / "cpu-smoke.toml")
    for name, source in render.verbatim_sources().items():
        assert files[name] == source.read_bytes(), name


def test_every_golden_bundle_belongs_to_a_shipped_recipe():
    folders = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())
    assert folders == [p.stem for p in SHIPPED], f"golden bundles and recipes/ disagree; {UPDATE_HINT}"


# -- determinism ------------------------------------------------------------------------------------------------

def test_rendering_twice_gives_the_same_bytes():
    for path in SHIPPED:
        assert rendered(path) == rendered(path)


_DIGEST = ("import hashlib, sys; from pathlib import Path; from stackctl.recipe.loader import load_recipe; "
           "from stackctl.bundle.render import render_files; from stackctl.bundle.stackspec import StackSpec; "
           "h = hashlib.sha256()\n"
           "for p in sorted(Path(sys.argv[1]).glob('*.toml')):\n"
           "    for name, data in sorted(render_files(StackSpec(load_recipe(p))).items()): "
           "h.update(name.encode() + data)\n"
           "print(h.hexdigest())")


def test_rendering_does_not_depend_on_the_process_hash_seed():
    digests = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run([sys.executable, "-c", _DIGEST, str(RECIPES)], env=env, capture_output=True,
                                text=True, timeout=120, check=True)
        digests.add(result.stdout.strip())
    assert len(digests) == 1


# -- atomic writes ----------------------------------------------------------------------------------------------

def recipe_cpu():
    return load_recipe(RECIPES / "cpu-smoke.toml")


def test_failed_write_keeps_the_existing_bundle_and_leaves_no_partial_directory(tmp_path):
    out = render.render(StackSpec(recipe_cpu()), tmp_path / "out")
    before = on_disk(out)
    # "serve.sh/x" cannot be created under the file "serve.sh": the write fails half-way through.
    broken = {"Dockerfile": b"FROM x\n", "serve.sh": b"#!/bin/sh\n", "serve.sh/x": b"", "zzz": b""}
    with pytest.raises(StackctlError, match="cannot write the bundle there"):
        render.write_bundle(broken, out)
    assert on_disk(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failed_write_of_a_new_bundle_leaves_nothing(tmp_path, monkeypatch):
    real_write, calls = Path.write_bytes, []

    def disk_fills_up(self, data):
        calls.append(self)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_bytes", disk_fills_up)
    with pytest.raises(StackctlError, match="No space left"):
        render.render(StackSpec(recipe_cpu()), tmp_path / "new")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(StackctlError, match="No space left"):
        calls.clear()
        render.render(StackSpec(recipe_cpu()), tmp_path / "deeper" / "new")
    assert [p.name for p in tmp_path.iterdir()] == ["deeper"] and list((tmp_path / "deeper").iterdir()) == []


def test_existing_bundle_survives_a_failed_swap(tmp_path, monkeypatch):
    out = render.render(StackSpec(recipe_cpu()), tmp_path / "out")
    before = on_disk(out)
    real_replace, calls = os.replace, []

    def second_rename_fails(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise OSError(18, "Invalid cross-device link")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_rename_fails)
    with pytest.raises(StackctlError, match="cross-device"):
        render.render(StackSpec(recipe_cpu()), out)
    monkeypatch.undo()
    assert out.is_dir() and on_disk(out) == before


def test_render_refuses_a_directory_that_is_not_a_bundle(tmp_path):
    target = tmp_path / "project"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    result = run_cli("render", "cpu-smoke", "-o", str(target))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "is not a stackctl bundle" in result.stderr and "Traceback" not in result.stderr
    assert on_disk(target) == {"notes.txt": b"mine"}
    # An empty directory and an earlier bundle are fine; the earlier bundle is replaced whole.
    empty = tmp_path / "empty"
    empty.mkdir()
    run_cli("render", "cpu-smoke", "-o", str(empty), check=True)
    (empty / "stale.txt").write_text("from an older render")
    run_cli("render", "cpu-smoke", "-o", str(empty), check=True)
    assert on_disk(empty) == rendered(RECIPES / "cpu-smoke.toml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "project"]


# -- hostile values ---------------------------------------------------------------------------------------------

def hostile_text(marker: Path) -> str:
    return f"it's \"q\" $(touch {marker}) `touch {marker}` ${{HOME}} a  b;c|d&e \\ #x * ~"


# Quotes, separators and globs, without the shell references render refuses outright (unresolved-value): the
# text the values that reach the server (model, parsers, env, extra args, compilation config) carry below; the
# build-time values (pip index, LMCache git ref) keep the command substitutions.
PLAIN_HOSTILE = "it's \"q\" a  b;c|d&e \\ #x * ! >o <i"


def hostile_recipe(tmp_path: Path, platform: str):
    marker = tmp_path / "pwned"
    evil = hostile_text(marker)
    git = f"https://example.com/x$(touch${{IFS}}{marker})`touch${{IFS}}{marker}`@v1"
    text = "\n".join([
        "[stack]", 'name = "hostile"', f'platform = "{platform}"',
        "[versions]", f"lmcache_git = {toml_value(git)}",
        "[model]", f"path = {toml_value('/models/' + PLAIN_HOSTILE)}", f"served_name = {toml_value(PLAIN_HOSTILE)}",
        f"reasoning_parser = {toml_value(PLAIN_HOSTILE)}",
        # cpu: the model is generated in the image (its path in a RUN line); rocm: mounted (its path in compose)
        'generate = "tiny-random-llama"' if platform == "cpu" else "",
        "[serve]", f"env = {toml_value({'EVIL': PLAIN_HOSTILE})}", f"extra_args = {toml_value(['--x', PLAIN_HOSTILE])}",
        f"compilation_config = {toml_value({'k': PLAIN_HOSTILE})}",
        "[cache]", "enabled = true", "hash_seed = 0",
        "[build]", f"pip_index = {toml_value('https://pypi.example.com/simple/' + evil)}", ""])
    return load_recipe_text(text), marker, evil


def fake_server_bin(folder: Path) -> Path:
    """`python` and `vllm` that print their argv as JSON instead of serving."""
    folder.mkdir()
    for name in ("python", "vllm"):
        tool = folder / name
        tool.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                        "print(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]))\n")
        tool.chmod(0o755)
    return folder


@pytest.mark.parametrize("platform", ["cpu", "rocm"])
def test_hostile_values_cannot_inject_shell_into_serve_sh(tmp_path, platform):
    recipe, marker, evil = hostile_recipe(tmp_path, platform)
    bundle = render.render(StackSpec(recipe), tmp_path / "bundle")
    serve = bundle / "serve.sh"
    subprocess.run(["bash", "-n", str(serve)], check=True, timeout=30)
    bin_dir = fake_server_bin(tmp_path / "bin")
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"}  # no STACKCTL_NUMA_NODES
    result = subprocess.run(["bash", str(serve)], env=env, cwd=work, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    argv = json.loads(result.stdout)
    # On cpu (model.dtype "auto"), without `up`'s decision serve.sh decides from this CPU's flags and says so.
    decided = ["--dtype", argv[-1]] if platform == "cpu" else []
    assert decided in ([], ["--dtype", "float32"], ["--dtype", "bfloat16"])
    assert platform != "cpu" or "no decision from stackctl up: this CPU's flags decide" in result.stderr
    assert argv == stackspec.server_command(recipe) + stackspec.serve_args(recipe) + decided
    assert PLAIN_HOSTILE in argv and "/models/" + PLAIN_HOSTILE in argv
    assert not marker.exists() and list(work.iterdir()) == []


@pytest.mark.parametrize("key,value", [("model.path", "$MODEL_DIR/m"), ("model.served_name", "${NAMES[$i]}"),
                                       ("serve.env.X", "$(hostname)"), ("serve.extra_args", "`id`"),
                                       ("model.path", "<your model file path>")])
def test_render_refuses_values_a_shell_would_have_expanded(key, value):
    section, name, *rest = key.split(".")
    if rest:
        table = f"[{section}]\n{name} = {{ {rest[0]} = {toml_value(value)} }}\n"
    elif name == "extra_args":
        table = f"[{section}]\nextra_args = [{toml_value(value)}]\n"
    else:
        table = f"[{section}]\n{name} = {toml_value(value)}\n"
    text = '[stack]\nname = "r"\n' + ("" if key == "model.path" else '[model]\npath = "/m"\n') + table
    recipe = load_recipe_text(text.replace("[model]\npath = \"/m\"\n[model]\n", "[model]\npath = \"/m\"\n"))
    with pytest.raises(StackctlError, match="unresolved-value"):
        render.render_files(StackSpec(recipe))


@pytest.mark.parametrize("platform", ["cpu", "rocm"])
def test_hostile_values_stay_quoted_in_the_other_bundle_files(tmp_path, platform):
    recipe, marker, evil = hostile_recipe(tmp_path, platform)
    files = render.render_files(StackSpec(recipe))
    dockerfile = files["Dockerfile"].decode()
    run_bodies = [body for keyword, body in dockerfile_instructions(dockerfile) if keyword == "RUN"]
    words = []
    for body in run_bodies:
        subprocess.run(["bash", "-n", "-c", body], check=True, timeout=30)
        words += shlex.split(body)
    if platform == "cpu":
        assert "/models/" + PLAIN_HOSTILE in words  # the generated model's path: exactly one word
    else:
        assert "git+" + recipe.versions.lmcache_git in words
    for keyword, body in dockerfile_instructions(dockerfile):
        if keyword in ("ENV", "LABEL"):
            assert not re.search(r"(?<!\\)\$(?!PATH\b)", body), f"unescaped $ in {keyword} {body}"
    assert f"EVIL={PLAIN_HOSTILE}\n" in files["stack.env"].decode()  # docker --env-file takes the line literally
    yaml = pytest.importorskip("yaml")
    service = yaml.safe_load(files["compose.yaml"])["services"]["hostile"]
    volumes = [v.replace("$$", "$") for v in service["volumes"]]  # `$$` is compose's escaped `$`
    path = "/models/" + PLAIN_HOSTILE
    assert (f"{path}:{path}:ro" in volumes) == (platform == "rocm")  # cpu generates the model in the image
    assert json.loads(files["manifest.json"])["stack"] == "hostile"
    assert not marker.exists()


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, body) per instruction, continuation lines joined, comments skipped."""
    instructions, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line[:-1] + "\n" if line.endswith("\\") else line
        if not line.endswith("\\"):
            keyword, _, body = current.strip().partition(" ")
            instructions.append((keyword, body.replace("\\\n", "").replace("\n", " ")))
            current = ""
    return instructions


@pytest.mark.parametrize("model, serve", [
    ('path = "/models/a\\nb"', ""), ('path = "/m"\nserved_name = "a\\nb"', ""),
    ('path = "/m"', 'env = { A = "x\\ntouch /tmp/y" }'), ('path = "/m"', 'extra_args = ["--x", "a\\rb"]'),
], ids=["model.path", "served_name", "env", "extra_args"])
def test_loader_refuses_newlines_that_would_split_a_line(model, serve):
    text = f'[stack]\nname = "n"\n[model]\n{model}\n[serve]\n{serve}\n'
    with pytest.raises(RecipeError, match="control characters"):
        load_recipe_text(text)


def test_secret_env_names_cannot_rewrite_compose_yaml():
    yaml = pytest.importorskip("yaml")
    text = '[stack]\nname = "n"\n[model]\npath = "/m"\n[serve.secret_env]\n"A: b" = "X}\\" c"\n'
    try:
        recipe = load_recipe_text(text)
    except RecipeError:
        return  # refusing such names is a fix
    environment = yaml.safe_load(render.render_files(StackSpec(recipe))["compose.yaml"])["services"]["n"]["environment"]
    assert list(environment) == ["A: b"]


def test_env_names_are_variable_names():
    text = '[stack]\nname = "n"\n[model]\npath = "/m"\n[serve.env]\n"A=B" = "x"\n'
    try:
        recipe = load_recipe_text(text)
    except RecipeError:
        return
    lines = render.render_files(StackSpec(recipe))["stack.env"].decode().splitlines()
    parsed = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    assert parsed.get("A=B") == "x"


# -- lint -------------------------------------------------------------------------------------------------------



VARIANTS = {
    "rocm-lmcache-git-pip-index": '[stack]\nname = "v1"\n[versions]\nlmcache_git = '
                                  '"https://github.com/LMCache/LMCache@v0.5.6"\n[model]\npath = "/m"\n[cache]\n'
                                  'enabled = true\nhash_seed = 0\n[build]\npip_index = "https://pypi.example.com/s"\n',
    "rocm-lmcache-wheel-no-purge": '[stack]\nname = "v2"\nbase_image = "rocm/vllm:v0.27.1"\n[versions]\n'
                                   'lmcache = "0.5.6"\n[model]\npath = "/m"\n[cache]\nenabled = true\n[build]\n'
                                   'lmcache_from = "wheel"\npurge_cuda_packages = false\n',
    "cpu-lmcache-numa": '[stack]\nname = "v3"\nplatform = "cpu"\n[model]\npath = "/opt/m"\n'
                        'generate = "tiny-random-llama"\n[cache]\nenabled = true\n[host]\nnuma = [0, 1]\n',
}


def lint_cases() -> list:
    cases = [pytest.param(lambda _, p=path: rendered(p), id=path.stem) for path in SHIPPED]
    cases += [pytest.param(lambda _, t=text: render.render_files(StackSpec(load_recipe_text(t))), id=name)
              for name, text in VARIANTS.items()]
    cases += [pytest.param(lambda tmp, p=platform: render.render_files(StackSpec(hostile_recipe(tmp, p)[0])),
                           id=f"hostile-{platform}") for platform in ("cpu", "rocm")]
    return cases


@pytest.mark.parametrize("make_files", lint_cases())
def test_dockerfile_is_hadolint_clean(make_files, tmp_path):
    hadolint = tool("hadolint")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_bytes(make_files(tmp_path)["Dockerfile"])
    result = subprocess.run([hadolint, "--config", str(REPO / ".hadolint.yaml"), "--no-color", str(dockerfile)],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, ""), dockerfile.read_text()


@pytest.mark.parametrize("make_files", lint_cases())
def test_shell_scripts_are_shellcheck_clean(make_files, tmp_path):
    shellcheck = tool("shellcheck")
    files = make_files(tmp_path)
    for name in ("serve.sh", "build/pip.sh"):
        script = tmp_path / name.replace("/", "-")
        script.write_bytes(files[name])
        result = subprocess.run([shellcheck, "--severity=style", str(script)], capture_output=True, text=True,
                                timeout=60)
        assert (result.returncode, result.stdout + result.stderr) == (0, ""), name


# -- secrets ----------------------------------------------------------------------------------------------------

SECRET_VALUES = {"LMCACHE_S3_ACCESS_KEY_ID": "AKIAFAKERENDERKEY777",
                 "LMCACHE_S3_SECRET_ACCESS_KEY": "fAkE/rEnDeR+SeCrEt777", "HF_TOKEN": "hf_fakeRenderToken777"}


def test_secret_values_never_reach_the_bundle(tmp_path, monkeypatch):
    for name, value in SECRET_VALUES.items():
        monkeypatch.setenv(name, value)
    recipe_path = tmp_path / "s3.toml"
    shipped = (RECIPES / "vllm-lmcache-s3.toml").read_text()
    recipe_path.write_text(shipped + '\n[serve.secret_env]\nHF_TOKEN = "HF_TOKEN"\n')
    # As a user runs it: the CLI in a process whose environment holds the secrets.
    run_cli("render", str(recipe_path), "-o", str(tmp_path / "bundle"), env=dict(os.environ), check=True)
    files = on_disk(tmp_path / "bundle")
    assert files == render.render_files(StackSpec(load_recipe(recipe_path)))
    for name, content in files.items():
        for value in SECRET_VALUES.values():
            assert value.encode() not in content, f"{value} leaked into {name}"
            assert hashlib.sha256(value.encode()).hexdigest().encode() not in content
    compose = files["compose.yaml"].decode()
    for variable in SECRET_VALUES:
        for name, content in files.items():
            if name != "compose.yaml":
                assert variable.encode() not in content, f"{variable} named in {name}"
        reference = "${" + variable + ":?set " + variable + " in your environment}"
        assert reference in compose
        for line in compose.splitlines():  # named only in `CONTAINER_VAR: "${HOST_VAR:?...}"` entries
            if variable in line:
                assert re.fullmatch(r'      [A-Z_][A-Z0-9_]*: "\$\{[A-Z_][A-Z0-9_]*:\?set [A-Z_][A-Z0-9_]* in your '
                                    r'environment\}"', line), line
    environment = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
                   for line in compose.split("environment:\n", 1)[1].split("    volumes:")[0].splitlines()}
    secrets = {name: value for name, value in environment.items() if value.startswith('"${')}
    assert set(environment) - set(secrets) == set(stackspec.environment(load_recipe(recipe_path)))  # stack.env
    assert secrets == {
        "AWS_ACCESS_KEY_ID": '"${LMCACHE_S3_ACCESS_KEY_ID:?set LMCACHE_S3_ACCESS_KEY_ID in your environment}"',
        "AWS_SECRET_ACCESS_KEY":
            '"${LMCACHE_S3_SECRET_ACCESS_KEY:?set LMCACHE_S3_SECRET_ACCESS_KEY in your environment}"',
        "HF_TOKEN": '"${HF_TOKEN:?set HF_TOKEN in your environment}"'}


@pytest.mark.parametrize(("value", "flags"), [
    (None, []), (True, ["--async-scheduling"]), (False, ["--no-async-scheduling"])])
def test_async_scheduling_is_tri_state(value, flags):
    recipe = load_recipe(RECIPES / "atom-lmcache-cpu.toml")
    recipe.serve.async_scheduling = value
    args = stackspec.serve_args(recipe)
    assert [a for a in args if "async-scheduling" in a] == flags


def test_layerwise_is_written_where_vllm_looks_for_it():
    recipe = load_recipe(RECIPES / "atom-lmcache-cpu.toml")
    args = stackspec.serve_args(recipe)
    assert json.loads(args[args.index("--kv-transfer-config") + 1]) == keys.KV_CONNECTOR
    recipe.cache.use_layerwise = True
    args = stackspec.serve_args(recipe)
    config = json.loads(args[args.index("--kv-transfer-config") + 1])
    assert config["kv_connector_extra_config"] == {"use_layerwise": True}
    assert stackspec.lmcache_config(recipe)["use_layerwise"] is True


def test_compiled_templates_are_kept_and_a_damaged_or_unwritable_cache_only_compiles_again(tmp_path, monkeypatch):
    """Every doctor run renders the bundle for the image tag; its templates' compiled code is kept in the user's
    cache directory (jinja2's bytecode cache, checked against each template's source). The bundle is byte for byte
    the same with a cold cache, a warm one, a damaged one and none at all."""
    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cold = render.render_files(StackSpec(recipe), guard=False)
    kept = list((tmp_path / "cache" / "stackctl").glob("templates-*/*.cache"))
    assert len(kept) >= 5, kept
    assert render.render_files(StackSpec(recipe), guard=False) == cold
    for path in kept:
        path.write_bytes(b"not marshal data")
    assert render.render_files(StackSpec(recipe), guard=False) == cold
    assert all(path.read_bytes() != b"not marshal data" for path in kept)  # compiled again and kept again
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a cache directory that cannot be made
    assert render.render_files(StackSpec(recipe), guard=False) == cold
