"""`stackctl plan`: KV-cache capacity per tier and the regime a workload falls in."""

from __future__ import annotations

import click


@click.command()
@click.argument("recipe")
@click.option("--users", type=click.IntRange(min=1), default=32, show_default=True, help="Concurrent sessions.")
@click.option("--context", "context_tokens", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Context tokens per session.")
@click.option("--gpu", help="GPU product (e.g. MI300X) when the host has none to probe.")
@click.option("--host-ram", "host_ram_gib", type=click.FloatRange(min=1, max=1048576), metavar="GIB",
              help="RAM of the serving host in GiB (default: this machine's, which the plan names).")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def plan(recipe, users, context_tokens, gpu, host_ram_gib, output_format):
    """How many tokens of KV fit in HBM and each tier, the working set of USERS x CONTEXT, and what follows."""
    import json

    from stackctl.cli.common import load
    from stackctl.host import discover
    from stackctl.plan import format_text, plan_recipe

    host_ram = int(host_ram_gib * 2**30) if host_ram_gib else None
    result = plan_recipe(load(recipe).recipe, users=users, context_tokens=context_tokens, gpu=gpu, host=discover(),
                         host_ram_bytes=host_ram)
    click.echo(json.dumps(result.to_dict(), indent=2) if output_format == "json" else format_text(result))
