"""`stackctl fleet rollout|doctor`: a recipe over an Ansible inventory, through ansible-runner.

The pure parts (batches, plan, consistency check, runner arguments, event tracking, reports) are in stackctl.fleet;
this module holds the edges: reading the inventory with ansible-inventory, building the wheelhouse with pip, running
the playbooks, printing. ansible-runner is imported only when a fleet command runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import click

from stackctl.errors import ExitCode, StackctlError

KEEP_RUNS = 10  # run directories (ansible-runner artifacts, wheelhouse) kept in the state dir; each host's latest
                # rollout records are kept apart (fleet/hosts/HOST.json) and never pruned with the runs
HOST_RECORDS_KEEP = 50  # rollout records kept per host


def say(message: str) -> None:
    click.echo(message, err=True)


@click.group()
def fleet():
    """Roll a recipe out to a fleet, or check a fleet, with Ansible.

    Hosts come from an Ansible inventory (-i). A host or group may name its own recipe with the inventory variable
    `stackctl_recipe` (a path relative to the inventory's directory); the others get RECIPE.
    """


@fleet.command()
@click.argument("recipe", required=False)
@click.option("-i", "--inventory", required=True, type=click.Path(exists=True),
              help="Ansible inventory (file or directory).")
@click.option("--batch", help="Hosts per batch: a count (2) or a percentage (25%).  [default: all at once]")
@click.option("--max-fail", default="0", show_default=True,
              help="Stop the rollout after a batch in which more than this percentage of hosts failed (a batch "
                   "in which every host failed always stops it).")
@click.option("--skip-up", is_flag=True,
              help="Doctor-only path: install stackctl and the recipe and run the host checks, start nothing "
                   "(hosts without Docker).")
@click.option("--tune", is_flag=True, help="Apply the recipe's [host] tuning: numa_balancing, governor, isolcpus.")
@click.option("--allow-reboot", is_flag=True, help="With --tune: reboot hosts whose isolcpus change needs it.")
@click.option("--wheelhouse", type=click.Path(file_okay=False, exists=True),
              help="Install stackctl on the hosts from this folder of wheels (default: build one from this "
                   "stackctl's source with pip wheel).")
@click.option("--skip", multiple=True, metavar="ID", help="Skip a doctor check on every host (repeatable).")
@click.option("--forks", type=click.IntRange(1, 500), help="Hosts worked on at once.  [default: one per host]")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--rollback-on-fail", is_flag=True,
              help="Return a host whose rollout fails after its recipe was replaced (preflight, up or the doctor "
                   "gate) to its previous recipe.")
@click.option("--dry-run", is_flag=True, help="Print the plan and the ansible-runner arguments; run and write nothing.")
@click.option("-v", "--verbose", count=True, help="Also show Ansible's own output (-v, -vv, ...).")
@click.pass_context
def rollout(ctx, recipe, inventory, batch, max_fail, skip_up, tune, allow_reboot, wheelhouse, skip, forks,
            output_format, rollback_on_fail, dry_run, verbose):
    """Roll RECIPE out to the hosts of an inventory, in batches.

    Per host: install stackctl (from a wheelhouse; the hosts need no package index) and the recipe, run the host
    preflight, apply tuning when asked (--tune), `stackctl up` (unless --skip-up), and gate on `stackctl doctor`.
    A failed batch stops the rollout; hosts of later batches are not touched. Hosts that share a remote KV tier must
    agree on everything that changes cache keys, or nothing starts.

    Exit status: 0 every host finished, 1 a host failed or was not reached, 2 the rollout could not run.
    """
    from stackctl import fleet as fl

    if allow_reboot and not tune:
        raise StackctlError("--allow-reboot only matters with --tune (fix: add --tune, or drop --allow-reboot)")
    from stackctl.recipe.guard_rules import refuse_unknown_skip_ids

    refuse_unknown_skip_ids(skip)
    batch_size = fl.parse_batch(batch)
    max_fail_pct = fl.parse_percent(max_fail)
    runner_module = _ansible()
    hosts, plans, recipes = _plan(recipe, inventory)
    fl.check_shared_tiers(recipes)
    host_batches = fl.batches(hosts, batch_size)
    run_dir = _new_run_dir("rollout", create=not dry_run)
    artifacts = run_dir / "hosts"
    if not dry_run:
        artifacts.mkdir()
    if dry_run:
        wheel_dir, wheel_id = str(wheelhouse or "<built at run time>"), "<computed at run time>"
    else:
        wheel_dir = str(Path(wheelhouse).resolve()) if wheelhouse else str(_build_wheelhouse(run_dir / "wheelhouse"))
        if not list(Path(wheel_dir).glob("stackctl-*.whl")):
            raise StackctlError(f"{wheel_dir}: no stackctl wheel in the wheelhouse (fix: pip wheel stackctl -w DIR)")
        wheel_id = fl.wheelhouse_id(wheel_dir)
    extravars = fl.rollout_extravars(
        plans, batch=batch_size, max_fail=max_fail_pct, skip_up=skip_up, wheelhouse=wheel_dir,
        wheelhouse_archive=str(run_dir / f"wheelhouse-{wheel_id}.tar"), wheelhouse_hash=wheel_id,
        artifacts_dir=str(artifacts), tune=tune, allow_reboot=allow_reboot, doctor_skip=tuple(skip),
        rollback_on_fail=rollback_on_fail)
    kwargs = _kwargs(run_dir, fl.ROLLOUT_PLAYBOOK, inventory, extravars, forks or fl.default_forks(len(hosts)),
                     verbose, create=not dry_run)
    if dry_run:
        click.echo(json.dumps({"batches": host_batches, "runner": kwargs}, indent=2, default=str))
        return
    say(f"rollout to {len(hosts)} host(s) in {len(host_batches)} batch(es); stop after a batch with more than "
        f"{max_fail_pct}% failed" + ("; doctor-only (--skip-up)" if skip_up else ""))
    tracker = fl.FleetTracker(hosts, host_batches, fl.ROLLOUT_PLAY, plans)
    try:
        _run(runner_module, kwargs, tracker)
    finally:  # also on Ctrl-C or a failed run: every reached host's record is kept
        outcomes = tracker.results()
        _keep_host_records(outcomes, artifacts)
    header = {"action": "rollout", "inventory": str(inventory), "recipe": recipe, "batches": host_batches,
              "max_fail_percentage": max_fail_pct, "skip_up": skip_up, "wheelhouse_id": wheel_id,
              "artifacts": str(artifacts)}
    _print(outcomes, header, output_format, "rollout",
           f"stackctl fleet rollout: {len(hosts)} host(s), records in {artifacts}")
    ctx.exit(fl.exit_status(outcomes))


@fleet.command()
@click.argument("recipe", required=False)
@click.option("-i", "--inventory", required=True, type=click.Path(exists=True),
              help="Ansible inventory (file or directory).")
@click.option("--scope", default="host,image,server", show_default=True,
              help="Comma-separated doctor scopes: host, image, server.")
@click.option("--skip", multiple=True, metavar="ID", help="Skip a doctor check on every host (repeatable).")
@click.option("--forks", type=click.IntRange(1, 500), help="Hosts checked at once.  [default: one per host]")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("-v", "--verbose", count=True, help="Also show Ansible's own output (-v, -vv, ...).")
@click.pass_context
def doctor(ctx, recipe, inventory, scope, skip, forks, output_format, verbose):
    """Run `stackctl doctor RECIPE` on every host of an inventory, in parallel, and change nothing.

    Needs stackctl on the hosts (`stackctl fleet rollout` installs it). Also reports hosts that share a remote KV
    tier but disagree on a cache-key setting, and proves that hosts with the same fs tier path or S3 bucket and
    endpoint see one store: one host writes a marker, the others must read it. Exit status: 0 every host passed, 1 a host failed a check, could not
    be reached, or the fleet is inconsistent; 2 the checks could not run.
    """
    from stackctl import fleet as fl
    from stackctl.doctor.registry import parse_scopes
    from stackctl.fleet.marker import assign_marker_groups

    scopes = parse_scopes(scope)
    from stackctl.recipe.guard_rules import refuse_unknown_skip_ids

    refuse_unknown_skip_ids(skip)
    runner_module = _ansible()
    hosts, plans, recipes = _plan(recipe, inventory)
    mismatches = fl.find_tier_mismatches(recipes)
    run_dir = _new_run_dir("doctor")
    assign_marker_groups(plans, recipes)
    extravars = fl.doctor_extravars(plans, scope=",".join(scopes), skip=tuple(skip), marker_id=uuid.uuid4().hex[:12])
    kwargs = _kwargs(run_dir, fl.DOCTOR_PLAYBOOK, inventory, extravars, forks or fl.default_forks(len(hosts)),
                     verbose)
    say(f"fleet doctor on {len(hosts)} host(s), scopes {','.join(scopes)}")
    started = time.monotonic()
    tracker = fl.FleetTracker(hosts, None, fl.DOCTOR_PLAY, plans)
    _run(runner_module, kwargs, tracker)
    elapsed = time.monotonic() - started
    outcomes = tracker.results()
    header = {"action": "doctor", "inventory": str(inventory), "recipe": recipe, "scopes": scopes,
              "seconds": round(elapsed, 2), "shared_tier_mismatches": [m.to_dict() for m in mismatches]}
    _print(outcomes, header, output_format, "doctor",
           f"stackctl fleet doctor: {len(hosts)} host(s) in {elapsed:.1f} s",
           extra_lines=[f"fleet: {m.format()}" for m in mismatches])
    ctx.exit(ExitCode.FAILED if mismatches else fl.exit_status(outcomes))


# -- edges ------------------------------------------------------------------------------------------------------

def _ansible():
    """ansible_runner, with ansible-playbook findable (the one installed beside this Python comes first)."""
    try:
        import ansible_runner
    except ImportError:
        raise StackctlError("ansible-runner is not installed (fix: pip install ansible-runner ansible-core)",
                            exit_code=ExitCode.COULD_NOT_RUN) from None
    bindir = os.path.dirname(sys.executable)
    if os.access(os.path.join(bindir, "ansible-playbook"), os.X_OK):
        path = os.environ.get("PATH", "")
        if bindir not in path.split(os.pathsep):
            os.environ["PATH"] = bindir + os.pathsep + path
    if shutil.which("ansible-playbook") is None:
        raise StackctlError("ansible-playbook not found (fix: pip install ansible-core)", exit_code=ExitCode.COULD_NOT_RUN)
    return ansible_runner


def _read_inventory(inventory: str) -> tuple[list[str], dict]:
    """Hosts (inventory order) and their variables, as Ansible itself reads the inventory."""
    import ansible_runner

    from stackctl.fleet import inventory_hosts

    out, err = ansible_runner.get_inventory(action="list", inventories=[str(Path(inventory).resolve())],
                                            response_format="json", quiet=True)
    if not isinstance(out, dict):
        detail = " ".join((err or str(out) or "").split())[-400:]
        raise StackctlError(f"{inventory}: ansible-inventory could not read it: {detail}")
    return inventory_hosts(out), (out.get("_meta") or {}).get("hostvars", {})


def _plan(recipe: str | None, inventory: str) -> tuple[list[str], dict, dict]:
    """Hosts, each host's plan, each host's loaded recipe. Recipes with rule errors are refused here."""
    from stackctl import fleet as fl
    from stackctl.cli.common import load, resolve_recipe_path
    from stackctl.recipe.ruleset import run_rules

    _ansible()
    hosts, hostvars = _read_inventory(inventory)
    if not hosts:
        raise StackctlError(f"{inventory}: no hosts in the inventory")
    names = fl.host_recipe_names(hosts, hostvars, recipe)
    loaded: dict[str, tuple] = {}
    plans, recipes = {}, {}
    for host in hosts:
        name = names[host] if names[host] == recipe else fl.resolve_inventory_path(names[host], inventory)
        if name not in loaded:
            path = Path(resolve_recipe_path(name)).resolve()
            parsed = load(str(path))
            findings = run_rules(parsed)
            for finding in findings:
                if finding.severity == "warning":
                    say(f"host {host}: {finding.format()}")
            errors = [f for f in findings if f.severity == "error"]
            if errors:
                raise StackctlError(f"host {host}: {errors[0].format()}"
                                    + (f" (and {len(errors) - 1} more error(s))" if len(errors) > 1 else ""))
            loaded[name] = (path, parsed)
        path, parsed = loaded[name]
        plans[host] = fl.host_plan(str(path), parsed)
        recipes[host] = parsed
    return hosts, plans, recipes


def _state_base() -> Path:
    from stackctl.lifecycle.state import base_dir

    return base_dir()


def _new_run_dir(action: str, create: bool = True) -> Path:
    """A fresh directory for one fleet run; older runs beyond KEEP_RUNS are removed. With create=False (dry run)
    only its name: nothing is written or removed."""
    runs = _state_base() / "fleet" / "runs"
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    run_dir = runs / f"{stamp}-{action}-{os.getpid()}"
    if not create:
        return run_dir
    runs.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir()
    for old in sorted(p for p in runs.iterdir() if p.is_dir())[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)
    return run_dir


def _keep_host_records(outcomes, artifacts: Path) -> None:
    """Each reached host's rollout record, appended to its list (newest last, HOST_RECORDS_KEEP kept) apart from
    the pruned run directories: the playbook's own record when the host wrote one, else what the controller saw
    (an unreachable host writes nothing)."""
    from stackctl.lifecycle.state import write_atomically

    records = _state_base() / "fleet" / "hosts"
    for outcome in outcomes:
        if not outcome.reached:
            continue  # untouched by this rollout: its earlier records stay as they are
        try:
            record = json.loads((artifacts / f"{outcome.host}.json").read_text())
        except (OSError, ValueError):
            record = {"host": outcome.host, "outcome": outcome.status}
        record["controller"] = outcome.to_dict()
        record["run"] = str(artifacts.parent)
        path = records / f"{outcome.host}.json"
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            kept = []
        kept = (kept if isinstance(kept, list) else [kept]) + [record]
        write_atomically(path, json.dumps(kept[-HOST_RECORDS_KEEP:], indent=2) + "\n")


def _source_tree() -> Path | None:
    """The source checkout this stackctl runs from (editable install), if any."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "stackctl"' in pyproject.read_text(encoding="utf-8", errors="replace"):
        return root
    return None


def _build_wheelhouse(dest: Path) -> Path:
    """`pip wheel SOURCE -w DEST`: stackctl and every dependency as wheels (pip's cache makes repeats quick)."""
    source = _source_tree()
    if source is None:
        raise StackctlError("this stackctl was not installed from a source tree, so it cannot build its own wheel "
                            "(fix: pass --wheelhouse DIR made with `pip wheel stackctl -w DIR`)")
    say(f"building the wheelhouse: pip wheel {source}")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q",
                             "--wheel-dir", str(dest), str(source)], capture_output=True, text=True)
    if result.returncode != 0:
        tail = " ".join(result.stderr.strip().splitlines()[-3:])
        raise StackctlError(f"pip wheel failed: {tail} (fix: pass a ready --wheelhouse DIR)", exit_code=ExitCode.COULD_NOT_RUN)
    return dest


def _kwargs(run_dir: Path, playbook: str, inventory: str, extravars: dict, forks: int, verbose: int,
            create: bool = True) -> dict:
    from stackctl import fleet as fl
    from stackctl.resources import shipped

    private = run_dir / "runner"
    if create:
        private.mkdir(exist_ok=True)
    return fl.runner_kwargs(private_data_dir=str(private), playbook=str(shipped("playbooks") / playbook),
                            inventory=str(Path(inventory).resolve()), extravars=extravars, forks=forks,
                            verbosity=verbose, quiet=not verbose)


def _run(ansible_runner, kwargs: dict, tracker) -> None:
    """Run the playbook, printing each host's task results as they arrive."""

    def on_event(event: dict) -> bool:
        for line in tracker.handle(event):
            say(line)
        return True  # keep the event in the run's artifacts

    import contextlib

    # With -v Ansible's own output is shown: on stderr, so stdout keeps only the summary (e.g. the JSON).
    with contextlib.redirect_stdout(sys.stderr):
        result = ansible_runner.run(**dict(kwargs, event_handler=on_event))
    reached = any(o.reached for o in tracker.results())
    if not reached and result.rc not in (0, 2, 4):
        tail = _stdout_tail(result)
        raise StackctlError(f"ansible-playbook failed (exit {result.rc}, {result.status}): {tail}", exit_code=ExitCode.COULD_NOT_RUN)


def _stdout_tail(result) -> str:
    from ansible_runner.exceptions import AnsibleRunnerException

    try:
        text = result.stdout.read()
    except (AnsibleRunnerException, OSError):  # no stdout artifact when ansible-playbook never started
        return "no output"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[-4:])[-600:] or "no output"


def _print(outcomes, header: dict, output_format: str, action: str, title: str, extra_lines=()) -> None:
    from stackctl import fleet as fl

    if output_format == "json":
        click.echo(json.dumps(fl.summary_json(outcomes, header, action), indent=2))
        return
    click.echo(fl.summary_table(outcomes, title, action))
    for line in extra_lines:
        click.echo(line)
