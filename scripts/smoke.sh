#!/usr/bin/env bash
# The main job, end to end on a fresh machine: set up, bring the CPU smoke stack up (a real vLLM serving a tiny
# random model, built by stackctl), prove it with doctor, measure cold vs warm TTFT. Leaves the stack running;
# `stackctl down cpu-smoke` removes it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup.sh
source scripts/setup.sh
set -x
stackctl validate recipes/cpu-smoke.toml
stackctl up recipes/cpu-smoke.toml
stackctl doctor recipes/cpu-smoke.toml
stackctl bench recipes/cpu-smoke.toml --probe --min-speedup 3
