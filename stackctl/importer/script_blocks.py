"""Parts of a shell script that are not commands where they stand: heredoc bodies (data fed to a command, often
an LMCache YAML written with `cat > FILE <<EOF`) and function bodies (run only where the function is called).
They are cut out before the script is split into commands, and kept so the launch reader can use them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_WRITE_TARGET = re.compile(r"(?:>>?|\btee(?:\s+-a)?)\s*(['\"]?)([^\s'\";&|<>]+)\1")
_FUNCTION = re.compile(r"^\s*(?:function\s+([A-Za-z_][\w-]*)\s*(?:\(\s*\))?|([A-Za-z_][\w-]*)\s*\(\s*\))\s*(\{.*)?$")


@dataclass
class ScriptBlocks:
    text: str                                                # the script without heredoc and function bodies
    files: dict[str, str] = field(default_factory=dict)     # path a heredoc is written to -> its text
    functions: dict[str, str] = field(default_factory=dict)  # function name -> body


def cut_blocks(text: str) -> ScriptBlocks:
    """Remove heredoc bodies and function definitions from text (line based, as scripts write them)."""
    lines = text.splitlines()
    kept: list[str] = []
    blocks = ScriptBlocks("")
    i = 0
    while i < len(lines):
        line = lines[i]
        code = _code_part(line)
        function = _FUNCTION.match(code)
        if function:
            name = function.group(1) or function.group(2)
            body_lines, i = _function_body(lines, i, function.group(3) or "")
            blocks.functions[name] = "\n".join(body_lines)
            continue
        heredoc = _HEREDOC.search(code)
        kept.append(line)
        i += 1
        if heredoc:
            strip_tabs, word = heredoc.group(1) == "-", heredoc.group(3)
            body = []
            while i < len(lines) and (lines[i].lstrip("\t") if strip_tabs else lines[i]) != word:
                body.append(lines[i].lstrip("\t") if strip_tabs else lines[i])
                i += 1
            i += 1  # the terminator
            target = _WRITE_TARGET.search(code[heredoc.end():]) or _WRITE_TARGET.search(code[:heredoc.start()])
            if target:
                blocks.files[target.group(2)] = "\n".join(body) + "\n"
    blocks.text = "\n".join(kept) + "\n"
    return blocks


def _function_body(lines: list[str], start: int, rest: str) -> tuple[list[str], int]:
    """Lines of the function whose header is lines[start] (rest: what follows the name on that line)."""
    depth, body, i = 0, [], start
    opened = False
    pieces = [rest] if rest else []
    i += 1
    while True:
        for piece in pieces:
            for char in _code_part(piece):
                if char == "{":
                    depth, opened = depth + 1, True
                elif char == "}":
                    depth -= 1
            body.append(piece)
        if opened and depth <= 0 or i >= len(lines):
            break
        pieces = [lines[i]]
        i += 1
    text = "\n".join(body).strip()
    text = text[1:] if text.startswith("{") else text
    text = text[:-1] if text.endswith("}") else text
    return text.splitlines(), i


def _code_part(line: str) -> str:
    """The line without quoted text and comments (enough to find braces, heredoc markers and redirections)."""
    out, quote = [], ""
    for char in line:
        if quote:
            if char == quote:
                quote = ""
            out.append(char if char not in "{}<>#" else " ")
            continue
        if char in "'\"":
            quote = char
            out.append(char)
            continue
        if char == "#" and (not out or out[-1] in " \t;"):
            break
        out.append(char)
    return "".join(out)
