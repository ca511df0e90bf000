"""Serving engines are records (stackctl/knowledge/serving_engines.py): the bundle, the rules, doctor and the
importer read an engine's facts from its record, so an engine added as a record (and its compat.toml keys on each
platform) is treated by what it says, not by its name."""

from __future__ import annotations

import pytest
from helpers import FIXTURES

from stackctl import importer
from stackctl.bundle import stackspec
from stackctl.doctor.all_checks import load_all
from stackctl.doctor.registry import CHECKS
from stackctl.knowledge import compat, serving_engines
from stackctl.knowledge.kinds import platform_named
from stackctl.knowledge.serving_engines import ServingEngine
from stackctl.recipe.loader import load_recipe_text
from stackctl.rules.ruleset import run_rules
from stackctl.bundle.stackspec import StackSpec

load_all()


class LogContext:
    """Doctor's context with a captured server log and image probe."""

    def __init__(self, recipe, log: str, probe: dict) -> None:
        self.recipe, self._log, self._probe = recipe, log, probe
        self.spec = StackSpec(self.recipe)
        self._cache: dict = {}

    def server_log(self) -> str:
        return self._log

    def probe(self) -> dict:
        return self._probe


def test_a_cpu_launch_with_a_run_time_image_names_the_cpu_default():
    text = importer.import_launch_text('docker run -e VLLM_CPU_KVCACHE_SPACE=8 "$IMAGE" --model m\n', None, "t")
    recipe = load_recipe_text(text)
    default = compat.table()["defaults"][platform_named("cpu").base_image_keys[recipe.stack.engine]]
    assert recipe.stack.platform == "cpu" and recipe.stack.base_image is None
    assert f"stackctl's default ({default})" in text.replace("\n#   ", " ")


def test_plain_vllm_switches_atom_off_only_where_there_are_gpus():
    text = (FIXTURES / "rules" / "atom-cuda-graphs" / "fail.toml").read_text().replace('engine = "atom-vllm"',
                                                                                        'engine = "vllm"')
    rocm = load_recipe_text(text)
    cpu = load_recipe_text(text.replace('platform = "rocm"', 'platform = "cpu"'))
    assert stackspec.environment(rocm)["ATOM_DISABLE_VLLM_PLUGIN"] == "1"
    assert cpu.stack.platform == "cpu" and "ATOM_DISABLE_VLLM_PLUGIN" not in stackspec.environment(cpu)


@pytest.fixture
def atom_next(monkeypatch):
    """A third engine, `atom-next`, registered as a record alone, with ATOM's compat keys on every platform."""
    record = ServingEngine(name="atom-next", summary="a later ATOM", atom_plugin=True, needs_cuda_graphs=True,
                           image_prefix="rocm/atom")
    monkeypatch.setitem(serving_engines.SERVING_ENGINES_BY_NAME, "atom-next", record)
    for name in ("rocm", "cpu"):
        platform = platform_named(name)
        monkeypatch.setitem(platform.base_image_keys, "atom-next", platform.base_image_keys["atom-vllm"])
        monkeypatch.setitem(platform.vllm_keys, "atom-next", platform.vllm_keys["atom-vllm"])
    return record


def _as_engine(fixture: str, engine: str):
    recipe = load_recipe_text((FIXTURES / "rules" / fixture / "fail.toml").read_text())
    recipe.stack.engine = engine  # past the schema's allowed values, which were read when the model was imported
    return recipe


def test_an_engine_added_as_a_record_is_judged_by_its_facts(atom_next):
    eager = _as_engine("atom-cuda-graphs", "atom-next")
    assert "atom-cuda-graphs" in {f.rule_id for f in run_rules(eager)}
    disabled = _as_engine("atom-plugin-disabled", "atom-next")
    assert "atom-plugin-disabled" in {f.rule_id for f in run_rules(disabled)}
    assert "ATOM_DISABLE_VLLM_PLUGIN" not in stackspec.environment(disabled)
    context = LogContext(eager, "INFO Platform plugin atom is activated\n",
                         {"entry_points": {"vllm.platform_plugins": [{"name": "atom", "value": "atom:register"}]}})
    assert CHECKS["server.atom-activated"].run(context).status == "pass"
    assert CHECKS["image.atom-plugin"].run(context).status == "pass"


def test_the_same_recipe_as_plain_vllm_is_not_judged_as_atom():
    eager = _as_engine("atom-cuda-graphs", "vllm")
    assert "atom-cuda-graphs" not in {f.rule_id for f in run_rules(eager)}
    context = LogContext(eager, "INFO Platform plugin atom is activated\n", {})
    for check_id in ("server.atom-activated", "image.atom-plugin"):
        result = CHECKS[check_id].run(context)
        assert (result.status, result.message) == ("skip", "engine is not atom-vllm"), check_id
