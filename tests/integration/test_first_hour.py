"""README's quick start on the real engine, judged by what a new user reads: `bash scripts/smoke.sh` (run once per
session by the smoke_job fixture; the other tests share the cpu-smoke stack it leaves) passes, prints one line per
phase with its time, keeps installer output in the log it names, and ends with a summary of what runs, where, how to
stop each thing and the figures measured; the `stackctl` it names works; doctor never shows a Python None on the
shipped recipes; every explain page names its sources."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from helpers import RECIPES, REPO

from stackctl.knowledge.sources import OWN_CODE, REPORT, SOURCE

SOURCE_FORMS = (SOURCE, OWN_CODE, REPORT)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NONE = re.compile(r"\bNone\b")
PHASE_LINE = re.compile(r"^==> (?P<name>.+?) \.\.\. (?P<seconds>\d+) s$")
SKIPPED_PHASE = re.compile(r"^==> (?P<name>setup: .+): (?P<why>[^:]+)$")
TIMED_ROW = re.compile(r"^ +(?:\d+ s|-  ) {2}(?P<name>.+)$")


def section(output: str, title: str, until: tuple[str, ...]) -> list[str]:
    """The lines of the summary section starting at `title`, up to the next of `until`."""
    lines = output.split("\n==> summary: ", 1)[1].splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(until)), len(lines))
    return lines[start:end]


def test_the_main_job_passes_quietly_with_one_line_per_phase(smoke_job):
    out = smoke_job.output
    assert smoke_job.returncode == 0, out[-6000:]
    lines = out.splitlines()
    log = smoke_job.folder / "job.log"
    assert lines[0] == f"Installer output (apt, pip, debootstrap, image builds) goes to {log}"
    setup = [line for line in lines if line.startswith("==> setup:")]
    assert len(setup) >= 4 and all(PHASE_LINE.match(line) or SKIPPED_PHASE.match(line) for line in setup), setup
    assert any(PHASE_LINE.match(line) for line in lines if "build the cpu-lmcache image" in line)
    # The installers' output is in the log, not on the terminal.
    log_text = log.read_text()
    assert "==> setup: venv" in log_text and "==> build the cpu-smoke image" in log_text
    assert "Successfully tagged" not in out and "Step 1/" not in out
    # The summary's phase table: every phase with its wall time, and the total.
    table = section(out, "Phases (wall time):", ("Running now:",))
    assert all(TIMED_ROW.match(row) for row in table), table
    names = [TIMED_ROW.match(row)["name"] for row in table]
    for phase in ("up cpu-smoke", "doctor cpu-smoke", "bench cpu-smoke", "build the cpu-lmcache image",
                  "up cpu-lmcache", "doctor cpu-lmcache", "bench cpu-lmcache", "total"):
        assert any(name.startswith(phase) for name in names), (phase, names)


def test_the_summary_says_what_runs_where_and_how_to_stop_it(smoke_job):
    from stackctl.httpclient import get_status

    running = section(smoke_job.output, "Running now:", ("Measured:",))
    stack = next(line for line in running if line.startswith("  stack cpu-smoke:"))
    assert "running, healthy, at http://127.0.0.1:8000" in stack
    assert stack.endswith("; stop: stackctl down recipes/cpu-smoke.toml") and (REPO / "recipes/cpu-smoke.toml").is_file()
    assert get_status("http://127.0.0.1:8000/health", timeout=5) == 200  # what it says runs, runs
    lmcache = next(line for line in running if line.startswith("  stack cpu-lmcache:"))
    assert "running, healthy, at http://127.0.0.1:8020" in lmcache
    assert lmcache.endswith("; stop: stackctl down recipes/cpu-lmcache.toml")
    assert get_status("http://127.0.0.1:8020/health", timeout=5) == 200
    assert any(line.startswith("  Ceph RGW: running (radosgw pid ") for line in running), running
    assert ("    S3: http://127.0.0.1:17480 and https://127.0.0.1:17443 (CA /tmp/stackctl-ceph/tls/ca.pem), bucket "
            "stackctl-kv") in running
    stop = next(line for line in running if line.startswith("    stop: bash "))
    script = Path(stop.split()[2])
    assert stop.endswith(" stop") and script == REPO / "scripts" / "start-ceph-rgw.sh"
    status = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and status.stdout.splitlines()[0].startswith("Ceph RGW: running")


def test_the_summary_gives_the_figures_measured(smoke_job):
    measured = section(smoke_job.output, "Measured:", ("Full output",))
    bench = smoke_job.folder / "bench-cpu-smoke" / "probe.json"
    probe = json.loads(bench.read_text())
    assert measured[0].startswith(f"  bench cpu-smoke --probe: {probe['prompt_tokens']:,}-token prompts")
    hbm = next(line for line in measured if line.startswith("    vLLM prefix cache (HBM)"))
    assert f"server hit rate {probe['arms']['hbm']['hit_rate']:.1%}" in hbm and probe["arms"]["hbm"]["hit_rate"] >= 0.9
    assert any(re.match(r"  doctor cpu-smoke: \d+ passed, 0 failed", line) for line in measured), measured
    assert any(re.match(r"  doctor cpu-lmcache .*: \d+ passed, 0 failed", line) for line in measured), measured
    # The live LMCache checks, quoted: LMCache loaded the repeat, right, from every tier, across processes.
    for check in ("server.lmcache-hit", "server.lmcache-hit-correct", "server.tier-served", "server.hash-seed-proof"):
        assert any(line.startswith(f"    {check} ok: ") for line in measured), (check, measured)
    lmcache = json.loads((smoke_job.folder / "bench-cpu-lmcache" / "probe.json").read_text())
    assert set(lmcache["arms"]) == {"recompute", "hbm", "lmcache"} and lmcache["arms"]["lmcache"]["hit_rate"] >= 0.8
    tiers = [line.strip() for line in measured if re.match(r"      (cpu|disk|fs|s3) ok: put ", line)]
    assert [line.split()[0] for line in tiers] == ["cpu", "disk", "fs", "s3"], measured
    assert all("MB/s" in line for line in tiers[1:])
    log_line = next(line for line in smoke_job.output.splitlines() if line.startswith("Full output"))
    assert log_line.endswith(str(smoke_job.folder / "job.log"))


def test_the_stackctl_it_names_works(smoke_job):
    line = next(line for line in smoke_job.output.splitlines() if line.startswith("stackctl: "))
    link = Path(line.split()[1])
    assert link == smoke_job.link and link.is_symlink()
    status = subprocess.run([str(link), "status", "recipes/cpu-smoke.toml", "--format", "json"], cwd=REPO,
                            env=smoke_job.env, capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert [(row["stack"], row["state"]) for row in json.loads(status.stdout)] == [("cpu-smoke", "running")]
    activate = line.rsplit("source ", 1)[1].split()[0]
    shell = subprocess.run(["bash", "-c", f"source {activate} && stackctl --version"], env=smoke_job.env,
                           capture_output=True, text=True, timeout=120)
    assert shell.returncode == 0 and shell.stdout.startswith("stackctl, version"), shell.stderr


def test_every_explain_page_names_its_sources(smoke_job):
    stackctl = str(smoke_job.link)
    rules = [item["id"] for item in json.loads(subprocess.run([stackctl, "rules", "--format", "json"],
                                                              capture_output=True, text=True, check=True).stdout)]
    checks = [line.split()[0] for line in subprocess.run([stackctl, "doctor", "--list"], capture_output=True,
                                                         text=True, check=True).stdout.splitlines()]
    assert len(rules) > 20 and len(checks) > 30
    for entry_id in rules + checks:
        page = subprocess.run([stackctl, "explain", entry_id], capture_output=True, text=True, timeout=60).stdout
        sources = page.split("\nSources:\n", 1)[1].splitlines()
        # Each line is one of the forms sources.toml allows: a package file's lines, stackctl's own code by name, a
        # report's address.
        assert sources and all(line.startswith("  - ") and any(form.match(line[4:]) for form in SOURCE_FORMS)
                               for line in sources), (entry_id, sources)


def test_doctor_never_shows_none_on_the_shipped_recipes(smoke_job, tiers_env):
    """The job's own doctor output, and doctor on every shipped recipe: all scopes on the stack this session runs;
    host and image elsewhere (another stack of the same name on a shared machine is not this test's to probe)."""
    assert not NONE.findall(smoke_job.output)
    for recipe in sorted(RECIPES.glob("*.toml")):
        scope = "host,image,server" if recipe.stem in ("cpu-smoke", "cpu-lmcache") else "host,image"
        result = subprocess.run([str(smoke_job.link), "doctor", str(recipe), "--scope", scope, "--format", "json"],
                                env=tiers_env, capture_output=True, text=True, timeout=900)
        assert result.returncode in (0, 1, 2), result.stderr
        report = json.loads(result.stdout)
        shown = [(r["id"], text) for r in report["results"] for text in (r["message"], r["fix"])]
        assert not [item for item in shown if NONE.search(item[1])], (recipe.name, shown)
        if recipe.stem in ("cpu-smoke", "cpu-tiers", "cpu-lmcache"):
            assert report["summary"]["fail"] == 0, (recipe.name, report["results"])
