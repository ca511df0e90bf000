"""Running a fleet playbook: finding ansible-runner and ansible-playbook, the runner's arguments for one run folder,
and the run itself with each host's task results printed as they arrive.

An edge: ansible_runner is imported only here, and only when a fleet command runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from stackctl.errors import ExitCode, StackctlError
from stackctl.fleet.ansible import runner_kwargs


def find_ansible():
    """ansible_runner, with ansible-playbook findable (the one installed beside this Python comes first)."""
    try:
        import ansible_runner
    except ImportError:
        raise StackctlError("ansible-runner is not installed (fix: pip install ansible-runner ansible-core)",
                            exit_code=ExitCode.COULD_NOT_RUN) from None
    bindir = os.path.dirname(sys.executable)
    if os.access(os.path.join(bindir, "ansible-playbook"), os.X_OK):
        path = os.environ.get("PATH", "")
        if bindir not in path.split(os.pathsep):
            os.environ["PATH"] = bindir + os.pathsep + path
    if shutil.which("ansible-playbook") is None:
        raise StackctlError("ansible-playbook not found (fix: pip install ansible-core)", exit_code=ExitCode.COULD_NOT_RUN)
    return ansible_runner


def playbook_args(run_dir: Path, playbook: str, inventory: str, extravars: dict, forks: int, verbose: int) -> dict:
    """ansible-runner's arguments for one run: its private data in the run folder's runner/ (made by the state
    module with the run folder), the shipped playbook, the inventory as an absolute path."""
    from stackctl.resources import shipped

    return runner_kwargs(private_data_dir=str(run_dir / "runner"), playbook=str(shipped("playbooks") / playbook),
                         inventory=str(Path(inventory).resolve()), extravars=extravars, forks=forks,
                         verbosity=verbose, quiet=not verbose)


def run_playbook(ansible_runner, kwargs: dict, tracker, say: Callable[[str], None]) -> None:
    """Run the playbook, printing each host's task results as they arrive."""

    def on_event(event: dict) -> bool:
        for line in tracker.handle(event):
            say(line)
        return True  # keep the event in the run's artifacts

    # With -v Ansible's own output is shown: on stderr, so stdout keeps only the summary (e.g. the JSON).
    with contextlib.redirect_stdout(sys.stderr):
        result = ansible_runner.run(**dict(kwargs, event_handler=on_event))
    reached = any(o.reached for o in tracker.results())
    if not reached and result.rc not in (0, 2, 4):
        tail = _stdout_tail(result)
        raise StackctlError(f"ansible-playbook failed (exit {result.rc}, {result.status}): {tail}", exit_code=ExitCode.COULD_NOT_RUN)


def _stdout_tail(result) -> str:
    from ansible_runner.exceptions import AnsibleRunnerException

    try:
        text = result.stdout.read()
    except (AnsibleRunnerException, OSError):  # no stdout artifact when ansible-playbook never started
        return "no output"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[-4:])[-600:] or "no output"
