"""`stackctl init`: start a recipe from a shipped preset, or import an existing launch command."""

from __future__ import annotations

import os
from pathlib import Path

import click

from stackctl.errors import StackctlError


@click.command()
@click.option("--preset", metavar="NAME", help="Shipped recipe to start from (see --list).")
@click.option("--from-command", "from_command", type=click.Path(dir_okay=False),
              help="Shell launch script (env assignments + `vllm serve ...` or `docker run ...`) to import.")
@click.option("--lmcache-config", type=click.Path(dir_okay=False), help="LMCache YAML to import with --from-command.")
@click.option("--name", help="Stack name for an imported recipe.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of standard output.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--list", "list_presets", is_flag=True, help="List the presets.")
def init(preset, from_command, lmcache_config, name, output, force, list_presets):
    """Write a commented recipe from a preset, or from an existing launch command."""
    from stackctl.recipe.locate import shipped_recipe_names
    from stackctl.resources import shipped

    if list_presets:
        rows = [(name, *preset_summary(shipped("recipes") / f"{name}.toml")) for name in shipped_recipe_names()]
        width = max(len(name) for name, _, _ in rows)
        for name, platform, description in rows:
            click.echo(f"{name:<{width}}  {platform:<4}  {description}")
        click.echo("\nstackctl init --preset NAME -o my.toml writes one, with its comments.")
        return
    if bool(preset) == bool(from_command):
        raise StackctlError("init: give exactly one of --preset NAME or --from-command FILE (see --list)")
    if preset:
        if preset not in shipped_recipe_names():
            raise StackctlError(f"init: unknown preset {preset!r} (fix: one of {', '.join(shipped_recipe_names())})")
        text = (shipped("recipes") / f"{preset}.toml").read_text()
    else:
        from stackctl.importer import import_launch

        text = import_launch(Path(from_command), Path(lmcache_config) if lmcache_config else None, name)
    if not output:
        click.echo(text, nl=False)
        return
    write_new_file(Path(output), text, force)
    click.echo(f"wrote {output}; next: stackctl validate {output}", err=True)


def preset_summary(path: Path) -> tuple[str, str]:
    """(platform, what it is) of a shipped recipe: its stack.description, whole (else the first sentence of its
    header comment)."""
    from stackctl import toml_parser

    stack = toml_parser.loads(path.read_text(encoding="utf-8")).get("stack", {})
    description = stack.get("description", "")
    if not description:
        header = " ".join(line.lstrip("# ").strip() for line in path.read_text().splitlines()
                          if line.startswith("#")) or "(no description)"
        description = header.split(". ")[0].rstrip(".") + "."
    return stack.get("platform", "rocm"), description


def write_new_file(path: Path, text: str, force: bool) -> None:
    """Write atomically; refuse to overwrite unless forced (nothing is lost)."""
    if path.exists() and not force:
        raise StackctlError(f"{path}: already exists (fix: choose another -o or pass --force)")
    if path.is_dir():
        raise StackctlError(f"{path}: is a directory (fix: give a file name to -o)")
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True) if tmp.parent.is_dir() else None
        raise StackctlError(f"{path}: cannot write: {exc.strerror or exc} (fix: choose a writable -o path whose "
                            "parent is a directory)") from None
