"""Root fixtures; shared helpers live in helpers.py (tests import them as `from helpers import ...`)."""

import os
import signal
import time
from collections import defaultdict

import pytest
from helpers import run_cli

# A suite started in the background of a non-interactive shell (`.ci/run &`, many CI runners) inherits SIGINT
# ignored, and so would every stackctl it starts: Python leaves an ignored SIGINT ignored, and the Ctrl-C cases would
# send a signal nobody hears. With Python's own handler here, the processes the tests start get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Wall time spent per test folder (unit, integration): setup, call and teardown of each test, fixtures included
# (the integration tests' image builds and stack start-ups land in their first test's setup).
_SECONDS_BY_FOLDER: dict = defaultdict(float)
_STARTED = time.monotonic()


@pytest.fixture
def cli():
    return run_cli


def pytest_collection_modifyitems(items):
    """The tests of the HIP images run last: CI builds those images on an engine of their own while the other tests
    run (.ci/run), and these wait for that build under its lock. The order is otherwise kept (the sort is stable)."""
    items.sort(key=lambda item: item.get_closest_marker("hip_images") is not None)


def pytest_runtest_logreport(report):
    parts = report.nodeid.split("/")
    folder = parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0].split("::")[0]
    _SECONDS_BY_FOLDER[folder] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _SECONDS_BY_FOLDER:
        return
    lines = [f"{folder:<12} {seconds:8.1f} s" for folder, seconds in sorted(_SECONDS_BY_FOLDER.items())]
    lines.append(f"{'(all)':<12} {time.monotonic() - _STARTED:8.1f} s  (collection included)")
    terminalreporter.write_sep("-", "wall time per test folder")
    for line in lines:
        terminalreporter.write_line(line)
    # .ci/run prints these beside its own phases.
    target = os.environ.get("STACKCTL_TEST_TIMES_FILE")
    if target:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{folder} {round(seconds)}\n" for folder, seconds in
                                 sorted(_SECONDS_BY_FOLDER.items())))
