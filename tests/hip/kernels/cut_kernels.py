"""Cut the device code out of a hipified LMCache source, so clang can compile it without torch or HIP's headers.

    python cut_kernels.py SOURCE INCLUDE_DIR... > kernels.hip

LMCache keeps its kernels in `namespace lmc { ... }` blocks and its torch-facing host wrappers outside them. The cut
keeps every such block whole (with #line directives, so a compiler error names LMCache's file and line), the C++
standard headers, the local headers free of vendor includes, and from a local header that includes torch or HIP only
its vendor-free includes and one-line constexpr constants (MAX_FUSED_TRANSFER_CHUNKS). Everything else (host
wrappers, torch dispatch, kernel launches) is left out: nothing here is edited, only selected.
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
CONSTEXPR_LINE = re.compile(r"^constexpr [^;{}]*;[^\n]*$", re.M)
NAMESPACE_LMC = re.compile(r"^namespace lmc\s*\{", re.M)


def is_standard_header(name: str) -> bool:
    """<vector>, <type_traits>: the C++ library's own headers (no directory, no extension)."""
    return "/" not in name and "." not in name


def find_header(name: str, from_dir: str, include_dirs: list):
    """The local header's path; None for one found only on the system paths ("hip/hip_runtime.h")."""
    for folder in [from_dir, *include_dirs]:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    return None


def is_vendor_free(path: str, include_dirs: list) -> bool:
    """True when the header and the local headers it includes name no torch/HIP/CUDA header."""
    with open(path) as f:
        text = f.read()
    for kind, name in INCLUDE.findall(text):
        if kind == "<" and not is_standard_header(name):
            return False
        local = find_header(name, os.path.dirname(path), include_dirs) if kind == '"' else None
        if kind == '"' and (local is None or not is_vendor_free(local, include_dirs)):
            return False
    return True


def header_part(path, include_dirs: list, seen: set) -> list:
    """Lines standing for one quoted include: the include itself, or what of it device code can use."""
    if path is None or path in seen:
        return []
    seen.add(path)
    if is_vendor_free(path, include_dirs):
        return [f'#include "{os.path.abspath(path)}"']
    with open(path) as f:
        text = f.read()
    lines = []
    for kind, name in INCLUDE.findall(text):
        if kind == '"':
            lines += header_part(find_header(name, os.path.dirname(path), include_dirs), include_dirs, seen)
    lines += [f"// from {os.path.basename(path)}", *CONSTEXPR_LINE.findall(text)]
    return lines


def block_end(text: str, open_brace: int) -> int:
    """Index just past the brace closing the one at open_brace, skipping comments and literals."""
    depth, i = 0, open_brace
    while i < len(text):
        if text.startswith("//", i):
            i = text.index("\n", i)
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 2
            continue
        elif text[i] in "\"'":
            quote, i = text[i], i + 1
            while text[i] != quote:
                i += 2 if text[i] == "\\" else 1
        elif text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise SystemExit("unbalanced braces")


def cut(source: str, include_dirs: list) -> str:
    with open(source) as f:
        text = f.read()
    out = [f"// Device code cut from {source} (tests/hip/kernels/cut_kernels.py)"]
    seen: set = set()
    for kind, name in INCLUDE.findall(text):
        if kind == "<" and is_standard_header(name):
            out.append(f"#include <{name}>")
        elif kind == '"':
            out += header_part(find_header(name, os.path.dirname(source), include_dirs), include_dirs, seen)
    blocks = 0
    for match in NAMESPACE_LMC.finditer(text):
        end = block_end(text, match.end() - 1)
        line = text.count("\n", 0, match.start()) + 1
        out += [f'#line {line} "{os.path.abspath(source)}"', text[match.start():end]]
        blocks += 1
    if blocks == 0:
        raise SystemExit(f"{source}: no `namespace lmc {{` block: LMCache's layout changed, read the source again")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(cut(sys.argv[1], sys.argv[2:]))
