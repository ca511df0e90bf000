"""kv-cache-tester traces replayed by bench (stackctl/bench/trace.py), pure: an excerpt of a real public trace
(tests/fixtures/bench, kv-cache-tester's traces/trace_0003.json, Apache-2.0) read as kv-cache-tester's
trace_replay_tester.py reads it, prompts whose equal hash ids are equal word blocks (the prefix reuse is real),
lengths and times scaled to the sweep's context and point, and one-line errors for a bad trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stackctl.bench import trace as traces
from stackctl.bench.sweep import SweepSpec, point_sessions
from stackctl.errors import StackctlError

EXCERPT = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "kv-cache-tester-trace-0003-excerpt.json"


def test_the_real_trace_is_read_with_its_subagent_on_its_own_timeline():
    trace = traces.read_trace(EXCERPT)
    assert (trace.name, trace.block_size, trace.conversations) == ("trace_0003", 64, 2)
    main = [r for r in trace.requests if r.conversation == 0]
    sub = [r for r in trace.requests if r.conversation == 1]
    assert [(r.at, r.input_tokens, r.output_tokens, len(r.hash_ids)) for r in main] == [
        (0.0, 16564, 244, 258), (153.0, 20617, 1382, 322), (184.0, 21979, 236, 343), (298.0, 22544, 471, 352)]
    assert [r.at for r in sub] == [134.227, 140.227, 148.227]  # its t counts from the sub-agent's start
    assert [r.at for r in trace.requests] == sorted(r.at for r in trace.requests)
    assert trace.longest == 22544 + 471 and trace.duration_s == 298.0
    for earlier, later in zip(main, main[1:]):  # the recorded conversation grows: each prompt extends the last
        assert later.hash_ids[:len(earlier.hash_ids)] == earlier.hash_ids


def test_equal_hash_ids_give_equal_token_blocks_and_prompts_share_the_recorded_prefix():
    trace = traces.read_trace(EXCERPT)
    used = traces.fit(trace, 1536)
    first, second = [r for r in trace.requests if r.conversation == 0][:2]
    blocks: dict = {}
    a = traces.prompt_for(first, 0, used, "s", blocks).split()
    b = traces.prompt_for(second, 1, used, "s", blocks).split()
    shared = len(first.hash_ids) * used.block_tokens
    assert a[:shared] == b[:shared] and a[shared:] != b[shared:len(a)]
    assert len(a) == used.tokens(first.input_tokens) and len(a) + used.tokens(first.output_tokens) <= 1536
    assert traces.block_words(7, 4, "s") == traces.block_words(7, 4, "s") != traces.block_words(7, 4, "t")


def test_lengths_scale_only_when_the_context_needs_it_and_keep_every_block():
    trace = traces.read_trace(EXCERPT)
    small = traces.fit(trace, 1536)
    assert small.block_tokens == 4  # 64 x 1536 / 23,015 (the longest request) = 4.27 tokens a block
    assert small.length_scale == small.block_tokens / 64 < 1.0
    assert max(small.tokens(r.input_tokens) + small.tokens(r.output_tokens) for r in trace.requests) <= 1536
    whole = traces.fit(trace, 32768)
    assert (whole.block_tokens, whole.length_scale) == (64, 1.0)
    line = traces.describe(trace, small, 1536)
    assert "lengths scaled x" in line and f"64-token blocks replayed as {small.block_tokens} tokens" in line
    assert "lengths as recorded" in traces.describe(trace, whole, 32768)
    with pytest.raises(StackctlError, match=r"trace_0003: a request has 352 blocks, more than 300 tokens"):
        traces.fit(trace, 300)


def test_a_load_point_replays_the_trace_per_user_on_a_compressed_timeline():
    trace = traces.read_trace(EXCERPT)
    spec = SweepSpec(users=[1, 2], contexts=[1536], turns=4, output_tokens=16, think_s=0.0, kv_tokens=None,
                     max_seconds=60.0, trace=trace)
    sessions = point_sessions(2, 1536, spec)
    assert len(sessions) == 4  # two users, each the conversation and its sub-agent
    assert [len(s) for s in sessions] == [4, 3, 4, 3]
    assert sessions[0][-1].at == pytest.approx(298.0 * 30.0 / 298.0)  # half the point's time
    assert sessions[2][0].at > 0.0  # the second user starts a little later
    assert sessions[0][0].prompt != sessions[2][0].prompt  # users share no blocks: a trace's ids are its own
    assert point_sessions(2, 1536, spec) == sessions  # the same point, the same prompts
    assert point_sessions(1, 1536, spec)[0][0].prompt != sessions[0][0].prompt  # another point, its own prompts
    assert len({r.session for s in sessions for r in s}) == 4


@pytest.mark.parametrize("body,message", [
    ("[]", r"requests: missing"),
    ('{"requests": []}', r"requests: none to replay"),
    ('{"block_size": 0, "requests": [{"in": 1}]}', r"block_size: 0 is not a positive"),
    ('{"requests": [{"in": 5, "hash_ids": ["a"]}]}', r"requests\[0\]\.hash_ids: not a list of whole numbers"),
    ('{"requests": [{"in": -1}]}', r"requests\[0\]\.in: -1 is not a number >= 0"),
    ('{"requests": [{"type": "subagent", "t": 1, "requests": [{"t": "x"}]}]}',
     r"requests\[0\]\.requests\[0\]\.t: 'x' is not a number"),
    ("{not json", r"not JSON"),
])
def test_a_bad_trace_is_one_line_naming_the_file_and_key(tmp_path, body, message):
    path = tmp_path / "t.json"
    path.write_text(body)
    with pytest.raises(StackctlError, match=message) as error:
        traces.read_trace(path)
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)


def test_a_trace_without_sub_agents_and_block_size_defaults_to_64(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"requests": [{"t": 0, "in": 130, "out": 2, "hash_ids": [1, 2]},
                                             {"t": 5, "in": 200, "out": 3, "hash_ids": [1, 2, 3]}]}))
    trace = traces.read_trace(path)
    assert (trace.name, trace.block_size, trace.conversations) == ("t", 64, 1)
    used = traces.fit(trace, 4096, seconds=10.0)
    assert used.time_scale == 1.0  # already within the time
    (session,) = traces.replay_sessions(trace, 1, used, seed=0)
    assert [len(r.prompt.split()) for r in session] == [130, 200] and [r.max_tokens for r in session] == [2, 3]
    assert session[1].prompt.startswith(" ".join(session[0].prompt.split()[:128]))


def test_the_cli_refuses_a_bad_trace_in_one_line_before_any_arm_starts(tmp_path):
    from helpers import RECIPES, run_cli

    bad = tmp_path / "bad.json"
    bad.write_text('{"requests": [{"in": 5, "hash_ids": ["a"]}]}')
    for sweep in (["--sweep"], []):
        result = run_cli("bench", str(RECIPES / "cpu-smoke.toml"), *sweep, "--trace", str(bad), "-o",
                         str(tmp_path / "out"))
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip() == f"stackctl: {bad}: requests[0].hash_ids: not a list of whole numbers"


def test_the_sweep_report_says_the_trace_and_how_it_was_fitted():
    from test_bench_sweep_logic import result_of_a_sweep

    from stackctl.bench import sweep_report

    result = result_of_a_sweep()
    trace = traces.read_trace(EXCERPT)
    result["trace"] = {"name": trace.name, "replay": [traces.describe(trace, traces.fit(trace, 1024, 30.0), 1024)]}
    first = sweep_report.markdown(result).splitlines()[0]
    assert first.startswith("Sweep of cpu-lmcache (bench): each user a replay of kv-cache-tester trace_0003 (trace "
                            "trace_0003: 7 requests in 2 conversation(s), the longest 23,015 tokens, lengths scaled x")
    assert "its 298 s replayed in 30 s" in first and "turns per user" not in first
