"""STACKCTL_CPU_ISA_CAP: run the CPU stacks of this shell as a smaller CPU would, on the host at hand.

A fleet of AVX2-only machines (AMD EPYC VMs without AVX-512, older Xeons) decides dtypes and speeds differently from
an AVX-512/AMX build host. `STACKCTL_CPU_ISA_CAP=avx2` caps the libraries that compute on the CPU in every container
a CPU stack starts (the server, doctor's and bench's probes, second servers), through the variables they honour:
oneDNN's ONEDNN_MAX_CPU_ISA (its matmuls: bf16 is then emulated, as on AVX2 hardware) and ATen's
ATEN_CPU_CAPABILITY (its own vector kernels). The cap lands in the serve.env of the recipe the stack spec runs
(bundle/stackspec.py StackSpec: a copy; the loaded recipe is untouched), so `up`'s dtype decision, the rendered
stack.env and doctor all see it. What it cannot cap: vLLM's attention kernels, which pick their ISA
from the CPU itself.
"""

from __future__ import annotations

from stackctl.errors import StackctlError
from stackctl.knowledge.kinds import platform_of
from stackctl.recipe.model import Recipe

CPU_ISA_CAP_ENV = "STACKCTL_CPU_ISA_CAP"
CAPS = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}}


def shell_isa_cap() -> str | None:
    """This shell's cap (STACKCTL_CPU_ISA_CAP), read where a command starts: the loader stays pure."""
    import os

    return os.environ.get(CPU_ISA_CAP_ENV) or None


def with_cpu_isa_cap(recipe: Recipe, cap: str | None) -> Recipe:
    """`recipe` itself when there is nothing to cap, else a copy of it whose serve.env is capped to `cap` (the
    variable's value) when it computes on the CPU."""
    if not cap:
        return recipe
    caps = CAPS.get(cap.strip().lower())
    if caps is None:
        raise StackctlError(f"{CPU_ISA_CAP_ENV}={cap}: not a CPU cap stackctl knows (fix: one of "
                            f"{', '.join(sorted(CAPS))}, or unset it)")
    if not platform_of(recipe).cpu_computes:
        return recipe
    import copy

    capped = copy.deepcopy(recipe)
    capped.serve.env = {**recipe.serve.env, **caps}
    return capped
