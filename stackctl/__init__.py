"""stackctl: declarative builds and preflight checks for ROCm LLM inference stacks."""

__version__ = "0.1.0"
