"""The HTTP client stackctl uses for /health, /metrics and completions, against a real local HTTP server (the
standard library's, on a loopback port of its own) that answers in the shapes vLLM's OpenAI server uses: status
codes, JSON bodies, and a server-sent-events completion stream ending in `data: [DONE]`. Against a live vLLM the same
calls run in tests/integration."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stackctl import httpclient

EVENTS = [
    {"id": "cmpl-1", "choices": [{"index": 0, "text": " w5", "finish_reason": None}], "usage": None},
    {"id": "cmpl-1", "choices": [{"index": 0, "text": " w6", "finish_reason": "length"}], "usage": None},
    {"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 2, "total_tokens": 1202}},
]


class Handler(BaseHTTPRequestHandler):
    received: list = []

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def _reply(self, code, body=b"", content_type="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._reply(200)
        elif self.path == "/starting/health":
            self._reply(503, b'{"error": "engine dead"}')
        elif self.path == "/v1/models":
            self._reply(200, json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode())
        else:
            self._reply(404, b"{}")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        Handler.received.append((self.path, body))
        if self.path == "/reset_prefix_cache":
            self._reply(200)
        elif self.path == "/v1/completions":
            stream = "".join(f"data: {json.dumps(e)}\n\n" for e in EVENTS) + ": keep-alive\n\ndata: [DONE]\n\n"
            self._reply(200, stream.encode(), "text/event-stream")
        else:
            self._reply(200, b'{"ok": true}')


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_status_codes_and_a_server_that_is_not_there(server):
    assert httpclient.get_status(f"{server}/health") == 200
    assert httpclient.get_status(f"{server}/starting/health") == 503  # an answer, not "nothing answers"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    assert httpclient.get_status(f"http://127.0.0.1:{closed}/health", timeout=2) is None
    assert httpclient.get_status("not a url") is None


def test_json_get_and_post(server):
    assert httpclient.get_json(f"{server}/v1/models")["data"][0]["id"] == "tiny"
    assert httpclient.post_json(f"{server}/reset_prefix_cache") is None  # an empty 200 body
    assert httpclient.post_json(f"{server}/other", {"a": 1}) == {"ok": True}
    assert Handler.received[-1] == ("/other", {"a": 1})


def test_a_streamed_completion_is_timed_and_its_usage_kept(server):
    result = httpclient.stream_completion(server, "tiny", "w1 w2 w3", max_tokens=2)
    assert result["text"] == " w5 w6"
    assert result["usage"] == {"prompt_tokens": 1200, "completion_tokens": 2, "total_tokens": 1202}
    assert 0 < result["ttft_s"] <= result["e2e_s"]
    path, request = Handler.received[-1]
    assert path == "/v1/completions"
    assert request == {"model": "tiny", "prompt": "w1 w2 w3", "max_tokens": 2, "temperature": 0.0, "stream": True,
                       "stream_options": {"include_usage": True}}
