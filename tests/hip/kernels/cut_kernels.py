"""Cut the device code out of a hipified LMCache source, so clang can compile it without torch or HIP's headers.

    python cut_kernels.py SOURCE INCLUDE_DIR... > kernels.hip

LMCache keeps its kernels in namespace blocks beside its torch-facing host wrappers. The cut keeps every
`namespace lmc { ... }` block whole, and from an anonymous `namespace { ... }` block the declarations that are
device code (`__device__`, `__global__`), each behind a #line directive, so a compiler error names LMCache's file and
line. Of the headers it keeps the C++ standard ones, the local ones free of vendor includes, and from a local header
that includes torch or HIP its vendor-free includes, its one-line constexpr constants (MAX_FUSED_TRANSFER_CHUNKS) and
the structs the kept code names (MemoryObj4). Everything else (host wrappers, torch dispatch, kernel launches) is left
out: nothing is edited, only selected.
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
CONSTEXPR_LINE = re.compile(r"^constexpr [^;{}]*;[^\n]*$", re.M)
NAMESPACE = re.compile(r"^namespace (lmc\s*)?\{", re.M)  # named lmc: kept whole; anonymous: its device code
STRUCT_HEAD = re.compile(r"^(template\s*<[^;{]*>\s*)?struct\s+(\w+)")
DEVICE_CODE = re.compile(r"\b__(device|global)__\b")


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


def skip_comment_or_literal(text: str, i: int) -> int:
    """Index past the comment or literal starting at i; i itself when none starts there."""
    if text.startswith("//", i):
        return text.find("\n", i) % (len(text) + 1)
    if text.startswith("/*", i):
        return text.index("*/", i) + 2
    if text[i] in "\"'":
        quote, i = text[i], i + 1
        while text[i] != quote:
            i += 2 if text[i] == "\\" else 1
        return i + 1
    return i


def block_end(text: str, open_brace: int) -> int:
    """Index just past the brace closing the one at open_brace, skipping comments and literals."""
    depth, i = 0, open_brace
    while i < len(text):
        past = skip_comment_or_literal(text, i)
        if past != i:
            i = past
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            return i
    raise SystemExit("unbalanced braces")


def declarations(text: str, start: int, end: int):
    """(start, end) of each declaration between start and end at brace depth 0: up to its `;`, or its body's
    closing brace (and a `;` right after it). Comments and preprocessor lines between declarations are passed over."""
    i = start
    while i < end:
        past = skip_comment_or_literal(text, i)
        if past != i:
            i = past
        elif text[i].isspace():
            i += 1
        elif text[i] == "#":  # a preprocessor line, with its continuations
            while True:
                i = text.find("\n", i) % (len(text) + 1)
                if text[i - 1] != "\\" or i >= end:
                    break
                i += 1
        else:
            first = i
            while text[i] not in "{;":
                past = skip_comment_or_literal(text, i)
                i = past if past != i else i + 1
            if text[i] == "{":
                i = block_end(text, i)
                after = len(text[i:]) - len(text[i:].lstrip())
                if text[i + after:i + after + 1] == ";":
                    i += after + 1
            else:
                i += 1
            yield first, i


def header_part(path, include_dirs: list, seen: set, structs: dict) -> list:
    """Lines standing for one quoted include: the include itself, or what of it device code can use (structs go to
    `structs`, to be kept if the cut code names them)."""
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
            lines += header_part(find_header(name, os.path.dirname(path), include_dirs), include_dirs, seen, structs)
    for first, last in declarations(text, 0, len(text)):
        struct = STRUCT_HEAD.match(text[first:last])
        if struct:
            structs[struct.group(2)] = f'#line {text.count(chr(10), 0, first) + 1} "{os.path.abspath(path)}"\n' + \
                text[first:last]
    constants = CONSTEXPR_LINE.findall(text)
    return lines + ([f"// from {os.path.basename(path)}", *constants] if constants else [])


def cut(source: str, include_dirs: list) -> str:
    with open(source) as f:
        text = f.read()
    out = [f"// Device code cut from {source} (tests/hip/kernels/cut_kernels.py)"]
    seen: set = set()
    structs: dict = {}
    for kind, name in INCLUDE.findall(text):
        if kind == "<" and is_standard_header(name):
            out.append(f"#include <{name}>")
        elif kind == '"':
            out += header_part(find_header(name, os.path.dirname(source), include_dirs), include_dirs, seen, structs)
    code = []
    for match in NAMESPACE.finditer(text):
        end = block_end(text, match.end() - 1)
        if match.group(1):
            parts = [(match.start(), end)]
        else:
            head = lambda d: text[d[0]:d[1]].split("{")[0]  # noqa: E731 (a declaration up to its body)
            parts = [d for d in declarations(text, match.end(), end - 1) if DEVICE_CODE.search(head(d))]
            code.append("namespace {")
        for first, last in parts:
            code += [f'#line {text.count(chr(10), 0, first) + 1} "{os.path.abspath(source)}"', text[first:last]]
        if not match.group(1):
            code.append("}  // namespace")
    if not code:
        raise SystemExit(f"{source}: no kernel namespace block: LMCache's layout changed, read the source again")
    used = [body for name, body in structs.items() if re.search(rf"\b{name}\b", "\n".join(code))]
    return "\n".join(out + used + code) + "\n"


if __name__ == "__main__":
    sys.stdout.write(cut(sys.argv[1], sys.argv[2:]))
