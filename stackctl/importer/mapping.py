"""Filling the draft from a launch: the server flags (flags.py), then the environment (recipe keys, serve.env,
secret references), the LMCache settings (lmcache.py), the host section (NUMA, CPU pinning, shared memory) and the
stack section (name, platform and engine, base image and the vLLM version its tag names), in the order their
results depend on."""

from __future__ import annotations

import posixpath
import re

from stackctl import stackspec
from stackctl.errors import StackctlError
from stackctl.importer.credentials import is_secret
from stackctl.importer.draft import CONTROL, Draft, fits
from stackctl.importer.flags import ServerFlags
from stackctl.importer.launch import Launch
from stackctl.importer.lmcache import import_cache
from stackctl.recipe import model


def build_draft(draft: Draft, launch: Launch, lmcache: dict | None, name: str | None, lmcache_given: bool) -> None:
    """Fill draft from the launch and its LMCache config (a StackctlError when the server names no model)."""
    draft.notes += launch.notes
    flags = ServerFlags(draft, launch)
    flags.read()
    if not draft.model.get("path"):
        raise StackctlError("the server command names no model (fix: `vllm serve MODEL` or `--model MODEL`)")
    _served_name(draft, flags.model_arg)
    platform, engine = platform_and_engine(draft, launch)
    env_cache = import_env(draft, launch, platform, engine)
    import_cache(draft, launch, lmcache, env_cache, flags.lmcache_overrides, lmcache_given)
    import_host(draft, launch)
    import_stack(draft, launch, name)
    secret_comment(draft)
    _note_unresolved(draft)


def _served_name(draft: Draft, model_arg: str) -> None:
    """Without --served-model-name vLLM serves the model argument as given; stackctl's default is its basename."""
    default = posixpath.basename(draft.model.get("path").rstrip("/"))
    served = draft.model.get("served_name")
    if served is None and model_arg != default:
        draft.model.set("served_name", model_arg, "vLLM's default: the model argument as given")
    elif served == default:
        del draft.model["served_name"]


def _note_unresolved(draft: Draft) -> None:
    """Values that still hold a shell reference the script did not set (the user's environment had it)."""
    texts = [draft.model.get("path") or ""] + list(draft.serve.get("env", {}).values()) \
        + list(draft.serve.get("extra_args", []))
    found = sorted({m.group(0) for text in texts for m in re.finditer(r"\$(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*|\()",
                                                                      text)})
    if found:
        draft.notes.append(f"unresolved shell references kept as written: {' '.join(found)} (replace them with "
                           "their values)")


# -- the server's environment --------------------------------------------------------------------------------------

# LMCache reads LMCACHE_<KEY> variables over its YAML; these keys have recipe fields.
_LMCACHE_KEYS = ("chunk_size", "local_cpu", "max_local_cpu_size", "local_disk", "max_local_disk_size", "remote_url",
                 "remote_storage_plugins", "remote_serde", "save_decode_cache", "use_layerwise",
                 "enable_async_loading")


def import_env(draft: Draft, launch: Launch, platform: str, engine: str) -> dict:
    """Split the server environment into recipe keys, serve.env and secret references; return LMCACHE_* overrides
    (plus `__credentials_file__`, `__ca_file__` and `__AWS_..._KEY__` markers for the S3 tier)."""
    env, secrets, lmcache = {}, {}, {}
    for key, value in launch.env.items():
        if key == "LMCACHE_CONFIG_FILE":
            pass  # stackctl writes lmcache.yaml from the recipe; the importer follows the file (importer/__init__)
        elif key == "PYTHONHASHSEED" and re.fullmatch(r"\d+", value) and fits(model.Cache, "hash_seed", int(value)):
            draft.cache.set("hash_seed", int(value), "from PYTHONHASHSEED")
        elif key == "VLLM_SERVER_DEV_MODE" and value == "1":
            draft.serve.set("dev_endpoints", True, "from VLLM_SERVER_DEV_MODE=1")
        elif key == "ATOM_DISABLE_VLLM_PLUGIN" and value == "1" and engine == "vllm" and platform == "rocm":
            pass  # stackctl sets it for every plain-vLLM stack on rocm
        elif key == stackspec.CPU_CONNECTOR_ENV and value in ("0", "1") and platform == "cpu":
            if value == "0":  # "1" is what an unset cache.cpu_connector means on platform cpu
                draft.cache.set("cpu_connector", False, f"from {key}=0")
        elif key == "AWS_SHARED_CREDENTIALS_FILE":
            lmcache["__credentials_file__"] = launch.host_path(value)[0]
        elif key == stackspec.S3_CA_ENV:
            lmcache["__ca_file__"] = launch.host_path(value)[0]
        elif key == "SSL_CERT_FILE" and value == stackspec.S3_CA_BUNDLE:
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
    for key in launch.passthrough:
        secrets[key] = key
    if env:
        draft.serve.set("env", env)
    if secrets:
        draft.add_secret_env(secrets)
    return lmcache


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
            draft.host.set("isolcpus", launch.cpus, "the CPUs the old launch was pinned to")
        else:
            draft.notes.append(f"CPU pinning {launch.cpus!r} not imported (not a CPU list): set host.isolcpus")
    if launch.shm_size and fits(model.Host, "shm_size", launch.shm_size):
        draft.host.set("shm_size", launch.shm_size)
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


# -- stack: name, platform and engine, image -----------------------------------------------------------------------

_ROCM_PREFIXES = ("HIP_", "ROCR_", "VLLM_ROCM_", "AITER_", "ATOM_")


def platform_and_engine(draft: Draft, launch: Launch) -> tuple[str, str]:
    """Set stack.platform and stack.engine from the devices, environment and image; return both."""
    env, image = launch.env, (launch.image or "").lower()
    if "/dev/kfd" in launch.devices:
        platform, why = "rocm", "docker --device /dev/kfd"
    elif any(k.startswith("VLLM_CPU_") for k in env) or env.get("VLLM_TARGET_DEVICE") == "cpu" or "cpu" in image:
        platform, why = "cpu", "the launch sets up vLLM's CPU backend"
    elif stackspec.CPU_CONNECTOR_ENV in env:
        platform, why = "cpu", f"{stackspec.CPU_CONNECTOR_ENV} (stackctl's LMCache connector for vLLM-CPU)"
    elif "rocm" in image or any(k.startswith(_ROCM_PREFIXES) for k in env):
        named = sorted(k for k in env if k.startswith(_ROCM_PREFIXES))
        platform, why = "rocm", f"ROCm variables ({', '.join(named[:3])})" if named else "a ROCm image"
    else:
        platform, why = "rocm", "assumed: nothing in the launch names the platform"
    draft.stack.set("platform", platform, why)
    if platform == "cpu" or env.get("ATOM_DISABLE_VLLM_PLUGIN") == "1":
        engine, why = "vllm", ("ATOM_DISABLE_VLLM_PLUGIN=1" if platform != "cpu" else "")
    elif "atom" in image:
        engine, why = "atom-vllm", 'the image name contains "atom"'
    elif any(k.startswith("ATOM_") for k in env):
        engine, why = "atom-vllm", "ATOM_* variables are set"
    else:
        engine, why = "vllm", ""
    draft.stack.set("engine", engine, why or None)
    return platform, engine


def import_stack(draft: Draft, launch: Launch, name: str | None) -> None:
    """stack.name (given, else derived from the launch) first in its section, then the image and its vLLM version."""
    path = draft.model.get("path")
    served = draft.model.get("served_name") or ""
    candidates = [name, launch.container_name, posixpath.basename(served.rstrip("/")),
                  posixpath.basename(path.rstrip("/"))]
    for candidate in candidates:
        slug = _slug(candidate or "")
        if slug:
            break
    else:
        slug = "imported-stack"
    draft.stack.put_first("name", slug)
    if not name:
        draft.stack.comment("name", "derived from the launch; choose your own (image tag, container name)")
    if launch.image:
        if fits(model.Stack, "base_image", launch.image):
            draft.stack.set("base_image", launch.image, "the image the old launch ran")
        else:
            draft.notes.append(f"image {launch.image!r} is not a valid stack.base_image: set it by hand")
        version = _vllm_version_from_image(launch.image)
        if version:
            draft.versions.set("vllm", version, "from the image tag")
    for package, version in sorted(launch.pins.items()):
        if fits(model.Versions, package, version) and not draft.versions.get(package):
            draft.versions.set(package, version, f"from the script's pip install {package}=={version}")
    if draft.cache.get("enabled") and not draft.versions.get("lmcache"):
        draft.versions.comment("", "The LMCache version is not visible in the launch: pin the one your image had, "
                                      'e.g. lmcache = "0.5.6" (until then stackctl builds its default release).')


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-_.")[:63].rstrip("-_.")
    return slug if re.match(model.NAME_PATTERN, slug) else ""


def _vllm_version_from_image(image: str) -> str | None:
    repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    match = re.search(r"vllm[_-]?v?(\d+\.\d+\.\d+)", tag, re.IGNORECASE)
    if not match and "vllm" in repo.lower():
        match = re.fullmatch(r"v?(\d+\.\d+\.\d+)(?:[-+._][A-Za-z0-9._-]*)?", tag)
    return match.group(1) if match and fits(model.Versions, "vllm", match.group(1)) else None
