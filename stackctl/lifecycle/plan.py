"""What `up` acts on, derived once before it acts: the bundle, the image's tag, the container's arguments, the
pinning and what is said of it. `up --dry-run` prints a plan; `up` runs one (lifecycle/up.py), and the build and
the gate read the bundle and tag from it instead of deriving them again.

Deriving reads this host (its facts, and the secret variables the recipe names) and changes nothing. Only the dtype
of a CPU stack is decided later, once the image is built: it is measured in that image (up.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any
from collections.abc import Mapping

from stackctl.bundle import render
from stackctl.engine.container import container_kwargs, read_secrets
from stackctl.errors import StackctlError
from stackctl.host import PinningError, discover, pinning_for
from stackctl.host.placement import placement
from stackctl.knowledge.kinds import platform_of
from stackctl.state import store

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from stackctl.bundle.stackspec import StackSpec
    from stackctl.host.facts import HostFacts
    from stackctl.host.pinning import PinningDecision


@dataclass(frozen=True)
class UpPlan:
    spec: StackSpec                 # the recipe as the stack runs it: what the build and the gate read
    facts: HostFacts                # this host, as read once (the dtype decision reads its CPU features)
    files: Mapping[str, bytes]      # the bundle
    tag: str                        # the image the bundle names (render.image_tag)
    container: Mapping[str, Any]    # the container's docker-py arguments, secrets' values included
    secret_names: tuple[str, ...]   # the container variables that hold a secret: never printed
    cpuset: Mapping[str, str]       # the container's CPU set, {} when not pinned (the matmul probe runs on it)
    notes: tuple[str, ...]          # what up says of the plan before it acts (the pinning decision)
    bundle_dir: Path                # where the bundle is kept while the container runs (mounted read-only)

    @property
    def stack(self) -> str:
        return self.spec.name

    @property
    def container_name(self) -> str:
        return str(self.container["name"])

    @property
    def recipe_hash(self) -> str:
        return self.spec.recipe_hash

    def container_args(self, environment: Mapping[str, str]) -> dict[str, Any]:
        """The arguments to run the container with, the plan's environment updated with `environment` (the
        dtype decision): a fresh copy, so the plan stays as derived."""
        args = dict(self.container)
        args["environment"] = {**self.container["environment"], **environment}
        return args

    def printable(self, environment: Mapping[str, str]) -> str:
        """The container's arguments as JSON, each secret's value replaced by where it comes from."""
        shown = json.loads(json.dumps(self.container_args(environment)))
        for name in self.secret_names:
            if name in shown["environment"]:
                shown["environment"][name] = "<secret: read at run time>"
        return json.dumps(shown, indent=2, sort_keys=True)


def plan_up(spec: StackSpec, *, check_host: bool = True, facts: HostFacts | None = None) -> UpPlan:
    """Derive the plan of `up` for `spec` on this host. check_host=False (a dry run) neither refuses a ROCm stack on
    a host without GPUs nor reads the secret variables."""
    recipe = spec.recipe
    files = render.render_files(spec)
    facts = facts if facts is not None else discover()
    if check_host:
        _refuse_without_gpus(recipe, facts)
    try:
        pinning = pinning_for(recipe, facts)
    except PinningError as exc:
        raise exc.located(recipe) from None
    secrets = read_secrets(spec) if check_host else {name: "" for name in spec.secret_references}
    groups = {group.name: group.gid for group in facts.devices.groups if group.gid is not None}
    bundle_dir = store.deployment_dir(spec.name, spec.recipe_hash) / "bundle"
    container = container_kwargs(spec, files, bundle_dir, pinning, groups, secrets)
    place = placement(pinning)
    return UpPlan(spec=spec, facts=facts, files=MappingProxyType(files), tag=container["image"],
                  container=MappingProxyType(container), secret_names=tuple(secrets),
                  cpuset=MappingProxyType(dict(place.cpuset)),
                  notes=_pinning_notes(pinning, place, [*spec.server_command, *spec.serve_args]),
                  bundle_dir=bundle_dir)


def _pinning_notes(pinning: PinningDecision, place, server_argv: list[str]) -> tuple[str, ...]:
    """The decision, its reasons and warnings, the cpuset and the exact launcher line serve.sh will run."""
    cpuset = " ".join(f"{key}={value}" for key, value in place.cpuset.items()) or "none (not pinned)"
    return (*(f"pinning: {reason}" for reason in pinning.reasons),
            *(f"pinning: warning: {warning}" for warning in pinning.warnings),
            f"pinning: cpuset: {cpuset}", f"pinning: launcher: {place.command_line(server_argv)}")


def _refuse_without_gpus(recipe, facts) -> None:
    """Say before an hour-long build, not after it, that this host cannot run a ROCm stack."""
    if not platform_of(recipe).has_gpus:
        return
    if not facts.devices.kfd:
        raise StackctlError(f"{recipe.source}: platform rocm but /dev/kfd is missing on this host (fix: load the "
                            f"amdgpu driver; `stackctl doctor {recipe.source} --scope host` shows the host checks)")
    if len(facts.gpus) < recipe.model.tensor_parallel:
        raise StackctlError(f"{recipe.source}: model.tensor_parallel = {recipe.model.tensor_parallel} but this host "
                            f"has {len(facts.gpus)} AMD GPU(s) (fix: lower tensor_parallel or run on a bigger host)")
