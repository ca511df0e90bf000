"""Values known only when the old launch ran: a shell reference the script never set (`$MODEL`, `${arr[$i]}`, `$1`,
`$((8000 + i))`, `$(seq ...)`, a backquoted command), a Kubernetes `$(VAR)`, the shell's `~`, or a placeholder a
document asks the reader to replace (`<your model file path>`, `path-to-your-model-dir`, `/path/to/nvme`).

stackctl writes recipe values into serve.sh and stack.env as given, so such a value would reach the server as its
literal text. The importer leaves those settings to the user, each with a note naming the value, instead of copying
them (the model path, which a recipe cannot leave out, is kept and refused by the `unresolved-value` rule, and render
refuses it too). This module is the one detector all of them use."""

from __future__ import annotations

import functools
import re

# A `$` followed by what the shell expands: a name, ${...}, $(...) / $((...)), a positional or special parameter;
# a backquoted command; the shell's `~`; <your model file path>, <model_name_or_path>: angle brackets around words, as
# docs write them; and the spelled-out kind: path-to-your-model-dir, /path/to/model, your_hugging_face_token.
_SOURCES = (r"\$(?:\{[^}]*\}?|\(\(?[^)]*\)?\)?|[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?!$-])", r"`[^`]*`",
            r"<[A-Za-z][A-Za-z0-9 _./:-]*>", r"^~[A-Za-z0-9_.-]*(?:/|$)")
_SPELLED = r"(?i)(?:^|[/_ .-])(?:your[_ -][a-z]|path[/_-]to[/_-])"


@functools.lru_cache(maxsize=1)
def _patterns() -> tuple[list[re.Pattern], re.Pattern]:
    """Compiled on first use: `stackctl validate` asks about every value, and most hold none of these characters."""
    return [re.compile(source) for source in _SOURCES], re.compile(_SPELLED)


def runtime_reference(value: object) -> str | None:
    """The first part of value that only the old launch's run time knew, or None when value is plain."""
    if not isinstance(value, str):
        return None
    lower = value.lower()
    if not any(mark in value for mark in "$`<~") and "your" not in lower and "to" not in lower:
        return None  # none of the marks below: the common case, without compiling anything
    patterns, spelled = _patterns()
    for pattern in patterns:
        match = pattern.search(value)
        if match:
            return match.group(0).rstrip("/")
    if spelled.search(value):
        return value  # the whole value is the document's placeholder
    return None


def home_reference(path: str) -> str:
    """A path starting with the shell's `~` spelled with $HOME (what the shell made of it), so the value says plainly
    that it depends on who ran the launch."""
    if path == "~" or path.startswith("~/"):
        return "$HOME" + path[1:]
    return path


