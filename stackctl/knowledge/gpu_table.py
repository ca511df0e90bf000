"""Per-GPU memory of known AMD Instinct GPUs (gpus.toml), for planning when the host cannot be probed."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from stackctl import toml_parser


_GPUS_FILE = Path(__file__).with_name("gpus.toml")
_GFX = re.compile(r"\bgfx[0-9a-f]+\b")


@dataclass(frozen=True)
class GpuSpec:
    """One row of gpus.toml."""

    name: str
    gfx: str
    vram_bytes: int
    source: str


@dataclass(frozen=True)
class GpuMatch:
    """The GPU a recipe's name resolved to; exact is False when only the gfx arch was known."""

    spec: GpuSpec
    exact: bool
    note: str = ""


@functools.lru_cache(maxsize=None)
def gpus() -> tuple[GpuSpec, ...]:
    """Every GPU in the table, in file order."""
    data = toml_parser.loads(_GPUS_FILE.read_text(encoding="utf-8"))
    return tuple(GpuSpec(row["name"], row["gfx"], int(row["vram_bytes"]), row["source"]) for row in data["gpu"])


def _normalise(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def lookup_gpu(name_or_arch: str) -> GpuMatch | None:
    """Find a GPU by product name ("MI300X", "AMD Instinct MI325X") or, failing that, by a gfx arch in the text.

    An arch names a family, not a product: it resolves to the smallest VRAM of that arch, with a note.
    """
    wanted = _normalise(name_or_arch or "")
    if not wanted:
        return None
    # Longest names first, so "MI250X" is not taken for "MI250".
    for spec in sorted(gpus(), key=lambda s: len(s.name), reverse=True):
        if _normalise(spec.name) in wanted:
            return GpuMatch(spec=spec, exact=True)
    arch = _GFX.search(name_or_arch.lower())
    if arch:
        arch_name = arch.group(0)
        family = [spec for spec in gpus() if spec.gfx == arch_name]
        if family:
            smallest = min(family, key=lambda s: s.vram_bytes)
            names = ", ".join(spec.name for spec in family)
            return GpuMatch(
                spec=smallest,
                exact=False,
                note=(
                    f"{arch_name} is shared by {names}: assuming the smallest ({smallest.name}, "
                    f"{smallest.vram_bytes / 2**30:.2f} GiB); name the GPU or let stackctl probe the host"
                ),
            )
    return None
