"""The recipe `stackctl doctor` judges a host by when it is given none: the host's own GPUs and ROCm, so a host is
judged by what it is (an MI355X host by gfx950, with the ROCm it has installed), not by a default architecture."""

from __future__ import annotations

import re

from stackctl.recipe.model import Recipe

GFX = re.compile(r"^gfx[0-9a-f]{3,4}$")


def host_recipe(facts) -> Recipe:
    """A rocm recipe for one GPU of each architecture the host has, on the ROCm release it has installed."""
    from stackctl.recipe import load_recipe_text

    archs = sorted({g.gfx_arch for g in facts.gpus if g.gfx_arch and GFX.match(g.gfx_arch)})
    versions = []
    if archs:
        versions.append("gpu_arch = [" + ", ".join(f'"{a}"' for a in archs) + "]")
    if facts.rocm.version:
        versions.append(f'rocm = "{facts.rocm.version}"')
    text = ('[stack]\nname = "this-host"\nplatform = "rocm"\n[model]\npath = "/dev/null"\n'
            + ("[versions]\n" + "\n".join(versions) + "\n" if versions else ""))
    return load_recipe_text(text, "<this host>")
