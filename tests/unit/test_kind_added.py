"""A tier kind added as a record alone (a remote backend that is a URL, as LMCache's redis:// one is): the loader,
the rendering, the importer, the guard rule and doctor's endpoint check all follow the record. The record lives in
the test only; docs/ARCHITECTURE.md ("Adding a tier kind or a platform") lists what a shipped kind adds."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
from helpers import TIERED_RECIPE, register_tier_kind

from stackctl.bundle import keys
from stackctl import importer
from stackctl.bundle import stackspec
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import FAIL, PASS, SKIP
from stackctl.doctor.tier_checks import ENDPOINT_CHECK
from stackctl.errors import StackctlError
from stackctl.knowledge import kinds
from stackctl.knowledge.sources import ids
from stackctl.recipe import loader
from stackctl.rules.ruleset import run_rules
from stackctl.bundle.stackspec import StackSpec


def _specs(recipes: dict) -> dict:
    """Each host's stack spec, as fleet's planning derives them."""
    return {host: StackSpec(recipe) for host, recipe in recipes.items()}

NEW = kinds.TierKind(name="kvurl", summary="a key-value server", allowed=frozenset({"url"}),
                     required=frozenset({"url"}), lmcache_keys=("remote_url",), lmcache_extra_keys=(),
                     lmcache_from={"remote_url": "url"}, url_schemes=("kvurl",), backend="RemoteBackend",
                     lmcache=lambda tier, per_rank: ({"remote_url": tier.url}, {}), config_order=2, remote=True,
                     survives_restart=True, host_check=ENDPOINT_CHECK, round_trip="put and get through the server")

RECIPE = TIERED_RECIPE


@pytest.fixture
def new_kind(monkeypatch):
    return register_tier_kind(monkeypatch, NEW)


def tier(url: str, kind: str = "kvurl") -> str:
    return f'\n[[cache.tiers]]\nkind = "{kind}"\nurl = "{url}"\n'


def test_every_record_names_a_host_check_with_sources_and_its_lmcache_keys():
    checks, sourced = load_all(), ids()
    for kind in kinds.TIER_KIND_RECORDS:
        assert kind.host_check in checks and kind.host_check in sourced, kind
        assert set(kind.lmcache_from) == set(kind.lmcache_keys) | set(kind.lmcache_extra_keys), kind
        assert set(kind.lmcache_from.values()) - {""} <= kind.allowed, kind
        assert set(kind.lmcache_keys) <= set(keys.LMCACHE_KEYS), kind
        assert set(kind.lmcache_extra_keys) <= set(keys.LMCACHE_EXTRA_CONFIG_KEYS), kind
    assert ENDPOINT_CHECK in sourced


def test_the_record_alone_validates_renders_and_is_read_back(new_kind):
    recipe = loader.load_recipe_text(RECIPE.format(tiers=tier("kvurl://127.0.0.1:6379")))
    assert [t.kind for t in recipe.cache.tiers] == ["cpu", "kvurl"]
    config = stackspec.lmcache_config(recipe)
    assert config["remote_url"] == "kvurl://127.0.0.1:6379" and config["remote_serde"] == "naive"
    text = importer.import_launch_text(
        "LMCACHE_CONFIG_FILE=/c.yaml vllm serve /models/m --kv-transfer-config "
        "'{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'\n",
        "remote_url: kvurl://kv.example.com:6379\nremote_serde: naive\n", "t")
    back = loader.load_recipe_text(text)
    assert [(t.kind, t.url) for t in back.cache.tiers][-1] == ("kvurl", "kvurl://kv.example.com:6379"), text
    assert "extra" not in text.split("[cache]")[1].split("[[")[0], text  # not left in cache.extra
    # The same URL in cache.extra shadows the tier that writes it: the guard rule knows the scheme from the record.
    shadowed = loader.load_recipe_text(RECIPE.format(tiers="").replace(
        "enabled = true", 'enabled = true\nextra = { remote_url = "kvurl://kv.example.com:6379" }'))
    found = [f for f in run_rules(shadowed) if f.rule_id == "cache-extra-shadows-key"]
    assert found and "the kvurl tier's url" in found[0].message, found


def test_the_record_holds_the_url_to_its_scheme_and_to_one_remote_url(new_kind):
    with pytest.raises(StackctlError, match=r"a kvurl tier's url starts with kvurl://"):
        loader.load_recipe_text(RECIPE.format(tiers=tier("s3://kv.example.com:7480")))
    with pytest.raises(StackctlError, match=r"a s3 tier's url starts with s3://"):
        loader.load_recipe_text(RECIPE.format(tiers=tier("kvurl://kv.example.com:7480", "s3")
                                              + 'region = "us-east-1"\n'))
    both = tier("kvurl://kv.example.com:6379") + tier("s3://kv.example.com:7480", "s3") + 'region = "us-east-1"\n'
    with pytest.raises(StackctlError, match=r"a s3 tier and a kvurl tier are both LMCache's remote_url"):
        loader.load_recipe_text(RECIPE.format(tiers=both))


def test_the_endpoint_check_connects_to_the_url(new_kind):
    check = load_all()[ENDPOINT_CHECK]
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        recipe = loader.load_recipe_text(RECIPE.format(tiers=tier(f"kvurl://127.0.0.1:{port}")))
        result = check.run(SimpleNamespace(recipe=recipe, spec=StackSpec(recipe), host_root=None))
        assert result.status == PASS and f"127.0.0.1:{port} accepts TCP" in result.message, result
        captured = check.run(SimpleNamespace(recipe=recipe, spec=StackSpec(recipe), host_root="/captured"))
        assert captured.status == SKIP and "captured host" in captured.message, captured
    result = check.run(SimpleNamespace(recipe=recipe, spec=StackSpec(recipe), host_root=None))  # the server is gone
    assert result.status == FAIL and f"127.0.0.1:{port}" in result.message, result
    no_port = loader.load_recipe_text(RECIPE.format(tiers=tier("kvurl://127.0.0.1")))
    result = check.run(SimpleNamespace(recipe=no_port, spec=StackSpec(no_port), host_root=None))
    assert result.status == FAIL and "no host and port" in result.message, result
    without = loader.load_recipe_text(RECIPE.format(tiers=""))
    result = check.run(SimpleNamespace(recipe=without, spec=StackSpec(without), host_root=None))
    assert result.status == SKIP and "no tier in the recipe" in result.message, result


def test_fleet_doctor_proves_no_kind_shared_that_it_has_no_marker_store_for(new_kind):
    """Two hosts with the same kvurl tier: fleet doctor's shared-tier markers know a host directory (fs) and an S3
    bucket; a remote kind that is neither is not taken for S3 (its URL is no bucket), it gets no marker group, and
    a marker asked of it says why."""
    from stackctl.fleet import marker, marker_groups

    recipe = loader.load_recipe_text(RECIPE.format(tiers=tier("kvurl://kv.example.com:6379")))
    assert "kvurl" not in marker_groups.marker_kinds() and {"fs", "s3"} <= set(marker_groups.marker_kinds())
    plans: dict = {"h1": {}, "h2": {}}
    marker_groups.assign_marker_groups(plans, _specs({"h1": recipe, "h2": recipe}))
    assert plans == {"h1": {}, "h2": {}}
    outcome = marker.put(recipe.cache.tiers[-1], "m1", ["h2"])
    assert not outcome.ok and outcome.tier == "kvurl tier kvurl://kv.example.com:6379", outcome
    assert "a kvurl tier has no shared-tier marker store" in outcome.message, outcome


def test_hosts_sharing_a_new_remote_kind_must_agree_on_its_cache_keys(new_kind):
    from stackctl import fleet

    one = loader.load_recipe_text(RECIPE.format(tiers=tier("kvurl://kv.example.com:6379")))
    other = loader.load_recipe_text(RECIPE.format(tiers=tier("kvurl://KV.example.com:6379")).replace(
        "enabled = true", "enabled = true\nchunk_size = 512"))
    assert fleet.shared_tiers(StackSpec(one)) == ["kvurl kvurl://kv.example.com:6379"]
    mismatches = fleet.find_tier_mismatches(_specs({"h1": one, "h2": other}))
    assert [(m.tier, m.key) for m in mismatches] == [("kvurl kvurl://kv.example.com:6379", "cache.chunk_size")]
