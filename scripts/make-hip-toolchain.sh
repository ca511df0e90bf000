#!/usr/bin/env bash
# Build the HIP toolchain base image locally, without an image registry: Debian sid debootstrapped and imported
# (scripts/make-base-image.sh), then Debian's ROCm packages on top (scripts/hip-toolchain.Dockerfile).
#
#   scripts/make-hip-toolchain.sh               stackctl/hip-toolchain:debian-sid
#   scripts/make-hip-toolchain.sh --test-torch  also the tests' stand-in for a ROCm PyTorch on top of it
#                                               (tests/hip/, stackctl-test/hip-torch-standin:debian-sid)
#
# Each image is labelled with a hash of its inputs; a tag whose label matches is reused, so a machine builds each
# once and again only when its inputs change.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
base="${HIP_TOOLCHAIN_BASE:-debian:sid}"
toolchain="stackctl/hip-toolchain:debian-sid"
standin="stackctl-test/hip-torch-standin:debian-sid"

# build TAG INPUTS_HASH DOCKER_BUILD_ARGS...: docker build unless TAG carries the same inputs label
build() {
    local tag="$1" inputs="$2"
    shift 2
    if [ "$(docker image inspect -f '{{ index .Config.Labels "dev.stackctl.inputs" }}' "$tag" 2>/dev/null)" = "$inputs" ]; then
        echo "$tag already built from these inputs ($inputs)"
        return 0
    fi
    docker build --network host --label "dev.stackctl.inputs=$inputs" -t "$tag" "$@"
    echo "built $tag ($inputs)"
}

SUITE=sid bash "$here/make-base-image.sh" "$base"
toolchain_inputs="$(cat "$here/hip-toolchain.Dockerfile" <(echo "$base") | sha256sum | cut -c1-16)"
build "$toolchain" "$toolchain_inputs" --build-arg "BASE=$base" -f "$here/hip-toolchain.Dockerfile" "$here"
if [ "${1:-}" = "--test-torch" ]; then
    standin_inputs="$(cat "$repo"/tests/hip/Dockerfile "$repo"/tests/hip/*.py <(echo "$toolchain_inputs") \
        | sha256sum | cut -c1-16)"
    build "$standin" "$standin_inputs" --build-arg "TOOLCHAIN=$toolchain" "$repo/tests/hip"
fi
