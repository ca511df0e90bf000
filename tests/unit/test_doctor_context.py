"""What doctor's context decides before it talks to anything: which hash keys the shared cache, which address the
server answers on; and, with no Docker engine answering (the real client, a socket path where nothing listens),
image and server checks skip with the reason instead of passing."""

from __future__ import annotations

import pytest
from helpers import RECIPES

from stackctl.doctor.context import DoctorContext
from stackctl.state.store import write_atomically
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec

load_all()


def recipe(name):
    return load_recipe(RECIPES / f"{name}.toml")


def test_the_hash_that_keys_the_shared_cache():
    lmcache = recipe("atom-lmcache-cpu")
    assert DoctorContext(StackSpec(lmcache)).hash_algo() == "builtin"  # LMCache's default pre_caching_hash_algorithm
    lmcache.cache.extra["pre_caching_hash_algorithm"] = "sha256_cbor"
    assert DoctorContext(StackSpec(lmcache)).hash_algo() == "sha256_cbor"
    smoke = recipe("cpu-smoke")
    smoke.serve.prefix_caching_hash_algo = None
    assert DoctorContext(StackSpec(smoke)).hash_algo() == "sha256"  # vLLM's default prefix-caching hash
    smoke.serve.prefix_caching_hash_algo = "xxhash"
    assert DoctorContext(StackSpec(smoke)).hash_algo() == "xxhash"


@pytest.mark.parametrize("host, url", [("0.0.0.0", "http://127.0.0.1:8123"), ("127.0.0.1", "http://127.0.0.1:8123")])
def test_the_server_is_reached_on_loopback_when_bound_to_all(host, url):
    smoke = recipe("cpu-smoke")
    smoke.serve.host, smoke.serve.port = host, 8123
    assert DoctorContext(StackSpec(smoke)).base_url == url


@pytest.mark.parametrize("check_id", ["image.versions", "image.hash-seed", "server.health", "server.engine-config"])
def test_without_an_engine_image_and_server_checks_skip_with_the_reason(check_id, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("STACKCTL_STATE_DIR", str(tmp_path / "state"))
    context = DoctorContext(StackSpec(recipe("cpu-smoke")))
    result = CHECKS[check_id].run(context)
    assert result.status == "skip"
    assert result.message.startswith(f"no Docker engine: cannot reach the Docker engine at unix://{tmp_path}/")
    assert context.engine_error and context.engine_or_none() is None  # asked once, remembered


def test_facts_files_are_replaced_whole(tmp_path):
    """Doctor keeps image facts in the state dir through its one writer: a file is replaced whole."""
    target = tmp_path / "image-facts" / "abc.json"
    write_atomically(target, '{"probe": 1}')
    write_atomically(target, '{"probe": 2}')
    assert target.read_text() == '{"probe": 2}' and [p.name for p in target.parent.iterdir()] == ["abc.json"]


def test_metrics_ask_health_once_and_a_server_gone_since_is_a_skip():
    from openai_stub import Server

    from stackctl.doctor.registry import Unavailable

    context = DoctorContext(StackSpec(recipe("cpu-smoke")))
    context.container = lambda: None  # the stack's container: found (this test has no engine)
    with Server() as stub:
        context.recipe.serve.port = int(stub.url.rsplit(":", 1)[1])
        assert "vllm:prefix_cache_hits_total" in context.metrics() and "vllm:" in context.metrics()
    assert stub.gets == ["/health", "/metrics", "/metrics"]
    with pytest.raises(Unavailable, match="stopped answering /metrics"):
        context.metrics()  # the stub is gone: no /health round trip first, and the check skips, saying why


def test_the_log_since_a_mark_is_asked_of_the_engine_by_time_and_loses_its_colour_codes():
    class Container:
        def logs(self, **kwargs):
            self.asked = kwargs
            return b"\x1b[32mLMCache INFO:\x1b[0m Stored 640 out of total 641 tokens\n"

    context = DoctorContext(StackSpec(recipe("cpu-lmcache")))
    container = Container()
    context.container = lambda: container
    mark = context.log_mark()
    assert context.log_since(mark) == "LMCache INFO: Stored 640 out of total 641 tokens\n"
    assert container.asked == {"since": mark}
