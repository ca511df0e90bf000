"""Filling the draft from a launch: the server flags (flags.py), then the environment (recipe keys, serve.env,
secret references), the LMCache settings (lmcache.py), the host section (NUMA, CPU pinning, shared memory) and the
stack section (name, platform and engine, base image and the vLLM version its tag names), in the order their
results depend on."""

from __future__ import annotations

import posixpath
import re

from stackctl import layout
from stackctl.errors import StackctlError
from stackctl.importer.atom_server import to_vllm
from stackctl.importer.credentials import is_secret, is_secret_name
from stackctl.importer.draft import CONTROL, Draft, fits
from stackctl.importer.flags import ServerFlags
from stackctl.importer.launch import Launch
from stackctl.importer.lmcache import import_cache
from stackctl.importer.offload import import_offload
from stackctl.importer.platform import ATOM_FORK_SWITCH, gds_note, import_image, platform_and_engine
from stackctl.knowledge.kinds import offload_engine, platform_named
from stackctl.knowledge.serving_engines import serving_engine
from stackctl.recipe import model
from stackctl.unresolved import runtime_reference


def build_draft(draft: Draft, launch: Launch, lmcache: dict | None, name: str | None, lmcache_given: bool) -> None:
    """Fill draft from the launch and its LMCache config (a StackctlError when the server names no model)."""
    if launch.kind == "atom server":
        launch.args, notes = to_vllm(launch.args)
        launch.notes += notes
    elif launch.kind == "demo api_server":
        launch.notes.append("vllm.entrypoints.api_server is vLLM's demo server (one /generate route); stackctl runs "
                            "the OpenAI server with the same engine flags")
    draft.notes += launch.notes
    flags = ServerFlags(draft, launch)
    flags.read()
    if not draft.model.get("path"):
        raise StackctlError("the server command names no model (fix: `vllm serve MODEL` or `--model MODEL`)")
    _served_name(draft, flags.model_arg)
    platform, engine = platform_and_engine(draft, launch)
    env_cache = import_env(draft, launch, platform, engine)
    import_offload(draft, launch, flags)
    import_cache(draft, launch, lmcache, env_cache, flags.lmcache_overrides, lmcache_given)
    gds_note(draft)
    import_host(draft, launch)
    import_stack(draft, launch, name, platform, engine)
    _container_notes(draft, launch)
    secret_comment(draft)


def _served_name(draft: Draft, model_arg: str) -> None:
    """Without --served-model-name vLLM serves the model argument as given; stackctl's default is its basename."""
    default = posixpath.basename(draft.model.get("path").rstrip("/"))
    served = draft.model.get("served_name")
    if served is None and model_arg != default and not runtime_reference(model_arg):
        draft.model.set("served_name", model_arg, "vLLM's default: the model argument as given")
    elif served == default:
        del draft.model["served_name"]


def _container_notes(draft: Draft, launch: Launch) -> None:
    """What the container around the old server set that the recipe does not carry, said once each."""
    if launch.decided:
        draft.notes.append(f"container settings stackctl makes its own way (host network, IPC, devices, groups), not "
                           f"copied: {'; '.join(dict.fromkeys(launch.decided))}")
    mounts = [f"{host}:{container}" for host, container in launch.volumes]
    if mounts:
        draft.notes.append(f"mounts of the old launch: {', '.join(mounts)}; stackctl mounts the model, tier and "
                           "credential paths of the recipe itself (at the same path inside)")
    others = [d for d in launch.devices if d not in ("/dev/kfd", "/dev/dri") and not d.startswith("nvidia.com/")]
    if others:
        draft.notes.append(f"devices {', '.join(others)} not passed: stackctl gives the container /dev/kfd and /dev/dri")


# -- the server's environment --------------------------------------------------------------------------------------

# LMCache reads LMCACHE_<KEY> variables over its YAML; these keys have recipe fields.
_LMCACHE_KEYS = ("chunk_size", "local_cpu", "max_local_cpu_size", "local_disk", "max_local_disk_size", "remote_url",
                 "remote_storage_plugins", "remote_serde", "save_decode_cache", "use_layerwise",
                 "enable_async_loading")


def _lmcache_config_keys() -> dict:
    """The config keys of the newest LMCache release stackctl has facts for."""
    from stackctl.knowledge import facts

    known = facts.versions("lmcache")
    return facts.load("lmcache", known[-1]).get("config") or {} if known else {}


def import_env(draft: Draft, launch: Launch, platform: str, engine: str) -> dict:
    """Split the server environment into recipe keys, serve.env and secret references; return LMCACHE_* overrides
    (plus `__credentials_file__`, `__ca_file__` and `__AWS_..._KEY__` markers for the S3 tier). A value known only
    at run time is never copied: a secret read from a host variable becomes a reference to it, anything else a
    note."""
    env: dict[str, str] = {}
    secrets: dict[str, str] = {}
    lmcache: dict = {}
    for key, value in launch.env.items():
        reference = runtime_reference(value)
        if reference:
            _run_time_variable(draft, key, value, reference, secrets)
        elif key == "LMCACHE_CONFIG_FILE":  # the importer reads the file it names (importer/__init__)
            draft.notes.append(f"LMCACHE_CONFIG_FILE={value}: its settings are the recipe's cache section; stackctl "
                               "writes them to its own lmcache.yaml and points LMCACHE_CONFIG_FILE there")
        elif key == "PYTHONHASHSEED" and re.fullmatch(r"\d+", value) and fits(model.Cache, "hash_seed", int(value)):
            draft.cache.set("hash_seed", int(value), "from PYTHONHASHSEED")
        elif key == "VLLM_SERVER_DEV_MODE" and value == "1":
            draft.serve.set("dev_endpoints", True, "from VLLM_SERVER_DEV_MODE=1")
        elif serving_engine(engine).gpu_env.get(key) == value and platform_named(platform).has_gpus:
            pass  # stackctl sets it itself (ATOM_DISABLE_VLLM_PLUGIN=1 for every plain-vLLM stack on rocm)
        elif key == ATOM_FORK_SWITCH and serving_engine(engine).atom_plugin:
            draft.notes.append(f"{key}={value}: the switch of the ATOM plugin's development fork of vLLM; stackctl's "
                               "ATOM image loads the released plugin through vLLM's plugin entry points instead")
        elif key == layout.CPU_CONNECTOR_ENV and value in ("0", "1") and platform_named(platform).ships_cpu_connector:
            if value == "0":  # "1" is what an unset cache.cpu_connector means on platform cpu
                draft.cache.set("cpu_connector", False, f"from {key}=0")
        elif key == "AWS_SHARED_CREDENTIALS_FILE":
            lmcache["__credentials_file__"] = launch.host_path(value)[0]
        elif key == layout.S3_CA_ENV:
            lmcache["__ca_file__"] = launch.host_path(value)[0]
        elif key == "SSL_CERT_FILE" and value == layout.S3_CA_BUNDLE:
            pass  # stackctl's serve.sh joins the S3 tier's CA to the image's bundle there
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
            if key == key.lower() and key in _lmcache_config_keys():
                draft.notes.append(f"{key}={value}: LMCache reads its settings from the environment only as "
                                   f"LMCACHE_{key.upper()}, so the old launch's LMCache never saw it; kept in "
                                   f"serve.env as it was (validate reports it: lmcache-env-unprefixed): rename it to "
                                   f"LMCACHE_{key.upper()} or set the recipe's cache key to apply it")
    for key in launch.passthrough:
        secrets[key] = key
    for key, origin in launch.secret_refs.items():
        secrets[key] = key
        draft.notes.append(f"{key} came from the cluster's {origin}: export {key} on the host (serve.secret_env)")
    if env:
        draft.serve.set("env", env)
    if secrets:
        draft.add_secret_env(secrets)
    return lmcache


def _run_time_variable(draft: Draft, key: str, value: str, reference: str, secrets: dict) -> None:
    """A variable whose value the old launch took at run time: `HF_TOKEN=$HF_TOKEN` or `-e TOKEN=${HF_TOKEN}` is a
    secret passed from a host variable, which a recipe names (serve.secret_env); anything else is left for the
    user, with a note."""
    source = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", value)
    if is_secret(key, value) or (source and is_secret_name(source.group(1))):
        secrets[key] = source.group(1) if source else key  # a placeholder token: the host's own variable
        return
    draft.notes.append(f"{key}={value}: {reference} was known only when the old launch ran; not imported: set it in "
                       f"serve.env{' (or serve.secret_env)' if source else ''} yourself")


def secret_comment(draft: Draft) -> None:
    """Name the variables in serve.secret_env whose values were not copied."""
    secrets = draft.serve.get("secret_env")
    if secrets:
        draft.serve.comment("secret_env", f"Values not copied: {', '.join(sorted(secrets))} (secrets, or passed "
                                          "through from the host). Export them where stackctl runs; they reach "
                                          "the container at run time only.")


# -- host: pinning, shared memory, bind address --------------------------------------------------------------------

def import_host(draft: Draft, launch: Launch) -> None:
    """host.numa, host.isolcpus, host.shm_size; serve.host when the server bound vLLM's default (all interfaces)."""
    if launch.numa and "numa" not in draft.host:
        nodes = _cpulist_or_none(launch.numa)
        if nodes:
            draft.host.set("numa", nodes[0] if len(nodes) == 1 else nodes, "from numactl / --cpuset-mems")
        else:
            draft.notes.append(f"NUMA nodes {launch.numa!r} not imported (not a node list): set host.numa")
    if launch.cpus:
        if _cpulist_or_none(launch.cpus):
            draft.host.set("isolcpus", launch.cpus, "the CPUs the old launch was pinned to (taskset -c / "
                                                    "--cpuset-cpus)")
        else:
            draft.notes.append(f"CPU pinning {launch.cpus!r} not imported (not a CPU list): set host.isolcpus")
    if launch.shm_size:
        size = re.sub(r"^(\d+)\s*([bkmg])(i?b)?$", r"\1\2", launch.shm_size.strip().lower())  # 16GB, 16Gi -> 16g
        if fits(model.Host, "shm_size", size):
            draft.host.set("shm_size", size, None if size == launch.shm_size else f"from {launch.shm_size}")
        else:
            draft.notes.append(f"shared memory size {launch.shm_size!r} not imported (Docker's form is a number with "
                               "b, k, m or g): set host.shm_size")
    if launch.kind and draft.serve.get("host") is None:
        draft.serve.set("host", "0.0.0.0", "vLLM binds all interfaces without --host; stackctl's default is "
                                           "127.0.0.1")


def _cpulist_or_none(text: str) -> list[int] | None:
    """The numbers of a kernel cpulist (`0,2-3` -> [0, 2, 3]); None when the text is not one (`all`, `3-1`)."""
    from stackctl.host.cpulist import parse_cpulist

    try:
        return parse_cpulist(text) or None
    except ValueError:
        return None


# -- stack: name, image and versions --------------------------------------------------------------------------------

def import_stack(draft: Draft, launch: Launch, name: str | None, platform: str, engine: str) -> None:
    """stack.name (given, else derived from the launch) first in its section, then the image and the versions."""
    path = draft.model.get("path")
    served = draft.model.get("served_name") or ""
    candidates = [name, launch.container_name, posixpath.basename(served.rstrip("/")),
                  posixpath.basename(path.rstrip("/"))]
    for candidate in candidates:
        slug = _slug(candidate or "") if not runtime_reference(candidate or "") else ""
        if slug:
            break
    else:
        slug = "imported-stack"
    draft.stack.put_first("name", slug)
    if not name:
        draft.stack.comment("name", "derived from the launch; choose your own (image tag, container name)")
    import_image(draft, launch, platform, engine)
    for package, version in sorted(launch.pins.items()):
        if fits(model.Versions, package, version) and not draft.versions.get(package):
            draft.versions.set(package, version, f"from the script's pip install {package}=={version}")
    uses_lmcache = offload_engine(draft.cache.get("offload") or "lmcache").lmcache_package
    if draft.cache.get("enabled") and uses_lmcache and not draft.versions.get("lmcache"):
        draft.versions.comment("", "The LMCache version is not visible in the launch: pin the one your image had, "
                                      'e.g. lmcache = "0.5.6" (until then stackctl builds its default release).')


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-_.")[:63].rstrip("-_.")
    return slug if re.match(model.NAME_PATTERN, slug) else ""
