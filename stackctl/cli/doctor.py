"""`stackctl doctor`: host, image and live-server checks, as a table, JSON or JUnit."""

from __future__ import annotations

import click


@click.command()
@click.argument("recipe", required=False)
@click.option("--scope", default="host,image,server", show_default=True,
              help="Comma-separated scopes: host, image, server.")
@click.option("--format", "output_format", type=click.Choice(["table", "json", "junit"]), default="table",
              show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the report here (e.g. junit.xml).")
@click.option("--deep", is_flag=True,
              help="Also start a second server per LMCache tier beside the stack: every tier serves a load, and a "
                   "new process finds what the stack stored (hash seed). The stack itself is not touched.")
@click.option("--skip", multiple=True, metavar="ID", help="Skip a check (repeatable).")
@click.option("--fresh", is_flag=True,
              help="Ask the image again (probe, parsers) instead of reusing what doctor kept for it.")
@click.option("--list", "list_checks", is_flag=True, help="List the checks and exit.")
@click.pass_context
def doctor(ctx, recipe, scope, output_format, output, deep, skip, fresh, list_checks):
    """Prove RECIPE's stack is what the recipe says. Without RECIPE: check this host for ROCm serving.

    Exit status: 0 no check failed, 1 a check failed or the input is wrong (recipe, options, -o path), 2 doctor
    could not run (no engine, a crashed check).
    """
    from stackctl.doctor import run_doctor
    from stackctl.doctor.context import DoctorContext
    from stackctl.doctor.all_checks import load_all
    from stackctl.doctor.registry import parse_scopes
    from stackctl.errors import ExitCode

    if list_checks:
        for check in load_all().values():
            click.echo(f"{check.id:<28} {check.scope:<6} {check.severity:<7} {check.summary}")
        return
    scopes = parse_scopes(scope)
    from stackctl.rules.guard_rules import refuse_unknown_skip_ids

    refuse_unknown_skip_ids(skip)
    loaded = _recipe(recipe)
    refuse_unknown_skip_ids(loaded.checks.skip, f"{loaded.source}: checks.skip")
    if recipe is None:
        scopes = ["host"]
    context = DoctorContext(loaded, deep=deep, say=lambda m: click.echo(m, err=True), use_cache=not fresh)
    results, broken = run_doctor(context, scopes, skip)
    if context.engine_error:  # one line on stderr; the report says which checks it skipped
        click.echo(f"stackctl: {context.engine_error}", err=True)
    report = _report(results, output_format, loaded, scopes)
    if output:
        from pathlib import Path

        from stackctl.cli.init import write_new_file

        write_new_file(Path(output), report + "\n", force=True)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(report)
    failed = any(r.status == "fail" for r in results)
    ctx.exit(ExitCode.COULD_NOT_RUN if broken else ExitCode.FAILED if failed else ExitCode.OK)


def _recipe(name):
    if name is not None:
        from stackctl.cli.common import load

        return load(name)
    from stackctl.recipe import load_recipe_text

    return load_recipe_text('[stack]\nname = "this-host"\nplatform = "rocm"\n[model]\npath = "/dev/null"\n',
                            "<host defaults>")


def _report(results, output_format, recipe, scopes) -> str:
    from stackctl.doctor import reporters

    if output_format == "json":
        return reporters.as_json(results, {"stack": recipe.stack.name, "recipe": recipe.source, "scopes": scopes})
    if output_format == "junit":
        return reporters.junit(results, f"stackctl doctor {recipe.stack.name}")
    return reporters.table(results, f"stackctl doctor: {recipe.stack.name} ({recipe.source})")
