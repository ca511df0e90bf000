"""kv-cache-tester traces (github.com/callanjfox/kv-cache-tester, Apache-2.0): one JSON file per recorded agentic
conversation, as its trace_replay_tester.py reads them (normalize_request, normalize_trace, spawn_subagent):

    {"id": "trace_0003", "block_size": 64, "hash_id_scope": "local", "tool_tokens": ..., "system_tokens": ...,
     "requests": [{"t": 0.0, "type": "n", "in": 16564, "out": 244, "hash_ids": [1, 2, ...], ...},
                  {"t": 134.2, "type": "subagent", "agent_id": "agent_001", "requests": [...]}, ...]}

`t` is seconds from the conversation's start, `in` / `out` the prompt and output tokens, `hash_ids` one id per whole
block of block_size tokens of the prompt: an id seen before is the same block, the prefix a cache can reuse. A
`subagent` entry is a conversation of its own that starts at its `t` (its requests' `t` count from there) and runs
beside its parent. Other keys (model, input_types, api_time, ...) describe the recording and are not replayed.

Replayed here (pure; workload.run_workload sends the requests): each hash id becomes a fixed block of the model's
words, so equal ids give equal token blocks and the prefix reuse is real; the prompt's tokens past its whole blocks
are words of that request alone. When the longest request does not fit the context it is replayed in, every length
is scaled by one factor (a block keeps its identity and shrinks to fewer tokens), and the timeline is compressed to
fit the load point's time: both said in the output.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from stackctl.bench.workload import VOCAB_WORDS, Request
from stackctl.errors import StackctlError

MAX_TRACE_BYTES = 64 << 20  # the public traces are below 1 MB each


@dataclass(frozen=True)
class TraceRequest:
    at: float                   # seconds from the trace's start
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    conversation: int           # 0: the main conversation; 1, 2, ...: its sub-agents, in order


@dataclass(frozen=True)
class Trace:
    name: str
    block_size: int
    requests: tuple[TraceRequest, ...]

    @property
    def duration_s(self) -> float:
        return max((r.at for r in self.requests), default=0.0)

    @property
    def longest(self) -> int:
        """The most tokens one request needs (prompt and output)."""
        return max((r.input_tokens + r.output_tokens for r in self.requests), default=0)

    @property
    def conversations(self) -> int:
        return 1 + max((r.conversation for r in self.requests), default=0)


def read_trace(path: Path) -> Trace:
    """A trace file, checked: a bad one is a one-line error naming the file, the request and the key."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_TRACE_BYTES:
            raise StackctlError(f"{path}: larger than {MAX_TRACE_BYTES >> 20} MiB: not a kv-cache-tester trace "
                                "(fix: one conversation per file)")
        data = json.loads(path.read_text())
    except OSError as exc:
        raise StackctlError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise StackctlError(f"{path}: not JSON ({exc}) (fix: a kv-cache-tester trace file)") from None
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
        raise StackctlError(f"{path}: requests: missing (fix: a kv-cache-tester trace, {{\"block_size\": 64, "
                            "\"requests\": [{\"t\", \"in\", \"out\", \"hash_ids\"}, ...]}})")
    block = data.get("block_size", 64)
    if not isinstance(block, int) or isinstance(block, bool) or block < 1:
        raise StackctlError(f"{path}: block_size: {block!r} is not a positive whole number of tokens")
    found: list[TraceRequest] = []
    _requests(path, data["requests"], "requests", 0.0, 0, [0], found)
    if not found:
        raise StackctlError(f"{path}: requests: none to replay")
    return Trace(str(data.get("id") or path.stem), block, tuple(sorted(found, key=lambda r: r.at)))


def _requests(path: Path, items: list, where: str, start: float, conversation: int, counter: list,
              found: list) -> None:
    for index, item in enumerate(items):
        here = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise StackctlError(f"{path}: {here}: not an object")
        at = start + _number(path, item, here, "t", 0.0)
        if item.get("type") == "subagent":
            nested = item.get("requests") or []
            if not isinstance(nested, list):
                raise StackctlError(f"{path}: {here}.requests: not a list of requests")
            counter[0] += 1
            _requests(path, nested, f"{here}.requests", at, counter[0], counter, found)
            continue
        ids = item.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise StackctlError(f"{path}: {here}.hash_ids: not a list of whole numbers")
        tokens_in = int(_number(path, item, here, "in", 0))
        tokens_out = int(_number(path, item, here, "out", 1))
        found.append(TraceRequest(at, tokens_in, max(1, tokens_out), tuple(ids), conversation))


def _number(path: Path, item: dict, where: str, key: str, default: float) -> float:
    value = item.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise StackctlError(f"{path}: {where}.{key}: {value!r} is not a number >= 0")
    return float(value)


@dataclass(frozen=True)
class Fit:
    """How a trace is replayed in `context` tokens and `seconds`: tokens per block, the length and time scales."""

    block_tokens: int
    length_scale: float
    time_scale: float

    def tokens(self, count: int) -> int:
        return max(1, round(count * self.length_scale))


def fit(trace: Trace, context: int, seconds: float | None = None) -> Fit:
    """Lengths scaled so that the longest request fits `context` tokens (never scaled up), the timeline so that it
    ends within `seconds` (None: as recorded)."""
    need = trace.longest
    scale = min(1.0, context / need) if need else 1.0
    block_tokens = max(1, math.floor(trace.block_size * scale))
    widest = max(len(r.hash_ids) for r in trace.requests)
    if widest * block_tokens + 1 > context:
        raise StackctlError(f"{trace.name}: a request has {widest} blocks, more than {context} tokens of context hold "
                            f"at one token each (fix: a longer --sweep-context, at least {widest + 1})")
    scale = block_tokens / trace.block_size if scale < 1.0 else 1.0  # whole tokens per block, never longer
    duration = trace.duration_s
    used = Fit(block_tokens, scale, min(1.0, seconds / duration) if seconds and duration else 1.0)
    longest = max(used.tokens(r.input_tokens) + used.tokens(r.output_tokens) for r in trace.requests)
    if longest > context:
        raise StackctlError(f"{trace.name}: its longest request needs {longest} tokens at one token per block, more "
                            f"than {context} (fix: a longer --sweep-context)")
    return used


def describe(trace: Trace, used: Fit, context: int) -> str:
    """The one line that says how the trace is replayed."""
    parts = [f"trace {trace.name}: {len(trace.requests)} requests in {trace.conversations} conversation(s), the "
             f"longest {trace.longest:,} tokens"]
    if used.length_scale < 1.0:
        parts.append(f"lengths scaled x{used.length_scale:.3g} to fit {context:,} tokens of context "
                     f"({trace.block_size}-token blocks replayed as {used.block_tokens} tokens)")
    else:
        parts.append("lengths as recorded")
    if used.time_scale < 1.0:
        parts.append(f"its {trace.duration_s:,.0f} s replayed in {trace.duration_s * used.time_scale:,.0f} s "
                     f"(x{used.time_scale:.3g})")
    return ", ".join(parts)


def block_words(hash_id: int, count: int, salt: str) -> list[str]:
    """The words of one block: fixed by the hash id and the replay's salt."""
    rng = random.Random(f"{salt}:{hash_id}")
    return [f"w{rng.randrange(VOCAB_WORDS)}" for _ in range(count)]


def prompt_for(request: TraceRequest, index: int, used: Fit, salt: str, blocks: dict | None = None) -> str:
    """A request's prompt: its blocks in order (equal ids, equal words), then words of its own up to its length."""
    blocks = {} if blocks is None else blocks
    words: list[str] = []
    for hash_id in request.hash_ids:
        if hash_id not in blocks:
            blocks[hash_id] = block_words(hash_id, used.block_tokens, salt)
        words += blocks[hash_id]
    rest = used.tokens(request.input_tokens) - len(words)
    if rest > 0:
        rng = random.Random(f"{salt}:tail:{index}")
        words += [f"w{rng.randrange(VOCAB_WORDS)}" for _ in range(rest)]
    return " ".join(words) or "w0"


def replay_sessions(trace: Trace, users: int, used: Fit, seed: int) -> list[list[Request]]:
    """`users` replays of the trace side by side, each with blocks of its own (a trace's hash ids are its own:
    two users share no prefix), staggered evenly over the first tenth of the scaled timeline; one session per
    conversation of each replay, its requests sent at their scaled times."""
    sessions: list[list[Request]] = []
    span = trace.duration_s * used.time_scale
    for user in range(users):
        salt = f"{seed}-{user}"
        offset = span * 0.1 * user / users
        blocks: dict = {}
        by_conversation: dict[int, list[Request]] = {}
        for index, request in enumerate(trace.requests):
            by_conversation.setdefault(request.conversation, []).append(Request(
                at=offset + request.at * used.time_scale, session=len(sessions) + request.conversation,
                prompt=prompt_for(request, index, used, salt, blocks), max_tokens=used.tokens(request.output_tokens)))
        sessions += [by_conversation[c] for c in sorted(by_conversation)]
    return sessions
