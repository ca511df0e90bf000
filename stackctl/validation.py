"""Validate recipes and report: the core of `stackctl validate`, kept free of click so the command starts fast."""

from __future__ import annotations

import sys

from stackctl.errors import RecipeError, StackctlError


def validate_and_report(names: list[str], output_format: str = "text", strict: bool = False,
                        skip: tuple = ()) -> int:
    """Check each recipe, print the findings, return the exit status (0 clean, 1 errors or strict warnings)."""
    from stackctl.cli.common import resolve_recipe_path
    from stackctl.recipe import load_recipe
    from stackctl.recipe.rules import run_rules

    results = []
    for name in names:
        try:
            path = resolve_recipe_path(name)
            findings = run_rules(load_recipe(path), skip)
        except RecipeError as exc:
            path, findings = name, exc.findings
        except StackctlError as exc:
            if len(names) == 1:
                raise
            results.append({"file": name, "findings": [], "error": str(exc)})
            continue
        results.append({"file": str(path), "findings": findings})

    failing = {"error", "warning"} if strict else {"error"}
    failed = any(r.get("error") or any(f.severity in failing for f in r["findings"]) for r in results)
    if output_format == "json":
        import json

        payload = [{"file": r["file"], "error": r.get("error"),
                    "findings": [f.to_dict() for f in r["findings"]]} for r in results]
        print(json.dumps(payload, indent=2))
    else:
        _print_text(results)
    return 1 if failed else 0


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
    print(f"{counts['error']} error(s), {counts['warning']} warning(s) in {len(results)} recipe(s)", file=sys.stderr)


def parse_fast_args(args: list[str]):
    """Parse `validate` arguments without click; None when anything is unusual (click then handles it)."""
    names, output_format, strict, skip = [], "text", False, []
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
        elif arg.startswith("--format="):
            output_format = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            return None
        else:
            names.append(arg)
    if not names or output_format not in ("text", "json"):
        return None
    return names, output_format, strict, tuple(skip)
