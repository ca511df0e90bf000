"""`stackctl validate`: schema and rule checks for one or more recipes."""

from __future__ import annotations

import click


@click.command()
@click.argument("recipes", nargs=-1, required=True)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@click.option("--skip", multiple=True, metavar="ID", help="Skip a rule (repeatable).")
@click.option("--host", is_flag=True, help="Also check the tiers against this host's RAM and disk (as doctor does).")
@click.pass_context
def validate(ctx, recipes, output_format, strict, skip, host):
    """Check RECIPES (files or shipped recipe names) and report every finding.

    Exit status: 0 clean (warnings shown), 1 when any recipe has errors (or warnings with --strict).
    """
    from stackctl.validation import validate_and_report

    ctx.exit(validate_and_report(list(recipes), output_format, strict, skip, host))
