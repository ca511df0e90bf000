"""Helpers of the fault-injection suite: the faults table, orphan watching, background stackctl commands."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from helpers import REPO


class FaultReport:
    """Rows of the faults table, written at the end of the session."""

    def __init__(self):
        self.rows: list[dict] = []
        self.notes: dict[str, str] = {}

    def add(self, fault: str, expected: str, observed: str, orphans: list, lost: list) -> None:
        self.rows.append({"fault": fault, "expected": expected, "observed": observed, "orphans": len(orphans),
                          "orphan_names": list(orphans), "records_lost": len(lost), "lost": list(lost)})



class Watch:
    """Containers that appear while a case runs: any that is not expected to stay is an orphan."""

    def __init__(self, engine):
        self.engine = engine
        self.before = {c.id for c in self._all()}

    def _all(self) -> list:
        # A container removed between the list and its inspect (a parser container run with --rm) is not an error.
        return self.engine.containers.list(all=True, ignore_removed=True)

    def _new(self) -> list:
        return [c for c in self._all() if c.id not in self.before]

    def new_containers(self, timeout: float = 60) -> list[str]:
        """Names of containers created since the watch began, waiting up to `timeout` s for the first to appear."""
        deadline = time.monotonic() + timeout
        while True:
            names = [c.name for c in self._new()]
            if names or time.monotonic() > deadline:
                return names
            time.sleep(0.2)

    def orphans(self, *allowed: str) -> list[str]:
        """New containers not in `allowed`, and any container set aside by an up that did not finish."""
        return sorted({c.name for c in self._new() if c.name not in allowed}
                      | {c.name for c in self._all()
                         if c.name.startswith("stackctl-") and c.name.endswith("-previous")})



class Background:
    """A stackctl command running in the background; its output (stdout and stderr together) is read as it
    comes, so a test can inject a fault at a known moment."""

    def __init__(self, args: list[str], env: dict):
        self.proc = subprocess.Popen([sys.executable, "-m", "stackctl", *args], cwd=REPO, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output:
                return
            if self.proc.poll() is not None:
                self._reader.join(5)
                if text in self.output:
                    return
                raise AssertionError(f"exited ({self.proc.returncode}) before printing {text!r}:\n{self.output}")
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not printed within {timeout} s:\n{self.output[-3000:]}")

    def finish(self, timeout: float = 900) -> tuple[int, str]:
        rc = self.proc.wait(timeout)
        self._reader.join(10)
        return rc, self.output

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)



def history(env: dict, stack: str) -> list[dict]:
    path = Path(env["STACKCTL_STATE_DIR"]) / stack / "history.json"
    return json.loads(path.read_text()) if path.is_file() else []



def half_written(env: dict) -> list[str]:
    """Temporary files left in the state dir: a write that did not finish."""
    return [str(p) for p in Path(env["STACKCTL_STATE_DIR"]).rglob("*.tmp")]



def remove_stack(env: dict, recipe: Path) -> None:
    subprocess.run([sys.executable, "-m", "stackctl", "down", str(recipe), "--image"], cwd=REPO, env=env,
                   capture_output=True, timeout=300)



def read_only_dir(path: Path) -> None:
    """A directory on a read-only filesystem (root: a read-only tmpfs); undone by undo_read_only."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)], check=True,
                   capture_output=True)



def undo_read_only(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True)
