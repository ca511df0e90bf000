"""The main job's and CI's own scripts: the phase functions (scripts/phases.sh) run in real bash, the summary helper
(scripts/job_summary.py) on what the job writes, shellcheck over the scripts, and the published CI example kept on
the main job's gate."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess

from helpers import REPO, tool

JOB_SCRIPTS = ["scripts/phases.sh", "scripts/setup.sh", "scripts/smoke.sh", "scripts/start-ceph-rgw.sh", ".ci/run"]


def summary_module():
    spec = importlib.util.spec_from_file_location("job_summary", REPO / "scripts" / "job_summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bash(script: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"set -euo pipefail; source {REPO}/scripts/phases.sh; {script}"],
                          env={"PATH": "/usr/bin:/bin", "STACKCTL_JOB_LOG": str(tmp_path / "job.log")},
                          capture_output=True, text=True, timeout=60)


def test_job_scripts_are_shellcheck_clean():
    shellcheck = tool("shellcheck")
    result = subprocess.run([shellcheck, "--severity=style", "-x", *JOB_SCRIPTS], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_quiet_phase_is_one_line_and_its_output_goes_to_the_log(tmp_path):
    result = bash("quiet_phase 'install things' bash -c 'echo lots of apt output'; print_phases", tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"Installer output (apt, pip, debootstrap, image builds) goes to {tmp_path}/job.log"
    assert re.fullmatch(r"==> install things \.\.\. \d+ s", lines[1])
    assert re.fullmatch(r" +\d+ s  install things", lines[2]) and re.fullmatch(r" +\d+ s  total", lines[3])
    assert "lots of apt output" not in result.stdout
    assert "lots of apt output" in (tmp_path / "job.log").read_text()


def test_a_failed_quiet_phase_shows_the_logs_tail_and_stops_the_job(tmp_path):
    result = bash("quiet_phase 'install things' bash -c 'echo E: Unable to locate package; exit 100'; echo NEXT",
                  tmp_path)
    assert result.returncode == 100
    assert "==> install things ... FAILED (exit 100 after" in result.stdout
    assert "    E: Unable to locate package" in result.stdout
    assert f"install things failed; full output: {tmp_path}/job.log" in result.stdout and "NEXT" not in result.stdout


def test_a_shown_phase_prints_its_output_and_keeps_a_copy(tmp_path):
    result = bash("shown_phase 'doctor x' echo 14 passed; cat \"$LAST_PHASE_OUTPUT\"; skip_phase 'base image' present;"
                  " print_phases", tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "\n==> doctor x: echo 14 passed\n14 passed\ndoctor x: 0 s\n14 passed\n" in out
    assert "==> base image: present" in out and "    -    base image (present)" in out


def test_a_background_phase_runs_beside_the_next_and_is_recorded_when_awaited(tmp_path):
    """The HIP build runs beside the CPU image builds in CI: both started, the background one awaited, each timed
    from its own start (the two 3 s sleeps overlap: the job takes about the longer one, not their sum)."""
    result = bash("background_phase 'hip build' bash -c 'sleep 3; echo compiled'; quiet_phase 'cpu image' sleep 3;"
                  " await_phase 'hip build'; print_phases", tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].startswith("==> hip build: started in the background (output: ")
    assert re.fullmatch(r"==> hip build \(in the background\) \.\.\. [34] s", lines[3]), lines
    assert re.fullmatch(r" +[34] s  hip build \(in the background\)", lines[5]), lines
    total = int(re.fullmatch(r" +(\d+) s  total", lines[6])[1])
    assert total < 6, lines  # overlapped: 3 s each, not 6 s in a row
    assert "compiled" in (tmp_path / "job.log").read_text() and "compiled" not in result.stdout


def test_a_failed_background_phase_shows_its_tail_and_stops_the_job(tmp_path):
    result = bash("background_phase 'hip build' bash -c 'echo clang: error: no such target; exit 2';"
                  " await_phase 'hip build'; echo NEXT", tmp_path)
    assert result.returncode == 2 and "NEXT" not in result.stdout
    assert "==> hip build (in the background) ... FAILED (exit 2 after" in result.stdout
    assert "    clang: error: no such target" in result.stdout


def test_the_summary_reads_bench_and_doctor_as_the_job_wrote_them(tmp_path):
    summary = summary_module()
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"prompt_tokens": 1200, "runs": 5, "arms": {
        "recompute": {"ttft_median_s": 0.0233, "hit_rate": 0.0, "over_recompute": 1.0},
        "hbm": {"ttft_median_s": 0.0091, "hit_rate": 0.96, "over_recompute": 0.39}}}))
    lines = summary.probe_lines("cpu-smoke", probe)
    assert lines[0].startswith("  bench cpu-smoke --probe: 1,200-token prompts, TTFT median of 5")
    assert lines[1] == "    recompute                   23.3 ms; server hit rate 0.0%"
    assert lines[2] == "    vLLM prefix cache (HBM)      9.1 ms, 2.6x faster than recompute; server hit rate 96.0%"
    assert summary.probe_lines("x", tmp_path / "missing.json") == [f"  bench x: no result ({tmp_path}/missing.json "
                                                                   "missing)"]
    table = tmp_path / "doctor.out"
    table.write_text("image\n  ok    image.tiers   64 x 256 KiB KV chunks (m) per tier: cpu ok: put 1 ms; disk ok: put "
                     "2 ms (9 MB/s); 64 file(s) seen in /d, removed\n\n14 passed, 0 failed, 1 warnings, 6 skipped "
                     "(0 by request)\n")
    assert summary.doctor_lines("cpu-tiers", table) == [
        "  doctor cpu-tiers: 14 passed, 0 failed, 1 warnings, 6 skipped (0 by request)",
        "    image.tiers ok, 64 x 256 KiB KV chunks (m) per tier:", "      cpu ok: put 1 ms",
        "      disk ok: put 2 ms (9 MB/s)"]
    assert summary.doctor_lines("y", tmp_path / "none.out") == ["  doctor y: no result"]


def test_the_summary_names_a_stackctl_that_is_reachable(tmp_path):
    summary = summary_module()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    link = tmp_path / "bin" / "stackctl"
    link.parent.mkdir()
    link.symlink_to(venv / "bin" / "stackctl")
    line = summary.stackctl_lines(str(link), str(venv), "/usr/bin:/bin")[0]
    assert line == (f"stackctl: {link} (a link to {venv}/bin/stackctl; {link.parent} is not on this PATH); or, in a "
                    f"shell of its own: source {venv}/bin/activate")
    on_path = summary.stackctl_lines(str(link), str(venv), f"/usr/bin:{link.parent}")[0]
    assert on_path.startswith(f"stackctl: {link} (a link to {venv}/bin/stackctl); or, in a shell of its own: ")
    assert summary.stackctl_lines("none", str(venv), "") == [f"stackctl: source {venv}/bin/activate   (then "
                                                             "`stackctl --help`)"]


def bench_gate(text: str) -> list[str]:
    """The gate flags of the `stackctl bench ... --probe` line in a script or workflow."""
    line = next(line for line in text.splitlines() if "stackctl bench" in line and "--probe" in line)
    words = line.split()
    return [" ".join(words[i:i + 2]) for i, word in enumerate(words) if word.startswith("--min-")]


def test_the_published_ci_example_gates_like_the_main_job():
    """Both gate on the hit rate the server counts, neither on the tiny model's TTFT ratio."""
    smoke = bench_gate((REPO / "scripts" / "smoke.sh").read_text())
    example = bench_gate((REPO / "docs" / "ci" / "stackctl-smoke.yml").read_text())
    assert smoke == example == ["--min-hit-rate 0.9"]
