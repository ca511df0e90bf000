#!/usr/bin/env bash
# Build the HIP toolchain base image locally, without an image registry: Debian sid debootstrapped and imported
# (scripts/make-base-image.sh), then Debian's ROCm packages on top (scripts/hip-toolchain.Dockerfile).
#
#   scripts/make-hip-toolchain.sh               stackctl/hip-toolchain:debian-sid
#   scripts/make-hip-toolchain.sh --test-torch  also the tests' stand-in for a ROCm PyTorch on top of it
#                                               (tests/hip/, stackctl-test/hip-torch-standin:debian-sid)
#   scripts/make-hip-toolchain.sh --kernels     also (implies --test-torch) the kernel tests' image on the stand-in:
#                                               SPIR-V tools, PoCL, and the hipified sources of the LMCache release
#                                               the test recipe builds (tests/hip/kernels/, stackctl-test/hip-kernels:
#                                               debian-sid)
#   scripts/make-hip-toolchain.sh --refresh-pins  rebuild the images asked for from Debian sid as it is now and
#                                               write their package versions into scripts/hip-toolchain.pins
#
# Each image is labelled with a hash of its inputs; a tag whose label matches is reused, so a machine builds each
# once and again only when its inputs change. Each image built or reused is then held to the package versions of
# scripts/hip-toolchain.pins (scripts/hip_pins.py): sid moves daily, and a toolchain that moved with it is refused.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
base="${HIP_TOOLCHAIN_BASE:-debian:sid}"
toolchain="stackctl/hip-toolchain:debian-sid"
standin="stackctl-test/hip-torch-standin:debian-sid"
kernels="stackctl-test/hip-kernels:debian-sid"
with_standin=false with_kernels=false refresh_pins=false
for arg in "$@"; do
    case "$arg" in
        --test-torch) with_standin=true ;;
        --kernels) with_standin=true with_kernels=true ;;
        --refresh-pins) refresh_pins=true ;;
        *) echo "usage: $0 [--test-torch] [--kernels] [--refresh-pins]" >&2; exit 2 ;;
    esac
done

# build TAG PINS_IMAGE INPUTS_HASH DOCKER_BUILD_ARGS...: docker build unless TAG carries the same inputs label, then
# hold TAG to the pins of PINS_IMAGE (or, with --refresh-pins, build afresh and write them from TAG)
build() {
    local tag="$1" pins_image="$2" inputs="$3"
    shift 3
    if $refresh_pins; then
        docker build --no-cache --network host --label "dev.stackctl.inputs=$inputs" -t "$tag" "$@"
        python3 "$here/hip_pins.py" refresh "$tag" "$pins_image"
        return 0
    fi
    if [ "$(docker image inspect -f '{{ index .Config.Labels "dev.stackctl.inputs" }}' "$tag" 2>/dev/null)" = "$inputs" ]; then
        echo "$tag already built from these inputs ($inputs)"
    else
        docker build --network host --label "dev.stackctl.inputs=$inputs" -t "$tag" "$@"
        echo "built $tag ($inputs)"
    fi
    python3 "$here/hip_pins.py" check "$tag" "$pins_image"
}

SUITE=sid bash "$here/make-base-image.sh" "$base"
toolchain_inputs="$(cat "$here/hip-toolchain.Dockerfile" <(echo "$base") | sha256sum | cut -c1-16)"
build "$toolchain" toolchain "$toolchain_inputs" --build-arg "BASE=$base" -f "$here/hip-toolchain.Dockerfile" "$here"
if $with_standin; then
    standin_inputs="$(cat "$repo"/tests/hip/Dockerfile "$repo"/tests/hip/*.py <(echo "$toolchain_inputs") \
        | sha256sum | cut -c1-16)"
    build "$standin" test-torch "$standin_inputs" --build-arg "TOOLCHAIN=$toolchain" "$repo/tests/hip"
fi
if $with_kernels; then
    # The LMCache release the test recipe builds; the kernel tests mount their driver, so only these inputs count.
    lmcache="$(sed -n 's/^lmcache = "\(.*\)"$/\1/p' "$repo/tests/hip/rocm-build-check-gfx942.toml")"
    kernels_inputs="$(cat "$repo"/tests/hip/kernels/Dockerfile "$repo"/tests/hip/kernels/hipify_lmcache.py \
        <(echo "$lmcache $standin_inputs") | sha256sum | cut -c1-16)"
    context="$(mktemp -d)"
    trap 'rm -rf "$context"' EXIT
    cp "$repo"/tests/hip/kernels/Dockerfile "$repo"/tests/hip/kernels/hipify_lmcache.py "$context/"
    # The sdist download inside the build trusts what this machine trusts (as scripts/setup.sh does for pip).
    ca_bundle="${STACKCTL_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
    if [ -s "$ca_bundle" ]; then cp "$ca_bundle" "$context/ca.crt"; else : > "$context/ca.crt"; fi
    # --force-rm: a failed step leaves no container behind (the tests count leftover containers).
    build "$kernels" kernels "$kernels_inputs" --force-rm --build-arg "STANDIN=$standin" \
        --build-arg "LMCACHE_VERSION=$lmcache" "$context"
fi
