"""The corpus of real-world launches (tests/fixtures/corpus: shell scripts, docker/podman runs, compose files,
Kubernetes manifests, NVIDIA and ATOM launches, LMCache configs, each copied from a public source): every case goes
through init -> validate -> render. Each must produce the findings a reader of the input expects (each cited to the
package source that proves it) and none it must not, lose no setting without a note, render no value only the old
launch's run time knew, contradict none of stackctl's own rules, and leak no secret. benchmarks/detection.py prints
the same figures over the corpus (or over another directory)."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
import tomllib
from helpers import FIXTURES, REPO

from stackctl.rules.ruleset import RULES

_spec = importlib.util.spec_from_file_location("detection", REPO / "benchmarks" / "detection.py")
detection = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("detection", detection)  # dataclasses look their module up by name
_spec.loader.exec_module(detection)

CASES = sorted(p for p in (FIXTURES / "corpus").iterdir() if (p / "expected.toml").is_file())
# Real launches stackctl still gets wrong, each saying how in its expected.toml `gap`: out of the figures until fixed.
OPEN = sorted(p for p in (FIXTURES / "corpus-open").iterdir() if (p / "expected.toml").is_file())
# A citation names the package, its release and file:line, or the input's own file:line.
CITATION = re.compile(r"\b(vllm|lmcache) \d+\.\d+\.\d+ [\w/.-]+\.(py|rst):\d+|\binput [\w.-]+:\d+")
# Cases the figures below leave out, each for a reason the rules own (see expected.toml's comment).
KNOWN_MISSES: set[str] = set()
KNOWN_EXTRAS = {"rocm-k8s-device-plugin-vllm", "vllm-docs-k8s-amd"}  # vLLM 0.6.4 judged with 0.10.2's facts


def test_the_corpus_holds_sixty_real_launches_of_every_shape_each_with_its_source():
    assert len(CASES) >= 60
    shapes = {"docker run": 0, "podman run": 0, "compose": 0, "kubernetes": 0, "atom": 0, "nvidia": 0, "yaml only": 0}
    for case in CASES:
        inputs = detection.inputs(case)
        assert inputs, case.name
        for path in inputs:
            assert path.read_text().startswith("# Source: "), path
        text = "".join(p.read_text() for p in inputs)
        spec = tomllib.loads((case / "expected.toml").read_text())
        launch = detection.launch_file(case, spec)
        shapes["docker run"] += "docker run" in text
        shapes["podman run"] += "podman run" in text
        shapes["compose"] += "services:" in text
        shapes["kubernetes"] += "apiVersion:" in text
        shapes["atom"] += "atom" in text.lower()
        shapes["nvidia"] += bool(re.search(r"--gpus|nvidia\.com/gpu|--runtime nvidia", text))
        shapes["yaml only"] += launch is None
    assert all(count > 0 for count in shapes.values()), shapes


@pytest.mark.parametrize("case", CASES + OPEN, ids=lambda p: p.name)
def test_every_expected_finding_cites_the_source_that_proves_it(case):
    spec = tomllib.loads((case / "expected.toml").read_text())
    assert set(spec.get("expected", [])) | set(spec.get("absent", [])) <= set(RULES), "names an unknown rule"
    cites = spec.get("cite", {})
    for rule_id in spec.get("expected", []):
        assert CITATION.search(cites.get(rule_id, "")), f"{rule_id}: no package or input file:line cited"


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_case_goes_through_init_validate_render_as_a_reader_expects(case):
    result = detection.run_case(case)
    assert result.error is None, result.error
    assert not result.contradictions, result.contradictions
    assert not result.forbidden, f"reported but must not be: {sorted(result.forbidden)}"
    assert result.dropped == [], f"settings named nowhere in the recipe or the bundle: {result.dropped}"
    assert result.literal == [], f"run-time values rendered as text: {result.literal}"
    assert result.leaks == []
    assert result.mismatches == [], result.mismatches
    if case.name not in KNOWN_MISSES:
        assert not result.missed, f"not reported: {sorted(result.missed)}"
    if case.name not in KNOWN_EXTRAS:
        assert not result.unexpected, f"reported, not expected: {sorted(result.unexpected)}"


@pytest.mark.parametrize("case", OPEN, ids=lambda p: p.name)
def test_an_open_case_still_fails_the_way_its_gap_says(case):
    """An open case is a real launch stackctl gets wrong today, kept with its source and expectations; once stackctl
    gets it right it belongs in the corpus (and its figures)."""
    spec = tomllib.loads((case / "expected.toml").read_text())
    assert spec.get("gap"), "an open case says what stackctl gets wrong"
    assert all(path.read_text().startswith("# Source: ") for path in detection.inputs(case))
    result = detection.run_case(case)
    flaws = (result.error or result.missed or result.unexpected or result.forbidden or result.mismatches
             or result.dropped or result.contradictions)
    assert flaws, f"{case.name} passes now: move it to tests/fixtures/corpus/"


def test_a_refusal_expected_and_not_given_is_a_mismatch(tmp_path):
    case = tmp_path / "c"
    case.mkdir()
    (case / "launch.sh").write_text("# Source: test\nvllm serve /m\n")
    (case / "expected.toml").write_text('source = "test"\nrefused = "starts SGLang"\n')
    result = detection.run_case(case)
    assert result.error is None and result.refused is None
    assert result.mismatches == ["imported; a refusal saying 'starts SGLang' was expected"]
    (case / "launch.sh").write_text("# Source: test\npython3 -m sglang.launch_server --model-path m\n")
    result = detection.run_case(case)
    assert "starts SGLang" in result.refused and result.mismatches == [] and result.error is None


def test_known_misses_and_extras_are_still_what_they_were():
    """The cases kept out of the per-case equality fail the way their expected.toml explains (when a rule changes
    and fixes them, move them back)."""
    results = {r.name: r for r in map(detection.run_case, (FIXTURES / "corpus" / n for n in KNOWN_MISSES |
                                                             KNOWN_EXTRAS))}
    for name in KNOWN_MISSES:
        assert results[name].missed, name
    for name in KNOWN_EXTRAS:
        assert results[name].unexpected, name


def test_correct_published_launches_validate_without_errors():
    correct = [case for case in CASES
               if all(RULES[rule_id].severity != "error" for rule_id in detection.run_case(case).expected)]
    assert len(correct) >= 5
    for case in correct:
        result = detection.run_case(case)
        errors = {rule_id for rule_id in result.reported if RULES[rule_id].severity == "error"}
        assert errors <= result.unexpected if case.name in KNOWN_EXTRAS else not errors, case.name


def test_benchmark_scores_meet_the_targets():
    results = detection.run_corpus()
    recall, precision, leaks = detection.scores(results)
    assert recall >= 0.9 and precision >= 0.95 and leaks == 0
    assert not any(detection.totals(results).values()), detection.totals(results)


def test_secret_detection_in_inputs_finds_key_named_and_shaped_values():
    text = 'aws_secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"\nexport HF_TOKEN=hf_abcdefghijklmnopqrstuvwx\n'
    assert detection.secrets_in(text) >= {"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "hf_abcdefghijklmnopqrstuvwx"}
    assert detection.secrets_in("HF_TOKEN=${HF_TOKEN}\n") == set()  # a reference, not a value


def test_settings_are_read_from_the_input_without_the_importer(tmp_path):
    (tmp_path / "launch.sh").write_text("# Source: test\nexport PYTHONHASHSEED=0\nMODEL=m\nVLLM_X=1 vllm serve $MODEL "
                                        "--max-model-len 4 \\\n  --enforce-eager\ncurl --silent http://x\n")
    (tmp_path / "lmcache.yaml").write_text("# Source: test\nchunk_size: 256\nlocal_cpu: true\n")
    settings = detection.input_settings(tmp_path, {}, tmp_path / "launch.sh")
    assert settings == ["PYTHONHASHSEED", "VLLM_X", "--max-model-len", "--enforce-eager", "chunk_size", "local_cpu"]
    assert detection.is_named("--tensor-parallel-size", "tensor-parallel = 1")  # the recipe key holds the flag
    assert detection.is_named("LMCACHE_CHUNK_SIZE", "chunk-size: 256")
    assert not detection.is_named("--swap-space", "nothing here")


def test_the_benchmark_scores_another_directory(tmp_path):
    case = tmp_path / "c"
    case.mkdir()
    (case / "launch.sh").write_text("# Source: test\nvllm serve /m --kv-transfer-config "
                                    "'{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'\n")
    (case / "expected.toml").write_text('source = "test"\nexpected = ["lmcache-hash-seed"]\n'
                                        '[recipe]\n"cache.enabled" = true\n')
    results = detection.run_corpus(tmp_path)
    assert [r.name for r in results] == ["c"] and "lmcache-hash-seed" in results[0].reported
    assert results[0].mismatches == [] and detection.scores(results)[0] == 1.0


def test_a_kubernetes_script_that_edits_vllm_before_serving_is_read_and_its_edit_named():
    """llm-d's AMD patch: no image (the kustomize base sets it), `command: [/bin/bash, -c]`, a script that runs
    `sed -i` over vLLM's files and then `exec vllm serve`."""
    from stackctl.importer import import_launch

    text = import_launch(FIXTURES / "corpus" / "llm-d-amd-native-cpu-sed" / "manifest.yaml", None, name="t")
    folded = text.replace("\n#   ", " ")
    assert "names no image (a kustomize patch" in folded
    assert "the launch changes the image before serving: edits" in folded and "swap_blocks_triton.py" in folded
