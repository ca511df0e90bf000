"""Pure logic of the tier round trip: the chunk every tier moves (a real KV chunk of the recipe's model), the per-tier
LMCache configs, the worker's wait for asynchronous writes, and the verdicts."""

from __future__ import annotations

import importlib.util
import json
from types import SimpleNamespace

import pytest
from helpers import RECIPES

from stackctl.doctor import tier_roundtrip
from stackctl.knowledge.kv_math import MiB
from stackctl.recipe import load_recipe
from stackctl.resources import shipped
from stackctl.bundle.stackspec import StackSpec


def driver():
    spec = importlib.util.spec_from_file_location("roundtrip", shipped("probes") / "tiers" / "roundtrip.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_chunk_is_the_recipes_model_times_its_chunk_size():
    """tiny-random-llama: 2 layers x 2 KV heads x head_dim 64, K and V in bf16 = 1,024 B a token; 128 tokens."""
    chunk = tier_roundtrip.kv_chunk(load_recipe(RECIPES / "cpu-tiers.toml"))
    assert (chunk.layers, chunk.kv_size, chunk.tokens, chunk.hidden, chunk.dtype_bytes) == (2, 2, 128, 128, 2)
    assert chunk.bytes == 128 * 1024 and not chunk.stand_in
    assert chunk.spec() == {"layers": 2, "kv_size": 2, "tokens": 128, "hidden": 128, "dtype": "bfloat16"}
    assert chunk.describe() == "128 KiB KV chunks (tiny-random-llama: 128 tokens x 1,024 B)"
    bench = tier_roundtrip.kv_chunk(load_recipe(RECIPES / "cpu-lmcache.toml"))
    assert bench.bytes == 24_576 * 128 and bench.describe().startswith("3 MiB KV chunks (bench-random-llama")


def test_a_tensor_parallel_rank_stores_its_own_heads_in_the_kv_dtype():
    """MiniMax-M2.5 on 2 GPUs with an fp8 KV cache: each rank holds 4 of the 8 KV heads, one byte each."""
    chunk = tier_roundtrip.kv_chunk(load_recipe(RECIPES / "atom-lmcache-cpu.toml"))
    assert (chunk.layers, chunk.hidden, chunk.dtype_bytes) == (62, 4 * 128, 1)
    assert chunk.bytes == 63_488 * chunk.tokens and chunk.spec()["dtype"] == "uint8"


def test_an_mla_model_stores_one_latent_per_layer(tmp_path):
    model = tmp_path / "mla"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 1024,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64, "torch_dtype": "bfloat16"}))
    recipe = load_recipe(RECIPES / "cpu-tiers.toml")
    recipe.model.path = str(model)
    chunk = tier_roundtrip.kv_chunk(recipe)
    assert (chunk.kv_size, chunk.layers, chunk.hidden) == (1, 4, 576)
    assert chunk.bytes == 4 * 576 * 2 * 128


def test_an_unknown_model_gets_a_stand_in_chunk_and_says_so():
    recipe = load_recipe(RECIPES / "cpu-tiers.toml")
    recipe.model.path = "someorg/unknown-model"
    chunk = tier_roundtrip.kv_chunk(recipe)
    assert chunk.bytes == MiB and chunk.stand_in
    assert chunk.describe().startswith("1 MiB stand-in chunks (model shape unknown: model someorg/unknown-model")


@pytest.mark.parametrize(("chunk_bytes", "keys"), [(256 * 1024, 64), (6 * MiB, 4), (64 * MiB, 4), (1024, 64),
                                                   (MiB, 16)])
def test_each_tier_moves_enough_bytes_for_a_rate(chunk_bytes, keys):
    assert tier_roundtrip.keys_per_tier(chunk_bytes) == keys


def test_the_cpu_buffer_holds_every_chunk_of_the_cpu_tier():
    assert tier_roundtrip.cpu_buffer_gib(256 * 1024, 64) == tier_roundtrip.CHECK_CPU_GB
    assert tier_roundtrip.cpu_buffer_gib(64 * MiB, 4) * 1024 ** 3 >= 6 * 64 * MiB


def test_each_tier_gets_its_own_config_and_lower_tiers_bypass_ram():
    configs = tier_roundtrip.tier_configs(StackSpec(load_recipe(RECIPES / "cpu-tiers.toml")), 0.2)
    assert set(configs) == {"cpu", "disk", "fs", "s3"}
    assert configs["cpu"]["local_cpu"] is True and "local_disk" not in configs["cpu"]
    for kind in ("disk", "fs", "s3"):
        assert configs[kind]["local_cpu"] is False and configs[kind]["max_local_cpu_size"] == 0.2
    assert configs["disk"]["local_disk"] == "file:///tmp/stackctl-tiers/disk/"
    assert configs["fs"]["extra_config"] == {"remote_storage_plugin.fs.base_path": "/tmp/stackctl-tiers/fs"}
    assert "remote_url" not in configs["fs"] and "remote_storage_plugins" not in configs["s3"]
    assert configs["s3"]["remote_url"] == "s3://stackctl-kv.rgw.stackctl.test:17443"
    assert configs["s3"]["extra_config"] == {"s3_region": "us-east-1"}
    assert all(c["chunk_size"] == 128 for c in configs.values())


def test_the_specs_give_every_tier_the_same_chunk(tmp_path):
    recipe = load_recipe(RECIPES / "cpu-tiers.toml")
    chunk = tier_roundtrip.kv_chunk(recipe)
    specs = tier_roundtrip.tier_specs(StackSpec(recipe), chunk, 64, "m", str(tmp_path), mounted_at="/spec")
    assert [s["tier"] for s in specs] == ["cpu", "disk", "fs", "s3"]
    assert all(s["chunk"] == chunk.spec() and s["keys"] == 64 and s["model"] == "m" for s in specs)
    assert json.loads((tmp_path / "specs.json").read_text()) == specs
    assert specs[1]["config"] == "/spec/disk.json" and specs[1]["path"] == "/tmp/stackctl-tiers/disk"
    assert json.loads((tmp_path / "s3.json").read_text())["remote_url"].startswith("s3://")


class InFlight:
    """A backend whose write of every key finishes after `polls` looks (LMCache's disk backend, as seen)."""

    def __init__(self, polls: int):
        self.polls = polls

    def exists_in_put_tasks(self, key) -> bool:
        self.polls -= 1
        return self.polls >= 0


def test_the_worker_waits_until_no_backend_still_writes_the_chunk():
    import time

    wait = driver().wait_for_write
    slow, done = InFlight(3), InFlight(0)
    assert wait([done, slow], "key", time.perf_counter() + 30) is True
    assert slow.polls < 0  # asked until the write was over
    assert wait([InFlight(10 ** 9)], "key", time.perf_counter() + 0.01) is False


def report(**overrides) -> dict:
    base = {"keys": 4, "absent_before": 4, "stored": 4, "equal": 4, "get_missing": 0, "still_in_flight": 0,
            "put_s": [0.001, 0.002, 0.002, 0.003], "get_s": [0.0005] * 4, "error": None, "log_tail": []}
    return dict(base, **overrides)


def test_a_complete_round_trip_reports_median_latency_and_a_rate_over_all_bytes():
    chunk = 256 * 1024
    outcome = tier_roundtrip.judge(SimpleNamespace(kind="disk", path="/d"), report(files_seen=4), "m", chunk)
    assert outcome.ok
    assert outcome.message == "disk ok: put 2 ms (131 MB/s), get 0.5 ms (524 MB/s); 4 file(s) seen in /d, removed"
    assert outcome.figures["put_bytes"] == 4 * chunk and outcome.figures["keys"] == 4
    cpu = tier_roundtrip.judge(SimpleNamespace(kind="cpu", path=None), report(), "m", chunk)
    assert cpu.message == "cpu ok: put 2 ms, get 0.5 ms a chunk (kept in RAM by reference, no copy)"


def test_a_chunk_not_yet_written_is_a_failure_with_the_counts():
    tier = SimpleNamespace(kind="disk", path="/d")
    outcome = tier_roundtrip.judge(tier, report(stored=3, still_in_flight=1, free_bytes=1 << 40), "m", 1024)
    assert not outcome.ok
    assert outcome.message == ("disk failed: 1 write(s) still in flight after 30 s (absent before 4/4, stored 3/4, "
                               "read back equal 4/4)")


def test_failures_name_their_cause():
    tier = SimpleNamespace(kind="disk", path="/d")
    full = tier_roundtrip.judge(tier, report(stored=2, free_bytes=4096), "m", 256 * 1024)
    assert full.message.startswith("disk failed: no space: /d has 4096 bytes free (absent before 4/4, stored 2/4")
    read_only = tier_roundtrip.judge(tier, report(stored=0, read_only=True, free_bytes=1 << 30), "m", 1024)
    assert read_only.message.startswith("disk failed: path not writable: /d")
    wrong = tier_roundtrip.judge(SimpleNamespace(kind="fs", path="/f"), report(equal=1, free_bytes=1 << 30), "m", 9)
    assert wrong.message.startswith("fs failed: content mismatch: chunks read back differ")
    broken = tier_roundtrip.judge(SimpleNamespace(kind="fs", path="/f"),
                                  report(error="RuntimeError: boom", free_bytes=1 << 30), "m", 9)
    assert broken.message.startswith("fs failed: RuntimeError: boom (absent before 4/4")
    hung = tier_roundtrip.judge(SimpleNamespace(kind="cpu", path=None),
                                {"timed_out": True, "seconds": 90, "log_tail": ["loading", "stuck"]}, "m", 9)
    assert hung.message == "cpu failed: timed out after 90 s (no result); last log line: stuck"
    none = tier_roundtrip.judge(SimpleNamespace(kind="cpu", path=None), None, "m", 9)
    assert none.message == "cpu: no result (the check container did not finish)"


def test_the_driver_reads_one_report_per_tier():
    output = 'LMCache noise\n{"tier": "cpu", "keys": 4}\n{"tier": "disk", "keys": 4}\n'
    assert set(tier_roundtrip.read_reports(output)) == {"cpu", "disk"}


def test_image_tiers_fails_on_a_missing_ca_file_before_mounting_anything(tmp_path):
    """Docker would make an empty directory at a missing mount source: the check names the key instead, and no
    container is started (the context has no engine to start one with)."""
    from stackctl.doctor import tier_checks

    recipe = load_recipe(RECIPES / "cpu-tiers.toml")
    missing = tmp_path / "missing-ca.pem"
    recipe.tiers_of("s3")[0].ca_file = str(missing)
    ctx = SimpleNamespace(recipe=recipe, spec=StackSpec(recipe), deep=True, probe=lambda: {"lmcache": {"found": True, "version": "0.5.6"}})
    result = tier_checks.tiers(ctx)
    assert result.status == "fail", result
    assert f"cache.tiers[3].ca_file: {missing} does not exist" in result.message
    assert not missing.exists()


def test_image_tiers_skips_an_lmcache_without_the_storage_api():
    from stackctl.doctor import tier_checks
    from stackctl.doctor.registry import Unavailable

    ctx = SimpleNamespace(recipe=load_recipe(RECIPES / "cpu-tiers.toml"), spec=StackSpec(load_recipe(RECIPES / "cpu-tiers.toml")), deep=True,
                          probe=lambda: {"lmcache": {"found": True, "version": "0.4.4"}})
    with pytest.raises(Unavailable, match="LMCache 0.4.4 is not known to have the storage API"):
        tier_checks.tiers(ctx)


def test_image_tiers_on_a_running_stack_waits_for_deep():
    """A running stack's tiers are proven by its live checks; the 15 s round trip runs with --deep only. Before
    `up` (no container) it runs as the tiers' proof: here it gets as far as the probe, which the context lacks."""
    from stackctl.doctor import tier_checks
    from stackctl.doctor.registry import Unavailable

    def no_container():
        raise Unavailable("stack not running")

    recipe = load_recipe(RECIPES / "cpu-tiers.toml")
    running = SimpleNamespace(recipe=recipe, spec=StackSpec(recipe), deep=False, container=lambda: object())
    with pytest.raises(Unavailable, match="the stack runs: server.lmcache-hit proves its first tier serves"):
        tier_checks.tiers(running)
    stopped = SimpleNamespace(recipe=recipe, spec=StackSpec(recipe), deep=False, container=no_container)
    with pytest.raises(AttributeError, match="probe"):
        tier_checks.tiers(stopped)


def test_a_tier_this_host_sees_failing_gets_its_cause_without_a_round_trip(tmp_path, monkeypatch):
    """LMCache does not fail on an unusable tier: it retries or waits until the round trip's 90 s per tier run out
    (an S3 endpoint refusing connections, a read-only disk: about 95 s each in CI). A tier whose directory this host
    sees missing or short of space, or whose S3 endpoint refuses the connection, is failed with that cause at once;
    the others still run their round trip, in one container."""
    import socket

    recipe = load_recipe(RECIPES / "cpu-tiers.toml")
    recipe.tiers_of("disk")[0].path = str(tmp_path / "missing")
    recipe.tiers_of("fs")[0].path = str(tmp_path)
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    recipe.tiers_of("s3")[0].url = f"s3://bucket.localhost:{port}"
    ran = []

    def round_trips(ctx, chunk, keys, model, kinds):
        ran.append(kinds)
        return {kind: {"tier": kind, "keys": keys, "absent_before": keys, "stored": keys, "equal": keys,
                       "put_s": [0.001] * keys, "get_s": [0.001] * keys} for kind in kinds}

    monkeypatch.setattr(tier_roundtrip, "_round_trips", round_trips)
    monkeypatch.setattr(tier_roundtrip, "kv_chunk", lambda recipe: tier_roundtrip.KVChunk("m", 2, 2, 128, 64, 2))
    ctx = RememberingContext(recipe)
    _, outcomes = tier_roundtrip.run(ctx)
    assert ran == [{"cpu", "fs"}]
    verdicts = {o.kind: (o.ok, o.message) for o in outcomes}
    assert verdicts["cpu"][0] and verdicts["fs"][0]
    assert verdicts["disk"] == (False, f"disk failed: path not found: {tmp_path / 'missing'} does not exist (seen "
                                       "from this host: no round trip)")
    assert not verdicts["s3"][0] and verdicts["s3"][1].startswith("s3 failed: endpoint unreachable: ")

    from stackctl.doctor.tier_preflight import tier_problem

    fs = recipe.tiers_of("fs")[0]
    assert tier_problem(ctx, fs, 1 << 60).startswith(f"no space: {tmp_path} has ")
    assert tier_problem(ctx, recipe.tiers_of("cpu")[0], 1 << 60) == ""


class RememberingContext(SimpleNamespace):
    """A doctor context's recipe and its cache of shared facts (DoctorContext.remember)."""

    def __init__(self, recipe):
        super().__init__(recipe=recipe, cache={})

    def remember(self, key, compute):
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]


def test_one_doctor_run_asks_the_s3_bucket_once_for_the_host_check_and_the_round_trip(monkeypatch):
    """Each ask puts, reads back and deletes a test object in the user's bucket: host.s3-tier and image.tiers'
    preflight share one verdict."""
    from stackctl.doctor import tier_checks
    from stackctl.storage import s3_access
    from stackctl.storage.s3_access import Verdict
    from stackctl.doctor.tier_preflight import tier_problem

    asked = []
    monkeypatch.setattr(s3_access, "check_bucket", lambda tier: asked.append(tier.url) or Verdict(False, "access "
                                                                                                         "denied: x"))
    recipe = load_recipe(RECIPES / "cpu-tiers.toml")
    ctx = RememberingContext(recipe)
    assert tier_checks.s3_tier(ctx).status == "fail"
    assert tier_problem(ctx, recipe.tiers_of("s3")[0], 1) == "access denied: x"
    assert asked == [recipe.tiers_of("s3")[0].url]
