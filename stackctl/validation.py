"""Validate recipes and report: the core of `stackctl validate`, kept free of click so the command starts fast."""

from __future__ import annotations

import sys

from stackctl.errors import ExitCode, RecipeError, StackctlError

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from typing import Any


def validate_and_report(names: list[str], output_format: str = "text", strict: bool = False,
                        skip: tuple = (), host: bool = False) -> int:
    """Check each recipe, print the findings, return the exit status (0 clean, 1 errors or strict warnings)."""
    from stackctl.bundle.stackspec import StackSpec
    from stackctl.recipe import load_recipe
    from stackctl.recipe.isa_cap import shell_isa_cap
    from stackctl.rules.guard_rules import refuse_unknown_skip_ids
    from stackctl.recipe.locate import resolve_recipe_path
    from stackctl.rules.ruleset import RULES, run_rules

    refuse_unknown_skip_ids(skip)
    results: list[dict[str, Any]] = []
    for name in names:
        skipped: list = []
        try:
            path = resolve_recipe_path(name)
            spec = StackSpec(load_recipe(path), isa_cap=shell_isa_cap())  # the recipe as the stack would run it
            recipe = spec.recipe
            findings = run_rules(recipe, skip, spec=spec) + (host_capacity_findings(spec) if host else [])
            skipped = sorted({i for i in list(skip) + recipe.checks.skip if i in RULES})
        except RecipeError as exc:
            path, findings = name, exc.findings
        except StackctlError as exc:
            if len(names) == 1:
                raise
            results.append({"file": name, "findings": [], "error": str(exc), "skipped": []})
            continue
        results.append({"file": str(path), "findings": findings, "skipped": skipped})

    failing = {"error", "warning"} if strict else {"error"}
    failed = any(r.get("error") or any(f.severity in failing for f in r["findings"]) for r in results)
    if output_format == "json":
        import json

        payload = [{"file": r["file"], "error": r.get("error"), "skipped": r["skipped"],
                    "findings": [f.to_dict() for f in r["findings"]]} for r in results]
        print(json.dumps(payload, indent=2))
    else:
        _print_text(results)
    return ExitCode.FAILED if failed else ExitCode.OK


# Doctor's host checks whose numbers validate --host reports, and the tier kind each is about.
_CAPACITY_CHECKS = {"host.cpu-tier-ram": "cpu", "host.disk-tier": "disk"}


def host_capacity_findings(spec) -> list:
    """The recipe's tiers against THIS host (RAM minus headroom, free disk): the same checks and numbers as
    `stackctl doctor`, reported at the tier's line."""
    from stackctl.doctor.context import DoctorContext
    from stackctl.doctor.all_checks import load_all
    from stackctl.doctor.registry import CHECKS, FAIL, WARN
    from stackctl.findings import Finding, key_path_text
    from stackctl.recipe.positions import lookup

    load_all()
    recipe = spec.recipe
    context = DoctorContext(spec)
    findings = []
    for check_id, kind in _CAPACITY_CHECKS.items():
        result = CHECKS[check_id].run(context)
        if result.status not in (FAIL, WARN):
            continue
        index = next(i for i, tier in enumerate(recipe.cache.tiers) if tier.kind == kind)
        path = ("cache", "tiers", index)
        line, col = lookup(recipe.positions, path)
        findings.append(Finding(recipe.source, line, col, key_path_text(path), f"on this host: {result.message}",
                                CHECKS[check_id].fix, check_id, "warning"))
    return findings


def _print_text(results) -> None:
    counts = {"error": 0, "warning": 0, "info": 0}
    for result in results:
        if result.get("error"):
            print(f"stackctl: {result['error']}", file=sys.stderr)
            counts["error"] += 1
            continue
        for finding in result["findings"]:
            counts[finding.severity] = counts.get(finding.severity, 0) + 1
            print(finding.format())
        if not result["findings"]:
            print(f"{result['file']}: ok")
    sys.stdout.flush()
    skipped = sorted({rule_id for result in results for rule_id in result["skipped"]})
    skip_text = f"; {len(skipped)} rule(s) skipped: {', '.join(skipped)}" if skipped else "; 0 rules skipped"
    print(f"{counts['error']} error(s), {counts['warning']} warning(s) in {len(results)} recipe(s){skip_text}",
          file=sys.stderr)


def parse_fast_args(args: list[str]):
    """Parse `validate` arguments without click; None when anything is unusual (click then handles it)."""
    names, output_format, strict, skip, host = [], "text", False, [], False
    it = iter(args)
    for arg in it:
        if arg == "--strict":
            strict = True
        elif arg in ("--format", "--skip"):
            value = next(it, None)
            if value is None:
                return None
            if arg == "--format":
                output_format = value
            else:
                skip.append(value)
        elif arg == "--host":
            host = True
        elif arg.startswith("--format="):
            output_format = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            return None
        else:
            names.append(arg)
    if not names or output_format not in ("text", "json"):
        return None
    return names, output_format, strict, tuple(skip), host
