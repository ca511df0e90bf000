#!/usr/bin/env python3
"""Regenerate tests/golden/<recipe>/ from recipes/*.toml: the exact bundle `stackctl render` writes.

    python scripts/update-golden.py          # rewrite every golden bundle (then review `git diff tests/golden`)
    python scripts/update-golden.py --check  # exit 1 naming the recipes whose golden files are out of date

Each bundle is written with stackctl's own atomic writer, so files the renderer no longer produces disappear, and
golden folders of recipes that no longer exist are removed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from stackctl.bundle.stackspec import StackSpec

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"


def rendered(recipe_path: Path) -> dict[str, bytes]:
    """The bundle minus the files copied verbatim from probes/, templates/files/ and connector/ (tests compare those with
    their sources directly)."""
    from stackctl.recipe.loader import load_recipe
    from stackctl.bundle.render import copied_sources, render_files

    copied = copied_sources()
    return {name: content for name, content in render_files(StackSpec(load_recipe(recipe_path))).items() if name not in copied}


def on_disk(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report out-of-date golden bundles")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from stackctl.bundle.render import MANIFEST, write_bundle

    recipes = sorted((REPO / "recipes").glob("*.toml"))
    stale = []
    for recipe in recipes:
        files = rendered(recipe)
        target = GOLDEN / recipe.stem
        if on_disk(target) == files:
            continue
        stale.append(recipe.stem)
        if not args.check:
            write_bundle(files, target)
    for folder in sorted(p for p in GOLDEN.iterdir() if p.is_dir()) if GOLDEN.is_dir() else []:
        if folder.name not in {r.stem for r in recipes} and (folder / MANIFEST).is_file():
            stale.append(folder.name)
            if not args.check:
                shutil.rmtree(folder)
    verb = "out of date" if args.check else "updated"
    for name in stale:
        print(f"{verb}: tests/golden/{name}/")
    if not stale:
        print("golden bundles are up to date")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
