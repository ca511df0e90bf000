"""bench's bookkeeping during a run, against a local server in vLLM's shapes (tests/openai_stub.py) whose counters
grow with each completion: the request budget is kept, the hit rate comes from the server's counters, and a server
that dies mid-run marks the results partial with the first error kept. Against live vLLM stacks: tests/integration."""

from __future__ import annotations

from openai_stub import Server

from stackctl import bench


def test_probe_reads_the_repeat_hit_rate_from_the_server():
    with Server(hit_share=0.75) as server:
        result = bench.probe(server.url, "tiny", tokens=100)
    assert result["prompt_tokens"] == 100 and result["hit_rate"] == 0.75
    assert result["speedup"] == result["cold_ttft_s"] / result["warm_ttft_s"]
    (_, cold), (_, warm) = server.received
    assert cold["prompt"] == warm["prompt"] and len(cold["prompt"].split()) == 100


def test_a_workload_stops_at_its_request_budget():
    sessions = bench.agentic_sessions(users=3, turns=4, system_tokens=20, turn_tokens=5, output_tokens=2)
    with Server(hit_share=0.5) as server:
        result = bench.run_workload(server.url, "tiny", sessions, "arm", max_requests=7, max_seconds=60)
    assert len(result.requests) == 7 == server.completions and result.errors == 0
    assert result.hit_rate == 0.5 and result.server_lost is False
    assert {r["completion_tokens"] for r in result.requests} == {2}


def test_a_server_that_dies_mid_run_leaves_partial_results():
    sessions = bench.agentic_sessions(users=1, turns=6, system_tokens=20, turn_tokens=5, output_tokens=2)
    with Server(answer_completions=2) as server:
        result = bench.run_workload(server.url, "tiny", sessions, "arm", max_requests=10, max_seconds=60)
    assert len(result.requests) == 2 and result.errors == 4
    assert result.server_lost is True and result.hit_rate is None
    assert result.first_error.startswith("HTTPError: HTTP Error 500")
    assert result.summary()["partial"] is True
