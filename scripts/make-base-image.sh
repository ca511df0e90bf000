#!/usr/bin/env bash
# Build a Debian base image locally with debootstrap and `docker import` it under the tag a user
# would otherwise pull (default debian:bookworm-slim). For machines that reach Debian's package
# archive but no image registry. Idempotent: does nothing when the tag already exists.
set -euo pipefail

tag="${1:-debian:bookworm-slim}"
suite="${SUITE:-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base image $tag already present"
    exit 0
fi

rootfs="$(mktemp -d /var/tmp/stackctl-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT

debootstrap --variant=minbase --include=ca-certificates "$suite" "$rootfs" "$mirror"
# Keep the image small and apt usable, as the official slim images do.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import \
    --change 'CMD ["bash"]' \
    --change 'ENV LANG=C.UTF-8' \
    - "$tag"
echo "imported $tag"
