"""Running a playbook through the real ansible-runner and ansible-playbook, on this machine (local connection):
progress lines as hosts report, and one clear error when the playbook fails before any host is reached."""

from __future__ import annotations

import pytest

from stackctl.errors import ExitCode, StackctlError
from stackctl.fleet.execute import find_ansible, run_playbook
from stackctl.fleet.progress import FleetTracker

pytest.importorskip("ansible_runner")

INVENTORY = "here ansible_connection=local ansible_python_interpreter=auto_silent\n"


def _run(tmp_path, play: str, said: list[str]) -> FleetTracker:
    (tmp_path / "play.yml").write_text(play)
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    (tmp_path / "runner").mkdir()
    tracker = FleetTracker(["here"], None, "a local play")
    kwargs = {"private_data_dir": str(tmp_path / "runner"), "playbook": str(tmp_path / "play.yml"),
              "inventory": str(tmp_path / "hosts.ini"), "quiet": True}
    run_playbook(find_ansible(), kwargs, tracker, said.append)
    return tracker


def test_a_playbook_that_fails_before_any_host_is_one_error_with_ansibles_own_words(tmp_path):
    said: list[str] = []
    with pytest.raises(StackctlError) as caught:
        _run(tmp_path, "- name: a local play\n  hosts: all\n  gather_facts: false\n  roles: [no_such_role_here]\n",
             said)
    assert caught.value.exit_code == ExitCode.COULD_NOT_RUN
    assert str(caught.value).startswith("ansible-playbook failed (exit 1, failed): ")
    assert "no_such_role_here" in str(caught.value) and said == []


def test_a_playbook_that_reaches_its_host_reports_it(tmp_path):
    said: list[str] = []
    tracker = _run(tmp_path, "- name: a local play\n  hosts: all\n  gather_facts: false\n  tasks:\n"
                             "    - name: say hello\n      ansible.builtin.debug: {msg: hello}\n", said)
    (outcome,) = tracker.results()
    assert outcome.reached and not outcome.unreachable
    assert any("here" in line and "say hello" in line for line in said), said
