#!/usr/bin/env bash
# The main job, end to end on a fresh machine: set up, bring the CPU smoke stack up (a real vLLM serving a tiny
# random model, built by stackctl), prove it with doctor, measure cold vs warm TTFT, then prove every KV tier of
# recipes/cpu-tiers.toml against a Ceph RGW it starts. Leaves the stack running;
# `stackctl down cpu-smoke` removes it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup.sh
source scripts/setup.sh
# The KV tiers' storage: a Ceph RGW on 127.0.0.1 (S3), and the disk and fs directories of recipes/cpu-tiers.toml.
# Its test credentials are read before tracing starts, so they never reach the log.
bash scripts/start-ceph-rgw.sh start
set -a
# shellcheck source=/dev/null
source "${STACKCTL_CEPH_DIR:-/tmp/stackctl-ceph}/s3.env"
set +a
mkdir -p /tmp/stackctl-tiers/disk /tmp/stackctl-tiers/fs
set -x
stackctl validate recipes/cpu-smoke.toml
stackctl up recipes/cpu-smoke.toml
stackctl doctor recipes/cpu-smoke.toml
stackctl bench recipes/cpu-smoke.toml --probe --min-speedup 3
# Every KV tier (CPU, disk, fs, S3) stores and returns data through LMCache's own code, in the image.
stackctl validate recipes/cpu-tiers.toml
stackctl build recipes/cpu-tiers.toml
stackctl doctor recipes/cpu-tiers.toml --scope host,image
