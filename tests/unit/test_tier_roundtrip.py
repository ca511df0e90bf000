"""Pure logic of the tier round trip: the per-tier LMCache configs, reading LMCache's result table, the verdicts."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

from helpers import RECIPES

from stackctl.doctor import tier_roundtrip
from stackctl.recipe import load_recipe
from stackctl.resources import shipped

# LMCache 0.5.6's table (lmcache/v1/check/utils.py print_performance_results), as printed.
TABLE = """\
| Operation            |     Avg (ms) |     Max (ms) |     Min (ms) |   Pass/All |  Pass Rate | Throughput
| EXISTS (non-exist)   |     0.052000 |     0.090000 |     0.040000 |        5/5 |     100.0% |       -
| PUT                  |     1.250000 |     2.000000 |     1.000000 |        5/5 |     100.0% |  50.00 MB/s
| EXISTS (exist)       |     0.061000 |     0.080000 |     0.050000 |        3/5 |      60.0% |       -
| GET                  |     0.800000 |     1.000000 |     0.700000 |        3/5 |      60.0% |  78.00 MB/s
"""


def driver():
    spec = importlib.util.spec_from_file_location("roundtrip", shipped("checks") / "tiers" / "roundtrip.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_result_rows_are_read_including_the_exists_columns():
    rows = {m["op"].strip(): (float(m["avg"]), int(m["passed"]))
            for m in (driver().ROW.match(line) for line in TABLE.splitlines()) if m}
    assert rows == {"EXISTS (non-exist)": (0.052, 5), "PUT": (1.25, 5), "EXISTS (exist)": (0.061, 3),
                    "GET": (0.8, 3)}


def test_each_tier_gets_its_own_config_and_lower_tiers_bypass_ram():
    configs = tier_roundtrip.tier_configs(load_recipe(RECIPES / "cpu-tiers.toml"))
    assert set(configs) == {"cpu", "disk", "fs", "s3"}
    assert configs["cpu"]["local_cpu"] is True and "local_disk" not in configs["cpu"]
    for kind in ("disk", "fs", "s3"):
        assert configs[kind]["local_cpu"] is False and configs[kind]["max_local_cpu_size"] > 0
    assert configs["disk"]["local_disk"] == "file:///tmp/stackctl-tiers/disk/"
    assert configs["fs"]["extra_config"] == {"remote_storage_plugin.fs.base_path": "/tmp/stackctl-tiers/fs"}
    assert "remote_url" not in configs["fs"] and "remote_storage_plugins" not in configs["s3"]
    assert configs["s3"]["remote_url"] == "s3://stackctl-kv.rgw.stackctl.test:17443"
    assert configs["s3"]["extra_config"]["s3_region"] == "us-east-1"
    assert all(c["chunk_size"] == 256 for c in configs.values())
    assert configs["s3"]["extra_config"]["local_cpu.pinned_align_bytes"] == 1024


def test_a_full_put_column_with_missing_chunks_is_a_failure_with_the_cause():
    rows = {"EXISTS (non-exist)": {"avg_ms": 0.05, "passed": 5, "total": 5},
            "PUT": {"avg_ms": 1.0, "passed": 5, "total": 5},
            "EXISTS (exist)": {"avg_ms": 0.05, "passed": 2, "total": 5},
            "GET": {"avg_ms": 1.0, "passed": 2, "total": 5}}
    tier = SimpleNamespace(kind="disk", path="/d")
    outcome = tier_roundtrip.judge(tier, {"rows": rows, "free_bytes": 4096, "files_seen": 2}, "m")
    assert not outcome.ok and outcome.message.startswith("disk failed: no space: /d")
    read_only = tier_roundtrip.judge(tier, {"rows": rows, "read_only": True, "free_bytes": 1 << 30}, "m")
    assert read_only.message.startswith("disk failed: path not writable: /d")


def test_a_complete_round_trip_reports_latency_and_throughput():
    rows = {op: {"avg_ms": 0.5, "passed": 5, "total": 5} for op in ("EXISTS (non-exist)", "PUT", "EXISTS (exist)",
                                                                    "GET")}
    outcome = tier_roundtrip.judge(SimpleNamespace(kind="cpu", path=None), {"rows": rows}, "m")
    assert outcome.ok
    assert outcome.message == "cpu ok: put 0.50 ms (131.1 MB/s), get 0.50 ms (131.1 MB/s)"


def test_image_tiers_fails_on_a_missing_ca_file_before_mounting_anything(tmp_path):
    """Docker would make an empty directory at a missing mount source: the check names the key instead, and no
    container is started (the context has no engine to start one with)."""
    from types import SimpleNamespace

    from helpers import RECIPES

    from stackctl.doctor import tier_checks
    from stackctl.recipe import load_recipe

    recipe = load_recipe(RECIPES / "cpu-tiers.toml")
    missing = tmp_path / "missing-ca.pem"
    recipe.tiers_of("s3")[0].ca_file = str(missing)
    ctx = SimpleNamespace(recipe=recipe, probe=lambda: {"lmcache": {"found": True, "version": "0.5.6"}})
    result = tier_checks.tiers(ctx)
    assert result.status == "fail", result
    assert f"cache.tiers[3].ca_file: {missing} does not exist" in result.message
    assert not missing.exists()
