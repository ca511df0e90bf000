// What HIP's runtime header gives device code, for LMCache's kernels compiled to SPIR-V (included before them with
// -include; clang runs with -nogpuinc, so no HIP header is read). Thread and block indices come from OpenCL's
// work-item functions, which llvm-spirv turns into SPIR-V built-ins: a HIP block is an OpenCL work-group.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __forceinline__ inline __attribute__((always_inline))

extern "C" __device__ size_t _Z12get_local_idj(unsigned dim);
extern "C" __device__ size_t _Z12get_group_idj(unsigned dim);
extern "C" __device__ size_t _Z14get_local_sizej(unsigned dim);
extern "C" __device__ size_t _Z14get_num_groupsj(unsigned dim);

// threadIdx.x and friends read as members (clang's property extension, -fms-extensions), as in HIP.
#define STACKCTL_INDEX_3D(type, fn)                                                  \
  struct type {                                                                      \
    __device__ unsigned get_x() const { return static_cast<unsigned>(fn(0)); }       \
    __device__ unsigned get_y() const { return static_cast<unsigned>(fn(1)); }       \
    __device__ unsigned get_z() const { return static_cast<unsigned>(fn(2)); }       \
    __declspec(property(get = get_x)) unsigned x;                                    \
    __declspec(property(get = get_y)) unsigned y;                                    \
    __declspec(property(get = get_z)) unsigned z;                                    \
  };
STACKCTL_INDEX_3D(stackctl_thread_idx, _Z12get_local_idj)
STACKCTL_INDEX_3D(stackctl_block_idx, _Z12get_group_idj)
STACKCTL_INDEX_3D(stackctl_block_dim, _Z14get_local_sizej)
STACKCTL_INDEX_3D(stackctl_grid_dim, _Z14get_num_groupsj)
static __device__ const stackctl_thread_idx threadIdx{};
static __device__ const stackctl_block_idx blockIdx{};
static __device__ const stackctl_block_dim blockDim{};
static __device__ const stackctl_grid_dim gridDim{};

// HIP's 16-byte vector of four unsigned ints, as LMCache's multi-process transfer copies it (ld_cs/st_cs: a load and a
// store of the whole vector; HIP's own type adds arithmetic the kernels do not use).
struct __attribute__((aligned(16))) uint4 {
  unsigned int x, y, z, w;
};

// Host-side checks in the cut sources (lmc::check_block_size): parsed, never compiled for the device nor run here.
#define TORCH_CHECK(cond, ...) ((void)(cond))
