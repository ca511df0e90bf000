"""Waiting for a quiet server (stackctl/engine/quiet.py): the CPU seconds of a container's process tree from a
/proc laid out as the kernel's, and the wait's decision on a scripted series of readings."""

import os

import pytest
from fake_engine import FakeEngine

from stackctl.engine.records import ContainerState
from stackctl.engine.quiet import (IDLE_CORES, QUIET_WINDOWS, WINDOW_S, container_cpu_seconds,
                                   process_tree_cpu_seconds, wait_until_quiet)

TICK = os.sysconf("SC_CLK_TCK")


def fake_proc(tmp_path, processes):
    """processes: pid -> (ppid, utime ticks, stime ticks, comm)."""
    for pid, (ppid, utime, stime, comm) in processes.items():
        (tmp_path / str(pid)).mkdir()
        rest = ["S", str(ppid)] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 10
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
    (tmp_path / "self").mkdir()  # not a process number: skipped
    return tmp_path


def test_the_tree_below_the_init_process_is_summed_and_nothing_else(tmp_path):
    proc = fake_proc(tmp_path, {
        100: (1, 10, 5, "python3"),            # the container's init
        101: (100, 200, 40, "VLLM::EngineCore"),  # its child (the engine, LMCache's threads)
        102: (101, 3, 2, "weird ) name (x"),     # a grandchild whose name holds parentheses
        200: (1, 9999, 9999, "other"),           # not the container's
    })
    assert process_tree_cpu_seconds(100, proc) == (10 + 5 + 200 + 40 + 3 + 2) / TICK
    assert process_tree_cpu_seconds(999, proc) is None


@pytest.fixture
def engine(monkeypatch):
    return FakeEngine().install(monkeypatch)


def container_with_pid(engine, ident: str, pid: int):
    """A container of the fake engine whose id is `ident` and whose init process is host pid `pid` (0: not running)."""
    record = engine.add_container(f"c-{ident}", state=ContainerState(status="running" if pid else "exited", pid=pid))
    record.id = ident
    return engine.find_container(engine.client(), record.name)


def test_a_container_this_machine_does_not_hold_gives_no_reader(tmp_path, engine):
    proc = fake_proc(tmp_path, {100: (1, 1, 1, "init")})
    (proc / "100" / "cgroup").write_text("0::/docker/abc123\n")
    assert container_cpu_seconds(container_with_pid(engine, "abc123", 100), proc)() == 2 / TICK
    assert container_cpu_seconds(container_with_pid(engine, "def456", 100), proc) is None
    assert container_cpu_seconds(container_with_pid(engine, "x", 0), proc) is None


def scripted(readings):
    """A clock advanced by sleep, and a reader returning the readings in turn (the last one repeated)."""
    now = [0.0]
    values = list(readings)

    def read():
        return values.pop(0) if len(values) > 1 else values[0]

    return read, (lambda: now[0]), (lambda seconds: now.__setitem__(0, now[0] + seconds))


def test_it_waits_through_the_writes_and_stops_once_quiet_windows_in_a_row():
    busy = 0.8 * WINDOW_S  # 0.8 cores: LMCache writing to its tiers
    readings = [0.0, busy, 2 * busy, 3 * busy, 3 * busy, 3 * busy + 0.01 * WINDOW_S]
    read, clock, sleep = scripted(readings)
    waited = wait_until_quiet(read, clock=clock, sleep=sleep)
    assert waited == (3 + QUIET_WINDOWS) * WINDOW_S


def test_one_busy_window_between_quiet_ones_starts_the_count_again():
    spike = 2 * IDLE_CORES * WINDOW_S
    read, clock, sleep = scripted([0.0, 0.0, spike, spike, spike])
    assert wait_until_quiet(read, clock=clock, sleep=sleep) == (2 + QUIET_WINDOWS) * WINDOW_S


def test_a_server_busy_to_the_end_or_unreadable_gives_none():
    counter = [0.0]

    def always_busy():
        counter[0] += WINDOW_S  # one core, always
        return counter[0]

    _, clock, sleep = scripted([0.0])
    assert wait_until_quiet(always_busy, timeout_s=2.0, clock=clock, sleep=sleep) is None
    read, clock, sleep = scripted([0.0, None])
    assert wait_until_quiet(read, clock=clock, sleep=sleep) is None


def test_a_container_this_machine_does_not_hold_is_not_waited_for(engine):
    from stackctl.engine.quiet import wait_for_container

    assert wait_for_container(container_with_pid(engine, "elsewhere", 0)) is None
