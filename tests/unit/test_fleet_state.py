"""Fleet runs in the state dir: a folder no stack name can take, run folders pruned, each host's rollout records
kept apart, and records an older stackctl kept in STATE/fleet/ carried over."""

from __future__ import annotations

import json
import re

import pytest
from helpers import RECIPES, REPO

from stackctl.state import store
from stackctl.errors import StackctlError
from stackctl.fleet.progress import HostOutcome
from stackctl.fleet.records import keep_host_records
from stackctl.recipe import load_recipe_text
from stackctl.recipe.model import NAME_PATTERN


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_no_stack_can_share_the_fleet_folder(base):
    assert re.match(NAME_PATTERN, store.FLEET_DIR) is None
    text = (RECIPES / "cpu-smoke.toml").read_text().replace('name = "cpu-smoke"', f'name = "{store.FLEET_DIR}"', 1)
    with pytest.raises(StackctlError, match="stack.name"):
        load_recipe_text(text, "r.toml")
    run = store.new_fleet_run_dir("doctor", ("runner",))
    assert not run.is_relative_to(store.stack_dir("fleet"))
    assert run.parent == base / store.FLEET_DIR / "runs" and (run / "runner").is_dir()


def test_run_folders_beyond_the_limit_are_pruned_and_a_dry_run_writes_nothing(base, monkeypatch):
    assert not store.new_fleet_run_dir("rollout", ("runner", "hosts"), create=False).parent.exists()
    runs = base / store.FLEET_DIR / "runs"
    runs.mkdir(parents=True)
    for i in range(store.FLEET_RUNS_KEEP + 3):
        (runs / f"20000101T0000{i:02d}-doctor-1").mkdir()
    newest = store.new_fleet_run_dir("rollout", ("runner", "hosts"))
    kept = sorted(p.name for p in runs.iterdir())
    assert len(kept) == store.FLEET_RUNS_KEEP and kept[-1] == newest.name and "20000101T000000-doctor-1" not in kept


def test_host_records_keep_the_newest_and_wrap_an_old_single_record(base):
    hosts = base / store.FLEET_DIR / "hosts"
    hosts.mkdir(parents=True)
    (hosts / "node-a.json").write_text(json.dumps({"host": "node-a", "outcome": "ok"}))
    for i in range(store.FLEET_HOST_RECORDS_KEEP):
        store.append_fleet_host_record("node-a", {"n": i})
    records = store.fleet_host_records("node-a")
    assert len(records) == store.FLEET_HOST_RECORDS_KEEP and records[-1] == {"n": store.FLEET_HOST_RECORDS_KEEP - 1}
    assert records[0] == {"n": 0}  # the old single record was the oldest, so it went first


def test_only_reached_hosts_get_a_record_and_the_playbooks_own_record_wins(base, tmp_path):
    artifacts = tmp_path / "run" / "hosts"
    artifacts.mkdir(parents=True)
    (artifacts / "wrote.json").write_text(json.dumps({"host": "wrote", "recipe_hash": "abc"}))
    wrote, silent, untouched = HostOutcome("wrote", 1), HostOutcome("silent", 1), HostOutcome("untouched", 2)
    wrote.reached = silent.reached = silent.unreachable = True
    keep_host_records([wrote, silent, untouched], artifacts)
    (own,) = store.fleet_host_records("wrote")
    assert own["recipe_hash"] == "abc" and own["run"] == str(tmp_path / "run") and own["controller"]["host"] == "wrote"
    assert store.fleet_host_records("silent")[0]["outcome"] == "unreachable"
    assert store.fleet_host_records("untouched") == []


def test_records_an_older_stackctl_kept_in_fleet_move_and_a_stack_named_fleet_stays(base):
    legacy = base / store.LEGACY_FLEET_DIR
    (legacy / "hosts").mkdir(parents=True)
    (legacy / "runs" / "20000101T000000-rollout-1").mkdir(parents=True)
    (legacy / "hosts" / "node-a.json").write_text(json.dumps([{"n": 0}]))
    (legacy / "history.json").write_text("[]")  # a stack named `fleet` lives here too
    store.new_fleet_run_dir("rollout", ("runner", "hosts"))
    store.append_fleet_host_record("node-a", {"n": 1})
    assert store.fleet_host_records("node-a") == [{"n": 0}, {"n": 1}]
    assert (base / store.FLEET_DIR / "runs" / "20000101T000000-rollout-1").is_dir()
    assert sorted(p.name for p in legacy.iterdir()) == ["history.json"]
    assert store.read_history("fleet") == []
    (legacy / "history.json").unlink()
    store.new_fleet_run_dir("doctor")
    assert not legacy.exists()  # nothing of a stack was there: the empty folder goes


def test_a_given_wheelhouse_needs_a_stackctl_wheel_and_a_dry_run_builds_nothing(tmp_path):
    from stackctl.fleet.wheelhouse import ready_wheelhouse, source_tree

    said: list[str] = []
    assert ready_wheelhouse(None, tmp_path, said.append, dry_run=True) == ("<built at run time>",
                                                                          "<computed at run time>")
    with pytest.raises(StackctlError, match="no stackctl wheel in the wheelhouse"):
        ready_wheelhouse(str(tmp_path), tmp_path, said.append)
    (tmp_path / "stackctl-0.1.0-py3-none-any.whl").write_bytes(b"wheel")
    folder, wheel_id = ready_wheelhouse(str(tmp_path), tmp_path / "run", said.append)
    assert folder == str(tmp_path.resolve()) and len(wheel_id) == 16 and said == []
    assert source_tree() == REPO  # this checkout: the tree `pip wheel` would build from
