"""vLLM's offload connector configs: the facts generator's reader of the specs and keys (scripts/factgen/
offload_keys.py, on source trees laid out like vLLM's own, the statements cut from vLLM 0.11.2 / 0.33.0
vllm/v1/kv_offload/), the facts it wrote for every release, and the rules that judge a launch's
--kv-transfer-config with them (stackctl/rules/offload_rules.py)."""

from __future__ import annotations

import json
import sys

import pytest
from helpers import REPO, write_tree

from stackctl.knowledge import facts
from stackctl.recipe.loader import load_recipe_text
from stackctl.rules.ruleset import run_rules

sys.path.insert(0, str(REPO / "scripts"))

from factgen import offload_keys  # noqa: E402
from factgen.pysource import SourceTree  # noqa: E402

OFFLOAD = "vllm/v1/kv_offload/"
CONNECTORS = "vllm/distributed/kv_transfer/kv_connector/v1/"
FACTORY = '''
    class OffloadingSpecFactory:
        @classmethod
        def create_spec(cls, config):
            extra_config = config.kv_transfer_config.kv_connector_extra_config
            spec_name = extra_config.get("spec_name", "CPUOffloadingSpec")
            if spec_name in cls._registry:
                spec_cls = cls._registry[spec_name]()
            else:
                spec_module_path = extra_config.get("spec_module_path")
                if spec_module_path is None:
                    raise ValueError(f"Unsupported spec type: {spec_name}")
            return spec_cls(config)

    OffloadingSpecFactory.register_spec("CPUOffloadingSpec", "vllm.v1.kv_offload.cpu.spec", "CPUOffloadingSpec")
    OffloadingSpecFactory.register_spec(
        "TieringOffloadingSpec", "vllm.v1.kv_offload.tiering.spec", "TieringOffloadingSpec"
    )
'''


def _tree(tmp_path, files: dict[str, str]) -> SourceTree:
    return SourceTree(write_tree(tmp_path, files))


def test_specs_keys_defaults_and_required_keys_are_read_from_the_source(tmp_path):
    tree = _tree(tmp_path, {
        OFFLOAD + "factory.py": FACTORY,
        OFFLOAD + "base.py": '''
            class OffloadingSpec:
                def __init__(self, config):
                    self.extra_config = config.extra_config
                    self.prompt_only = bool(self.extra_config.get("offload_prompt_only", True))
        ''',
        OFFLOAD + "cpu/spec.py": '''
            from vllm.v1.kv_offload.base import OffloadingSpec
            DEFAULT_TRACKER = 64_000

            class CPUOffloadingSpec(OffloadingSpec):
                def __init__(self, config):
                    super().__init__(config)
                    cpu_bytes_to_use = self.extra_config.get("cpu_bytes_to_use")
                    if not cpu_bytes_to_use:
                        raise Exception("cpu_bytes_to_use must be specified in kv_connector_extra_config")
                    self.size = int(self.extra_config.get("max_tracker_size", DEFAULT_TRACKER))
        ''',
        OFFLOAD + "tiering/spec.py": '''
            from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

            class TieringOffloadingSpec(CPUOffloadingSpec):
                def __init__(self, config):
                    super().__init__(config)
                    self.tiers = self.extra_config.get("secondary_tiers", [])
        ''',
        CONNECTORS + "offloading_connector.py": '''
            def chunking(kv_transfer_config):
                tokens = kv_transfer_config.kv_connector_extra_config.get("block_size")
                return "canonical_layout" in kv_transfer_config.kv_connector_extra_config
        ''',
        CONNECTORS + "simple_cpu_offload_connector.py": '''
            GiB = 1024 ** 3
            def size(extra_config):
                return int(extra_config.get("cpu_bytes_to_use", 8 * GiB)), extra_config["lazy_offload"]
        ''',
    })
    found = offload_keys.extract(tree)
    offloading = found["OffloadingConnector"]
    assert offloading["default_spec"] == {"name": "CPUOffloadingSpec", "where": OFFLOAD + "factory.py:6"}
    common = offloading["keys"]
    assert set(common) == {"spec_name", "spec_module_path", "offload_prompt_only", "block_size", "canonical_layout"}
    assert not common["spec_module_path"]["required"]  # read on one branch only
    assert common["offload_prompt_only"] | {"where": ""} == {"default": True, "type": "bool", "required": False,
                                                             "where": ""}
    cpu = offloading["specs"]["CPUOffloadingSpec"]
    assert (cpu["module"], cpu["where"]) == ("vllm.v1.kv_offload.cpu.spec", OFFLOAD + "factory.py:15")
    assert cpu["keys"]["cpu_bytes_to_use"]["required"] is True
    assert cpu["keys"]["max_tracker_size"] | {"where": ""} == {"default": 64000, "type": "int", "required": False,
                                                               "where": ""}
    tiering = offloading["specs"]["TieringOffloadingSpec"]["keys"]
    assert set(tiering) == {"cpu_bytes_to_use", "max_tracker_size", "secondary_tiers"}  # the CPU spec's, inherited
    simple = found["SimpleCPUOffloadConnector"]["keys"]
    assert simple["cpu_bytes_to_use"]["default"] == 8 * 1024 ** 3 and "lazy_offload" in simple
    assert "MultiConnector" not in found  # no such module in this tree


def _offloading(version: str) -> dict:
    return facts.load("vllm", version)["kv_connector_keys"]["OffloadingConnector"]


def test_the_facts_follow_the_releases():
    """What the generator read from the real sdists: the CPU spec's size key changed in 0.14, the tiering spec came
    in 0.22, vLLM 0.10 has no OffloadingConnector."""
    assert "OffloadingConnector" not in facts.load("vllm", "0.10.2")["kv_connector_keys"]
    old = _offloading("0.13.0")["specs"]["CPUOffloadingSpec"]["keys"]
    assert old["num_cpu_blocks"]["required"] and "cpu_bytes_to_use" not in old
    for version in ("0.14.1", "0.21.0", "0.33.0"):
        keys = _offloading(version)["specs"]["CPUOffloadingSpec"]["keys"]
        assert keys["cpu_bytes_to_use"]["required"] and "num_cpu_blocks" not in keys, version
    assert set(_offloading("0.21.0")["specs"]) == {"CPUOffloadingSpec"}
    assert set(_offloading("0.22.1")["specs"]) == {"CPUOffloadingSpec", "TieringOffloadingSpec"}
    assert "connectors" in facts.load("vllm", "0.33.0")["kv_connector_keys"]["MultiConnector"]["keys"]


RECIPE = '''
[stack]
name = "offload"
platform = "rocm"
engine = "vllm"

[versions]
%s
lmcache = "0.5.6"

[model]
path = "/models/m"

[serve]
extra_args = ["--kv-transfer-config", '%s']

[cache]
enabled = false
hash_seed = 0
'''


def _findings(config: dict, vllm: str | None) -> dict[str, str]:
    pin = f'vllm = "{vllm}"' if vllm else ""
    recipe = load_recipe_text(RECIPE % (pin, json.dumps(config)), "offload.toml")
    return {f.rule_id: f.message for f in run_rules(recipe)}


def _offloading_config(**extra) -> dict:
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra}


@pytest.mark.parametrize("vllm, extra, expected", [
    ("0.33.0", {"cpu_bytes_to_use": 1 << 30}, set()),
    ("0.33.0", {"num_cpu_blocks": 1000}, {"offload-key-missing", "offload-key-unknown"}),
    ("0.13.0", {"num_cpu_blocks": 1000}, set()),
    ("0.13.0", {"cpu_bytes_to_use": 1 << 30}, {"offload-key-missing", "offload-key-unknown"}),
    ("0.21.0", {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30}, {"offload-spec-unknown"}),
    ("0.22.1", {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 30, "secondary_tiers": []}, set()),
    ("0.33.0", {"spec_name": "MySpec", "spec_module_path": "my.module", "anything": 1}, set()),  # out of tree
    ("0.33.0", {"spec_name": "MySpec"}, {"offload-spec-unknown"}),
])
def test_offloading_connector_judged_against_its_release(vllm, extra, expected):
    found = _findings(_offloading_config(**extra), vllm)
    assert {rule for rule in found if rule.startswith("offload-")} == expected


def test_messages_name_the_release_the_file_line_and_the_way_out():
    found = _findings(_offloading_config(num_cpu_blocks=1000), "0.33.0")
    assert "vLLM 0.33.0's CPUOffloadingSpec requires cpu_bytes_to_use" in found["offload-key-missing"]
    assert "vllm/v1/kv_offload/cpu/spec.py:" in found["offload-key-missing"]
    assert "given instead: num_cpu_blocks" in found["offload-key-missing"]
    assert "read up to vLLM 0.13.0, vllm/v1/kv_offload/cpu.py:" in found["offload-key-unknown"]
    tiering = _findings(_offloading_config(spec_name="TieringOffloadingSpec", cpu_bytes_to_use=1), "0.19.1")
    assert "vLLM 0.22.1 registers it" in tiering["offload-spec-unknown"]


def test_a_multi_connectors_children_are_judged_one_by_one():
    config = {"kv_connector": "MultiConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
        _offloading_config(num_cpu_blocks=1000)]}}
    found = _findings(config, "0.33.0")
    assert {"offload-key-missing", "offload-key-unknown"} <= set(found)


def test_with_the_version_unknown_what_every_supported_release_says_is_still_reported():
    found = _findings(_offloading_config(num_cpu_blocks=1000), None)
    assert "vLLM version unknown" in found["offload-key-missing"]
    tiering = _findings(_offloading_config(spec_name="TieringOffloadingSpec", cpu_bytes_to_use=1), None)
    assert "offload-spec-unknown" not in tiering  # the releases disagree: named under version-unknown instead
    assert "offload-spec-unknown" in tiering["version-unknown"]


# -- several connectors at once: cache.multi_connector ----------------------------------------------------------

NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
LMCACHE = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def _multi(*connectors, **top) -> dict:
    return {"kv_connector": "MultiConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"connectors": list(connectors)}, **top}


def _imported(config: dict, env: str = ""):
    from stackctl import importer

    text = importer.import_launch_text(f"{env}vllm serve /models/m --kv-transfer-config '{json.dumps(config)}'\n",
                                       None, "t")
    return load_recipe_text(text), text.replace("\n#   ", " ").replace("\n# ", " ")


def test_a_multi_connector_with_lmcache_is_imported_as_the_cache_beside_the_other_connectors():
    recipe, text = _imported(_multi(NIXL, {**LMCACHE, "kv_connector_extra_config": {"lmcache.chunk_size": 512}}),
                             env="LMCACHE_MAX_LOCAL_CPU_SIZE=20 ")
    assert recipe.cache.enabled and recipe.cache.chunk_size == 512
    assert [(t.kind, t.size_gb) for t in recipe.cache.tiers] == [("cpu", 20.0)]  # LMCache's settings still apply
    assert recipe.cache.multi_connector == [NIXL, {"kv_connector": "LMCacheConnectorV1"}]
    assert recipe.serve.extra_args == []
    assert "has no LMCacheConnectorV1" not in text


def test_render_puts_stackctls_connector_where_the_list_says_and_import_reads_it_back():
    from stackctl.bundle.stackspec import serve_args

    recipe, _ = _imported(_multi(LMCACHE, NIXL), env="LMCACHE_MAX_LOCAL_CPU_SIZE=4 ")
    recipe.cache.use_layerwise = True
    args = serve_args(recipe)
    written = json.loads(args[args.index("--kv-transfer-config") + 1])
    assert written == _multi({**LMCACHE, "kv_connector_extra_config": {"use_layerwise": True}}, NIXL)
    assert args.count("--kv-transfer-config") == 1
    back, _ = _imported(written, env="LMCACHE_MAX_LOCAL_CPU_SIZE=4 ")
    assert back.cache.multi_connector == recipe.cache.multi_connector and back.cache.use_layerwise


@pytest.mark.parametrize("config, why", [
    (_multi(NIXL, LMCACHE, LMCACHE), "2 LMCacheConnectorV1 entries"),
    (_multi(NIXL, {**LMCACHE, "kv_role": "kv_producer"}), "settings beyond stackctl's connector config"),
    (_multi(NIXL, LMCACHE, engine_id="e1"), "settings of its own"),
    ({"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": "nixl"}}, "not a list"),
])
def test_a_multi_connector_the_recipe_cannot_say_stays_verbatim(config, why):
    recipe, text = _imported(config)
    assert recipe.serve.extra_args == ["--kv-transfer-config", json.dumps(config)]
    assert not recipe.cache.multi_connector and why in text and "kept verbatim" in text


MULTI_RECIPE = '''
[stack]
name = "multi"
platform = "rocm"
engine = "vllm"

[versions]
vllm = "0.33.0"
lmcache = "0.5.6"

[model]
path = "/models/m"

[cache]
enabled = true
hash_seed = 0
offload = "%s"
multi_connector = %s

[[cache.tiers]]
kind = "cpu"
size_gb = 4
'''


@pytest.mark.parametrize("offload, entries, problem", [
    ("lmcache", '[{ kv_connector = "NixlConnector" }, { kv_connector = "LMCacheConnectorV1" }]', None),
    ("lmcache", '[{ kv_connector = "NixlConnector" }]', "0 entries name LMCacheConnectorV1"),
    ("lmcache", '[{ kv_connector = "LMCacheConnectorV1", kv_role = "kv_both" }]', "sets kv_role beside it"),
    ("lmcache", '[{ kv_role = "kv_both" }, { kv_connector = "LMCacheConnectorV1" }]', "an entry without kv_connector"),
    ("vllm-simple", '[{ kv_connector = "NixlConnector" }, { kv_connector = "SimpleCPUOffloadConnector" }]', None),
    ("vllm-native", '[{ kv_connector = "NixlConnector" }, { kv_connector = "OffloadingConnector" }]',
     "cannot run inside a MultiConnector"),
])
def test_multi_connector_entry(offload, entries, problem):
    recipe = load_recipe_text(MULTI_RECIPE % (offload, entries), "multi.toml")
    messages = [f.message for f in run_rules(recipe) if f.rule_id == "multi-connector-entry"]
    assert (problem is None and messages == []) or any(problem in m for m in messages), messages


def test_the_connectors_beside_are_judged_like_any_other():
    entries = ('[{ kv_connector = "SimpleCPUOffloadConnector", kv_connector_extra_config = { lazy_offlaod = true } },'
               ' { kv_connector = "NixlConector" }, { kv_connector = "LMCacheConnectorV1" }]')
    found = {f.rule_id: f for f in run_rules(load_recipe_text(MULTI_RECIPE % ("lmcache", entries), "multi.toml"))}
    assert found["offload-key-unknown"].key == "cache.multi_connector[0]"
    assert "did you mean NixlConnector" in found["kv-connector-unknown"].message


def test_lmcache_loaded_from_its_own_module_counts_as_lmcache_in_vllm():
    from stackctl.knowledge.lmcache_connectors import config_runs_lmcache_in_vllm

    dynamic = {"kv_connector": "LMCacheConnectorV1Dynamic",
               "kv_connector_module_path": "lmcache.integration.vllm.lmcache_connector_v1_085"}
    assert config_runs_lmcache_in_vllm(dynamic)
    assert config_runs_lmcache_in_vllm({"kv_connector": "LMCacheConnectorV1"})
    assert not config_runs_lmcache_in_vllm({"kv_connector": "X", "kv_connector_module_path":
                                            "lmcache.integration.vllm.lmcache_mp_connector"})
    assert not config_runs_lmcache_in_vllm({"kv_connector": "LMCacheMPConnector"})
    text = (RECIPE % ('vllm = "0.28.0"', json.dumps(_multi(NIXL, dynamic)))).replace("hash_seed = 0\n", "")
    found = {f.rule_id: f for f in run_rules(load_recipe_text(text, "dynamic.toml"))}
    assert found["lmcache-hash-seed"].key == "serve.extra_args[0]"  # inside a MultiConnector too
