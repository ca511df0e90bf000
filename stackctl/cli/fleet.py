"""`stackctl fleet rollout|doctor`: a recipe over an Ansible inventory, through ansible-runner.

The command surface only: options, the order of the steps, printing. The steps live in stackctl.fleet (planning,
wheelhouse, execute, records and the pure parts) and the run folders in the state module. ansible-runner is
imported only when a fleet command runs.
"""

from __future__ import annotations

import json
import time
import uuid

import click

from stackctl import fleet as fl
from stackctl.errors import ExitCode, StackctlError
from stackctl.fleet import images
from stackctl.fleet.execute import find_ansible, playbook_args, run_playbook
from stackctl.fleet.planning import plan_fleet
from stackctl.fleet.records import keep_host_records
from stackctl.fleet.wheelhouse import ready_wheelhouse
from stackctl.state.store import new_fleet_run_dir


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
@click.option("--registry", metavar="HOST:PORT",
              help="Ship the image through this registry (the hosts pull it by digest; credentials from "
                   "STACKCTL_REGISTRY_USER / STACKCTL_REGISTRY_PASSWORD). Without it the image is saved once on this "
                   "machine and loaded on each host over the Ansible connection (air-gapped fleets).")
@click.option("--dry-run", is_flag=True, help="Print the plan and the ansible-runner arguments; run and write nothing.")
@click.option("-v", "--verbose", count=True, help="Also show Ansible's own output (-v, -vv, ...).")
@click.pass_context
def rollout(ctx, recipe, inventory, batch, max_fail, skip_up, tune, allow_reboot, wheelhouse, skip, forks,
            output_format, rollback_on_fail, registry, dry_run, verbose):
    """Roll RECIPE out to the hosts of an inventory, in batches.

    The image is built once, here, and shipped (--registry, or docker save/load over the Ansible connection): hosts
    never build, and `up` on a host refuses any image but the plan's. Per host: install stackctl (from a wheelhouse;
    the hosts need no package index) and the recipe, run the host preflight, apply tuning when asked (--tune), load
    the image, `stackctl up` (unless --skip-up), and gate on `stackctl doctor`.
    A failed batch stops the rollout; hosts of later batches are not touched. Hosts that share a remote KV tier must
    agree on everything that changes cache keys, or nothing starts.

    Exit status: 0 every host finished, 1 a host failed or was not reached, 2 the rollout could not run.
    """
    if allow_reboot and not tune:
        raise StackctlError("--allow-reboot only matters with --tune (fix: add --tune, or drop --allow-reboot)")
    from stackctl.rules.guard_rules import refuse_unknown_skip_ids

    refuse_unknown_skip_ids(skip)
    batch_size = fl.parse_batch(batch)
    max_fail_pct = fl.parse_percent(max_fail)
    runner_module, hosts, plans, specs = _plan(recipe, inventory)
    fl.check_shared_tiers(specs)
    host_batches = fl.batches(hosts, batch_size)
    run_dir = new_fleet_run_dir("rollout", ("runner", "hosts"), create=not dry_run)
    wheel_dir, wheel_id = ready_wheelhouse(wheelhouse, run_dir, say, dry_run=dry_run)
    phases: dict[str, float] = {}
    login = None
    if not (skip_up or dry_run):
        login = _build_and_ship(specs, plans, registry, phases)
    try:  # the credentials file goes whatever happens, Ctrl-C included
        artifacts = run_dir / "hosts"
        extravars = fl.rollout_extravars(
            plans, batch=batch_size, max_fail=max_fail_pct, skip_up=skip_up, wheelhouse=wheel_dir,
            wheelhouse_archive=str(run_dir / f"wheelhouse-{wheel_id}.tar"), wheelhouse_hash=wheel_id,
            artifacts_dir=str(artifacts), tune=tune, allow_reboot=allow_reboot, doctor_skip=tuple(skip),
            rollback_on_fail=rollback_on_fail, registry_credentials=str(login or ""))
        kwargs = playbook_args(run_dir, fl.ROLLOUT_PLAYBOOK, inventory, extravars,
                               forks or fl.default_forks(len(hosts)), verbose)
        if dry_run:
            click.echo(json.dumps({"batches": host_batches, "runner": kwargs}, indent=2, default=str))
            return
        say(f"rollout to {len(hosts)} host(s) in {len(host_batches)} batch(es); stop after a batch with more than "
            f"{max_fail_pct}% failed" + ("; doctor-only (--skip-up)" if skip_up else ""))
        tracker = fl.FleetTracker(hosts, host_batches, fl.ROLLOUT_PLAY, plans)
        try:
            run_playbook(runner_module, kwargs, tracker, say)
        finally:  # also on Ctrl-C or a failed run: every reached host's record is kept
            outcomes = tracker.results()
            keep_host_records(outcomes, artifacts)
        header = {"action": "rollout", "inventory": str(inventory), "recipe": recipe, "batches": host_batches,
                  "max_fail_percentage": max_fail_pct, "skip_up": skip_up, "wheelhouse_id": wheel_id,
                  "artifacts": str(artifacts), "phases": {name: round(value, 2) for name, value in phases.items()},
                  "images": {host: plan["image"] for host, plan in plans.items() if "image" in plan}}
        _print(outcomes, header, output_format, "rollout",
               f"stackctl fleet rollout: {len(hosts)} host(s), records in {artifacts}",
               extra_lines=fl.phase_lines(phases, outcomes))
        ctx.exit(fl.exit_status(outcomes))
    finally:
        images.forget_credentials(login)


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
    tier but disagree on a cache-key setting or whose servers compute in different dtypes, and proves that hosts
    with the same fs tier path or S3 bucket and endpoint see one store: one host writes a marker, the others must
    read it. Exit status: 0 every host passed, 1 a host failed a check, could not be reached, or the fleet is
    inconsistent; 2 the checks could not run.
    """
    from stackctl.doctor.registry import parse_scopes
    from stackctl.fleet.marker_groups import assign_marker_groups

    scopes = parse_scopes(scope)
    from stackctl.rules.guard_rules import refuse_unknown_skip_ids

    refuse_unknown_skip_ids(skip)
    runner_module, hosts, plans, specs = _plan(recipe, inventory)
    mismatches = fl.find_tier_mismatches(specs)
    run_dir = new_fleet_run_dir("doctor", ("runner",))
    assign_marker_groups(plans, specs)
    extravars = fl.doctor_extravars(plans, scope=",".join(scopes), skip=tuple(skip), marker_id=uuid.uuid4().hex[:12])
    kwargs = playbook_args(run_dir, fl.DOCTOR_PLAYBOOK, inventory, extravars,
                           forks or fl.default_forks(len(hosts)), verbose)
    say(f"fleet doctor on {len(hosts)} host(s), scopes {','.join(scopes)}")
    started = time.monotonic()
    tracker = fl.FleetTracker(hosts, None, fl.DOCTOR_PLAY, plans)
    run_playbook(runner_module, kwargs, tracker, say)
    elapsed = time.monotonic() - started
    outcomes = tracker.results()
    dtype_mismatches, dtype_unknown = fl.served_dtype_mismatches(specs, {o.host: o.served_dtype() for o in outcomes})
    mismatches += dtype_mismatches
    header = {"action": "doctor", "inventory": str(inventory), "recipe": recipe, "scopes": scopes,
              "seconds": round(elapsed, 2), "shared_tier_mismatches": [m.to_dict() for m in mismatches],
              "shared_tier_notes": dtype_unknown}
    _print(outcomes, header, output_format, "doctor",
           f"stackctl fleet doctor: {len(hosts)} host(s) in {elapsed:.1f} s",
           extra_lines=[f"fleet: {m.format()}" for m in mismatches] + [f"fleet: note: {n}" for n in dtype_unknown])
    ctx.exit(ExitCode.FAILED if mismatches else fl.exit_status(outcomes))


def _build_and_ship(specs: dict, plans: dict, registry: str | None, phases: dict):
    """The image of each recipe built once here and made ready to ship; each host's plan names its image. Returns
    the file of the registry credentials for the hosts' login (None without credentials)."""
    built, phases["build"] = images.build_once(specs, wheelhouse=None, ca_bundle=None, say=say)
    auth = images.registry_auth()
    if registry:
        shipped, phases["push"] = images.ship_by_registry(built, registry, auth, say)
    else:
        shipped, phases["save"] = images.ship_by_archive(built, say)
    for host, image in shipped.items():
        plans[host]["image"] = image.to_dict()
    say("image: " + "; ".join(sorted({f"{i.tag} = {i.id.split(':')[-1][:12]} ({i.size / 1e9:.2f} GB)"
                                      for i in shipped.values()})) + ", built once, shipped "
        + (f"through {registry}" if registry else "by docker save/load"))
    return images.hand_credentials_to_hosts(auth if registry else None)


def _plan(recipe: str | None, inventory: str):
    """ansible_runner (refused early when Ansible is missing), then the hosts, their plans and stack specs."""
    from stackctl.recipe.locate import resolve_recipe_path

    runner_module = find_ansible()
    return (runner_module, *plan_fleet(recipe, inventory, resolve_recipe_path, say))


def _print(outcomes, header: dict, output_format: str, action: str, title: str, extra_lines=()) -> None:
    if output_format == "json":
        click.echo(json.dumps(fl.summary_json(outcomes, header, action), indent=2))
        return
    click.echo(fl.summary_table(outcomes, title, action))
    for line in extra_lines:
        click.echo(line)
