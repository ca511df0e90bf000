"""The recipe's stack section from a launch: name, platform and engine, base image and the vLLM version its tag
names."""

from __future__ import annotations

import posixpath
import re

from stackctl.importer.draft import Draft
from stackctl.importer.launch import Launch
from stackctl.importer.values import fits
from stackctl.recipe import model

_ROCM_PREFIXES = ("HIP_", "ROCR_", "VLLM_ROCM_", "AITER_", "ATOM_")


def platform_and_engine(draft: Draft, launch: Launch) -> tuple[str, str]:
    """Set stack.platform and stack.engine from the devices, environment and image; return both."""
    env, image = launch.env, (launch.image or "").lower()
    if "/dev/kfd" in launch.devices:
        platform, why = "rocm", "docker --device /dev/kfd"
    elif any(k.startswith("VLLM_CPU_") for k in env) or env.get("VLLM_TARGET_DEVICE") == "cpu" or "cpu" in image:
        platform, why = "cpu", "the launch sets up vLLM's CPU backend"
    elif "rocm" in image or any(k.startswith(_ROCM_PREFIXES) for k in env):
        named = sorted(k for k in env if k.startswith(_ROCM_PREFIXES))
        platform, why = "rocm", f"ROCm variables ({', '.join(named[:3])})" if named else "a ROCm image"
    else:
        platform, why = "rocm", "assumed: nothing in the launch names the platform"
    draft.set("stack", "platform", platform, why)
    if platform == "cpu" or env.get("ATOM_DISABLE_VLLM_PLUGIN") == "1":
        engine, why = "vllm", ("ATOM_DISABLE_VLLM_PLUGIN=1" if platform != "cpu" else "")
    elif "atom" in image:
        engine, why = "atom-vllm", 'the image name contains "atom"'
    elif any(k.startswith("ATOM_") for k in env):
        engine, why = "atom-vllm", "ATOM_* variables are set"
    else:
        engine, why = "vllm", ""
    draft.set("stack", "engine", engine, why or None)
    return platform, engine


def import_stack(draft: Draft, launch: Launch, name: str | None) -> None:
    """stack.name (given, else derived from the launch) first in its section, then the image and its vLLM version."""
    path = draft.get("model", "path")
    served = draft.get("model", "served_name") or ""
    candidates = [name, launch.container_name, posixpath.basename(served.rstrip("/")),
                  posixpath.basename(path.rstrip("/"))]
    for candidate in candidates:
        slug = _slug(candidate or "")
        if slug:
            break
    else:
        slug = "imported-stack"
    draft.values["stack"] = {"name": slug, **draft.values["stack"]}
    if not name:
        draft.comment("stack", "name", "derived from the launch; choose your own (image tag, container name)")
    if launch.image:
        if fits(model.Stack, "base_image", launch.image):
            draft.set("stack", "base_image", launch.image, "the image the old launch ran")
        else:
            draft.notes.append(f"image {launch.image!r} is not a valid stack.base_image: set it by hand")
        version = _vllm_version_from_image(launch.image)
        if version:
            draft.set("versions", "vllm", version, "from the image tag")
    for package, version in sorted(launch.pins.items()):
        if fits(model.Versions, package, version) and not draft.get("versions", package):
            draft.set("versions", package, version, f"from the script's pip install {package}=={version}")
    if draft.get("cache", "enabled") and not draft.get("versions", "lmcache"):
        draft.comment("versions", "", "The LMCache version is not visible in the launch: pin the one your image had, "
                                      'e.g. lmcache = "0.5.6" (until then stackctl builds its default release).')


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-_.")[:63].rstrip("-_.")
    return slug if re.match(model.NAME_PATTERN, slug) else ""


def _vllm_version_from_image(image: str) -> str | None:
    repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    match = re.search(r"vllm[_-]?v?(\d+\.\d+\.\d+)", tag, re.I)
    if not match and "vllm" in repo.lower():
        match = re.fullmatch(r"v?(\d+\.\d+\.\d+)(?:[-+._][A-Za-z0-9._-]*)?", tag)
    return match.group(1) if match and fits(model.Versions, "vllm", match.group(1)) else None
