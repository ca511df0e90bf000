"""Which vLLM KV connectors are LMCache's, by the module vLLM loads them from (vLLM facts `kv_connector_modules`:
`register_connector(name, module_path, class)` in vllm/distributed/kv_transfer/kv_connector/factory.py), plus the
names vLLM no longer registers (compat.toml `removed_kv_connector`), with the connector that replaced each.
"""

from __future__ import annotations

import functools

from stackctl.knowledge import compat, facts

# The connector that runs LMCache inside vLLM's own processes (the one stackctl configures).
IN_PROCESS = "LMCacheConnectorV1"


@functools.lru_cache(maxsize=1)
def lmcache_connectors() -> dict[str, str]:
    """Every LMCache connector name any vLLM release registered (or compat.toml names), with its module."""
    found: dict[str, str] = {}
    for version in facts.versions("vllm"):
        for name, module in (facts.load("vllm", version).get("kv_connector_modules") or {}).items():
            if ".lmcache" in module:
                found.setdefault(name, module)
    for entry in compat.table().get("removed_kv_connector", []):
        if ".lmcache" in entry["module"]:
            found.setdefault(entry["name"], entry["module"])
    return found


def is_lmcache(name: object) -> bool:
    return isinstance(name, str) and name in lmcache_connectors()


def in_vllm(name: object) -> bool:
    """Whether an LMCache connector runs LMCache inside vLLM's processes, where the chunk keys are computed (not
    LMCacheMPConnector, which hands the work to a separate `lmcache server`: its module is lmcache_mp_connector)."""
    return is_lmcache(name) and "lmcache_mp" not in lmcache_connectors()[str(name)]


# LMCache's own modules that define a vLLM connector running LMCache in vLLM's process, loaded through
# kv_connector_module_path (LMCache 0.5.6 lmcache/integration/vllm/lmcache_connector_v1.py, and
# lmcache_connector_v1_085.py:17,28: LMCacheConnectorV1Dynamic over the same LMCacheConnectorV1Impl). Its
# lmcache_mp_connector.py is the multi-process one, which this prefix leaves out.
IN_PROCESS_MODULES = "lmcache.integration.vllm.lmcache_connector_v1"


def config_runs_lmcache_in_vllm(config: dict) -> bool:
    """Whether a --kv-transfer-config runs LMCache inside vLLM: an LMCache connector vLLM registers (in_vllm), or a
    connector class loaded from one of LMCache's own in-process connector modules."""
    module = str(config.get("kv_connector_module_path") or "")
    return in_vllm(config.get("kv_connector")) or module == IN_PROCESS_MODULES \
        or module.startswith(IN_PROCESS_MODULES + "_")


def removed(name: str) -> dict | None:
    """compat.toml's entry for a connector name vLLM no longer registers."""
    return next((e for e in compat.table().get("removed_kv_connector", []) if e["name"] == name), None)


def replacement(name: str, registered: dict) -> str | None:
    """What to write instead of an LMCache connector name RELEASE's registry (`registered`) lacks, and why."""
    entry = removed(name)
    if entry and entry["replacement"] in registered:
        return (f"{entry['name']} was vLLM's V0 LMCache connector, last registered in vLLM {entry['last']} "
                f"({entry['source']}): use {entry['replacement']}, its direct replacement")
    if is_lmcache(name) and IN_PROCESS in registered:
        seen = [v for v, _ in facts.history("vllm", "kv_connector_modules", name)]
        since = f" (first registered in vLLM {seen[0]})" if seen else ""
        return (f"{name} is an LMCache connector this release does not register{since}: for LMCache inside vLLM "
                f"use {IN_PROCESS}")
    return None
