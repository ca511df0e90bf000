"""What stackctl reads of a container, as its own frozen record: callers outside engine/ never read a docker-py
object's fields (`attrs["State"]["Pid"]`), and the unit tests' fake engine hands out the same record."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContainerState:
    """The engine's record of a container's process: running or how it ended."""

    status: str = ""  # created | running | exited | dead | ...
    pid: int = 0  # the container's init process on the host; 0 when it is not running
    exit_code: int | None = None
    oom_killed: bool = False
    error: str = ""
    started_at: str = ""  # RFC 3339, as the engine writes it
    finished_at: str = ""

    @property
    def started_epoch(self) -> float | None:
        """started_at in seconds since the epoch; None when the engine gave none or its zero time."""
        if self.started_at.startswith("0001-"):
            return None
        return engine_time(self.started_at)

    @classmethod
    def from_engine(cls, state: dict | None) -> ContainerState:
        """From the `State` object of the engine's container inspect."""
        state = state or {}
        return cls(str(state.get("Status") or ""), int(state.get("Pid") or 0), state.get("ExitCode"),
                   bool(state.get("OOMKilled")), str(state.get("Error") or ""), str(state.get("StartedAt") or ""),
                   str(state.get("FinishedAt") or ""))


def engine_time(text: str) -> float | None:
    """A time as the engine writes it (RFC 3339, UTC, nanoseconds) in seconds since the epoch; None if unreadable."""
    from datetime import datetime

    try:  # Python reads at most microseconds
        return datetime.fromisoformat(text[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return None
