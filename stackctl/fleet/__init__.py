"""Fleet rollout and fleet doctor: every step, one module each.

`stackctl fleet` reads an Ansible inventory, gives every host a recipe (the command's, or the host's own
`stackctl_recipe` inventory variable), refuses a fleet whose hosts share a remote KV tier but disagree on anything that
changes cache keys, and runs playbooks/rollout.yml or playbooks/doctor.yml through ansible-runner. Everything here is
plain data in, plain data out, one module per step:

- hosts: inventory hosts in order, each host's recipe, what each host gets (recipe, hash, stack, tuning),
  `--batch` / `--max-fail` and the batches Ansible's `serial` makes
- consistency: hosts sharing a remote tier agree on cache keys
- marker_groups: which hosts prove a shared fs or S3 tier is shared (the controller's groups in each host's plan)
- marker: the marker itself, put, read and deleted on the hosts (`python -m stackctl.fleet.marker`; not imported
  here, so that running it as a module stays clean)
- ansible: names shared with playbooks/ (playbooks, plays, tasks, the recipe inventory variable), the playbooks'
  extra variables and ansible-runner's arguments
- progress: ansible-runner events -> per-host outcomes (HostOutcome, the host statuses) and progress lines
- report: counts, exit status, the summary table and JSON

- wheelhouse: the wheelhouse id, and the wheelhouse itself (given, or built with `pip wheel`)

The edges, imported by stackctl/cli/fleet.py (the command surface) and not by this package:
- planning: the inventory as Ansible reads it, and each host's recipe loaded and checked (plan_fleet)
- execute: finding ansible-runner, its arguments for one run folder, running a playbook with progress lines
- records: each reached host's rollout record, written through the state module (which owns the run folders)
- images: the image built once on the controller, saved into the state dir or pushed to a registry, and the
  registry credentials handed to the hosts' login in a root-only file

Only execute and planning import ansible_runner, and only inside the functions that run it, so importing this
package is cheap.
"""

from __future__ import annotations

from stackctl.fleet.ansible import (
    DOCTOR_PLAY,
    DOCTOR_PLAYBOOK,
    DOCTOR_TASK_PREFIX,
    RECIPE_VAR,
    ROLLOUT_PLAY,
    ROLLOUT_PLAYBOOK,
    TASK_DONE,
    TASK_MARKER_OUTCOMES,
    TASK_RECIPE_HASH,
    TASK_ROLLOUT_RECORD,
    TASK_UP,
    default_forks,
    doctor_extravars,
    rollout_extravars,
    runner_kwargs,
)
from stackctl.fleet.consistency import (
    TierMismatch,
    cache_key_settings,
    check_shared_tiers,
    find_tier_mismatches,
    served_dtype_mismatches,
    shared_tiers,
)
from stackctl.fleet.hosts import (
    batches,
    host_plan,
    host_recipe_names,
    inventory_hosts,
    parse_batch,
    parse_percent,
    resolve_inventory_path,
    tuning_for,
)
from stackctl.fleet.progress import (
    CHANGED,
    FAILED,
    NOT_REACHED,
    OK,
    ROLLED_BACK,
    STATUSES,
    STOPPED,
    UNREACHABLE,
    FleetTracker,
    HostOutcome,
    failure_message,
)
from stackctl.fleet.report import (
    counts,
    detail,
    exit_status,
    phase_lines,
    recipe_groups,
    summary_json,
    summary_table,
)
from stackctl.fleet.wheelhouse import wheelhouse_id

__all__ = [
    # ansible: names shared with playbooks/
    "DOCTOR_PLAY", "DOCTOR_PLAYBOOK", "DOCTOR_TASK_PREFIX", "RECIPE_VAR", "ROLLOUT_PLAY", "ROLLOUT_PLAYBOOK",
    "TASK_DONE", "TASK_MARKER_OUTCOMES", "TASK_RECIPE_HASH", "TASK_ROLLOUT_RECORD", "TASK_UP",
    # hosts
    "batches", "parse_batch", "parse_percent",
    "host_plan", "host_recipe_names", "inventory_hosts", "resolve_inventory_path", "tuning_for", "wheelhouse_id",
    # consistency
    "TierMismatch", "cache_key_settings", "check_shared_tiers", "find_tier_mismatches", "served_dtype_mismatches", "shared_tiers",
    # ansible: runner arguments
    "default_forks", "doctor_extravars", "rollout_extravars", "runner_kwargs",
    # progress, report
    "CHANGED", "FAILED", "NOT_REACHED", "OK", "ROLLED_BACK", "STATUSES", "STOPPED", "UNREACHABLE", "HostOutcome",
    "FleetTracker", "failure_message",
    "counts", "detail", "exit_status", "phase_lines", "recipe_groups", "summary_json", "summary_table",
]
