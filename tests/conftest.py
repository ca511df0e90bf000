"""Root fixtures; shared helpers live in helpers.py (tests import them as `from helpers import ...`)."""

import os
import signal
import time
from collections import defaultdict

import pytest
from helpers import run_cli
from lanes import LaneWorkers, lane

# A suite started in the background of a non-interactive shell (`.ci/run &`, many CI runners) inherits SIGINT
# ignored, and so would every stackctl it starts: Python leaves an ignored SIGINT ignored, and the Ctrl-C cases would
# send a signal nobody hears. With Python's own handler here, the processes the tests start get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Time spent per test folder (unit, integration): setup, call and teardown of each test, fixtures included (the
# integration tests' image builds and stack start-ups land in their first test's setup). Summed over both lanes,
# which run side by side: the folders add up to more than the wall time of the run.
_SECONDS_BY_FOLDER: dict = defaultdict(float)
_STARTED = time.monotonic()


@pytest.fixture
def cli():
    return run_cli


def pytest_collection_modifyitems(items):
    """The lanes first (tests/lanes.py), then the tests that have none. The tests of the HIP images run last (at the
    end of the engine lane): CI builds those images on an engine of their own while the other tests run (.ci/run),
    and these wait for that build under its lock. The order is otherwise kept (the sort is stable)."""
    rank = {"engine": 0, "fleet": 1, None: 2}
    items.sort(key=lambda item: (item.get_closest_marker("hip_images") is not None, rank[lane(item.nodeid)]))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling with a lane as the scope: all of a lane's tests go to one worker, in order, and each
    test without a lane is a scope of its own. (xdist's own `--dist loadgroup` marks a group by rewriting each test's
    id, which pytest 9.2 no longer reads: it grouped nothing.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return lane(nodeid) or nodeid

    return LaneScheduling(config, log)


_LANE_WORKERS = LaneWorkers()


def _hold_the_lanes(report) -> None:
    gateway = getattr(getattr(report, "node", None), "gateway", None)  # set on xdist's reports, in the controller
    if gateway is not None:
        problem = _LANE_WORKERS.ran(report.nodeid, gateway.id)
        if problem:
            raise pytest.UsageError(problem)


def pytest_runtest_logreport(report):
    _hold_the_lanes(report)
    parts = report.nodeid.split("/")
    folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0].split("::")[0]
    _SECONDS_BY_FOLDER[folder] += report.duration


def pytest_terminal_summary(terminalreporter):
    # Only the process that prints (xdist's workers send their reports to it).
    if not _SECONDS_BY_FOLDER or hasattr(terminalreporter.config, "workerinput"):
        return
    lines = [f"{folder:<12} {seconds:8.1f} s" for folder, seconds in sorted(_SECONDS_BY_FOLDER.items())]
    lines.append(f"{'(wall)':<12} {time.monotonic() - _STARTED:8.1f} s  (collection included)")
    terminalreporter.write_sep("-", "test time per folder (both lanes summed)")
    for line in lines:
        terminalreporter.write_line(line)
    # .ci/run prints these beside its own phases.
    target = os.environ.get("STACKCTL_TEST_TIMES_FILE")
    if target:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{folder} {round(seconds)}\n" for folder, seconds in
                                 sorted(_SECONDS_BY_FOLDER.items())))
