"""The pure parts of `stackctl fleet`: batches, inventory order, per-host recipes, the shared-tier consistency
check, the ansible-runner arguments, the event tracker and the reports. Ansible itself runs in
tests/integration/test_fleet.py."""

from __future__ import annotations

import base64
import json
import re

import pytest
from helpers import RECIPES, REPO

from stackctl import fleet as fl
from stackctl.errors import StackctlError
from stackctl.fleet.progress import HostOutcome
from stackctl.recipe import load_recipe, load_recipe_text
from stackctl.bundle.stackspec import recipe_hash
from stackctl.bundle.stackspec import StackSpec


def _specs(recipes: dict) -> dict:
    """Each host's stack spec, as fleet's planning derives them."""
    return {host: StackSpec(recipe) for host, recipe in recipes.items()}

PLAYBOOKS = REPO / "playbooks"
ROLE = PLAYBOOKS / "roles" / "stackctl_host"


# -- batches ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [("2", 2), ("1", 1), (" 3 ", 3), ("50%", "50%"), ("100%", "100%"),
                                            (None, None), ("", None)])
def test_parse_batch(text, expected):
    assert fl.parse_batch(text) == expected


@pytest.mark.parametrize("text", ["0", "0%", "101%", "-1", "two", "2.5", "%"])
def test_parse_batch_refuses(text):
    with pytest.raises(StackctlError, match="--batch"):
        fl.parse_batch(text)


@pytest.mark.parametrize("text, expected", [("0", 0), ("25%", 25), ("100", 100), (10, 10)])
def test_parse_percent(text, expected):
    assert fl.parse_percent(text) == expected


@pytest.mark.parametrize("text", ["101", "-5", "ten", "5.5%"])
def test_parse_percent_refuses(text):
    with pytest.raises(StackctlError, match="--max-fail"):
        fl.parse_percent(text)


HOSTS3 = ["a", "b", "c"]


@pytest.mark.parametrize("hosts, batch, expected", [
    (HOSTS3, None, [["a", "b", "c"]]),
    (HOSTS3, 1, [["a"], ["b"], ["c"]]),
    (HOSTS3, 2, [["a", "b"], ["c"]]),
    (HOSTS3, 5, [["a", "b", "c"]]),
    (HOSTS3, "50%", [["a"], ["b"], ["c"]]),      # int(3 * 0.5) = 1, as Ansible rounds
    (HOSTS3, "1%", [["a"], ["b"], ["c"]]),       # never below one host
    (HOSTS3, "100%", [["a", "b", "c"]]),
    (["a", "b", "c", "d"], "50%", [["a", "b"], ["c", "d"]]),
    ([], 2, []),
])
def test_batches_follow_ansible_serial(hosts, batch, expected):
    assert fl.batches(hosts, batch) == expected


# -- inventory and plan ------------------------------------------------------------------------------------------

def test_inventory_hosts_keep_inventory_order_without_duplicates():
    listing = {
        "_meta": {"hostvars": {"z-meta-only": {}, "web-1": {}, "gpu-1": {}, "gpu-2": {}}},
        "all": {"children": ["ungrouped", "gpus", "web"]},
        "ungrouped": {"hosts": []},
        "gpus": {"hosts": ["gpu-1"], "children": ["rack2"]},
        "rack2": {"hosts": ["gpu-2", "gpu-1"]},
        "web": {"hosts": ["web-1", "gpu-2"]},
    }
    assert fl.inventory_hosts(listing) == ["gpu-1", "gpu-2", "web-1", "z-meta-only"]


def test_host_recipe_names_prefer_the_inventory_variable():
    names = fl.host_recipe_names(["a", "b"], {"b": {"stackctl_recipe": "b.toml"}}, "default.toml")
    assert names == {"a": "default.toml", "b": "b.toml"}


def test_host_recipe_names_refuse_a_host_without_recipe():
    with pytest.raises(StackctlError, match=r"no recipe for host\(s\) a"):
        fl.host_recipe_names(["a", "b"], {"b": {"stackctl_recipe": "b.toml"}}, None)


def test_inventory_recipe_paths_are_relative_to_the_inventory(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "x.toml").write_text("")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("")
    assert fl.resolve_inventory_path("recipes/x.toml", str(inventory)) == str(tmp_path / "recipes" / "x.toml")
    assert fl.resolve_inventory_path("recipes/x.toml", str(tmp_path)) == str(tmp_path / "recipes" / "x.toml")
    assert fl.resolve_inventory_path("cpu-smoke", str(inventory)) == "cpu-smoke"   # a shipped name stays
    assert fl.resolve_inventory_path("/abs/r.toml", str(inventory)) == "/abs/r.toml"


def test_tuning_follows_the_recipe():
    smoke = load_recipe(RECIPES / "cpu-smoke.toml")
    assert fl.tuning_for(smoke) == {"numa_balancing": 0, "governor": "performance"}
    pinned = _recipe('[host]\nisolcpus = "8-15"\nnuma_balancing = true\ngovernor = "schedutil"\n')
    assert fl.tuning_for(pinned) == {"numa_balancing": 1, "governor": "schedutil", "isolcpus": "8-15"}


def test_host_plan_carries_the_recipe_hash():
    smoke = load_recipe(RECIPES / "cpu-smoke.toml")
    plan = fl.host_plan("/r/cpu-smoke.toml", StackSpec(smoke))
    assert plan == {"recipe": "/r/cpu-smoke.toml", "recipe_hash": recipe_hash(smoke), "stack": "cpu-smoke",
                    "tuning": fl.tuning_for(smoke)}


def test_wheelhouse_id_follows_content(tmp_path):
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"one")
    (tmp_path / "notes.txt").write_text("not a wheel")
    first = fl.wheelhouse_id(tmp_path)
    assert first == fl.wheelhouse_id(tmp_path) and len(first) == 16
    (tmp_path / "notes.txt").write_text("changed, still not a wheel")
    assert fl.wheelhouse_id(tmp_path) == first
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"rebuilt, same version")
    assert fl.wheelhouse_id(tmp_path) != first


# -- shared-tier consistency -----------------------------------------------------------------------------------

S3 = (RECIPES / "vllm-lmcache-s3.toml").read_text()
FS = (RECIPES / "vllm-lmcache-remote-fs.toml").read_text()


def _variant(text: str, old: str, new: str):
    assert old in text, old
    return load_recipe_text(text.replace(old, new, 1), "variant.toml")


def _recipe(extra: str):
    return load_recipe_text('[stack]\nname = "t"\nplatform = "cpu"\n[model]\npath = "/m"\n' + extra, "t.toml")


def test_identical_recipes_on_a_shared_tier_agree():
    same = load_recipe_text(S3, "s3.toml")
    assert fl.find_tier_mismatches(_specs({"h1": same, "h2": same, "h3": load_recipe_text(S3, "copy.toml")})) == []
    fl.check_shared_tiers(_specs({"h1": same, "h2": same}))


@pytest.mark.parametrize("old, new, key", [
    ("chunk_size = 256", "chunk_size = 512", "cache.chunk_size"),
    ("hash_seed = 0", "hash_seed = 7", "cache.hash_seed"),
    ('kv_cache_dtype = "auto"', 'kv_cache_dtype = "fp8"', "model.kv_cache_dtype"),
    ('path = "/models/Qwen3-32B"', 'path = "/models/Qwen3-32B-v2"', "model.path"),
    ("tensor_parallel = 2", "tensor_parallel = 4", "model.tensor_parallel"),
    ('lmcache = "0.5.6"', 'lmcache = "0.5.5"', "versions.lmcache"),
    ("hash_seed = 0", 'hash_seed = 0\nextra = { pre_caching_hash_algorithm = "sha256_cbor" }',
     "cache.extra.pre_caching_hash_algorithm"),
    ('cudagraph_mode = "FULL_AND_PIECEWISE"', 'cudagraph_mode = "FULL_AND_PIECEWISE"\n'
     'extra_args = ["--revision", "abc123"]', "model revision (serve.extra_args --revision)"),
])
def test_a_cache_key_difference_on_a_shared_tier_is_refused(old, new, key):
    fleet = {"h1": load_recipe_text(S3, "s3.toml"), "h2": load_recipe_text(S3, "s3.toml"),
             "h3": _variant(S3, old, new)}
    mismatches = fl.find_tier_mismatches(_specs(fleet))
    assert [m.key for m in mismatches] == [key]
    with pytest.raises(StackctlError) as error:
        fl.check_shared_tiers(_specs(fleet))
    message = str(error.value)
    assert "\n" not in message
    assert key in message and "h1, h2" in message and "on h3" in message
    assert "s3 s3://kvcache.rgw.example.com:7480" in message


def _served(dtype: str | None) -> HostOutcome:
    """A host outcome whose doctor report's server.dtype check read `dtype` from the server's log."""
    outcome = HostOutcome("h", 1)
    details = {"served": dtype} if dtype else {}
    outcome.report = {"results": [{"id": "server.dtype", "status": "pass", "details": details}]}
    return outcome


def test_hosts_whose_servers_compute_in_different_dtypes_on_a_shared_tier_are_reported():
    """Same recipe (model.dtype = "auto") everywhere, and still two dtypes: an AMX host serves bf16, an AVX2 host
    float32. LMCache's chunk keys carry the dtype, so neither ever hits the other's chunks."""
    same = load_recipe_text(S3, "s3.toml")
    fleet = {"amx": same, "avx2": same, "amx-2": same, "alone": load_recipe_text(FS, "fs.toml")}
    served = {"amx": _served("torch.bfloat16").served_dtype(), "avx2": _served("float32").served_dtype(),
              "amx-2": _served("bfloat16").served_dtype(), "alone": "float16"}
    assert served["amx"] == "bfloat16"  # read canonical, whatever spelling the log used
    mismatches, unknown = fl.served_dtype_mismatches(_specs(fleet), served)
    assert unknown == [] and len(mismatches) == 1
    line = mismatches[0].format()
    assert line.startswith("hosts sharing the s3 s3://kvcache.rgw.example.com:7480 tier disagree on served dtype: ")
    assert '"bfloat16" on amx, amx-2' in line and '"float32" on avx2' in line and "model.dtype" in line
    assert "alone" not in line  # its tier is its own
    assert fl.served_dtype_mismatches(_specs(fleet), {**served, "avx2": "bfloat16"}) == ([], [])


def test_a_host_whose_served_dtype_is_unknown_is_said_not_compared_never_passed():
    same = load_recipe_text(S3, "s3.toml")
    mismatches, unknown = fl.served_dtype_mismatches(_specs({"a": same, "b": same}),
                                                     {"a": "bfloat16", "b": _served(None).served_dtype()})
    assert mismatches == [] and len(unknown) == 1 and "unknown on b" in unknown[0]


def test_the_message_counts_further_differences():
    other = _variant(S3.replace("chunk_size = 256", "chunk_size = 128"), "hash_seed = 0", "hash_seed = 1")
    with pytest.raises(StackctlError, match=r"\(and 1 more difference\(s\)\)"):
        fl.check_shared_tiers(_specs({"a": load_recipe_text(S3, "s3.toml"), "b": other}))


def test_equal_settings_written_differently_agree():
    # The LMCache default version (whichever the compatibility table names) and an explicit pin of the same
    # version write the same keys; so do cache.hash_seed and serve.env PYTHONHASHSEED with the same value.
    from stackctl.bundle import stackspec
    from stackctl.knowledge import compat

    default = compat.table()["defaults"]["lmcache"]
    pinned, pins = re.subn(r'^lmcache = "[^"]*"\n', f'lmcache = "{default}"\n', S3, count=1, flags=re.M)
    assert pins == 1, "the S3 recipe pins versions.lmcache"
    base = load_recipe_text(pinned, "s3.toml")
    default_version = _variant(pinned, f'lmcache = "{default}"\n', "")
    assert stackspec.versions(default_version)["lmcache"] == stackspec.versions(base)["lmcache"] == default
    env_seed = load_recipe_text(pinned.replace("hash_seed = 0", "").replace(
        "[serve]\n", '[serve]\nenv = { PYTHONHASHSEED = "0" }\n', 1), "env.toml")
    assert fl.find_tier_mismatches(_specs({"a": base, "b": default_version, "c": env_seed})) == []


def test_hosts_on_different_tiers_or_without_cache_are_not_compared():
    base = load_recipe_text(S3, "s3.toml")
    other_bucket = _variant(S3.replace("chunk_size = 256", "chunk_size = 512"),
                            "s3://kvcache.rgw.example.com:7480", "s3://other.rgw.example.com:7480")
    no_cache = _variant(S3.replace("chunk_size = 256", "chunk_size = 512"),
                        "[cache]\nenabled = true", "[cache]\nenabled = false")
    fs_host = load_recipe_text(FS.replace("chunk_size = 256", "chunk_size = 64"), "fs.toml")
    assert fl.find_tier_mismatches(_specs({"a": base, "b": other_bucket, "c": no_cache, "d": fs_host})) == []


def test_shared_fs_tier_is_compared_too():
    fleet = {"a": load_recipe_text(FS, "fs.toml"),
             "b": load_recipe_text(FS.replace("/mnt/pnfs/lmcache", "/mnt/pnfs/lmcache/"), "fs2.toml")}
    assert fl.find_tier_mismatches(_specs(fleet)) == []   # the same directory, written with a trailing slash
    fleet["c"] = _variant(FS, "chunk_size = 256", "chunk_size = 512")
    (mismatch,) = fl.find_tier_mismatches(_specs(fleet))
    assert mismatch.tier == "fs /mnt/pnfs/lmcache" and mismatch.values == {"256": ["a", "b"], "512": ["c"]}


# -- ansible-runner arguments -------------------------------------------------------------------------------------

def _extravars(**overrides):
    values = dict(batch=2, max_fail=10, skip_up=True, wheelhouse="/w", wheelhouse_archive="/w.tar",
                  wheelhouse_hash="abc", artifacts_dir="/art", tune=True, allow_reboot=False,
                  doctor_skip=("host.x",))
    values.update(overrides)
    return fl.rollout_extravars({"h": {"recipe": "/r.toml"}}, **values)


def test_rollout_extravars():
    extra = _extravars()
    assert extra["stackctl_fleet_serial"] == 2
    assert extra["stackctl_fleet_max_fail_percentage"] == 10
    assert extra["stackctl_host_fleet_plan"] == {"h": {"recipe": "/r.toml"}}
    assert extra["stackctl_host_skip_up"] is True and extra["stackctl_host_apply_tuning"] is True
    assert extra["stackctl_host_allow_reboot"] is False
    assert extra["stackctl_host_doctor_skip"] == ["host.x"]
    assert _extravars(batch=None)["stackctl_fleet_serial"] == "100%"
    assert _extravars(batch="25%")["stackctl_fleet_serial"] == "25%"
    json.dumps(extra)  # extra vars travel as JSON


def test_extravars_are_the_variables_the_playbooks_read():
    role_text = "\n".join(p.read_text() for p in ROLE.rglob("*.yml"))
    plays = (PLAYBOOKS / "rollout.yml").read_text()
    names = set(_extravars()) | set(fl.doctor_extravars({}, scope="host"))
    for name in names:
        where = plays if name.startswith("stackctl_fleet_") else role_text
        assert re.search(rf"\b{name}\b", where), f"{name} is not used by the playbooks"
    defaults = (ROLE / "defaults" / "main.yml").read_text()
    for name in names:
        if name.startswith("stackctl_host_"):
            assert re.search(rf"^{name}:", defaults, re.M), f"{name} has no default in the role"


def test_task_names_the_tracker_reads_exist_in_the_playbooks():
    tasks = {m.group(1).strip().strip('"') for p in ROLE.rglob("*.yml")
             for m in re.finditer(r"^\s*- name: (.+)$", p.read_text(), re.M)}
    plays = {m.group(1) for p in PLAYBOOKS.glob("*.yml") for m in re.finditer(r"^- name: (.+)$", p.read_text(), re.M)}
    assert fl.TASK_DONE <= tasks
    assert {fl.TASK_RECIPE_HASH, fl.TASK_ROLLOUT_RECORD, fl.TASK_UP, fl.TASK_MARKER_OUTCOMES} <= tasks
    assert {t for t in tasks if t.startswith(fl.DOCTOR_TASK_PREFIX)} == {
        "Run stackctl doctor (preflight)", "Run stackctl doctor (gate)", "Run stackctl doctor"}
    assert {fl.ROLLOUT_PLAY, fl.DOCTOR_PLAY} <= plays
    from stackctl.fleet.ansible import PHASE_TASKS

    for phase, names in PHASE_TASKS.items():
        assert names <= tasks, (phase, names - tasks)


def test_runner_kwargs():
    kwargs = fl.runner_kwargs(private_data_dir="/run/x", playbook="/p/playbooks/rollout.yml", inventory="/i/hosts",
                              extravars={"a": 1}, forks=3, envvars={"EXTRA": "1"})
    assert kwargs["playbook"] == "/p/playbooks/rollout.yml"
    assert kwargs["project_dir"] == "/p/playbooks"          # roles/ resolve beside the playbook
    assert kwargs["inventory"] == "/i/hosts" and kwargs["private_data_dir"] == "/run/x"
    assert kwargs["extravars"] == {"a": 1} and kwargs["forks"] == 3
    assert kwargs["quiet"] is True and kwargs["verbosity"] == 0
    assert kwargs["envvars"]["ANSIBLE_PIPELINING"] == "True" and kwargs["envvars"]["EXTRA"] == "1"


@pytest.mark.parametrize("hosts, forks", [(0, 1), (1, 1), (3, 3), (500, 50)])
def test_default_forks_check_hosts_in_parallel(hosts, forks):
    assert fl.default_forks(hosts) == forks


# -- events -> outcomes -------------------------------------------------------------------------------------------

def _event(kind, host=None, task="", res=None, **data):
    event_data = {"task": task, **data}
    if host is not None:
        event_data["host"] = host
    if res is not None:
        event_data["res"] = res
    return {"event": kind, "event_data": event_data}


def _report(*results):
    return json.dumps({"stack": "s", "summary": {}, "results": [
        {"id": i, "status": s, "message": m, "scope": "host", "severity": "error", "fix": "", "details": {}}
        for i, s, m in results]})


def _host_finishes(host, changed_tasks=1, recipe="aaaaaaaaaaaa"):
    yield _event("runner_on_start", host, "Create the venv")
    for index in range(changed_tasks):
        yield _event("runner_on_ok", host, f"Change {index}", {"changed": True})
    yield _event("runner_on_ok", host, fl.TASK_RECIPE_HASH, {"changed": False, "stdout": recipe + "\n"})
    yield _event("runner_on_ok", host, "Run stackctl doctor (preflight)",
                 {"changed": False, "stdout": _report(("host.pinning", "pass", "fine"), ("host.x", "warn", "meh"))})
    yield _event("runner_on_skipped", host, "Set kernel.numa_balancing")
    yield _event("runner_on_ok", host, "Rollout finished on this host", {"changed": False})


def _rollout_tracker(hosts=("h1", "h2", "h3"), batch=1):
    hosts = list(hosts)
    plans = {h: {"recipe_hash": "aaaaaaaaaaaa"} for h in hosts}
    return fl.FleetTracker(hosts, fl.batches(hosts, batch), fl.ROLLOUT_PLAY, plans)


def test_a_failed_preflight_names_host_and_check_and_later_hosts_are_not_reached():
    tracker = _rollout_tracker()
    lines = []
    lines += tracker.handle(_event("playbook_on_play_start", name="Pack the wheelhouse on the controller"))
    lines += tracker.handle(_event("runner_on_ok", "localhost", "Pack the wheelhouse", {"changed": True}))
    lines += tracker.handle(_event("playbook_on_play_start", name=fl.ROLLOUT_PLAY))
    for event in _host_finishes("h1", changed_tasks=2):
        lines += tracker.handle(event)
    lines += tracker.handle(_event("playbook_on_play_start", name=fl.ROLLOUT_PLAY))
    lines += tracker.handle(_event("runner_on_ok", "h2", "Run stackctl doctor (preflight)", {
        "changed": False, "stdout": _report(("host.cpu-tier-ram", "fail", "CPU tier 4096.0 GiB > RAM 23.5 GiB"),
                                            ("host.pinning", "pass", "ok"))}))
    lines += tracker.handle(_event("runner_on_failed", "h2", "Stop when a preflight check failed", {
        "msg": "preflight failed: host.cpu-tier-ram: CPU tier 4096.0 GiB > RAM 23.5 GiB"}))
    lines += tracker.handle(_event("runner_on_ok", "h2", "Collect the result", {"changed": False}))
    lines += tracker.handle(_event("playbook_on_stats"))

    assert "batch 1/3: h1" in lines and "batch 2/3: h2" in lines
    assert any("h2" in line and "FAILED" in line and "host.cpu-tier-ram" in line for line in lines)
    assert not any("localhost" in line for line in lines)  # the controller's own play is not a fleet host

    h1, h2, h3 = tracker.results()
    assert (h1.status, h2.status, h3.status) == ("changed", "failed", "not reached")
    assert (h1.batch, h2.batch, h3.batch) == (1, 2, 3)
    assert h1.changed == 2 and h1.running_recipe() == "aaaaaaaaaaaa"
    assert h2.checks("fail") == [{"id": "host.cpu-tier-ram", "message": "CPU tier 4096.0 GiB > RAM 23.5 GiB"}]
    assert h2.failed_task == "Stop when a preflight check failed"
    assert h2.running_recipe() == "unchanged" and h3.running_recipe() == "unchanged"
    assert fl.detail(h2) == "preflight: host.cpu-tier-ram: CPU tier 4096.0 GiB > RAM 23.5 GiB"
    assert fl.detail(h1) == "2 change(s); warnings: host.x"
    assert fl.exit_status(tracker.results()) == 1
    assert fl.recipe_groups(tracker.results()) == {"aaaaaaaaaaaa": ["h1"], "unchanged": ["h2", "h3"]}

    table = fl.summary_table(tracker.results(), "title")
    rows = {line.split()[0]: line for line in table.splitlines()[2:6]}
    assert rows["HOST"].split()[:4] == ["HOST", "BATCH", "STATUS", "RECIPE"]
    assert re.match(r"h1\s+1\s+changed\s+aaaaaaaaaaaa\s+2 change", rows["h1"])
    assert re.match(r"h2\s+2\s+failed\s+unchanged\s+preflight: host.cpu-tier-ram: CPU tier", rows["h2"])
    assert re.match(r"h3\s+3\s+not reached\s+unchanged\s+not touched", rows["h3"])
    assert "recipe aaaaaaaaaaaa: h1" in table
    assert "unchanged (previous recipe, untouched): h2, h3" in table
    assert table.splitlines()[-1] == "1 changed, 1 failed, 1 not reached"

    summary = fl.summary_json(tracker.results(), {"action": "rollout"})
    assert summary["summary"] == {"ok": 0, "changed": 1, "failed": 1, "rolled back": 0, "unreachable": 0, "stopped": 0,
                                  "not reached": 1}
    by_host = {h["host"]: h for h in summary["hosts"]}
    assert by_host["h2"]["failed_checks"][0]["id"] == "host.cpu-tier-ram"
    assert by_host["h2"]["doctor_phase"] == "preflight"
    assert by_host["h1"]["recipe"] == "aaaaaaaaaaaa" and by_host["h3"]["recipe"] == "unchanged"
    json.dumps(summary)


def test_all_hosts_finished_is_exit_zero_and_an_unchanged_host_is_ok():
    tracker = _rollout_tracker(("h1", "h2"), batch=None)
    tracker.handle(_event("playbook_on_play_start", name=fl.ROLLOUT_PLAY))
    for host, changes in (("h1", 0), ("h2", 3)):
        for event in _host_finishes(host, changed_tasks=changes):
            tracker.handle(event)
    assert [o.status for o in tracker.results()] == ["ok", "changed"]
    assert fl.exit_status(tracker.results()) == 0
    assert fl.recipe_groups(tracker.results()) == {"aaaaaaaaaaaa": ["h1", "h2"]}


def test_unreachable_ignored_and_stopped_hosts():
    tracker = _rollout_tracker(("h1", "h2", "h3"), batch=None)
    tracker.handle(_event("runner_on_unreachable", "h1", "Check the rollout inputs",
                          {"msg": "Failed to connect to the host via ssh: Connection refused", "unreachable": True}))
    tracker.handle(_event("runner_on_failed", "h2", "Optional probe", {"msg": "nope"}, ignore_errors=True))
    for event in _host_finishes("h2", changed_tasks=0):
        tracker.handle(event)
    tracker.handle(_event("runner_on_ok", "h3", "Create the venv", {"changed": True}))
    h1, h2, h3 = tracker.results()
    assert h1.status == "unreachable" and "Connection refused" in fl.detail(h1)
    assert h2.status == "ok"
    assert h3.status == "stopped" and h3.running_recipe() == "unchanged"


def test_a_host_that_fails_during_up_has_an_unknown_recipe():
    tracker = _rollout_tracker(("h1",), batch=None)
    tracker.handle(_event("runner_on_start", "h1", fl.TASK_UP))
    tracker.handle(_event("runner_on_failed", "h1", fl.TASK_UP, {
        "msg": "non-zero return code", "rc": 1, "stderr": "pinning: ...\nstackctl: server exited during start-up\n"}))
    (h1,) = tracker.results()
    assert h1.status == "failed" and h1.running_recipe() == "unknown"
    assert h1.message == "stackctl: server exited during start-up (exit 1)"
    assert fl.detail(h1) == "Run stackctl up: stackctl: server exited during start-up (exit 1)"


def test_fleet_doctor_reads_each_hosts_rollout_record():
    tracker = fl.FleetTracker(["h1", "h2"], None, fl.DOCTOR_PLAY)
    record = base64.b64encode(json.dumps({"recipe_hash": "bbbbbbbbbbbb"}).encode()).decode()
    tracker.handle(_event("runner_on_ok", "h1", fl.TASK_ROLLOUT_RECORD, {"content": record}))
    tracker.handle(_event("runner_on_ok", "h1", "Run stackctl doctor", {"stdout": _report(("host.a", "pass", ""))}))
    tracker.handle(_event("runner_on_ok", "h1", "Checks finished on this host", {}))
    tracker.handle(_event("runner_on_failed", "h2", "Stop when stackctl is not installed", {
        "msg": "stackctl is not installed in /opt/stackctl/venv (run `stackctl fleet rollout` first)"}))
    h1, h2 = tracker.results()
    assert h1.status == "ok" and h1.recipe_hash == "bbbbbbbbbbbb" and h1.report_phase == ""
    assert h2.status == "failed" and "not installed" in fl.detail(h2, "doctor")
    table = fl.summary_table(tracker.results(), "t", "doctor")
    assert table.splitlines()[2].split() == ["HOST", "STATUS", "RECIPE", "WHERE", "DETAIL"]
    assert "recipe bbbbbbbbbbbb: h1" in table and "recipe no rollout record: h2" in table


def _pinning_report(check_id, placement):
    report = json.loads(_report((check_id, "pass", "")))
    report["results"][0]["details"] = {"placement": placement}
    return json.dumps(report)


@pytest.mark.parametrize("report, where", [
    (_pinning_report("server.pinning", {"nodes": "1", "cpus": "56-95,152-191", "mems": "1"}),
     "node 1, CPUs 56-95,152-191 (running)"),
    (_pinning_report("host.pinning", {"nodes": "0", "cpus": "0-63", "mems": "0"}), "node 0, CPUs 0-63 (decided)"),
    (_pinning_report("host.pinning", {"nodes": "", "cpus": "", "mems": ""}), "not pinned (decided)"),
    (_report(("host.a", "pass", "")), ""),
])
def test_fleet_doctor_shows_where_each_hosts_server_runs(report, where):
    tracker = fl.FleetTracker(["h1"], None, fl.DOCTOR_PLAY)
    tracker.handle(_event("runner_on_ok", "h1", "Run stackctl doctor", {"stdout": report}))
    tracker.handle(_event("runner_on_ok", "h1", "Checks finished on this host", {}))
    (h1,) = tracker.results()
    assert h1.placement() == where and h1.to_dict()["placement"] == where
    row = fl.summary_table([h1], "t", "doctor").splitlines()[3]
    assert row.split("  ")[0] == "h1" and (where or "-") in row


@pytest.mark.parametrize("result, message", [
    ({"msg": "preflight failed: host.a: x"}, "preflight failed: host.a: x"),
    ({"msg": "non-zero return code", "rc": 2, "stderr": "warn\nstackctl: no engine\n"}, "stackctl: no engine (exit 2)"),
    ({"msg": "", "rc": 1, "stderr": ""}, "failed (exit 1)"),
    ({"msg": "line one\n   line two"}, "line one line two"),
])
def test_failure_message(result, message):
    assert fl.failure_message(result) == message


def test_a_host_rolled_back_after_its_gate_failed_is_reported_back_on_its_previous_recipe():
    from stackctl.fleet.ansible import TASK_PREVIOUS_ROLLOUT, TASK_ROLLED_BACK

    tracker = _rollout_tracker(("h1", "h2", "h3"), batch=1)
    tracker.handle(_event("playbook_on_play_start", name=fl.ROLLOUT_PLAY))
    for event in _host_finishes("h1", changed_tasks=1):
        tracker.handle(event)
    tracker.handle(_event("playbook_on_play_start", name=fl.ROLLOUT_PLAY))
    tracker.handle(_event("runner_on_ok", "h2", TASK_PREVIOUS_ROLLOUT, {
        "ansible_facts": {"stackctl_host_previous": {"recipe_hash": "pppppppppppp", "recipe": "/x.toml"}}}))
    tracker.handle(_event("runner_on_ok", "h2", "Run stackctl doctor (gate)", {
        "stdout": _report(("host.cpu-tier-ram", "fail", "CPU tier too big"))}))
    tracker.handle(_event("runner_on_failed", "h2", "Stop when a gate check failed", {"msg": "gate failed"}))
    tracker.handle(_event("runner_on_ok", "h2", TASK_ROLLED_BACK, {"ansible_facts": {}}))
    tracker.handle(_event("runner_on_failed", "h2", "Stop after the failure", {"msg": "rolled back to recipe p"}))
    h1, h2, h3 = tracker.results()
    assert (h1.status, h2.status, h3.status) == ("changed", "rolled back", "not reached")
    assert (h1.result, h2.result, h3.result) == ("new", "rolled back", "not reached")
    assert h2.failed_task == "Stop when a gate check failed"  # the cause, not the re-raise after the rollback
    assert h2.running_recipe() == "pppppppppppp"
    table = fl.summary_table(tracker.results(), "t")
    assert re.search(r"h2\s+2\s+rolled back\s+pppppppppppp\s+gate: host.cpu-tier-ram: CPU tier too big", table)
    assert "result: new h1; rolled back h2; not reached h3" in table
    assert fl.exit_status(tracker.results()) == 1
    assert fl.summary_json(tracker.results(), {})["hosts"][1]["result"] == "rolled back"


def test_rollout_extravars_carry_rollback_on_fail():
    extravars = fl.rollout_extravars({}, batch=None, max_fail=0, skip_up=True, wheelhouse="w",
                                     wheelhouse_archive="a", wheelhouse_hash="h", artifacts_dir="d",
                                     rollback_on_fail=True)
    assert extravars["stackctl_host_rollback_on_fail"] is True


def _tiers_recipe(*tiers):
    text = '[stack]\nname = "s"\n[model]\npath = "/m"\n[cache]\nenabled = true\n[[cache.tiers]]\nkind = "cpu"\nsize_gb = 1\n'
    for tier in tiers:
        text += "[[cache.tiers]]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in tier.items())
    return load_recipe_text(text, "r.toml")


def _s3(url):
    return {"kind": "s3", "url": url, "region": "us-east-1", "credentials_file": "/etc/stackctl/s3"}


def test_marker_groups_are_hosts_with_the_same_fs_path_or_s3_bucket_and_endpoint():
    from stackctl.fleet.marker_groups import assign_marker_groups

    fs_kv = {"kind": "fs", "path": "/kv/"}
    recipes = {  # inventory order
        "a": _tiers_recipe(fs_kv, _s3("s3://kv.rgw.example.com:443")),
        "b": _tiers_recipe(),                                               # no remote tier
        "c": _tiers_recipe({"kind": "fs", "path": "/kv"}, _s3("s3://kv.RGW.example.com")),  # same: 443 with TLS
        "d": _tiers_recipe({"kind": "fs", "path": "/other"}, _s3("s3://other.rgw.example.com")),  # alone in both
        "e": _tiers_recipe(_s3("s3://kv.rgw.example.com:443")),
    }
    plans = {host: {} for host in recipes}
    assign_marker_groups(plans, _specs(recipes))
    fs = {"tier": "fs tier /kv", "hosts": ["a", "c"]}
    s3 = {"tier": "s3 tier bucket kv at rgw.example.com:443", "hosts": ["a", "c", "e"]}
    assert plans == {"a": {"shared_tiers": {"fs": fs, "s3": s3}}, "b": {}, "c": {"shared_tiers": {"fs": fs, "s3": s3}},
                     "d": {}, "e": {"shared_tiers": {"s3": s3}}}


def test_marker_groups_keep_plain_http_and_tls_ports_apart():
    from stackctl.fleet.marker_groups import assign_marker_groups

    http = dict(_s3("s3://kv.rgw.example.com"), disable_tls=True)          # port 80
    recipes = {"a": _tiers_recipe(http), "b": _tiers_recipe(_s3("s3://kv.rgw.example.com"))}  # port 443
    plans = {host: {} for host in recipes}
    assign_marker_groups(plans, _specs(recipes))
    assert plans == {"a": {}, "b": {}}


def test_fs_marker_put_get_delete(tmp_path):
    """The marker itself on a real directory: the writer puts, a reader of the same directory finds it (shared), a
    reader of another directory does not (not shared, naming the writer), the writer removes it."""
    from stackctl.fleet import marker

    shared, other = tmp_path / "shared", tmp_path / "other"
    shared.mkdir()
    other.mkdir()
    tier = _tiers_recipe({"kind": "fs", "path": str(shared)}).tiers_of("fs")[0]
    elsewhere = _tiers_recipe({"kind": "fs", "path": str(other)}).tiers_of("fs")[0]
    written = marker.put(tier, "m1", ["h2", "h3"])
    assert written.ok and (shared / ".stackctl-marker-m1").read_text() == "m1\n"
    assert marker.get(tier, "m1", "h1") == marker.Outcome(f"fs tier {shared}", True,
                                                          f"fs tier {shared}: shared with h1 (read its marker)")
    not_shared = marker.get(elsewhere, "m1", "h1")
    assert not not_shared.ok
    assert not_shared.message == f"fs tier {other} is not shared: the marker h1 wrote there is not on this host"
    assert marker.delete(tier, "m1").ok and list(shared.iterdir()) == []
    assert marker.delete(tier, "m1").ok  # nothing left to remove is fine


def test_marker_that_proves_nothing_is_a_note_never_not_shared(tmp_path):
    from stackctl.fleet import marker

    tier = _tiers_recipe({"kind": "fs", "path": str(tmp_path)}).tiers_of("fs")[0]
    alone = marker.put(tier, "m2", [])
    assert alone.ok and alone.note == f"fs tier {tmp_path}: not proven shared: no other host of its group got to " \
                                      "this check"
    assert list(tmp_path.iterdir()) == []  # nobody would read it
    writer_failed = marker.get(tier, "m2", "h1", written=False)
    assert writer_failed.ok and not writer_failed.message
    assert writer_failed.note == f"fs tier {tmp_path}: not proven shared: h1, which writes its marker, could not " \
                                 "write it"
    missing = _tiers_recipe({"kind": "fs", "path": str(tmp_path / "gone")}).tiers_of("fs")[0]
    failed = marker.put(missing, "m2", ["h2"])
    assert not failed.ok
    assert failed.message == (f"fs tier {tmp_path / 'gone'}: could not write the shared-tier marker: path not found: "
                              f"{tmp_path / 'gone'} does not exist")


def test_marker_command_prints_one_json_line(tmp_path, capsys):
    from stackctl.fleet import marker

    recipe = tmp_path / "r.toml"
    text = '[stack]\nname = "s"\n[model]\npath = "/m"\n[cache]\nenabled = true\n'
    recipe.write_text(text + f'[[cache.tiers]]\nkind = "cpu"\nsize_gb = 1\n[[cache.tiers]]\nkind = "fs"\n'
                             f'path = "{tmp_path}"\n')
    assert marker.main(["put", str(recipe), "m3", "fs", "--readers", "h2"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert marker.main(["get", str(recipe), "other", "fs", "--writer", "h1"]) == 1
    assert "is not shared" in json.loads(capsys.readouterr().out)["message"]
    assert marker.main(["delete", str(recipe), "m3", "fs"]) == 0
    capsys.readouterr()
    assert marker.main(["put", str(recipe), "m3", "s3"]) == 2
    assert json.loads(capsys.readouterr().out)["message"] == f"{recipe}: no s3 tier in the recipe"
    assert marker.main(["get", str(recipe), "../../etc/passwd", "fs"]) == 2
    assert not (tmp_path / "etc").exists()


def test_tracker_keeps_marker_outcomes_and_the_table_shows_their_notes():
    tracker = fl.FleetTracker(["h1", "h2"], None, fl.DOCTOR_PLAY)
    proven = {"tier": "fs tier /kv", "ok": True, "message": "fs tier /kv: shared with h0 (read its marker)", "note": ""}
    unproven = {"tier": "fs tier /kv", "ok": True, "message": "", "note": "fs tier /kv: not proven shared: h0, ..."}
    assert tracker.handle(_event("runner_on_ok", "h1", fl.TASK_MARKER_OUTCOMES,
                                 {"ansible_facts": {"stackctl_host_marker_outcomes": [proven]}})) == [
        f"  h1                   ok           {fl.TASK_MARKER_OUTCOMES}"]
    lines = tracker.handle(_event("runner_on_ok", "h2", fl.TASK_MARKER_OUTCOMES,
                                  {"ansible_facts": {"stackctl_host_marker_outcomes": [unproven]}}))
    assert lines == ["  h2                   note         fs tier /kv: not proven shared: h0, ..."]
    for host in ("h1", "h2"):
        tracker.handle(_event("runner_on_ok", host, "Checks finished on this host", {}))
    first, second = tracker.results()
    assert first.to_dict()["shared_tiers"] == [proven] and first.to_dict()["notes"] == []
    assert fl.detail(first, "doctor") == "checks passed"
    assert second.status == fl.OK and second.to_dict()["notes"] == ["fs tier /kv: not proven shared: h0, ..."]
    assert fl.detail(second, "doctor") == "checks passed; fs tier /kv: not proven shared: h0, ..."


def test_the_cpu_isa_cap_of_the_controllers_shell_goes_to_the_hosts(monkeypatch):
    """STACKCTL_CPU_ISA_CAP changes the recipe each stackctl loads (and its hash): the hosts' stackctl runs with the
    controller's, so the hash a host computes is the planned one. Both plays set it as their environment."""
    assert "stackctl_fleet_environment" not in _extravars()  # unset: the hosts' environment is left alone
    monkeypatch.setenv("STACKCTL_CPU_ISA_CAP", "avx2")
    wanted = {"STACKCTL_CPU_ISA_CAP": "avx2"}
    assert _extravars()["stackctl_fleet_environment"] == wanted
    assert fl.doctor_extravars({}, scope="host")["stackctl_fleet_environment"] == wanted
    for playbook in ("rollout.yml", "doctor.yml"):
        assert 'environment: "{{ stackctl_fleet_environment | default({}) }}"' in (PLAYBOOKS / playbook).read_text()


def test_each_hosts_phases_add_up_the_durations_of_their_tasks_and_print_after_the_controllers():
    """ship = the archive's copy and load (or the pull and tag), up, gate: what a rollout spends on each host."""
    from stackctl.fleet.report import phase_lines

    tracker = fl.FleetTracker(["h1", "h2"], [["h1"], ["h2"]])
    for task, seconds in (("Copy the image archive", 187.0), ("Load the image archive", 59.3),
                          (fl.TASK_UP, 40.4), ("Run stackctl doctor (gate)", 12.1), ("Create the venv", 3.2)):
        tracker.handle(_event("runner_on_ok", "h1", task, {"changed": True}, duration=seconds))
    tracker.handle(_event("runner_on_ok", "h2", "Pull the image by digest", {"changed": True}, duration=20.0))
    tracker.handle(_event("runner_on_skipped", "h2", "Copy the image archive", duration=0.01))
    outcomes = tracker.results()
    assert outcomes[0].phase_seconds == pytest.approx({"ship": 246.3, "up": 40.4, "gate": 12.1})
    assert outcomes[1].to_dict()["phase_seconds"] == {"ship": 20.0}
    assert phase_lines({"build": 600.4, "save": 40.0}, outcomes) == [
        "phases: build 600 s, save 40 s", "  h1: ship 246 s, up 40 s, gate 12 s", "  h2: ship 20 s"]
    assert phase_lines({}, fl.FleetTracker(["h1"]).results()) == []


def test_registry_credentials_come_from_the_environment_both_or_neither(monkeypatch):
    from stackctl.errors import StackctlError
    from stackctl.fleet.images import registry_auth

    monkeypatch.delenv("STACKCTL_REGISTRY_USER", raising=False)
    monkeypatch.delenv("STACKCTL_REGISTRY_PASSWORD", raising=False)
    assert registry_auth() is None
    monkeypatch.setenv("STACKCTL_REGISTRY_USER", "ops")
    with pytest.raises(StackctlError, match="set both or neither"):
        registry_auth()
    monkeypatch.setenv("STACKCTL_REGISTRY_PASSWORD", "s3cret")
    assert registry_auth() == {"username": "ops", "password": "s3cret"}


def test_an_fs_marker_the_host_cannot_read_or_remove_is_said_so_never_absent(tmp_path):
    """A store error (here the marker's name taken by a directory) is 'could not read/remove', not 'not shared'."""
    from stackctl.fleet import marker

    tier = _tiers_recipe({"kind": "fs", "path": str(tmp_path)}).tiers_of("fs")[0]
    (tmp_path / ".stackctl-marker-m4").mkdir()
    unread = marker.get(tier, "m4", "h1")
    assert not unread.ok and unread.message.startswith(f"fs tier {tmp_path}: could not read the shared-tier marker "
                                                       f"h1 wrote: {tmp_path}/.stackctl-marker-m4: ")
    kept = marker.delete(tier, "m4")
    assert not kept.ok and kept.message.startswith(f"fs tier {tmp_path}: could not remove the shared-tier marker: ")


class _S3Client:
    """botocore's client as the marker's S3 store calls it: one answer or one error per operation."""

    def __init__(self, error=None, body=b"m5\n"):
        self.error, self.body, self.calls = error, body, []

    def _call(self, operation, **kwargs):
        self.calls.append((operation, kwargs))
        if self.error is not None:
            raise self.error
        return {"Body": type("Body", (), {"read": lambda _: self.body})()} if operation == "get_object" else {}

    def put_object(self, **kwargs):
        return self._call("put_object", **kwargs)

    def get_object(self, **kwargs):
        return self._call("get_object", **kwargs)

    def delete_object(self, **kwargs):
        return self._call("delete_object", **kwargs)


def _s3_store(monkeypatch, client, credentials_problem=""):
    from stackctl.storage import s3_access
    from stackctl.fleet import marker

    tier = _tiers_recipe(_s3("s3://kv.rgw.example.com:8080")).tiers_of("s3")[0]  # bucket "kv", virtual-hosted
    endpoint = s3_access.endpoint_of(tier)
    monkeypatch.setattr(s3_access, "client_of", lambda t: (client, endpoint, credentials_problem))
    return marker, tier


def test_the_s3_marker_is_one_object_in_the_tiers_bucket(monkeypatch):
    client = _S3Client()
    marker, tier = _s3_store(monkeypatch, client)
    assert marker.put(tier, "m5", ["h2"]).ok and marker.get(tier, "m5", "h1").ok and marker.delete(tier, "m5").ok
    assert [(op, kwargs["Bucket"], kwargs["Key"]) for op, kwargs in client.calls] == [
        (op, "kv", "stackctl-marker/m5") for op in ("put_object", "get_object", "delete_object")]
    assert client.calls[0][1]["Body"] == b"m5\n"


def test_an_s3_marker_that_is_missing_is_not_shared_and_a_refused_one_is_an_error(monkeypatch):
    from botocore.exceptions import ClientError, EndpointConnectionError

    missing = ClientError({"Error": {"Code": "NoSuchKey", "Message": "no key"}}, "GetObject")
    marker, tier = _s3_store(monkeypatch, _S3Client(error=missing))
    not_shared = marker.get(tier, "m5", "h1")
    assert not not_shared.ok and "is not shared: the marker object h1 put there is not in the bucket" in \
        not_shared.message
    assert marker.delete(tier, "m5").ok  # nothing to remove is fine
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "GetObject")
    marker, tier = _s3_store(monkeypatch, _S3Client(error=denied))
    refused = marker.get(tier, "m5", "h1")
    assert not refused.ok and "could not read the shared-tier marker h1 wrote" in refused.message
    unreachable = EndpointConnectionError(endpoint_url="http://kv.rgw.example.com:8080")
    marker, tier = _s3_store(monkeypatch, _S3Client(error=unreachable))
    assert not marker.put(tier, "m5", ["h2"]).ok
    marker, tier = _s3_store(monkeypatch, _S3Client(), credentials_problem="credentials_file /etc/stackctl/s3: "
                                                                          "missing")
    without = marker.get(tier, "m5", "h1")
    assert not without.ok and without.message.endswith("credentials_file /etc/stackctl/s3: missing")


def test_the_marker_command_runs_as_a_module_and_says_when_the_recipe_does_not_load(tmp_path):
    """`python -m stackctl.fleet.marker` as the playbook runs it; a recipe that does not load exits 2 with one
    JSON line, and the error on stderr where Ansible shows it."""
    import subprocess
    import sys

    recipe = tmp_path / "r.toml"
    recipe.write_text('[stack]\nname = "s"\n[model]\npath = "/m"\n[cache]\nenabled = true\n[[cache.tiers]]\n'
                      f'kind = "cpu"\nsize_gb = 1\n[[cache.tiers]]\nkind = "fs"\npath = "{tmp_path}"\n')
    run = subprocess.run([sys.executable, "-m", "stackctl.fleet.marker", "put", str(recipe), "m6", "fs",
                          "--readers", "h2"], capture_output=True, text=True)
    assert run.returncode == 0 and json.loads(run.stdout)["ok"] is True, run.stderr
    assert (tmp_path / ".stackctl-marker-m6").read_text() == "m6\n"
    broken = tmp_path / "broken.toml"
    broken.write_text("[stack\n")
    run = subprocess.run([sys.executable, "-m", "stackctl.fleet.marker", "get", str(broken), "m6", "fs"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and json.loads(run.stdout)["ok"] is False and "TOML syntax" in run.stderr, run
