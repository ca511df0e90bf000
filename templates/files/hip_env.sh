#!/usr/bin/env bash
# Run a HIP compile step with ROCM_PATH as the base image's layout needs it, decided here at build time. (LMCache
# 0.5.6 reads ROCM_PATH, default /opt/rocm, only for extra include/lib dirs: setup_extensions/build_profiles/rocm.py
# :153-156; hipcc itself reads it to find its device libraries.)
#   hip_env.sh [--release-rocm-path DIR] COMMAND...
#  - ROCM_PATH already set by the base image: kept (the image knows where its ROCm lives);
#  - the recipe's ROCm release installs where its hipcc is (DIR: /opt/rocm, or TheRock's /opt/rocm/core-X.Y;
#    stackctl/knowledge/rocm.py): ROCM_PATH=DIR;
#  - a hipcc that locates its own ROCm (Debian's /usr/bin/hipcc): left unset, because ROCM_PATH=/usr sends clang to
#    a device-library directory that does not exist ("cannot find ROCm device library");
#  - no hipcc: the step fails here, naming the fix, before a long compile.
set -euo pipefail
release_path=/opt/rocm
if [ "${1:-}" = "--release-rocm-path" ]; then
    release_path=$2
    shift 2
fi
if [ -n "${ROCM_PATH:-}" ]; then
    echo "stackctl hip: ROCM_PATH=$ROCM_PATH (set by the base image)"
elif [ -x "$release_path/bin/hipcc" ]; then
    export ROCM_PATH=$release_path
    echo "stackctl hip: ROCM_PATH=$release_path (the ROCm release's layout)"
elif command -v hipcc >/dev/null; then
    echo "stackctl hip: ROCM_PATH unset: $(command -v hipcc) locates its own ROCm"
else
    echo "stackctl hip: no hipcc in this image: use a ROCm base image (stack.base_image) that has the HIP compiler" >&2
    exit 1
fi
exec "$@"
