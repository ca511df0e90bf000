"""One catalog of the ids a user names in `checks.skip`, `--skip` and `stackctl explain`: recipe rules
(rules/registry.py) and doctor checks (doctor/registry.py) both register their ids here as their modules load, and
an id names one rule or one check, never both (a skip list could not tell them apart).

`validate` does not import doctor's checks (its start-up stays light), so the ids of checks not loaded come from
knowledge/sources.toml, which holds one table per rule and check id: tests/unit/test_sources.py fails on a rule or
check without one and on a table that names neither.
"""

from __future__ import annotations

RULE, CHECK = "rule", "check"
REGISTERED: dict[str, str] = {}  # id -> RULE or CHECK, for the modules loaded so far


def register(entry_id: str, kind: str) -> None:
    """Record a rule's or a check's id; refuse an id the other kind has taken."""
    taken = REGISTERED.setdefault(entry_id, kind)
    if taken != kind:
        raise ValueError(f"{kind} id {entry_id!r} is a {taken} id already: `checks.skip` could not tell them apart")


def known_ids() -> set[str]:
    """Every rule and check id, loaded or not."""
    from stackctl.knowledge.sources import ids

    return set(REGISTERED) | ids()
