// The fallback route: LMCache's kernels compiled for the host CPU as plain C++ (clang-21 -x c++), for element types
// the SPIR-V route cannot compile (torch's c10::Half and c10::BFloat16: their headers include HIP's AMDGPU runtime
// headers under HIP). __global__ and __device__ name ordinary functions; stackctl_launch runs every work-item of the
// grid in turn, one at a time, with the indices a GPU would give it. Exact for kernels without barriers or
// cross-thread communication (the RoPE kernels have none); nothing here runs in parallel.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define TORCH_CHECK(cond, ...) ((void)(cond))

struct stackctl_dim3 {
  unsigned x, y, z;
};
static stackctl_dim3 threadIdx, blockIdx, blockDim, gridDim;

// args[i] points at the i-th argument's value, as hipLaunchKernel's kernelParams do.
template <typename... P, size_t... I>
void stackctl_call(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
  kernel(*static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(args[I])...);
}

template <typename... P>
void stackctl_launch(void (*kernel)(P...), const unsigned* grid, const unsigned* block, void** args) {
  gridDim = {grid[0], grid[1], grid[2]};
  blockDim = {block[0], block[1], block[2]};
  for (unsigned bz = 0; bz < grid[2]; ++bz)
    for (unsigned by = 0; by < grid[1]; ++by)
      for (unsigned bx = 0; bx < grid[0]; ++bx)
        for (unsigned tz = 0; tz < block[2]; ++tz)
          for (unsigned ty = 0; ty < block[1]; ++ty)
            for (unsigned tx = 0; tx < block[0]; ++tx) {
              blockIdx = {bx, by, bz};
              threadIdx = {tx, ty, tz};
              stackctl_call(kernel, args, std::index_sequence_for<P...>{});
            }
}
