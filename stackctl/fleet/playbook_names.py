"""Names shared with playbooks/: the playbook files, the plays, the tasks whose events carry facts, and the
inventory variable that names a host's own recipe (tests/unit/test_fleet_logic.py keeps them in sync)."""

from __future__ import annotations

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
RECIPE_VAR = "stackctl_recipe"  # inventory variable: a host's (or group's) own recipe file
