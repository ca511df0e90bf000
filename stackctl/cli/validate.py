"""`stackctl validate`: schema and rule checks for one or more recipes."""

from __future__ import annotations

import json

import click

from stackctl.errors import RecipeError, StackctlError


@click.command()
@click.argument("recipes", nargs=-1, required=True)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@click.option("--skip", multiple=True, metavar="ID", help="Skip a rule (repeatable).")
@click.pass_context
def validate(ctx, recipes, output_format, strict, skip):
    """Check RECIPES (files or shipped recipe names) and report every finding.

    Exit status: 0 clean (warnings shown), 1 when any recipe has errors (or warnings with --strict).
    """
    from stackctl.cli.common import resolve_recipe_path
    from stackctl.recipe import load_recipe
    from stackctl.recipe.rules import run_rules

    results = []
    for name in recipes:
        try:
            path = resolve_recipe_path(name)
            findings = run_rules(load_recipe(path), skip)
        except RecipeError as exc:
            path, findings = name, exc.findings
        except StackctlError as exc:
            if len(recipes) == 1:
                raise
            results.append({"file": name, "findings": [], "error": str(exc)})
            continue
        results.append({"file": str(path), "findings": findings})

    failing = {"error", "warning"} if strict else {"error"}
    failed = any(r.get("error") or any(f.severity in failing for f in r["findings"]) for r in results)
    if output_format == "json":
        payload = [{"file": r["file"], "error": r.get("error"),
                    "findings": [f.to_dict() for f in r["findings"]]} for r in results]
        click.echo(json.dumps(payload, indent=2))
    else:
        _print_text(results)
    ctx.exit(1 if failed else 0)


def _print_text(results) -> None:
    counts = {"error": 0, "warning": 0, "info": 0}
    for result in results:
        if result.get("error"):
            click.echo(f"stackctl: {result['error']}", err=True)
            counts["error"] += 1
            continue
        for finding in result["findings"]:
            counts[finding.severity] = counts.get(finding.severity, 0) + 1
            click.echo(finding.format())
        if not result["findings"]:
            click.echo(f"{result['file']}: ok")
    summary = f"{counts['error']} error(s), {counts['warning']} warning(s) in {len(results)} recipe(s)"
    click.echo(summary, err=True)
