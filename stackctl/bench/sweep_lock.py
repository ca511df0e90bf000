"""One `bench --sweep` per stack at a time. A sweep's arms are second servers with fixed names (sweep-ARM of the
stack), whose caches it empties and which it brings up and takes down: a second sweep of the same stack would
replace and reset the first one's arms under it. The lock is the stack's own kind (state/lock.py: an flock the
kernel releases when its holder dies), in a file of its own, so `up`, `down` and doctor are not held up by a
sweep."""

from __future__ import annotations

from collections.abc import Callable

from stackctl.state import store
from stackctl.state.lock import StackLock

LOCK_FILE = "sweep.lock"


def sweep_lock(stack: str, say: Callable[[str], None] | None = None) -> StackLock:
    """The lock a sweep of `stack` holds while its arms run; entering it refuses, in one line, while another sweep
    of the same stack holds it."""
    directory = store.stack_dir(stack)
    store.ensure_writable(directory)
    return StackLock(directory, stack, "bench --sweep", say=say, file=LOCK_FILE,
                     busy=lambda holder: f"another bench sweep of {stack} is running (pid "
                                         f"{holder.get('pid', 'unknown')}); wait or stop it")
