"""`stackctl render`: write the deployment bundle for a recipe."""

from __future__ import annotations

import click


@click.command()
@click.argument("recipe")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Bundle directory (created or replaced atomically).")
@click.option("--ignore-errors", is_flag=True,
              help="Render despite rule errors (said loudly, recorded in manifest.json). Secrets are never written.")
def render(recipe, out_dir, ignore_errors):
    """Write RECIPE's bundle: Dockerfile, serve.sh, lmcache.yaml, stack.env, compose.yaml, manifest.json."""
    import json
    from pathlib import Path

    from stackctl.cli.common import load_checked
    from stackctl.bundle.render import MANIFEST
    from stackctl.bundle.render import render as render_bundle

    bundle = render_bundle(load_checked(recipe, "render", ignore_errors), Path(out_dir))
    manifest = json.loads((bundle / MANIFEST).read_text())
    click.echo(f"wrote {bundle}/ ({len(manifest['files'])} files); image {manifest['image']}")
