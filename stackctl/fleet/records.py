"""Each reached host's rollout record, kept apart from the pruned run folders (the state module writes it)."""

from __future__ import annotations

import json
from pathlib import Path

from stackctl.state import store


def rollout_record(outcome, artifacts: Path) -> dict:
    """The playbook's own record when the host wrote one, else what the controller saw (an unreachable host writes
    nothing), with the controller's outcome and the run folder added."""
    try:
        record = json.loads((artifacts / f"{outcome.host}.json").read_text())
    except (OSError, ValueError):
        record = {"host": outcome.host, "outcome": outcome.status}
    record["controller"] = outcome.to_dict()
    record["run"] = str(artifacts.parent)
    return record


def keep_host_records(outcomes, artifacts: Path) -> None:
    """Append each reached host's record to its list; hosts this rollout did not reach keep theirs as they are."""
    for outcome in outcomes:
        if outcome.reached:
            store.append_fleet_host_record(outcome.host, rollout_record(outcome, artifacts))
