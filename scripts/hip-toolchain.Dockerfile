# A HIP toolchain base from Debian's own ROCm packages (no image registry, no GPU needed to compile): hipcc (clang),
# the HIP runtime, the AMDGPU device libraries, the ROCm library headers a PyTorch HIP extension includes, and the
# Python/C++ build tools. FROM a debootstrapped Debian sid (scripts/make-hip-toolchain.sh): sid carries the
# toolchain that targets gfx942 and gfx950.
#
# Layout: Debian's hipcc lives in /usr/bin and finds its device libraries itself. There is no /opt/rocm, and
# ROCM_PATH/HIP_PATH stay unset (ROCM_PATH=/usr breaks the device-library lookup).
ARG BASE=debian:sid
FROM ${BASE}
# A mirror's sid Release file can be past its Valid-Until date.
RUN echo 'Acquire::Check-Valid-Until "false";' > /etc/apt/apt.conf.d/99stackctl-no-valid-until \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      hipcc libamdhip64-dev rocm-device-libs-21 clang-tools-21 llvm-21 lld-21 \
      librocthrust-dev libhipcub-dev libhipsparse-dev libhipblas-dev libhipblaslt-dev libhipsolver-dev \
      pybind11-dev python3-dev python3-venv python3-pip ninja-build g++ make binutils file ca-certificates \
      xz-utils git numactl \
 && rm -rf /var/lib/apt/lists/*
ENV LANG=C.UTF-8
