"""The end of a fleet run: status counts, the exit status, the per-host table and the JSON summary."""

from __future__ import annotations

from stackctl.errors import ExitCode
from stackctl.fleet.progress import (
    CHANGED,
    FAILED,
    NOT_REACHED,
    OK,
    ROLLED_BACK,
    STATUSES,
    STOPPED,
    UNREACHABLE,
    HostOutcome,
)


def counts(outcomes: list[HostOutcome]) -> dict[str, int]:
    tally = {status: 0 for status in STATUSES}
    for outcome in outcomes:
        tally[outcome.status] += 1
    return tally


def exit_status(outcomes: list[HostOutcome]) -> int:
    """0 when every host finished (ok or changed), else 1."""
    return ExitCode.OK if outcomes and all(o.status in (OK, CHANGED) for o in outcomes) else ExitCode.FAILED


def detail(outcome: HostOutcome, action: str = "rollout") -> str:
    """The DETAIL column: the failing checks (id: message), else the failure, else what happened."""
    status = outcome.status
    failing = outcome.checks("fail")
    if status in (FAILED, ROLLED_BACK) and failing:
        phase = f"{outcome.report_phase}: " if outcome.report_phase else ""
        return phase + "; ".join(f"{c['id']}: {c['message']}" for c in failing)
    if status == ROLLED_BACK:
        return f"{outcome.failed_task}: {outcome.message}; back on its previous recipe"
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
    if outcome.notes:
        text += "; " + "; ".join(outcome.notes)
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
    if action != "rollout":  # doctor: no batches; where each host's server runs instead
        rows = [row[:1] + row[2:4] + (where,) + row[4:]
                for row, where in zip(rows, ["WHERE"] + [o.placement() or "-" for o in outcomes])]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [title, ""]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    lines.append("")
    for recipe, hosts in recipe_groups(outcomes, action).items():
        label = {"unchanged": "unchanged (previous recipe, untouched)",
                 "unknown": "unknown (stopped during stackctl up)"}.get(recipe, f"recipe {recipe}")
        lines.append(f"{label}: {', '.join(hosts)}")
    if action == "rollout":
        lines.append(result_line(outcomes))
    tally = counts(outcomes)
    lines.append(", ".join(f"{n} {status}" for status, n in tally.items() if n))
    return "\n".join(lines)


def result_line(outcomes: list[HostOutcome]) -> str:
    """Per host, the rollout's final word: new, rolled back, failed or not reached."""
    groups: dict[str, list[str]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.result, []).append(outcome.host)
    return "result: " + "; ".join(f"{result} {', '.join(hosts)}" for result, hosts in groups.items())


def summary_json(outcomes: list[HostOutcome], header: dict, action: str = "rollout") -> dict:
    """The machine-readable summary (`--format json`)."""
    return {**header, "summary": counts(outcomes), "recipes": recipe_groups(outcomes, action),
            "hosts": [o.to_dict() | {"recipe": o.running_recipe() if action == "rollout" else o.recipe_hash}
                      for o in outcomes]}


def phase_lines(controller: dict[str, float], outcomes: list[HostOutcome]) -> list[str]:
    """The rollout's wall time per phase: the controller's (build, save or push), then each host's (ship, up,
    gate) as its tasks took them."""
    if not controller and not any(o.phase_seconds for o in outcomes):
        return []
    lines = ["phases: " + (", ".join(f"{name} {seconds:.0f} s" for name, seconds in controller.items())
                           or "nothing built here")]
    for outcome in outcomes:
        if outcome.phase_seconds:
            lines.append(f"  {outcome.host}: " + ", ".join(f"{name} {seconds:.0f} s"
                                                       for name, seconds in outcome.phase_seconds.items()))
    return lines
