"""`stackctl init --from-command`: launch scripts and LMCache configs back into recipes.

The round trip (every shipped recipe -> rendered bundle -> import -> the same recipe) proves the importer is the
inverse of stackspec.serve_args / environment / lmcache_config; the fixtures in tests/fixtures/launch/ are launches
people write by hand, and `stackctl validate` on their import must name what was wrong with them.
"""

from __future__ import annotations

import math
import shlex
import sys

import pytest
from helpers import FIXTURES, RECIPES, run_cli
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stackctl import importer
from stackctl.errors import StackctlError
from stackctl.importer.credentials import is_secret
from stackctl.importer.draft import Draft
from stackctl.importer.flags import BOOL_FLAGS, VALUE_FLAGS
from stackctl.importer.shell import command_words, expand, split_commands
from stackctl.importer.writer import toml_key, toml_value
from stackctl.recipe.loader import load_recipe, load_recipe_text
from stackctl.rules.ruleset import run_rules
from stackctl.bundle.render import render_files
from stackctl.bundle.stackspec import StackSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LAUNCH = FIXTURES / "launch"
# Fake secret values planted in the fixtures: none may appear in an imported recipe.
FIXTURE_SECRETS = ["hf_FAKE_launch_token_0001", "hf_FAKE_passthrough_token_0002", "AKIAFAKEACCESSKEY0003",
                   "FAKEsecretACCESSkey0004", "sk-FAKE-api-key-0005", "AKIAFAKEINYAML0006", "FAKEsecretINyaml0007"]


def imported(script: str, lmcache_yaml: str | None = None, name: str | None = "t"):
    """(recipe, text) imported from script text."""
    text = importer.import_launch_text(script, lmcache_yaml, name)
    return load_recipe_text(text), text


# -- TOML emitter -----------------------------------------------------------------------------------------------

_keys = st.text(max_size=12)
_scalars = (st.booleans() | st.integers(min_value=-2 ** 63, max_value=2 ** 63 - 1)
            | st.floats(allow_nan=False) | st.text())
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
                       max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=5))
def test_toml_emitter_reads_back_the_same_values(data):
    document = "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in data.items())
    assert tomllib.loads(document) == data


def test_toml_emitter_edge_cases():
    tricky = {"quote\"back\\slash": "a\"b\\c\n\t\x00\x7f\u00e9\U0001F600", "1.5": 1e-7, "-": -0.0, "big": 2 ** 63 - 1,
              "inf": math.inf, "nested": {"a.b": [1, "x", {"k": []}], "": {}}, "bare_key-1": True}
    document = "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in tricky.items())
    assert tomllib.loads(document) == tricky
    assert math.isnan(tomllib.loads(f"x = {toml_value(math.nan)}")["x"])
    assert toml_key("bare_key-1") == "bare_key-1" and toml_key("a.b") == '"a.b"'
    assert toml_key("k\n") == '"k\\n"'
    with pytest.raises(ValueError):
        toml_value(2 ** 63)
    with pytest.raises(TypeError):
        toml_value(None)


# -- shell reading ----------------------------------------------------------------------------------------------

def test_commands_split_on_separators_not_inside_quotes_or_redirections():
    text = ("A=1 # comment ; not a command\n"
            "echo 'x; y' \"a && b\" a#b ; true && false || :\n"
            "cmd --json '{\"a\":\n 1}' \\\n  --next 2>&1 | tee log &\n")
    commands = split_commands(text)
    assert [command_words(c) for c in commands] == [
        ["A=1"], ["echo", "x; y", "a && b", "a#b"], ["true"], ["false"], [":"],
        ["cmd", "--json", '{"a":\n 1}', "--next"], ["tee", "log"]]


def test_only_unquoted_redirection_operators_redirect():
    """A quoted '<' or '>' is a word the program gets; read as a redirection it swallowed the next word, and a
    secret flag's value after it was kept as a plain argument (found by the import fuzz test)."""
    words = command_words(split_commands("vllm serve /m --async-scheduling '<' --api-key X \">\" >log 2>&1 <in")[0])
    assert words == ["vllm", "serve", "/m", "--async-scheduling", "<", "--api-key", "X", ">"]
    text = importer.import_launch_text("vllm serve /models/m --async-scheduling '<' --api-key Not-In-The-File\n",
                                       None, "launch.sh")
    assert "Not-In-The-File" not in text


def test_expansion_follows_shell_quoting():
    variables = {"M": "/models/x", "ARGS": "--a 1  --b", "EMPTY": ""}
    words = command_words(split_commands(
        "run $M \"$ARGS\" $ARGS '$M' \\$M ${MISSING:-dflt} ${M}/y $UNSET $EMPTY \"$EMPTY\"")[0])
    expanded = [part for word in words for part in expand(word, variables)]
    assert expanded == ["run", "/models/x", "--a 1  --b", "--a", "1", "--b", "$M", "$M", "dflt", "/models/x/y",
                        "$UNSET", ""]


@pytest.mark.parametrize(("fixture", "command", "line"), [("sglang-docker.sh", "sglang.launch_server", 8),
                                                        ("sglang-rocm.sh", "sglang serve", 8)])
def test_a_launch_of_another_engine_is_refused_naming_it(fixture, command, line):
    """An SGLang launch (docker and ROCm shapes from SGLang's and AMD's guides) is named, with its line and why,
    instead of "no server command found"."""
    with pytest.raises(StackctlError) as raised:
        importer.import_launch_text((LAUNCH / fixture).read_text(), None, "t")
    assert str(raised.value).startswith(f"launch.sh: line {line}: the script starts SGLang (`{command}`), not vLLM: stackctl "
                                        "serves vLLM, with or without AMD's ATOM plugin"), raised.value
    # Named in a comment only, nothing is refused for it: still no server found.
    with pytest.raises(StackctlError, match="no server command found"):
        importer.import_launch_text("# compare with: python -m sglang.launch_server --model-path m\necho\n", None, "t")


def test_steps_that_change_the_image_before_serving_are_named_never_dropped():
    """A `sed -i` over vLLM's sources, a patch, a pip install the recipe has no key for: a recipe cannot carry them,
    so the import says so (its notes head the recipe); the pins it can carry still become versions."""
    script = ("docker run --rm --device /dev/kfd --network host rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006 bash -c "
              "\"sed -i 's/max_tokens=16/max_tokens=64/' /usr/local/lib/python3.12/dist-packages/vllm/entrypoints/"
              "openai/protocol.py && pip install flash-attn lmcache==0.3.7 && git apply /fix.patch && vllm serve "
              "Qwen/Qwen3-8B\"\n")
    recipe, text = imported(script)
    flat = " ".join(line.lstrip("# ").strip() for line in text.split("[stack]")[0].splitlines())
    assert "edits /usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/protocol.py in place (sed -i)" in flat
    assert "installs flash-attn (pip); not imported" in flat and "applies a patch (git apply /fix.patch)" in flat
    assert recipe.versions.lmcache == "0.3.7"  # what the recipe can say, it keeps


def test_unterminated_quote_and_missing_server_are_user_errors():
    with pytest.raises(StackctlError, match="unterminated"):
        importer.import_launch_text("vllm serve '/m", None, "t")
    with pytest.raises(StackctlError, match="no server command"):
        importer.import_launch_text("echo hello\npython train.py\n", None, "t")
    with pytest.raises(StackctlError, match="names no model"):
        importer.import_launch_text("python -m vllm.entrypoints.openai.api_server --port 8000\n", None, "t")
    with pytest.raises(StackctlError, match="--name"):
        importer.import_launch_text("vllm serve /m\n", None, "Bad Name")
    with pytest.raises(StackctlError, match="--name"):
        importer.import_launch_text("vllm serve /m\n", None, "name\n")


# -- launch forms -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("script", [
    "vllm serve /models/m --port 9000\n",
    "exec /opt/venv/bin/vllm serve /models/m --port=9000\n",
    "numactl -N 0 -m 0 python3 -m vllm.entrypoints.openai.api_server --model /models/m --port 9000\n",
    "taskset -c 0-7 vllm serve --model=/models/m --port 9000\n",
    "docker run --rm -d --device /dev/kfd -p 9000:9000 rocm/vllm:v0.27.1 vllm serve /models/m --port 9000\n",
    "podman container run -it img:1 bash -c 'exec vllm serve /models/m --port 9000'\n",
    "sudo docker run --entrypoint vllm img serve /models/m --port 9000\n",
])
def test_server_command_forms(script):
    recipe, _ = imported(script)
    assert recipe.model.path == "/models/m"
    assert recipe.serve.port == 9000


def test_docker_run_image_devices_env_and_volumes(tmp_path):
    env_file = tmp_path / "server.env"
    env_file.write_text("# comment\nFROM_FILE=a b#c\n")
    script = tmp_path / "run.sh"
    script.write_text(
        "export PASSED=host-value\n"
        "docker run --rm -it --device=/dev/kfd --device /dev/dri -eINLINE=1 --env LONG=2 -e PASSED -e FROM_HOST \\\n"
        "  --env-file server.env -v /data/models:/models:ro --mount type=bind,src=/nvme,dst=/cache \\\n"
        "  --shm-size 32G --cpuset-cpus 0-15 --name My_Stack \\\n"
        "  rocm/vllm-dev:rocm6.4_vllm_0.27.1 vllm serve /models/llama --host 127.0.0.1\n")
    text = importer.import_launch(script, None, None)
    recipe = load_recipe_text(text)
    assert recipe.stack.platform == "rocm" and recipe.stack.engine == "vllm"
    assert recipe.stack.base_image == "rocm/vllm-dev:rocm6.4_vllm_0.27.1"
    assert recipe.versions.vllm == "0.27.1"
    assert recipe.stack.name == "my_stack"
    assert recipe.model.path == "/data/models/llama"  # the host side of the volume
    assert recipe.model.served_name == "/models/llama"  # what clients asked for: vLLM's default name
    assert recipe.serve.env == {"INLINE": "1", "LONG": "2", "PASSED": "host-value", "FROM_FILE": "a b#c"}
    assert recipe.serve.secret_env == {"FROM_HOST": "FROM_HOST"}  # -e NAME without a value in the script
    assert recipe.host.shm_size == "32g" and recipe.host.isolcpus == "0-15"


def test_script_variables_only_reach_the_server_when_exported():
    recipe, _ = imported("LOCAL=1\nexport SHARED=2\nX=3 vllm serve /m\n")
    assert recipe.serve.env == {"SHARED": "2", "X": "3"}


def test_container_does_not_see_unpassed_exports():
    recipe, text = imported("export PYTHONHASHSEED=0\ndocker run img vllm serve /m\n")
    assert recipe.cache.hash_seed is None
    assert "PYTHONHASHSEED is set in the script but not passed to the container" in text


def test_numactl_and_taskset_pinning():
    recipe, _ = imported("numactl --cpunodebind=0,1 --membind=0,1 vllm serve /m\n")
    assert recipe.host.numa == [0, 1]
    recipe, _ = imported("taskset -c 8-15,24 vllm serve /m\n")
    assert recipe.host.isolcpus == "8-15,24"


def test_pinning_that_is_not_a_cpulist_is_a_note_not_a_guess():
    # the kernel's parser refuses a backwards range; the importer does not keep the half it understood
    recipe, text = imported("numactl --membind=3-1,5 vllm serve /m\n")
    assert recipe.host.numa == "auto" and "NUMA nodes '3-1,5' not imported" in text
    recipe, text = imported("taskset -c 7-2 vllm serve /m\n")
    assert recipe.host.isolcpus == "auto" and "CPU pinning '7-2' not imported" in text


# -- vLLM flags -------------------------------------------------------------------------------------------------

def test_flags_map_to_recipe_keys():
    recipe, _ = imported(
        "vllm serve /models/Qwen3-32B --served-model-name q --host 127.0.0.1 --port 8001 -tp 4 --dtype bfloat16 "
        "--kv-cache-dtype fp8 --max-model-len 32K --trust-remote-code --gpu-memory-utilization 0.85 "
        "--max_num_batched_tokens 8192 --max-num-seqs 64 --block-size 32 --no-enable-prefix-caching "
        "--prefix-caching-hash-algo xxhash --async-scheduling --enforce-eager "
        "--enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3\n")
    model, serve = recipe.model, recipe.serve
    assert (model.served_name, model.tensor_parallel, model.dtype, model.kv_cache_dtype) == ("q", 4, "bfloat16", "fp8")
    assert (model.max_model_len, model.trust_remote_code) == (32768, True)
    assert (model.tool_call_parser, model.reasoning_parser) == ("hermes", "qwen3")
    assert (serve.host, serve.port, serve.gpu_memory_utilization) == ("127.0.0.1", 8001, 0.85)
    assert (serve.max_num_batched_tokens, serve.max_num_seqs, serve.block_size) == (8192, 64, 32)
    assert (serve.prefix_caching, serve.prefix_caching_hash_algo) == (False, "xxhash")
    assert serve.async_scheduling and serve.enforce_eager and serve.extra_args == []


def test_compilation_config_forms():
    recipe, _ = imported("vllm serve /m --compilation-config '{\"cudagraph_mode\": \"piecewise\", "
                         "\"pass_config\": {\"fuse_minimax_qk_norm\": true}, \"level\": 3, \"x\": null}'\n")
    assert recipe.serve.cudagraph_mode == "PIECEWISE"
    assert recipe.serve.compilation_config == {"pass_config": {"fuse_minimax_qk_norm": True}, "level": 3}
    recipe, _ = imported("vllm serve /m -cc.cudagraph_mode=FULL --compilation-config.pass_config.a true "
                         "-O.mode=3\n")
    assert recipe.serve.cudagraph_mode == "FULL"
    assert recipe.serve.compilation_config == {"pass_config": {"a": True}, "mode": 3}
    recipe, text = imported("vllm serve /m -O3 --optimization-level=2 -O 1\n")
    assert recipe.serve.extra_args == ["-O3", "--optimization-level=2", "-O", "1"]
    assert "optimization-level is kept as given" in text
    recipe, text = imported("vllm serve /m --compilation-config 3\n")  # the old integer level: no recipe key
    assert recipe.serve.extra_args == [] and recipe.serve.compilation_config == {}
    assert "serve.extra_args[0] not imported: --compilation-config repeats a flag" in text.replace("\n#   ", " ")


def test_kv_transfer_config():
    lmcache = "{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}"
    recipe, _ = imported(f"PYTHONHASHSEED=0 vllm serve /m --kv-transfer-config '{lmcache}'\n")
    assert recipe.cache.enabled and recipe.serve.extra_args == []
    producer = "{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_producer\"}"
    recipe, text = imported(f"vllm serve /m --kv-transfer-config '{producer}'\n")
    assert recipe.cache.enabled and recipe.serve.extra_args == ["--kv-transfer-config", producer]
    assert "overrides the one stackctl writes" in text
    nixl = "{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}"
    recipe, _ = imported(f"vllm serve /m --kv-transfer-config '{nixl}'\n")
    assert not recipe.cache.enabled and recipe.serve.extra_args == ["--kv-transfer-config", nixl]
    overrides = ("{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\","
                 "\"kv_connector_extra_config\":{\"lmcache.chunk_size\":128}}")
    recipe, _ = imported(f"vllm serve /m --kv-transfer-config '{overrides}'\n", "chunk_size: 512\n")
    assert recipe.cache.chunk_size == 128  # LMCache reads lmcache.* connector keys last


def test_unknown_and_unfit_flags_are_kept_verbatim_in_order():
    recipe, text = imported("vllm serve /m --seed -1 --speculative-config '{\"method\":\n \"ngram\"}' "
                            "--kv-cache-dtype fp8_inc --tool-call-parser hermes --enable-chunked-prefill\n")
    # a flag stackctl writes from a recipe key is never repeated in serve.extra_args (extra-args-shadow-flag): a
    # value its key cannot hold, or half of a pair the key stands for, is named in a note instead
    assert recipe.serve.extra_args == ["--seed", "-1", "--speculative-config", '{"method":"ngram"}',
                                       "--enable-chunked-prefill"]
    assert recipe.model.kv_cache_dtype == "auto" and recipe.model.tool_call_parser is None
    notes = text.replace("\n#   ", " ")
    assert "--kv-cache-dtype fp8_inc: not a value model.kv_cache_dtype can hold" in notes
    assert "--tool-call-parser hermes: model.tool_call_parser stands for" in notes


def test_secret_flags_are_not_copied():
    recipe, text = imported("vllm serve /m --api-key sk-live-123 --hf-token hf_abc --enable-prompt-tokens-details\n")
    assert "sk-live-123" not in text and "hf_abc" not in text
    assert recipe.serve.secret_env == {"VLLM_API_KEY": "VLLM_API_KEY", "HF_TOKEN": "HF_TOKEN"}
    assert recipe.serve.extra_args == ["--enable-prompt-tokens-details"]


# -- environment ------------------------------------------------------------------------------------------------

def test_environment_mapping():
    recipe, text = imported(
        "export PYTHONHASHSEED=7 VLLM_SERVER_DEV_MODE=1 LMCACHE_CONFIG_FILE=/etc/lmc.yaml HF_TOKEN=hf_x1 \\\n"
        "  MY_API_KEY=k2 AWS_REGION=us-east-1 HTTPS_PROXY=http://u:pw3@proxy:3128 NO_PROXY=localhost OMP_X=1\n"
        "vllm serve /m\n")
    assert recipe.cache.hash_seed == 7 and recipe.serve.dev_endpoints
    assert recipe.serve.env == {"NO_PROXY": "localhost", "OMP_X": "1"}
    assert recipe.serve.secret_env == {k: k for k in ("HF_TOKEN", "MY_API_KEY", "AWS_REGION", "HTTPS_PROXY")}
    for value in ("hf_x1", "k2", "pw3"):
        assert value not in text
    assert "LMCACHE_CONFIG_FILE=/etc/lmc.yaml is not readable here" in text
    assert "Values not copied: AWS_REGION, HF_TOKEN, HTTPS_PROXY, MY_API_KEY" in text


def test_random_hash_seed_stays_in_env():
    recipe, _ = imported("PYTHONHASHSEED=random vllm serve /m\n")
    assert recipe.cache.hash_seed is None and recipe.serve.env == {"PYTHONHASHSEED": "random"}


def test_values_known_only_at_run_time_are_left_with_a_note():
    recipe, text = imported("vllm serve $MODEL_DIR/m --download-dir \"$(pwd)/x\" --port $((8000 + i)) "
                            "--max-model-len 4096\n")
    assert recipe.model.path == "$MODEL_DIR/m" and "TODO: $MODEL_DIR was known only" in text
    assert recipe.serve.port == 8000 and recipe.model.max_model_len == 4096  # the port is left at the default
    assert recipe.serve.extra_args == []
    assert "--download-dir $(pwd)/x: $(pwd) was known only when the old launch ran" in text.replace("\n#   ", " ")
    assert {f.rule_id for f in run_rules(recipe) if f.severity == "error"} == {"unresolved-value"}


@pytest.mark.parametrize("script, engine", [
    ("docker run --device /dev/kfd rocm/atom-dev:vllm-latest vllm serve /m\n", "atom-vllm"),
    ("ATOM_ENABLE_QK_NORM_ROPE_CACHE_QUANT_FUSION=1 vllm serve /m\n", "atom-vllm"),
    ("docker run -e ATOM_DISABLE_VLLM_PLUGIN=1 rocm/atom-dev:vllm-latest vllm serve /m\n", "vllm"),
    ("VLLM_CPU_KVCACHE_SPACE=4 ATOM_X=1 vllm serve /m\n", "vllm"),
    ("vllm serve /m\n", "vllm"),
    # the other forms ATOM's repository documents: its own server, a hand install, --model-impl, its own-server image
    ("python -m atom.entrypoints.openai_server --model m\n", "atom-vllm"),
    ("pip install amd-aiter\ngit clone https://github.com/ROCm/ATOM.git\nvllm serve m\n", "atom-vllm"),
    ("pip install ./ATOM\nvllm serve m\n", "atom-vllm"),
    ("vllm serve m --model-impl atom\n", "atom-vllm"),
    ("docker run --device /dev/kfd rocm/atom-dev:latest vllm serve m\n", "atom-vllm"),
    ("ATOM_DISABLE_VLLM_PLUGIN=1 ATOM_X=1 vllm serve m\n", "vllm"),
    ("docker run -e VLLM_CPU_KVCACHE_SPACE=8 vllm-cpu:latest --model m\n", "vllm"),
])
def test_engine_detection(script, engine):
    recipe, _ = imported(script)
    assert recipe.stack.engine == engine
    assert "ATOM_DISABLE_VLLM_PLUGIN" not in recipe.serve.env  # stackctl sets it itself for plain vLLM on rocm


# -- LMCache config ---------------------------------------------------------------------------------------------

def test_lmcache_yaml_to_tiers():
    script = ("PYTHONHASHSEED=0 vllm serve /m -tp 3 --kv-transfer-config "
              "'{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'\n")
    recipe, _ = imported(script, "chunk_size: 128\nlocal_cpu: true\nmax_local_cpu_size: 33.333\n"
                                 "local_disk: file:///nvme/kv/\nmax_local_disk_size: 10\nremote_url: fs:///pnfs/kv\n"
                                 "remote_serde: naive\nsave_decode_cache: true\nuse_layerwise: 1\n"
                                 "enable_async_loading: false\nblocking_timeout_secs: 20\nnothing: null\n")
    tiers = [(t.kind, t.size_gb, t.path) for t in recipe.cache.tiers]
    assert tiers == [("cpu", 100.0, None), ("disk", 30.0, "/nvme/kv"), ("fs", None, "/pnfs/kv")]
    cache = recipe.cache
    assert (cache.chunk_size, cache.save_decode_cache, cache.use_layerwise, cache.async_loading) == (
        128, True, False, False)
    assert cache.extra == {"blocking_timeout_secs": 20}
    # layer-wise in LMCache's config only: kept as the launch ran it, for validate to report (not corrected)
    assert recipe.serve.env["LMCACHE_USE_LAYERWISE"] == "True"
    assert "layerwise-not-told-to-vllm" in {f.rule_id for f in run_rules(recipe)}
    recipe, _ = imported(script, "local_cpu: false\nremote_url: fs://localhost:0/pnfs/kv\nremote_serde: cachegen\n")
    assert [(t.kind, t.path) for t in recipe.cache.tiers] == [("fs", "/pnfs/kv")]
    assert recipe.cache.extra == {"remote_serde": "cachegen"}
    recipe, text = imported(script, "local_disk: /nvme\nmax_local_disk_size: 0\nremote_url: redis://r:6379\n")
    assert [t.kind for t in recipe.cache.tiers] == ["cpu"]  # LMCache's default CPU tier (5 GiB per rank)
    assert recipe.cache.tiers[0].size_gb == 15.0
    assert recipe.cache.extra == {"local_disk": "/nvme", "max_local_disk_size": 0, "remote_url": "redis://r:6379"}
    assert "LMCache never used that disk" in text


def test_lmcache_env_overrides_yaml_and_defaults_without_config():
    script = ("LMCACHE_CHUNK_SIZE=64 LMCACHE_LOCAL_CPU=False LMCACHE_LOG_LEVEL=DEBUG PYTHONHASHSEED=0 vllm serve /m "
              "--kv-transfer-config '{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'\n")
    recipe, _ = imported(script, "chunk_size: 256\nlocal_cpu: true\n")
    assert recipe.cache.chunk_size == 64 and recipe.cache.tiers == []
    assert recipe.serve.env == {"LMCACHE_LOG_LEVEL": "DEBUG"}  # no recipe field: stays an env override
    recipe, text = imported("PYTHONHASHSEED=0 vllm serve /m --kv-transfer-config "
                            "'{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'\n")
    assert [(t.kind, t.size_gb) for t in recipe.cache.tiers] == [("cpu", 5.0)]
    assert "LMCache's defaults are imported" in text


def test_s3_tier_credentials_are_refused_and_referenced():
    pytest.importorskip("yaml")
    script = (LAUNCH / "api-server-s3.sh").read_text()
    recipe, text = imported(script, (LAUNCH / "api-server-s3.lmcache.yaml").read_text())
    s3 = recipe.tiers_of("s3")[0]
    assert (s3.url, s3.region) == ("s3://kv-bucket.s3.us-west-2.amazonaws.com", "us-west-2")
    assert (s3.access_key_env, s3.secret_key_env) == ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    assert recipe.cache.extra == {"extra_config": {"s3_num_io_threads": 32}}
    assert "extra_config.aws_access_key_id, extra_config.aws_secret_access_key were NOT copied" in text
    recipe, text = imported("vllm serve /m", "remote_url: s3://b.example.com\n")
    assert recipe.tiers_of("s3")[0].region == "us-east-1" and "TODO: LMCache's S3 connector requires s3_region" in text


def test_lmcache_settings_without_the_connector_are_imported_disabled():
    recipe, text = imported("vllm serve /m\n", "max_local_cpu_size: 10\n")
    assert not recipe.cache.enabled and recipe.cache.tiers[0].size_gb == 10.0
    assert "no LMCacheConnectorV1" in text
    assert "tiers-without-cache" in {f.rule_id for f in run_rules(recipe)}


def test_the_draft_refuses_a_key_its_recipe_section_does_not_have():
    draft = Draft()
    draft.cache.set("enabled", True, "a comment")
    assert draft.cache == {"enabled": True} and draft.cache.comments == {"enabled": ["a comment"]}
    with pytest.raises(KeyError, match=r"\[cache\] has no key 'enable'"):
        draft.cache.set("enable", True)
    with pytest.raises(KeyError, match=r"\[serve\] has no key 'prot'"):
        draft.serve.get("prot")
    with pytest.raises(KeyError, match="no recipe section 'cahce'"):
        draft.section("cahce")


# -- fixtures and `stackctl validate` ---------------------------------------------------------------------------

@pytest.mark.parametrize("stem", ["vllm-lmcache-no-seed", "atom-docker-eager", "api-server-s3"])
def test_fixture_imports_load_and_keep_no_secret(stem):
    yaml_path = LAUNCH / f"{stem}.lmcache.yaml"
    if stem == "api-server-s3":
        pytest.importorskip("yaml")
    text = importer.import_launch(LAUNCH / f"{stem}.sh", yaml_path if yaml_path.exists() else None, None)
    load_recipe_text(text)
    for secret in FIXTURE_SECRETS:
        assert secret not in text


@pytest.mark.parametrize("stem, rule", [("vllm-lmcache-no-seed", "lmcache-hash-seed"),
                                        ("atom-docker-eager", "atom-cuda-graphs")])
def test_validate_names_what_the_old_launch_got_wrong(tmp_path, stem, rule):
    out = tmp_path / "imported.toml"
    args = ["init", "--from-command", str(LAUNCH / f"{stem}.sh"), "-o", str(out)]
    if (LAUNCH / f"{stem}.lmcache.yaml").exists():
        args += ["--lmcache-config", str(LAUNCH / f"{stem}.lmcache.yaml")]
    run_cli(*args, check=True)
    result = run_cli("validate", str(out))
    assert result.returncode == 1
    assert f"error[{rule}]" in result.stdout, result.stdout


def test_atom_fixture_imports_the_whole_launch():
    recipe = load_recipe_text(importer.import_launch(LAUNCH / "atom-docker-eager.sh", None, None))
    assert (recipe.stack.name, recipe.stack.platform, recipe.stack.engine) == ("minimax-atom", "rocm", "atom-vllm")
    assert recipe.stack.base_image == "rocm/atom-dev:vllm-latest" and recipe.cache.hash_seed == 0
    assert recipe.model.path == "/data/hf/MiniMax-M2.5" and recipe.model.tensor_parallel == 2
    assert recipe.serve.secret_env == {"HF_TOKEN": "HF_TOKEN"}


# -- round trip -------------------------------------------------------------------------------------------------

# What a launch (stack.env + serve.sh + lmcache.yaml) cannot express; the round trip copies these from the original
# recipe and compares everything else exactly:
#   stack.name          passed in as --name
#   stack.platform      stackctl's serve.sh carries no platform marker (a CPU launch may look like a ROCm one)
#   stack.base_image    serve.sh runs inside the image; only `docker run IMAGE` launches name it
#   stack.description   free text
#   versions.*          only an image tag tells the vLLM version, and serve.sh names no image
#   model.generate      a build-time step
#   cache.tiers[].access_key_env / secret_key_env / credentials_file
#                       secrets reach the container at run time (compose.yaml), never in serve.sh or stack.env
#   host.*              pinning is decided by `up` on the host (the launcher comes from the container's environment)
#   build.*, checks.*   image build and preflight settings
NOT_IN_A_LAUNCH = {"stack": ("name", "platform", "base_image", "description"), "model": ("generate",)}
# Not in a launch: secrets, and what only doctor uses (the CA an S3 endpoint's certificate chains to).
TIER_SECRET_KEYS = ("access_key_env", "secret_key_env", "credentials_file", "ca_file")
WHOLE_SECTIONS = ("versions", "host", "build", "checks")


def launch_script(files: dict) -> str:
    """A shell launch as a user would write it from a bundle: `export` lines from stack.env, then serve.sh."""
    lines = [line for line in files["stack.env"].decode().splitlines() if line and not line.startswith("#")]
    exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in (line.split("=", 1) for line in lines))
    return exports + files["serve.sh"].decode()


def expressible(recipe) -> dict:
    data = recipe.to_dict()
    for section, keys in NOT_IN_A_LAUNCH.items():
        for key in keys:
            data[section].pop(key)
    for tier in data["cache"]["tiers"]:
        for key in TIER_SECRET_KEYS:
            tier.pop(key)
    for section in WHOLE_SECTIONS:
        data.pop(section)
    return data


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.toml")), ids=lambda p: p.stem)
def test_import_of_rendered_bundle_gives_back_the_recipe(path, tmp_path):
    recipe = load_recipe(path)
    files = render_files(StackSpec(recipe))
    script = tmp_path / "launch.sh"
    script.write_text(launch_script(files))
    yaml_path = None
    if "lmcache.yaml" in files:
        yaml_path = tmp_path / "lmcache.yaml"
        yaml_path.write_bytes(files["lmcache.yaml"])
    text = importer.import_launch(script, yaml_path, recipe.stack.name)
    back = load_recipe_text(text)
    assert back.stack.name == recipe.stack.name
    if recipe.stack.platform == "rocm":
        assert back.stack.platform == "rocm"
    mine, theirs = expressible(recipe), expressible(back)
    for section in mine:
        assert theirs[section] == mine[section], f"{path.stem}: [{section}] differs after the round trip"


def test_round_trip_keeps_extra_settings(tmp_path):
    """Keys the shipped recipes leave at their defaults, through the same round trip."""
    text = importer.import_launch_text
    source = ('[stack]\nname = "rt"\n[model]\npath = "/m/x"\ntensor_parallel = 4\n'
              'dtype = "bfloat16"\nmax_model_len = 8192\n[serve]\nport = 8123\nmax_num_seqs = 32\nblock_size = 16\n'
              'prefix_caching_hash_algo = "xxhash"\nenforce_eager = true\ncompilation_config = { mode = 3 }\n'
              'extra_args = ["--seed", "1", "--x=y z"]\nsecret_env = { HF_TOKEN = "HF_TOKEN" }\n'
              'env = { A = "it\'s \\"quoted\\" (x)" }\n'
              '[cache]\nenabled = true\nchunk_size = 512\nhash_seed = 3\nuse_layerwise = true\n'
              'async_loading = true\nextra = { blocking_timeout_secs = 20, extra_config = { s3_num_io_threads = 8 } }\n'
              '[[cache.tiers]]\nkind = "cpu"\nsize_gb = 100\n[[cache.tiers]]\nkind = "s3"\n'
              'url = "s3://b.example.com:9000"\nregion = "eu-1"\ndisable_tls = true\n')
    recipe = load_recipe_text(source)
    files = render_files(StackSpec(recipe))
    back = load_recipe_text(text(launch_script(files), files["lmcache.yaml"].decode(), "rt"))
    mine, theirs = expressible(recipe), expressible(back)
    # serve.secret_env is a run-time reference too (compose.yaml only)
    mine["serve"].pop("secret_env"), theirs["serve"].pop("secret_env")
    assert theirs == mine


# -- any launch imports into a recipe that loads ---------------------------------------------------------------

_FLAGS = sorted(VALUE_FLAGS) + sorted(BOOL_FLAGS) + [
    "--no-enable-prefix-caching", "--served-model-name", "--compilation-config", "-cc.cudagraph_mode", "-O",
    "-O3", "--kv-transfer-config", "--enable-auto-tool-choice", "--tool-call-parser", "--api-key", "--model",
    "--unknown-flag"]
_WORDS = st.sampled_from(_FLAGS) | st.text(max_size=12) | st.sampled_from([
    "0", "-1", "2", "0.5", "1.5", "8k", "fp8", "FULL", '{"cudagraph_mode":"NONE"}', '{"level": null}',
    '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}', "[1]", "null", "$HOME", "a\nb", "'", "\\"])
_ENV = st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True), st.text(max_size=10), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(_WORDS, max_size=12), _ENV, st.sampled_from(["", "chunk_size: 7\nmax_local_cpu_size: 0.5\n"]))
@example(["--model", "/"], {}, "")  # a required key a guard rule refuses: an error, not a crash
def test_any_launch_imports_into_a_recipe_that_loads(words, env, lmcache_yaml):
    prefix = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    script = f"{prefix} vllm serve /models/m {' '.join(shlex.quote(w) for w in words)}\n"
    try:
        text = importer.import_launch_text(script, lmcache_yaml or None, "fuzz")
    except StackctlError:
        return  # a user error (e.g. a bad --model value) is a fine answer; a crash is not
    load_recipe_text(text)  # import_launch_text checks this too; be explicit
    for value in env.values():
        if len(value) > 3 and is_secret("X", value):
            assert value not in text


def test_a_model_path_the_guard_rules_refuse_is_a_one_line_error_not_a_recipe_without_a_model():
    with pytest.raises(StackctlError, match=r"^model\.path cannot be imported: '/' is the root directory \(fix: "):
        importer.import_launch_text("vllm serve /models/m --model /\n", None, "root")


# -- what the script really does ---------------------------------------------------------------------------------

LMC = '--kv-transfer-config \'{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}\''


def test_lmcache_config_file_written_by_a_heredoc_is_followed():
    recipe, text = imported(
        "cat > /tmp/lmc.yaml <<'EOF'\nchunk_size: 512\nlocal_cpu: true\nmax_local_cpu_size: 20\n"
        "local_disk: file:///nvme/kv/\nmax_local_disk_size: 100\nEOF\n"
        f"export LMCACHE_CONFIG_FILE=/tmp/lmc.yaml PYTHONHASHSEED=0\nvllm serve /m {LMC}\n")
    assert recipe.cache.chunk_size == 512
    assert [(t.kind, t.size_gb) for t in recipe.cache.tiers] == [("cpu", 20.0), ("disk", 100.0)]
    assert recipe.cache.tiers[1].path == "/nvme/kv"
    assert "LMCache config read from /tmp/lmc.yaml (written by the script)" in text


def test_lmcache_config_file_on_disk_is_followed_through_the_volume(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "lmcache.yaml").write_text("chunk_size: 128\nmax_local_cpu_size: 8\n")
    script = tmp_path / "run.sh"
    script.write_text(f"docker run --device /dev/kfd -v {tmp_path}/cfg:/cfg -e LMCACHE_CONFIG_FILE=/cfg/lmcache.yaml "
                      f"-e PYTHONHASHSEED=0 rocm/vllm:latest vllm serve /m {LMC}\n")
    text = importer.import_launch(script)
    recipe = load_recipe_text(text)
    assert recipe.cache.chunk_size == 128 and recipe.cache.tiers[0].size_gb == 8.0
    assert f"LMCache config read from {tmp_path}/cfg/lmcache.yaml" in text


def test_unexported_assignment_is_not_seen_by_the_server_and_is_noted():
    recipe, text = imported(f"PYTHONHASHSEED=0\nVLLM_USE_V1=1\nvllm serve /m {LMC}\n")
    assert recipe.cache.hash_seed is None and "VLLM_USE_V1" not in recipe.serve.env
    assert "without export, so the server never saw them: PYTHONHASHSEED, VLLM_USE_V1" in text
    assert "lmcache-hash-seed" in [f.rule_id for f in run_rules(recipe)]
    recipe, _ = imported(f"PYTHONHASHSEED=0 vllm serve /m {LMC}\n")  # inline assignment: in the environment
    assert recipe.cache.hash_seed == 0
    recipe, _ = imported(f"PYTHONHASHSEED=0\nexport PYTHONHASHSEED\nenv VLLM_USE_V1=1 vllm serve /m {LMC}\n")
    assert recipe.cache.hash_seed == 0 and recipe.serve.env["VLLM_USE_V1"] == "1"


def test_heredoc_bodies_comments_and_uncalled_functions_are_not_commands():
    script = ("# vllm serve /commented --port 1\n"
              "cat > notes.txt <<EOF\nvllm serve /in-heredoc --port 2\nEOF\n"
              "unused() {\n  vllm serve /in-unused-function --port 3\n}\n"
              "start() {\n  vllm serve /real --port 4\n}\n"
              "start\n")
    recipe, _ = imported(script)
    assert recipe.model.path == "/real" and recipe.serve.port == 4


def test_versions_from_pip_pins_and_image_tag():
    recipe, text = imported(f"pip install vllm==0.10.1 'lmcache==0.3.3'\nexport PYTHONHASHSEED=0\nvllm serve /m {LMC}\n")
    assert recipe.versions.vllm == "0.10.1" and recipe.versions.lmcache == "0.3.3"
    assert "pip install lmcache==0.3.3" in text
    recipe, _ = imported("docker run --device /dev/kfd rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909 vllm serve /m\n")
    assert recipe.versions.vllm == "0.10.1"


def test_a_variable_no_supported_vllm_reads_is_named_even_with_the_version_unknown():
    recipe, _ = imported(f"export VLLM_USE_V1=1 PYTHONHASHSEED=0\nvllm serve /m {LMC}\n")
    findings = {f.rule_id: f for f in run_rules(recipe)}
    assert findings["removed-env-var"].message == ("VLLM_USE_V1 is ignored by every vLLM since 0.11.0 (the vLLM "
                                                   "version is not known, and no release since reads it)")
    assert "removed-env-var" not in getattr(findings.get("version-unknown"), "message", "")
    recipe, _ = imported(f"export VLLM_USE_V1=1 PYTHONHASHSEED=0\npip install vllm==0.27.1\nvllm serve /m {LMC}\n")
    assert "removed-env-var" in [f.rule_id for f in run_rules(recipe)]


def test_disk_without_size_in_the_yaml_is_a_finding():
    recipe, _ = imported(f"export PYTHONHASHSEED=0\nvllm serve /m {LMC}\n", "local_disk: file:///nvme/\n")
    assert "disk" not in [t.kind for t in recipe.cache.tiers]
    assert "disk-tier-without-size" in [f.rule_id for f in run_rules(recipe)]
