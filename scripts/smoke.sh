#!/usr/bin/env bash
# The main job, end to end on a fresh machine: set up (scripts/setup.sh), start a Ceph RGW for the S3 tier, bring the
# CPU smoke stack up (a real vLLM serving a tiny random model, built by stackctl), prove it with doctor, measure what
# vLLM's prefix cache buys (bench --probe, gated on the hit rate the server counts), then prove every KV tier of
# recipes/cpu-tiers.toml (CPU, disk, fs and S3 on that Ceph RGW) through LMCache's own storage code in its image.
#
# It leaves running the cpu-smoke stack (http://127.0.0.1:8000) and the Ceph RGW (127.0.0.1:17480 and :17443); the
# closing summary lists them, how to stop each, the phases' times and the figures measured. Installer output goes to
# $STACKCTL_JOB_LOG (default /tmp/stackctl-smoke/job.log); bench results to $STACKCTL_SMOKE_OUT.
#
# Each step is one phase (scripts/phases.sh): shown_phase NAME COMMAND... for stackctl's own output, quiet_phase for
# installers and image builds. A step that starts something adds its recipe to LEFT_RUNNING, a doctor step its output
# to DOCTOR_OUTPUTS and a bench step its probe.json to PROBES: the summary reads those.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${STACKCTL_SMOKE_OUT:-/tmp/stackctl-smoke}
mkdir -p "$OUT"
STACKCTL_JOB_LOG=${STACKCTL_JOB_LOG:-$OUT/job.log}
LEFT_RUNNING=()    # recipes whose stacks this job brought up
DOCTOR_OUTPUTS=()  # LABEL=FILE: doctor's table, as printed
PROBES=()          # LABEL=FILE: bench --probe results (probe.json)
CEPH=""            # set once the Ceph RGW is up

summary() {
    local status=$? python=python3
    trap - EXIT
    [ -x "${VENV:-}/bin/python" ] && python="$VENV/bin/python"
    if [ "$status" -eq 0 ]; then
        printf '\n==> summary: the main job passed\n'
    else
        printf '\n==> summary: the main job FAILED (exit %d); its output is above and in %s\n' "$status" \
            "${STACKCTL_JOB_LOG}"
    fi
    if declare -F print_phases >/dev/null; then
        echo "Phases (wall time):"
        print_phases
    fi
    local args=(--log "$STACKCTL_JOB_LOG" --venv "${VENV:-.venv}" --link "${STACKCTL_BIN_LINK:-none}")
    for recipe in "${LEFT_RUNNING[@]}"; do args+=(--stack "$recipe"); done
    for output in "${DOCTOR_OUTPUTS[@]}"; do args+=(--doctor "$output"); done
    for probe in "${PROBES[@]}"; do args+=(--probe "$probe"); done
    [ -n "$CEPH" ] && args+=(--ceph)
    "$python" scripts/job_summary.py "${args[@]}" || true
    exit "$status"
}
trap summary EXIT

# shellcheck source=scripts/setup.sh
source scripts/setup.sh

doctor_phase() {  # LABEL stackctl doctor ARGS...: a shown phase whose table the summary quotes
    local label=$1
    shift
    shown_phase "doctor $label" "$@"
    DOCTOR_OUTPUTS+=("$label=$LAST_PHASE_OUTPUT")
}

# The KV tiers' storage: a Ceph RGW on 127.0.0.1 (S3), and the disk and fs directories of recipes/cpu-tiers.toml.
quiet_phase "Ceph RGW on 127.0.0.1 (the S3 tier's store)" bash scripts/start-ceph-rgw.sh start
CEPH=yes
set -a  # its test credentials, for the S3 tier; read from the file, never printed
# shellcheck source=/dev/null
source "${STACKCTL_CEPH_DIR:-/tmp/stackctl-ceph}/s3.env"
set +a
mkdir -p /tmp/stackctl-tiers/disk /tmp/stackctl-tiers/fs

# The smoke stack: vLLM's prefix cache (HBM) only.
shown_phase "validate cpu-smoke" stackctl validate recipes/cpu-smoke.toml
quiet_phase "build the cpu-smoke image" stackctl build recipes/cpu-smoke.toml
LEFT_RUNNING+=(recipes/cpu-smoke.toml)
shown_phase "up cpu-smoke" stackctl up recipes/cpu-smoke.toml
doctor_phase cpu-smoke stackctl doctor recipes/cpu-smoke.toml
# The gate is what the server counts (prefix-cache hits from /metrics), not a TTFT ratio: a tiny model's 30 ms
# prefill is noise on a shared 2-core machine.
shown_phase "bench cpu-smoke" stackctl bench recipes/cpu-smoke.toml --probe --min-hit-rate 0.9 -o "$OUT/bench-cpu-smoke"
PROBES+=("cpu-smoke=$OUT/bench-cpu-smoke/probe.json")

# Every KV tier (CPU, disk, fs, S3) stores and returns real KV chunks through LMCache's own code, in the image.
shown_phase "validate cpu-tiers" stackctl validate recipes/cpu-tiers.toml
quiet_phase "build the cpu-tiers image" stackctl build recipes/cpu-tiers.toml
doctor_phase "cpu-tiers (host, image: every KV tier)" stackctl doctor recipes/cpu-tiers.toml --scope host,image
