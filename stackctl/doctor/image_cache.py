"""What a container run of a stack's image reported, kept in the stack's state directory for the next doctor.

An image never changes under its id: the same image asked the same question (the inputs the run was given, named
in the key) gives the same answer, so a run that takes seconds is done once per image and inputs. `doctor --fresh`
asks again (and replaces the kept answer).
"""

from __future__ import annotations

import hashlib
import json

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Callable
    from pathlib import Path


def cache_key(parts) -> str:
    """A short name for the inputs a result depends on (anything JSON can write; table order does not count)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cache_file(stack: str, folder: str, parts) -> Path:
    """Where the result for these inputs is kept: STATE/STACK/FOLDER/KEY.json."""
    from stackctl.state.store import stack_dir

    return stack_dir(stack) / folder / f"{cache_key(parts)}.json"


def cached(path: Path, compute: Callable[[], dict], use_cache: bool = True) -> dict:
    """The result kept in `path`, else (or with use_cache False) compute() written there whole. A file that does
    not read as JSON is computed again: a stale answer is never guessed at."""
    if use_cache and path.is_file():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
    result = compute()
    from stackctl.state.store import write_atomically  # the state dir's one writer

    write_atomically(path, json.dumps(result))
    return result
