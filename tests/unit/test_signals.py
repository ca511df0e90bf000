"""Ctrl-C during a shielded step (remove + record, stop + rename) is held back and arrives right after the step. Run
in a fresh single-threaded interpreter, as the CLI is, that sends itself SIGINT: the mask is per thread, and a signal
sent to the process goes to any thread that does not block it (pytest's process may have others)."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO

SCRIPT = """
import os, signal
from stackctl.state.signals import shielded
try:
    with shielded():
        os.kill(os.getpid(), signal.SIGINT)
        print("removed", flush=True)
        print("recorded", flush=True)
    print("not reached", flush=True)
except KeyboardInterrupt:
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    print("interrupted after the step; still blocked:", blocked, flush=True)
with shielded():
    pass
print("a step without Ctrl-C finishes", flush=True)
"""


def test_ctrl_c_waits_for_the_shielded_step_to_finish():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60,
                            check=True)
    assert result.stdout.splitlines() == ["removed", "recorded", "interrupted after the step; still blocked: False",
                                          "a step without Ctrl-C finishes"]
