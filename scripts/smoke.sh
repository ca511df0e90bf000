#!/usr/bin/env bash
# The main job, end to end on a fresh machine: set up (scripts/setup.sh), start a Ceph RGW for the S3 tier, bring the
# CPU smoke stack up (a real vLLM serving a tiny random model, built by stackctl), prove it with doctor, measure what
# vLLM's prefix cache buys (bench --probe, gated on the hit rate the server counts), then bring up the LMCache stack
# of recipes/cpu-lmcache.toml (CPU, disk, fs and S3 tiers on that Ceph RGW) and prove with doctor --deep that LMCache
# serves from every tier, right, and across processes, and bench what it buys.
#
# It leaves running the cpu-smoke stack (http://127.0.0.1:8000), the cpu-lmcache stack (http://127.0.0.1:8020) and
# the Ceph RGW (127.0.0.1:17480 and :17443); the
# closing summary lists them, how to stop each, the phases' times and the figures measured. Installer output goes to
# $STACKCTL_JOB_LOG (default /tmp/stackctl-smoke/job.log); bench results and the JSON report of doctor --deep to
# $STACKCTL_SMOKE_OUT (default /tmp/stackctl-smoke).
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

# The KV tiers' storage: a Ceph RGW on 127.0.0.1 (S3), started now beside the cpu-smoke stack's phases (only the
# LMCache stack uses it), and the disk and fs directories of recipes/cpu-lmcache.toml.
ceph_dir=${STACKCTL_CEPH_DIR:-/tmp/stackctl-ceph}
ceph_phase="Ceph RGW on 127.0.0.1 (the S3 tier's store)"
store_before=$(cat "$ceph_dir/rgw.pid" 2>/dev/null || true)
background_phase "$ceph_phase" bash scripts/start-ceph-rgw.sh start
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

# LMCache serving for real (stackctl's CPU connector, a ~150M random Llama, cpu + disk + fs + S3 tiers): doctor
# --deep proves LMCache loads what it stored, right, from every tier, and across processes (the hash seed); bench
# prints recompute, vLLM's prefix cache and LMCache side by side. Its gates: the hit rate the server counts, and a
# TTFT ratio only here, where prefill dominates (medians of 5; LMCache measured at about a fifth of recompute on a
# loaded 2-core machine, the gate asks for half).
await_phase "$ceph_phase"
CEPH=yes
if [ -n "$store_before" ] && [ "$store_before" != "$(cat "$ceph_dir/rgw.pid")" ]; then
    # A new, empty store with a new CA: an LMCache stack left by an earlier run still trusts the old CA and
    # remembers objects that are gone (LMCache 0.5.6 caches S3 object sizes and assumes nothing is ever evicted:
    # lmcache/v1/storage_backend/connector/s3_connector.py:155-160), so it starts again below.
    shown_phase "down cpu-lmcache (its S3 store was started afresh)" stackctl down recipes/cpu-lmcache.toml
fi
set -a  # its test credentials, for the S3 tier; read from the file, never printed
# shellcheck source=/dev/null
source "$ceph_dir/s3.env"
set +a
shown_phase "validate cpu-lmcache" stackctl validate recipes/cpu-lmcache.toml
quiet_phase "build the cpu-lmcache image" stackctl build recipes/cpu-lmcache.toml
LEFT_RUNNING+=(recipes/cpu-lmcache.toml)
shown_phase "up cpu-lmcache" stackctl up recipes/cpu-lmcache.toml
doctor_phase "cpu-lmcache --deep (every tier through serving)" stackctl doctor recipes/cpu-lmcache.toml --deep \
    --json "$OUT/doctor-cpu-lmcache-deep.json"
shown_phase "bench cpu-lmcache" stackctl bench recipes/cpu-lmcache.toml --probe --tokens 2000 --runs 5 \
    --min-hit-rate 0.8 --min-speedup 2 -o "$OUT/bench-cpu-lmcache"
PROBES+=("cpu-lmcache=$OUT/bench-cpu-lmcache/probe.json")
# The connector's target is half of memcpy (both measured in one run). The gate sits under the lowest figure seen on
# the CPUs this runs on, with margin for a 2-core host's noise: Intel with AMX 0.57-0.97x; AMD EPYC with AVX-512 and
# no AMX (vLLM's vec layout, whose K a load transposes) 0.41-0.45x on a quiet host and 0.36x while a build ran beside.
shown_phase "bench cpu-lmcache --connector" stackctl bench recipes/cpu-lmcache.toml --connector \
    --min-over-memcpy 0.3 -o "$OUT/bench-cpu-lmcache"
