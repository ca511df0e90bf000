# shellcheck shell=bash
# Phases of the main job (scripts/smoke.sh) and CI (.ci/run), sourced by them and by scripts/setup.sh: one line per
# phase with its wall time. Installers (apt, pip, debootstrap, image builds) write into one log file, named at the
# start; stackctl's own output stays on the terminal. Each phase is recorded in JOB_PHASES for the job's summary.
#
#   quiet_phase NAME COMMAND...   # output to the log; prints "==> NAME ... 12 s" (on failure: the log's tail)
#   shown_phase NAME COMMAND...   # output on the terminal (and in the log); prints "==> NAME", the output, "12 s";
#                                 # LAST_PHASE_OUTPUT then names a file holding that output
#   skip_phase NAME REASON        # a phase with nothing to do: "==> NAME: REASON"
#   background_phase NAME COMMAND...  # starts it now, beside the phases that follow (its output to a log of its
#                                     # own); `await_phase NAME` waits for it and records its wall time, start to end
#
# STACKCTL_JOB_LOG names the log (default /tmp/stackctl-job.log); the first script to source this file starts it.

if [ -z "${JOB_STARTED:-}" ]; then
    JOB_STARTED=$SECONDS
    STACKCTL_JOB_LOG=${STACKCTL_JOB_LOG:-/tmp/stackctl-job.log}
    : > "$STACKCTL_JOB_LOG"
    JOB_OUTPUT_DIR="${STACKCTL_JOB_LOG%.log}-phases"
    rm -rf "$JOB_OUTPUT_DIR" && mkdir -p "$JOB_OUTPUT_DIR"
    JOB_PHASES=()
    BACKGROUND_PHASES=()
    printf 'Installer output (apt, pip, debootstrap, image builds) goes to %s\n' "$STACKCTL_JOB_LOG"
fi

_phase_record() {  # NAME STARTED
    local seconds=$((SECONDS - $2))
    JOB_PHASES+=("$(printf '%5d s  %s' "$seconds" "$1")")
    LAST_PHASE_SECONDS=$seconds
}

_phase_failed() {  # NAME STATUS STARTED
    printf 'FAILED (exit %d after %d s)\n' "$2" $((SECONDS - $3))
    printf -- '--- last 40 lines of %s ---\n' "$STACKCTL_JOB_LOG"
    tail -n 40 "$STACKCTL_JOB_LOG" | sed 's/^/    /'
    printf '%s failed; full output: %s\n' "$1" "$STACKCTL_JOB_LOG"
}

quiet_phase() {
    local name=$1 started=$SECONDS status=0
    shift
    printf '==> %s ... ' "$name"
    printf '\n==> %s: %s\n' "$name" "$*" >> "$STACKCTL_JOB_LOG"
    "$@" >> "$STACKCTL_JOB_LOG" 2>&1 < /dev/null || status=$?
    if [ "$status" -ne 0 ]; then
        _phase_failed "$name" "$status" "$started"
        return "$status"
    fi
    _phase_record "$name" "$started"
    printf '%d s\n' "$LAST_PHASE_SECONDS"
}

shown_phase() {
    local name=$1 started=$SECONDS status=0
    shift
    LAST_PHASE_OUTPUT="$JOB_OUTPUT_DIR/$((${#JOB_PHASES[@]} + 1)).out"
    printf '\n==> %s: %s\n' "$name" "$*" | tee -a "$STACKCTL_JOB_LOG"
    "$@" 2>&1 < /dev/null | tee "$LAST_PHASE_OUTPUT" | tee -a "$STACKCTL_JOB_LOG" || status=${PIPESTATUS[0]}
    if [ "$status" -ne 0 ]; then
        printf '%s failed (exit %d after %d s); full output: %s\n' "$name" "$status" $((SECONDS - started)) \
            "$STACKCTL_JOB_LOG"
        return "$status"
    fi
    _phase_record "$name" "$started"
    printf '%s: %d s\n' "$name" "$LAST_PHASE_SECONDS"
}

background_phase() {
    local name=$1 log
    shift
    log="$JOB_OUTPUT_DIR/background-$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '-').log"
    printf '==> %s: started in the background (output: %s)\n' "$name" "$log"
    printf '\n==> %s: %s (in the background: output in %s)\n' "$name" "$*" "$log" >> "$STACKCTL_JOB_LOG"
    (
        started=$(date +%s) status=0
        "$@" > "$log" 2>&1 < /dev/null || status=$?
        printf '%d %d\n' "$status" $(($(date +%s) - started)) > "$log.done"
    ) &
    BACKGROUND_PHASES+=("$name=$!=$log")
}

await_phase() {  # NAME: wait for the background phase, then print and record it as quiet_phase does
    local entry pid="" log="" status seconds
    for entry in "${BACKGROUND_PHASES[@]}"; do
        if [ "${entry%%=*}" = "$1" ]; then
            pid=${entry#*=}
            log=${pid#*=}
            pid=${pid%%=*}
        fi
    done
    printf '==> %s (in the background) ... ' "$1"
    wait "$pid" || true
    read -r status seconds < "$log.done"
    cat "$log" >> "$STACKCTL_JOB_LOG"
    if [ "$status" -ne 0 ]; then
        printf 'FAILED (exit %d after %d s)\n' "$status" "$seconds"
        printf -- '--- last 40 lines of %s ---\n' "$log"
        tail -n 40 "$log" | sed 's/^/    /'
        return "$status"
    fi
    JOB_PHASES+=("$(printf '%5d s  %s (in the background)' "$seconds" "$1")")
    printf '%d s\n' "$seconds"
}

skip_phase() {
    printf '==> %s: %s\n' "$1" "$2"
    JOB_PHASES+=("$(printf '%5s    %s (%s)' "-" "$1" "$2")")
}

print_phases() {  # the phase table, then the total
    printf '  %s\n' "${JOB_PHASES[@]}"
    printf '  %5d s  total\n' $((SECONDS - JOB_STARTED))
}
