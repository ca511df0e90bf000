"""The facts generator's reader of LMCache's HIP kernels (scripts/factgen/hip_kernels.py), on sources laid out like the
release's own (LMCache 0.5.6 setup_extensions/build_profiles/rocm.py:126-142 and csrc/cuda/*.cu, cut to the lines that
matter), and the facts it wrote for every release."""

from __future__ import annotations

import json
import sys

from helpers import REPO

sys.path.insert(0, str(REPO / "scripts"))

from factgen import hip_kernels  # noqa: E402

ROCM_PROFILE = '''
class RocmProfile(BuildProfile):
    def build(self):
        hip_sources = _hipify_wrapper(
            [
                "pybind.cpp",
                "mem_kernels.cu",
                "ac_enc.cu",
            ]
        )
'''
MEM_KERNELS = """namespace lmc {
template <typename scalar_t>
__global__ void load_and_reshape_flash_kernel(
    scalar_t* key_value) {}

__global__ void __launch_bounds__(256) single_layer_kv_transfer_kernel(int* x) {}
}
void launch() {
  lmc::load_and_reshape_flash_kernel<int64_t><<<grid, block, 0, stream>>>(kv);
  lmc::single_layer_kv_transfer_kernel<<<grid, block>>>(x);
}
"""
AC_ENC = """template <int BLOCK_SIZE>
__global__ void encode_kernel(const uint16_t* cdf) {}
/* a block comment naming encode_kernel */
//    encode_kernel<block_size><<<grid_dim, block_dim>>>(
"""
NOT_BUILT = "__global__ void blend_kernel(float* x) {}\nvoid go() { blend_kernel<<<1, 1>>>(x); }\n"


def test_the_kernels_are_those_the_rocm_build_compiles_and_launches():
    files = {"setup_extensions/build_profiles/rocm.py": ROCM_PROFILE, "csrc/cuda/mem_kernels.cu": MEM_KERNELS,
             "csrc/cuda/ac_enc.cu": AC_ENC, "csrc/cuda/blend_kernels.cu": NOT_BUILT}
    found = hip_kernels.extract(files)
    assert found["sources"] == ["csrc/cuda/mem_kernels.cu", "csrc/cuda/ac_enc.cu"]  # blend_kernels.cu is not built
    assert found["sources_from"] == "setup_extensions/build_profiles/rocm.py:7"
    assert found["kernels"] == {"load_and_reshape_flash_kernel": "csrc/cuda/mem_kernels.cu:3",
                                "single_layer_kv_transfer_kernel": "csrc/cuda/mem_kernels.cu:6"}
    # Defined, launched only in a comment: no code object is ever made for it.
    assert found["not_launched"] == {"encode_kernel": "csrc/cuda/ac_enc.cu:2"}


def test_older_releases_name_their_sources_in_setup_py_and_hipified_names_map_back():
    setup = 'if BUILD_WITH_HIP:\n    hip_sources = ["csrc/pybind_hip.cpp", "csrc/mem_kernels.hip"]\n'
    found = hip_kernels.extract({"setup.py": setup, "csrc/mem_kernels.cu": MEM_KERNELS})
    assert found["sources"] == ["csrc/mem_kernels.cu"] and found["sources_from"] == "setup.py:2"
    assert hip_kernels.extract({"setup.py": "print('no GPU build')\n"}) == {}


def test_every_lmcache_release_has_its_hip_kernels_from_its_own_sources():
    for path in sorted((REPO / "stackctl" / "knowledge" / "facts").glob("lmcache-*.json")):
        kernels = json.loads(path.read_text())["hip_kernels"]
        assert len(kernels["kernels"]) >= 11 and kernels["sources_from"], path.name
        assert "load_and_reshape_flash_kernel" in kernels["kernels"], path.name
        assert kernels["not_launched"] == {"encode_kernel": kernels["not_launched"]["encode_kernel"]}, path.name
