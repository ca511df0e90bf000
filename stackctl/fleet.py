"""Fleet rollout and fleet doctor: the pure parts.

`stackctl fleet` reads an Ansible inventory, gives every host a recipe (the command's, or the host's own
`stackctl_recipe` inventory variable), refuses a fleet whose hosts share a remote KV tier but disagree on anything that
changes cache keys, and runs playbooks/rollout.yml or playbooks/doctor.yml through ansible-runner. Everything here is
plain data in, plain data out: batch parsing, the per-host plan, the consistency check, the ansible-runner arguments,
the event tracker that turns Ansible's events into per-host outcomes, and the reports. The side effects (running
Ansible, building the wheelhouse) live in stackctl/cli/fleet.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path

from stackctl.errors import StackctlError

# Names shared with playbooks/: the plays and the tasks whose events carry facts (tests keep them in sync).
ROLLOUT_PLAYBOOK = "rollout.yml"
DOCTOR_PLAYBOOK = "doctor.yml"
ROLLOUT_PLAY = "Roll out a stackctl recipe"
DOCTOR_PLAY = "Check a fleet with stackctl doctor"
TASK_DONE = {"Rollout finished on this host", "Checks finished on this host"}
TASK_RECIPE_HASH = "Read the recipe hash on the host"
TASK_ROLLOUT_RECORD = "Read the rollout record"
TASK_UP = "Run stackctl up"
DOCTOR_TASK_PREFIX = "Run stackctl doctor"
RECIPE_VAR = "stackctl_recipe"  # inventory variable: a host's (or group's) own recipe file

# Host statuses, in the order the summary counts them.
OK, CHANGED, FAILED, UNREACHABLE, STOPPED, NOT_REACHED = (
    "ok", "changed", "failed", "unreachable", "stopped", "not reached")
STATUSES = (OK, CHANGED, FAILED, UNREACHABLE, STOPPED, NOT_REACHED)


# -- batches ---------------------------------------------------------------------------------------------------

def parse_batch(text: str | None) -> int | str | None:
    """`--batch`: "2" -> 2 hosts per batch, "50%" -> "50%" of the hosts, None -> all hosts at once."""
    if text is None or str(text).strip() == "":
        return None
    value = str(text).strip()
    match = re.fullmatch(r"(\d+)(%?)", value)
    if not match or int(match.group(1)) == 0 or (match.group(2) and int(match.group(1)) > 100):
        raise StackctlError(f"--batch: {value!r} is not a host count (> 0) or a percentage (1%-100%) "
                            "(fix: e.g. --batch 2 or --batch 25%)")
    return f"{int(match.group(1))}%" if match.group(2) else int(match.group(1))


def parse_percent(text: str | int, option: str = "--max-fail") -> int:
    """A percentage 0-100 written "10", "10%" (Ansible's max_fail_percentage)."""
    value = str(text).strip()
    match = re.fullmatch(r"(\d+)%?", value)
    if not match or int(match.group(1)) > 100:
        raise StackctlError(f"{option}: {value!r} is not a percentage 0-100 (fix: e.g. {option} 0 or {option} 25%)")
    return int(match.group(1))


def batches(hosts: list[str], batch: int | str | None) -> list[list[str]]:
    """The batches Ansible's `serial` makes of `hosts` (same rounding: a percentage rounds down, at least 1)."""
    if not hosts:
        return []
    if batch is None:
        size = len(hosts)
    elif isinstance(batch, str) and batch.endswith("%"):
        size = max(1, int(len(hosts) * int(batch[:-1]) / 100))
    else:
        size = int(batch)
    return [hosts[i:i + size] for i in range(0, len(hosts), size)]


# -- inventory and per-host plan ---------------------------------------------------------------------------------

def inventory_hosts(listing: dict) -> list[str]:
    """Hosts of an `ansible-inventory --list` document, in inventory order (groups depth first, no duplicates)."""
    hosts: list[str] = []
    seen_groups: set = set()

    def walk(group: str) -> None:
        if group in seen_groups:
            return
        seen_groups.add(group)
        entry = listing.get(group) or {}
        for host in entry.get("hosts", []):
            if host not in hosts:
                hosts.append(host)
        for child in entry.get("children", []):
            walk(child)

    walk("all")
    for host in (listing.get("_meta") or {}).get("hostvars", {}):
        if host not in hosts:
            hosts.append(host)
    return hosts


def host_recipe_names(hosts: list[str], hostvars: dict, default: str | None) -> dict[str, str]:
    """Each host's recipe: its `stackctl_recipe` inventory variable, else the command's RECIPE."""
    names = {}
    missing = []
    for host in hosts:
        name = (hostvars.get(host) or {}).get(RECIPE_VAR) or default
        if not name:
            missing.append(host)
        else:
            names[host] = str(name)
    if missing:
        raise StackctlError(f"no recipe for host(s) {', '.join(missing)} (fix: pass RECIPE, or set {RECIPE_VAR} "
                            "for them in the inventory)")
    return names


def resolve_inventory_path(name: str, inventory: str) -> str:
    """A recipe path written in an inventory is relative to the inventory's directory; other names (absolute paths,
    shipped recipe names, paths relative to the working directory) are kept as given."""
    if os.path.isabs(name):
        return name
    base = Path(inventory)
    candidate = (base if base.is_dir() else base.parent) / name
    return str(candidate.resolve()) if candidate.exists() else name


def tuning_for(recipe) -> dict:
    """The host tuning a recipe asks for, as the role's stackctl_host_tuning (absent keys: leave alone)."""
    tuning: dict = {"numa_balancing": 1 if recipe.host.numa_balancing else 0}
    if recipe.host.governor:
        tuning["governor"] = recipe.host.governor
    if recipe.host.isolcpus not in ("auto", "off"):
        tuning["isolcpus"] = recipe.host.isolcpus
    return tuning


def host_plan(recipe_path: str, recipe) -> dict:
    """What one host gets: the recipe file (controller path), its hash, the stack name, the tuning."""
    from stackctl.stackspec import recipe_hash

    return {"recipe": str(recipe_path), "recipe_hash": recipe_hash(recipe), "stack": recipe.stack.name,
            "tuning": tuning_for(recipe)}


def wheelhouse_id(directory: str | Path) -> str:
    """A short content hash of a wheelhouse (names and bytes of its wheels): hosts reinstall when it changes."""
    digest = hashlib.sha256()
    wheels = sorted(Path(directory).glob("*.whl"))
    for wheel in wheels:
        digest.update(wheel.name.encode() + b"\0")
        digest.update(hashlib.sha256(wheel.read_bytes()).digest())
    return digest.hexdigest()[:16]


# -- shared-tier consistency -------------------------------------------------------------------------------------

def _revision(extra_args: list[str]) -> str | None:
    for index, arg in enumerate(extra_args):
        if arg == "--revision" and index + 1 < len(extra_args):
            return extra_args[index + 1]
        if arg.startswith("--revision="):
            return arg.split("=", 1)[1]
    return None


def cache_key_settings(recipe) -> dict[str, object]:
    """Everything that changes the keys (or the stored format) of LMCache entries, by recipe key. LMCache 0.5.x keys
    are model@world_size@worker@chunk_hash@kv_dtype; the chunk hash chains from the hash seed with the hash
    algorithm over chunk_size-token chunks."""
    from stackctl import stackspec
    from stackctl.recipe.rules import effective_hash_seed

    config = stackspec.lmcache_config(recipe) or {}
    versions = stackspec.versions(recipe)
    return {
        "model.path": recipe.model.path,
        "model revision (serve.extra_args --revision)": _revision(list(recipe.serve.extra_args)),
        "model.tensor_parallel": recipe.model.tensor_parallel,
        "model.kv_cache_dtype": recipe.model.kv_cache_dtype,
        "model.dtype": recipe.model.dtype,
        "cache.chunk_size": recipe.cache.chunk_size,
        "cache.hash_seed": effective_hash_seed(recipe),
        "cache.extra.pre_caching_hash_algorithm": config.get("pre_caching_hash_algorithm", "builtin"),
        "serve.prefix_caching_hash_algo": recipe.serve.prefix_caching_hash_algo or "sha256",
        "versions.lmcache": versions.get("lmcache") or versions.get("lmcache_git"),
        "cache.extra.remote_serde": config.get("remote_serde"),
    }


def shared_tiers(recipe) -> list[str]:
    """Names of the remote tiers a recipe writes to ("s3 s3://host:port", "fs /mnt/x"); [] when LMCache is off."""
    if not recipe.cache.enabled:
        return []
    names = []
    for tier in recipe.cache.tiers:
        if tier.kind == "s3" and tier.url:
            names.append(f"s3 {tier.url.lower().rstrip('/')}")
        elif tier.kind == "fs" and tier.path:
            names.append(f"fs {os.path.normpath(tier.path)}")
    return names


class TierMismatch:
    """Hosts sharing one remote tier that disagree on one cache-key setting."""

    def __init__(self, tier: str, key: str, values: dict):
        self.tier, self.key, self.values = tier, key, values  # values: repr(value) -> [hosts]

    def format(self) -> str:
        parts = "; ".join(f"{value} on {', '.join(hosts)}" for value, hosts in self.values.items())
        return (f"hosts sharing the {self.tier} tier disagree on {self.key}: {parts} "
                f"(fix: give every host that shares this tier the same {self.key})")

    def to_dict(self) -> dict:
        return {"tier": self.tier, "key": self.key, "values": self.values}


def find_tier_mismatches(host_recipes: dict) -> list[TierMismatch]:
    """For each remote tier used by two or more hosts: every cache-key setting on which they differ."""
    by_tier: dict[str, list[str]] = {}
    for host, recipe in host_recipes.items():
        for tier in shared_tiers(recipe):
            by_tier.setdefault(tier, []).append(host)
    mismatches = []
    for tier, hosts in by_tier.items():
        if len(hosts) < 2:
            continue
        settings = {host: cache_key_settings(host_recipes[host]) for host in hosts}
        for key in settings[hosts[0]]:
            values: dict[str, list[str]] = {}
            for host in hosts:
                values.setdefault(json.dumps(settings[host][key]), []).append(host)
            if len(values) > 1:
                mismatches.append(TierMismatch(tier, key, values))
    return mismatches


def check_shared_tiers(host_recipes: dict) -> None:
    """Refuse (one line) a fleet whose hosts share a remote tier but would write it under different keys."""
    mismatches = find_tier_mismatches(host_recipes)
    if mismatches:
        more = f" (and {len(mismatches) - 1} more difference(s))" if len(mismatches) > 1 else ""
        raise StackctlError(mismatches[0].format() + more)


# -- ansible-runner ----------------------------------------------------------------------------------------------

def default_forks(host_count: int) -> int:
    """One fork per host (hosts are checked in parallel), within Ansible's sane range."""
    return max(1, min(host_count, 50))


def rollout_extravars(plans: dict, *, batch: int | str | None, max_fail: int, skip_up: bool, wheelhouse: str,
                      wheelhouse_archive: str, wheelhouse_hash: str, artifacts_dir: str, tune: bool = False,
                      allow_reboot: bool = False, doctor_skip: tuple = (), up_args: tuple = ()) -> dict:
    """Extra variables of playbooks/rollout.yml."""
    return {
        "stackctl_fleet_serial": batch if batch is not None else "100%",
        "stackctl_fleet_max_fail_percentage": max_fail,
        "stackctl_host_fleet_plan": plans,
        "stackctl_host_wheelhouse": wheelhouse,
        "stackctl_host_wheelhouse_archive": wheelhouse_archive,
        "stackctl_host_wheelhouse_id": wheelhouse_hash,
        "stackctl_host_skip_up": skip_up,
        "stackctl_host_apply_tuning": tune,
        "stackctl_host_allow_reboot": allow_reboot,
        "stackctl_host_doctor_skip": list(doctor_skip),
        "stackctl_host_up_args": list(up_args),
        "stackctl_host_artifacts_dir": artifacts_dir,
    }


def doctor_extravars(plans: dict, *, scope: str, skip: tuple = ()) -> dict:
    """Extra variables of playbooks/doctor.yml."""
    return {"stackctl_host_fleet_plan": plans, "stackctl_host_doctor_scope": scope,
            "stackctl_host_doctor_skip": list(skip)}


def runner_kwargs(*, private_data_dir: str, playbook: str, inventory: str, extravars: dict, forks: int,
                  event_handler=None, verbosity: int = 0, quiet: bool = True, envvars: dict | None = None) -> dict:
    """Arguments of `ansible_runner.run`. Pipelining saves SSH round trips; colour off because stackctl prints."""
    env = {"ANSIBLE_PIPELINING": "True", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "False"}
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


# -- events -> per-host outcomes ---------------------------------------------------------------------------------

class HostOutcome:
    """What happened on one host."""

    def __init__(self, host: str, batch: int | None):
        self.host, self.batch = host, batch
        self.reached = False
        self.done = False
        self.unreachable = False
        self.changed = 0
        self.failed_task = ""
        self.message = ""
        self.recipe_hash = ""           # the host's own report (rollout: after install; doctor: its rollout record)
        self.planned_recipe_hash = ""
        self.up_started = False
        self.report: dict | None = None  # the last stackctl doctor JSON seen from this host
        self.report_phase = ""

    @property
    def status(self) -> str:
        if not self.reached:
            return NOT_REACHED
        if self.unreachable:
            return UNREACHABLE
        if self.failed_task:
            return FAILED
        if not self.done:
            return STOPPED
        return CHANGED if self.changed else OK

    def checks(self, status: str) -> list[dict]:
        results = (self.report or {}).get("results", [])
        return [{"id": r.get("id"), "message": r.get("message")} for r in results if r.get("status") == status]

    def running_recipe(self) -> str:
        """Which recipe the host has now, for a rollout: the new hash, "unchanged", or "unknown" (stopped in up)."""
        if self.status in (OK, CHANGED):
            return self.recipe_hash or self.planned_recipe_hash
        return "unknown" if self.up_started else "unchanged"

    def to_dict(self) -> dict:
        return {"host": self.host, "batch": self.batch, "status": self.status, "changed": self.changed,
                "recipe_hash": self.recipe_hash, "planned_recipe_hash": self.planned_recipe_hash,
                "failed_task": self.failed_task, "message": self.message,
                "failed_checks": self.checks("fail"), "warnings": self.checks("warn"),
                "doctor_phase": self.report_phase,
                "doctor_summary": (self.report or {}).get("summary")}


class FleetTracker:
    """Feeds on ansible-runner events (its event_handler), returns progress lines, and knows each host's outcome."""

    def __init__(self, hosts: list[str], host_batches: list[list[str]] | None = None, play: str = ROLLOUT_PLAY,
                 plans: dict | None = None):
        batch_of = {h: i + 1 for i, group in enumerate(host_batches or [hosts]) for h in group}
        self.hosts = list(hosts)
        self.batches = host_batches or [list(hosts)]
        self.play = play
        self.batches_started = 0
        self.outcomes = {h: HostOutcome(h, batch_of.get(h)) for h in hosts}
        for host, plan in (plans or {}).items():
            if host in self.outcomes:
                self.outcomes[host].planned_recipe_hash = plan.get("recipe_hash", "")

    def handle(self, event: dict) -> list[str]:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start" and data.get("name") == self.play:
            self.batches_started += 1
            if len(self.batches) > 1 and self.batches_started <= len(self.batches):
                members = ", ".join(self.batches[self.batches_started - 1])
                return [f"batch {self.batches_started}/{len(self.batches)}: {members}"]
            return []
        outcome = self.outcomes.get(data.get("host", ""))
        if outcome is None or kind not in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable",
                                           "runner_on_skipped", "runner_on_start"):
            return []
        outcome.reached = True
        task = data.get("task", "")
        result = data.get("res") or {}
        if kind == "runner_on_start":
            if task == TASK_UP:
                outcome.up_started = True
            return []
        if kind == "runner_on_skipped":
            return []
        self._read_facts(outcome, task, result)
        if kind == "runner_on_unreachable":
            outcome.unreachable = True
            outcome.failed_task = outcome.failed_task or task
            outcome.message = outcome.message or _one_line(result.get("msg", "unreachable"))
            return [_progress(outcome.host, "UNREACHABLE", task, outcome.message)]
        if kind == "runner_on_failed":
            if data.get("ignore_errors"):
                return [_progress(outcome.host, "failed (ignored)", task)]
            if not outcome.failed_task:  # the first failure is the cause; later ones are consequences
                outcome.failed_task, outcome.message = task, failure_message(result)
            return [_progress(outcome.host, "FAILED", task, failure_message(result))]
        if task in TASK_DONE:
            outcome.done = True
        if result.get("changed"):
            outcome.changed += 1
            return [_progress(outcome.host, "changed", task)]
        return [_progress(outcome.host, "ok", task)]

    def _read_facts(self, outcome: HostOutcome, task: str, result: dict) -> None:
        if task.startswith(DOCTOR_TASK_PREFIX):
            report = _json_object(result.get("stdout", ""))
            if report is not None:
                outcome.report, outcome.report_phase = report, _phase(task)
        elif task == TASK_RECIPE_HASH and result.get("stdout"):
            outcome.recipe_hash = result["stdout"].strip()
        elif task == TASK_ROLLOUT_RECORD and result.get("content"):
            try:
                record = json.loads(base64.b64decode(result["content"]).decode())
            except (ValueError, UnicodeDecodeError):
                record = {}
            outcome.recipe_hash = str(record.get("recipe_hash", ""))

    def results(self) -> list[HostOutcome]:
        return [self.outcomes[h] for h in self.hosts]


def failure_message(result: dict) -> str:
    """One line: a fail task's message, or the end of a failed command's error output."""
    message = str(result.get("msg") or "")
    if message in ("", "non-zero return code") or message.startswith("The conditional check"):
        stderr = [line for line in str(result.get("stderr") or "").splitlines() if line.strip()]
        rc = result.get("rc")
        detail = stderr[-1] if stderr else message or "failed"
        message = f"{detail} (exit {rc})" if rc is not None else detail
    return _one_line(message)


def _phase(task: str) -> str:
    match = re.search(r"\((\w+)\)", task)
    return match.group(1) if match else ""


def _json_object(text: str) -> dict | None:
    text = (text or "").strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _progress(host: str, status: str, task: str, detail: str = "") -> str:
    return f"  {host:<20} {status:<12} {task}" + (f": {detail}" if detail else "")


# -- reports ----------------------------------------------------------------------------------------------------

def counts(outcomes: list[HostOutcome]) -> dict[str, int]:
    tally = {status: 0 for status in STATUSES}
    for outcome in outcomes:
        tally[outcome.status] += 1
    return tally


def exit_status(outcomes: list[HostOutcome]) -> int:
    """0 when every host finished (ok or changed), else 1."""
    return 0 if outcomes and all(o.status in (OK, CHANGED) for o in outcomes) else 1


def detail(outcome: HostOutcome, action: str = "rollout") -> str:
    """The DETAIL column: the failing checks (id: message), else the failure, else what happened."""
    status = outcome.status
    failing = outcome.checks("fail")
    if status == FAILED and failing:
        phase = f"{outcome.report_phase}: " if outcome.report_phase else ""
        return phase + "; ".join(f"{c['id']}: {c['message']}" for c in failing)
    if status in (FAILED, UNREACHABLE):
        return f"{outcome.failed_task}: {outcome.message}"
    if status == NOT_REACHED:
        return "not touched: the rollout stopped before its batch" if action == "rollout" else "no result"
    if status == STOPPED:
        return "stopped before finishing: another host of its batch failed"
    warnings = outcome.checks("warn")
    text = f"{outcome.changed} change(s)" if action == "rollout" else "checks passed"
    if warnings:
        text += "; warnings: " + ", ".join(w["id"] for w in warnings)
    if action != "rollout" and outcome.recipe_hash and outcome.planned_recipe_hash and \
            outcome.recipe_hash != outcome.planned_recipe_hash:
        text += f"; rolled out recipe {outcome.recipe_hash} is not the checked {outcome.planned_recipe_hash}"
    return text


def recipe_groups(outcomes: list[HostOutcome], action: str = "rollout") -> dict[str, list[str]]:
    """Recipe -> hosts: which hosts run which recipe hash after a rollout (or have, per their record, for doctor)."""
    groups: dict[str, list[str]] = {}
    for outcome in outcomes:
        if action == "rollout":
            key = outcome.running_recipe()
        else:
            key = outcome.recipe_hash or ("no rollout record" if outcome.reached else "unknown")
        groups.setdefault(key, []).append(outcome.host)
    return groups


def summary_table(outcomes: list[HostOutcome], title: str, action: str = "rollout") -> str:
    """The final per-host table, then which hosts have which recipe, then one verdict line."""
    rows = [("HOST", "BATCH", "STATUS", "RECIPE", "DETAIL")]
    for o in outcomes:
        recipe = o.running_recipe() if action == "rollout" else (o.recipe_hash or "-")
        rows.append((o.host, str(o.batch or "-"), o.status, recipe, detail(o, action)))
    if action != "rollout":
        rows = [row[:1] + row[2:] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [title, ""]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    lines.append("")
    for recipe, hosts in recipe_groups(outcomes, action).items():
        label = {"unchanged": "unchanged (previous recipe, untouched)",
                 "unknown": "unknown (stopped during stackctl up)"}.get(recipe, f"recipe {recipe}")
        lines.append(f"{label}: {', '.join(hosts)}")
    tally = counts(outcomes)
    lines.append(", ".join(f"{n} {status}" for status, n in tally.items() if n))
    return "\n".join(lines)


def summary_json(outcomes: list[HostOutcome], header: dict, action: str = "rollout") -> dict:
    """The machine-readable summary (`--format json`)."""
    return {**header, "summary": counts(outcomes), "recipes": recipe_groups(outcomes, action),
            "hosts": [o.to_dict() | {"recipe": o.running_recipe() if action == "rollout" else o.recipe_hash}
                      for o in outcomes]}
