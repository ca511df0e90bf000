"""Rules on what a ROCm stack is built from: the ROCm release and the GPU targets it can build for, and the vLLM
ATOM's plugin was made against."""

from __future__ import annotations

from stackctl.knowledge.serving_engines import ATOM_DISABLE_ENV, disables_atom_plugin
from stackctl.errors import StackctlError
from stackctl.knowledge import compat
from stackctl.knowledge.kinds import platform_of
from stackctl.knowledge.rocm import (
    parse_version,
    release_of,
    release_span,
    releases_with_image,
    rocm_version_in_image,
)
from stackctl.knowledge.serving_engines import serving_engine_of
from stackctl.rules.registry import Hit, rule

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time
    from collections.abc import Iterator


@rule("rocm-gpu-arch", "error",
      "versions.gpu_arch names a GPU target the recipe's ROCm release cannot build for (or a ROCm release stackctl "
      "does not know)",
      "pick a ROCm release that supports the GPU (gfx950, MI350X/MI355X: ROCm 7.0 or later), or fix versions.gpu_arch")
def _rocm_gpu_arch(spec) -> Iterator[Hit]:
    """`versions.rocm` names the ROCm release the stack is built with, and `versions.gpu_arch` the targets its HIP code
    (LMCache's extension, PYTORCH_ROCM_ARCH) is compiled for. A release's compiler and libraries only know the targets
    of their time: ROCm 6.x has no gfx950 (MI350X/MI355X came with ROCm 7.0), so a 6.x build for gfx950 fails to
    compile or, with a generic fallback, builds kernels the GPU cannot load ("invalid device function" at the first
    request).

    Each release series is one record in stackctl/knowledge/rocm.py: its version range, install layout
    (/opt/rocm-X.Y for ROCm's own packages; /opt/rocm/core-X.Y and `amdrocm-*` packages for TheRock builds, 7.12 and
    later, and the ROCm Core SDK 10.x), its HIP runtime (libamdhip64.so.6 for 6.x, .so.7 from 7.0), its SMI tools and
    its GPU targets. A version no record covers is refused too: stackctl cannot say what it can build.
    """
    try:
        release = release_of(spec.recipe)
    except StackctlError as exc:
        yield (("versions", platform_of(spec.recipe).gpu_runtime_key), str(exc))
        return
    if release is None:
        return
    for arch in spec.recipe.versions.gpu_arch:
        if not release.supports(arch):
            yield (("versions", "gpu_arch"), f"ROCm {spec.recipe.versions.rocm} (series {release_span(release)}) cannot "
                                             f"build for {arch} (it targets {', '.join(sorted(release.gpu_targets))})")


def atom_vllm_pin() -> str:
    """The vLLM release ATOM's plugin is made against (atom/plugin/vllm/vllm-version.env), kept in compat.toml."""
    return str(compat.table()["defaults"]["atom_vllm"])


@rule("atom-vllm-pin", "warning",
      "an ATOM stack runs a vLLM other than the one ATOM's plugin pins: its patches target another vLLM",
      "leave versions.vllm unset (the ATOM image's own vLLM), or set it to ATOM's pin")
def _atom_vllm_pin(spec) -> Iterator[Hit]:
    """ATOM's vLLM plugin patches vLLM's internals (attention backends, model runner, KV connector hooks) and names
    the one vLLM it is made and tested against in `atom/plugin/vllm/vllm-version.env` (VLLM_VERSION, with the vLLM
    commit); its pyproject declares no vLLM constraint, so pip installs any vLLM beside it without a word. Another
    vLLM loads the plugin and may fail later, at model load or on the first request, where a patched function moved.

    stackctl keeps ATOM's pin in knowledge/compat.toml (`defaults.atom_vllm`, the vLLM of the default ATOM image).
    """
    if not serving_engine_of(spec.recipe).atom_plugin or not spec.recipe.versions.vllm:
        return
    pin = atom_vllm_pin()
    wanted = compat.parse_version(spec.recipe.versions.vllm)
    if wanted is not None and wanted != compat.parse_version(pin):
        yield (("versions", "vllm"), f"vLLM {spec.recipe.versions.vllm} with ATOM, whose plugin pins vLLM {pin} "
                                     "(atom/plugin/vllm/vllm-version.env)")


@rule("atom-plugin-disabled", "error",
      "an ATOM stack sets ATOM_DISABLE_VLLM_PLUGIN=1: the plugin never registers and the stack serves plain vLLM",
      "remove ATOM_DISABLE_VLLM_PLUGIN from serve.env, or set stack.engine = \"vllm\" for a plain-vLLM stack")
def _atom_plugin_disabled(spec) -> Iterator[Hit]:
    """ATOM reads `ATOM_DISABLE_VLLM_PLUGIN` as true when it is "1" (any case) and then registers neither its
    platform nor its models: vLLM starts, serves, and nothing says ATOM is absent until the throughput is measured.
    stackctl sets it itself for plain-vLLM stacks on ROCm (their image may carry ATOM) and never renders it for an
    ATOM stack: serve.env's value is dropped from the bundle, and this rule says so.
    """
    if not serving_engine_of(spec.recipe).atom_plugin:
        return
    if disables_atom_plugin(spec.recipe.serve.env):
        yield (("serve", "env", ATOM_DISABLE_ENV), "ATOM_DISABLE_VLLM_PLUGIN=1 on an ATOM stack (stackctl "
                                                             "leaves it out of the bundle)")


@rule("rocm-base-image-release", "warning",
      "stack.base_image is built on another ROCm release than versions.rocm says",
      "set versions.rocm to the release the base image's tag names, or pick the base image of that release")
def _rocm_base_image_release(spec) -> Iterator[Hit]:
    """AMD's images name the ROCm release they carry in their tag (`rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210`,
    `rocm/dev-ubuntu-24.04:7.0`). The image's ROCm is what the stack runs on: when `versions.rocm` names another
    release, stackctl judges GPU targets, ROCM_PATH and the HIP runtime for a release the image does not have.

    ROCm's vLLM inference docs list each rocm/vllm tag beside the ROCm release it carries
    (docs/how-to/rocm-for-ai/inference/benchmark-docker/previous-versions/vllm-history.rst: `rocm7.0.0_vllm_...` is
    ROCm 7.0.0, `rocm6.4.1_vllm_...` ROCm 6.4.1). A tag that names no release (`rocm/vllm:latest`,
    `rocm/atom-dev:vllm-latest`) is not judged.
    """
    key = platform_of(spec.recipe).gpu_runtime_key
    wanted = getattr(spec.recipe.versions, key) if key else None
    carried = rocm_version_in_image(spec.recipe.stack.base_image)
    if not wanted or not carried:
        return
    try:
        if parse_version(wanted) != parse_version(carried):
            yield (("stack", "base_image"), f"{spec.recipe.stack.base_image} carries ROCm {carried}, versions.{key} "
                                            f"says {wanted}")
    except StackctlError:
        return  # an unreadable version is rocm-gpu-arch's finding


@rule("rocm-release-base-image", "error",
      "versions.rocm names a ROCm release AMD publishes no base image for (for the stack's engine), and "
      "stack.base_image is unset",
      "set stack.base_image to an image built on that ROCm release, or set versions.rocm to a release with a "
      "published image")
def _rocm_release_base_image(spec) -> Iterator[Hit]:
    """With `stack.base_image` unset, the ROCm release decides the base image: the image AMD publishes for that
    release and the stack's engine (each record in stackctl/knowledge/rocm.py names them). For plain vLLM those are
    the rocm/vllm tags ROCm's vLLM inference docs list, one per release: 6.2, 6.3, 6.4 and 7.0
    (docs/how-to/rocm-for-ai/inference/benchmark-docker/previous-versions/vllm-history.rst). For ATOM it is
    `rocm/atom-dev:vllm-latest`, which ATOM's nightly release builds on ROCm 7.2.4
    (.github/workflows/docker-release.yaml). Any other release has no published image: without this rule the stack
    would be built on the platform's default image, whose ROCm is not the one versions.rocm names.
    """
    key = platform_of(spec.recipe).gpu_runtime_key
    version = getattr(spec.recipe.versions, key) if key else None
    if not version or spec.recipe.stack.base_image:
        return
    try:
        release = release_of(spec.recipe)
    except StackctlError:
        return  # an unknown or unreadable release is rocm-gpu-arch's finding
    if release is None or release.base_image(spec.recipe.stack.engine, version):
        return
    published = ", ".join(releases_with_image(spec.recipe.stack.engine)) or "none"
    yield (("versions", key), f"AMD publishes no {spec.recipe.stack.engine} base image for ROCm {version} (it does for "
                              f"ROCm {published}) and stack.base_image is unset")
