"""`stackctl rules`, `stackctl explain ID`, `stackctl schema`: the catalog of what stackctl knows."""

from __future__ import annotations

import json

import click

from stackctl.errors import StackctlError

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from typing import Any


def _all_entries() -> dict:
    """Every documented id: recipe rules, then doctor checks (when the doctor package is present)."""
    from stackctl.rules.ruleset import RULES

    entries: dict[str, tuple[str, Any]] = {rule_id: ("rule", rule) for rule_id, rule in RULES.items()}
    from stackctl.doctor.all_checks import load_all

    CHECKS = load_all()
    entries.update({check_id: ("check", check) for check_id, check in CHECKS.items()})
    return entries


@click.command()
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules(output_format):
    """List every recipe rule with its id, severity and summary."""
    from stackctl.rules.ruleset import RULES

    if output_format == "json":
        from stackctl.knowledge.sources import sources_of

        click.echo(json.dumps([{"id": r.id, "severity": r.severity, "summary": r.summary, "fix": r.fix,
                                "sources": sources_of(r.id)} for r in RULES.values()], indent=2))
        return
    width = max(len(rule_id) for rule_id in RULES)
    for rule in RULES.values():
        click.echo(f"{rule.id:<{width}}  {rule.severity:<7}  {rule.summary}")


@click.command()
@click.argument("rule_id")
def explain(rule_id):
    """Show the doc page of RULE_ID (a recipe rule or a doctor check), with the sources its facts come from."""
    entries = _all_entries()
    if rule_id not in entries:
        import difflib

        close = difflib.get_close_matches(rule_id, list(entries), n=1)
        hint = f"did you mean `{close[0]}`?" if close else "see `stackctl rules` and `stackctl doctor --list`"
        raise StackctlError(f"{rule_id}: unknown rule or check id ({hint})")
    kind, entry = entries[rule_id]
    scope = f", scope {entry.scope}" if kind == "check" else ""
    click.echo(f"{entry.id} ({kind}, {entry.severity}{scope})\n")
    click.echo(f"{entry.summary}\n")
    click.echo(entry.doc)
    click.echo(f"\nFix: {entry.fix}")  # said once, in the rule's or check's fix=; the doc page says why
    from stackctl.knowledge.sources import sources_of

    click.echo("\nSources:")
    for source in sources_of(entry.id) or ["none recorded (stackctl/knowledge/sources.toml)"]:
        click.echo(f"  - {source}")


@click.command()
@click.option("--format", "output_format", type=click.Choice(["json", "markdown"]), default="json",
              show_default=True, help="json: JSON Schema for editors; markdown: the recipe reference.")
def schema(output_format):
    """Print the recipe format as JSON Schema (editors use it for TOML completion) or Markdown."""
    from stackctl.recipe.schema import json_schema, markdown_reference

    if output_format == "markdown":
        click.echo(markdown_reference(), nl=False)
    else:
        click.echo(json.dumps(json_schema(), indent=2))
