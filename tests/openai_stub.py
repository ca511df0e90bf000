"""A local HTTP server (the standard library's, on a loopback port of its own) answering in the shapes vLLM's
OpenAI server uses: /health, /v1/models, /metrics with the prefix-cache counters, POST /reset_prefix_cache and
/tokenize, and a server-sent-events /v1/completions stream ending in `data: [DONE]`. For unit tests of stackctl's HTTP edge and of
bench's bookkeeping; the same code runs against a live vLLM in tests/integration."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

METRICS = """# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="tiny"}} {queries}
vllm:prefix_cache_hits_total{{engine="0",model_name="tiny"}} {hits}
vllm:external_prefix_cache_queries_total{{engine="0",model_name="tiny"}} 0.0
vllm:external_prefix_cache_hits_total{{engine="0",model_name="tiny"}} {external_hits}
vllm:request_success_total{{engine="0",finished_reason="length",model_name="tiny"}} {completions}.0
"""


class Server:
    """State the handler serves: counters grow with each completion (prompt words queried, `hit_share` of them
    hit); after `answer_completions` completions the server fails them and reports itself unhealthy.

    With `caches`, hits follow vLLM's and LMCache's keys instead: a prompt seen before under the same cache_salt is
    an HBM hit; seen before under another salt, an LMCache (external) hit when `lmcache`, else a miss. With `offload`
    (an engine keyed by the salt too, like LMCache's own server), POST /reset_prefix_cache empties HBM and what it
    held becomes an external hit under the same salt."""

    def __init__(self, hit_share: float = 0.5, answer_completions: int | None = None, caches: bool = False,
                 lmcache: bool = False, offload: bool = False):
        self.hit_share, self.answer_completions = hit_share, answer_completions
        self.caches, self.lmcache, self.offload = caches, lmcache, offload
        self.seen: set = set()
        self.offloaded: set = set()
        self.queries = self.hits = self.external_hits = 0.0
        self.completions = 0
        self.received: list = []
        self.gets: list[str] = []  # the paths GET asked, in order
        self.lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"server_state": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def dead(self) -> bool:
        return self.answer_completions is not None and self.completions >= self.answer_completions

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_state: Server

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def _reply(self, code, body=b"", content_type="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        state = self.server_state
        with state.lock:
            state.gets.append(self.path)
        if self.path == "/health":
            self._reply(503 if state.dead else 200)
        elif self.path == "/v1/models":
            self._reply(200, json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode())
        elif self.path == "/metrics":
            text = METRICS.format(queries=state.queries, hits=state.hits, external_hits=state.external_hits,
                                  completions=state.completions)
            self._reply(200, text.encode(), "text/plain; version=0.0.4")
        else:
            self._reply(404, b"{}")

    def do_POST(self):
        state = self.server_state
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        with state.lock:
            state.received.append((self.path, body))
        if self.path == "/reset_prefix_cache":
            with state.lock:
                if state.offload:
                    state.offloaded |= state.seen
                    state.seen = set()
            self._reply(200)
        elif self.path == "/tokenize":  # one token per word, as the smoke models' vocabulary splits
            tokens = [int(word[1:]) if word[1:].isdigit() else 0 for word in body["prompt"].split()]
            self._reply(200, json.dumps({"tokens": tokens, "count": len(tokens)}).encode())
        elif self.path == "/v1/completions":
            with state.lock:
                if state.dead:
                    self._reply(500, b'{"error": "EngineDeadError"}')
                    return
                state.completions += 1
                prompt = body["prompt"]
                words = len(prompt) if isinstance(prompt, list) else len(prompt.split())  # token ids or text
                key = (body.get("cache_salt"), str(prompt))
                state.queries += words
                if not state.caches:
                    state.hits += words * state.hit_share
                elif key in state.seen:
                    state.hits += words * state.hit_share
                elif state.lmcache and any(seen == key[1] for _, seen in state.seen):
                    state.external_hits += words * state.hit_share
                elif key in state.offloaded:
                    state.external_hits += words * state.hit_share
                state.seen.add(key)
            generated = [" w5", " w6"][:body.get("max_tokens", 2)]
            events = [{"id": "cmpl-1", "choices": [{"index": 0, "text": text, "finish_reason": None
                                                    if step < len(generated) - 1 else "length",
                                                    **_logprobs(text, body.get("logprobs"))}]}
                      for step, text in enumerate(generated)]
            events.append({"id": "cmpl-1", "choices": [], "usage": {
                "prompt_tokens": words, "completion_tokens": len(generated), "total_tokens": words + len(generated)}})
            stream = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + ": keep-alive\n\ndata: [DONE]\n\n"
            self._reply(200, stream.encode(), "text/event-stream")
        else:
            self._reply(200, b'{"ok": true}')


def _logprobs(token: str, top: int | None) -> dict:
    """vLLM's completion logprobs of one streamed token (vllm/entrypoints/openai/completion/protocol.py
    CompletionLogProbs): the token's own and the `top` most likely ones' (plus the chosen token), when asked."""
    if top is None:
        return {}
    likely = {token: -0.5, **{f" w{100 + rank}": -1.0 - rank for rank in range(top)}}
    return {"logprobs": {"text_offset": [0], "tokens": [token], "token_logprobs": [likely[token]],
                         "top_logprobs": [likely]}}
