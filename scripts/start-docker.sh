#!/usr/bin/env bash
# Start a Docker engine when none answers. No bridge network: stackctl runs every container with host networking.
set -euo pipefail
if docker info >/dev/null 2>&1; then
    exit 0
fi
command -v dockerd >/dev/null || { echo "dockerd not installed (apt-get install docker.io)" >&2; exit 1; }
mkdir -p /var/log
nohup dockerd --bridge=none >/var/log/stackctl-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        echo "docker engine started"
        exit 0
    fi
    sleep 1
done
echo "docker engine did not start; see /var/log/stackctl-dockerd.log" >&2
exit 1
