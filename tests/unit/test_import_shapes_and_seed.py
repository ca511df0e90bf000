"""Imports of launches nobody here wrote, and the hash-seed decision per release.

- tests/fixtures/launch/kserve-isvc-lmcache-redis.yaml (KServe's KV-cache-offloading docs), llm-d-amd-lmcache-cpu-
  patch.yaml (llm-d's tiered-prefix-cache guide, a kustomize patch) and llm-d-modelservice-values-pd.yaml (the
  llm-d-modelservice chart's example values): each file names its source URL. Before, all three failed with "no
  container runs a vLLM server".
- tests/fixtures/corpus/lmcache-issue-469-docker-nvidia/launch.sh (LMCache issue 469: `--gpus '"device=4"'`,
  LMCacheConnector) and the vLLM docs' `docker run --gpus all` with Docker's other --gpus forms.
- the hash-seed decision (knowledge/hash_seed.py) reads the generated facts of vLLM and LMCache releases.
"""

from __future__ import annotations

import pytest
from helpers import FIXTURES

from stackctl import importer
from stackctl.knowledge import facts
from stackctl.knowledge.hash_seed import seed_need
from stackctl.knowledge.lmcache_connectors import in_vllm, is_lmcache, replacement
from stackctl.recipe.loader import load_recipe_text
from stackctl.rules.ruleset import run_rules

LAUNCH = FIXTURES / "launch"


def _import(path):
    text = importer.import_launch(path, None, "t")
    return load_recipe_text(text), " ".join(line.lstrip("# ") for line in text.splitlines())


def _ids(recipe):
    return sorted({f.rule_id for f in run_rules(recipe)})


# -- KServe and llm-d -------------------------------------------------------------------------------------------------

def test_kserve_inference_service_with_lmcache_imports_the_predictor():
    recipe, text = _import(LAUNCH / "kserve-isvc-lmcache-redis.yaml")
    assert recipe.model.path == "meta-llama/Llama-3.2-1B-Instruct"  # --model_id
    assert recipe.model.served_name == "llama3"  # --model_name
    assert recipe.model.max_model_len == 10000
    assert recipe.cache.enabled and recipe.cache.chunk_size == 256
    assert recipe.cache.extra["remote_url"] == "redis://redis.default.svc.cluster.local:6379"  # the ConfigMap file
    assert [t.size_gb for t in recipe.cache.tiers] == [2.0]
    assert recipe.serve.secret_env == {"HF_TOKEN": "HF_TOKEN"}
    assert "minReplicas 2 is KServe's to decide" in text
    assert "KServe's huggingface runtime" in text
    assert "container redis (redis:latest) is not part of the recipe" in text
    assert "lmcache-hash-seed" in _ids(recipe)  # no PYTHONHASHSEED in the published manifest


def test_llm_d_kustomize_patch_reads_its_args_as_the_server():
    recipe, text = _import(LAUNCH / "llm-d-amd-lmcache-cpu-patch.yaml")
    assert recipe.model.path == "Qwen/Qwen3-32B" and recipe.model.tensor_parallel == 2
    assert recipe.serve.max_num_seqs == 1024
    assert recipe.cache.enabled and recipe.cache.hash_seed == 123
    assert [t.size_gb for t in recipe.cache.tiers] == [200.0]  # LMCACHE_MAX_LOCAL_CPU_SIZE 100 per rank x TP 2
    assert "a kustomize patch" in text
    assert not [i for i in _ids(recipe) if "hash-seed" in i]


def test_llm_d_modelservice_values_render_the_chart_command():
    recipe, text = _import(LAUNCH / "llm-d-modelservice-values-pd.yaml")
    assert recipe.model.path == "facebook/opt-125m" and recipe.model.served_name == "facebook/opt-125m"
    assert recipe.serve.port == 8200  # the routing proxy's target port: the chart's vllmServe --port
    assert recipe.serve.extra_args == ["--kv-transfer-config", '{"kv_connector":"NixlConnector", "kv_role":"kv_both"}']
    assert recipe.stack.base_image is None  # llm-d's CUDA image is not a ROCm base
    assert "modelCommand vllmServe rendered as the chart does" in text
    assert "the file describes 2 servers" in text
    assert [f for f in run_rules(recipe) if f.severity == "error"] == []


def test_a_container_without_image_or_vllm_flags_is_still_no_server(tmp_path):
    path = tmp_path / "patch.yaml"
    path.write_text("apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      containers:\n"
                    "        - name: sidecar\n          args: [\"--verbose\"]\n")
    with pytest.raises(Exception, match="no container runs a vLLM server"):
        importer.import_launch(path, None, "t")


# -- docker run --gpus -------------------------------------------------------------------------------------------------

# The vLLM docs' command (docs/deployment/docker.md), with each --gpus form of Docker's run reference.
VLLM_DOCS = ("docker run --runtime nvidia --gpus {gpus} -v ~/.cache/huggingface:/root/.cache/huggingface "
             "-p 8000:8000 --ipc=host vllm/vllm-openai:latest --model Qwen/Qwen3-0.6B\n")


@pytest.mark.parametrize(("gpus", "devices", "note"), [
    ("1", None, "1 GPU, any (a count, not GPU 1)"),
    ("2", None, "2 GPUs, any (a count, not GPU 2)"),
    ("count=2", None, "2 GPUs, any"),
    ("all", None, "every GPU of the host"),
    ("'\"device=1,2\"'", "1,2", "became HIP_VISIBLE_DEVICES=1,2"),
    ("device=0,1", "0,1", "became HIP_VISIBLE_DEVICES=0,1"),
])
def test_gpus_is_read_as_docker_reads_it(gpus, devices, note):
    text = importer.import_launch_text(VLLM_DOCS.format(gpus=gpus), None, "t")
    recipe = load_recipe_text(text)
    assert recipe.serve.env.get("HIP_VISIBLE_DEVICES") == devices
    assert (recipe.host.gpus or None) == ([int(d) for d in devices.split(",")] if devices else None)
    assert note in " ".join(line.lstrip("# ") for line in text.splitlines())


def test_issue_469_device_selection_and_old_connector():
    recipe, _ = _import(FIXTURES / "corpus" / "lmcache-issue-469-docker-nvidia" / "launch.sh")
    assert recipe.serve.env["HIP_VISIBLE_DEVICES"] == "4" and recipe.host.gpus == [4]
    findings = {f.rule_id: f.message for f in run_rules(recipe)}
    assert "use LMCacheConnectorV1, its direct replacement" in findings["kv-connector-unknown"]
    assert "did you mean" not in findings["kv-connector-unknown"]
    assert "lmcache-hash-seed" in findings  # the old name runs LMCache inside vLLM too


# -- LMCache connector names ---------------------------------------------------------------------------------------

def test_lmcache_connectors_are_known_by_their_module():
    assert is_lmcache("LMCacheConnectorV1") and is_lmcache("LMCacheMPConnector") and is_lmcache("LMCacheConnector")
    assert not is_lmcache("NixlConnector") and not is_lmcache(None)
    assert in_vllm("LMCacheConnector") and not in_vllm("LMCacheMPConnector")
    old = facts.release("vllm", "0.10.2").section("kv_connectors")
    assert "first registered in vLLM" in replacement("LMCacheMPConnector", old)
    assert replacement("NixlConnector", old) is None


# -- remote_url schemes -------------------------------------------------------------------------------------------------

def test_http_is_no_lmcache_remote_scheme():
    schemes = facts.release("lmcache", "0.5.6").section("remote_url_schemes")
    assert "http" not in schemes and "https" not in schemes
    assert {"redis", "rediss", "unix", "lm", "s3", "fs", "sagemaker-hyperpod"} <= set(schemes)
    recipe = load_recipe_text(_with_cache('remote_url = "http://lmcache:8080"'))
    assert "lmcache-remote-url-scheme" in _ids(recipe)


# -- the hash seed, per release -------------------------------------------------------------------------------------

def _with_cache(extra: str, vllm: str = "0.33.0", seed: str = "") -> str:
    return (f'[stack]\nname = "t"\nplatform = "rocm"\nengine = "vllm"\n[versions]\nvllm = "{vllm}"\n'
            f'lmcache = "0.5.6"\n[model]\npath = "/models/m"\n[cache]\nenabled = true\n{seed}'
            f'extra = {{ {extra} }}\n[[cache.tiers]]\nkind = "cpu"\nsize_gb = 4\n')


@pytest.mark.parametrize(("vllm", "algorithm", "needed"), [
    ("0.19.1", "sha256_cbor", True),   # before 0.29: os.urandom without the seed, whatever the hash
    ("0.28.0", "sha256", True),
    ("0.29.0", "builtin", True),       # LMCache's default: Python's hash() of the fixed seed string
    ("0.29.0", "sha256_cbor", False),  # fixed seed, a hash that does not vary per process
    ("0.33.0", "sha256_cbor_64bit", False),  # the old name LMCache maps to sha256_cbor
    ("0.33.0", "xxhash", True),        # not collision resistant: vLLM keeps a random seed for it
    (None, "sha256", True),            # release unknown: the older releases need it
])
def test_seed_need_per_release_and_algorithm(vllm, algorithm, needed):
    assert seed_need(vllm, "0.5.6", algorithm).needed is needed


def test_the_rule_is_silent_only_where_the_sources_prove_no_seed_is_needed():
    fixed = load_recipe_text(_with_cache('pre_caching_hash_algorithm = "sha256_cbor"'))
    assert "lmcache-hash-seed" not in _ids(fixed)
    older = load_recipe_text(_with_cache('pre_caching_hash_algorithm = "sha256_cbor"', vllm="0.28.0"))
    message = next(f.message for f in run_rules(older) if f.rule_id == "lmcache-hash-seed")
    assert "vllm 0.28.0 vllm/v1/core/kv_cache_utils.py:" in message
    default = load_recipe_text(_with_cache('chunk_size = 256'))
    message = next(f.message for f in run_rules(default) if f.rule_id == "lmcache-hash-seed")
    assert "Python's builtin hash" in message and "lmcache 0.5.6 lmcache/v1/token_database.py:177" in message


def test_every_release_has_the_hash_facts():
    for version in facts.versions("vllm"):
        data = facts.load("vllm", version)
        assert data["none_hash"]["unset"] in ("random", "fixed"), version
        assert set(data["hash_functions"]) >= {"sha256", "sha256_cbor"}, version
    for version in facts.versions("lmcache"):
        assert set(facts.load("lmcache", version)["chunk_hash"]) == {"builtin_fallback", "none_hash_from_vllm"}


# -- LMCache keys without the prefix ----------------------------------------------------------------------------------

def test_lmcache_keys_without_prefix_are_noted_and_reported():
    script = ("export chunk_size=256\nexport local_cpu=True\nvllm serve /models/m --kv-transfer-config "
              "'{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'\n")
    text = importer.import_launch_text(script, None, "t")
    flat = " ".join(line.lstrip("# ") for line in text.splitlines())
    assert "chunk_size=256: LMCache reads its settings from the environment only as LMCACHE_CHUNK_SIZE" in flat
    recipe = load_recipe_text(text)
    assert recipe.serve.env["chunk_size"] == "256"  # kept as the old launch had it: LMCache never read it
    messages = [f.message for f in run_rules(recipe) if f.rule_id == "lmcache-env-unprefixed"]
    assert len(messages) == 2 and "LMCache reads LMCACHE_LOCAL_CPU" in messages[1]


def test_kserve_serving_runtime_of_the_same_file_runs_the_model():
    recipe, text = _import(LAUNCH / "kserve-runtime-huggingface-cpu.yaml")
    assert recipe.stack.platform == "cpu"  # the VLLM_CPU_* variables of the predictor
    assert recipe.model.path == "Qwen/Qwen2-0.5B-Instruct"  # storageUri hf://...
    assert recipe.model.served_name == "qwen2"  # the model's --model_name over the runtime's {{.Name}}
    assert recipe.model.dtype == "bfloat16" and recipe.model.max_model_len == 2048
    assert recipe.stack.base_image is None  # KServe's huggingface server image is no vLLM base image
    assert "huggingfaceserver:replace, named by the ServingRuntime" in text
    assert "devshm" not in text  # the runtime's own volume is found
    assert [f for f in run_rules(recipe) if f.severity == "error"] == []
