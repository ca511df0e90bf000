"""Lint for the fleet's non-Python parts: playbooks/ is ansible-lint clean (production profile), the playbooks parse
as Ansible reads them, and the sshd test-image script is shellcheck clean."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import REPO, tool


@pytest.mark.ansible
def test_playbooks_are_ansible_lint_clean():
    lint = tool("ansible-lint")
    env = {"PATH": f"{Path(lint).parent}:/usr/bin:/bin", "HOME": str(Path.home()), "NO_COLOR": "1"}
    result = subprocess.run([lint, "--offline", "--profile", "production", "playbooks/"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "0 failure(s), 0 warning(s)" in result.stdout + result.stderr


@pytest.mark.ansible
@pytest.mark.parametrize("playbook", ["rollout.yml", "doctor.yml"])
def test_playbooks_pass_ansible_syntax_check(playbook, tmp_path):
    ansible_playbook = tool("ansible-playbook")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[fleet]\nnode-a ansible_host=192.0.2.1\n")
    result = subprocess.run([ansible_playbook, "--syntax-check", "-i", str(inventory), f"playbooks/{playbook}"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sshd_image_script_is_shellcheck_clean():
    shellcheck = tool("shellcheck")
    result = subprocess.run([shellcheck, "--severity=style", "scripts/make-sshd-image.sh"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
