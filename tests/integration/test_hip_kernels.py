"""LMCache's HIP kernels run, without a GPU, and compared bit for bit with numpy references.

The kernels are the ones the ROCm build compiles: the csrc of the LMCache release tests/hip/rocm-build-check-gfx942.toml
builds, hipified by LMCache's own ROCm build profile, inside an image on the tests' stand-in for a ROCm torch (`bash
scripts/make-hip-toolchain.sh --kernels`, tests/hip/kernels/Dockerfile). In a container of that image
tests/hip/kernels/run_kernels.py cuts the device code out of mem_kernels.hip, mp_mem_kernels.hip and pos_kernels.hip,
compiles it with the toolchain's clang (the version scripts/hip-toolchain.pins holds; HIP front end, spirv64 device
target), turns it into SPIR-V and runs it on PoCL's CPU device (real work-items in work-groups, pointer tables and
by-value packs in shared virtual memory), then compares every byte with references written from vLLM's KV layouts and
RoPE's formula. It proves the kernels' source semantics as clang reads them; AMDGPU code generation, wavefront-64
execution and the GPU's memory model are only proved on a GPU (README, "Development"). One limit of that route: RoPE on
fp16/bf16 keys needs torch's c10::Half and c10::BFloat16, whose headers include HIP's AMDGPU runtime headers under HIP;
those kernels are compiled by the same clang for the host CPU instead and run work-item by work-item
(tests/hip/kernels/host_shim.h).

"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import HIP_BUILD_LOCK, REPO, hip_pins, hip_toolchain_facts

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.hip_images]

IMAGE = "stackctl-test/hip-kernels:debian-sid"
BUILD = "bash scripts/make-hip-toolchain.sh --kernels"
KERNELS = REPO / "tests" / "hip" / "kernels"
RECIPE = REPO / "tests" / "hip" / "rocm-build-check-gfx942.toml"
TIMEOUT = 600  # the run takes seconds; compiling both sources a few more
LLVM_MAJOR = hip_toolchain_facts()["LLVM_MAJOR"]


@pytest.fixture(scope="module")
def kernel_run(docker_engine, hip_env) -> dict:
    """The driver's JSON lines from one container run: header, per-comparison results, summary (on the engine the
    HIP images are built on: hip_env)."""
    present = subprocess.run(["flock", HIP_BUILD_LOCK, "docker", "image", "inspect", IMAGE], capture_output=True,
                             text=True)
    if present.returncode != 0:
        pytest.fail(f"{IMAGE} is not built; build it with `{BUILD}` (CI does, in its HIP build phase)")
    name = f"stackctl-hip-kernels-{os.getpid()}"
    try:
        run = subprocess.run(["docker", "run", "--rm", "--name", name, "--network", "host",
                              "-e", f"LLVM_MAJOR={LLVM_MAJOR}", "-v", f"{KERNELS}:/kernels:ro",
                              "--entrypoint", "python3", IMAGE,
                              "/kernels/run_kernels.py", "/opt/lmcache-hip"],
                             capture_output=True, text=True, timeout=TIMEOUT)
    finally:  # a timed-out run leaves its container: remove it either way
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines and "cases" in lines[-1], f"the driver ended early (exit {run.returncode}):\n{run.stderr[-4000:]}"
    return {"header": lines[0], "results": lines[1:-1], "summary": lines[-1], "exit": run.returncode}


def test_the_kernel_image_is_the_pinned_toolchain_and_a_moved_package_is_named(kernel_run):
    """The image the kernels ran in has every package of scripts/hip-toolchain.pins (its own, the stand-in's and the
    toolchain's) at its pinned version, read from its dpkg database; one pin moved by a release is named."""
    pins_module = hip_pins()
    pins = pins_module.read_pins()
    assert pins_module.check(IMAGE, "kernels", pins) == []
    moved = {image: dict(packages) for image, packages in pins.items()}
    clang = f"clang-{LLVM_MAJOR}"
    moved["toolchain"][clang] += "+1"
    assert pins_module.check(IMAGE, "kernels", moved) == [
        f"{clang}: pinned {moved['toolchain'][clang]}, installed {pins['toolchain'][clang]}"]


def test_the_kernels_of_the_recipes_lmcache_ran_through_spirv_on_pocl(kernel_run):
    header = kernel_run["header"]
    assert f'lmcache = "{header["lmcache"]}"' in RECIPE.read_text(), header
    assert header["route"] == f"clang-{LLVM_MAJOR} HIP -> SPIR-V 1.2 -> PoCL" and "PoCL" in header["device"], header


def test_every_kernel_result_equals_its_reference_bit_for_bit(kernel_run):
    results = kernel_run["results"]
    wrong = [r for r in results if not r["ok"]]
    assert wrong == [], "\n".join(json.dumps(r) for r in wrong)
    assert kernel_run["summary"] == {"cases": len(results), "failed": 0} and kernel_run["exit"] == 0
    assert all(r["elements"] > 0 for r in results)


def test_the_cases_cover_vllms_layouts_both_directions_holes_and_rope(kernel_run):
    names = " | ".join(r["case"] for r in kernel_run["results"] if r["expect"] == "match")
    for part in ("NHD", "HND", "MLA", "D2H", "H2D", "holes", "round trip", "3 layers", "1 layer", "single-layer",
                 "fused 3 chunks", "skip 8 prefix", "4-byte words", "RoPE NeoX", "RoPE GPT-J", "partial rotary",
                 "rotation by new-old", "multi-process block transfer", "16-byte units", "2-byte units",
                 "skip 3 prefix blocks", "NeoX fp16", "GPT-J fp16", "NeoX bf16", "GPT-J bf16"):
        assert part in names, part
    kernels = {r["kernel"].split("<")[0] for r in kernel_run["results"]}
    assert kernels == {"lmc::load_and_reshape_multi_layer_kernel", "lmc::load_and_reshape_multi_layer_fused_kernel",
                       "lmc::single_layer_kv_transfer_kernel", "lmc::rotary_embedding_kernel_fused",
                       "lmc::rotary_embedding_kernel_fused_ramp_multi", "multi_layer_block_transfer_kernel"}, kernels


def test_only_the_c10_element_types_take_the_host_route(kernel_run):
    """Everything runs as SPIR-V on PoCL but RoPE on c10::Half/BFloat16 (and one float RoPE case, the same kernel as
    on PoCL, showing both routes agree)."""
    host = {r["kernel"] for r in kernel_run["results"] if r["route"] != "SPIR-V on PoCL"}
    assert all(r["route"] in ("SPIR-V on PoCL", "host CPU, work-item by work-item") for r in kernel_run["results"])
    assert host == {f"lmc::rotary_embedding_kernel_fused<{t}, {t}, {n}>" for t in ("c10::Half", "c10::BFloat16")
                    for n in ("true", "false")} | {"lmc::rotary_embedding_kernel_fused<float, float, true>"}, host


@pytest.mark.parametrize("case, mismatches", [
    ("NEGATIVE: HND kernel fed an NHD cache", None),  # most elements land elsewhere
    ("NEGATIVE: reference changed in one element", 1),
    ("NEGATIVE: fp16 RoPE against a reference rounding in float32 until the end (host CPU route)", None),
])
def test_a_wrong_layout_a_changed_reference_or_a_wrong_rounding_is_reported(kernel_run, case, mismatches):
    result = next(r for r in kernel_run["results"] if r["case"] == case)
    assert result["expect"] == "mismatch" and result["mismatches"] > 0 and "first_mismatch" in result, result
    if mismatches is not None:
        assert result["mismatches"] == mismatches, result
