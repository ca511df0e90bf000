"""The LMCache config: reading it (an LMCache YAML file, as LMCache reads it, with limits on its size and on YAML
aliases) and mapping LMCache's settings to the recipe's cache section and tiers, the inverse of
stackspec.lmcache_config. Keys without a recipe field go to cache.extra; credentials are never copied.

The YAML is read by yaml_input.load_yaml (size and alias limits)."""

from __future__ import annotations

import math
from typing import Any

from stackctl import layout
from stackctl.errors import StackctlError
from stackctl.importer.credentials import refer_lmcache_secrets
from stackctl.importer.draft import Draft, drop_nulls, fits
from stackctl.importer.launch import Launch
from stackctl.importer.yaml_input import load_yaml
from stackctl.knowledge.kinds import kind_of_url, offload_engine, tier_kind
from stackctl.recipe import model
from stackctl.storage.registry import storage_of_kind
from stackctl.unresolved import runtime_reference

# -- the reader ----------------------------------------------------------------------------------------------------

def read_lmcache_yaml(text: str, source: str = "LMCache config") -> dict:
    """An LMCache config file as a dict, read as LMCache reads it (PyYAML's safe_load)."""
    data = load_yaml(text, source)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise StackctlError(f"{source}: must be a mapping of LMCache keys")
    return data

# -- LMCache settings -> the recipe's cache section ----------------------------------------------------------------

def import_cache(draft: Draft, launch: Launch, yaml_config: dict | None, env_config: dict, overrides: dict,
                 yaml_given: bool) -> None:
    """LMCache settings: the YAML, then LMCACHE_* variables, then kv_connector_extra_config (LMCache's order)."""
    config = dict(yaml_config or {})
    env_config = dict(env_config)
    files = {key: env_config.pop(f"__{key}__", None) for key in ("credentials_file", "ca_file")}
    key_env = {name: env_config.pop(f"__{name}__", None) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    config.update(env_config)
    config.update(overrides)
    engine = offload_engine(draft.cache.get("offload") or "lmcache")
    if not engine.lmcache_in_server:  # importer/offload.py read the engine's own settings
        if config:
            draft.notes.append(f"LMCache settings found ({', '.join(sorted(map(str, config)))}) but cache.offload = "
                               f"{engine.name!r} runs no LMCache in the server: not imported")
        return
    enabled = bool(draft.cache.get("enabled"))
    if not enabled and not config:
        return
    if not enabled:
        draft.notes.append("LMCache settings found but the server has no LMCacheConnectorV1 --kv-transfer-config: "
                           "imported with cache.enabled = false")
        draft.cache.set("enabled", False)
    # Where the tiers are (remote_url, local_disk, gds_path) stays, with its placeholder, for validate to report
    # (unresolved-value) and the user to fill in; any other run-time value is left at LMCache's default.
    run_time = [k for k, v in config.items() if runtime_reference(v) and k not in ("remote_url", "local_disk",
                                                                                    "gds_path")]
    for key in run_time:
        draft.notes.append(f"LMCache {key}={config.pop(key)}: known only when the old launch ran; left at LMCache's "
                           "default: set it yourself")
    if "max_local_disk_size" in run_time and "local_disk" in config:
        draft.notes.append(f"LMCache local_disk {config.pop('local_disk')} has no size the import can know: not "
                           "imported: add a disk tier (kind = \"disk\", path, size_gb)")
    tp = draft.model.get("tensor_parallel", 1)
    extra: dict = {}
    if "chunk_size" in config:
        chunk = config.pop("chunk_size")
        if isinstance(chunk, str) and chunk.strip().isdigit():
            chunk = int(chunk)
        if isinstance(chunk, int) and not isinstance(chunk, bool) and fits(model.Cache, "chunk_size", chunk):
            draft.cache.set("chunk_size", chunk)
        else:
            extra["chunk_size"] = chunk
    _cpu_tier(draft, config, tp, extra)
    _disk_tier(draft, launch, config, tp, extra)
    _remote_tier(draft, launch, config, extra, files, key_env)
    for key, field in (("save_decode_cache", "save_decode_cache"), ("use_layerwise", "use_layerwise"),
                       ("enable_async_loading", "async_loading")):
        if key in config:
            value = _to_bool(config.pop(key))
            if value and key == "use_layerwise" and not draft.cache.get("use_layerwise"):
                _layerwise_untold(draft)
            elif value:
                draft.cache.set(field, True)
    for key, value in config.items():
        if value is not None:
            extra[key] = value
    refer_lmcache_secrets(draft, extra)
    dropped = drop_nulls(extra)
    if dropped:
        draft.notes.append(f"LMCache keys with null values dropped: {', '.join(dropped)}")
    if extra:
        draft.cache.set("extra", extra, "LMCache keys without a recipe field, written to lmcache.yaml as given")
    if not yaml_given and enabled and not env_config and not overrides:
        draft.cache.comment("", "No LMCache config was given (--lmcache-config): LMCache's defaults are imported "
                                "(CPU tier of 5 GiB per rank, chunk 256).")


def _layerwise_untold(draft: Draft) -> None:
    """LMCache set to layer-wise without vLLM being told (no use_layerwise in kv_connector_extra_config): kept as
    the launch had it, for `stackctl validate` to report (cache.use_layerwise would tell vLLM, and so would correct
    the old launch without a word)."""
    draft.serve.setdefault("env", {})["LMCACHE_USE_LAYERWISE"] = "True"
    draft.notes.append("LMCache use_layerwise is on but vLLM's --kv-transfer-config does not say so: kept as "
                       "LMCACHE_USE_LAYERWISE=True, as the old launch ran it (cache.use_layerwise = true tells both)")


def _to_bool(value) -> bool:
    """LMCache's reading of a boolean: true only for true / 1."""
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1")


def _to_number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _total_size(per_rank: float, tp: int) -> float:
    """Recipe size (all ranks) from LMCache's per-rank size; undo stackctl's rounding to 3 decimals."""
    total = per_rank * tp
    nearest = round(total)
    return float(nearest) if nearest and abs(total - nearest) <= 0.0005 * tp else round(total, 3)


def _cpu_tier(draft: Draft, config: dict, tp: int, extra: dict) -> None:
    if not draft.cache.get("enabled") and "local_cpu" not in config and "max_local_cpu_size" not in config:
        return  # LMCache is not attached: its default CPU tier is no setting of the old launch
    local_cpu = _to_bool(config.pop("local_cpu", True))
    size = config.pop("max_local_cpu_size", None)
    defaulted = size is None
    if not local_cpu:
        if size is not None:  # without a CPU tier it still sizes LMCache's CPU buffer (5 GiB per rank by default)
            extra["max_local_cpu_size"] = size
        return
    size = 5.0 if size is None else _to_number(size)
    if size is None or size <= 0:
        extra["max_local_cpu_size"] = size
        draft.notes.append("LMCache local_cpu with no usable max_local_cpu_size: no CPU tier imported")
        return
    total = _total_size(size, tp)
    note = f"LMCache max_local_cpu_size {size:g} GiB per rank x tensor_parallel {tp}"
    draft.tiers.append(({"kind": "cpu", "size_gb": total}, [note + (" (LMCache's default)" if defaulted else "")]))


def _disk_tier(draft: Draft, launch: Launch, config: dict, tp: int, extra: dict) -> None:
    disk = config.pop("local_disk", None)
    size = config.pop("max_local_disk_size", None)
    if not disk:
        if size is not None:
            extra["max_local_disk_size"] = size
        return
    path = str(disk)
    path = path.removeprefix("file://")
    path = path.rstrip("/") or "/"
    number = _to_number(size) if size is not None else 0.0
    if not path.startswith("/") and not runtime_reference(path):
        draft.notes.append(f"LMCache local_disk {disk!r} (max_local_disk_size {size}) is not an absolute path: LMCache "
                           "wrote it inside the container, relative to the server's working directory, and lost it "
                           "with the container; not imported: add a disk tier (kind = \"disk\", path, size_gb)")
        return
    if not number or number <= 0:
        extra["local_disk"], extra["max_local_disk_size"] = disk, size
        draft.notes.append("LMCache local_disk with max_local_disk_size 0: LMCache never used that disk; kept in "
                           "cache.extra")
        return
    host_path, mapped = launch.host_path(path)
    notes = [f"LMCache max_local_disk_size {number:g} GiB per rank x tensor_parallel {tp}"]
    if mapped:
        notes.append(f"host path of the container's {path} (docker volume)")
    notes += _todo(host_path)
    draft.tiers.append(({"kind": "disk", "path": host_path, "size_gb": _total_size(number, tp)}, notes))


def _fs_tier(draft: Draft, launch: Launch, url: str) -> dict | None:
    from urllib.parse import urlparse

    path = urlparse(url).path.rstrip("/") or "/"
    if not (path.startswith("/") and fits(model.Tier, "path", path)):
        return None
    host_path, mapped = launch.host_path(path)
    tier = {"kind": "fs", "path": host_path}
    draft.tiers.append((tier, ([f"host path of the container's {path}"] if mapped else []) + _todo(host_path)))
    return tier


def _url_tier(draft: Draft, kind: str, url: str) -> dict | None:
    """A remote tier that is its URL alone (the kind LMCache reads the URL's scheme as); None if the URL does not
    fit the recipe's url field."""
    if not fits(model.Tier, "url", url):
        return None
    tier = {"kind": kind, "url": url}
    draft.tiers.append((tier, []))
    return tier


def _todo(path: str) -> list[str]:
    """A comment for a tier path the old launch's documentation left for the reader (`/path/to/nvme`)."""
    reference = runtime_reference(path)
    return [f"TODO: {reference} is a placeholder or known only at run time: write the directory (until then "
            "`stackctl validate` reports unresolved-value and nothing renders)"] if reference else []


def _remote_tier(draft: Draft, launch: Launch, config: dict, extra: dict, files: dict, key_env: dict) -> None:
    remote = config.pop("remote_url", None)
    extra_config = config.pop("extra_config", None)
    extra_config = dict(extra_config) if isinstance(extra_config, dict) else extra_config
    plugins = config.get("remote_storage_plugins")
    if plugins == ["fs"] and isinstance(extra_config, dict) and "remote_storage_plugin.fs.base_path" in extra_config:
        # The plugin form of an fs tier (what stackctl writes): the same as the legacy fs:// URL. It may sit beside
        # an S3 remote_url (two remote backends).
        config.pop("remote_storage_plugins")
        fs_url = "fs://" + str(extra_config.pop("remote_storage_plugin.fs.base_path"))
        if remote is None:
            remote = fs_url
        else:
            _fs_tier(draft, launch, fs_url)
            if config.get("remote_serde") == "naive" and not str(remote).startswith("s3://"):
                config.pop("remote_serde")
    tier: dict[str, Any] | None = None
    url_kind = kind_of_url(remote) if isinstance(remote, str) else None
    storage = storage_of_kind(url_kind) if url_kind is not None else None
    # The storage of the kind LMCache reads the URL as decides the tier's form: one reached with credentials (an S3
    # bucket) takes its region, TLS, keys and files from the old config; one in a directory takes the URL's path;
    # any other is its URL alone.
    if storage is not None and storage.key_env and isinstance(extra_config, (dict, type(None))):
        extra_config = extra_config or {}
        tier = {"kind": "s3", "url": remote}
        notes = []
        region = extra_config.pop("s3_region", None)
        if region is None:
            region = "us-east-1"
            notes.append("TODO: LMCache's S3 connector requires s3_region and the old config had none; set the "
                         "bucket's region")
        tier["region"] = str(region)
        if _to_bool(extra_config.pop("disable_tls", False)):
            tier["disable_tls"] = True
        inline_keys = [k for k in ("aws_access_key_id", "aws_secret_access_key") if k in extra_config]
        if len(inline_keys) == 2 and not (key_env["AWS_ACCESS_KEY_ID"] and key_env["AWS_SECRET_ACCESS_KEY"]):
            # Keys written into the YAML: never copied; the tier names the standard variables to export instead.
            for key in inline_keys:
                extra_config.pop(key)
            tier["access_key_env"], tier["secret_key_env"] = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"
            notes.append("the old config had the S3 keys inline (values NOT copied): export AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY on the host")
        elif key_env["AWS_ACCESS_KEY_ID"] and key_env["AWS_SECRET_ACCESS_KEY"]:
            tier["access_key_env"], tier["secret_key_env"] = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"
            notes.append("credentials: the host's AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY at run time (values not "
                         "copied)")
            draft.serve.get("secret_env", {}).pop("AWS_ACCESS_KEY_ID", None)
            draft.serve.get("secret_env", {}).pop("AWS_SECRET_ACCESS_KEY", None)
            if not draft.serve.get("secret_env", True):
                del draft.serve["secret_env"]
        tier.update({key: path for key, path in files.items() if path})
        if not all(fits(model.Tier, key, value) for key, value in tier.items()):
            tier = None
        else:
            draft.tiers.append((tier, notes))
    elif url_kind is not None and storage is not None and storage.directory_in_url:
        tier = _fs_tier(draft, launch, remote)
    elif url_kind is not None and storage is not None and not storage.key_env:
        tier = _url_tier(draft, url_kind.name, remote)
    if tier is not None:
        if config.get("remote_serde") == "naive":
            config.pop("remote_serde")  # stackctl writes it for every remote tier
    elif remote is not None:
        extra["remote_url"] = remote
    if extra_config:
        extra["extra_config"] = extra_config
    if tier is None or not storage_of_kind(tier_kind(tier["kind"])).mounted_files:  # no tier mounts the files
        for key, variable in (("credentials_file", "AWS_SHARED_CREDENTIALS_FILE"), ("ca_file", layout.S3_CA_ENV)):
            if files[key]:
                draft.notes.append(f"{variable} is set but there is no S3 tier; not imported")
