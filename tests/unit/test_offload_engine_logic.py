"""The offload engine as a recipe choice (cache.offload): what each engine renders (serve flags, the
--kv-transfer-config, the LMCache server serve.sh starts), what the importer reads back from the launch shapes of
each engine, the rules on platform, tiers and releases, and doctor's LMCache-only checks skipping with the engine's
reason. The live proof is tests/integration/test_offload_engines.py."""

from __future__ import annotations

import json

import pytest

from stackctl import layout
from stackctl import importer
from stackctl.bundle import stackspec
from stackctl.bundle.render import render_files
from stackctl.doctor import offload_checks
from stackctl.doctor.registry import Unavailable, require_lmcache
from stackctl.recipe.loader import load_recipe_text
from stackctl.rules.ruleset import run_rules
from stackctl.bundle.stackspec import StackSpec

BASE = """
[stack]
name = "t"
platform = "{platform}"
engine = "vllm"

[versions]
vllm = "0.32.0"
lmcache = "0.5.6"

[model]
path = "/models/m"

[serve]
cudagraph_mode = "FULL_AND_PIECEWISE"

[cache]
enabled = true
hash_seed = 0
offload = "{offload}"
{tiers}
"""
CPU_TIER = '[[cache.tiers]]\nkind = "cpu"\nsize_gb = 2\n'
FS_TIER = '[[cache.tiers]]\nkind = "fs"\npath = "/tmp/kv-fs"\n'
DISK_TIER = '[[cache.tiers]]\nkind = "disk"\npath = "/tmp/kv-disk"\nsize_gb = 1\n'


def recipe(offload: str, tiers: str = CPU_TIER, platform: str = "rocm"):
    return load_recipe_text(BASE.format(platform=platform, offload=offload, tiers=tiers))


def transfer_config(args: list[str]) -> dict | None:
    return json.loads(args[args.index("--kv-transfer-config") + 1]) if "--kv-transfer-config" in args else None


def rule_ids(r) -> set[str]:
    return {f.rule_id for f in run_rules(r) if f.severity == "error"}


# -- rendering -----------------------------------------------------------------------------------------------------

def test_lmcache_in_the_server_is_the_default_and_renders_as_before():
    r = load_recipe_text(BASE.format(platform="rocm", offload="lmcache", tiers=CPU_TIER).replace(
        'offload = "lmcache"\n', ""))
    assert r.cache.offload == "lmcache"
    assert transfer_config(stackspec.serve_args(r))["kv_connector"] == "LMCacheConnectorV1"
    assert stackspec.environment(r)["LMCACHE_CONFIG_FILE"] == layout.LMCACHE_CONFIG_PATH
    assert stackspec.lmcache_config(r)["local_cpu"] is True
    assert stackspec.lmcache_server_command(r) is None


def test_vllm_native_is_written_with_vllms_own_flags_and_no_lmcache():
    r = recipe("vllm-native")
    args = stackspec.serve_args(r)
    assert args[args.index("--kv-offloading-backend"):][:4] == ["--kv-offloading-backend", "native",
                                                                "--kv-offloading-size", "2"]
    assert transfer_config(args) is None
    assert "LMCACHE_CONFIG_FILE" not in stackspec.environment(r)
    assert stackspec.lmcache_config(r) is None and stackspec.lmcache_install(r) is None
    assert stackspec.versions(r)["lmcache"] is None  # the image carries no LMCache
    assert "lmcache.yaml" not in render_files(StackSpec(r))


def test_vllm_simple_is_a_kv_transfer_config_with_its_disk_backend():
    config = transfer_config(stackspec.serve_args(recipe("vllm-simple", CPU_TIER + DISK_TIER)))
    assert config == {"kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both",
                      "kv_connector_extra_config": {"cpu_bytes_to_use": 2 << 30, "kv_offload_backend": "disk",
                                                    "disk_path": "/tmp/kv-disk", "disk_capacity_bytes": 1 << 30}}


def test_lmcache_mp_starts_the_lmcache_server_before_vllm_in_serve_sh():
    r = recipe("lmcache-mp", CPU_TIER + FS_TIER, platform="cpu")
    config = transfer_config(stackspec.serve_args(r))
    assert config["kv_connector"] == "LMCacheMPConnector"
    assert config["kv_connector_extra_config"] == {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": 5555}
    argv = stackspec.lmcache_server_command(r)
    assert argv[argv.index("--l1-size-gb") + 1] == "2" and "--l2-adapter" in argv
    assert stackspec.lmcache_in_image(r) and not stackspec.lmcache_in_server(r)
    assert stackspec.cpu_connector_shipped(r) and not stackspec.cpu_connector_enabled(r)
    assert stackspec.environment(r)[layout.CPU_CONNECTOR_ENV] == "0"
    files = render_files(StackSpec(r))
    serve = files["serve.sh"].decode()
    assert serve.index("lmcache server") < serve.index("exec \"${launcher[@]}\"")
    assert "http://127.0.0.1:8080/healthcheck" in serve and "[lmcache-server] " in serve
    assert "lmcache.yaml" not in files and "lmcache.yaml" not in files["compose.yaml"].decode()


def test_up_makes_sure_the_lmcache_servers_ports_are_free():
    import socket

    from stackctl.errors import StackctlError
    from stackctl.lifecycle.preflight import ensure_ports_free

    def free_port() -> int:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        r = recipe("lmcache-mp", platform="cpu")
        # The other ports free (a stack of the test run may serve on the recipe's 8000), the server's HTTP port taken.
        r.serve.port, r.cache.server_port = free_port(), free_port()
        r.cache.server_http_port = taken
        assert (layout.LMCACHE_SERVER_HOST, taken, "cache.server_http_port") in stackspec.listening_ports(r)
        with pytest.raises(StackctlError, match=f"port {taken} .* set cache.server_http_port to a free port"):
            ensure_ports_free(StackSpec(r), "t")
    assert stackspec.listening_ports(recipe("vllm-native")) == [("127.0.0.1", 8000, "serve.port")]


def test_the_lmcache_mp_image_is_the_image_of_lmcache_in_the_server():
    """Same build inputs but the name: an lmcache-mp stack reuses the layers of the LMCache stack's image."""
    from stackctl.bundle.render import image_hash

    def inputs(offload):
        files = render_files(StackSpec(recipe(offload, platform="cpu")))
        return {k: v for k, v in files.items() if k not in ("serve.sh", "compose.yaml", "manifest.json", "stack.env")}

    assert image_hash(inputs("lmcache-mp")) == image_hash(inputs("lmcache"))


def test_an_engine_other_than_the_default_changes_the_recipe_hash():
    assert stackspec.recipe_hash(recipe("lmcache-mp")) != stackspec.recipe_hash(recipe("lmcache"))


# -- rules ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("offload,tiers,platform,expected", [
    ("lmcache-mp", CPU_TIER + FS_TIER, "cpu", set()),
    ("vllm-native", CPU_TIER, "cpu", {"offload-engine-platform"}),
    ("vllm-simple", CPU_TIER, "cpu", {"offload-engine-platform"}),
    ("vllm-native", CPU_TIER, "rocm", set()),
    ("vllm-native", FS_TIER, "rocm", {"offload-engine-tier"}),  # no cpu tier, and an fs tier it cannot serve
    ("lmcache-mp", DISK_TIER, "rocm", {"offload-engine-tier"}),
    ("vllm-simple", CPU_TIER + DISK_TIER, "rocm", set()),
])
def test_engine_rules(offload, tiers, platform, expected):
    assert rule_ids(recipe(offload, tiers, platform)) & {"offload-engine-platform", "offload-engine-tier",
                                                          "offload-engine-release", "lmcache-server-release"} == expected


def test_lmcache_server_release_names_the_flag_an_old_release_lacks():
    r = load_recipe_text(BASE.format(platform="rocm", offload="lmcache-mp", tiers=CPU_TIER).replace(
        'lmcache = "0.5.6"', 'lmcache = "0.4.4"'))
    messages = [f.message for f in run_rules(r) if f.rule_id == "lmcache-server-release"]
    assert any("--supported-transfer-mode" in m and "first in LMCache" in m for m in messages), messages


def test_an_lmcache_rule_does_not_judge_an_engine_without_lmcache_in_the_server():
    r = load_recipe_text(BASE.format(platform="rocm", offload="vllm-native", tiers=CPU_TIER).replace(
        "hash_seed = 0", "hash_seed = 0\nsave_decode_cache = true"))
    assert "lmcache-save-decode-cache" not in {f.rule_id for f in run_rules(r)}
    unseeded = BASE.format(platform="rocm", offload="{offload}", tiers=CPU_TIER).replace("hash_seed = 0\n", "")
    assert "lmcache-hash-seed" not in rule_ids(load_recipe_text(unseeded.format(offload="vllm-native")))
    assert "lmcache-hash-seed" not in rule_ids(load_recipe_text(unseeded.format(offload="lmcache-mp")))


# -- importer ------------------------------------------------------------------------------------------------------

def imported(text: str):
    out = importer.import_launch_text(text, None, "t")
    return load_recipe_text(out), out.replace("\n#   ", " ").replace("\n# ", " ")


def test_import_lmcache_server_and_the_mp_connector():
    r, text = imported(
        "lmcache server --port 6555 --http-port 9080 --chunk-size 128 --l1-size-gb 4 --eviction-policy LRU "
        "--l2-adapter '{\"type\": \"fs\", \"base_path\": \"/mnt/kv\"}' --l2-adapter '{\"type\": \"s3\"}' "
        "--max-workers 4 &\n"
        "vllm serve /models/m --kv-transfer-config "
        "'{\"kv_connector\":\"LMCacheMPConnector\",\"kv_role\":\"kv_both\","
        "\"kv_connector_extra_config\":{\"lmcache.mp.port\":6555}}'\n")
    assert (r.cache.enabled, r.cache.offload, r.cache.server_port, r.cache.server_http_port, r.cache.chunk_size) == \
        (True, "lmcache-mp", 6555, 9080, 128)
    assert [(t.kind, t.size_gb, t.path) for t in r.cache.tiers] == [("cpu", 4.0, None), ("fs", None, "/mnt/kv")]
    assert "--max-workers: not imported" in text and "stackctl writes fs adapters only" in text
    assert not r.serve.extra_args


@pytest.mark.parametrize("script", [
    "vllm serve /models/m --kv-offloading-backend lmcache --kv-offloading-size 8\n",
    "vllm serve /models/m --kv-transfer-config '{\"kv_connector\":\"LMCacheMPConnector\",\"kv_role\":\"kv_both\"}'\n",
])
def test_import_an_lmcache_server_the_launch_does_not_start_stays_verbatim(script):
    """The launch reaches an LMCache server started elsewhere: the flags stay as given, with a note saying how
    stackctl would start one in the stack."""
    r, text = imported(script)
    assert not r.cache.enabled and r.serve.extra_args
    assert "reaches an LMCache server the launch does not start" in text and 'cache.offload = "lmcache-mp"' in text


def test_import_kv_offloading_size_with_backend_lmcache_and_the_server_line():
    r, text = imported("lmcache server --l1-size-gb 4 --eviction-policy LRU &\n"
                       "vllm serve /models/m --kv-offloading-backend lmcache --kv-offloading-size 8\n")
    assert r.cache.offload == "lmcache-mp" and [(t.kind, t.size_gb) for t in r.cache.tiers] == [("cpu", 4.0)]
    assert "vLLM ignores it" in text and not r.serve.extra_args


def test_import_an_lmcache_server_vllm_does_not_reach_is_a_note():
    r, text = imported("lmcache server --l1-size-gb 4 --eviction-policy LRU &\nvllm serve /models/m\n")
    assert not r.cache.enabled
    assert "vLLM does not reach it" in text


@pytest.mark.parametrize("script,offload,size", [
    ("vllm serve /models/m --kv-offloading-backend native --kv-offloading-size 16\n", "vllm-native", 16.0),
    ("vllm serve /models/m --kv-offloading-size 16\n", "vllm-native", 16.0),
    ("VLLM_USE_SIMPLE_KV_OFFLOAD=1 vllm serve /models/m --kv-offloading-size 8\n", "vllm-simple", 8.0),
    ("vllm serve /models/m --kv-transfer-config '{\"kv_connector\":\"SimpleCPUOffloadConnector\","
     "\"kv_role\":\"kv_both\",\"kv_connector_extra_config\":{\"cpu_bytes_to_use\":4294967296}}'\n",
     "vllm-simple", 4.0),
])
def test_import_vllm_own_offload(script, offload, size):
    r, text = imported(script)
    assert (r.cache.offload, [(t.kind, t.size_gb) for t in r.cache.tiers]) == (offload, [("cpu", size)])
    assert "LMCache version is not visible" not in text
    assert not r.serve.extra_args


SIMPLE = '{"kv_connector":"SimpleCPUOffloadConnector","kv_role":"kv_both","kv_connector_extra_config":{%s}}'
OFFLOADING = '{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":{%s}}'


@pytest.mark.parametrize("config,why", [
    (SIMPLE % '"cpu_bytes_to_use":4294967296,"lazy_offload":true', "lazy_offload"),
    (OFFLOADING % '"spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":1073741824,"secondary_tiers":[]',
     "spec_name TieringOffloadingSpec"),
    (OFFLOADING % '"num_cpu_blocks":1000', "no cpu_bytes_to_use"),
    (OFFLOADING % '"cpu_bytes_to_use":1073741824,"spec_module_path":"my.spec"', "spec_module_path"),
    ('{"kv_connector":"OffloadingConnector","kv_role":"kv_producer",'
     '"kv_connector_extra_config":{"cpu_bytes_to_use":1073741824}}', "kv_role kv_producer"),
])
def test_import_keeps_a_vllm_offload_config_the_recipe_cannot_say_verbatim(config, why):
    """A tiering spec, a key without a recipe key or a size left to the spec is neither turned into a plain CPU
    offload nor given an invented size: the config reaches vLLM as the launch wrote it, with a note saying why."""
    r, text = imported(f"vllm serve /models/m --kv-transfer-config '{config}'\n")
    assert not r.cache.enabled and not r.cache.tiers
    assert r.serve.extra_args == ["--kv-transfer-config", config]
    assert why in text and "kept verbatim in serve.extra_args" in text


def test_import_offloading_backend_unknown_to_stackctl_stays_verbatim():
    r, _ = imported("vllm serve /models/m --kv-offloading-backend flexkv --kv-offloading-size 8\n")
    assert not r.cache.enabled
    assert r.serve.extra_args == ["--kv-offloading-backend", "flexkv", "--kv-offloading-size", "8"]


def test_import_offloading_backend_alone_offloads_nothing():
    r, text = imported("vllm serve /models/m --kv-offloading-backend native\n")
    assert not r.cache.enabled and "vLLM offloads nothing" in text


# -- doctor --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("offload,in_server,reason", [
    ("lmcache-mp", True, "LMCache runs as its own server"),
    ("vllm-native", True, "LMCache does not run"),
    ("vllm-native", False, "LMCache does not run"),
])
def test_lmcache_checks_skip_with_the_engines_reason(offload, in_server, reason):
    with pytest.raises(Unavailable, match=reason):
        require_lmcache(StackSpec(recipe(offload)), in_server=in_server)
    require_lmcache(StackSpec(recipe("lmcache-mp")), in_server=False)  # the image carries LMCache: image checks apply


class FakeContext:
    def __init__(self, r):
        self.recipe = r
        self.spec = StackSpec(self.recipe)


def test_offload_checks_leave_lmcache_in_the_server_to_its_own_checks():
    with pytest.raises(Unavailable, match="server.lmcache-hit"):
        offload_checks.offload_hit(FakeContext(recipe("lmcache")))
    with pytest.raises(Unavailable, match="runs no LMCache server"):
        offload_checks.lmcache_server(FakeContext(recipe("vllm-native")))
    off = load_recipe_text(BASE.format(platform="rocm", offload="lmcache", tiers="").replace(
        "enabled = true", "enabled = false"))
    with pytest.raises(Unavailable, match="KV offload is off"):
        offload_checks.offload_hit(FakeContext(off))


def test_lmcache_server_status_counts():
    status = {"storage_manager": {"l1_managers": {"_default": {"total_object_count": 3,
                                                               "memory_total_bytes": 1 << 30}}}}
    assert offload_checks._stored_objects(status) == 3 and offload_checks._l1_bytes(status) == 1 << 30
    assert offload_checks._stored_objects({}) == 0


class JudgedContext(FakeContext):
    """A context whose live facts are given: the LMCache server's /status and the served requests."""

    def __init__(self, r, served=None):
        super().__init__(r)
        self.served = served

    def remember(self, key, compute):
        return self.served


def answer(tokens, logprobs, ttft=1.0):
    return {"tokens": tokens, "logprobs": logprobs, "text": " ".join(tokens), "ttft_s": ttft}


def served(**changes):
    result = {"engine": "lmcache-mp", "prompt_tokens": 513, "cold": answer(["a", "b"], [-1.0, -2.0], 4.0),
              "hbm": answer(["a", "b"], [-1.1, -2.1], 0.5), "warm": answer(["a", "b"], [-1.1, -2.1], 1.0),
              "stored_objects": 4, "server_retrieved_tokens": 512, "external_hits": 512.0}
    result.update(changes)
    return result


@pytest.mark.parametrize("changes,status,words", [
    ({}, "pass", "512/513 prompt tokens loaded through lmcache-mp"),
    ({"cold": answer(["a", "c"], [-1.0, -2.0])}, "pass", "the recompute differs by the dtype's rounding"),
    ({"stored_objects": 0}, "fail", "stored nothing"),
    ({"external_hits": 0.0}, "fail", "was not loaded through lmcache-mp"),
    ({"server_retrieved_tokens": 0}, "fail", "logged 0 tokens retrieved"),
    ({"warm": answer(["a", "x"], [-1.1, -2.1])}, "fail", "differs from the HBM answer"),
    ({"warm": answer(["a", "b"], [-1.1, -2.3])}, "fail", "log-probabilities differ"),
])
def test_offload_hit_judges_the_servers_account(changes, status, words):
    result = offload_checks.offload_hit(JudgedContext(recipe("lmcache-mp", platform="cpu"), served(**changes)))
    assert result.status == status and words in result.message, result.message


def test_offload_hit_without_the_hit_counter_skips():
    with pytest.raises(Unavailable, match="external_prefix_cache_hits_total"):
        offload_checks.offload_hit(JudgedContext(recipe("lmcache-mp"), served(external_hits=None)))


def test_offload_hit_needs_the_dev_endpoint_to_empty_hbm():
    class Healthy(FakeContext):
        def require_healthy(self):
            pass

        def remember(self, key, compute):
            return compute()

    with pytest.raises(Unavailable, match="serve.dev_endpoints is off"):
        offload_checks.offload_hit(Healthy(recipe("lmcache-mp")))


@pytest.mark.parametrize("status,result,words", [
    ({"is_healthy": True, "chunk_size": 256}, "pass", "healthy, L1 2 GiB"),
    ({"is_healthy": False, "chunk_size": 256}, "fail", "unhealthy"),
    ({"is_healthy": True, "chunk_size": 128}, "fail", "chunk size 128"),
])
def test_lmcache_server_check_reads_status(monkeypatch, status, result, words):
    l1 = {"_default": {"total_object_count": 1, "memory_total_bytes": 2 << 30}}
    monkeypatch.setattr(offload_checks, "lmcache_server_status",
                        lambda ctx: {**status, "storage_manager": {"l1_managers": l1}})
    outcome = offload_checks.lmcache_server(FakeContext(recipe("lmcache-mp")))
    assert outcome.status == result and words in outcome.message, outcome.message


def test_lmcache_server_check_compares_l1_with_the_cpu_tier(monkeypatch):
    monkeypatch.setattr(offload_checks, "lmcache_server_status", lambda ctx: {
        "is_healthy": True, "chunk_size": 256,
        "storage_manager": {"l1_managers": {"_default": {"memory_total_bytes": 1 << 30}}}})
    outcome = offload_checks.lmcache_server(FakeContext(recipe("lmcache-mp")))
    assert outcome.status == "fail" and "the cpu tier says 2147483648" in outcome.message


def test_lmcache_server_that_does_not_answer_skips_with_the_url():
    r = recipe("lmcache-mp")
    r.cache.server_http_port = 9  # discard: nothing answers HTTP there
    with pytest.raises(Unavailable, match=r"does not answer http://127\.0\.0\.1:9/status"):
        offload_checks.lmcache_server_status(FakeContext(r))


def test_emptying_hbm_asks_again_while_transfers_are_in_flight(monkeypatch):
    import stackctl.httpclient as http

    answers = iter([{"success": False}, {"success": True}])
    monkeypatch.setattr(http, "post_json", lambda url, payload=None, timeout=0: next(answers))
    monkeypatch.setattr(offload_checks.time, "sleep", lambda s: None)
    offload_checks._empty_hbm("http://x")
    monkeypatch.setattr(http, "post_json", lambda url, payload=None, timeout=0: {"success": False})
    monkeypatch.setattr(offload_checks, "RESET_WAIT_S", -1.0)
    with pytest.raises(Unavailable, match="kept answering success=false"):
        offload_checks._empty_hbm("http://x")
