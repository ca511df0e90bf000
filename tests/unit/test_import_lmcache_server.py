"""LMCache's own server started beside vLLM in a container of its own, imported as cache.offload = "lmcache-mp":
real public launches (tests/fixtures/import, each with its source) where the server is a second `docker run`, a
DaemonSet on vLLM's node, or a sidecar in vLLM's pod, and the server's flags mapped as the lmcache-mp record writes
them (--l1-size-gb -> the cpu tier, --port -> cache.server_port), with a note for everything not carried over."""

from __future__ import annotations

from pathlib import Path

import pytest

from stackctl import importer
from stackctl.importer.lmcache_server import server_args_at
from stackctl.recipe.loader import load_recipe_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "import"


def imported(name: str):
    path = FIXTURES / name
    text = importer.import_launch(path)
    return load_recipe_text(text), " ".join(line.lstrip("# ") for line in text.splitlines())


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir()))
def test_every_fixture_names_its_public_source(name):
    assert (FIXTURES / name).read_text().splitlines()[0].startswith("# Source: ")


def test_docker_run_of_lmcache_standalone_beside_the_vllm_container():
    """LMCache 0.5.6 docs/source/mp/deployment.rst: `docker run ... lmcache/standalone:nightly /opt/venv/bin/lmcache
    server --l1-size-gb 60 --eviction-policy LRU --max-workers 4 --port 6555`, then vLLM's container."""
    r, notes = imported("lmcache-mp-docker-run.sh")
    assert (r.cache.enabled, r.cache.offload, r.cache.server_port) == (True, "lmcache-mp", 6555)
    assert [(t.kind, t.size_gb) for t in r.cache.tiers] == [("cpu", 60.0)]
    assert r.model.path == "Qwen/Qwen3-14B" and not r.serve.extra_args
    assert "the LMCache server runs in a container of its own (lmcache/standalone:nightly; options --runtime " \
           "nvidia, --gpus all, --network host, --ipc host)" in notes
    assert "`lmcache server` flags stackctl does not write: --max-workers: not imported" in notes


def test_daemonset_on_the_node_of_the_vllm_deployment():
    """LMCache 0.5.6 examples/multi_process: the server as a DaemonSet (`python -m lmcache.v1.multiprocess.server`),
    vLLM reaching it at the node's address (a field only the cluster knows)."""
    r, notes = imported("lmcache-mp-k8s-daemonset.yaml")
    assert (r.cache.offload, r.cache.server_port, r.cache.hash_seed) == ("lmcache-mp", 6555, 0)
    assert [(t.kind, t.size_gb) for t in r.cache.tiers] == [("cpu", 60.0)]
    assert r.model.tensor_parallel == 4 and not r.serve.extra_args
    assert "started as `python -m lmcache.v1.multiprocess.server` (no HTTP frontend)" in notes
    assert "runs in container lmcache-server (lmcache/standalone:nightly; options pod hostNetwork: True; " \
           "environment LMCACHE_LOG_LEVEL)" in notes
    assert "lmcache.mp.host=tcp://$(fieldRef" in notes and "--max-workers: not imported" in notes
    assert "is not part of the recipe" not in notes


def test_sidecar_in_the_vllm_pod_with_the_older_l1_flag():
    """LMCache's examples/multi_process/multi_process.yaml (before 0.5): the server a sidecar container of vLLM's
    pod, its L1 size given as --cpu-buffer-size."""
    r, notes = imported("lmcache-mp-k8s-sidecar.yaml")
    assert (r.cache.offload, r.cache.server_port) == ("lmcache-mp", 6555)
    assert [(t.kind, t.size_gb) for t in r.cache.tiers] == [("cpu", 60.0)]
    assert r.model.path == "meta-llama/Llama-3.1-8B-Instruct"
    assert "--cpu-buffer-size 60: an older LMCache's name of --l1-size-gb" in notes
    assert "environment CUDA_VISIBLE_DEVICES, LMCACHE_LOG_LEVEL" in notes
    assert r.serve.secret_env == {"HF_TOKEN": "HF_TOKEN"}  # the Secret's value never copied


COMPOSE = """services:
  lmcache:
    image: lmcache/standalone:nightly
    command: ["/opt/venv/bin/lmcache", "server", "--l1-size-gb", "8", "--eviction-policy", "LRU", "--port", "6555",
              "--l2-adapter", '{"type": "fs", "base_path": "/mnt/kv"}']
    network_mode: host
  vllm:
    image: lmcache/vllm-openai:latest-nightly
    command: ["Qwen/Qwen3-14B", "--kv-transfer-config",
              '{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both","kv_connector_extra_config":{"lmcache.mp.port":6555}}']
    network_mode: host
"""


def test_compose_service_beside_the_vllm_service():
    """The deployment.rst pair as two compose services (no public compose file of this shape was found): the L2
    adapter of the LMCache service becomes the fs tier."""
    text = importer.import_launch_text(COMPOSE, None, "t", script_name="compose.yaml")
    r = load_recipe_text(text)
    assert (r.cache.offload, r.cache.server_port) == ("lmcache-mp", 6555)
    assert [(t.kind, t.size_gb, t.path) for t in r.cache.tiers] == [("cpu", 8.0, None), ("fs", None, "/mnt/kv")]
    assert "compose service lmcache (lmcache/standalone:nightly; options compose network_mode: host)" in \
        " ".join(line.lstrip("# ") for line in text.splitlines())


@pytest.mark.parametrize("argv,start", [
    (["lmcache", "server", "--port", "1"], 2),
    (["/opt/venv/bin/lmcache", "server"], 2),
    (["python3", "-m", "lmcache.cli.main", "server", "--l1-size-gb", "1"], 4),
    (["/opt/venv/bin/python3", "-m", "lmcache.v1.multiprocess.server", "--port", "1"], 3),
    (["docker", "run", "--ipc", "host", "img", "lmcache", "server"], 7),
    (["lmcache", "kvcache", "clear"], None),
    (["python3", "-m", "lmcache.cli.main", "kvcache"], None),
    (["vllm", "serve", "m"], None),
])
def test_the_server_command_forms(argv, start):
    assert server_args_at(argv) == start
