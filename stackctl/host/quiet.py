"""Silence what GPU libraries print while they are probed.

The amdsmi wheel prints "Unable to find libamd_smi.so ..." to stdout on import when ROCm is absent, and the C
libraries write to the stdout/stderr file descriptors directly; either would corrupt `doctor --format json`.
Both the Python streams and file descriptors 1 and 2 are pointed at /dev/null for the duration.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """Discard everything written to stdout and stderr, by Python or by C code, inside the block."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = []
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        devnull = None
    try:
        if devnull is not None:
            for fd in (1, 2):
                with contextlib.suppress(OSError):
                    saved.append((fd, os.dup(fd)))
                    os.dup2(devnull, fd)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for fd, copy in saved:
            with contextlib.suppress(OSError):
                os.dup2(copy, fd)
                os.close(copy)
        if devnull is not None:
            os.close(devnull)
