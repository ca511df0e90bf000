"""The vocabulary stackctl writes a stack in, each entry with the recipe key behind it: the vLLM flags serve_args
writes, the LMCache keys lmcache_config writes (bundle/stackspec.py), and the KV connector configs. Rules use it to
refuse a free-form key that would override one of these behind their back; the importer reads launches back into
recipe keys through it. Tables and pure functions of a config only: nothing here reads a recipe."""

from __future__ import annotations

from stackctl.knowledge.kinds import TIER_KIND_RECORDS

KV_CONNECTOR = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}

MULTI_CONNECTOR = "MultiConnector"


def kv_transfer_says_only_recipe_keys(config) -> bool:
    """Whether a --kv-transfer-config says no more than a recipe can: LMCache's V1 connector in the kv_both role, its
    extra config holding only `lmcache.*` overrides and `use_layerwise`. The importer maps such a config to recipe
    keys, and the rules ask for those keys; any other config (another connector, a producer/consumer role, connector
    settings of its own) has no recipe key and stays in serve.extra_args."""
    if not isinstance(config, dict) or config.get("kv_connector") != KV_CONNECTOR["kv_connector"]:
        return False
    rest = {key: value for key, value in config.items() if key not in ("kv_connector", "kv_connector_extra_config")}
    extra = config.get("kv_connector_extra_config") or {}
    role_only = set(rest) <= {"kv_role"} and rest.get("kv_role", KV_CONNECTOR["kv_role"]) == KV_CONNECTOR["kv_role"]
    return role_only and isinstance(extra, dict) and all(
        key.startswith("lmcache.") or (key == "use_layerwise" and isinstance(value, bool))
        for key, value in extra.items())


# Every flag serve_args writes, with the recipe key that sets it (a test keeps this in step with serve_args). A flag
# repeated in serve.extra_args would override the recipe behind the rules' back (the last one wins in vLLM).
SERVE_FLAG_KEYS = {
    "--model": "model.path", "--served-model-name": "model.served_name", "--host": "serve.host",
    "--port": "serve.port", "--tensor-parallel-size": "model.tensor_parallel", "-tp": "model.tensor_parallel",
    "--dtype": "model.dtype", "--kv-cache-dtype": "model.kv_cache_dtype", "--max-model-len": "model.max_model_len",
    "--trust-remote-code": "model.trust_remote_code", "--gpu-memory-utilization": "serve.gpu_memory_utilization",
    "--max-num-batched-tokens": "serve.max_num_batched_tokens", "--max-num-seqs": "serve.max_num_seqs",
    "--block-size": "serve.block_size", "--enable-prefix-caching": "serve.prefix_caching",
    "--no-enable-prefix-caching": "serve.prefix_caching", "--prefix-caching-hash-algo": "serve.prefix_caching_hash_algo",
    "--async-scheduling": "serve.async_scheduling", "--no-async-scheduling": "serve.async_scheduling",
    "--enforce-eager": "serve.enforce_eager", "--compilation-config": "serve.compilation_config",
    "-cc": "serve.compilation_config", "--kv-transfer-config": "cache.enabled",
    "--kv-offloading-backend": "cache.offload", "--kv-offloading-size": "cache.offload",
    "--enable-auto-tool-choice": "model.tool_call_parser", "--tool-call-parser": "model.tool_call_parser",
    "--reasoning-parser": "model.reasoning_parser",
}

def _tier_key_sources(extra_config: bool) -> dict[str, str]:
    """The LMCache keys (or extra_config keys) the tier kinds are written as, each with the recipe key that sets it
    (the records' lmcache_from); a key two kinds share names both."""
    sources: dict[str, str] = {}
    for kind in TIER_KIND_RECORDS:
        for key in kind.lmcache_extra_keys if extra_config else kind.lmcache_keys:
            field = kind.lmcache_from[key]
            said = f"the {kind.name} tier's {field}" if field else f'a [[cache.tiers]] with kind = "{kind.name}"'
            sources[key] = f"{sources[key]} or {said}" if key in sources else said
    return sources


# Every key lmcache_config writes, with the recipe key that sets it (a test keeps this in step with lmcache_config).
# remote_serde is left out: stackctl writes "naive" for its remote tiers, and another serde is a legitimate choice.
LMCACHE_KEYS = {
    "chunk_size": "cache.chunk_size", **_tier_key_sources(extra_config=False),
    "save_decode_cache": "cache.save_decode_cache", "use_layerwise": "cache.use_layerwise",
    "enable_async_loading": "cache.async_loading",
}
LMCACHE_EXTRA_CONFIG_KEYS = _tier_key_sources(extra_config=True)
