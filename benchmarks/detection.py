"""Detection quality on real-world inputs: import + validate every case of tests/fixtures/corpus/ and compare the
rule findings with what a reader of the input expects.

Each case is a folder with the launch script and/or LMCache YAML as found (a header comment names the source) and
an expected.toml: `expected` (rule ids the input must produce), `absent` (rule ids it must not), and optionally
`lmcache_config` (a YAML the source pairs with the launch without naming it). A case with only a YAML is imported
with HARNESS_LAUNCH, a minimal launch of our own that names that YAML and fixes the hash seed, so only the YAML is
judged.

Prints recall (expected findings reported / expected findings), precision (reported findings that are expected /
reported findings) and secret leaks (secret-looking values of the inputs that reach the recipe or the rendered
bundle; must be 0). Exit 1 when recall or precision is under 0.95 or anything leaks.
Usage: python benchmarks/detection.py [CORPUS_DIR] [-v]
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "fixtures" / "corpus"
HARNESS_LAUNCH = ("export PYTHONHASHSEED=0\n"
                  "LMCACHE_CONFIG_FILE={yaml} vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n"
                  "    --kv-transfer-config '{{\"kv_connector\":\"LMCacheConnectorV1\", \"kv_role\":\"kv_both\"}}'\n")
# Value shapes of real credentials (AWS key ids, GitHub / Hugging Face / OpenAI / Slack tokens, PEM keys).
SECRET_SHAPES = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bghp_[A-Za-z0-9]{30,}|\bgithub_pat_\w{20,}|\bhf_[A-Za-z0-9]{20,}"
                           r"|\bsk-[A-Za-z0-9_-]{20,}|\bxox[abpr]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----")
SECRET_KEY = re.compile(r"secret|password|passwd|token|api_?key|access_?key", re.I)


@dataclass
class CaseResult:
    name: str
    expected: set[str]
    absent: set[str]
    reported: set[str]
    leaks: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def missed(self) -> set[str]:
        return self.expected - self.reported

    @property
    def unexpected(self) -> set[str]:
        return self.reported - self.expected

    @property
    def forbidden(self) -> set[str]:
        return self.reported & self.absent


def secrets_in(text: str) -> set[str]:
    """Secret-looking values in an input: credential shapes anywhere, and values of secret-named keys."""
    found = set(SECRET_SHAPES.findall(text))
    for match in re.finditer(r"([A-Za-z_][\w.-]*)\s*[:=]\s*[\"']?([^\s\"'#]{6,})", text):
        if SECRET_KEY.search(match.group(1)):
            found.add(match.group(2))
    return found


def run_case(case: Path) -> CaseResult:
    from stackctl.errors import StackctlError
    from stackctl.importer import import_launch, import_launch_text
    from stackctl.recipe.loader import load_recipe_text
    from stackctl.recipe.rules import run_rules
    from stackctl.render import render_files

    spec = tomllib.loads((case / "expected.toml").read_text())
    result = CaseResult(case.name, set(spec.get("expected", [])), set(spec.get("absent", [])), set())
    inputs = "".join(p.read_text() for p in sorted(case.iterdir()) if p.suffix in (".sh", ".yaml", ".yml"))
    try:
        launch = case / "launch.sh"
        config = case / spec["lmcache_config"] if spec.get("lmcache_config") else None
        if launch.is_file():
            text = import_launch(launch, config, name=case.name)
        else:
            yaml = next(p for p in sorted(case.iterdir()) if p.suffix in (".yaml", ".yml"))
            text = import_launch_text(HARNESS_LAUNCH.format(yaml=yaml.name), None, case.name, script_dir=case)
        recipe = load_recipe_text(text)
        result.reported = {finding.rule_id for finding in run_rules(recipe)}
        outputs = text
        try:
            outputs += "".join(content.decode("utf-8", "replace") if isinstance(content, bytes) else str(content)
                               for content in render_files(recipe).values())
        except StackctlError:
            pass  # a recipe that does not render has no bundle to leak into
        result.leaks = sorted(secret for secret in secrets_in(inputs) if secret in outputs)
    except StackctlError as exc:
        result.error = str(exc)
    return result


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", default=str(CORPUS))
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    results = run_corpus(Path(args.corpus))
    for r in results:
        if args.verbose or r.missed or r.unexpected or r.leaks or r.error:
            print(f"{r.name}: reported {sorted(r.reported)}"
                  + (f" missed {sorted(r.missed)}" if r.missed else "")
                  + (f" unexpected {sorted(r.unexpected)}" if r.unexpected else "")
                  + (f" LEAKS {len(r.leaks)}" if r.leaks else "") + (f" ERROR {r.error}" if r.error else ""))
    recall, precision, leaks = scores(results)
    print(f"cases {len(results)}  recall {recall:.3f}  precision {precision:.3f}  secret leaks {leaks}")
    return 0 if recall >= 0.95 and precision >= 0.95 and leaks == 0 and not any(r.error for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
