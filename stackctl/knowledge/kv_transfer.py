"""vLLM's KVTransferConfig as data, and a reader that rejects what vLLM rejects.

Fields and types from vLLM 0.27.1 vllm/config/kv_transfer.py:22-70 (a pydantic dataclass, extra="forbid"); values are
judged the way pydantic's lax mode judges JSON input, so a numeric string for an integer passes (pydantic reads it)
and a fractional one does not.
"""

from __future__ import annotations

import json
import re

# field -> kind: "str?" (string or null), "str", "int", "int?", "float", "bool", "dict", or a tuple of allowed words.
FIELDS = {
    "kv_connector": "str?", "engine_id": "str?", "kv_buffer_device": "str", "kv_buffer_size": "float",
    "kv_role": ("kv_producer", "kv_consumer", "kv_both", None), "kv_rank": "int?", "kv_parallel_size": "int",
    "kv_ip": "str", "kv_port": "int", "kv_connector_extra_config": "dict", "kv_connector_module_path": "str?",
    "enable_permute_local_kv": "bool", "kv_load_failure_policy": ("recompute", "fail"),
}
_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no", "on", "off", "t", "f", "y", "n"}

# ATOM's own LMCache offload connector (its own server's KV connector factory, not vLLM's: ROCm/ATOM
# atom/kv_transfer/offload/__init__.py:14-22, with kv_role "offload"). Under vLLM, where stackctl runs ATOM as a
# plugin, the same LMCache tiers come through vLLM's LMCacheConnectorV1 (atom/kv_transfer/offload/README.md:21-25).
ATOM_LMCACHE_CONNECTORS = ("lmcache_offload", "LMCacheOffloadConnector")


def multi_connector_children(config: dict) -> list[dict]:
    """The connectors a MultiConnector's config lists (kv_connector_extra_config.connectors, each a connector's own
    config); empty for any other config."""
    extra = config.get("kv_connector_extra_config")
    if config.get("kv_connector") != "MultiConnector" or not isinstance(extra, dict):
        return []
    children = extra.get("connectors")
    return [child for child in children if isinstance(child, dict)] if isinstance(children, list) else []


def connector_configs(recipe) -> list[tuple[tuple, dict]]:
    """(key path, connector config) of each --kv-transfer-config in serve.extra_args, of each connector a
    MultiConnector there lists in its kv_connector_extra_config.connectors, and of each entry of
    cache.multi_connector (the one standing for stackctl's own connector holds no settings to judge)."""
    from stackctl.knowledge.serve_flags import json_flag_values

    found: list[tuple[tuple, dict]] = []
    for index, config in json_flag_values(recipe.serve.extra_args, ("--kv-transfer-config",)):
        path = ("serve", "extra_args", index)
        found += [(path, config)] + [(path, child) for child in multi_connector_children(config)]
    found += [(("cache", "multi_connector", index), entry) for index, entry in enumerate(recipe.cache.multi_connector)]
    return found


def kv_transfer_problems(text: str) -> list[str]:
    """What vLLM would reject in one --kv-transfer-config JSON value (empty when it would accept it)."""
    try:
        config = json.loads(text)
    except ValueError as exc:
        return [f"not valid JSON ({exc})"]
    if not isinstance(config, dict):
        return ["must be a JSON object"]
    problems = []
    for key, value in config.items():
        kind = FIELDS.get(key)
        if kind is None:
            problems.append(f"unknown key {key!r} (vLLM forbids extra keys)")
        elif not _accepts(kind, value):
            problems.append(f"{key} = {json.dumps(value)} is not a valid {_describe(kind)}")
    return problems


def _accepts(kind, value) -> bool:
    if isinstance(kind, tuple):
        return value in kind
    if value is None:
        return kind.endswith("?")
    kind = kind.rstrip("?")
    if kind == "str":
        return isinstance(value, str)
    if kind == "dict":
        return isinstance(value, dict)
    if kind == "bool":
        return isinstance(value, bool) or value in (0, 1) or (isinstance(value, str) and value.lower() in _BOOL_WORDS)
    if kind == "int":
        if isinstance(value, bool) or isinstance(value, int):
            return True
        if isinstance(value, float):
            return value.is_integer()
        # pydantic reads "2.0" and "1_000" as integers too (int() digit grouping, an integral fraction).
        return isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+(?:_\d+)*(?:\.0+)?\s*", value) is not None
    if kind == "float":
        if isinstance(value, (int, float)):
            return True
        try:
            float(value)
        except (TypeError, ValueError):
            return False
        return isinstance(value, str)
    return False


def _describe(kind) -> str:
    if isinstance(kind, tuple):
        return "choice (" + ", ".join("null" if k is None else k for k in kind) + ")"
    return {"str?": "string or null", "int?": "integer or null", "dict": "object"}.get(kind, kind.rstrip("?"))
