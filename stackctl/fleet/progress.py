"""What happened on each host: ansible-runner events -> per-host outcomes (HostOutcome) and progress lines."""

from __future__ import annotations

import base64
import json
import re

from stackctl.fleet.ansible import (
    DOCTOR_TASK_PREFIX,
    PHASE_TASKS,
    ROLLOUT_PLAY,
    TASK_DONE,
    TASK_MARKER_OUTCOMES,
    TASK_PREVIOUS_ROLLOUT,
    TASK_RECIPE_HASH,
    TASK_ROLLED_BACK,
    TASK_ROLLOUT_RECORD,
    TASK_UP,
)

# -- what happened on one host (HostOutcome) and the host statuses derived from it ----------------------------------
# Host statuses, in the order the summary counts them.
OK, CHANGED, FAILED, ROLLED_BACK, UNREACHABLE, STOPPED, NOT_REACHED = (
    "ok", "changed", "failed", "rolled back", "unreachable", "stopped", "not reached")
STATUSES = (OK, CHANGED, FAILED, ROLLED_BACK, UNREACHABLE, STOPPED, NOT_REACHED)

# What a rollout did to a host, in four words: the new recipe runs, the previous came back, neither, untouched.
NEW, RESULT_ROLLED_BACK, RESULT_FAILED, RESULT_NOT_REACHED = "new", "rolled back", "failed", "not reached"


class HostOutcome:
    """What happened on one host."""

    def __init__(self, host: str, batch: int | None):
        self.host, self.batch = host, batch
        self.reached = False
        self.done = False
        self.unreachable = False
        self.changed = 0
        self.failed_task = ""
        self.phase_seconds: dict[str, float] = {}  # ship, up, gate (stackctl/fleet/ansible.py PHASE_TASKS)
        self.message = ""
        self.recipe_hash = ""           # the host's own report (rollout: after install; doctor: its rollout record)
        self.planned_recipe_hash = ""
        self.up_started = False
        self.rolled_back = False         # --rollback-on-fail put the previous recipe back
        self.previous_recipe_hash = ""   # what the host had before this rollout (its rollout record)
        self.report: dict | None = None  # the last stackctl doctor JSON seen from this host
        self.report_phase = ""
        self.shared_tiers: list[dict] = []  # fleet doctor's shared-tier markers: {tier, ok, message, note} each

    @property
    def status(self) -> str:
        if not self.reached:
            return NOT_REACHED
        if self.unreachable:
            return UNREACHABLE
        if self.failed_task:
            return ROLLED_BACK if self.rolled_back else FAILED
        if not self.done:
            return STOPPED
        return CHANGED if self.changed else OK

    @property
    def result(self) -> str:
        """new / rolled back / failed / not reached: the rollout's final word on this host."""
        status = self.status
        if status in (OK, CHANGED):
            return NEW
        if status == ROLLED_BACK:
            return RESULT_ROLLED_BACK
        return RESULT_NOT_REACHED if status == NOT_REACHED else RESULT_FAILED

    @property
    def notes(self) -> list[str]:
        """What passed but proved nothing: a shared tier not proven shared, and why."""
        return [str(t["note"]) for t in self.shared_tiers if t.get("note")]

    def checks(self, status: str) -> list[dict]:
        results = (self.report or {}).get("results", [])
        return [{"id": r.get("id"), "message": r.get("message")} for r in results if r.get("status") == status]

    def served_dtype(self) -> str | None:
        """The dtype this host's server computes in, as its doctor report's server.dtype check read it from the
        server's log (canonical: float32 | bfloat16 | float16); None when the report has no such reading."""
        from stackctl.host.isa import canonical_dtype

        served = self.check_details("server.dtype").get("served")
        return canonical_dtype(served) if served else None

    def check_details(self, check_id: str) -> dict:
        """The details of one check of this host's doctor report ({} when the report has no such check)."""
        results = {r.get("id"): r for r in (self.report or {}).get("results", [])}
        return (results.get(check_id) or {}).get("details") or {}

    def placement(self) -> str:
        """Where the server runs on this host (node, CPU list), from its doctor report: what server.pinning read
        from the live processes, else what host.pinning decided; "" when the report has neither."""
        for check_id, source in (("server.pinning", "running"), ("host.pinning", "decided")):
            where = self.check_details(check_id).get("placement")
            if where is None:
                continue
            if not where.get("cpus"):
                return f"not pinned ({source})"
            node = f"node {where['nodes']}, " if where.get("nodes") else ""
            return f"{node}CPUs {where['cpus']} ({source})"
        return ""

    def running_recipe(self) -> str:
        """Which recipe the host has now, for a rollout: the new hash, "unchanged", or "unknown" (stopped in up)."""
        if self.status in (OK, CHANGED):
            return self.recipe_hash or self.planned_recipe_hash
        if self.status == ROLLED_BACK:
            return self.previous_recipe_hash or "previous"
        return "unknown" if self.up_started else "unchanged"

    def to_dict(self) -> dict:
        return {"host": self.host, "batch": self.batch, "status": self.status, "result": self.result,
                "changed": self.changed, "rolled_back": self.rolled_back,
                "previous_recipe_hash": self.previous_recipe_hash,
                "recipe_hash": self.recipe_hash, "planned_recipe_hash": self.planned_recipe_hash,
                "failed_task": self.failed_task, "message": self.message,
                "phase_seconds": {name: round(value, 2) for name, value in self.phase_seconds.items()},
                "failed_checks": self.checks("fail"), "warnings": self.checks("warn"),
                "doctor_phase": self.report_phase, "placement": self.placement(),
                "doctor_summary": (self.report or {}).get("summary"), "shared_tiers": self.shared_tiers,
                "served_dtype": self.served_dtype(),
                "notes": self.notes}


# -- ansible-runner events -> per-host outcomes and progress lines --------------------------------------------------


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
        self._time_phase(outcome, task, data.get("duration"))
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
        if task == TASK_MARKER_OUTCOMES and outcome.notes:
            return [_progress(outcome.host, "note", _one_line(note)) for note in outcome.notes]
        if task == TASK_ROLLED_BACK:
            outcome.rolled_back = True
            return [_progress(outcome.host, "rolled back", "to its previous recipe")]
        if result.get("changed"):
            outcome.changed += 1
            return [_progress(outcome.host, "changed", task)]
        return [_progress(outcome.host, "ok", task)]

    @staticmethod
    def _time_phase(outcome: HostOutcome, task: str, seconds) -> None:
        phase = next((name for name, tasks in PHASE_TASKS.items() if task in tasks), None)
        if phase is not None and isinstance(seconds, (int, float)):
            outcome.phase_seconds[phase] = outcome.phase_seconds.get(phase, 0.0) + float(seconds)

    def _read_facts(self, outcome: HostOutcome, task: str, result: dict) -> None:
        if task.startswith(DOCTOR_TASK_PREFIX):
            report = _json_object(result.get("stdout", ""))
            if report is not None:
                outcome.report, outcome.report_phase = report, _phase(task)
        elif task == TASK_MARKER_OUTCOMES:
            facts = (result.get("ansible_facts") or {}).get("stackctl_host_marker_outcomes")
            outcome.shared_tiers = [t for t in facts if isinstance(t, dict)] if isinstance(facts, list) else []
        elif task == TASK_PREVIOUS_ROLLOUT:
            previous = (result.get("ansible_facts") or {}).get("stackctl_host_previous") or {}
            outcome.previous_recipe_hash = str(previous.get("recipe_hash", ""))
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
