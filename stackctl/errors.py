"""The one error type users see.

Anything raised as a StackctlError is a problem with the user's input or environment: the CLI prints
its message on one line and exits with its exit code. Anything else is a bug in stackctl and prints a
traceback only with --debug.
"""


class StackctlError(Exception):
    """A user-facing error: one clear line, a non-zero exit."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class RecipeError(StackctlError):
    """A recipe could not be loaded. Carries every problem found, not just the first."""

    def __init__(self, findings):
        self.findings = list(findings)
        super().__init__("\n".join(f.format() for f in self.findings))
