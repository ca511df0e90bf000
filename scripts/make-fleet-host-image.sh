#!/usr/bin/env bash
# Build the image of the fleet test hosts that run stacks: Debian with sshd, python3 (+ venv), sudo and a Docker
# engine of its own (Debian's docker.io). A container of it is a machine: privileged, in a network namespace of its
# own (tests/integration/fleet_hosts.py gives it an address on a veth pair), its engine's data root on a host
# directory (overlay2 needs a real filesystem under it), sshd on port 22 of its own address. So every host serves the
# same port, as in a real fleet, and an image reaches a host only the way stackctl ships it. Built from the local
# base image (scripts/make-base-image.sh); no image registry needed. Idempotent: does nothing when the tag exists
# with the same inputs (pass --force to rebuild).
set -euo pipefail

tag="stackctl-test-fleet-host:latest"
base="${BASE_IMAGE:-debian:bookworm-slim}"
force=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        *) tag="$arg" ;;
    esac
done

inputs="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
if [ "$force" = 0 ] && [ "$(docker image inspect -f '{{ index .Config.Labels "dev.stackctl.inputs" }}' "$tag" \
        2>/dev/null)" = "$inputs" ]; then
    echo "fleet host image $tag already built from these inputs ($inputs)"
    exit 0
fi
if ! docker image inspect "$base" >/dev/null 2>&1; then
    echo "base image $base missing (run scripts/make-base-image.sh first)" >&2
    exit 1
fi

context="$(mktemp -d /var/tmp/stackctl-fleet-host.XXXXXX)"
trap 'rm -rf "$context"' EXIT

# The host's boot: its engine in the background (no bridge and no iptables: the host's one interface is the veth the
# tests give it; a registry is trusted through /etc/docker/certs.d, as on a site's hosts), then sshd in the foreground.
# Not --privileged (this machine's root lacks CAP_SYS_RESOURCE, which it asks for): the tests add every other
# capability and a private cgroup namespace, and the host mounts its own cgroup hierarchies writable here, where its
# engine puts its containers (docker mounts them read-only).
cat >"$context/boot.sh" <<'EOF'
#!/bin/sh
set -e
mkdir -p /run/sshd /var/log
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    umount /sys/fs/cgroup && mount -t cgroup2 cgroup /sys/fs/cgroup
else
    for hierarchy in /sys/fs/cgroup/*/; do
        name=$(basename "$hierarchy")
        options=$name
        [ "$name" = systemd ] && options=none,name=systemd
        umount "$hierarchy" 2>/dev/null || true
        mount -t cgroup -o "$options" cgroup "$hierarchy"
    done
fi
dockerd --bridge=none --iptables=false --ip6tables=false --data-root /var/lib/docker >/var/log/dockerd.log 2>&1 &
exec /usr/sbin/sshd -D -e
EOF

cat >"$context/Dockerfile" <<EOF
FROM $base
RUN apt-get update -q \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
        openssh-server python3 python3-venv sudo docker.io iproute2 ca-certificates curl \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /run/sshd /root/.ssh \\
 && chmod 700 /root/.ssh \\
 && printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \\
        >/etc/ssh/sshd_config.d/stackctl-test.conf
COPY boot.sh /usr/local/sbin/stackctl-fleet-host-boot
RUN chmod 755 /usr/local/sbin/stackctl-fleet-host-boot
LABEL dev.stackctl.inputs="$inputs"
CMD ["/usr/local/sbin/stackctl-fleet-host-boot"]
EOF

# No bridge network on this engine: the build uses the host's network.
docker build --network host -t "$tag" "$context"
echo "built $tag ($inputs)"
