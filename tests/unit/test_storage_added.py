"""A storage added as one module (here a toy one, kept in the test with its own fixture: a spool directory and a
marker book) and a tier kind naming it: the container's mounts and environment, `up`'s preflight, doctor's host view
and round trip, and fleet doctor's marker store, group key and label all take it up through stackctl/storage/'s
interface, with no other code changed. A consumer that still asked the kind "is it a host directory / an S3 bucket?"
fails here: the record has no such field any more."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import TIERED_RECIPE, register_tier_kind

from stackctl.bundle.stackspec import StackSpec
from stackctl.doctor import tier_roundtrip
from stackctl.doctor.tier_preflight import tier_problem
from stackctl.errors import StackctlError
from stackctl.fleet import marker, marker_groups
from stackctl.knowledge import kinds
from stackctl.lifecycle import preflight
from stackctl.recipe import loader
from stackctl.storage import registry
from stackctl.storage.base import Absent, Storage

BOOK: dict[str, str] = {}  # the toy store's shared marker book (what two hosts would both reach)


class BookMarker:
    not_there = "{writer}'s marker is not in the book"

    def __init__(self, tier, marker_id: str):
        self.key = f"{tier.url}/{marker_id}"

    def put(self, content: str) -> None:
        BOOK[self.key] = content

    def get(self) -> str:
        if self.key not in BOOK:
            raise Absent()
        return BOOK[self.key]

    def delete(self) -> None:
        BOOK.pop(self.key, None)


class Spool(Storage):
    """A toy storage: a spool directory (tier.path) the container sees at /run/spool, with a token it reads from
    the host, a ready file `up` leaves, and a marker book."""

    name = "spool"
    marker_store_class = BookMarker

    def volumes(self, tier) -> list[dict]:
        return [{"host": tier.path, "container": "/run/spool", "mode": "rw"}]

    def environment(self, tier) -> dict[str, str]:
        return {"SPOOL_DIR": "/run/spool"}

    def secret_references(self, tier) -> dict[str, str]:
        return {"SPOOL_TOKEN": "SPOOL_TOKEN_ON_HOST"}

    def prepare(self, tier) -> list[tuple[str, str]]:
        try:
            (Path(tier.path) / "READY").write_text("")
        except OSError as exc:
            return [("path", f"{tier.path}: no spool ({exc.strerror})")]
        return []

    def host_problem(self, ctx, tier, want_bytes: int) -> str:
        return "spool full" if (Path(tier.path) / "FULL").exists() else ""

    def round_trip_path(self, tier) -> str | None:
        return tier.path

    def seen_and_removed(self, tier, report: dict, model: str) -> str:
        return f"{report.get('files_seen', 0)} spool file(s) seen"

    def failure_cause(self, tier, report: dict, chunk_bytes: int, log: str, facts: str) -> str:
        return f"spool jammed ({facts})"

    def group_key(self, tier) -> str:
        return f"spool {tier.url}"

    def label(self, tier) -> str:
        return f"spool tier {tier.url}"


SPOOL_KIND = kinds.TierKind(name="spoolkv", summary="a spool", allowed=frozenset({"url", "path"}),
                            required=frozenset({"url", "path"}), lmcache_keys=("remote_url",), lmcache_extra_keys=(),
                            lmcache_from={"remote_url": "url"}, url_schemes=("spoolkv",), backend="RemoteBackend",
                            lmcache=lambda tier, per_rank: ({"remote_url": tier.url}, {}), config_order=2,
                            storage="spool", remote=True, survives_restart=True, host_check="host.tier-endpoint",
                            round_trip="put and get through the spool")

SPOOL_TIER = """
[[cache.tiers]]
kind = "spoolkv"
url = "spoolkv://spool.example.com:9000"
path = "{path}"
"""


@pytest.fixture
def spool(monkeypatch, tmp_path):
    """The toy storage registered as the shipped ones are, a kind naming it, and a recipe with such a tier."""
    monkeypatch.setattr(registry, "STORAGES", dict(registry.STORAGES))
    registry.register(Spool())
    register_tier_kind(monkeypatch, SPOOL_KIND)
    BOOK.clear()
    directory = tmp_path / "spool"
    directory.mkdir()
    recipe = loader.load_recipe_text(TIERED_RECIPE.format(tiers=SPOOL_TIER.format(path=directory)))
    return recipe, recipe.tiers_of("spoolkv")[0]


def test_the_kind_record_names_its_storage_and_asks_nothing_else():
    assert not {"host_directory", "s3_bucket"} & set(kinds.TierKind._fields)
    assert {registry.storage_of_kind(kind).name for kind in kinds.TIER_KIND_RECORDS} == {
        "memory", "host-directory", "s3-bucket"}
    with pytest.raises(StackctlError, match=r"unknown storage 'tape' \(known: memory, host-directory, s3-bucket, "
                                            r"url-only\)"):
        registry.storage_named("tape")


def test_the_container_mounts_and_names_what_the_storage_says(spool):
    recipe, tier = spool
    spec = StackSpec(recipe)
    assert {"host": tier.path, "container": "/run/spool", "mode": "rw"} in spec.volumes
    assert spec.environment["SPOOL_DIR"] == "/run/spool"
    assert spec.secret_references["SPOOL_TOKEN"] == "SPOOL_TOKEN_ON_HOST"


def test_up_prepares_the_storage_and_refuses_at_the_tiers_line(spool):
    recipe, tier = spool
    preflight.ensure_tier_paths_writable(recipe)
    assert (Path(tier.path) / "READY").is_file()
    tier.path = str(Path(tier.path) / "gone" / "deeper")
    with pytest.raises(StackctlError, match=r":\d+:\d+: cache\.tiers\[1\]\.path: .*deeper: no spool"):
        preflight.ensure_tier_paths_writable(recipe)


def test_doctor_sees_the_storage_from_the_host_and_judges_its_round_trip(spool, tmp_path):
    recipe, tier = spool
    ctx = SimpleNamespace(recipe=recipe)
    assert tier_problem(ctx, tier, 1) == ""
    (Path(tier.path) / "FULL").write_text("")
    assert tier_problem(ctx, tier, 1) == "spool full"
    chunk = tier_roundtrip.KVChunk("m", 2, 2, 128, 64, 2)
    specs = tier_roundtrip.tier_specs(StackSpec(recipe), chunk, 4, "model", str(tmp_path))
    assert [s["path"] for s in specs if s["tier"] == "spoolkv"] == [tier.path]
    passed = {"keys": 4, "absent_before": 4, "stored": 4, "equal": 4, "put_s": [0.001] * 4, "get_s": [0.001] * 4,
              "files_seen": 3}
    outcome = tier_roundtrip.judge(tier, passed, "model", chunk.bytes)
    assert outcome.ok and outcome.message.endswith("; 3 spool file(s) seen"), outcome
    failed = tier_roundtrip.judge(tier, dict(passed, stored=1), "model", chunk.bytes)
    assert not failed.ok and failed.message.startswith("spoolkv failed: spool jammed (absent before 4/4"), failed


def test_fleet_doctor_groups_the_hosts_and_proves_the_store_shared(spool):
    recipe, tier = spool
    assert "spoolkv" in marker_groups.marker_kinds()
    plans: dict = {"h1": {}, "h2": {}}
    marker_groups.assign_marker_groups(plans, {"h1": StackSpec(recipe), "h2": StackSpec(recipe)})
    group = {"tier": "spool tier spoolkv://spool.example.com:9000", "hosts": ["h1", "h2"]}
    assert plans == {"h1": {"shared_tiers": {"spoolkv": group}}, "h2": {"shared_tiers": {"spoolkv": group}}}
    assert marker_groups.group_key(tier) == "spool spoolkv://spool.example.com:9000"
    assert marker.put(tier, "m1", ["h2"]).ok and BOOK
    read = marker.get(tier, "m1", "h1")
    assert read.ok and read.message == "spool tier spoolkv://spool.example.com:9000: shared with h1 (read its marker)"
    assert marker.delete(tier, "m1").ok and not BOOK
    assert not marker.get(tier, "m1", "h1").ok
