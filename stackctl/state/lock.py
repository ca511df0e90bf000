"""One command at a time changes a stack: an exclusive lock per stack for `build`, `up`, `down` and `rollback`.

The lock is an flock on STATE/NAME/lock, so the kernel releases it when its holder dies, however it dies; the file
also says who holds it (pid, command, since) for the message the second command prints. A lock file naming a
process that no longer runs is a stale lock: it is taken over, and the takeover is said.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from stackctl.errors import StackctlError


class StackLock:
    """The lock of one stack's changes (file `lock`), or of another job on the stack that must run alone (its own
    file, e.g. bench's sweep): `busy` turns the holder's record into the one-line refusal."""

    def __init__(self, directory: Path, stack: str, command: str, wait_s: float = 0.0, say=None,
                 file: str = "lock", busy: Callable[[dict], str] | None = None):
        self.path = Path(directory) / file
        self.stack, self.command, self.wait_s = stack, command, wait_s
        self.say = say or (lambda message: None)
        self.busy = busy or (lambda holder: f"{stack}: another stackctl is changing this stack: {describe(holder)} "
                                            "(fix: wait for it to finish, or stop that process)")
        self._fd: int | None = None

    def __enter__(self) -> StackLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _read_holder(fd)
                    os.close(fd)
                    raise StackctlError(self.busy(holder)) from None
                time.sleep(0.5)
        previous = _read_holder(fd)
        if previous.get("pid") and not process_alive(int(previous["pid"])):
            self.say(f"{self.stack}: took over a stale lock ({describe(previous)}; that process is gone)")
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": self.command,
                                  "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # an empty lock file: nobody holds it
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def describe(holder: dict) -> str:
    if not holder:
        return "holder unknown"
    return f"pid {holder.get('pid', '?')} running `stackctl {holder.get('command', '?')}` since {holder.get('since', '?')}"


def _read_holder(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        value = json.loads(data.decode()) if data.strip() else {}
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def process_alive(pid: int) -> bool:
    """Whether a process of this id runs on this host (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
