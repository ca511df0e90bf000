"""TEST PART: recreate the HIP-side torch headers (c10/hip, ATen/hip) that a ROCm PyTorch build generates with its
tools/amd_build/build_amd.py, from the CUDA headers of a CPU libtorch, with torch's own hipify.

The source tree mirrors build_amd.py's layout (aten/src/ATen/cuda, c10/cuda) so hipify applies PyTorch's internal
(non-extension) mappings. Also writes the two configure-time headers a CPU build never generates.
"""

import os
import shutil
import tempfile

import torch
from torch.utils.hipify.hipify_python import hipify

INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")


def main() -> None:
    tree = tempfile.mkdtemp(prefix="torch-hip-")
    shutil.copytree(f"{INCLUDE}/ATen/cuda", f"{tree}/aten/src/ATen/cuda")
    shutil.copytree(f"{INCLUDE}/c10/cuda", f"{tree}/c10/cuda")
    hipify(project_directory=tree, output_directory=tree,
           includes=[f"{tree}/aten/src/ATen/cuda/*", f"{tree}/c10/cuda/*"],
           show_detailed=False, is_pytorch_extension=False, show_progress=False)
    shutil.copytree(f"{tree}/aten/src/ATen/hip", f"{INCLUDE}/ATen/hip", dirs_exist_ok=True)
    shutil.copytree(f"{tree}/c10/hip", f"{INCLUDE}/c10/hip", dirs_exist_ok=True)
    os.makedirs(f"{INCLUDE}/c10/hip/impl", exist_ok=True)
    with open(f"{INCLUDE}/c10/hip/impl/hip_cmake_macros.h", "w") as header:
        header.write("#pragma once\n#define C10_HIP_BUILD_SHARED_LIBS\n")
    with open(f"{INCLUDE}/ATen/hip/HIPConfig.h", "w") as header:
        header.write("#pragma once\n#define AT_CUDNN_ENABLED() 0\n#define AT_CUSPARSELT_ENABLED() 0\n"
                     "#define AT_HIPSPARSELT_ENABLED() 0\n#define AT_ROCM_ENABLED() 1\n"
                     "#define AT_MAGMA_ENABLED() 0\n#define NVCC_FLAGS_EXTRA \"\"\n")
    count = sum(len(files) for top in ("c10/hip", "ATen/hip") for _, _, files in os.walk(f"{INCLUDE}/{top}"))
    print(f"torch HIP headers: {count} files under {INCLUDE}")


if __name__ == "__main__":
    main()
