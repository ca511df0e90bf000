"""One `bench --sweep` per stack: a second process sweeping the same stack is refused in one line naming the
holder's pid, a sweep of another stack and the stack's own `up`/`down` lock are not held up, and the lock is free
again once its holder ends (however it ends: the kernel drops an flock with its process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stackctl.bench.sweep_lock import sweep_lock
from stackctl.errors import StackctlError
from stackctl.state.lock import StackLock
from stackctl.state import store
from stackctl.bundle.stackspec import StackSpec

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from stackctl.bench.sweep_lock import sweep_lock
with sweep_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("STACKCTL_STATE_DIR", str(tmp_path))
    return tmp_path


def holder(stack: str, state: Path) -> subprocess.Popen:
    """Another process holding the sweep lock of `stack` until its stdin is closed."""
    env = {**os.environ, "STACKCTL_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-c", HOLDER, stack], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               env=env, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_a_second_sweep_of_the_same_stack_is_refused_naming_the_first(state):
    first = holder("cpu-lmcache", state)
    try:
        with pytest.raises(StackctlError) as refused:
            with sweep_lock("cpu-lmcache"):
                pass
        assert str(refused.value) == f"another bench sweep of cpu-lmcache is running (pid {first.pid}); wait or stop it"
        with sweep_lock("cpu-smoke"):  # another stack's sweep runs
            pass
        with StackLock(store.stack_dir("cpu-lmcache"), "cpu-lmcache", "up"):  # the stack's own lock is not the sweep's
            pass
    finally:
        first.communicate("")
    assert first.returncode == 0
    with sweep_lock("cpu-lmcache"):  # released with its holder
        pass


def test_a_killed_sweep_leaves_no_lock_behind_and_the_next_one_says_so(state):
    first = holder("cpu-lmcache", state)
    first.kill()
    first.wait()
    said: list[str] = []
    with sweep_lock("cpu-lmcache", said.append):
        pass
    assert len(said) == 1
    assert said[0].startswith(f"cpu-lmcache: took over a stale lock (pid {first.pid} running `stackctl bench --sweep` ")
    assert said[0].endswith("that process is gone)")


def test_up_and_down_keep_their_own_message(state):
    with StackLock(store.stack_dir("s"), "s", "up"):
        with pytest.raises(StackctlError, match=r"^s: another stackctl is changing this stack: pid \d+ running "
                                                r"`stackctl up`"):
            with StackLock(store.stack_dir("s"), "s", "down"):
                pass


def test_a_sweep_of_a_stack_another_sweep_holds_stops_before_it_touches_any_arm(state, monkeypatch):
    """run_sweep takes the lock before it looks for the stack's image or starts an arm: the refusal comes first."""
    from helpers import RECIPES

    from stackctl.bench import sweep
    from stackctl.recipe.loader import load_recipe

    recipe = load_recipe(RECIPES / "cpu-lmcache.toml")
    touched: list[str] = []
    monkeypatch.setattr(sweep, "stack_image", lambda recipe, say: touched.append("image") or ("img", {}))
    spec = sweep.SweepSpec(users=[1, 2], contexts=[1024], turns=2, output_tokens=8, think_s=0.0, kv_tokens=None,
                           max_seconds=10.0)
    first = holder(recipe.stack.name, state)
    try:
        with pytest.raises(StackctlError, match=rf"^another bench sweep of {recipe.stack.name} is running \(pid "
                                                rf"{first.pid}\); wait or stop it$"):
            sweep.run_sweep(StackSpec(recipe), ["hbm", "lmcache"], spec, say=lambda message: None)
    finally:
        first.communicate("")
    assert touched == []
