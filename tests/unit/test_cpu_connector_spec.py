"""The recipe switch of stackctl's LMCache connector for vLLM-CPU (`[cache] cpu_connector`): which images carry it,
what the server's environment says, the rules around it, and the importer reading it back. The connector itself runs
only inside the image (torch, vLLM, LMCache): tests/integration/test_cpu_connector.py tests it there."""

from __future__ import annotations

import pytest
from helpers import RECIPES

from stackctl import layout
from stackctl.bundle import render, stackspec
from stackctl.importer import import_launch
from stackctl.recipe.loader import load_recipe, load_recipe_text
from stackctl.rules.ruleset import run_rules
from stackctl.bundle.stackspec import StackSpec

CPU_TIERS = (RECIPES / "cpu-tiers.toml").read_text()
ROCM = (RECIPES / "atom-lmcache-cpu.toml").read_text()
CONNECTOR_FILES = {"connector/stackctl_lmcache_cpu.pth", "connector/stackctl_lmcache_cpu/hook.py",
                   "connector/stackctl_lmcache_cpu/connector.py", "connector/stackctl_lmcache_cpu/layout.py",
                   "connector/stackctl_lmcache_cpu/transfer.py", "connector/stackctl_lmcache_cpu/native.py",
                   "connector/stackctl_lmcache_cpu/kvcopy.c"}


def cpu_recipe(switch: str | None = None, extra: str = ""):
    text = CPU_TIERS.replace("hash_seed = 0\n", "hash_seed = 0\n" + (f"cpu_connector = {switch}\n" if switch else "")
                             + extra, 1)
    return load_recipe_text(text)


@pytest.mark.parametrize(("switch", "value"), [(None, "1"), ("true", "1"), ("false", "0")])
def test_cpu_stack_with_lmcache_carries_the_connector_and_the_switch_says_on_or_off(switch, value):
    recipe = cpu_recipe(switch)
    assert stackspec.cpu_connector_shipped(recipe)
    assert stackspec.environment(recipe)[layout.CPU_CONNECTOR_ENV] == value
    files = render.render_files(StackSpec(recipe))
    assert CONNECTOR_FILES <= set(files)
    assert "COPY connector/ /opt/stackctl/connector/" in files["Dockerfile"].decode()
    # the image compiles the connector's copy loop and proves it loads
    assert ("python -m stackctl_lmcache_cpu.native build && python -m stackctl_lmcache_cpu.native check"
            in files["Dockerfile"].decode())
    assert f"{layout.CPU_CONNECTOR_ENV}={value}\n" in files["stack.env"].decode()


def test_switching_it_off_does_not_rebuild_the_image():
    on, off = render.render_files(StackSpec(cpu_recipe())), render.render_files(StackSpec(cpu_recipe("false")))
    assert render.image_hash(on) == render.image_hash(off)


def test_connector_files_are_exact_copies_of_stackctls_own():
    files = render.render_files(StackSpec(cpu_recipe()))
    sources = render.connector_sources()
    assert set(sources) <= set(files)
    for name, source in sources.items():
        assert files[name] == source.read_bytes(), name


@pytest.mark.parametrize("recipe_file", ["cpu-smoke.toml", "atom-lmcache-cpu.toml", "vllm-lmcache-s3.toml"])
def test_rocm_images_and_cpu_images_without_lmcache_never_carry_it(recipe_file):
    recipe = load_recipe(RECIPES / recipe_file)
    files = render.render_files(StackSpec(recipe))
    assert not any(name.startswith("connector/") for name in files)
    assert layout.CPU_CONNECTOR_ENV not in stackspec.environment(recipe)
    assert "connector" not in files["Dockerfile"].decode().lower()


def test_rocm_recipe_setting_the_key_gets_a_finding_and_an_unchanged_image():
    plain = load_recipe_text(ROCM)
    switched = load_recipe_text(ROCM.replace("[cache]\n", "[cache]\ncpu_connector = true\n", 1))
    findings = [f for f in run_rules(switched) if f.rule_id == "cpu-connector-on-rocm"]
    assert len(findings) == 1 and "ignored" in findings[0].message
    assert render.image_hash(render.render_files(StackSpec(plain))) == render.image_hash(render.render_files(StackSpec(switched)))
    assert layout.CPU_CONNECTOR_ENV not in stackspec.environment(switched)


@pytest.mark.parametrize(("switch", "extra", "key"), [
    ("false", "", "cpu_connector"),
    (None, "use_layerwise = true\n", "use_layerwise"),
])
def test_lmcache_on_cpu_rule_fires_where_the_connector_cannot_serve(switch, extra, key):
    findings = [f for f in run_rules(cpu_recipe(switch, extra)) if f.rule_id == "lmcache-on-cpu-platform"]
    assert len(findings) == 1 and findings[0].key == f"cache.{key}"


def test_lmcache_on_cpu_rule_fires_on_an_fp8_kv_cache():
    recipe = load_recipe_text(CPU_TIERS.replace("max_model_len = 4096\n",
                                                'max_model_len = 4096\nkv_cache_dtype = "fp8"\n', 1))
    findings = [f for f in run_rules(recipe) if f.rule_id == "lmcache-on-cpu-platform"]
    assert len(findings) == 1 and findings[0].key == "model.kv_cache_dtype"


def test_lmcache_on_cpu_rule_passes_with_the_connector_on():
    assert "lmcache-on-cpu-platform" not in [f.rule_id for f in run_rules(cpu_recipe())]


def test_an_unset_switch_leaves_the_recipe_hash_as_it_was_before_the_key_existed():
    recipe = cpu_recipe()
    data = recipe.to_dict()
    for key in ("cpu_connector", "offload", "server_port", "server_http_port", "multi_connector"):  # at defaults
        del data["cache"][key]
    assert stackspec.recipe_hash(recipe) == stackspec._digest(data)
    assert stackspec.recipe_hash(cpu_recipe("true")) != stackspec.recipe_hash(recipe)


@pytest.mark.parametrize(("switch", "expected"), [("false", False), (None, None)])
def test_importer_reads_the_switch_back(tmp_path, switch, expected):
    recipe = cpu_recipe(switch)
    files = render.render_files(StackSpec(recipe))
    env = [line for line in files["stack.env"].decode().splitlines() if line and not line.startswith("#")]
    script = tmp_path / "launch.sh"
    script.write_text("".join(f"export {line}\n" for line in env) + files["serve.sh"].decode())
    (tmp_path / "lmcache.yaml").write_bytes(files["lmcache.yaml"])
    back = load_recipe_text(import_launch(script, tmp_path / "lmcache.yaml", "back"))
    assert back.stack.platform == "cpu"
    assert back.cache.cpu_connector is expected
