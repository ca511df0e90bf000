"""Detection quality on real-world inputs: every case of tests/fixtures/corpus/ (or another directory given as
argument) goes through `init --from-command` -> `validate` -> `render`, and the result is compared with what a
reader of the input expects.

A case is a folder holding the input as found (a shell script, a compose file, a Kubernetes manifest and/or an
LMCache YAML; each starts with a `# Source:` comment) and an expected.toml:
  source    where the input comes from
  expected  rule ids the input must produce; [cite] gives, per id, the package source (release, file:line) proving it
  absent    rule ids it must not produce
  launch    the launch file (default: launch.sh, else a compose file or manifest, else the LMCache YAML alone, imported
            with HARNESS_LAUNCH, a minimal launch of our own that names it and fixes the hash seed)
  lmcache_config  a YAML the source pairs with the launch without naming it
  settings  the settings a reader expects carried over (default: read from the input, see `input_settings`)
  gap       (tests/fixtures/corpus-open only) what stackctl gets wrong on this input today: such a case is kept out of
            the corpus and its figures until it passes (tests/unit/test_corpus.py checks it still fails)
  refused   the import must refuse the input, with an error holding this text (a launch of another engine)
  [recipe]  recipe values the import must write (dotted keys: `"stack.engine" = "atom-vllm"`); `unset` lists keys
            it must leave out (a CUDA base image, a value only the old launch's run time knew)

Prints, over all cases:
  recall, precision   expected findings reported / expected; reported findings that are expected / reported
  dropped settings    settings of the input named nowhere in the recipe (values or comments) nor the bundle
  run-time literal    values only the old launch's run time knew ($VAR, $(...), <placeholder>) that reach the
                      server's arguments, environment or LMCache config as text
  self-contradictions errors of the rules guarding stackctl's own keys (secrets, shadowing, unsafe paths) on the
                      recipe init wrote, a render refused without validate reporting an error, an import crash
  secret leaks        secret-looking values of the inputs in the recipe or the bundle
  recipe mismatches   values of [recipe] / `unset` the imported recipe does not have
Exit 1 when recall < 0.9, precision < 0.95, or any of the others is not 0.
Usage: python benchmarks/detection.py [CORPUS_DIR] [-v]
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import tomllib
from stackctl.bundle import keys
from stackctl.bundle.stackspec import StackSpec

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "fixtures" / "corpus"
HARNESS_LAUNCH = ("export PYTHONHASHSEED=0\n"
                  "LMCACHE_CONFIG_FILE={yaml} vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n"
                  "    --kv-transfer-config '{{\"kv_connector\":\"LMCacheConnectorV1\", \"kv_role\":\"kv_both\"}}'\n")
# Value shapes of real credentials (AWS key ids, GitHub / Hugging Face / OpenAI / Slack tokens, PEM keys).
SECRET_SHAPES = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bghp_[A-Za-z0-9]{30,}|\bgithub_pat_\w{20,}|\bhf_[A-Za-z0-9]{20,}"
                           r"|\bsk-[A-Za-z0-9_-]{20,}|\bxox[abpr]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----")
SECRET_KEY = re.compile(r"secret|password|passwd|token|api_?key|access_?key", re.I)  # values of 8+ characters
# Rules that guard stackctl's own keys: an error from one of them on a recipe init wrote is a self-contradiction.
GUARD_RULES = {"secret-in-recipe", "cache-extra-shadows-key", "extra-args-shadow-flag", "host-path-unsafe",
               "skip-unknown-id"}
# What only a launch's run time knows, as the benchmark reads the inputs (independently of the importer).
RUN_TIME = re.compile(r"\$\{[^}]*\}|\$\([^)]*\)?\)?|\$[A-Za-z_][A-Za-z0-9_]*|\$[0-9@*#?]|`[^`]*`"
                      r"|<[A-Za-z][A-Za-z0-9 _./:-]*>")
SERVER = re.compile(r"\bvllm\s+serve\b|-m\s+(vllm\.entrypoints\.\S+|atom\.entrypoints\.openai_server)\b"
                    r"|\b(docker|podman)\s+(container\s+)?run\b")
SERVER_VARIABLE = re.compile(r"^(PYTHONHASHSEED|LMCACHE_\w+|VLLM_\w+|HIP_\w+|CUDA_\w+|ROCR_\w+|AITER_\w+|ATOM_\w+|"
                             r"HF_\w+|HUGGING\w+|AWS_\w+|OMP_\w+|NCCL_\w+|RCCL_\w+|HSA_\w+|PYTORCH_\w+|TORCH\w*|"
                             r"NVIDIA_\w+|SAFETENSORS_\w+|UCX_\w+)$")


@dataclass
class CaseResult:
    name: str
    expected: set[str]
    absent: set[str]
    reported: set[str] = field(default_factory=set)
    leaks: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    literal: list[str] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)
    cited: dict[str, str] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    error: str | None = None
    refused: str | None = None  # the refusal the case expects, as the import said it

    @property
    def missed(self) -> set[str]:
        return self.expected - self.reported

    @property
    def unexpected(self) -> set[str]:
        return self.reported - self.expected

    @property
    def forbidden(self) -> set[str]:
        return self.reported & self.absent


# -- reading a case --------------------------------------------------------------------------------------------------

def launch_file(case: Path, spec: dict) -> Path | None:
    """The case's launch: named in expected.toml, else launch.sh, else a compose file or manifest."""
    if spec.get("launch"):
        return case / spec["launch"]
    if (case / "launch.sh").is_file():
        return case / "launch.sh"
    for path in inputs(case):
        if path.suffix in (".yaml", ".yml") and re.search(r"^(services|apiVersion|kind)\s*:", path.read_text(),
                                                            re.MULTILINE):
            return path
    return None


def inputs(case: Path) -> list[Path]:
    return sorted(p for p in case.iterdir() if p.suffix in (".sh", ".yaml", ".yml"))


def secrets_in(text: str) -> set[str]:
    """Secret-looking values in an input: credential shapes anywhere, and values of secret-named keys."""
    found = set(SECRET_SHAPES.findall(text))
    for match in re.finditer(r"([A-Za-z_][\w.-]*)\s*[:=]\s*[\"']?([^\s\"'#]{8,})", text):
        if SECRET_KEY.search(match.group(1)) and not RUN_TIME.fullmatch(match.group(2)):
            found.add(match.group(2))
    return found


def input_settings(case: Path, spec: dict, launch: Path | None) -> list[str]:
    """The settings a reader sees in the input: the server command's flags, the server's environment variables
    (exported, set in front of the command, -e/--env, a manifest's env), the container's options, the LMCache
    config's keys. Read here without the importer, so that what it drops shows."""
    if "settings" in spec:
        return list(spec["settings"])
    found: list[str] = []
    for path in inputs(case):
        text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        if path == launch and path.suffix == ".sh":
            found += _shell_settings(text)
        elif path == launch:
            found += _manifest_settings(text)
        else:
            found += _yaml_keys(text)
    return list(dict.fromkeys(found))


def _shell_settings(text: str) -> list[str]:
    logical = re.sub(r"\\\n", " ", text).splitlines()
    found = [m.group(1) for line in logical for m in re.finditer(r"(?:^|[;&|]\s*)export\s+([A-Za-z_]\w*)", line)]
    words: list[str] = []
    for line in logical:
        if SERVER.search(line):
            try:
                words += shlex.split(line, comments=True)
            except ValueError:
                words += line.split()
    found += [w.split("=", 1)[0] for w in words if re.fullmatch(r"[A-Za-z_]\w*=.*", w, re.DOTALL)]
    for i, word in enumerate(words):
        if word in ("-e", "--env") and i + 1 < len(words):
            found.append(words[i + 1].split("=", 1)[0])
        elif word.startswith("-") and len(word) > 1 and not re.fullmatch(r"-\d+(\.\d+)?", word):
            found.append(word.split("=", 1)[0])
    return [name for name in found if not name.startswith("$") and (not name[0].isalpha() or
                                                                     SERVER_VARIABLE.match(name) or "-" in name)]


def _manifest_settings(text: str) -> list[str]:
    import yaml

    found: list[str] = []
    stack: list = list(yaml.safe_load_all(text))
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in ("env",):
                if isinstance(item.get(key), list):
                    found += [str(e["name"]) for e in item[key] if isinstance(e, dict) and "name" in e]
            if isinstance(item.get("environment"), dict):
                found += [str(k) for k in item["environment"]]
            elif isinstance(item.get("environment"), list):
                found += [str(e).split("=", 1)[0] for e in item["environment"]]
            for key in ("command", "args"):
                value = item.get(key)
                words = [str(w) for w in value] if isinstance(value, list) else str(value or "").split()
                found += [w.split("=", 1)[0] for w in " ".join(words).split() if w.startswith("--")]
            found += [k for k in item if str(k).endswith("/gpu")]
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
    return [name for name in found if not name.startswith("$")]


def _yaml_keys(text: str) -> list[str]:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    return [str(k) for k in data] if isinstance(data, dict) else []


def _normal(text: str) -> str:
    return text.lower().replace("_", "-")


def is_named(setting: str, output: str) -> bool:
    """Whether a setting shows in the recipe (values or comments) or the bundle: its name, LMCache's key for an
    LMCACHE_ variable, or the recipe key a server flag is written from (keys.SERVE_FLAG_KEYS: a flag whose
    value equals vLLM's default is not written into serve.sh, the key holds it)."""

    names = {setting.lstrip("-")}
    if setting.startswith("LMCACHE_"):
        names.add(setting[len("LMCACHE_"):])
    flag = "--" + setting.lstrip("-").replace("_", "-") if setting.startswith("--") else setting
    if flag in keys.SERVE_FLAG_KEYS:
        names.add(keys.SERVE_FLAG_KEYS[flag].rsplit(".", 1)[-1] + " =")
    return any(_normal(name) in output for name in names if name)


# -- one case --------------------------------------------------------------------------------------------------------

def run_case(case: Path) -> CaseResult:
    from stackctl.errors import StackctlError
    from stackctl.importer import import_launch, import_launch_text
    from stackctl.recipe.loader import load_recipe_text
    from stackctl.rules.ruleset import RULES, run_rules

    spec = tomllib.loads((case / "expected.toml").read_text())
    result = CaseResult(case.name, set(spec.get("expected", [])), set(spec.get("absent", [])),
                        cited=dict(spec.get("cite", {})))
    launch = launch_file(case, spec)
    texts = "".join(p.read_text() for p in inputs(case))
    try:
        config = case / spec["lmcache_config"] if spec.get("lmcache_config") else None
        if launch is not None:
            text = import_launch(launch, config, name=case.name)
        else:
            yaml = next(p for p in inputs(case) if p.suffix in (".yaml", ".yml"))
            text = import_launch_text(HARNESS_LAUNCH.format(yaml=yaml.name), None, case.name, script_dir=case)
        recipe = load_recipe_text(text)
        findings = run_rules(recipe)
    except StackctlError as exc:
        if spec.get("refused") and spec["refused"] in str(exc):
            result.refused = str(exc)
        else:
            result.error = str(exc)
        return result
    except Exception as exc:  # noqa: BLE001 (a crash of init or validate is what this measures)
        result.error = f"crash: {exc!r}"
        result.contradictions.append(f"init or validate crashed: {exc!r}")
        return result
    result.reported = {finding.rule_id for finding in findings}
    result.mismatches = _mismatches(recipe.to_dict(), spec.get("recipe", {}), spec.get("unset", []))
    if spec.get("refused"):
        result.mismatches.append(f"imported; a refusal saying {spec['refused']!r} was expected")
    errors = [f for f in findings if RULES[f.rule_id].severity == "error"]
    result.contradictions += [f"{f.rule_id} {f.key}: {f.message}" for f in errors if f.rule_id in GUARD_RULES]
    bundle, refused = _render(recipe)
    if refused and not errors:
        result.contradictions.append(f"render refused a recipe validate accepted: {refused}")
    output = _normal(text + "".join(bundle.values()))
    result.dropped = [s for s in input_settings(case, spec, launch) if not is_named(s, output)]
    result.literal = _literal_values(recipe, texts) if not refused else []
    guarded = text + ("" if refused else "".join(bundle.values()))
    result.leaks = sorted(secret for secret in secrets_in(texts) if secret in guarded)
    return result


def _mismatches(values: dict, wanted: dict, unset: list[str]) -> list[str]:
    """The [recipe] values and `unset` keys the imported recipe does not match."""
    missing = object()

    def lookup(dotted: str):
        value = values
        for part in dotted.split("."):
            if not isinstance(value, dict) or value.get(part) is None:
                return missing
            value = value[part]
        return value

    found = [f"{key} = {lookup(key)!r}, not {value!r}" for key, value in wanted.items() if lookup(key) != value]
    return found + [f"{key} is set ({lookup(key)!r})" for key in unset if lookup(key) is not missing]


def _render(recipe) -> tuple[dict[str, str], str | None]:
    """(bundle files as text, why render refused or None). A refused recipe is still rendered without its guards,
    to measure what would reach the bundle; the guarded render's refusal is what the user sees."""
    from stackctl.errors import StackctlError
    from stackctl.bundle.render import render_files

    refused = None
    try:
        files = render_files(StackSpec(recipe))
    except StackctlError as exc:
        refused = str(exc)
        files = render_files(StackSpec(recipe), guard=False)
    return {name: content.decode("utf-8", "replace") for name, content in files.items()}, refused


def _literal_values(recipe, texts: str) -> list[str]:
    """Run-time parts of the inputs found in what the server gets: its arguments, environment, LMCache config."""
    import json

    from stackctl.bundle import stackspec

    served = json.dumps([stackspec.serve_args(recipe), stackspec.environment(recipe),
                         stackspec.lmcache_config(recipe), stackspec.server_command(recipe)])
    references = {m.group(0) for m in RUN_TIME.finditer(texts) if len(m.group(0)) > 2}
    return sorted(ref for ref in references if json.dumps(ref)[1:-1] in served)


# -- the corpus ------------------------------------------------------------------------------------------------------

def run_corpus(root: Path = CORPUS) -> list[CaseResult]:
    return [run_case(case) for case in sorted(p for p in root.iterdir() if (p / "expected.toml").is_file())]


def scores(results: list[CaseResult]) -> tuple[float, float, int]:
    """(recall, precision, leaks) over all cases."""
    expected = sum(len(r.expected) for r in results)
    reported = sum(len(r.reported) for r in results)
    hits = sum(len(r.expected & r.reported) for r in results)
    recall = hits / expected if expected else 1.0
    precision = hits / reported if reported else 1.0
    return recall, precision, sum(len(r.leaks) for r in results)


def totals(results: list[CaseResult]) -> dict[str, int]:
    return {"dropped": sum(len(r.dropped) for r in results), "literal": sum(len(r.literal) for r in results),
            "contradictions": sum(len(r.contradictions) for r in results),
            "mismatches": sum(len(r.mismatches) for r in results), "errors": sum(1 for r in results if r.error)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", default=str(CORPUS))
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    results = run_corpus(Path(args.corpus))
    for r in results:
        flawed = r.missed or r.unexpected or r.leaks or r.error or r.dropped or r.literal or r.contradictions or \
            r.mismatches
        if args.verbose or flawed:
            print(f"{r.name}: reported {sorted(r.reported)}"
                  + (f" missed {sorted(r.missed)}" if r.missed else "")
                  + (f" unexpected {sorted(r.unexpected)}" if r.unexpected else "")
                  + (f" DROPPED {r.dropped}" if r.dropped else "") + (f" LITERAL {r.literal}" if r.literal else "")
                  + (f" CONTRADICTS {r.contradictions}" if r.contradictions else "")
                  + (f" RECIPE {r.mismatches}" if r.mismatches else "")
                  + (f" LEAKS {len(r.leaks)}" if r.leaks else "") + (f" ERROR {r.error}" if r.error else ""))
    recall, precision, leaks = scores(results)
    counts = totals(results)
    print(f"cases {len(results)}  recall {recall:.3f}  precision {precision:.3f}  dropped settings "
          f"{counts['dropped']}  run-time literal {counts['literal']}  self-contradictions {counts['contradictions']}"
          f"  secret leaks {leaks}  recipe mismatches {counts['mismatches']}  import errors {counts['errors']}")
    good = recall >= 0.9 and precision >= 0.95 and leaks == 0 and not any(counts.values())
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
