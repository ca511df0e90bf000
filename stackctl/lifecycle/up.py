"""`stackctl up`: render the bundle into the stack's state directory (mounted read-only into the container, so
runtime tuning never touches the image), build the image when it is not up to date, run the container pinned to
the GPUs' NUMA node, and wait for /health. Idempotent: an unchanged running stack is left alone; a changed recipe
replaces the container.

One `up` runs as a transaction: the previous container is kept (stopped, renamed NAME-previous) until its
replacement is healthy and passes the gate; if the replacement fails, or Ctrl-C arrives, the replacement is removed
(its log kept) and the previous container comes back under its own name.

Steps that must happen together run shielded from Ctrl-C (state/signals.py); a Ctrl-C elsewhere lands in one
handler that cleans up and says what state the stack is in. Every outcome is a line in the stack's history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from stackctl.bundle.render import write_bundle
from stackctl.engine import docker_adapter as dk
from stackctl.errors import ExitCode, StackctlError
from stackctl.state import store
from stackctl.lifecycle.build import build_image, use_shipped
from stackctl.engine.health import (
    health_url,
    save_failure_log,
    served_address,
    stop_reason,
    wait_for_health,
    wait_healthy,
)
from stackctl.state.lock import StackLock
from stackctl.lifecycle.preflight import (
    ensure_ports_free,
    ensure_tier_files_readable,
    ensure_tier_paths_writable,
)
from stackctl.state.signals import shielded

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from stackctl.bundle.stackspec import StackSpec
    from stackctl.lifecycle.plan import UpPlan

# What `up --gate` runs once the new server is healthy: (stack spec, bundle files, say) -> None, raising to refuse.
Gate = Callable[[Any, Mapping, Any], None]


def up(plan: UpPlan, *, wheelhouse=None, ca_bundle=None, dry_run=False, timeout: float | None = None,
       say=print, rollback: bool = True, gate: Gate | None = None, command: str = "up",
       image_id: str | None = None) -> int:
    """Bring up the stack `plan` describes (lifecycle/plan.py plan_up: derived once by the caller).

    gate: called with (spec, the bundle files, say) once the new server is healthy; it raises StackctlError
    to refuse the deployment (the CLI passes doctor's, stackctl/doctor/gate.py). The build and the gate take the
    plan's bundle. image_id: never build; run the stack's tag only when it is this image (what a fleet rollout
    shipped, lifecycle/build.py use_shipped)."""
    for note in plan.notes:
        say(note)
    if dry_run:
        decision = _decide_dtype(plan, say)  # from the CPU flags: nothing is measured in a dry run
        print(plan.printable(decision.environment() if decision is not None else {}))
        return ExitCode.OK

    engine = dk.client()
    directory = store.stack_dir(plan.stack)
    store.ensure_writable(directory)
    with StackLock(directory, plan.stack, command, say=say):
        deployment = Deployment(plan, engine, say, rollback=rollback, gate=gate, command=command,
                                timeout=timeout or plan.spec.recipe.checks.startup_timeout_s)
        if image_id:
            return deployment.run(lambda: use_shipped(plan.spec, plan.tag, image_id, engine=engine, say=say))
        return deployment.run(lambda: build_image(plan.spec, plan.files, plan.tag, engine=engine, wheelhouse=wheelhouse,
                                                  ca_bundle=ca_bundle, say=say))


def _decide_dtype(plan: UpPlan, say, engine=None, image=None):
    """The CPU stack's dtype decision (host/dtype.py), from this host's matmul figures measured in the built image
    when there is one, else from the CPU flags; it is said here, and the caller adds its variables to the container's
    environment. None on a GPU platform (vLLM decides there)."""
    from stackctl.host.dtype import decide_dtype
    from stackctl.measure.matmul import measure

    if not plan.spec.platform.cpu_computes:
        return None
    environment = plan.container["environment"]
    isa = plan.facts.isa.for_environment(environment)
    measured, note = None, ""
    if image is not None:
        try:
            measured = measure(engine, image.id, environment=dict(plan.spec.environment), cpuset=dict(plan.cpuset),
                               isa=isa.to_dict(), stack=plan.stack)
        except (ValueError, StackctlError) as exc:
            note = f" (matmul probe: {_first_line(str(exc))})"
    decision = decide_dtype(plan.spec.recipe, isa, measured)
    warning = "warning: " if decision.emulated else ""
    say(f"dtype: {warning}{decision.reason}{note}")
    return decision


# -- the transaction --------------------------------------------------------------------------------------------

PREVIOUS_SUFFIX = "-previous"


class Deployment:
    def __init__(self, plan: UpPlan, engine, say, *, rollback: bool, gate: Gate | None, command: str,
                 timeout: float):
        self.plan, self.spec, self.recipe, self.files = plan, plan.spec, plan.spec.recipe, plan.files
        self.kwargs = plan.container_args({})  # the container's arguments, with the dtype decided after the build
        self.engine, self.say = engine, say
        self.dtype: dict | None = None  # the dtype decision, recorded in the history
        self.rollback, self.gate, self.command, self.timeout = rollback, gate, command, timeout
        self.name, self.stack, self.recipe_hash = plan.container_name, plan.stack, plan.recipe_hash
        # docker-py containers (untyped)
        self.previous: Any = None   # the container that ran before, while it is set aside
        self.container: Any = None  # the replacement
        self.untouched: Any = None  # the running container, until it is set aside

    # -- the transaction ----------------------------------------------------------------------------------------

    def run(self, build) -> int:
        current = self._current()
        # Before the build (minutes), the checks that need no image: the tiers' directories, and the port when no
        # container of this stack holds it.
        ensure_tier_paths_writable(self.recipe)
        ensure_tier_files_readable(self.recipe)
        if current is None or current.status != "running":
            ensure_ports_free(self.spec, self.stack)
        try:
            tag, _ = build()
        except KeyboardInterrupt:
            self._record("interrupted", detail="build: interrupted (Ctrl-C)")
            self.say(f"{self.stack}: {self._describe(current)}")
            raise
        except StackctlError as failure:
            self._record("failed", detail=f"build: {_first_line(str(failure))}")
            raise
        self.kwargs["image"] = tag
        image = dk.find_image(self.engine, tag)
        if image is not None:
            self._decide_dtype(image)
        if current is not None and current.status == "running" and \
                current.labels.get(dk.LABEL_RECIPE_HASH) == self.recipe_hash and \
                image is not None and dk.container_image_id(current) == image.id and self._same_decisions(current):
            self.say(f"{self.name} is running recipe {self.recipe_hash} already: nothing to do")
            return ExitCode.OK
        if current is not None and current.status != "running":
            self.say(f"{self.name} was not running ({stop_reason(dk.container_state(current))}): removing it")
            with shielded():
                save_failure_log(self.recipe, current)
                dk.remove_container(current)
            current = None
        self.untouched = current
        try:
            store.save_deployment(self.stack, self.recipe_hash, _recipe_text(self.recipe), self.files,
                                  write_bundle)
            self._switch(current, image)
        except (StackctlError, KeyboardInterrupt) as failure:
            self._undo(failure)
            raise
        with shielded():
            if self.previous is not None:
                dk.remove_container(self.previous)
            self._record("deployed", image=image)
            store.prune_deployments(self.stack, {self.recipe_hash})
        self.say(f"{self.stack} is healthy on http://{self.recipe.serve.host}:{self.recipe.serve.port} "
                 f"(model {self.recipe.served_name})")
        return ExitCode.OK

    def _switch(self, current, image) -> None:
        if current is not None:
            self.untouched = None
            old_hash = current.labels.get(dk.LABEL_RECIPE_HASH)
            self.say(f"replacing {self.name} (recipe {old_hash} -> {self.recipe_hash}); the previous container is "
                     "kept until the new one is healthy")
            with shielded():
                _remove_named(self.engine, self.name + PREVIOUS_SUFFIX)
                dk.stop_container(current, timeout=20)
                dk.rename_container(current, self.name + PREVIOUS_SUFFIX)
                self.previous = current
        ensure_ports_free(self.spec, self.stack)
        with shielded():
            self.container = dk.run_detached(self.engine, **self.kwargs)
        self.say(f"started {self.name} ({dk.short_id(self.container)}); waiting for http://{self.recipe.serve.host}:"
                 f"{self.recipe.serve.port}/health")
        wait_healthy(self.recipe, self.container, self.timeout, self.say)
        if self.gate is not None:
            self.gate(self.spec, self.files, self.say)

    # -- failure: remove the replacement, bring the previous container back -------------------------------------

    def _undo(self, failure: BaseException) -> None:
        interrupted = isinstance(failure, KeyboardInterrupt)
        reason = "interrupted (Ctrl-C)" if interrupted else _first_line(str(failure)).removeprefix(
            f"{self.stack}: ").rstrip(":")
        with shielded():
            log = None
            if self.container is not None:
                log = save_failure_log(self.recipe, self.container)
                dk.remove_container(self.container)
            self._record("interrupted" if interrupted else "failed", detail=reason)
            if self.previous is not None and not self.rollback:
                old_hash = self.previous.labels.get(dk.LABEL_RECIPE_HASH)
                dk.remove_container(self.previous)
                now = (f"nothing runs (--no-rollback): `stackctl rollback {self.recipe.source}` brings recipe "
                       f"{old_hash} back")
            elif self.previous is not None:
                now = self._restore(wait=not interrupted)
            elif self.untouched is not None:
                now = self._describe(self.untouched)
            else:
                now = "nothing runs (there was no previous deployment to go back to)"
        where = f"; log: {log}" if log else ""
        if interrupted:
            removed = "the new container was removed; " if self.container is not None else ""
            self.say(f"{self.stack}: interrupted: {removed}{now}")
            return
        failure.args = (f"{failure.args[0]}\n{self.stack}: the new deployment failed{where}. Now: {now}",)

    def _restore(self, wait: bool, why: str = "") -> str:
        """Start the previous container again under its own name; `why`, when given, opens the history line's
        detail."""
        previous = self.previous
        old_hash = previous.labels.get(dk.LABEL_RECIPE_HASH)
        image = dk.running_image_name(previous, dk.container_image(self.engine, previous))
        with shielded():
            dk.rename_container(previous, self.name)
            dk.start_container(previous)
            self.previous = None
        recipe = previous.labels.get(dk.LABEL_RECIPE_PATH)

        def record(outcome: str, detail: str = "") -> None:
            self._record(outcome, recipe_hash=old_hash, image_name=image, recipe=recipe,
                         detail="; ".join(part for part in (why, detail) if part))

        if not wait:
            record("restored", "started, not waited for")
            return f"the previous container (recipe {old_hash}, image {image}) was started again"
        host, port = served_address(previous)
        try:
            wait_for_health(self.stack, health_url(host, port), previous, self.timeout, self.say)
        except StackctlError as exc:
            record("failed", f"restore: {_first_line(str(exc))}")
            return f"rolled back to recipe {old_hash}, but it did not become healthy either: {_first_line(str(exc))}"
        record("restored")
        return f"rolled back: {self.name} serves recipe {old_hash} (image {image}) again"

    # -- helpers ------------------------------------------------------------------------------------------------

    def _current(self):
        current = dk.find_container(self.engine, self.name)
        if current is not None and current.labels.get(dk.LABEL_STACK) != self.stack:
            raise StackctlError(f"a container named {self.name} exists and was not made by stackctl "
                                "(fix: rename the stack, or remove that container yourself)")
        leftover = dk.find_container(self.engine, self.name + PREVIOUS_SUFFIX)
        if leftover is not None:
            # An earlier up died (kill -9, power) between setting the previous container aside and finishing. The
            # stack goes back to where that up began, said and recorded, before this up goes on: so `up` exits 0
            # only once a server answers, and a rollback from here returns to a container that served.
            if current is None or current.status != "running":
                self.say(f"{self.name}: an earlier up was cut short; putting the previous container back")
                if current is not None:
                    with shielded():
                        dk.remove_container(current)
                self.previous = leftover
                self.say(f"{self.stack}: {self._restore(wait=True, why='an earlier up was cut short')}")
                dk.refresh(leftover)
                current = leftover
            else:
                with shielded():
                    dk.remove_container(leftover)
        return current

    def _decide_dtype(self, image) -> None:
        decision = _decide_dtype(self.plan, self.say, self.engine, image)
        if decision is not None:
            self.kwargs["environment"].update(decision.environment())
            self.dtype = decision.to_dict()

    def _same_decisions(self, current) -> bool:
        """Whether the running container got the host decisions this up made (the dtype variable): a container
        started before a decision existed, or with another one, is replaced."""
        from stackctl.host.dtype import DTYPE_ENV

        return dk.container_env(current).get(DTYPE_ENV, "") == self.kwargs["environment"].get(DTYPE_ENV, "")

    def _describe(self, current) -> str:
        if current is None:
            return "nothing runs (no container)"
        return (f"{self.name} is {current.status} with recipe {current.labels.get(dk.LABEL_RECIPE_HASH)} "
                "(unchanged)")

    def _record(self, outcome: str, *, image=None, recipe_hash: str | None = None, image_name: str | None = None,
                recipe: str | None = None, detail: str = "") -> None:
        entry = {"command": self.command, "outcome": outcome, "recipe_hash": recipe_hash or self.recipe_hash,
                 "image": image_name or self.kwargs["image"], "recipe": recipe or str(self.recipe.source)}
        if image is not None:
            entry["image_id"] = image.id
        if self.dtype is not None and recipe_hash is None:
            entry["dtype"] = {key: self.dtype[key] for key in ("dtype", "served", "emulated", "reason")}
        if detail:
            entry["detail"] = detail
        store.record_deployment(self.stack, entry)


def _remove_named(engine, name: str) -> None:
    container = dk.find_container(engine, name)
    if container is not None:
        dk.remove_container(container)


def _recipe_text(recipe) -> str:
    from pathlib import Path

    return Path(recipe.source).read_text()


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "failed"


def rollback_recipe(spec: StackSpec, running_hash: str | None) -> str:
    """The recipe file of the deployment before the running one: the original file when it still has that
    recipe hash (as this spec's options derive it), else the copy kept in the state directory."""
    from pathlib import Path

    from stackctl.recipe import load_recipe

    recipe = spec.recipe
    target = store.last_good(recipe.stack.name, exclude_hash=running_hash or spec.recipe_hash)
    if target is None:
        raise StackctlError(f"{recipe.stack.name}: no earlier deployment to return to (history: "
                            f"`stackctl status {recipe.source} --history`)")
    original = target.get("recipe", "")
    if original and Path(original).is_file():
        try:
            if spec.with_recipe(load_recipe(original)).recipe_hash == target["recipe_hash"]:
                return original
        except StackctlError:
            pass  # the original file no longer loads: use the kept copy
    kept = store.deployment_dir(recipe.stack.name, target["recipe_hash"]) / "recipe.toml"
    if not kept.is_file():
        raise StackctlError(f"{recipe.stack.name}: the recipe of deployment {target['recipe_hash']} is no longer "
                            f"kept ({kept} is missing)")
    return str(kept)
