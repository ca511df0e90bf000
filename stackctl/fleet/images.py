"""Build once, roll out a digest: the fleet's images are built on the controller, once per recipe, and shipped to
the hosts, which never build (`stackctl up --image-id`). On ROCm the build compiles LMCache for HIP (10-20 minutes
on 2 cores): once, not once per host, and every host runs the bytes the controller built.

Two ways to ship: through a registry the hosts can reach (`--registry HOST:PORT`; the hosts pull by digest), or, for
an air-gapped fleet, `docker save` into one archive per image on the controller, copied to each host over the
Ansible connection and `docker load`ed there (playbooks/roles/stackctl_host/tasks/ship.yml).

An edge: the Docker engine through the adapter, the lifecycle's build, the state directory for the archives.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.state.lock import process_alive

Say = Callable[[str], None]


@dataclass(frozen=True)
class ShippedImage:
    """One image of the rollout: the stack's tag, the image id every host must end up with, and how it travels:
    `archive` (a docker save file on the controller) or `reference` (REGISTRY/REPO@sha256:DIGEST)."""

    tag: str
    id: str
    size: int
    archive: str | None = None
    reference: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def build_once(specs: dict, *, wheelhouse: str | None, ca_bundle: str | None, say: Say) -> tuple[dict, float]:
    """Each distinct recipe's image built (or found current) on the controller: {host: (tag, image id, size)} and
    the seconds it took."""
    from stackctl.engine import docker_adapter as dk
    from stackctl.lifecycle.build import build

    started = time.monotonic()
    engine = dk.client()
    built: dict[str, tuple[str, str, int]] = {}
    per_host = {}
    for host, spec in specs.items():
        key = str(spec.source)
        if key not in built:
            tag, _ = build(spec, engine=engine, wheelhouse=wheelhouse, ca_bundle=ca_bundle, say=say)
            image = dk.find_image(engine, tag)
            if image is None:  # removed between the build and this line, by someone else
                raise StackctlError(f"the image {tag} just built is gone from the engine (fix: run the rollout again)")
            built[key] = (tag, image.id, dk.image_size(image))
        per_host[host] = built[key]
    return per_host, time.monotonic() - started


def ship_by_archive(images: dict, say: Say) -> tuple[dict, float]:
    """`docker save` of each image into the controller's state dir, once per image id (kept for the next rollout of
    the same image, written under a temporary name and renamed whole): {host: ShippedImage}, seconds."""
    from stackctl.engine import docker_adapter as dk
    from stackctl.state.store import fleet_dir

    started = time.monotonic()
    engine = dk.client()
    folder = fleet_dir() / "images"
    folder.mkdir(parents=True, exist_ok=True)
    shipped: dict[str, ShippedImage] = {}
    for host, (tag, image_id, size) in images.items():
        archive = folder / f"{image_id.split(':')[-1][:16]}.tar"
        if not archive.is_file():
            partial = archive.with_name(f".{archive.name}.{os.getpid()}.part")
            say(f"ship: docker save {tag} ({size / 1e9:.2f} GB) -> {archive}")
            try:
                with open(partial, "wb") as out:
                    for chunk in dk.save_image(engine, tag):
                        out.write(chunk)
                os.replace(partial, archive)
            finally:
                partial.unlink(missing_ok=True)
        shipped[host] = ShippedImage(tag, image_id, size, archive=str(archive))
    return shipped, time.monotonic() - started


def ship_by_registry(images: dict, registry: str, auth: dict | None, say: Say) -> tuple[dict, float]:
    """Each image pushed to `registry` (HOST:PORT) once; hosts pull it by digest. Credentials (`auth`) come from the
    environment only (registry_auth), never from the inventory. {host: ShippedImage}, seconds."""
    from stackctl.engine import docker_adapter as dk

    started = time.monotonic()
    engine = dk.client()
    pushed: dict[str, str] = {}
    shipped = {}
    for host, (tag, image_id, size) in images.items():
        if image_id not in pushed:
            repository = f"{registry}/{tag.split(':')[0]}"
            version = tag.split(":")[-1]
            dk.add_tag(engine, tag, repository, version)
            say(f"ship: docker push {repository}:{version} ({size / 1e9:.2f} GB)")
            try:
                digest = dk.push(engine, repository, version, auth)
            finally:  # the registry's name goes again: `status` and compose name the image by the stack's tag
                dk.untag(engine, f"{repository}:{version}")
            pushed[image_id] = f"{repository}@{digest}"
        shipped[host] = ShippedImage(tag, image_id, size, reference=pushed[image_id])
    return shipped, time.monotonic() - started


def hand_credentials_to_hosts(auth: dict | None) -> Path | None:
    """The registry credentials, for the hosts' `docker login`, in a file only root reads (a private temporary
    folder outside the run folder), and out of this process's environment: ansible-runner writes its whole
    environment into its artifacts (artifacts/ID/command), so the playbook reads the file instead
    (playbooks/roles/stackctl_host/tasks/ship.yml, no_log). The caller removes it with forget_credentials; one that a
    killed rollout left is removed here first (remove_abandoned_credentials)."""
    import json
    import tempfile

    for name in ("STACKCTL_REGISTRY_USER", "STACKCTL_REGISTRY_PASSWORD"):
        os.environ.pop(name, None)
    remove_abandoned_credentials(Path(tempfile.gettempdir()))
    if auth is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix=f"{_CREDENTIALS_PREFIX}{os.getpid()}-"))
    path = folder / "login.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(auth, handle)
    return path


_CREDENTIALS_PREFIX = "stackctl-registry-"


def remove_abandoned_credentials(folder: Path) -> None:
    """A rollout killed outright (SIGKILL, a lost session) cannot remove its login file: the next rollout removes
    each one whose rollout process is gone (the folder's name carries that process's id)."""
    import shutil

    for found in folder.glob(f"{_CREDENTIALS_PREFIX}*"):
        pid = found.name[len(_CREDENTIALS_PREFIX):].split("-")[0]
        if found.is_dir() and (not pid.isdigit() or not process_alive(int(pid))):
            shutil.rmtree(found, ignore_errors=True)


def forget_credentials(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)
        path.parent.rmdir()


def registry_auth() -> dict | None:
    """Registry credentials from the environment, or None (a registry without authentication)."""
    user, password = os.environ.get("STACKCTL_REGISTRY_USER"), os.environ.get("STACKCTL_REGISTRY_PASSWORD")
    if bool(user) != bool(password):
        raise StackctlError("STACKCTL_REGISTRY_USER and STACKCTL_REGISTRY_PASSWORD: set both or neither (fix: "
                            "export the registry's user and password in the shell that runs stackctl)")
    return {"username": user, "password": password} if user else None
