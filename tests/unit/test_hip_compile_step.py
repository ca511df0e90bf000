"""The ROCm image's HIP compile step: ROCM_PATH is left to the base image's layout (build/hip_env.sh), which is
shipped into GPU images only; CPU bundles are unchanged by it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers import RECIPES, REPO

from stackctl.bundle import render
from stackctl.recipe.loader import load_recipe
from stackctl.bundle.stackspec import StackSpec

HIP_ENV = REPO / "templates" / "files" / "hip_env.sh"


def _files(recipe: str) -> dict[str, bytes]:
    return render.render_files(StackSpec(load_recipe(RECIPES / recipe)))


def test_rocm_images_run_the_compile_through_hip_env_and_never_fix_rocm_path():
    files = _files("rocm-build-check.toml")
    dockerfile = files["Dockerfile"].decode()
    assert files["build/hip_env.sh"] == HIP_ENV.read_bytes()
    assert "ROCM_PATH" not in dockerfile.replace("ROCM_PATH is not fixed here", "")
    compile_line = next(line for line in dockerfile.splitlines() if line.startswith("RUN") and "--no-build-isolation" in line)
    assert compile_line.startswith("RUN /opt/stackctl/build/hip_env.sh --release-rocm-path /opt/rocm "
                                   "/opt/stackctl/build/pip.sh install")
    assert 'PYTORCH_ROCM_ARCH="gfx942;gfx950"' in dockerfile


def test_cpu_images_carry_no_hip_helper():
    files = _files("cpu-lmcache.toml")
    assert "build/hip_env.sh" not in files and "hip_env" not in files["Dockerfile"].decode()


def test_the_rocm_purge_checks_vllm_only_where_the_base_image_has_it():
    dockerfile = _files("rocm-build-check.toml")["Dockerfile"].decode()
    assert "--verify-import lmcache \\\n" in dockerfile
    assert 'find_spec("vllm") is None' in dockerfile and "vllm is not installed in this image: not checked" in dockerfile
    assert "--verify-import vllm,lmcache" in _files("cpu-lmcache.toml")["Dockerfile"].decode()


def _hip_env(tmp_path: Path, path: str, rocm_path: str | None = None,
             release_path: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": path}
    if rocm_path is not None:
        env["ROCM_PATH"] = rocm_path
    release = ["--release-rocm-path", release_path] if release_path else []
    return subprocess.run(["/bin/bash", str(HIP_ENV), *release, "/bin/sh", "-c", 'echo "ROCM_PATH=${ROCM_PATH-unset}"'],
                          env=env, capture_output=True, text=True, timeout=30)


def _fake_hipcc(folder: Path) -> str:
    folder.mkdir(parents=True)
    hipcc = folder / "hipcc"
    hipcc.write_text("#!/bin/sh\n")
    hipcc.chmod(0o755)
    return f"{folder}:/usr/bin:/bin"


def test_hip_env_keeps_the_base_images_rocm_path(tmp_path):
    result = _hip_env(tmp_path, _fake_hipcc(tmp_path / "bin"), rocm_path="/opt/rocm-7.0.2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["stackctl hip: ROCM_PATH=/opt/rocm-7.0.2 (set by the base image)",
                                          "ROCM_PATH=/opt/rocm-7.0.2"]


def test_hip_env_takes_the_rocm_releases_folder_where_its_hipcc_is(tmp_path):
    """A TheRock release installs under /opt/rocm/core-X.Y (knowledge/rocm.py): with its hipcc there, that folder is
    ROCM_PATH; a release folder without hipcc is not taken."""
    release = tmp_path / "core-7.14"
    path = _fake_hipcc(release / "bin")
    result = _hip_env(tmp_path, path, release_path=str(release))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"stackctl hip: ROCM_PATH={release} (the ROCm release's layout)",
                                          f"ROCM_PATH={release}"]
    result = _hip_env(tmp_path, path, release_path=str(tmp_path / "elsewhere"))
    assert result.stdout.splitlines()[-1] == "ROCM_PATH=unset"


def test_hip_env_leaves_rocm_path_unset_for_a_self_locating_hipcc(tmp_path):
    assert not os.path.exists("/opt/rocm/bin/hipcc")  # this machine has no ROCm of its own
    result = _hip_env(tmp_path, _fake_hipcc(tmp_path / "bin"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"stackctl hip: ROCM_PATH unset: {tmp_path}/bin/hipcc locates its own ROCm",
                                          "ROCM_PATH=unset"]


def test_hip_env_without_hipcc_fails_before_the_compile_naming_the_fix(tmp_path):
    result = _hip_env(tmp_path, "/usr/bin:/bin")
    assert result.returncode == 1 and result.stdout == ""
    assert "no hipcc in this image: use a ROCm base image (stack.base_image)" in result.stderr
