"""Every recipe rule, loaded in one place and run together.

The rule modules register on import, in this order (the order of `stackctl rules`): the catalog of silent
failures (stack_rules.py), the rules judged against facts read from the packages (fact_rules.py), the rules that guard
the recipe itself (guard_rules.py: secrets, free-form keys that bypass the rules, skip ids, host paths) and the
rules on LMCache settings carried in cache.extra and serve.env (lmcache_rules.py).
"""

from __future__ import annotations

from stackctl.findings import Finding, key_path_text
from stackctl.rules import stack_rules, fact_rules, offload_rules, guard_rules, lmcache_rules, host_rules, rocm_rules  # noqa: F401, I001  (each registers its rules)
from stackctl.recipe.positions import lookup
from stackctl.rules.registry import RULES, VERSION_UNKNOWN, Hit, Rule, package_version
from stackctl.secrets import redact

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing is not imported at run time
    from collections.abc import Iterable, Iterator

    from stackctl.recipe.model import Recipe

__all__ = ["RULES", "run_rules"]


def run_rules(recipe: Recipe, skip: Iterable[str] = (), spec=None) -> list[Finding]:
    """All findings of all rules not skipped (by the caller or the recipe's checks.skip), in file order. The rules
    judge the recipe's stack spec: `spec` when the caller derived it already (StackSpec of this recipe), else one
    derived here.

    One policy for unknown versions, here and nowhere else: a version-bound rule is not applied when its package's
    version is unknown, and one `version-unknown` warning names every rule left out that way (never silence, never
    an error)."""
    if spec is None:
        from stackctl.bundle.stackspec import StackSpec

        spec = StackSpec(recipe)
    skipped = set(skip) | set(recipe.checks.skip)
    hits: list[tuple[Rule, str | tuple, str]] = []
    unapplied: dict[str, list[str]] = {}
    for rule_ in RULES.values():
        if rule_.id in skipped or rule_.id == VERSION_UNKNOWN:
            continue
        if rule_.needs_version and package_version(spec, rule_.needs_version) is None:
            if rule_.applies is None or rule_.applies(spec):
                unapplied.setdefault(rule_.needs_version, []).append(rule_.id)
            if rule_.unknown_check is not None:
                hits += [(rule_, path, message) for path, message in rule_.unknown_check(spec)]
            continue
        hits += [(rule_, path, message) for path, message in rule_.check(spec)]
    if unapplied and VERSION_UNKNOWN not in skipped:
        hits += [(RULES[VERSION_UNKNOWN], path, message) for path, message in _version_unknown_hits(unapplied)]
    findings = []
    for rule_, where, message in hits:
        path = (where,) if isinstance(where, str) else tuple(where)
        line, col = lookup(recipe.positions, path)
        message = redact(message)  # no message shows a secret, whatever a rule quotes
        findings.append(Finding(recipe.source, line, col, key_path_text(path), message, rule_.fix,
                                rule_.id, rule_.severity))
    return sorted(findings, key=lambda f: (f.line, f.col, f.rule_id))


def rule_hits(recipe: Recipe, rule_ids: Iterable[str]) -> list[tuple[str, Hit]]:
    """(rule id, (key path, message)) of each named rule on the recipe's stack spec, version policy aside: for callers
    that ask a few rules directly (the importer's guard on its own keys)."""
    from stackctl.bundle.stackspec import StackSpec

    spec = StackSpec(recipe)
    return [(rule_id, hit) for rule_id in rule_ids for hit in RULES[rule_id].check(spec)]


def _version_unknown_hits(unapplied: dict[str, list[str]]) -> Iterator[Hit]:
    for package, rule_ids in sorted(unapplied.items()):
        yield (("versions",), f"{'vLLM' if package == 'vllm' else 'LMCache'} version unknown: not applied: "
                              f"{', '.join(sorted(rule_ids))} (set versions.{package})")


