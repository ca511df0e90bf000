"""ROCm releases as records: what each release series installs where, which HIP runtime it ships, and which GPU
targets it can build for, said once.

`versions.rocm` in a recipe (and the ROCm a host has installed) names a release; callers ask its record
(`rocm_release("7.0").supports("gfx950")`) instead of comparing version numbers. A new release is one row in
`ROCM_RELEASE_RECORDS`, with its sources in knowledge/sources.toml under the `rocm-gpu-arch` rule (its default base
images under `rocm-release-base-image`). Plain data: no imports above the base layer (the recipe loader and validate
import this).
"""

from __future__ import annotations

from stackctl.errors import StackctlError
from stackctl.knowledge.kinds import _Record

# The datacenter and workstation targets ROCm 6.2-6.3's compatibility matrix lists; 7.0 adds MI350X/MI355X (gfx950):
# TheRock added the gfx950 target while its version.json read 7.0.0.
_ROCM6_TARGETS = frozenset({"gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100"})
_ROCM7_TARGETS = _ROCM6_TARGETS | {"gfx950"}
# TheRock's build matrix (SUPPORTED_GPUS.md): Instinct and Radeon targets it builds packages for.
_THEROCK_TARGETS = frozenset({
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx90c", "gfx942", "gfx950",
    "gfx1010", "gfx1011", "gfx1012", "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
    "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200", "gfx1201",
})
# TheRock publishes its Python wheels per GPU family; a target's family names the index.
_THEROCK_FAMILIES = {"gfx942": "gfx94X-dcgpu", "gfx950": "gfx950-dcgpu"}

# The images AMD publishes per ROCm release, by serving engine and then by the release's MAJOR.MINOR. rocm/vllm: the
# tags of ROCm's vLLM inference docs (one per release, the newest listed); ATOM: `rocm/atom-dev:vllm-latest`, which
# ATOM's nightly release builds on rocm/pytorch with ROCm 7.2.4. A release missing here has no published image.
_ROCM6_IMAGES = {"vllm": {"6.2": "rocm/vllm:rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4",
                          "6.3": "rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521",
                          "6.4": "rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909"}}
_ROCM7_IMAGES = {"vllm": {"7.0": "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210"},
                 "atom-vllm": {"7.2": "rocm/atom-dev:vllm-latest"}}


class RocmRelease(_Record):
    """One ROCm release series (a range of versions that install and behave alike)."""

    _fields = ("name", "first", "last", "builder", "install_dir", "rocm_path", "packages", "hip_runtime",
               "smi_tools", "gpu_targets", "wheel_families", "base_images")
    _defaults = {"wheel_families": {}, "base_images": {}}

    name: str
    first: tuple[int, int]  # the first major.minor of the series
    last: tuple[int, int]  # the last major.minor of the series (inclusive)
    builder: str  # "classic" (ROCm's own packages) or "therock" (TheRock's build)
    # Where the release installs: "{version}" is the full version, "{major_minor}" its MAJOR.MINOR
    # ("/opt/rocm-{version}": /opt/rocm-6.4.1; "/opt/rocm/core-{major_minor}": /opt/rocm/core-7.14).
    install_dir: str
    rocm_path: str  # ROCM_PATH for builds against it (classic installs link /opt/rocm to /opt/rocm-X.Y.Z)
    packages: str  # the prefix its system packages are named with
    hip_runtime: str  # the HIP runtime library's soname (DT_NEEDED of a HIP build made with it)
    smi_tools: tuple[str, ...]  # the SMI command-line tools it ships, preferred first
    gpu_targets: frozenset[str]  # the gfx targets it builds code for
    wheel_families: dict  # gfx target -> the Python wheel index (GPU family) TheRock publishes it under
    base_images: dict  # serving engine -> {"MAJOR.MINOR": the image AMD publishes for that release}

    def covers(self, version: tuple[int, int]) -> bool:
        return self.first <= version <= self.last

    def supports(self, gpu_arch: str) -> bool:
        return gpu_arch in self.gpu_targets

    def install_root(self, version: str) -> str:
        """The directory a release of this series installs into."""
        return self.install_dir.format(version=version, major_minor=".".join(map(str, parse_version(version))))

    def rocm_path_for(self, version: str) -> str:
        """ROCM_PATH of a release of this series."""
        return self.rocm_path.format(version=version, major_minor=".".join(map(str, parse_version(version))))

    def wheel_index(self, gpu_arch: str) -> str | None:
        """The per-family Python wheel index a target's packages come from (TheRock), None where there is none."""
        return self.wheel_families.get(gpu_arch)

    def base_image(self, engine: str, version: str) -> str | None:
        """The image AMD publishes for this release and serving engine; None where it publishes none."""
        return self.base_images.get(engine, {}).get(".".join(map(str, parse_version(version))))

    def published_releases(self, engine: str) -> tuple[str, ...]:
        """The MAJOR.MINOR releases of this series with a published image for the engine."""
        return tuple(self.base_images.get(engine, {}))


ROCM_RELEASE_RECORDS: tuple[RocmRelease, ...] = (
    RocmRelease(name="6", first=(6, 0), last=(6, 4), builder="classic", install_dir="/opt/rocm-{version}",
                rocm_path="/opt/rocm", packages="rocm-", hip_runtime="libamdhip64.so.6",
                smi_tools=("amd-smi", "rocm-smi"), gpu_targets=_ROCM6_TARGETS, base_images=_ROCM6_IMAGES),
    RocmRelease(name="7.0-7.2", first=(7, 0), last=(7, 2), builder="classic", install_dir="/opt/rocm-{version}",
                rocm_path="/opt/rocm", packages="rocm-", hip_runtime="libamdhip64.so.7",
                smi_tools=("amd-smi", "rocm-smi"), gpu_targets=_ROCM7_TARGETS, base_images=_ROCM7_IMAGES),
    # TheRock's native packages install under /opt/rocm/core-X.Y as amdrocm-* since its packaging change of Dec 2025,
    # when it was versioned 7.11; 7.12 and 7.13 were its first releases (previews) with that layout.
    RocmRelease(name="therock-7", first=(7, 12), last=(7, 99), builder="therock",
                install_dir="/opt/rocm/core-{major_minor}", rocm_path="/opt/rocm/core-{major_minor}",
                packages="amdrocm-", hip_runtime="libamdhip64.so.7", smi_tools=("amd-smi", "rocm-smi"),
                gpu_targets=_THEROCK_TARGETS, wheel_families=_THEROCK_FAMILIES),
    RocmRelease(name="core-sdk-10", first=(10, 0), last=(10, 99), builder="therock",
                install_dir="/opt/rocm/core-{major_minor}", rocm_path="/opt/rocm/core-{major_minor}",
                packages="amdrocm-", hip_runtime="libamdhip64.so.7", smi_tools=("amd-smi", "rocm-smi"),
                gpu_targets=_THEROCK_TARGETS, wheel_families=_THEROCK_FAMILIES),
)

# Every directory a ROCm release may install into, for finding its libraries without knowing the release:
# the classic /opt/rocm (a link to the installed release) and /opt/rocm-X.Y, TheRock's /opt/rocm/core-X.Y.
ROCM_LIBRARY_GLOBS: tuple[str, ...] = ("/opt/rocm/lib", "/opt/rocm-*/lib", "/opt/rocm/core-*/lib")
# The file a ROCm install records its version in (TheRock reads it the same way; .info/version-rocm first).
ROCM_VERSION_FILES: tuple[str, ...] = ("/opt/rocm/.info/version-rocm", "/opt/rocm/.info/version")


def parse_version(text: str) -> tuple[int, int]:
    """"7.0", "7.0.2", "6.4.1-120" -> (major, minor); anything else is an error naming the form."""
    parts = str(text).strip().split("-")[0].split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise StackctlError(f"ROCm version {text!r} is not MAJOR.MINOR[.PATCH]")
    return int(parts[0]), int(parts[1])


def rocm_release(version: str) -> RocmRelease:
    """The record of the series a ROCm version belongs to; a version no record covers is an error naming them."""
    wanted = parse_version(version)
    for record in ROCM_RELEASE_RECORDS:
        if record.covers(wanted):
            return record
    known = ", ".join(release_span(r) for r in ROCM_RELEASE_RECORDS)
    raise StackctlError(f"ROCm {version} is not a release stackctl knows (known: {known})")


def release_span(record: RocmRelease) -> str:
    """The versions a record covers, as a user reads them ("7.0-7.2", "10.0+")."""
    first, last = ".".join(map(str, record.first)), ".".join(map(str, record.last))
    return f"{first}+" if record.last[1] == 99 else f"{first}-{last}"


def release_of(recipe) -> RocmRelease | None:
    """The GPU runtime release a recipe names (its platform's `gpu_runtime_key` in [versions]); None when the
    platform has no GPU runtime or the recipe leaves it to the base image. An unknown release is an error."""
    from stackctl.knowledge.kinds import platform_of

    key = platform_of(recipe).gpu_runtime_key
    version = getattr(recipe.versions, key) if key else None
    return rocm_release(version) if version else None


def published_base_image(recipe) -> str | None:
    """The base image AMD publishes for the recipe's ROCm release and serving engine; None when the recipe names no
    release (or one stackctl does not know: rule rocm-gpu-arch) or AMD publishes no image for it (rule
    rocm-release-base-image)."""
    try:
        release = release_of(recipe)
    except StackctlError:
        return None
    if release is None:
        return None
    from stackctl.knowledge.kinds import platform_of

    return release.base_image(recipe.stack.engine, getattr(recipe.versions, str(platform_of(recipe).gpu_runtime_key)))


def releases_with_image(engine: str) -> tuple[str, ...]:
    """Every MAJOR.MINOR release AMD publishes a base image for, for a serving engine, oldest first."""
    return tuple(version for record in ROCM_RELEASE_RECORDS for version in record.published_releases(engine))


def rocm_path(recipe) -> str:
    """ROCM_PATH for the recipe's build: its release's, else the classic /opt/rocm every ROCm image links."""
    try:
        release = release_of(recipe)
    except StackctlError:
        release = None  # validate reports the unknown release (rule rocm-gpu-arch)
    if release is None:
        return "/opt/rocm"
    from stackctl.knowledge.kinds import platform_of

    return release.rocm_path_for(getattr(recipe.versions, str(platform_of(recipe).gpu_runtime_key)))


def rocm_version_in_image(image: str | None) -> str | None:
    """The ROCm release an image's tag names, for AMD's images that carry it: `rocm/vllm:rocm7.0.0_vllm_0.11.2_...`,
    `rocm/pytorch:rocm6.4.1_ubuntu24.04_...`, `rocm/dev-ubuntu-24.04:7.0`; None for any other image or tag."""
    import re

    if not image or "/" not in image or not image.startswith("rocm/"):
        return None
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    match = re.match(r"rocm[-_]?(\d+\.\d+(?:\.\d+)?)(?![\d.])", tag)
    if match is None and name.startswith("rocm/dev-"):
        match = re.fullmatch(r"(\d+\.\d+(?:\.\d+)?)(?:-complete)?", tag)
    return match.group(1) if match else None
