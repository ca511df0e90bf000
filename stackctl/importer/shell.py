"""Reading the shell script: its commands and their words, variable expansion, `NAME=value` assignments, and the
blocks that are not commands where they stand (heredoc bodies, function bodies).

Commands are split by a small scanner that knows quotes, comments, line continuations and separators; each
command's words then come from shlex. A `$` that must stay literal (single quotes, `\\$`) is marked before shlex
sees it, and so is an unquoted `$` (its expansion is split into words, as the shell does). Heredoc bodies (data fed
to a command, often an LMCache YAML written with `cat > FILE <<EOF`) and function bodies (run only where the function
is called) are cut out before the script is split into commands, and kept so the launch reader can use them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from stackctl.errors import StackctlError
from stackctl.unresolved import runtime_reference

ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
# Reserved words that may stand before a simple command; skipped to reach the command itself.
KEYWORDS = {"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"}

_LITERAL_DOLLAR = "\x00"
_BARE_DOLLAR = "\x01"
_VARIABLE = re.compile(r"([\x01$])(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


# A document's placeholder where a word belongs (`vllm serve <model_name_or_path>`, `model_path=<your model path>`):
# to the shell a redirection, to the reader a value to fill in. Quoted, it stays one word the importer can name.
_ARRAY_WORD = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\[[@*]\]\}")
_PLACEHOLDER = re.compile(r"(?<=[=\s])<([A-Za-z][A-Za-z0-9 _./:-]*)>(?=[\s;]|$)", re.MULTILINE)
_PLACEHOLDER_WORD = re.compile(r"<[A-Za-z][A-Za-z0-9 _./:-]*>")


def split_commands(text: str) -> list[str]:
    """Simple commands of a shell text (separators: newline ; & && || |), continuations joined, comments dropped."""
    text = text.replace(_LITERAL_DOLLAR, "").replace(_BARE_DOLLAR, "")  # the scanner's own markers
    text = _PLACEHOLDER.sub(lambda m: "'<" + m.group(1) + ">'", text)
    commands: list[str] = []
    buf: list[str] = []
    quote = ""
    depth = 0  # inside $( ... )
    i, n = 0, len(text)

    def flush():
        command = "".join(buf).strip()
        if command:
            commands.append(command)
        buf.clear()

    while i < n:
        c, nxt = text[i], text[i + 1:i + 2]
        if quote == "'":
            buf.append(_LITERAL_DOLLAR if c == "$" else c)
            quote = "" if c == "'" else quote
        elif c == "\\":
            if nxt == "\n":
                pass  # line continuation
            elif nxt == "$":
                buf.append(_LITERAL_DOLLAR)
            else:
                buf.append(c + nxt)
            i += 2
            continue
        elif quote:  # double quotes or backticks
            buf.append(c)
            quote = "" if c == quote else quote
        elif c in "'\"`":
            quote = c
            buf.append(c)
        elif c == "$" and nxt == "(":
            depth += 1
            buf.append("$(")
            i += 2
            continue
        elif c == "$":
            buf.append(_BARE_DOLLAR)
        elif depth:
            depth += {"(": 1, ")": -1}.get(c, 0)
            buf.append(c)
        elif c == "#" and (not buf or buf[-1] in " \t"):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c in "\n;":
            flush()
        elif c == "&" and ((buf and buf[-1] in "<>") or nxt == ">"):
            buf.append(c)  # redirection: 2>&1, &>file
        elif c in "&|":
            flush()
            i += 2 if nxt in ("&", "|") and (c == "|" or nxt == "&") else 1
            continue
        else:
            buf.append(c)
        i += 1
    if quote:
        raise StackctlError(f"unterminated {quote} quote in the launch script (fix: close the quote)")
    flush()
    return commands


def command_words(command: str) -> list[str]:
    """shlex words of one command, `$` markers kept for expand(). A command substitution or arithmetic expansion
    (`$(seq 1 8)`, `$((8000 + i))`) is one word, as the shell has it, whatever its spaces."""
    command, substitutions = _hold_substitutions(command)
    command = _mark_redirections(command)
    try:
        words = shlex.split(command, posix=True)
    except ValueError as exc:
        raise StackctlError(f"cannot read the launch script near {_show(command.replace(_REDIRECT, ''))}: "
                            f"{exc}") from None
    words = [re.sub(r"\x02(\d+)\x02", lambda m: substitutions[int(m.group(1))], word) for word in words]
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif not word.startswith(_REDIRECT):
            kept.append(word)  # a quoted '<' or '>' is a word the program gets, as the shell passes it
        elif re.fullmatch(r"\d*(>>?|<|&>>?|>\|)", word[1:]):
            skip = True  # the redirection's target is the next word
        elif _PLACEHOLDER_WORD.fullmatch(word[1:]) or not re.fullmatch(r"\d*(>>?|<|&>>?)\S+", word[1:]):
            kept.append(word[1:])  # a placeholder (<model_path>) is a word, not a redirection
    return kept


_REDIRECT = "\x03"  # marks a word that starts with an unquoted redirection operator


def _mark_redirections(command: str) -> str:
    """command with _REDIRECT before each word that starts, outside quotes, with a redirection operator (`<`, `>`,
    `2>`, `&>`): only those are redirections to the shell; shlex drops the quotes that tell them apart."""
    out, quote, i, start = [], "", 0, True
    while i < len(command):
        c = command[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"' and i + 1 < len(command):
                out.append(c)
                i += 1
                c = command[i]
        elif c in "'\"":
            quote = c
        elif c == "\\" and i + 1 < len(command):
            out.append(c)
            i += 1
            c = command[i]
        elif start and re.match(r"\d*(<|>|&>)", command[i:]):
            out.append(_REDIRECT)
        start = not quote and c.isspace()
        out.append(c)
        i += 1
    return "".join(out)


def _hold_substitutions(command: str) -> tuple[str, list[str]]:
    """command with each unquoted `$( ... )` replaced by a marker shlex keeps whole, and the texts replaced."""
    out, held, quote, i = [], [], "", 0
    while i < len(command):
        c = command[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif command.startswith("$(", i):
            depth, j = 0, i + 1
            while j < len(command):
                depth += {"(": 1, ")": -1}.get(command[j], 0)
                if depth == 0:
                    break
                j += 1
            held.append(command[i:j + 1])
            out.append(f"\x02{len(held) - 1}\x02")
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), held


def expand(word: str, variables: dict, split: bool = True) -> list[str]:
    """Expand $NAME, ${NAME}, ${NAME:-default} with variables the script set; unknown references stay as written.
    Unquoted expansions are split into words (like the shell) when split is true. A word that is a whole bash array
    (`"${args[@]}"`) holds what only the run time knows (stackctl's serve.sh adds `--dtype X` that way): no words."""
    if _ARRAY_WORD.fullmatch(_restore(word)):
        return []
    pieces: list[tuple[str, str]] = []  # (text, "text" | "split" (unquoted expansion) | "whole")
    pos = 0
    for match in _VARIABLE.finditer(word):
        pieces.append((word[pos:match.start()], "text"))
        pos = match.end()
        marker, name, op, arg = match.group(1), match.group(2) or match.group(5), match.group(3), match.group(4)
        value = variables.get(name)
        if op and op.startswith(":") and value == "":
            value = None
        if op and op.endswith("+"):
            value = "" if value is None else _restore(arg or "")
        elif value is None and op and op[-1] in "-=":
            value = _restore(arg or "")
        if value is None:
            pieces.append((_restore(match.group(0)), "text"))
        else:
            # A value only the run time knows (`$((8000 + i))`, a placeholder `<your model path>`) is one value
            splits = split and marker == _BARE_DOLLAR and not runtime_reference(value)
            pieces.append((value, "split" if splits else "whole"))
    pieces.append((word[pos:], "text"))
    words, current, literal = [], "", False
    for text, kind in pieces:
        if kind != "split":
            current += _restore(text)
            literal = literal or bool(text) or kind == "whole"
            continue
        parts = re.split(r"[ \t\n]+", text)
        current += parts[0]
        for part in parts[1:]:
            if current or literal:
                words.append(current)
            current, literal = part, False
    if current or literal or word == "":
        words.append(current)
    return words


def assignment(word: str, variables: dict) -> tuple[str, str | None]:
    """(NAME, expanded value) of a `NAME=value` word; value None when the word is no assignment or a bash array."""
    match = ASSIGNMENT.match(word)
    if not match:
        return word, None
    if match.group(2).startswith("("):
        return match.group(1), None  # bash array: not an environment value
    return match.group(1), (expand(match.group(2), variables, split=False) or [""])[0]


def _restore(text: str) -> str:
    return text.replace(_LITERAL_DOLLAR, "$").replace(_BARE_DOLLAR, "$")


def _show(text: str) -> str:
    text = _restore(text)
    return repr(text if len(text) < 60 else text[:57] + "...")


# -- heredoc and function bodies: cut out before the script is split into commands ---------------------------------

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
        code = code_part(line)
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
            for char in code_part(piece):
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
    text = text.removeprefix("{")
    text = text.removesuffix("}")
    return text.splitlines(), i


def code_part(line: str) -> str:
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
