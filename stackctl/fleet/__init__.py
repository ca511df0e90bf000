"""Fleet rollout and fleet doctor: the pure parts.

`stackctl fleet` reads an Ansible inventory, gives every host a recipe (the command's, or the host's own
`stackctl_recipe` inventory variable), refuses a fleet whose hosts share a remote KV tier but disagree on anything that
changes cache keys, and runs playbooks/rollout.yml or playbooks/doctor.yml through ansible-runner. Everything here is
plain data in, plain data out, one module per step:

- playbook_names: names shared with playbooks/ (playbook files, plays, tasks, the recipe inventory variable)
- batching: `--batch` / `--max-fail` parsing and the batches Ansible's `serial` makes
- inventory: inventory hosts in order, each host's recipe name and its path
- plan: what each host gets (recipe, hash, stack, tuning) and the wheelhouse id
- consistency: the shared-tier cache-key check
- runner_args: ansible-runner arguments and the playbooks' extra variables
- outcome: HostOutcome and the host statuses
- tracker: FleetTracker, ansible-runner events -> per-host outcomes and progress lines
- report: counts, exit status, the summary table and JSON

The side effects (running Ansible, building the wheelhouse) live in stackctl/cli/fleet.py. Nothing here imports
ansible_runner, so importing this package is cheap.
"""

from __future__ import annotations

from stackctl.fleet.batching import batches, parse_batch, parse_percent
from stackctl.fleet.consistency import (TierMismatch, cache_key_settings, check_shared_tiers, find_tier_mismatches,
                                        shared_tiers)
from stackctl.fleet.inventory import host_recipe_names, inventory_hosts, resolve_inventory_path
from stackctl.fleet.outcome import (CHANGED, FAILED, NOT_REACHED, OK, STATUSES, STOPPED, UNREACHABLE,
                                    HostOutcome)
from stackctl.fleet.plan import host_plan, tuning_for, wheelhouse_id
from stackctl.fleet.playbook_names import (DOCTOR_PLAY, DOCTOR_PLAYBOOK, DOCTOR_TASK_PREFIX, RECIPE_VAR,
                                           ROLLOUT_PLAY, ROLLOUT_PLAYBOOK, TASK_DONE, TASK_RECIPE_HASH,
                                           TASK_ROLLOUT_RECORD, TASK_UP)
from stackctl.fleet.report import counts, detail, exit_status, recipe_groups, summary_json, summary_table
from stackctl.fleet.runner_args import default_forks, doctor_extravars, rollout_extravars, runner_kwargs
from stackctl.fleet.shared_marker import assign_marker_writers
from stackctl.fleet.tracker import FleetTracker, failure_message

__all__ = [
    # playbook_names
    "DOCTOR_PLAY", "DOCTOR_PLAYBOOK", "DOCTOR_TASK_PREFIX", "RECIPE_VAR", "ROLLOUT_PLAY", "ROLLOUT_PLAYBOOK",
    "TASK_DONE", "TASK_RECIPE_HASH", "TASK_ROLLOUT_RECORD", "TASK_UP",
    # batching
    "batches", "parse_batch", "parse_percent",
    # inventory and plan
    "assign_marker_writers", "host_plan", "host_recipe_names", "inventory_hosts", "resolve_inventory_path", "tuning_for", "wheelhouse_id",
    # consistency
    "TierMismatch", "cache_key_settings", "check_shared_tiers", "find_tier_mismatches", "shared_tiers",
    # runner_args
    "default_forks", "doctor_extravars", "rollout_extravars", "runner_kwargs",
    # outcome, tracker, report
    "CHANGED", "FAILED", "NOT_REACHED", "OK", "STATUSES", "STOPPED", "UNREACHABLE", "HostOutcome",
    "FleetTracker", "failure_message",
    "counts", "detail", "exit_status", "recipe_groups", "summary_json", "summary_table",
]
