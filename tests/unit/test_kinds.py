"""Tier kinds, platforms, offload engines (stackctl/knowledge/kinds.py) and serving engines
(stackctl/knowledge/serving_engines.py) are records: callers ask the record, and no module outside them compares a
tier-kind, platform, offload-engine, serving-engine or storage name (stackctl/storage/: a kind's storage is asked,
not named)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import REPO

from stackctl.errors import StackctlError
from stackctl.knowledge.kinds import (
    OFFLOAD_ENGINE_RECORDS,
    OFFLOAD_ENGINES,
    PLATFORM_RECORDS,
    PLATFORMS,
    TIER_KIND_RECORDS,
    TIER_KINDS,
    engine_selected_by,
    engine_with_connector,
    kinds_where,
    offload_engine,
    platform_named,
    tier_kind,
)
from stackctl.knowledge.serving_engines import (
    SERVING_ENGINE_RECORDS,
    SERVING_ENGINES,
    engine_help,
    serving_engine,
)
from stackctl.storage.registry import STORAGES

RECORDS = "stackctl/knowledge/kinds.py"
RECORD_MODULES = {RECORDS, "stackctl/knowledge/serving_engines.py"}
NAMES = set(TIER_KINDS) | set(PLATFORMS) | set(OFFLOAD_ENGINES) | set(SERVING_ENGINES) | set(STORAGES)
SUBJECTS = ("kind", "platform", "offload", "engine", "storage")

# Comparisons not converted yet, as (module, line text stripped). Shrink it; never grow it: ask the record instead.
ALLOWED: set[tuple[str, str]] = set()


def _names(node: ast.AST) -> set[str]:
    """The kind or platform names a comparison operand spells: a string, or a tuple/list/set of strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if values and len(values) == len(node.elts) and set(values) <= NAMES:
            return set(values)
    return set()


def _subject(node: ast.AST) -> str | None:
    """`kind`, `platform`, `offload` or `engine` when the operand is x.kind, x.platform, x.offload, x.engine, a
    variable of that name, or a table's value under that key (x["kind"], x.get("kind"), x.get("kind", default))."""
    if isinstance(node, ast.Attribute) and node.attr in SUBJECTS:
        return node.attr
    if isinstance(node, ast.Name) and node.id in SUBJECTS:
        return node.id
    key = None
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        key = node.args[0]
    if isinstance(key, ast.Constant) and key.value in SUBJECTS:
        return str(key.value)
    return None


def comparisons(source: str) -> list[tuple[int, str]]:
    """(line, reason) of every comparison of a kind or platform against its names, and of every tuple of two or
    more tier-kind names (a group of kinds written out)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            subjects = [s for s in map(_subject, operands) if s]
            spelled = set().union(*map(_names, operands))
            if subjects and spelled:
                found.append((node.lineno, f"{subjects[0]} compared with {sorted(spelled)}"))
        elif isinstance(node, (ast.Tuple, ast.Set, ast.List)):
            values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(values) >= 2 and len(values) == len(node.elts) and set(values) <= set(TIER_KINDS):
                found.append((node.lineno, f"a group of tier kinds {values}"))
    return found


def test_no_module_outside_the_records_compares_kind_or_platform_names():
    seen, offenders = set(), []
    for path in sorted((REPO / "stackctl").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        if name in RECORD_MODULES:
            continue
        source = path.read_text()
        lines = source.splitlines()
        for line, reason in comparisons(source):
            key = (name, lines[line - 1].strip())
            if key in ALLOWED:
                seen.add(key)
            else:
                offenders.append(f"{name}:{line}: {reason}: ask the record (stackctl/knowledge/) instead")
    assert not offenders, "\n".join(offenders)
    assert seen == ALLOWED, f"converted: drop from ALLOWED: {sorted(ALLOWED - seen)}"


@pytest.mark.parametrize("source, hits", [
    ('if tier.kind == "s3": pass', 1),
    ('x = [t for t in tiers if t.kind in ("s3", "fs")]', 2),  # the comparison and the group
    ('if recipe.stack.platform != "rocm": pass', 1),
    ('if "cpu" == platform: pass', 1),
    ('if verdict.kind == "hip": pass', 0),
    ('if spec.kind in ("section", "tiers"): pass', 0),
    ('if tier.kind == kind: pass', 0),
    ('if recipe.cache.offload == "lmcache-mp": pass', 1),
    ('if recipe.stack.engine != "atom-vllm": pass', 1),
    ('if engine == "vllm" and ok: pass', 1),
    ('if ctx.recipe.stack.engine in ("vllm", "atom-vllm"): pass', 1),
    ('if engine.name == "atom-vllm": pass', 0),  # the record's own name: not a comparison the scan can tell
    ('if tier.get("kind") == "s3": pass', 1),
    ('if table["kind"] == "s3": pass', 1),
    ('if table.get("platform", "cpu") != "rocm": pass', 1),
    ('if table["name"] == "s3": pass', 0),
    ('if kind.storage == "s3-bucket": pass', 1),
    ('if storage_of(tier).name == "host-directory": pass', 0),  # the record's own name, as above
    ('if tier_kind(table["kind"]).storage in ("s3-bucket", "url-only"): pass', 1),
])
def test_the_scan_sees_comparisons(source, hits):
    assert len(comparisons(source)) == hits


def test_lookups_name_the_known_ones():
    assert tier_kind("s3").remote and not tier_kind("disk").remote
    assert platform_named("cpu").cpu_computes and platform_named("rocm").has_gpus
    with pytest.raises(StackctlError, match=r"unknown tier kind 'nfs' \(known: cpu, disk, s3, fs\)"):
        tier_kind("nfs")
    with pytest.raises(StackctlError, match=r"unknown platform 'cuda' \(known: rocm, cpu\)"):
        platform_named("cuda")


def test_records_are_frozen_and_complete():
    with pytest.raises(AttributeError):
        tier_kind("cpu").remote = True  # type: ignore[misc]
    assert kinds_where(lambda k: k.survives_restart) == ("s3", "fs")  # LMCache's local_disk re-indexes nothing
    assert kinds_where(lambda k: k.lower) == ("disk", "s3", "fs")
    for kind in TIER_KIND_RECORDS:
        assert kind.required <= kind.allowed, kind
        assert kind.backend and kind.lmcache_keys and kind.host_check and kind.round_trip, kind
    for platform in PLATFORM_RECORDS:
        assert (REPO / "templates" / platform.dockerfile).is_file(), platform
        assert bool(platform.devices) == platform.has_gpus, platform


def test_each_tier_maps_to_its_own_lmcache_keys():
    class T:
        size_gb, path, url, region, disable_tls = 8.0, "/kv", "s3://b.example.com", "us-east-1", True

    for kind in TIER_KIND_RECORDS:
        config, extra = kind.lmcache(T, lambda size: size / 2)
        assert set(config) <= set(kind.lmcache_keys) and set(kind.lmcache_keys) - {"local_cpu"} <= set(config)
        assert set(extra) <= set(kind.lmcache_extra_keys)


def test_the_records_module_stays_in_the_knowledge_layer():
    assert Path(REPO, RECORDS).is_file()
    tree = ast.parse(Path(REPO, RECORDS).read_text())
    imports = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imports <= {"__future__", "stackctl.errors", "collections.abc"}
    serving = ast.parse(Path(REPO, "stackctl/knowledge/serving_engines.py").read_text())
    assert {n.module for n in ast.walk(serving) if isinstance(n, ast.ImportFrom)} <= {"__future__",
                                                                                    "stackctl.knowledge.kinds"}


def test_serving_engines_are_records_the_schema_and_platforms_read():
    with pytest.raises(StackctlError, match=r"unknown serving engine 'sglang' \(known: vllm, atom-vllm\)"):
        serving_engine("sglang")
    with pytest.raises(AttributeError):
        serving_engine("vllm").atom_plugin = True  # type: ignore[misc]
    from stackctl.recipe.model import Stack

    field = Stack._fields["engine"]
    assert field.meta["choices"] == SERVING_ENGINES and field.doc == engine_help()
    assert engine_help() == "Serving engine: plain vLLM, or vLLM with AMD's ATOM platform plugin."
    for platform in PLATFORM_RECORDS:  # every engine has a base image and a vLLM default on every platform
        assert set(platform.base_image_keys) == set(platform.vllm_keys) == set(SERVING_ENGINES), platform
    atom, plain = serving_engine("atom-vllm"), serving_engine("vllm")
    assert atom.atom_plugin and atom.needs_cuda_graphs and not atom.gpu_env and atom.image_prefix == "rocm/atom"
    assert not plain.atom_plugin and not plain.needs_cuda_graphs and not plain.image_prefix
    assert plain.gpu_env == {"ATOM_DISABLE_VLLM_PLUGIN": "1"}
    assert [e.name for e in SERVING_ENGINE_RECORDS] == list(SERVING_ENGINES)


def test_offload_engines_say_what_they_serve_and_how_they_are_selected():
    with pytest.raises(StackctlError, match=r"unknown offload engine 'nixl' \(known: lmcache, lmcache-mp, vllm-native, "
                                            r"vllm-simple\)"):
        offload_engine("nixl")
    for engine in OFFLOAD_ENGINE_RECORDS:
        assert engine.needs <= engine.tiers <= set(TIER_KINDS), engine
        assert set(engine.unsupported_on) <= set(PLATFORMS), engine
        assert engine_with_connector(engine.connector) is engine
        assert not engine.lmcache_in_server or engine.lmcache_package, engine  # LMCache in the server needs it
    assert engine_selected_by("native", {}) is offload_engine("vllm-native")
    assert engine_selected_by("native", {"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}) is offload_engine("vllm-simple")
    assert engine_selected_by("lmcache", {}) is offload_engine("lmcache-mp")
    assert engine_selected_by("nixl", {}) is None
    assert engine_with_connector("NixlConnector") is None


def test_each_engine_launches_as_vllm_and_lmcache_read_it():
    class Cache:
        chunk_size = 128

    class Tier:
        def __init__(self, **values):
            self.__dict__.update(values)

    tiers = {"cpu": Tier(kind="cpu", size_gb=2.0), "disk": Tier(kind="disk", path="/kv", size_gb=1.0),
             "fs": Tier(kind="fs", path="/shared")}
    server = {"host": "127.0.0.1", "port": 5555, "http_port": 8080}
    flags, transfer, mp = offload_engine("vllm-native").launch(Cache, tiers, server)
    assert flags == ["--kv-offloading-backend", "native", "--kv-offloading-size", "2"] and transfer is None
    _, transfer, _ = offload_engine("vllm-simple").launch(Cache, tiers, server)
    assert transfer["kv_connector_extra_config"] == {"cpu_bytes_to_use": 2 << 30, "kv_offload_backend": "disk",
                                                     "disk_path": "/kv", "disk_capacity_bytes": 1 << 30}
    _, transfer, mp = offload_engine("lmcache-mp").launch(Cache, tiers, server)
    assert transfer["kv_connector_extra_config"] == {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": 5555}
    argv = mp["argv"]
    assert argv[:2] == ["lmcache", "server"] and argv[argv.index("--l1-size-gb") + 1] == "2"
    assert argv[argv.index("--l2-adapter") + 1] == '{"type": "fs", "base_path": "/shared"}'
    assert offload_engine("lmcache").launch(Cache, tiers, server) == ([], None, {})
