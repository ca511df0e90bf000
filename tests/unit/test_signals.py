"""Ctrl-C during a shielded step (remove + record, stop + rename) is held back and arrives right after the step, in a
real process that sends itself SIGINT."""

from __future__ import annotations

import os
import signal

import pytest

from stackctl.signals import shielded


def test_ctrl_c_waits_for_the_shielded_step_to_finish():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with shielded():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("removed")  # still runs: the signal is held back
            done.append("recorded")
    assert done == ["removed", "recorded"]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # the mask is restored


def test_no_signal_no_interruption():
    with shielded():
        pass
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
