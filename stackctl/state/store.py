"""The state directory: one writer for everything stackctl keeps between runs.

Per stack (``STATE/NAME/``): ``deployments/RECIPE_HASH/`` (the recipe as deployed and its rendered bundle, which
the container mounts read-only), ``history.json`` (the last deployments and their outcomes), ``lock`` (who is
changing the stack right now) and ``last-failure.log``. Fleet runs (``STATE/_fleet/``): ``runs/`` (one folder per
`stackctl fleet` run: ansible-runner's artifacts, the wheelhouse) and ``hosts/HOST.json`` (each host's rollout
records). ``_fleet`` is a name no stack can have (stack names start with a letter or digit), so a stack named
``fleet`` keeps its folder to itself. Every file is written to a temporary sibling and renamed into place, so an
interrupted stackctl never leaves half a file.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from stackctl.errors import StackctlError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Mapping

HISTORY_KEEP = 20      # deployments listed by `status --history`
DEPLOYMENTS_KEEP = 3   # recipe + bundle copies kept for rollback (always including the running one)
FLEET_RUNS_KEEP = 10   # fleet run folders kept; each host's rollout records are kept apart and never pruned with them
FLEET_HOST_RECORDS_KEEP = 50  # rollout records kept per host

FLEET_DIR = "_fleet"   # not a stack name: recipe/model.py's NAME_PATTERN starts with [a-z0-9]
LEGACY_FLEET_DIR = "fleet"  # where stackctl kept fleet runs before, shared with a stack named `fleet`


def base_dir() -> Path:
    return Path(os.environ.get("STACKCTL_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "stackctl"))


def stack_dir(name: str) -> Path:
    return base_dir() / name


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def ensure_writable(directory: Path) -> None:
    """Refuse early, with the fix, when the state directory cannot be written (before anything changes)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise StackctlError(f"state directory {directory} is not writable: {exc.strerror or exc} (fix: make it "
                            "writable, or point STACKCTL_STATE_DIR at a writable directory)") from None


# -- history ----------------------------------------------------------------------------------------------------

def read_history(name: str) -> list[dict]:
    """Deployments, oldest first. A damaged file reads as empty history (and is replaced on the next write)."""
    path = stack_dir(name) / "history.json"
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        return []
    return entries if isinstance(entries, list) else []


def record_deployment(name: str, entry: dict) -> None:
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **entry}
    entries = (read_history(name) + [entry])[-HISTORY_KEEP:]
    write_atomically(stack_dir(name) / "history.json", json.dumps(entries, indent=2) + "\n")


def last_good(name: str, exclude_hash: str | None = None) -> dict | None:
    """The newest deployment that served (deployed or restored), optionally with another recipe hash."""
    for entry in reversed(read_history(name)):
        if entry.get("outcome") in ("deployed", "rolled back to", "restored") and \
                entry.get("recipe_hash") != exclude_hash:
            return entry
    return None


# -- deployments (what rollback needs) -------------------------------------------------------------------------

def deployment_dir(name: str, recipe_hash: str) -> Path:
    return stack_dir(name) / "deployments" / recipe_hash


def save_deployment(name: str, recipe_hash: str, recipe_text: str, files: Mapping, write_bundle) -> Path:
    """Keep the recipe as deployed and its bundle; returns the bundle directory the container mounts."""
    where = deployment_dir(name, recipe_hash)
    write_bundle(files, where / "bundle")
    write_atomically(where / "recipe.toml", recipe_text)
    return where / "bundle"


def prune_deployments(name: str, keep: set[str]) -> None:
    """Drop saved deployments beyond DEPLOYMENTS_KEEP, never one in `keep` (running or previous)."""
    root = stack_dir(name) / "deployments"
    if not root.is_dir():
        return
    wanted = set(keep)
    for entry in reversed(read_history(name)):
        if len(wanted) >= DEPLOYMENTS_KEEP:
            break
        wanted.add(entry.get("recipe_hash", ""))
    for folder in root.iterdir():
        if folder.is_dir() and folder.name not in wanted:
            shutil.rmtree(folder, ignore_errors=True)


# -- fleet runs -------------------------------------------------------------------------------------------------

def fleet_dir() -> Path:
    return base_dir() / FLEET_DIR


def _adopt_legacy_fleet_state() -> None:
    """Move runs/ and hosts/ that an older stackctl kept in STATE/fleet/ to STATE/_fleet/, so each host's earlier
    rollout records stay readable in one place. A stack named `fleet` (deployments/, history.json) stays put."""
    legacy = base_dir() / LEGACY_FLEET_DIR
    for part in ("runs", "hosts"):
        old, new = legacy / part, fleet_dir() / part
        if old.is_dir() and not new.exists():
            new.parent.mkdir(parents=True, exist_ok=True)
            os.replace(old, new)
    try:
        legacy.rmdir()  # only when nothing else (a stack) lives there
    except OSError:
        pass


def new_fleet_run_dir(action: str, folders: tuple[str, ...] = (), create: bool = True) -> Path:
    """A fresh folder for one fleet run (with the given subfolders); runs beyond FLEET_RUNS_KEEP are removed. With
    create=False (a dry run) only its name: nothing is written or removed."""
    runs = fleet_dir() / "runs"
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    run_dir = runs / f"{stamp}-{action}-{os.getpid()}"
    if not create:
        return run_dir
    _adopt_legacy_fleet_state()
    runs.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir()
    for folder in folders:
        (run_dir / folder).mkdir()
    for old in sorted(p for p in runs.iterdir() if p.is_dir())[:-FLEET_RUNS_KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    return run_dir


def fleet_host_records(host: str) -> list[dict]:
    """A host's rollout records, oldest first ([] when none or damaged)."""
    try:
        kept = json.loads((fleet_dir() / "hosts" / f"{host}.json").read_text())
    except (OSError, ValueError):
        return []
    return kept if isinstance(kept, list) else [kept]


def append_fleet_host_record(host: str, record: dict) -> None:
    """Add one rollout record to a host's list (newest last, FLEET_HOST_RECORDS_KEEP kept)."""
    kept = fleet_host_records(host) + [record]
    write_atomically(fleet_dir() / "hosts" / f"{host}.json", json.dumps(kept[-FLEET_HOST_RECORDS_KEEP:], indent=2) + "\n")
