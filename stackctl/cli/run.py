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
    from stackctl.runner import build as build_image

    tag, _ = build_image(load_checked(recipe, "build", ignore_errors), wheelhouse=wheelhouse, ca_bundle=ca_bundle, rebuild=rebuild,
                         no_cache=no_cache, say=say)
    click.echo(tag)


@click.command()
@click.argument("recipe")
@site_options
@click.option("--dry-run", is_flag=True, help="Print the pinning decision and the docker-py arguments only.")
@click.option("--timeout", type=float, help="Seconds to wait for /health (default: checks.startup_timeout_s).")
@click.pass_context
def up(ctx, recipe, wheelhouse, ca_bundle, ignore_errors, dry_run, timeout):
    """Build if needed, start RECIPE's server pinned to its GPUs' NUMA node, and wait until it is healthy."""
    from stackctl.cli.common import load_checked
    from stackctl.runner import up as run_up

    ctx.exit(run_up(load_checked(recipe, "up", ignore_errors), wheelhouse=wheelhouse, ca_bundle=ca_bundle, dry_run=dry_run, timeout=timeout,
                    say=say))


@click.command()
@click.argument("recipe")
@click.option("--image", "remove_image", is_flag=True, help="Also remove the stack's images.")
def down(recipe, remove_image):
    """Stop and remove RECIPE's container (and nothing else unless --image)."""
    from stackctl.cli.common import load
    from stackctl.runner import down as run_down

    run_down(load(recipe), remove_image=remove_image, say=say)


@click.command()
@click.argument("recipe", required=False)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def status(recipe, output_format):
    """Show stackctl's containers (all, or RECIPE's): state, image, recipe hash, health, uptime, description."""
    from stackctl.cli.common import load
    from stackctl.runner import status_rows

    rows = status_rows(load(recipe) if recipe else None)
    if output_format == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no stackctl containers")
        return
    header = ("STACK", "STATE", "HEALTH", "UPTIME", "RECIPE HASH", "IMAGE", "DESCRIPTION")
    table = [header] + [(r["stack"], r["state"], r["health"] or "-", _uptime(r["uptime_s"]),
                         (r["recipe_hash"] or "-") + ("" if r["recipe_current"] in (None, True) else " (changed)"),
                         r["image"], r["description"] or "-") for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
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
    from stackctl.stackspec import container_name

    loaded = load(recipe)
    container = dk.find_container(dk.client(), container_name(loaded))
    if container is None:
        raise StackctlError(f"{loaded.stack.name}: no container (fix: stackctl up {recipe})")
    kwargs = {"tail": tail if tail > 0 else "all"}
    if follow:
        for chunk in container.logs(stream=True, follow=True, **kwargs):
            click.echo(chunk.decode(errors="replace"), nl=False)
    else:
        click.echo(container.logs(**kwargs).decode(errors="replace"), nl=False)


def _uptime(seconds) -> str:
    if seconds is None:
        return "-"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
