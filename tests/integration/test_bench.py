"""Bench against the real CPU smoke stack: the cold/warm probe meets its targets, and a two-arm comparison
(prefix caching on vs off) writes the JSON, the Markdown table and a real PNG."""

from __future__ import annotations

import json
import re

import pytest
from helpers import run_cli
from stacks import variant

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_probe_gates_on_the_servers_hit_rate_and_writes_the_arms(smoke_stack, tmp_path):
    """The probe on the tiny smoke model: recompute and HBM arms side by side, the hit rate a count from the
    server's /metrics. The gate is the hit rate only: a 30 ms prefill is noise on a 2-core machine, so no TTFT
    ratio is asserted here (the figures are the benchmark's to print)."""
    from PIL import Image

    out = tmp_path / "probe"
    result = run_cli("bench", smoke_stack.recipe, "--probe", "--tokens", "1200", "--runs", "3",
                     "--min-hit-rate", "0.9", "-o", str(out), env=smoke_stack.env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| recompute (nothing cached) |" in result.stdout and "| vLLM prefix cache (HBM) |" in result.stdout
    assert "LMCache" not in result.stdout  # the smoke stack has none
    probe = json.loads((out / "probe.json").read_text())
    assert probe["cache_arm"] == "hbm" and probe["arms"]["hbm"]["hit_rate"] > 0.9
    assert probe["arms"]["recompute"]["hit_rate"] == 0.0 and probe["prompt_tokens"] >= 1000
    assert Image.open(out / "probe.png").size[0] > 300
    # The physical floor, measured in the same run: this host's matmul peak for the dtype the server reports, and
    # each arm's prefill rate against it (the tiny model's FLOPs from its config.json in the container).
    floor = probe["floor"]
    assert floor["dtype"] in ("float32", "bfloat16") and floor["peak_gflops"] > 0, floor
    assert f"this host's {floor['dtype']} matmul peak, the best measured in the stack's image" in result.stdout
    recompute = probe["arms"]["recompute"]["prefill"]
    assert recompute["tokens_recomputed"] == probe["prompt_tokens"] and recompute["error"] is None, recompute
    assert 0 < recompute["share_of_peak"] <= 1.0, recompute
    assert f"of this host's {floor['dtype']} matmul peak" in result.stdout
    shares = [int(share) for share in re.findall(r"= (\d+)% of this host's", result.stdout)]
    assert shares and max(shares) <= 100, shares  # no printed figure above its physical bound
    # The HBM hit is its parts, never a GFLOP/s: the recomputed tail at the cold arm's rate, and the rest.
    hbm = probe["arms"]["hbm"]
    assert hbm["prefill"] is None and hbm["breakdown"]["kv_bytes"] == 0 and hbm["breakdown"]["prefill_s"] > 0, hbm
    assert re.search(r"^  hbm: [\d,]+ cached tokens in place in vLLM's prefix cache \(nothing moved\); \d+ tokens "
                     r"recomputed ~ \d+ ms at the recompute arm's rate; ", result.stdout, re.M), result.stdout
    assert floor["matmul"]["memcpy_gb_s"] > 0, floor
    # No KV offload writes in the background here: the arms do not wait for a quiet server (the LMCache stack's
    # do: tests/integration/test_lmcache_live.py).
    assert probe["settled_s"] is None and "each arm asked" not in result.stdout


def test_probe_fails_when_the_bar_is_out_of_reach(smoke_stack, tmp_path):
    result = run_cli("bench", smoke_stack.recipe, "--probe", "--runs", "1", "--min-speedup", "1000",
                     "-o", str(tmp_path), env=smoke_stack.env, timeout=600)
    assert result.returncode == 1 and "misses the gate: speedup" in result.stderr


def test_two_arm_comparison_writes_table_json_and_png(smoke_stack, tmp_path):
    from PIL import Image

    off = variant(tmp_path, "nocache", {'name = "cpu-smoke"': 'name = "cpu-smoke-nocache"', "port = 8000": "port = 8012",
                                        "prefix_caching = true": "prefix_caching = false"})
    out = tmp_path / "out"
    result = run_cli("bench", smoke_stack.recipe, "--arms", str(off), "--users", "2", "--turns", "3",
                     "--max-requests", "12", "--max-seconds", "120", "-o", str(out), env=smoke_stack.env,
                     timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    payload = json.loads((out / "bench.json").read_text())
    arms = {s["arm"]: s for s in payload["summaries"]}
    assert set(arms) == {"cpu-smoke", "cpu-smoke-nocache"}
    assert arms["cpu-smoke"]["completed"] > 0 and arms["cpu-smoke-nocache"]["completed"] > 0
    assert arms["cpu-smoke"]["hit_rate"] > 0.5 and not arms["cpu-smoke-nocache"]["hit_rate"]
    table = (out / "bench.md").read_text()
    assert "| cpu-smoke |" in table and "| cpu-smoke-nocache |" in table
    with Image.open(out / "bench.png") as image:
        assert image.format == "PNG" and image.size == (1200, 450)
    # The arm bench brought up is gone again; the smoke stack it found running is untouched.
    # (The main job's LMCache stack may run beside it: the tests share it.)
    status = json.loads(run_cli("status", "--format", "json", env=smoke_stack.env).stdout)
    stacks = [row["stack"] for row in status]
    assert "cpu-smoke" in stacks and "cpu-smoke-nocache" not in stacks, stacks
