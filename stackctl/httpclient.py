"""Minimal HTTP for talking to a local vLLM server: standard library only (no requests at start-up)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request


def client_host(host: str) -> str:
    """The address a local client reaches a server on: a wildcard bind answers on loopback."""
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1", "[::]": "::1"}.get(host, host)


def get_status(url: str, timeout: float = 5.0) -> int | None:
    """HTTP status of GET url; None when nothing answers (refused, reset, timed out)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None


def get_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8", errors="replace")


def get_json(url: str, timeout: float = 10.0):
    return json.loads(get_text(url, timeout))


def post_json(url: str, payload: dict | None = None, timeout: float = 120.0):
    data = json.dumps(payload or {}).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read().decode("utf-8", errors="replace")
        return json.loads(body) if body.strip() else None


def stream_completion(base_url: str, model: str, prompt: str | list[int], max_tokens: int = 1, timeout: float = 300.0,
                      extra: dict | None = None) -> dict:
    """POST a streaming /v1/completions request; time to first token and end to end, in seconds. `extra` adds
    request fields (e.g. cache_salt, logprobs); with logprobs the generated tokens and their log-probabilities
    come back too (and, with logprobs=N, the N most likely tokens at each step with theirs: `top_logprobs`)."""
    payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
               "stream_options": {"include_usage": True}, **(extra or {})}
    request = urllib.request.Request(f"{base_url}/v1/completions", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    started = time.perf_counter()
    ttft = None
    usage = {}
    text: list[str] = []
    tokens: list[str] = []
    logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for raw in response:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue
            body = line[5:].strip()
            if body == "[DONE]":
                break
            event = json.loads(body)
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices") or []:
                if ttft is None and choice.get("text") is not None:
                    ttft = time.perf_counter() - started
                text.append(choice.get("text") or "")
                chosen = choice.get("logprobs") or {}
                tokens.extend(chosen.get("tokens") or [])
                logprobs.extend(value for value in chosen.get("token_logprobs") or [] if value is not None)
                top_logprobs.extend(step for step in chosen.get("top_logprobs") or [] if step is not None)
    total = time.perf_counter() - started
    return {"ttft_s": ttft if ttft is not None else total, "e2e_s": total, "usage": usage, "text": "".join(text),
            "tokens": tokens, "logprobs": logprobs, "top_logprobs": top_logprobs}
