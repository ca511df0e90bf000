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
@click.option("--json", "json_output", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write the JSON report to FILE: one run (a --deep one takes minutes) gives the table to read "
                   "and the figures to a program.")
@click.option("--deep", is_flag=True,
              help="Also start a second server per LMCache tier beside the stack: every tier serves a load, and a "
                   "new process finds what the stack stored (hash seed). The stack itself is not touched.")
@click.option("--skip", multiple=True, metavar="ID", help="Skip a check (repeatable).")
@click.option("--fresh", is_flag=True,
              help="Ask the image again (probe, parsers) instead of reusing what doctor kept for it.")
@click.option("--list", "list_checks", is_flag=True, help="List the checks and exit.")
@click.option("--host-root", type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="Judge the host captured in DIR (written by --capture-host: its sysfs/procfs files, laid out as on "
                   "the host) instead of this machine. Host scope only.")
@click.option("--capture-host", type=click.Path(file_okay=False), metavar="DIR",
              help="Copy the files the host checks read (sysfs/procfs facts, device names, the GPU groups, ROCm's "
                   "version; no secrets) into the new directory DIR and exit: send it to whoever supports you.")
@click.pass_context
def doctor(ctx, recipe, scope, output_format, output, json_output, deep, skip, fresh, list_checks, host_root,
           capture_host):
    """Prove RECIPE's stack is what the recipe says. Without RECIPE: check this host for ROCm serving, judged by
    its own GPUs and ROCm.

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
    if capture_host:
        _capture(capture_host)
        return
    scopes = parse_scopes(scope)
    from stackctl.rules.guard_rules import refuse_unknown_skip_ids

    refuse_unknown_skip_ids(skip)
    host = None
    if recipe is None:  # judged by what it is: the stand-in recipe is made from the host's own facts
        from pathlib import Path

        from stackctl.host import discover

        host = discover(Path(host_root or "/"))
    spec = _spec(recipe, host)
    loaded = spec.recipe
    refuse_unknown_skip_ids(loaded.checks.skip, f"{loaded.source}: checks.skip")
    if recipe is None or host_root:
        scopes = ["host"]
    context = DoctorContext(spec, deep=deep, say=lambda m: click.echo(m, err=True), use_cache=not fresh,
                            host_root=host_root)
    if host is not None:
        context.use_host(host)
    results, broken = run_doctor(context, scopes, skip)
    if context.engine_error:  # one line on stderr; the report says which checks it skipped
        click.echo(f"stackctl: {context.engine_error}", err=True)
    report = _report(results, output_format, loaded, scopes)
    if json_output:
        _write(json_output, _report(results, "json", loaded, scopes))
    if output:
        _write(output, report)
    else:
        click.echo(report)
    failed = any(r.status == "fail" for r in results)
    ctx.exit(ExitCode.COULD_NOT_RUN if broken else ExitCode.FAILED if failed else ExitCode.OK)


def _write(path: str, report: str) -> None:
    from pathlib import Path

    from stackctl.cli.init import write_new_file

    write_new_file(Path(path), report + "\n", force=True)
    click.echo(f"wrote {path}", err=True)


def _spec(name, host):
    if name is not None:
        from stackctl.cli.common import load

        return load(name)
    from stackctl.cli.common import spec_of
    from stackctl.doctor.host_recipe import host_recipe

    return spec_of(host_recipe(host))


def _capture(directory: str) -> None:
    from pathlib import Path

    from stackctl.host.capture import capture_host

    written = capture_host(Path(directory))
    click.echo(f"wrote {len(written)} files of this host to {directory}; judge them with "
               f"`stackctl doctor --host-root {directory}`")


def _report(results, output_format, recipe, scopes) -> str:
    from stackctl.doctor import reporters

    if output_format == "json":
        return reporters.as_json(results, {"stack": recipe.stack.name, "recipe": recipe.source, "scopes": scopes})
    if output_format == "junit":
        return reporters.junit(results, f"stackctl doctor {recipe.stack.name}")
    return reporters.table(results, f"stackctl doctor: {recipe.stack.name} ({recipe.source})")
