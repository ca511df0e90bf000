"""Whether a launch's --kv-transfer-config for one of vLLM's own offload connectors is what stackctl's offload engine
writes (stackctl/knowledge/kinds.py: vllm-native, vllm-simple). Only then does import turn it into cache.offload and
tiers; anything more (another spec, a key without a recipe key, a size left to a default) stays verbatim in
serve.extra_args, where it still reaches the server as the launch wrote it, and validate judges it against the
release (stackctl/rules/offload_rules.py)."""

from __future__ import annotations

# kv_connector_extra_config keys each engine writes from the recipe (kinds._native_flags: --kv-offloading-size is
# the OffloadingConnector's CPU spec with cpu_bytes_to_use, vLLM 0.32 vllm/config/vllm.py:1115-1123;
# kinds._simple_config).
ENGINE_KEYS = {
    "vllm-native": {"cpu_bytes_to_use", "spec_name"},
    "vllm-simple": {"cpu_bytes_to_use", "kv_offload_backend", "disk_path", "disk_capacity_bytes"},
}
TOP_LEVEL = {"kv_connector", "kv_role", "kv_connector_extra_config"}
# The SimpleCPUOffloadConnector's kv_offload_backend values (vLLM 0.33.0 simple_cpu_offload_connector.py:130) and the
# tier the recipe gives each beside its cpu tier.
SIMPLE_BACKEND_TIERS = {"cpu": None, "disk": "disk"}


def beyond_engine(engine_name: str, config: dict) -> list[str]:
    """What of CONFIG the engine ENGINE_NAME cannot write (empty when the recipe can say all of it, and for an
    engine that is not one of vLLM's own: its importer reads its config itself)."""
    if engine_name not in ENGINE_KEYS:
        return []
    extra = config.get("kv_connector_extra_config") or {}
    if not isinstance(extra, dict):
        return ["kv_connector_extra_config (not an object)"]
    beyond = [key for key in config if key not in TOP_LEVEL]
    if config.get("kv_role", "kv_both") != "kv_both":
        beyond.append(f"kv_role {config['kv_role']}")
    beyond += [key for key in extra if key not in ENGINE_KEYS[engine_name]]
    if engine_name == "vllm-native":
        if extra.get("spec_name", "CPUOffloadingSpec") != "CPUOffloadingSpec":
            beyond.append(f"spec_name {extra['spec_name']}")
        if not _positive(extra.get("cpu_bytes_to_use")):
            beyond.append("no cpu_bytes_to_use (the spec's size: stackctl would have to invent one)")
    if engine_name == "vllm-simple":
        backend = extra.get("kv_offload_backend", "cpu")
        if backend not in SIMPLE_BACKEND_TIERS:
            beyond.append(f"kv_offload_backend {backend}")
        elif backend == "disk" and not extra.get("disk_path"):
            beyond.append("a disk backend without disk_path")
    return beyond


def _positive(value) -> bool:
    try:
        return float(value) > 0
    except (TypeError, ValueError):
        return False
