"""Where the old launch ran and what it ran, as the recipe says it: stack.platform (ROCm, CPU; an NVIDIA launch is
translated to ROCm, with notes), stack.engine (plain vLLM, or vLLM with AMD's ATOM plugin), the base image and the
versions its tag names.

ATOM is recognised in the forms ATOM's own repository documents (ROCm/ATOM: docs/vllm_plugin_backend_guide.md,
recipes/atom_vllm/*.md, README.md): its images (`rocm/atom-dev:vllm-*` carry vLLM with the plugin,
`rocm/atom-dev:latest` ATOM's own server), its environment variables (ATOM_*, atom/utils/envs.py; only
`ATOM_DISABLE_VLLM_PLUGIN=1` switches it off), its own server (`python -m atom.entrypoints.openai_server`), ATOM
installed by hand into a vLLM image, and `--model-impl atom`.
"""

from __future__ import annotations

import re

from stackctl import layout
from stackctl.errors import StackctlError
from stackctl.importer.container import is_cuda_image, repository
from stackctl.importer.draft import Draft, fits
from stackctl.importer.launch import Launch
from stackctl.knowledge import compat
from stackctl.knowledge.kinds import platform_named
from stackctl.knowledge.rocm import rocm_release, rocm_version_in_image
from stackctl.knowledge.serving_engines import serving_engine
from stackctl.recipe import model
from stackctl.unresolved import runtime_reference

_ROCM_PREFIXES = ("HIP_", "ROCR_", "VLLM_ROCM_", "AITER_", "ATOM_", "HSA_")
# The switch of the ATOM plugin's development fork of vLLM (launch scripts of that fork export it before `vllm
# serve`): such a launch is an ATOM launch, and stackctl runs it as vLLM with the released ATOM plugin.
ATOM_FORK_SWITCH = "VLLM_ROCM_USE_ATOM_PLUGIN"
# Variables of NVIDIA's stack that mean nothing to ROCm: dropped from serve.env, each with the reason.
_NVIDIA_ONLY = {
    "NVIDIA_VISIBLE_DEVICES": "NVIDIA container toolkit's GPU list (translated to HIP_VISIBLE_DEVICES when it names "
                              "GPUs)",
    "NVIDIA_DRIVER_CAPABILITIES": "NVIDIA container toolkit setting",
    "CUDA_DEVICE_ORDER": "CUDA's device numbering; ROCm numbers GPUs in KFD order",
    "TORCH_CUDA_ARCH_LIST": "CUDA build architectures; the ROCm image is built for versions.gpu_arch",
}
_CUDA_ATTENTION = {"FLASHINFER", "FLASH_ATTN", "FLASHMLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "XFORMERS"}
# LMCache's GPUDirect Storage settings (NVIDIA cuFile): kept for validate to judge, named in a note.
_GDS_KEYS = ("gds_path", "gds_buffer_size", "cufile_buffer_size", "use_cufile", "no_cufile", "weka_path")


def platform_and_engine(draft: Draft, launch: Launch) -> tuple[str, str]:
    """Set stack.platform and stack.engine from the devices, GPU requests, environment and image; translate an
    NVIDIA launch's GPU settings for ROCm. Return both."""
    env, image = launch.env, launch.image or ""
    rocm = rocm_evidence(launch)
    nvidia = nvidia_evidence(launch)
    cpu = any(k.startswith("VLLM_CPU_") for k in env) or env.get("VLLM_TARGET_DEVICE") == "cpu" or \
        "cpu" in image.lower() or _flag_value(launch.args, "--device") == "cpu" or \
        layout.CPU_CONNECTOR_ENV in env  # stackctl's LMCache connector for vLLM-CPU: a rendered cpu bundle
    strong_rocm = [e for e in rocm if not e.isupper()]  # devices, amd.com/gpu, a ROCm image: more than variables
    if cpu and not strong_rocm and not nvidia:
        platform, why = "cpu", "the launch sets up vLLM's CPU backend"
    elif rocm:
        platform, why = "rocm", f"ROCm: {', '.join(rocm)}"
    elif nvidia:
        platform, why = "rocm", f"translated from an NVIDIA launch ({', '.join(nvidia)})"
    else:
        platform, why = "rocm", "assumed: nothing in the launch names the platform"
    draft.stack.set("platform", platform, why)
    if platform_named(platform).has_gpus:
        _translate_gpu_settings(draft, launch, bool(nvidia) and not rocm)
    engine, why = _engine(launch, platform)
    draft.stack.set("engine", engine, why or None)
    return platform, engine


def rocm_evidence(launch: Launch) -> list[str]:
    found = [f"docker --device {d}" for d in launch.devices if d in ("/dev/kfd", "/dev/dri")]
    found += [g for g in launch.gpus if g.startswith("amd.com/gpu")]
    if launch.image and "rocm" in launch.image.lower():
        found.append(f"the image {launch.image}")
    found += sorted(k for k in launch.env if k.startswith(_ROCM_PREFIXES))
    return found


def _strong(evidence: list[str]) -> list[str]:
    """ROCm evidence beyond variables (HIP_VISIBLE_DEVICES may be the translation of CUDA_VISIBLE_DEVICES)."""
    return [e for e in evidence if not e.isupper()]


def nvidia_evidence(launch: Launch) -> list[str]:
    found = [g for g in launch.gpus if "nvidia" in g or g.startswith("--gpus")]
    found += [f"device {d}" for d in launch.devices if d.startswith("nvidia.com/") or d.startswith("/dev/nvidia")]
    if launch.image and is_cuda_image(launch.image):
        found.append(f"the CUDA image {launch.image}")
    found += [k for k in ("NVIDIA_VISIBLE_DEVICES",) if k in launch.env]
    return found


def _engine(launch: Launch, platform: str) -> tuple[str, str]:
    env, repo = launch.env, repository(launch.image or "")
    if not platform_named(platform).has_gpus:  # ATOM is a GPU engine
        return "vllm", ""
    if env.get("ATOM_DISABLE_VLLM_PLUGIN") == "1":
        return "vllm", "ATOM_DISABLE_VLLM_PLUGIN=1"
    if launch.kind == "atom server":
        return "atom-vllm", "ATOM's own server (atom.entrypoints.openai_server), run as vLLM with the ATOM plugin"
    if repo.startswith("rocm/atom"):
        return "atom-vllm", f"ATOM's image {launch.image}"
    if "atom" in launch.installs:
        return "atom-vllm", "the launch installs ATOM into the image"
    if _flag_value(launch.args, "--model-impl") == "atom":
        return "atom-vllm", "--model-impl atom"
    if env.get(ATOM_FORK_SWITCH) == "1":
        return "atom-vllm", f"{ATOM_FORK_SWITCH}=1 (the ATOM plugin's development fork of vLLM)"
    atom_vars = sorted(k for k in env if k.startswith("ATOM_"))
    if atom_vars:
        return "atom-vllm", f"ATOM's variables ({', '.join(atom_vars[:2])})"
    return "vllm", ""


def _translate_gpu_settings(draft: Draft, launch: Launch, from_nvidia: bool) -> None:
    """GPU selection for ROCm: HIP_VISIBLE_DEVICES instead of CUDA_VISIBLE_DEVICES or NVIDIA's device lists, and
    the settings of NVIDIA's stack that ROCm has no use for dropped with a note each."""
    env = launch.env
    cuda = env.get("CUDA_VISIBLE_DEVICES")
    if cuda is not None and "HIP_VISIBLE_DEVICES" not in env and "ROCR_VISIBLE_DEVICES" not in env:
        env["HIP_VISIBLE_DEVICES"] = env.pop("CUDA_VISIBLE_DEVICES")
        draft.notes.append(f"CUDA_VISIBLE_DEVICES={cuda} became HIP_VISIBLE_DEVICES (vLLM on ROCm selects GPUs "
                           "with HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES)")
    devices = _nvidia_device_list(launch)
    if devices and not any(k in env for k in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")):
        env["HIP_VISIBLE_DEVICES"] = ",".join(devices)
        draft.host.set("gpus", [int(d) for d in devices], "the GPUs the old launch was given")
        draft.notes.append(f"the NVIDIA GPU selection ({', '.join(launch.gpus or ['NVIDIA_VISIBLE_DEVICES'])}) "
                           f"became HIP_VISIBLE_DEVICES={','.join(devices)} and host.gpus")
    count = gpu_count_note(launch) if not devices else None
    if count:
        draft.notes.append(count)
    for key, why in _NVIDIA_ONLY.items():
        if key in env:
            draft.notes.append(f"{key}={env.pop(key)} dropped: {why}")
    backend = env.get("VLLM_ATTENTION_BACKEND", "")
    if backend.upper() in _CUDA_ATTENTION:
        env.pop("VLLM_ATTENTION_BACKEND")
        draft.notes.append(f"VLLM_ATTENTION_BACKEND={backend} dropped: a CUDA-only attention backend; vLLM on ROCm "
                           "picks its own")
    if from_nvidia:
        options = [g for g in launch.gpus if "amd.com" not in g]
        draft.notes.append("an NVIDIA launch, translated to ROCm: " + (f"{', '.join(options)} replaced by " if options
                           else "") + "stackctl's /dev/kfd and /dev/dri devices; the CUDA base image is not kept "
                           "(see [stack])")


def _nvidia_device_list(launch: Launch) -> list[str]:
    """GPU indices an NVIDIA launch names: `--gpus device=0,1`, NVIDIA_VISIBLE_DEVICES=0,1, compose device_ids.
    `--gpus N` (a count: any N GPUs) and `--gpus all` name no index (_gpus_request reads them as Docker does)."""
    texts = [_gpus_request(g.split(" ", 1)[1]).get("device", "") for g in launch.gpus if g.startswith("--gpus ")]
    texts += [launch.env.get("NVIDIA_VISIBLE_DEVICES", "")]
    texts += [m.group(1) for g in launch.gpus for m in [re.search(r"device_ids: \[([^\]]*)\]", g)] if m]
    for text in texts:
        text = text.strip("'\" ").removeprefix("device=").strip("'\" ")
        ids = [part.strip(" '\"") for part in text.split(",")]
        if text and all(part.isdigit() for part in ids):
            return ids
    return []


def _gpus_request(value: str) -> dict[str, str]:
    """`docker run --gpus VALUE` as Docker reads it (a CSV list, docker/cli opts/gpus.go): `all` and a bare number
    are the count (-1 for all), `device=1,2` (quoted inside so the comma stays in the field) the indices, and
    count= / driver= / capabilities= / options= fields as given."""
    import csv

    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        text = text[1:-1]
    fields = next(csv.reader([text]), [])
    if len(fields) == 1 and "=" not in fields[0]:
        return {"count": "-1" if fields[0].strip() == "all" else fields[0].strip()}
    request: dict[str, str] = {}
    for item in fields:
        key, eq, val = item.partition("=")
        if not eq and key.strip().isdigit() and "device" in request:  # device=0,1 unquoted: read as meant
            request["device"] += "," + key.strip()
        else:
            request[key.strip()] = val.strip()
    if request.get("count") == "all":
        request["count"] = "-1"
    return request


def gpu_count_note(launch: Launch) -> str | None:
    """What a `--gpus` count asked for, when it names no GPU: said in a note (host.gpus names GPUs, not a count)."""
    for option in launch.gpus:
        if not option.startswith("--gpus "):
            continue
        request = _gpus_request(option.split(" ", 1)[1])
        count = request.get("count")
        if "device" in request or count is None:
            continue
        if count == "-1":
            return f"{option}: every GPU of the host; stackctl's ROCm stack sees every GPU too (host.gpus unset)"
        return (f"{option}: {count} GPU{'s' if count != '1' else ''}, any (a count, not GPU {count}); host.gpus is "
                f"left unset, so the stack sees every GPU: set host.gpus to the {count} you mean")
    return None


def gds_note(draft: Draft) -> None:
    """LMCache's GDS tier is NVIDIA GPUDirect Storage (cuFile): said, and kept for validate's rules to judge."""
    extra = draft.cache.get("extra") or {}
    keys = [k for k in _GDS_KEYS if k in extra] + [k for k in (extra.get("extra_config") or {})
                                                   if isinstance(extra.get("extra_config"), dict) and "cufile" in k]
    if keys:
        draft.notes.append(f"LMCache GDS settings ({', '.join(keys)}): GPUDirect Storage goes through NVIDIA's cuFile; "
                           "kept in cache.extra as given, for `stackctl validate` to judge on this platform")


# -- the image and its versions --------------------------------------------------------------------------------------

def import_image(draft: Draft, launch: Launch, platform: str, engine: str) -> None:
    """stack.base_image from the image the launch ran in, unless it cannot serve this recipe (a CUDA build, ATOM's
    own-server image, an image ATOM was installed into by hand); versions from its tag."""
    image = launch.image
    if not image:
        return
    ref = runtime_reference(image)
    repo = repository(image)
    prefix = serving_engine(engine).image_prefix  # ATOM's: an image from elsewhere cannot carry it as stackctl runs it
    _versions_from_tag(draft, image)
    default = _default_image(draft, platform, engine)
    if ref:
        draft.notes.append(f"image {image}: {ref} is known only at run time; stack.base_image left to stackctl's "
                           f"default ({default}): set it")
    elif platform_named(platform).has_gpus and (is_cuda_image(image) or "cuda" in image.lower() or
                                                nvidia_evidence(launch) and not _strong(rocm_evidence(launch))):
        draft.notes.append(f"the launch ran {image}, a CUDA build: stack.base_image left to stackctl's ROCm default "
                           f"({default}); choose the ROCm image of the same vLLM release")
    elif prefix and repo.startswith(prefix) and "vllm" not in image.split(":")[-1]:
        draft.notes.append(f"{image} is ATOM's own-server image; stackctl runs ATOM as vLLM's plugin, from "
                           f"{default} (stack.base_image left to that default)")
    elif prefix and not repo.startswith(prefix):
        draft.notes.append(f"ATOM was installed by hand into {image}; stackctl's ATOM stacks start from an image that "
                           f"carries it ({default}, stack.base_image left to that default)")
    elif fits(model.Stack, "base_image", image):
        why = {"docker pull": "the image the script pulls", "compose": "the image of the compose service",
               "kubernetes": "the image of the Kubernetes container"}
        draft.stack.set("base_image", image, why.get(launch.image_source, "the image the old launch ran"))
    else:
        draft.notes.append(f"image {image!r} is not a valid stack.base_image: set it by hand")


def _default_image(draft: Draft, platform: str, engine: str) -> str:
    """What stack.base_image left unset becomes, for the notes: the image AMD publishes for the ROCm release the
    launch's image names (none: validate asks for one), else the platform's default."""
    rocm = draft.versions.get("rocm")
    try:
        release = rocm_release(rocm) if rocm else None
    except StackctlError:
        release = None
    if release is not None:
        return release.base_image(engine, rocm) or f"none AMD publishes for ROCm {rocm}: set stack.base_image"
    return compat.table()["defaults"][platform_named(platform).base_image_keys[engine]]


def _versions_from_tag(draft: Draft, image: str) -> None:
    """The release an image tag names: vLLM's (`vllm/vllm-openai:v0.9.0`, `rocm/vllm:..._vllm_0.6.4`,
    `rocm/atom-dev:vllm-v0.17.0-...`), or LMCache's for LMCache's own images (`lmcache/vllm-openai:v0.4.5`)."""
    repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    plain = re.fullmatch(r"v?(\d+\.\d+\.\d+)(?:[-+._][A-Za-z0-9._-]*)?", tag)
    if repository(image).startswith("lmcache/"):
        if plain and fits(model.Versions, "lmcache", plain.group(1)):
            draft.versions.set("lmcache", plain.group(1), "from the image tag (LMCache's images are tagged with its "
                                                          "release)")
        return
    rocm = rocm_version_in_image(image)
    if rocm and fits(model.Versions, "rocm", rocm):
        draft.versions.set("rocm", rocm, "from the image tag (AMD's images name their ROCm release)")
    match = re.search(r"vllm[_-]?v?(\d+\.\d+\.\d+)", tag, re.IGNORECASE)
    if not match and "vllm" in repo.lower():
        match = plain
    if match and fits(model.Versions, "vllm", match.group(1)):
        draft.versions.set("vllm", match.group(1), "from the image tag")


def _flag_value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
