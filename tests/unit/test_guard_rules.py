"""Rules that stop free-form keys from bypassing the recipe, and the one-source tables they read."""

from __future__ import annotations

import pytest
from helpers import run_cli

from stackctl.bundle import keys
from stackctl.bundle import stackspec
from stackctl.recipe import load_recipe_text
from stackctl.rules.ruleset import run_rules

MAXIMAL = """[stack]
name = "max"
platform = "{platform}"
[versions]
lmcache = "0.5.6"
[model]
path = "/models/m"
served_name = "m2"
tensor_parallel = 2
dtype = "bfloat16"
kv_cache_dtype = "fp8"
max_model_len = 1000
trust_remote_code = true
tool_call_parser = "hermes"
reasoning_parser = "qwen3"
[serve]
max_num_batched_tokens = 10
max_num_seqs = 4
block_size = 16
prefix_caching = {prefix}
prefix_caching_hash_algo = "sha256"
async_scheduling = true
enforce_eager = true
cudagraph_mode = "PIECEWISE"
[cache]
enabled = true
hash_seed = 0
save_decode_cache = true
use_layerwise = true
async_loading = true
[[cache.tiers]]
kind = "cpu"
size_gb = 8
[[cache.tiers]]
kind = "disk"
size_gb = 8
path = "/nvme/kv"
[[cache.tiers]]
kind = "{remote}"
{remote_keys}
"""


def maximal(platform="rocm", prefix="true", remote="s3"):
    keys = 'url = "s3://kv.example:7480"\nregion = "us-east-1"\ndisable_tls = true' if remote == "s3" \
        else 'path = "/shared/kv"'
    return load_recipe_text(MAXIMAL.format(platform=platform, prefix=prefix, remote=remote, remote_keys=keys))


@pytest.mark.parametrize("platform,prefix", [("rocm", "true"), ("cpu", "false")])
def test_every_flag_serve_args_writes_has_a_recipe_key(platform, prefix):
    recipe = maximal(platform, prefix)
    argv = stackspec.server_command(recipe)[3:] + stackspec.serve_args(recipe)  # after `python -m MODULE`
    flags = {a for a in argv if a.startswith("-")}
    assert flags <= set(keys.SERVE_FLAG_KEYS), flags - set(keys.SERVE_FLAG_KEYS)


@pytest.mark.parametrize("remote", ["s3", "fs"])
def test_every_key_lmcache_config_writes_is_listed(remote):
    config = stackspec.lmcache_config(maximal(remote=remote))
    written = set(config) - {"extra_config", "remote_serde"}
    assert written <= set(keys.LMCACHE_KEYS), written - set(keys.LMCACHE_KEYS)
    assert set(config["extra_config"]) <= set(keys.LMCACHE_EXTRA_CONFIG_KEYS)
    for key in keys.LMCACHE_KEYS:  # and nothing listed that stackctl never writes
        assert key in stackspec.lmcache_config(maximal(remote="s3")) or \
            key in stackspec.lmcache_config(maximal(remote="fs")), key


BASE = """[stack]
name = "g"
platform = "rocm"
[versions]
lmcache = "0.5.6"
[model]
path = "/models/m"
[serve]
{serve}
[cache]
enabled = {enabled}
hash_seed = 0
{cache}
[[cache.tiers]]
kind = "cpu"
size_gb = 8
"""


def findings(serve="", cache="", enabled="true"):
    recipe = load_recipe_text(BASE.format(serve=serve, cache=cache, enabled=enabled), "g.toml")
    return [f for f in run_rules(recipe) if f.rule_id in ("extra-args-shadow-flag", "cache-extra-shadows-key")]


@pytest.mark.parametrize("args,key,problem", [
    ('["--port", "9000"]', "serve.port", None),
    ('["--port=99999"]', "serve.port", "must be <= 65535"),
    ('["--gpu-memory-utilization", "1.5"]', "serve.gpu_memory_utilization", "must be <= 1.0"),
    ('["--max_num_seqs", "-3"]', "serve.max_num_seqs", "must be >= 1"),
    ('["--max-model-len", "lots"]', "model.max_model_len", "'lots' is not an integer"),
    ('["--kv-cache-dtype", "fp7"]', "model.kv_cache_dtype", "is not one of"),
    ('["--enforce-eager"]', "serve.enforce_eager", None),
    ('["--no-enable-prefix-caching"]', "serve.prefix_caching", None),
    ('["--compilation-config.cudagraph_mode=NONE"]', "serve.compilation_config", None),
    ('["-cc", "{}"]', "serve.compilation_config", None),
    ("""['--kv-transfer-config', '{"kv_connector":"LMCacheConnectorV1"}']""", "cache.enabled", None),
])
def test_extra_args_that_repeat_a_flag_name_the_recipe_key(args, key, problem):
    found = findings(serve=f"extra_args = {args}")
    assert len(found) == 1 and found[0].rule_id == "extra-args-shadow-flag", found
    assert key in found[0].message and found[0].key.startswith("serve.extra_args")
    if problem:
        assert problem in found[0].message
    else:
        assert "the value" not in found[0].message


def test_extra_args_stackctl_does_not_write_are_fine():
    assert findings(serve='extra_args = ["--max-log-len", "10", "--disable-log-requests", "-O3", "-1"]') == []
    # another connector while LMCache is off: stackctl writes no --kv-transfer-config
    other = """extra_args = ['--kv-transfer-config', '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']"""
    assert findings(serve=other, enabled="false") == []


@pytest.mark.parametrize("extra,key", [
    ("chunk_size = 512", "cache.chunk_size"), ("local_cpu = false", "cpu"), ("save_decode_cache = true",
                                                                             "cache.save_decode_cache"),
    ("max_local_cpu_size = 80", "size_gb"), ('local_disk = "file:///nvme/", max_local_disk_size = 50',
                                             "never mounted"),
    ('local_disk = "file:///nvme/", max_local_disk_size = 100', "size_gb"), ('remote_url = "s3://b.example:7480"', "s3"),
    ("use_layerwise = true", "cache.use_layerwise"), ("enable_async_loading = true", "cache.async_loading"),
    ('extra_config = { s3_region = "eu-west-1" }', "region"),
])
def test_cache_extra_keys_that_shadow_a_recipe_key(extra, key):
    found = findings(cache=f"extra = {{ {extra} }}")
    assert {f.rule_id for f in found} == {"cache-extra-shadows-key"} and any(key in f.message for f in found), found
    assert all(f.key.startswith("cache.extra") for f in found)


def test_cache_extra_keys_the_recipe_cannot_express_are_fine():
    # without a CPU tier, LMCache keeps a CPU buffer: its size has no recipe key; local_cpu false is what stackctl
    # writes anyway; a disk size without a disk sizes nothing; a disk LMCache never uses (size 0) has no tier
    text = BASE.format(serve="", enabled="true",
                       cache="extra = { local_cpu = false, max_local_cpu_size = 2.0, max_local_disk_size = 0, "
                             'local_disk = "/nvme/kv" }')
    no_cpu_tier = load_recipe_text(text[:text.index("[[cache.tiers]]")], "g.toml")
    assert not [f for f in run_rules(no_cpu_tier) if f.rule_id == "cache-extra-shadows-key"]


def test_kv_transfer_configs_the_recipe_cannot_express_are_fine():
    producer = ("""extra_args = ['--kv-transfer-config', '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_producer","""
                """"kv_connector_extra_config":{"lmcache_rpc_port":"producer1"}}']""")
    assert findings(serve=producer) == []
    multiprocess = """extra_args = ['--kv-transfer-config', '{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both"}']"""
    assert findings(serve=multiprocess, enabled="false") == []
    # ... but another connector replacing the one stackctl writes for an enabled cache is reported
    assert [f.rule_id for f in findings(serve=multiprocess)] == ["extra-args-shadow-flag"]


def test_cache_extra_keys_without_a_recipe_key_are_fine():
    assert findings(cache='extra = { remote_url = "lm://cache-server:65432", remote_serde = "cachegen", '
                          'blocking_timeout_secs = 10 }') == []


def test_validate_cli_reports_the_shadow_at_its_line(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(BASE.format(serve='extra_args = ["--port", "9000"]', cache="", enabled="true"))
    result = run_cli("validate", str(path))
    assert result.returncode == 1
    line = next(line for line in result.stdout.splitlines() if "extra-args-shadow-flag" in line)
    assert line.startswith(f"{path}:9:") and "serve.port" in line
