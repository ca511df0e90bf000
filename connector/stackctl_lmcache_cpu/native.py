"""The compiled copy loop (kvcopy.c): how it is built, loaded and called. Standard library only (ctypes), so the unit
tests drive it with numpy arrays, without torch.

The image builds it once, next to this file (`python -m stackctl_lmcache_cpu.native build`, run by the Dockerfile
step that installs the connector: gcc is in the cpu image). Where the library is missing or answers another ABI
version, `load()` says why and the connector copies with torch instead (transfer.py), bit-exact but slower.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .digits import NativeSide

SOURCE = Path(__file__).with_name("kvcopy.c")
LIBRARY = Path(__file__).with_name("_kvcopy.so")
ABI = 2  # kvcopy.c's stackctl_kv_abi()
# No -march: the library picks SSE2 or AVX2 at run time, so one build runs on every x86-64 host.
COMPILE = ["-O3", "-fno-strict-aliasing", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]
LEVELS = {0: "scalar", 1: "SSE2", 2: "AVX2"}

_int, _i64, _ptr = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p
_MOVE_ARGS = [_int, _int, _int, _ptr, _ptr, _int, _ptr, _i64, _int, _int, _int, _ptr, _ptr, _ptr, _i64, _ptr, _ptr,
              _i64, _i64, _i64]


def build(target: Path = LIBRARY, source: Path = SOURCE, compiler: str = "gcc") -> Path:
    """Compile kvcopy.c into a shared library at `target` (raises CalledProcessError with gcc's message)."""
    subprocess.run([compiler, *COMPILE, "-o", str(target), str(source)], check=True, capture_output=True, text=True)
    return target


@dataclass(frozen=True)
class Tables:
    """One layout's offsets inside a block, as kvcopy.c reads them: tok[t] + head[h] + dim[d] (elements), per K and
    V, with the move each gets."""

    itemsize: int
    block_size: int
    heads: int
    head_size: int
    sides: tuple[NativeSide, NativeSide]
    tok: tuple[list[int], list[int]]
    head: tuple[list[int], list[int]]
    dim: tuple[list[int], list[int]]

    def describe(self) -> str:
        return f"K {self.sides[0].describe()}, V {self.sides[1].describe()}"


class Library:
    """The loaded kvcopy library."""

    def __init__(self, path: Path):
        lib = ctypes.CDLL(str(path))
        abi = lib.stackctl_kv_abi()
        if abi != ABI:
            raise OSError(f"{path} answers ABI {abi}, this module speaks {ABI} (rebuild it)")
        self._move = lib.stackctl_kv_move
        self._move.argtypes = _MOVE_ARGS
        self._move.restype = _int
        self.level = int(lib.stackctl_kv_level())  # the best this CPU runs

    def prepare(self, tables: Tables, layers: Sequence[int], block_stride: int) -> Prepared:
        return Prepared(self, tables, layers, block_stride)


class Prepared:
    """A layout's tables and one set of layer caches (base addresses, `block_stride` elements between blocks), ready
    to move rows; the caller keeps the caches alive and checks everything kvcopy.c trusts (transfer.PagedKV)."""

    def __init__(self, library: Library, tables: Tables, layers: Sequence[int], block_stride: int):
        self.library, self.tables, self.block_stride = library, tables, block_stride
        self.num_layers = len(layers)

        def ints(values: Sequence[int], kind=ctypes.c_int32):
            return (kind * len(values))(*values)

        self._kinds = ints([side.kind for side in tables.sides])
        self._params = ints([value for side in tables.sides for value in (side.word_bytes, side.run)])
        self._tok, self._head, self._dim = (ints(pair[0] + pair[1]) for pair in (tables.tok, tables.head, tables.dim))
        self._layers = ints(list(layers), ctypes.c_void_p)

    def move(self, to_chunk: bool, slots: int, ntokens: int, chunk: int, strides: tuple[int, int, int],
             level: int | None = None) -> int:
        """Rows of the KV_2LTD tensor at address `chunk` (strides in elements: kv, layer, token row) to or from the
        caches at the `ntokens` int64 slots at address `slots`; returns the level used."""
        t = self.tables
        used = self.library._move(int(to_chunk), self.library.level if level is None else level, t.itemsize,
                                  self._kinds, self._params, self.num_layers, self._layers, self.block_stride,
                                  t.block_size, t.heads, t.head_size, self._tok, self._head, self._dim, ntokens, slots,
                                  chunk, *strides)
        if used < 0:
            raise ValueError(f"kvcopy: element size {t.itemsize} not supported")
        return used


_loaded: dict[Path, Library | str] = {}


def load(path: Path = LIBRARY) -> Library | str:
    """The library, or why it cannot be used (a sentence); loaded once per process."""
    if path not in _loaded:
        try:
            _loaded[path] = Library(path) if path.exists() else f"{path.name} was not built"
        except OSError as exc:
            _loaded[path] = f"{path.name} does not load: {exc}"
    return _loaded[path]


def main(argv: list[str] | None = None) -> int:
    """`build [TARGET]`: compile kvcopy.c (the image's build step); `check`: print what load() finds."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["build"]:
        target = build(Path(args[1]) if len(args) > 1 else LIBRARY)
        print(f"built {target}")
        return 0
    if args[:1] == ["check"]:
        library = load()
        if isinstance(library, str):
            print(library)
            return 1
        print(f"{LIBRARY.name}: ABI {ABI}, level {LEVELS[library.level]}")
        return 0
    print("usage: python -m stackctl_lmcache_cpu.native build [TARGET] | check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
