"""stackctl: declarative builds, recipe rules and doctor checks for ROCm LLM inference stacks."""

__version__ = "0.1.0"
