"""Launching SPIR-V kernels on PoCL's CPU device through PyOpenCL, HIP-style: a grid of blocks of threads.

Buffers are fine-grain SVM: a numpy array the host reads and writes, whose address the kernel dereferences, so device
pointer tables (LMCache's `T** paged_buffer_ptrs`) and pointers inside by-value structs (its fused-transfer packs)
work as on a GPU. A HIP launch <<<grid, block>>> is an NDRange of grid*block work-items in work-groups of block.
"""

import numpy as np
import pyopencl as cl

SVM_FLAGS = cl.svm_mem_flags.READ_WRITE | cl.svm_mem_flags.SVM_FINE_GRAIN_BUFFER


class CpuDevice:
    def __init__(self):
        platforms = [p for p in cl.get_platforms() if "Portable Computing Language" in p.name]
        if not platforms:
            raise RuntimeError(f"no PoCL platform among {[p.name for p in cl.get_platforms()]}")
        self.device = platforms[0].get_devices(cl.device_type.CPU)[0]
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context)
        self._alive = []  # SVM arrays stay allocated while the device lives

    def describe(self) -> str:
        return f"{self.device.platform.version} / {self.device.name}"

    def program(self, spirv: bytes) -> cl.Program:
        return cl.Program(self.context, spirv).build()

    def array(self, data: np.ndarray) -> np.ndarray:
        """An SVM copy of data (same shape and dtype)."""
        out = cl.svm_empty(self.context, SVM_FLAGS, data.shape, data.dtype)
        out[...] = data
        self._alive.append(out)
        return out

    @staticmethod
    def address(array: np.ndarray) -> int:
        return cl.SVM(array).svm_ptr

    def pointer_table(self, arrays: list) -> np.ndarray:
        """A device array of the arrays' addresses (a `T**` argument)."""
        return self.array(np.array([self.address(a) for a in arrays], dtype=np.uint64))

    def launch(self, program: cl.Program, kernel: str, grid: tuple, block: tuple, args: list) -> None:
        """kernel<<<grid, block>>>(args): an SVM array passes its address, a numpy scalar or bytes pass by value."""
        k = cl.Kernel(program, kernel)
        for i, arg in enumerate(args):
            if isinstance(arg, np.ndarray):
                k.set_arg(i, cl.SVM(arg))
            else:
                k.set_arg(i, arg)
        grid3 = tuple(grid) + (1,) * (3 - len(grid))
        block3 = tuple(block) + (1,) * (3 - len(block))
        cl.enqueue_nd_range_kernel(self.queue, k, tuple(g * b for g, b in zip(grid3, block3)), block3)
        self.queue.finish()
