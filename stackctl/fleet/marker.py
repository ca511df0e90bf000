"""Proof that a shared KV tier is shared, for fleet doctor: "shared" is a fact, not an assumption.

Hosts whose recipes name the same fs tier path, or the same S3 bucket at the same endpoint, make a group: they are
meant to see one store. In fleet doctor (playbooks/roles/stackctl_host/tasks/doctor.yml) the first host of each
group still in the play puts a marker there, every other host of the group still in the play reads it back through
its own recipe's settings (its mount; its S3 endpoint, TLS, CA file and credentials), and the writer deletes it at
the end, always. A host that failed before the marker step is no longer in the play, so it neither writes nor makes
the others "not shared": the next host of the group writes instead.

This module is the host side; the controller's (which hosts make a group, and each group's label) is
fleet/marker_groups.py. `python -m stackctl.fleet.marker put|get|delete RECIPE MARKER_ID KIND [--readers H,..] [--writer H]
[--not-written]` prints one JSON line {"tier", "ok", "message", "note"} and exits 0 (ok), 1 (not ok) or 2 (could
not run: the recipe does not load, a bad argument).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass

from stackctl.fleet.marker_groups import marker_kinds, marker_tier, tier_label
from stackctl.storage.base import Absent, StoreError
from stackctl.storage.registry import storage_of

MARKER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass
class Outcome:
    tier: str
    ok: bool
    message: str = ""
    note: str = ""  # ok, but nothing proven: why


def _store(tier, marker_id: str):
    return storage_of(tier).marker_store(tier, marker_id)


def put(tier, marker_id: str, readers: list[str]) -> Outcome:
    """Write the group's marker; with no reader left in the play, write nothing and say nothing was proven."""
    label = tier_label(tier)
    if not readers:
        return Outcome(label, True, note=f"{label}: not proven shared: no other host of its group got to this check")
    try:
        _store(tier, marker_id).put(marker_id + "\n")
    except StoreError as exc:
        return Outcome(label, False, f"{label}: could not write the shared-tier marker: {exc}")
    return Outcome(label, True, f"{label}: marker written for {', '.join(readers)}")


def get(tier, marker_id: str, writer: str, written: bool = True) -> Outcome:
    """Read the marker `writer` put: there -> shared; absent -> not shared; the writer could not write it -> ok,
    with a note that nothing was proven (never "not shared")."""
    label = tier_label(tier)
    if not written:
        return Outcome(label, True, note=f"{label}: not proven shared: {writer}, which writes its marker, "
                                         "could not write it")
    store = _store(tier, marker_id)
    try:
        content: str | None = store.get().strip()
    except Absent:
        content = None
    except StoreError as exc:
        return Outcome(label, False, f"{label}: could not read the shared-tier marker {writer} wrote: {exc}")
    if content != marker_id:
        return Outcome(label, False, f"{label} is not shared: " + store.not_there.format(writer=writer))
    return Outcome(label, True, f"{label}: shared with {writer} (read its marker)")


def delete(tier, marker_id: str) -> Outcome:
    """Remove the marker (the writer, always; nothing to remove is fine)."""
    label = tier_label(tier)
    try:
        _store(tier, marker_id).delete()
    except Absent:
        pass
    except StoreError as exc:
        return Outcome(label, False, f"{label}: could not remove the shared-tier marker: {exc}")
    return Outcome(label, True, f"{label}: marker removed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stackctl.fleet.marker",
                                     description="Put, read or delete a fleet doctor shared-tier marker.")
    parser.add_argument("action", choices=("put", "get", "delete"))
    parser.add_argument("recipe")
    parser.add_argument("marker_id")
    parser.add_argument("kind", choices=marker_kinds())
    parser.add_argument("--readers", default="", help="put: the group's other hosts still in the play (comma list)")
    parser.add_argument("--writer", default="", help="get: the host that writes the marker")
    parser.add_argument("--not-written", action="store_true", help="get: the writer could not write it")
    args = parser.parse_args(argv)
    if not MARKER_ID.match(args.marker_id):
        return _emit(Outcome("", False, f"marker id {args.marker_id!r}: letters, digits, - and _ only"), 2)
    from stackctl.errors import StackctlError
    from stackctl.recipe import load_recipe

    try:
        tier = marker_tier(load_recipe(args.recipe), args.kind)
    except StackctlError as exc:
        return _emit(Outcome("", False, str(exc)), 2)
    if tier is None:
        return _emit(Outcome("", False, f"{args.recipe}: no {args.kind} tier in the recipe"), 2)
    if args.action == "put":
        outcome = put(tier, args.marker_id, [h for h in args.readers.split(",") if h])
    elif args.action == "get":
        outcome = get(tier, args.marker_id, args.writer or "the writer", written=not args.not_written)
    else:
        outcome = delete(tier, args.marker_id)
    return _emit(outcome, 0 if outcome.ok else 1)


def _emit(outcome: Outcome, status: int) -> int:
    print(json.dumps(asdict(outcome)))
    if status == 2:  # could not run: also where Ansible shows a failed command's error
        print(outcome.message, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
