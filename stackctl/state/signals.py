"""Ctrl-C at a safe moment only: steps that must finish together (stop + rename, remove + record) run shielded."""

from __future__ import annotations

import contextlib
import signal


@contextlib.contextmanager
def shielded():
    """Hold SIGINT back while the block runs; a Ctrl-C pressed meanwhile arrives right after it."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
