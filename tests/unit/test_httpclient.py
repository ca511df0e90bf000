"""The HTTP client stackctl uses for /health, /metrics and completions, against a real local HTTP server answering
in vLLM's shapes (tests/openai_stub.py): status codes, JSON bodies, and a server-sent-events completion stream.
Against a live vLLM the same calls run in tests/integration."""

from __future__ import annotations

import socket

import pytest
from openai_stub import Server

from stackctl import httpclient


@pytest.fixture(scope="module")
def server():
    with Server(answer_completions=100) as running:
        yield running


def test_status_codes_and_a_server_that_is_not_there(server):
    assert httpclient.get_status(f"{server.url}/health") == 200
    assert httpclient.get_status(f"{server.url}/nowhere") == 404  # an answer, not "nothing answers"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    assert httpclient.get_status(f"http://127.0.0.1:{closed}/health", timeout=2) is None
    assert httpclient.get_status("not a url") is None


def test_json_get_and_post(server):
    assert httpclient.get_json(f"{server.url}/v1/models")["data"][0]["id"] == "tiny"
    assert httpclient.post_json(f"{server.url}/reset_prefix_cache") is None  # an empty 200 body
    assert httpclient.post_json(f"{server.url}/other", {"a": 1}) == {"ok": True}
    assert server.received[-1] == ("/other", {"a": 1})


def test_a_streamed_completion_is_timed_and_its_usage_kept(server):
    result = httpclient.stream_completion(server.url, "tiny", "w1 w2 w3", max_tokens=2)
    assert result["text"] == " w5 w6"
    assert result["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert 0 < result["ttft_s"] <= result["e2e_s"]
    path, request = server.received[-1]
    assert path == "/v1/completions"
    assert request == {"model": "tiny", "prompt": "w1 w2 w3", "max_tokens": 2, "temperature": 0.0, "stream": True,
                       "stream_options": {"include_usage": True}}


def test_a_streamed_completion_keeps_each_steps_most_likely_tokens(server):
    """With logprobs=N vLLM streams the chosen token's log-probability and the N most likely tokens' per step."""
    result = httpclient.stream_completion(server.url, "tiny", "w1 w2", max_tokens=1, extra={"logprobs": 2})
    assert (result["tokens"], result["logprobs"]) == ([" w5"], [-0.5])
    assert result["top_logprobs"] == [{" w5": -0.5, " w100": -1.0, " w101": -2.0}]
