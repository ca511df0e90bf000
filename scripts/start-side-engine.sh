#!/usr/bin/env bash
# Start a second Docker engine, NAME, beside the main one (scripts/start-docker.sh), and print its address (a
# DOCKER_HOST value). It has its own socket, data root and exec root, no bridge network and no iptables rules, and it
# runs at the lowest CPU priority (nice 19): every build step and container it runs inherits that.
#
#   bash scripts/start-side-engine.sh hip   # unix:///run/docker-hip.sock, images in /var/lib/docker-hip
#
# CI builds the HIP images on such an engine while the tests run on the main one: the tests that count the main
# engine's containers never meet a build step's container, and the build takes only the CPU the tests leave idle.
set -euo pipefail
name=${1:?usage: $0 NAME}
address="unix:///run/docker-$name.sock"
log="/var/log/stackctl-dockerd-$name.log"
if DOCKER_HOST=$address docker info >/dev/null 2>&1; then
    echo "$address"
    exit 0
fi
command -v dockerd >/dev/null || { echo "dockerd not installed (apt-get install docker.io)" >&2; exit 1; }
mkdir -p /var/log
nohup nice -n 19 dockerd --host "$address" --data-root "/var/lib/docker-$name" --exec-root "/run/docker-$name" \
    --pidfile "/run/docker-$name.pid" --bridge=none --iptables=false >"$log" 2>&1 &
for _ in $(seq 1 60); do
    if DOCKER_HOST=$address docker info >/dev/null 2>&1; then
        echo "$address"
        exit 0
    fi
    sleep 1
done
echo "docker engine $name did not start; see $log" >&2
exit 1
