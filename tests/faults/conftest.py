"""The fault-injection suite: real Docker engine, real vLLM (the cpu-smoke image), real Ansible over SSH.

Each case injects one fault, then asserts the outcome, that no container was orphaned and that no record was lost,
and adds a row to the faults table (`python benchmarks/faults.py` runs this suite and prints it; the rows go to
the file named by STACKCTL_FAULTS_REPORT). The cases reuse one built image (stack variants differ at run time
only) and share running servers where they can: a vLLM start costs about a minute.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# The integration helpers (recipe variants, fleet hosts) are shared with this suite.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))

from faultkit import Background, FaultReport, Watch  # noqa: E402
from stacks import engine_or_skip, stackctl_env  # noqa: E402


@pytest.fixture(scope="session")
def fault_report():
    report = FaultReport()
    yield report
    target = os.environ.get("STACKCTL_FAULTS_REPORT")
    if target:
        Path(target).write_text(json.dumps({"rows": report.rows, "notes": report.notes}, indent=2))


@pytest.fixture(scope="session")
def engine():
    return engine_or_skip()


@pytest.fixture(scope="session")
def fault_env(tmp_path_factory) -> dict:
    return stackctl_env(tmp_path_factory.mktemp("fault-state"))


@pytest.fixture
def watch(engine):
    return Watch(engine)


@pytest.fixture
def background():
    started: list[Background] = []

    def start(args: list[str], env: dict) -> Background:
        job = Background(args, env)
        started.append(job)
        return job

    yield start
    for job in started:
        job.kill()
