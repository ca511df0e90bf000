"""`stackctl build`: the stack's image, built only when its build inputs or its base image are new.

The tag is the bundle's (render.image_tag: the hash of the build inputs), so compose.yaml and manifest.json name
the image this builds. The base image's id is recorded in a label: the same `FROM debian:bookworm-slim` over a
newer base image is another image, so a changed base is built again under the same tag.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from collections.abc import Mapping

from stackctl.bundle import render
from stackctl.engine import docker_adapter as dk
from stackctl.errors import StackctlError
from stackctl.state import store


def base_image_id(engine, spec) -> str:
    """The id of the recipe's base image as the engine has it now ("unresolved:NAME" when it has none: the build
    will pull it)."""
    base = spec.base_image
    image = dk.find_image(engine, base)
    return image.id if image is not None else f"unresolved:{base}"


def rebuild_reason(image, base_id: str) -> str | None:
    """Why the image under the stack's tag must be built (again), or None when it is up to date: there is none,
    or it was built from another base image than the engine has now (or from one stackctl did not record)."""
    if image is None:
        return "no image with these build inputs yet"
    built_from = (image.labels or {}).get(dk.LABEL_BASE_ID)
    if built_from != base_id:
        was = built_from.split(":")[-1][:12] if built_from else "unrecorded"
        return f"the base image changed since it was built (built from {was}, now {base_id.split(':')[-1][:12]})"
    return None


def build(spec, *, engine=None, wheelhouse: str | None = None, ca_bundle: str | None = None,
          rebuild: bool = False, no_cache: bool = False, say=print) -> tuple[str, bool]:
    """`stackctl build`: render the bundle and build its image unless it is up to date, under the stack's lock.
    Returns (tag, built)."""
    from stackctl.state.lock import StackLock

    files = render.render_files(spec)
    tag = render.image_tag(spec, files)
    directory = store.stack_dir(spec.name)
    store.ensure_writable(directory)
    with StackLock(directory, spec.name, "build", say=say):
        return build_image(spec, files, tag, engine=engine, wheelhouse=wheelhouse, ca_bundle=ca_bundle,
                           rebuild=rebuild, no_cache=no_cache, say=say)


def build_image(spec, files: Mapping[str, bytes], tag: str, *, engine=None, wheelhouse: str | None = None,
                ca_bundle: str | None = None, rebuild: bool = False, no_cache: bool = False,
                say=print) -> tuple[str, bool]:
    """Build the image `tag` from the bundle `files` (render.image_tag names it by their hash) unless it is up to
    date. Returns (tag, built). The caller holds the stack's lock (`build` above; `up` for its plan)."""
    engine = engine or dk.client()
    base_id = base_image_id(engine, spec)
    why = rebuild_reason(dk.find_image(engine, tag), base_id)
    if not (rebuild or no_cache) and why is None:
        say(f"image {tag} is up to date (same build inputs, same base image): not rebuilding")
        return tag, False
    with tempfile.TemporaryDirectory(prefix="stackctl-build-") as context:
        context_dir = Path(context)
        render.write_bundle(files, context_dir / "bundle")
        labels = {dk.LABEL_STACK: spec.name, dk.LABEL_IMAGE_HASH: render.image_hash(files),
                  dk.LABEL_BASE_IMAGE: spec.base_image, dk.LABEL_BASE_ID: base_id}
        bundle = context_dir / "bundle"
        _add_site_inputs(bundle, spec.recipe, wheelhouse, ca_bundle, say)
        say(f"building {tag} from {spec.base_image}" + (f" ({why})" if why else ""))
        started = time.monotonic()
        try:
            dk.stream_build(engine, dk.build_kwargs(str(bundle), tag, labels, nocache=no_cache))
        except KeyboardInterrupt:  # stream_build has cancelled the build on the engine
            say(f"interrupted during the build of {tag}: build cancelled, no image tagged; the stack's container "
                "(if any) was not touched")
            raise
        say(f"built {tag} in {time.monotonic() - started:.0f} s")
    return tag, True


def use_shipped(spec, tag: str, image_id: str, *, engine=None, say=print) -> tuple[str, bool]:
    """The image a fleet rollout shipped to this host, instead of a build: the stack's tag (up's plan names it)
    must be on this host and be exactly `image_id` (the rollout plan's, built once on the controller). Returns
    (tag, False); refuses otherwise, naming both ids: an image built or loaded here by other means is one nobody
    tested."""
    engine = engine or dk.client()
    image = dk.find_image(engine, tag)
    if image is None:
        raise StackctlError(f"{spec.name}: image {tag} is not on this host, and with --image-id up never "
                            f"builds (fix: ship it here: `stackctl fleet rollout` does, or `docker load` the plan's "
                            f"image {image_id})")
    if image.id != image_id:
        raise StackctlError(f"{spec.name}: image {tag} on this host is {image.id}, not the plan's {image_id}: "
                            "refusing to start an image nobody tested (fix: ship the plan's image again with "
                            "`stackctl fleet rollout`)")
    say(f"image {tag} is the plan's ({image_id.split(':')[-1][:12]}): not building")
    return tag, False


def _add_site_inputs(bundle: Path, recipe, wheelhouse: str | None, ca_bundle: str | None, say) -> None:
    """Copy the site's wheelhouse and CA bundle into the build context (not into the bundle's hash)."""
    wheelhouse = wheelhouse or recipe.build.wheelhouse or os.environ.get("STACKCTL_WHEELHOUSE")
    ca_bundle = ca_bundle or recipe.build.ca_bundle or os.environ.get("STACKCTL_CA_BUNDLE")
    if wheelhouse:
        wheels = sorted(Path(wheelhouse).expanduser().glob("*.whl"))
        if not Path(wheelhouse).expanduser().is_dir():
            raise StackctlError(f"wheelhouse {wheelhouse}: no such directory (fix: build.wheelhouse or "
                                "STACKCTL_WHEELHOUSE must name a folder of .whl files)")
        for wheel in wheels:
            shutil.copy2(wheel, bundle / "wheelhouse" / wheel.name)
        say(f"wheelhouse {wheelhouse}: {len(wheels)} wheel(s)")
    if ca_bundle:
        if not Path(ca_bundle).expanduser().is_file():
            raise StackctlError(f"CA bundle {ca_bundle}: no such file (fix: build.ca_bundle or STACKCTL_CA_BUNDLE)")
        shutil.copy2(Path(ca_bundle).expanduser(), bundle / "ca" / "ca.crt")
        say(f"CA bundle {ca_bundle}")
