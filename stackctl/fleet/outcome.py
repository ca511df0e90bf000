"""What happened on one host (HostOutcome) and the host statuses derived from it."""

from __future__ import annotations

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
        self.message = ""
        self.recipe_hash = ""           # the host's own report (rollout: after install; doctor: its rollout record)
        self.planned_recipe_hash = ""
        self.up_started = False
        self.rolled_back = False         # --rollback-on-fail put the previous recipe back
        self.previous_recipe_hash = ""   # what the host had before this rollout (its rollout record)
        self.report: dict | None = None  # the last stackctl doctor JSON seen from this host
        self.report_phase = ""

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

    def checks(self, status: str) -> list[dict]:
        results = (self.report or {}).get("results", [])
        return [{"id": r.get("id"), "message": r.get("message")} for r in results if r.get("status") == status]

    def placement(self) -> str:
        """Where the server runs on this host (node, CPU list), from its doctor report: what server.pinning read
        from the live processes, else what host.pinning decided; "" when the report has neither."""
        results = {r.get("id"): r for r in (self.report or {}).get("results", [])}
        for check_id, source in (("server.pinning", "running"), ("host.pinning", "decided")):
            where = ((results.get(check_id) or {}).get("details") or {}).get("placement")
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
                "failed_checks": self.checks("fail"), "warnings": self.checks("warn"),
                "doctor_phase": self.report_phase, "placement": self.placement(),
                "doctor_summary": (self.report or {}).get("summary")}
