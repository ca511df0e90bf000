"""discover(): all host facts at once, as JSON, on fixture trees and on this machine."""

import json
from pathlib import Path

from helpers import FIXTURES

from stackctl.host import HostFacts, discover

SYSFS = FIXTURES / "sysfs"


def test_mi300x_host_facts():
    facts = discover(SYSFS / "mi300x-8gpu-2node")
    assert facts.hostname == "mi300x-node01" and facts.kernel == "6.8.0-60-generic"
    assert len(facts.gpus) == 8 and facts.gpu_discovery.source == "sysfs"
    assert facts.memory.total_bytes == 2 * 792_476_160 * 1024
    assert facts.devices.kfd and len(facts.devices.render_nodes) == 8
    assert facts.cpu.numa_balancing == 1


def test_facts_are_json_and_round_trip():
    for name in ("mi300x-8gpu-2node", "mi355x-8gpu-2node", "cpu-only-1node"):
        facts = discover(SYSFS / name)
        text = json.dumps(facts.to_dict(), sort_keys=True)
        again = HostFacts.from_dict(json.loads(text))
        assert again == facts, name
        assert json.dumps(again.to_dict(), sort_keys=True) == text


def test_no_gpu_host_facts_say_why():
    data = discover(SYSFS / "cpu-only-1node").to_dict()
    assert data["gpus"]["gpus"] == [] and data["gpus"]["source"] is None
    assert "amdgpu driver (KFD) is not loaded" in data["gpus"]["reason"]
    assert data["cpu"]["governors"] == {"none": "0-15"}
    assert data["devices"]["kfd"] is False


def test_discover_on_this_machine(capfd):
    """This VM has no GPU: every probe says why, and nothing leaks onto stdout (doctor prints JSON there)."""
    facts = discover(Path("/"))
    out, _ = capfd.readouterr()
    assert out == ""
    data = json.loads(json.dumps(facts.to_dict()))
    assert data["root"] == "/"
    assert [a["source"] for a in data["gpus"]["attempts"]][-1] == "sysfs"
    if not facts.gpus:
        assert all(a["found"] == 0 and a["reason"] for a in data["gpus"]["attempts"])
    assert facts.cpu.online_cpus and facts.cpu.numa_nodes
    assert facts.memory.total_bytes and facts.memory.total_bytes > 0
    assert facts.devices.uid is not None
