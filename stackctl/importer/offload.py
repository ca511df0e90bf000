"""An offload engine other than LMCache in the server, read from a launch: vLLM's --kv-offloading-* flags, a
--kv-transfer-config naming the SimpleCPUOffloadConnector or LMCacheMPConnector, and the `lmcache server` the
script starts beside vLLM. The inverse of the records' `launch` (stackctl/knowledge/kinds.py): cache.offload, the
tiers and the LMCache server's ports. What stackctl writes its own way (the LMCache server's other flags, connector
settings without a recipe key) is named in a note, never dropped without one."""

from __future__ import annotations

import json

from stackctl.importer.draft import Draft, fits
from stackctl.importer.flags import ServerFlags
from stackctl.importer.launch import Launch
from stackctl.importer.lmcache_server import RENAMED_FLAGS
from stackctl.knowledge.kinds import engine_selected_by, engine_with_connector
from stackctl.recipe import model

GiB = 1 << 30
# `lmcache server` flags stackctl writes from the recipe (kinds._lmcache_mp), and the key each one comes from.
SERVER_KEYS = {"--port": "server_port", "--http-port": "server_http_port", "--chunk-size": "chunk_size"}
SERVER_WRITTEN = {"--host", "--http-host", "--eviction-policy", "--supported-transfer-mode", "--l1-size-gb",
                  "--l2-adapter", *SERVER_KEYS}


def import_offload(draft: Draft, launch: Launch, flags: ServerFlags) -> None:
    """cache.offload and its tiers from the launch; notes for what does not map."""
    engine = _engine(draft, launch, flags)
    if engine is None:
        if launch.lmcache_server is not None:
            draft.notes.append(f"the script starts `lmcache server {' '.join(launch.lmcache_server)}`"
                               + (", which the LMCacheMPConnector inside the MultiConnector kept in serve.extra_args "
                                  "reaches; stackctl starts no LMCache server for it: start one beside the stack"
                                  if _in_multi_connector(flags, "LMCacheMPConnector") else
                                  " but vLLM does not reach it (no LMCacheMPConnector): not imported"))
        return
    draft.cache.set("enabled", True)
    draft.cache.set("offload", engine.name, engine.summary)
    if engine.lmcache_server:
        _lmcache_server(draft, launch, flags)
    elif launch.lmcache_server is not None:
        draft.notes.append(f"the script starts `lmcache server` but vLLM offloads through {engine.connector}: the "
                           "LMCache server is not imported")


def _engine(draft: Draft, launch: Launch, flags: ServerFlags):
    size_tokens, size = flags.offloading.get("--kv-offloading-size", ([], None))
    backend_tokens, backend = flags.offloading.get("--kv-offloading-backend", ([], None))
    transfer = flags.offload_transfer
    if size is not None:
        engine = engine_selected_by(backend or "native", launch.env)
        if engine is None:  # flags.finish_offloading kept them in serve.extra_args
            return None
        if engine.lmcache_server:  # vLLM leaves the size to the LMCache server (vllm/config/vllm.py:1124-1127)
            draft.notes.append(f"--kv-offloading-size {size} with backend {backend}: vLLM ignores it (the LMCache "
                               "server's --l1-size-gb sizes the cache)")
        else:
            _cpu_tier(draft, _number(size), f"--kv-offloading-size {size}")
        if transfer is not None:
            draft.notes.append("--kv-transfer-config given beside --kv-offloading-size: vLLM replaces its connector; "
                               "not imported")
        return engine
    if backend is not None:
        draft.notes.append(f"--kv-offloading-backend {backend} without --kv-offloading-size: vLLM offloads nothing; "
                           "not imported")
    if transfer is None:
        return None
    config, _ = transfer
    engine = engine_with_connector(str(config.get("kv_connector")))
    extra = config.get("kv_connector_extra_config") or {}
    if engine is not None and not engine.lmcache_server:
        _vllm_connector_tiers(draft, engine, extra if isinstance(extra, dict) else {})
    return engine


def _in_multi_connector(flags: ServerFlags, connector: str) -> bool:
    """Whether a MultiConnector kept verbatim in serve.extra_args lists CONNECTOR."""
    from stackctl.knowledge.kv_transfer import multi_connector_children
    from stackctl.knowledge.serve_flags import json_flag_values

    return any(child.get("kv_connector") == connector
               for _, config in json_flag_values(flags.extra, ("--kv-transfer-config",))
               for child in multi_connector_children(config))


def _vllm_connector_tiers(draft: Draft, engine, extra: dict) -> None:
    """vLLM's own connectors, in the form stackctl writes (flags.py kept any other verbatim: offload_config.py):
    cpu_bytes_to_use (server-wide; the OffloadingConnector's CPU spec requires it, the SimpleCPUOffloadConnector
    defaults to 8 GiB, vLLM 0.33.0 simple_cpu_offload_connector.py:101), and the SimpleCPUOffloadConnector's disk
    backend (:130-143, 100 GiB by default)."""
    size = _number(extra.get("cpu_bytes_to_use", 8 * GiB))
    default = "" if "cpu_bytes_to_use" in extra else " (not set: its default, 8 GiB)"
    _cpu_tier(draft, None if size is None else size / GiB, f"cpu_bytes_to_use of the {engine.connector}{default}")
    if extra.get("kv_offload_backend") == "disk":
        disk_size = _number(extra.get("disk_capacity_bytes", 100 * GiB)) or 0
        draft.tiers.append(({"kind": "disk", "path": extra["disk_path"], "size_gb": round(disk_size / GiB, 3)},
                            [f"the {engine.connector}'s disk backend (disk_path, disk_capacity_bytes)"]))


def _lmcache_server(draft: Draft, launch: Launch, flags: ServerFlags) -> None:
    """The LMCache server's address from the connector's extra config, its L1 and L2 from `lmcache server`."""
    transfer = flags.offload_transfer
    extra = (transfer[0].get("kv_connector_extra_config") or {}) if transfer else {}
    port = extra.get("lmcache.mp.port")
    if port is not None and fits(model.Cache, "server_port", _int(port)):
        draft.cache.set("server_port", _int(port))
    others = sorted(key for key in extra if key != "lmcache.mp.port") if isinstance(extra, dict) else []
    if others and transfer is not None:
        draft.notes.append(f"{transfer[0].get('kv_connector')} settings stackctl writes its own way or has no recipe "
                           f"key for: {', '.join(f'{key}={extra[key]}' for key in others)}: not imported (stackctl's "
                           "LMCache server runs beside vLLM, reached at its own address)")
    values = _server_flags(launch.lmcache_server or [])  # flags.py kept an engine whose server is not started
    for old, new in RENAMED_FLAGS.items():
        if old in values and new not in values:
            values[new] = values.pop(old)
            draft.notes.append(f"lmcache server {old} {values[new]}: an older LMCache's name of {new} (LMCache 0.5.6 "
                               f"reads only {new}); imported as the L1 size")
    for flag, key in SERVER_KEYS.items():
        value = values.get(flag)
        if value is not None and fits(model.Cache, key, _int(value)):
            if key == "server_port" and port is not None and _int(value) != _int(port):
                draft.notes.append(f"`lmcache server --port {value}` but vLLM connects to port {port}: imported "
                                   f"{value}")
            draft.cache.set(key, _int(value), f"lmcache server {flag} {value}")
    size = _number(values.get("--l1-size-gb"))
    _cpu_tier(draft, size, f"lmcache server --l1-size-gb {values.get('--l1-size-gb')}")
    for adapter in values.get("--l2-adapter", []):
        try:
            spec = json.loads(adapter)
        except ValueError:
            spec = None
        if isinstance(spec, dict) and spec.get("type") == "fs" and spec.get("base_path"):
            draft.tiers.append(({"kind": "fs", "path": spec["base_path"]}, [f"lmcache server --l2-adapter {adapter}"]))
        else:
            draft.notes.append(f"lmcache server --l2-adapter {adapter}: stackctl writes fs adapters only; not "
                               "imported")
    rest = [flag for flag in values if flag not in SERVER_WRITTEN]
    if rest:
        draft.notes.append(f"`lmcache server` flags stackctl does not write: {', '.join(rest)}: not imported")


def _server_flags(argv: list[str]) -> dict:
    """`lmcache server` argv as flag -> value (--l2-adapter: every value, in order)."""
    values: dict = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            i += 1
            continue
        name, eq, value = token.partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else ""
            i += 1 if value == "" else 2
        else:
            i += 1
        if name == "--l2-adapter":
            values.setdefault(name, []).append(value)
        else:
            values[name] = value
    return values


def _cpu_tier(draft: Draft, size_gb: float | None, why: str) -> None:
    if size_gb is None or size_gb <= 0:
        draft.notes.append(f"{why}: no usable size; add a cpu tier (kind = \"cpu\", size_gb) yourself")
        return
    draft.tiers.insert(0, ({"kind": "cpu", "size_gb": round(size_gb, 3)}, [why]))


def _number(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
