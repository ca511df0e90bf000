"""TEST PART: in a package build process only, make the CPU torch declare itself a HIP build.

torch.utils.cpp_extension takes its HIP path (ROCM_HOME from hipcc, .hip sources to hipcc with --offload-arch per
PYTORCH_ROCM_ARCH target) only when torch.cuda._is_compiled() and torch.version.hip are true. Loaded from a .pth at
interpreter start; it acts only in processes that run a build backend (pip's in-process hook or a setup.py), so
every other process, stackctl's image probe included, sees the CPU torch as it is.
"""

import importlib.abc
import importlib.util
import os
import sys

HIP_VERSION = "6.4.43484"  # the HIP runtime of the toolchain base (Debian libamdhip64 6.4.3)


def _building() -> bool:
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return program in ("setup.py", "_in_process.py")


class _DeclareOnImport(importlib.abc.MetaPathFinder):
    """Find torch with the other finders, then set its HIP declaration once the module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.version.hip = HIP_VERSION
            module.cuda._is_compiled = lambda: True

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _building():
    sys.meta_path.insert(0, _DeclareOnImport())
