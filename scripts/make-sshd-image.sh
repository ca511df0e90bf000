#!/usr/bin/env bash
# Build the fleet test-host image: Debian with sshd, python3 (+ venv) and sudo, key-based root login. Three
# containers of it, each running sshd on its own 127.0.0.1 port with host networking, are the hosts the fleet
# tests roll out to. Built from the local base image (scripts/make-base-image.sh); no image registry needed.
# Idempotent: does nothing when the tag already exists (pass --force to rebuild).
set -euo pipefail

tag="stackctl-test-sshd:latest"
base="${BASE_IMAGE:-debian:bookworm-slim}"
force=0
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        *) tag="$arg" ;;
    esac
done

if [ "$force" = 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "sshd image $tag already present"
    exit 0
fi
if ! docker image inspect "$base" >/dev/null 2>&1; then
    echo "base image $base missing (run scripts/make-base-image.sh first)" >&2
    exit 1
fi

context="$(mktemp -d /var/tmp/stackctl-sshd.XXXXXX)"
trap 'rm -rf "$context"' EXIT

cat >"$context/Dockerfile" <<EOF
FROM $base
RUN apt-get update -q \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
        openssh-server python3 python3-venv sudo \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /run/sshd /root/.ssh \\
 && chmod 700 /root/.ssh \\
 && printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \\
        >/etc/ssh/sshd_config.d/stackctl-test.conf
# The port is chosen per container: docker run ... /usr/sbin/sshd -D -e -p PORT -o ListenAddress=127.0.0.1
CMD ["/usr/sbin/sshd", "-D", "-e", "-p", "2221", "-o", "ListenAddress=127.0.0.1"]
EOF

# No bridge network on this engine: the build uses the host's network.
docker build --network host -t "$tag" "$context"
echo "built $tag"
