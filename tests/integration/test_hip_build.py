"""The ROCm build path compiled for real: stackctl's ROCm Dockerfile builds LMCache's GPU module from its sdist with
BUILD_WITH_HIP on Debian's HIP toolchain (scripts/make-hip-toolchain.sh, with the tests' stand-in for a ROCm torch,
tests/hip/), and `stackctl doctor --scope image` judges the artifact by its ELF: HIP code objects for exactly the
recipe's gpu_arch, linked to the HIP runtime, and in them every kernel LMCache's HIP sources launch (each offload
bundle's code object read, one per translation unit), wavefront 64, spills and scratch counted. No GPU is needed to
compile or to read the module.

CI compiles one target (tests/hip/rocm-build-check-gfx942.toml, the shipped recipe with one arch) on a Docker
engine of its own while the other tests run (.ci/run), under the same lock this module takes: the tests here run
last, on that engine (the hip_env fixture), and find the images built. Both targets (the shipped recipe):
benchmarks/hip_build.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers import HIP_BUILD_LOCK, RECIPES, REPO, hip_toolchain_facts, run_cli
from stackctl.bundle.stackspec import StackSpec

HIP = REPO / "tests" / "hip"
RECIPE = HIP / "rocm-build-check-gfx942.toml"
TOOLCHAIN = hip_toolchain_facts()  # LLVM_MAJOR, HIP_SONAME: scripts/hip-toolchain.pins
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.hip_images]
BUILD_TIMEOUT = 3 * 3600  # the compile alone takes 10-20 min on 2 cores; a cold toolchain adds its downloads


def _doctor(env: dict, recipe: Path) -> tuple[int, dict]:
    result = run_cli("doctor", str(recipe), "--scope", "image", "--format", "json", "--fresh", env=env, timeout=1200)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return result.returncode, {r["id"]: r for r in json.loads(result.stdout)["results"]}


def _image_tag(recipe: Path) -> str:
    from stackctl.doctor.context import DoctorContext
    from stackctl.recipe import load_recipe

    return DoctorContext(StackSpec(load_recipe(recipe))).image_tag


def _in_image(tag: str, script: str) -> str:
    result = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/bash", tag, "-c",
                             script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def hip_image(docker_engine, hip_env) -> str:
    """The gfx942 build of the test recipe: the toolchain and stand-in images, then `stackctl build` (each reused
    when already built from the same inputs)."""
    toolchain = subprocess.run(["flock", HIP_BUILD_LOCK, "bash", str(REPO / "scripts" / "make-hip-toolchain.sh"),
                                "--test-torch"], capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert toolchain.returncode == 0, toolchain.stdout[-3000:] + toolchain.stderr[-3000:]
    build = subprocess.run(["flock", HIP_BUILD_LOCK, *run_cli_argv("build", str(RECIPE))], env=hip_env, cwd=REPO,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-5000:]
    return _image_tag(RECIPE)


def run_cli_argv(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "stackctl", *args]


def test_the_test_recipe_is_the_shipped_one_for_one_target():
    shipped = (RECIPES / "rocm-build-check.toml").read_text().split("\n[stack]", 1)[1]
    test = RECIPE.read_text().split("\n[stack]", 1)[1]
    changed = {(a, b) for a, b in zip(shipped.splitlines(), test.splitlines(), strict=True) if a != b}
    assert {a.split(" = ")[0] for a, _ in changed} == {"name", "description", "gpu_arch"}, changed


def test_doctor_passes_the_real_hip_build_and_names_its_targets(hip_image, hip_env):
    code, results = _doctor(hip_env, RECIPE)
    backend = results["image.lmcache-backend"]
    assert backend["status"] == "pass", backend
    assert re.fullmatch(r"HIP build of cuda_ops: code objects for gfx942 \(exactly versions\.gpu_arch\), links "
                        r"libamdhip64\.so\.6; gfx942: (\d+) kernel instances in 6 bundle\(s\), wavefront 64, no spills or "
                        r"scratch \(all 14 kernels its HIP sources launch have code\)", backend["message"]), backend
    assert backend["details"]["kernels"][0]["count"] >= 14
    assert results["image.cuda-only-packages"]["status"] == "pass", results["image.cuda-only-packages"]
    failing = {k: v["message"] for k, v in results.items() if v["status"] == "fail"}
    assert code == 0 and not failing, failing
    # What cannot be seen without a ROCm torch or vLLM in the image skips with its reason; nothing passes unseen.
    for result in results.values():
        assert result["status"] in ("pass", "skip"), result
        assert result["message"], result


def test_the_probes_targets_are_what_llvms_offload_bundler_lists(hip_image):
    """The probe reads the offload-bundle header in pure Python; LLVM's own tool must agree on the same file."""
    listing = _in_image(hip_image, (
        "set -e; so=$(python -c 'import importlib.util as u; print(u.find_spec(\"lmcache\").submodule_search_locations[0])')"
        "/cuda_ops*.so; readelf -d $so | grep NEEDED; objcopy -O binary --only-section=.hip_fatbin $so /tmp/fatbin; "
        f"clang-offload-bundler-{TOOLCHAIN['LLVM_MAJOR']} --list --type=o --input=/tmp/fatbin"))
    assert "hipv4-amdgcn-amd-amdhsa--gfx942" in listing.splitlines(), listing
    assert "gfx950" not in listing and f"[{TOOLCHAIN['HIP_SONAME']}]" in listing, listing


# Every offload bundle of the section (one per translation unit) cut apart, each unbundled by LLVM's own tool and its
# kernel descriptors (`NAME.kd` symbols) counted by llvm-readelf: what the probe reads from the metadata notes.
COUNT_KERNELS_WITH_LLVM = f"set -e\nllvm={TOOLCHAIN['LLVM_MAJOR']}\n" + r"""so=$(python -c 'import importlib.util as u; print(u.find_spec("lmcache").submodule_search_locations[0])')/cuda_ops*.so
objcopy -O binary --only-section=.hip_fatbin $so /tmp/fatbin
python - <<'PY'
import re
data = open("/tmp/fatbin", "rb").read()
starts = [m.start() for m in re.finditer(b"__CLANG_OFFLOAD_BUNDLE__", data)] + [len(data)]
for index, (start, end) in enumerate(zip(starts, starts[1:])):
    open(f"/tmp/bundle{index}", "wb").write(data[start:end])
PY
for bundle in /tmp/bundle*; do
    clang-offload-bundler-$llvm --unbundle --type=o --targets=hipv4-amdgcn-amd-amdhsa--gfx942 --input=$bundle \
        --output=$bundle.co
    /usr/lib/llvm-$llvm/bin/llvm-readelf --dyn-syms $bundle.co | grep -c '[.]kd$'
done
"""


def test_the_probes_kernels_are_what_llvm_reads_from_every_bundle(hip_image, hip_env):
    """The probe's kernel count per target (its own MessagePack reading of the AMDGPU metadata notes) equals the
    kernel descriptors llvm-readelf counts in the code objects clang-offload-bundler unbundles, bundle by bundle."""
    per_bundle = [int(line) for line in _in_image(hip_image, COUNT_KERNELS_WITH_LLVM).split()]
    _, results = _doctor(hip_env, RECIPE)
    gfx942 = results["image.lmcache-backend"]["details"]["kernels"][0]
    assert len(per_bundle) == gfx942["bundles"] == 6 and all(per_bundle), per_bundle
    assert sum(per_bundle) == gfx942["count"], (per_bundle, gfx942)


def test_a_module_that_lost_a_kernel_fails_naming_the_kernel_and_the_target(hip_image, hip_env, tmp_path):
    """The real module, edited: one kernel's name changed in its code objects (same length, so every offset holds),
    under the tag of a recipe of its own. Doctor names the kernel LMCache launches that has no code object."""
    recipe = tmp_path / "rocm-build-check-edited.toml"
    recipe.write_text(RECIPE.read_text().replace('name = "rocm-build-check-gfx942"',
                                                 'name = "rocm-build-check-edited"', 1))
    edited = _image_tag(recipe)
    module = _in_image(hip_image, "python -c 'import importlib.util as u; "
                                  "print(u.find_spec(\"lmcache\").submodule_search_locations[0])'").strip()
    name = _in_image(hip_image, f"cd {module} && ls cuda_ops*.so").strip()
    container = subprocess.run(["docker", "create", hip_image], capture_output=True, text=True, check=True,
                               timeout=120).stdout.strip()
    try:
        subprocess.run(["docker", "cp", f"{container}:{module}/{name}", str(tmp_path / name)], check=True, timeout=300)
    finally:
        subprocess.run(["docker", "rm", container], capture_output=True, timeout=120)
    data = (tmp_path / name).read_bytes()
    kernel = b"41load_and_reshape_multi_layer_fused_kernel"
    assert data.count(kernel) > 0
    (tmp_path / name).write_bytes(data.replace(kernel, b"41load_and_reshape_multi_layer_fuxed_kernel"))
    (tmp_path / "Dockerfile").write_text(f"FROM {hip_image}\nCOPY {name} {module}/{name}\n")
    subprocess.run(["docker", "build", "--network", "none", "-q", "-t", edited, str(tmp_path)], check=True,
                   capture_output=True, timeout=600)
    try:
        code, results = _doctor(hip_env, recipe)
    finally:
        subprocess.run(["docker", "rmi", edited], capture_output=True, timeout=120)
    backend = results["image.lmcache-backend"]
    assert code == 1 and backend["status"] == "fail", backend
    assert backend["message"] == ("HIP build of cuda_ops (gfx942): no code object for 1 kernel(s) on gfx942: "
                                  "load_and_reshape_multi_layer_fused_kernel (csrc/cuda/mem_kernels.cu:429) (the "
                                  "release's HIP sources launch them)"), backend


def test_doctor_fails_the_real_build_against_a_recipe_asking_another_target(hip_image, hip_env, tmp_path):
    """The gfx942 build under the tag of a recipe that asks gfx950: the image a gfx950 stack would run."""
    recipe = tmp_path / "rocm-build-check-gfx950.toml"
    recipe.write_text(RECIPE.read_text().replace('gpu_arch = ["gfx942"]', 'gpu_arch = ["gfx950"]', 1))
    wrong = _image_tag(recipe)
    subprocess.run(["docker", "tag", hip_image, wrong], check=True, timeout=60)
    try:
        code, results = _doctor(hip_env, recipe)
    finally:
        subprocess.run(["docker", "rmi", wrong], capture_output=True, timeout=120)  # the extra tag only
    backend = results["image.lmcache-backend"]
    assert code == 1 and backend["status"] == "fail", backend
    assert backend["message"] == ("HIP build of cuda_ops lacks gfx950 (has gfx942; versions.gpu_arch: gfx950)"), backend
