"""`stackctl build | up | down | status | logs`: the stack lifecycle on a Docker engine."""

from __future__ import annotations

import json

import click

_site_options = [
    click.option("--wheelhouse", type=click.Path(file_okay=False), envvar="STACKCTL_WHEELHOUSE",
                 help="Folder of wheels pip may use in the build (also STACKCTL_WHEELHOUSE)."),
    click.option("--ca-bundle", type=click.Path(dir_okay=False), envvar="STACKCTL_CA_BUNDLE",
                 help="CA bundle for pip inside the build (also STACKCTL_CA_BUNDLE)."),
    click.option("--ignore-errors", is_flag=True,
                 help="Go ahead despite rule errors (said loudly, recorded in manifest.json)."),
]


def site_options(func):
    for option in reversed(_site_options):
        func = option(func)
    return func


def say(message: str) -> None:
    click.echo(message, err=True)


@click.command()
@click.argument("recipe")
@site_options
@click.option("--rebuild", is_flag=True, help="Build even when an image with the same hash exists.")
@click.option("--no-cache", is_flag=True, help="Rebuild every layer (implies --rebuild).")
def build(recipe, wheelhouse, ca_bundle, ignore_errors, rebuild, no_cache):
    """Build RECIPE's image (tag stackctl/NAME:HASH); reuse an existing one with the same build inputs."""
    from stackctl.cli.common import load_checked
    from stackctl.lifecycle.build import build as build_image

    tag, _ = build_image(load_checked(recipe, "build", ignore_errors), wheelhouse=wheelhouse, ca_bundle=ca_bundle, rebuild=rebuild,
                         no_cache=no_cache, say=say)
    click.echo(tag)


@click.command()
@click.argument("recipe")
@site_options
@click.option("--dry-run", is_flag=True, help="Print the pinning decision and the docker-py arguments only.")
@click.option("--timeout", type=float, help="Seconds to wait for /health (default: checks.startup_timeout_s).")
@click.option("--gate", metavar="SCOPES", help="Also require `stackctl doctor --scope SCOPES` to pass (e.g. server).")
@click.option("--no-rollback", is_flag=True,
              help="When the new server fails, do not bring the previous one back (the stack is left down).")
@click.option("--image-id", metavar="ID",
              help="Never build: run the stack's image only if it is this one (sha256:...), as `fleet rollout` "
                   "ships it; refused, naming both, when the image here differs.")
@click.pass_context
def up(ctx, recipe, wheelhouse, ca_bundle, ignore_errors, dry_run, timeout, gate, no_rollback, image_id):
    """Build if needed, start RECIPE's server pinned to its GPUs' NUMA node, and wait until it is healthy.

    A running stack is replaced safely: the previous container is kept until the new one is healthy (and passes
    --gate); if it is not, the previous one comes back and up exits 1 naming the failing check.
    """
    from stackctl.cli.common import load_checked
    from stackctl.lifecycle.plan import plan_up
    from stackctl.lifecycle.up import up as run_up

    gate_check = None
    if gate:
        from stackctl.doctor.gate import gate_for

        gate_check = gate_for(gate)  # up runs doctor through it: the lifecycle does not import doctor
    plan = plan_up(load_checked(recipe, "up", ignore_errors), check_host=not dry_run)
    ctx.exit(run_up(plan, wheelhouse=wheelhouse, ca_bundle=ca_bundle, dry_run=dry_run, timeout=timeout, say=say,
                    rollback=not no_rollback, gate=gate_check, image_id=image_id))


@click.command()
@click.argument("recipe")
@click.option("--timeout", type=float, help="Seconds to wait for /health (default: checks.startup_timeout_s).")
@click.pass_context
def rollback(ctx, recipe, timeout):
    """Return RECIPE's stack to the deployment before the running one (from `status --history`)."""
    from stackctl.cli.common import load
    from stackctl.lifecycle.status import status_rows
    from stackctl.lifecycle.plan import plan_up
    from stackctl.lifecycle.up import rollback_recipe, up

    loaded = load(recipe)
    running = [r["recipe_hash"] for r in status_rows(loaded) if r["container"] == loaded.container_name
               and r["state"] == "running"]
    target = rollback_recipe(loaded, running[0] if running else None)
    say(f"rolling back to {target}")
    ctx.exit(up(plan_up(load(target)), timeout=timeout, say=say, command="rollback"))


@click.command()
@click.argument("recipe")
@click.option("--image", "remove_image", is_flag=True, help="Also remove the stack's images.")
def down(recipe, remove_image):
    """Stop and remove RECIPE's container (and nothing else unless --image)."""
    from stackctl.cli.common import load
    from stackctl.lifecycle.down import down as run_down

    run_down(load(recipe), remove_image=remove_image, say=say)


@click.command()
@click.argument("recipe", required=False)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--history", is_flag=True, help="With RECIPE: also list its last deployments and their outcomes.")
def status(recipe, output_format, history):
    """Show stackctl's containers (all, or RECIPE's): state, image, recipe hash, health, uptime, description; for a
    stopped server, why it stopped."""
    from stackctl.cli.common import load
    from stackctl.errors import StackctlError
    from stackctl.state.store import read_history
    from stackctl.lifecycle.status import status_rows

    if history and not recipe:
        raise StackctlError("--history needs a RECIPE (fix: stackctl status RECIPE --history)")
    loaded = load(recipe) if recipe else None
    rows = status_rows(loaded)
    entries = read_history(loaded.name) if history else []
    if output_format == "json":
        click.echo(json.dumps({"containers": rows, "history": entries} if history else rows, indent=2))
        return
    if not rows:
        click.echo("no stackctl containers")
    else:
        header = ("STACK", "STATE", "HEALTH", "UPTIME", "RECIPE HASH", "IMAGE", "DESCRIPTION")
        table = [header] + [(r["stack"], r["state"], r["health"] or "-", _uptime(r["uptime_s"]),
                             (r["recipe_hash"] or "-") + ("" if r["recipe_current"] in (None, True) else " (changed)"),
                             r["image"], r["description"] or "-") for r in rows]
        _print_table(table)
        for r in rows:
            if r["stopped_because"]:
                click.echo(f"{r['container']}: {r['stopped_because']}")
            if r["newer_base"]:
                click.echo(f"{r['container']}: {r['newer_base']}")
    if history:
        click.echo("")
        click.echo(f"history of {loaded.name} (oldest first):")
        _print_table([("TIME", "COMMAND", "OUTCOME", "RECIPE HASH", "IMAGE", "DETAIL")] + [
            (e.get("time", "-"), e.get("command", "-"), e.get("outcome", "-"), e.get("recipe_hash", "-"),
             e.get("image", "-"), e.get("detail", "")) for e in entries])


def _print_table(table: list) -> None:
    widths = [max(len(str(row[i])) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


@click.command()
@click.argument("recipe")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("--tail", type=int, default=200, show_default=True, help="Lines to show first (0: all).")
def logs(recipe, follow, tail):
    """Show the server log of RECIPE's container."""
    from stackctl.cli.common import load
    from stackctl.engine import docker_adapter as dk
    from stackctl.errors import StackctlError

    loaded = load(recipe)
    container = dk.find_container(dk.client(), loaded.container_name)
    if container is None:
        raise StackctlError(f"{loaded.name}: no container (fix: stackctl up {recipe})")
    kwargs = {"tail": tail if tail > 0 else "all"}
    if follow:
        for text in dk.follow_logs(container, **kwargs):
            click.echo(text, nl=False)
    else:
        click.echo(dk.logs_text(container, **kwargs), nl=False)


def _uptime(seconds) -> str:
    if seconds is None:
        return "-"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
