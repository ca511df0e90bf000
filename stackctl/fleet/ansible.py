"""The interface to playbooks/ and ansible-runner: the names both sides share, the playbooks' extra variables and
the arguments of `ansible_runner.run` (plain data; this module does not import ansible_runner)."""

from __future__ import annotations

import os
from pathlib import Path

# -- names shared with playbooks/: files, plays, tasks whose events carry facts -------------------------------------
# (and the inventory variable that names a host's own recipe; tests/unit/test_fleet_logic.py keeps them in sync)
ROLLOUT_PLAYBOOK = "rollout.yml"
DOCTOR_PLAYBOOK = "doctor.yml"
ROLLOUT_PLAY = "Roll out a stackctl recipe"
DOCTOR_PLAY = "Check a fleet with stackctl doctor"
TASK_DONE = {"Rollout finished on this host", "Checks finished on this host"}
TASK_RECIPE_HASH = "Read the recipe hash on the host"
TASK_ROLLOUT_RECORD = "Read the rollout record"
TASK_UP = "Run stackctl up"
TASK_ROLLED_BACK = "Rolled back to the previous recipe"
TASK_PREVIOUS_ROLLOUT = "Remember the previous rollout"
DOCTOR_TASK_PREFIX = "Run stackctl doctor"
TASK_MARKER_OUTCOMES = "Gather the shared-tier marker outcomes"
RECIPE_VAR = "stackctl_recipe"  # inventory variable: a host's (or group's) own recipe file
# The rollout's phases on a host, by the tasks that make them (each task's duration, from ansible-runner's events,
# adds to its phase): how long the image took to reach the host, `up`, and the doctor gate.
PHASE_TASKS = {
    "ship": {"Copy the image archive", "Load the image archive", "Pull the image by digest",
             "Tag the pulled image as the stack's"},
    "up": {TASK_UP},
    "gate": {"Run stackctl doctor (gate)"},
}


# -- the playbooks' extra variables and the arguments of `ansible_runner.run` ---------------------------------------
def default_forks(host_count: int) -> int:
    """One fork per host (hosts are checked in parallel), within Ansible's sane range."""
    return max(1, min(host_count, 50))


def rollout_extravars(plans: dict, *, batch: int | str | None, max_fail: int, skip_up: bool, wheelhouse: str,
                      wheelhouse_archive: str, wheelhouse_hash: str, artifacts_dir: str, tune: bool = False,
                      allow_reboot: bool = False, doctor_skip: tuple = (),
                      rollback_on_fail: bool = False, registry_credentials: str = "") -> dict:
    """Extra variables of playbooks/rollout.yml."""
    return {
        "stackctl_fleet_serial": batch if batch is not None else "100%",
        "stackctl_fleet_max_fail_percentage": max_fail,
        "stackctl_host_fleet_plan": plans,
        "stackctl_host_wheelhouse": wheelhouse,
        "stackctl_host_wheelhouse_archive": wheelhouse_archive,
        "stackctl_host_wheelhouse_id": wheelhouse_hash,
        "stackctl_host_skip_up": skip_up,
        "stackctl_host_rollback_on_fail": rollback_on_fail,
        "stackctl_host_apply_tuning": tune,
        "stackctl_host_allow_reboot": allow_reboot,
        "stackctl_host_doctor_skip": list(doctor_skip),
        "stackctl_host_artifacts_dir": artifacts_dir,
        "stackctl_host_registry_credentials": registry_credentials,
        **host_environment(),
    }


def host_environment() -> dict:
    """The variables the hosts' stackctl runs with: STACKCTL_CPU_ISA_CAP from this shell, when set (its what-if goes
    to the whole fleet, and the recipe hash each host computes matches the controller's), else nothing."""
    import os

    from stackctl.recipe.isa_cap import CPU_ISA_CAP_ENV

    cap = os.environ.get(CPU_ISA_CAP_ENV)
    return {"stackctl_fleet_environment": {CPU_ISA_CAP_ENV: cap}} if cap else {}


def doctor_extravars(plans: dict, *, scope: str, skip: tuple = (), marker_id: str = "") -> dict:
    """Extra variables of playbooks/doctor.yml (marker_id names this run's shared-tier marker files)."""
    return {"stackctl_host_fleet_plan": plans, "stackctl_host_doctor_scope": scope,
            "stackctl_host_doctor_skip": list(skip), "stackctl_host_marker_id": marker_id, **host_environment()}


def runner_kwargs(*, private_data_dir: str, playbook: str, inventory: str, extravars: dict, forks: int,
                  event_handler=None, verbosity: int = 0, quiet: bool = True, envvars: dict | None = None) -> dict:
    """Arguments of `ansible_runner.run`. Pipelining saves SSH round trips; colour off because stackctl prints."""
    env = {"ANSIBLE_PIPELINING": "True", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "False"}
    if "ANSIBLE_SSH_ARGS" not in os.environ:
        # Ansible's own default less -C: SSH's zlib compression held a 4.3 GB image copy to 23 MB/s on 2 cores, where
        # the link carries several times that (an operator's ANSIBLE_SSH_ARGS still wins).
        env["ANSIBLE_SSH_ARGS"] = "-o ControlMaster=auto -o ControlPersist=60s"
    env.update(envvars or {})
    return {
        "private_data_dir": private_data_dir,
        "project_dir": str(Path(playbook).parent),
        "playbook": str(playbook),
        "inventory": str(inventory),
        "extravars": extravars,
        "forks": forks,
        "envvars": env,
        "event_handler": event_handler,
        "quiet": quiet,
        "verbosity": verbosity,
        "rotate_artifacts": 5,
    }
