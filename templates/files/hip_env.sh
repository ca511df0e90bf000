#!/usr/bin/env bash
# Run a HIP compile step with ROCM_PATH as the base image's layout needs it, decided here at build time. (LMCache
# 0.5.6 reads ROCM_PATH, default /opt/rocm, only for extra include/lib dirs: setup_extensions/build_profiles/rocm.py
# :153-156; hipcc itself reads it to find its device libraries.)
#  - ROCM_PATH already set by the base image: kept (the image knows where its ROCm lives);
#  - ROCm's own layout (/opt/rocm/bin/hipcc): ROCM_PATH=/opt/rocm;
#  - a hipcc that locates its own ROCm (Debian's /usr/bin/hipcc): left unset, because ROCM_PATH=/usr sends clang to
#    a device-library directory that does not exist ("cannot find ROCm device library");
#  - no hipcc: the step fails here, naming the fix, before a long compile.
set -euo pipefail
if [ -n "${ROCM_PATH:-}" ]; then
    echo "stackctl hip: ROCM_PATH=$ROCM_PATH (set by the base image)"
elif [ -x /opt/rocm/bin/hipcc ]; then
    export ROCM_PATH=/opt/rocm
    echo "stackctl hip: ROCM_PATH=/opt/rocm (ROCm's own layout)"
elif command -v hipcc >/dev/null; then
    echo "stackctl hip: ROCM_PATH unset: $(command -v hipcc) locates its own ROCm"
else
    echo "stackctl hip: no hipcc in this image: use a ROCm base image (stack.base_image) that has the HIP compiler" >&2
    exit 1
fi
exec "$@"
