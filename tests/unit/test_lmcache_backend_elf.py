"""image.lmcache-backend on real ELF files: the image probe (probes/probe_image.py) reads small shared objects built
like LMCache's native modules (tests/fixtures/elf, made by scripts/make-elf-fixtures.py), and the check judges them.
A correct HIP build of every LMCache generation must pass; the CUDA builds (the PyPI wheels' shapes) must fail."""

from __future__ import annotations

import importlib.util

import pytest
from helpers import FIXTURES, RECIPES, REPO

from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS
from stackctl.recipe import load_recipe_text
from stackctl.bundle.stackspec import StackSpec

load_all()
ELF = FIXTURES / "elf"


def _probe_module():
    spec = importlib.util.spec_from_file_location("probe_image", REPO / "probes" / "probe_image.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROBE = _probe_module()


class ProbeContext:
    def __init__(self, recipe, probe):
        self.recipe, self._probe, self.deep, self._cache = recipe, probe, False, {}
        self.spec = StackSpec(self.recipe)

    def probe(self):
        return self._probe


def rocm_recipe(version: str, archs=("gfx942",)):
    text = (RECIPES / "atom-lmcache-cpu.toml").read_text()
    recipe = load_recipe_text(text)
    assert recipe.stack.platform == "rocm" and recipe.cache.enabled
    recipe.versions.lmcache = version
    recipe.versions.gpu_arch = list(archs)
    return recipe


def judge(case: str, version: str, archs=("gfx942",)):
    facts = PROBE.lmcache_facts(str(ELF / case / "lmcache"))
    assert facts["version"] == version  # read from the fixture's _version.py, as in a real source install
    return CHECKS["image.lmcache-backend"].run(ProbeContext(rocm_recipe(version, archs), {"lmcache": facts}))


@pytest.mark.parametrize(("case", "version", "module", "archs", "runtime", "kernels"), [
    ("lmcache-0.4.4-hip", "0.4.4", "c_ops", ("gfx942",), "libamdhip64.so.6", 12),
    ("lmcache-0.5.3-hip", "0.5.3", "c_ops", ("gfx942",), "libamdhip64.so.6", 14),
    ("lmcache-0.5.4-hip", "0.5.4", "cuda_ops", ("gfx942", "gfx950"), "libamdhip64.so.7", 14),
    ("lmcache-0.5.6-hip", "0.5.6", "cuda_ops", ("gfx942",), "libamdhip64.so.7", 14),
])
def test_a_correct_hip_build_of_every_generation_passes(case, version, module, archs, runtime, kernels):
    result = judge(case, version, archs)
    assert result.status == "pass", result.message
    per_target = "; ".join(f"{arch}: {kernels} kernel instances in 1 bundle(s), wavefront 64, no spills or scratch"
                           for arch in archs)
    assert result.message == (f"HIP build of {module}: code objects for {', '.join(archs)} (exactly "
                              f"versions.gpu_arch), links {runtime}; {per_target} (all {kernels} kernels its HIP "
                              "sources launch have code)")


def test_a_build_that_lost_a_kernel_on_one_target_fails_naming_the_kernel_the_target_and_its_source():
    result = judge("lmcache-0.5.6-hip-lost-kernel", "0.5.6", archs=("gfx942", "gfx950"))
    assert result.status == "fail"
    assert result.message == ("HIP build of cuda_ops (gfx942, gfx950): no code object for 1 kernel(s) on gfx950: "
                              "load_and_reshape_multi_layer_fused_kernel (csrc/cuda/mem_kernels.cu:429) (the "
                              "release's HIP sources launch them)")
    by_target = {k["target"]: k for k in result.details["kernels"]}
    assert by_target["gfx942"]["missing"] == [] and by_target["gfx950"]["count"] == 13


def test_a_build_for_wavefront_32_fails_and_spills_and_scratch_are_counted():
    result = judge("lmcache-0.5.6-hip-wave32", "0.5.6")
    assert result.status == "fail" and "14 kernel(s) for gfx942 compiled for a wavefront other than 64" in \
        result.message, result.message
    gfx942 = result.details["kernels"][0]
    assert (gfx942["spills"], gfx942["scratch"]) == (14 * 3, 14)


@pytest.mark.parametrize(("case", "version", "cudart"), [
    ("lmcache-0.4.4-cuda", "0.4.4", "libcudart.so.12"),
    ("lmcache-0.5.3-cuda", "0.5.3", "libcudart.so.13"),
    ("lmcache-0.5.6-cuda", "0.5.6", "libcudart.so.13"),
])
def test_the_pypi_shaped_cuda_build_fails_naming_its_cudart(case, version, cudart):
    result = judge(case, version)
    assert result.status == "fail" and "CUDA build" in result.message and cudart in result.message


def test_a_hip_build_without_the_recipe_arch_fails():
    result = judge("lmcache-0.5.6-hip", "0.5.6", archs=("gfx950",))
    assert result.status == "fail" and "lacks gfx950" in result.message
    assert judge("lmcache-0.5.4-hip", "0.5.4", archs=("gfx942", "gfx950")).status == "pass"


def test_a_hip_build_with_a_target_the_recipe_does_not_name_warns():
    result = judge("lmcache-0.5.4-hip", "0.5.4", archs=("gfx942",))
    assert result.status == "warn" and "also carries gfx950" in result.message, result.message


def _judge_facts(facts: dict, archs=("gfx942",)):
    return CHECKS["image.lmcache-backend"].run(ProbeContext(rocm_recipe("0.5.6", archs), {"lmcache": facts}))


def _with_elf(**changes) -> dict:
    """The real 0.5.6 HIP fixture's probe facts, its module's ELF facts changed."""
    facts = PROBE.lmcache_facts(str(ELF / "lmcache-0.5.6-hip" / "lmcache"))
    module = next(m for m in facts["native_modules"] if m["module"] == "cuda_ops")
    module["elf"].update(changes)
    return facts


def test_a_hip_build_that_does_not_link_the_hip_runtime_fails():
    result = _judge_facts(_with_elf(needed=["libc.so.6"]))
    assert result.status == "fail" and "does not link the HIP runtime" in result.message, result.message


def test_compressed_offload_bundles_skip_with_the_reason():
    result = _judge_facts(_with_elf(hip_offload={"bundles": 0, "compressed_bundles": 1, "targets": [],
                                                 "targets_complete": False}))
    assert result.status == "skip" and "compressed" in result.message and "libamdhip64.so.7" in result.message


def test_kernels_that_cannot_be_seen_skip_the_check_never_pass_or_fail():
    """No code object metadata at all, or a kernel missing where a code object could not be read: the kernels the
    release launches may be there, so the check skips with the reason."""
    facts = _with_elf()
    offload = next(m for m in facts["native_modules"] if m["module"] == "cuda_ops")["elf"]["hip_offload"]
    unread = dict(offload, code_objects={})
    result = _judge_facts(_with_elf(hip_offload=unread))
    assert result.status == "skip" and "cannot be checked" in result.message, result.message
    gfx942 = offload["code_objects"]["gfx942"]
    partly = dict(offload, code_objects={"gfx942": dict(gfx942, kernels=gfx942["kernels"][1:], unreadable=1)})
    result = _judge_facts(_with_elf(hip_offload=partly))
    assert result.status == "skip" and "1 of its code objects could not be read: they may be there" in \
        result.message, result.message
    # Every launched kernel seen despite an unreadable code object: nothing can be missing; the count says so.
    readable = dict(offload, code_objects={"gfx942": dict(gfx942, unreadable=1)})
    result = _judge_facts(_with_elf(hip_offload=readable))
    assert result.status == "pass" and "1 code object(s) unreadable" in result.message, result.message
