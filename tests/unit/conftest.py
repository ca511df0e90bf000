"""Unit tests judge pure logic on the recipes as written: a what-if cap of the shell that runs them
(STACKCTL_CPU_ISA_CAP, stackctl/recipe/isa_cap.py) is for the integration tests and the main job."""

import pytest


@pytest.fixture(autouse=True)
def _no_cpu_isa_cap(monkeypatch):
    monkeypatch.delenv("STACKCTL_CPU_ISA_CAP", raising=False)
