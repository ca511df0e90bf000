"""The server's environment -> recipe keys, serve.env and serve.secret_env references (values of secrets are never
copied); LMCACHE_* and AWS_* variables are handed on to the LMCache mapping."""

from __future__ import annotations

import re

from stackctl.importer.credentials import is_secret
from stackctl.importer.draft import Draft
from stackctl.importer.launch import Launch
from stackctl.importer.values import CONTROL, fits
from stackctl.recipe import model

# LMCache reads LMCACHE_<KEY> variables over its YAML; these keys have recipe fields.
_LMCACHE_KEYS = ("chunk_size", "local_cpu", "max_local_cpu_size", "local_disk", "max_local_disk_size", "remote_url",
                 "remote_storage_plugins", "remote_serde", "save_decode_cache", "use_layerwise",
                 "enable_async_loading")


def import_env(draft: Draft, launch: Launch, platform: str, engine: str) -> dict:
    """Split the server environment into recipe keys, serve.env and secret references; return LMCACHE_* overrides
    (plus `__credentials_file__` and `__AWS_..._KEY__` markers for the S3 tier)."""
    env, secrets, lmcache = {}, {}, {}
    for key, value in launch.env.items():
        if key == "LMCACHE_CONFIG_FILE":
            pass  # stackctl writes lmcache.yaml from the recipe; the importer follows the file (importer/__init__)
        elif key == "PYTHONHASHSEED" and re.fullmatch(r"\d+", value) and fits(model.Cache, "hash_seed", int(value)):
            draft.set("cache", "hash_seed", int(value), "from PYTHONHASHSEED")
        elif key == "VLLM_SERVER_DEV_MODE" and value == "1":
            draft.set("serve", "dev_endpoints", True, "from VLLM_SERVER_DEV_MODE=1")
        elif key == "ATOM_DISABLE_VLLM_PLUGIN" and value == "1" and engine == "vllm" and platform == "rocm":
            pass  # stackctl sets it for every plain-vLLM stack on rocm
        elif key == "AWS_SHARED_CREDENTIALS_FILE":
            lmcache["__credentials_file__"] = launch.host_path(value)[0]
        elif key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            lmcache[f"__{key}__"] = key
            secrets[key] = key
        elif key.startswith("LMCACHE_") and key[8:].lower() in _LMCACHE_KEYS:
            lmcache[key[8:].lower()] = value
        elif is_secret(key, value):
            secrets[key] = key
        elif CONTROL.search(key + value) or not key:
            draft.notes.append(f"{key}: a value with control characters (newlines) was dropped; set it by hand")
        else:
            env[key] = value
    for key in launch.passthrough:
        secrets[key] = key
    if env:
        draft.set("serve", "env", env)
    if secrets:
        draft.values["serve"].setdefault("secret_env", {}).update(secrets)
    return lmcache


def secret_comment(draft: Draft) -> None:
    """Name the variables in serve.secret_env whose values were not copied."""
    secrets = draft.get("serve", "secret_env")
    if secrets:
        draft.comment("serve", "secret_env", f"Values not copied: {', '.join(sorted(secrets))} (secrets, or passed "
                                             "through from the host). Export them where stackctl runs; they reach "
                                             "the container at run time only.")
