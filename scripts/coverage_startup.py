"""CI's coverage in the subprocesses the tests start: .ci/run copies this module into the venv's site-packages as
`_stackctl_coverage_startup.py`, beside a .pth file that imports it and calls `start()`, so every interpreter of the
venv runs it before its program.

While STACKCTL_COVERAGE_START names coverage's configuration file, it starts coverage in the interpreter (each process
writes its own data file next to COVERAGE_FILE), unless the program is one of the tools that never import stackctl:
Ansible's (the fleet tests' controller runs ansible-playbook, which forks a worker per host and task: under the tracer
a playbook took 30% longer), pip and mypy. The variable is not coverage's own COVERAGE_PROCESS_START: coverage's
.pth starts it in every interpreter that sees that one, tools included.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "STACKCTL_COVERAGE_START"
# A program's name (a script's file name, or the module of `python -m`) that marks a tool that never runs stackctl.
UNMEASURED_PREFIXES = ("ansible", "AnsiballZ_", "pip", "mypy", "dmypy")
_OPTIONS_WITH_A_VALUE = {"-X", "-W", "-Q"}


def program(argv: list[str]) -> str:
    """What the interpreter runs, from its full command line (sys.orig_argv): the module of `-m MODULE`, `-c` for a
    command string, the script's file name, or "" for an interactive interpreter."""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "")
        if arg == "-c":
            return "-c"
        if arg in _OPTIONS_WITH_A_VALUE:
            next(args, None)
        elif not arg.startswith("-"):
            return os.path.basename(arg)
    return ""


def measured(argv: list[str]) -> bool:
    return not program(argv).startswith(UNMEASURED_PREFIXES)


def start() -> None:
    config = os.environ.get(VARIABLE)
    if not config or not measured(getattr(sys, "orig_argv", sys.argv)):
        return
    # coverage.process_startup reads its configuration from this variable; removed again at once, so the processes
    # this one starts decide for themselves.
    os.environ["COVERAGE_PROCESS_START"] = config
    try:
        import coverage

        coverage.process_startup()
    finally:
        del os.environ["COVERAGE_PROCESS_START"]

