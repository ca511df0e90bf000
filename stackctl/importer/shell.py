"""Reading shell text: commands, their words, variable expansion and `NAME=value` assignments.

Commands are split by a small scanner that knows quotes, comments, line continuations and separators; each
command's words then come from shlex. A `$` that must stay literal (single quotes, `\\$`) is marked before shlex
sees it, and so is an unquoted `$` (its expansion is split into words, as the shell does).
"""

from __future__ import annotations

import re
import shlex

from stackctl.errors import StackctlError

ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
# Reserved words that may stand before a simple command; skipped to reach the command itself.
KEYWORDS = {"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"}

_LITERAL_DOLLAR = "\x00"
_BARE_DOLLAR = "\x01"
_VARIABLE = re.compile(r"([\x01$])(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def split_commands(text: str) -> list[str]:
    """Simple commands of a shell text (separators: newline ; & && || |), continuations joined, comments dropped."""
    text = text.replace(_LITERAL_DOLLAR, "").replace(_BARE_DOLLAR, "")  # the scanner's own markers
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
    """shlex words of one command, `$` markers kept for expand()."""
    try:
        words = shlex.split(command, posix=True)
    except ValueError as exc:
        raise StackctlError(f"cannot read the launch script near {_show(command)}: {exc}") from None
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif re.fullmatch(r"\d*(>>?|<|&>>?|>\|)", word):
            skip = True  # the redirection's target is the next word
        elif not re.fullmatch(r"\d*(>>?|<|&>>?)\S+", word):
            kept.append(word)
    return kept


def expand(word: str, variables: dict, split: bool = True) -> list[str]:
    """Expand $NAME, ${NAME}, ${NAME:-default} with variables the script set; unknown references stay as written.
    Unquoted expansions are split into words (like the shell) when split is true."""
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
            pieces.append((value, "split" if split and marker == _BARE_DOLLAR else "whole"))
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
