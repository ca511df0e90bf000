"""How a recipe rule is declared: `@rule(id, severity, summary, fix)` on a function from a stack spec (the recipe as
stackctl runs it, bundle/stackspec.py StackSpec: its keys as `spec.recipe`, what it derives as `spec.X`) to (key path,
message) pairs. The rule modules (rules/stack_rules.py, fact_rules.py, guard_rules.py, lmcache_rules.py) declare with
it; rules/ruleset.py loads them all and runs them. Every id is also registered in the one catalog of rule and
check ids (stackctl/ids.py).
"""

from __future__ import annotations

from stackctl import ids
from stackctl.knowledge import compat
from stackctl.text import clean_doc

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time
    from collections.abc import Iterable
    from typing import Callable

Hit = tuple  # (key path tuple, message)


class Rule:  # a plain class, not a dataclass: importing dataclasses costs `validate` more than its start-up budget
    """A registered rule: id, severity, summary, fix, doc page, the check function, and for a version-bound rule
    the package whose version it needs plus a predicate saying whether the recipe has anything for it to judge, and
    optionally the check that still holds with that version unknown (what every release says)."""

    def __init__(self, id: str, severity: str, summary: str, fix: str, check: Callable,
                 needs_version: str | None = None, applies: Callable | None = None,
                 unknown_check: Callable | None = None):
        self.id, self.severity, self.summary, self.fix, self.check = id, severity, summary, fix, check
        self.needs_version, self.applies, self.unknown_check = needs_version, applies, unknown_check

    @property
    def doc(self) -> str:
        """The doc page, from the check's docstring: cleaned when asked for (`explain`), not on `validate`'s path."""
        return clean_doc(self.check.__doc__ or self.summary)


RULES: dict[str, Rule] = {}
VERSION_UNKNOWN = "version-unknown"


def rule(rule_id: str, severity: str, summary: str, fix: str, needs_version: str | None = None,
         applies: Callable[..., bool] | None = None, unknown_check: Callable | None = None):
    """Register a rule function under a stable id. A rule whose facts depend on a package version names the package
    (needs_version="vllm" or "lmcache"): with that version unknown the engine does not run it, and reports it under
    `version-unknown` when `applies(spec)` says the recipe has something it would judge; `unknown_check(spec)`,
    when given, reports what holds whatever the version."""

    def register(check: Callable[..., Iterable[Hit]]):
        ids.register(rule_id, ids.RULE)
        RULES[rule_id] = Rule(rule_id, severity, summary, fix, check, needs_version, applies, unknown_check)
        return check

    return register


def package_version(spec, package: str) -> str | None:
    """The version a version-bound rule judges against, the one the stack runs: the pin, else the platform's default
    (stackspec: the vLLM of the CPU and ATOM images, the LMCache release stackctl builds); a real version number,
    else None (unknown)."""
    version = spec.vllm_version if package == "vllm" else spec.versions["lmcache"]
    return version if compat.parse_version(version) is not None else None
