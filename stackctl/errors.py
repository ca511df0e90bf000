"""The one error type users see.

Anything raised as a StackctlError is a problem with the user's input or environment: the CLI prints
its message on one line and exits with its exit code. Anything else is a bug in stackctl and prints a
traceback only with --debug.
"""

from enum import IntEnum  # already imported by `re`: free on the start-up path


class ExitCode(IntEnum):
    """The exit status of every stackctl command."""

    OK = 0
    FAILED = 1          # bad input, a rule error, a failed check, gate, replacement or rollout
    COULD_NOT_RUN = 2   # the work could not be done at all: no Docker engine, no Ansible, a host tool failed
    INTERNAL = 70       # a bug in stackctl (sysexits' EX_SOFTWARE); the traceback is shown with --debug
    INTERRUPTED = 130   # Ctrl-C (128 + SIGINT)


class StackctlError(Exception):
    """A user-facing error: one clear line, a non-zero exit."""

    exit_code: int = ExitCode.FAILED

    def __init__(self, message: str, exit_code: int = ExitCode.FAILED):
        super().__init__(message)
        self.exit_code = exit_code


class RecipeError(StackctlError):
    """A recipe could not be loaded. Carries every problem found, not just the first."""

    def __init__(self, findings):
        self.findings = list(findings)
        super().__init__("\n".join(f.format() for f in self.findings))
