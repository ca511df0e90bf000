#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine (as root) for stackctl: the Docker engine, debootstrap, a venv with stackctl
# and its test tools, the local base image, the Ceph packages of the S3 tier's test server, and `stackctl` on PATH.
# Sourced by scripts/smoke.sh and .ci/run; exports PATH (the venv) and, where this machine keeps a local CPU torch
# wheel, STACKCTL_WHEELHOUSE. One line per phase with its time; the installers' output goes to $STACKCTL_JOB_LOG
# (scripts/phases.sh). Safe to run again: a phase with nothing to do says so.
#
# STACKCTL_VENV: the venv (default: .venv in the repository). STACKCTL_BIN_LINK: the `stackctl` put on PATH
# (default /usr/local/bin/stackctl, a symlink into the venv; "none" leaves PATH alone).
set -euo pipefail
_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/phases.sh
source "$_repo/scripts/phases.sh"

_apt_install() {  # apt-get install, quietly (its output goes to the job's log)
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

_need_apt=()
command -v dockerd >/dev/null 2>&1 || _need_apt+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || _need_apt+=(debootstrap)
command -v git >/dev/null 2>&1 || _need_apt+=(git)  # ansible-lint needs git
command -v gcc >/dev/null 2>&1 || _need_apt+=(gcc)
for _tool in curl openssl; do
    command -v "$_tool" >/dev/null 2>&1 || _need_apt+=("$_tool")
done
if [ "${#_need_apt[@]}" -gt 0 ]; then
    quiet_phase "setup: apt-get install ${_need_apt[*]}" _apt_install "${_need_apt[@]}"
else
    skip_phase "setup: apt packages" "docker.io, debootstrap, git, gcc, curl, openssl present"
fi
# The S3 tier's test server: a single-node Ceph RADOS Gateway on 127.0.0.1 (scripts/start-ceph-rgw.sh). Each of
# these tools is its own Debian package; they install in the background, beside the venv and the base image (the
# longest step of the install), and are awaited at the end of the set-up.
_need_ceph=()
for _tool in radosgw ceph-mon ceph-osd; do
    command -v "$_tool" >/dev/null 2>&1 || _need_ceph+=("$_tool")
done
_ceph_phase=""
if [ "${#_need_ceph[@]}" -gt 0 ]; then
    _ceph_phase="setup: apt-get install ${_need_ceph[*]}"
    background_phase "$_ceph_phase" _apt_install "${_need_ceph[@]}"
else
    skip_phase "setup: Ceph packages" "radosgw, ceph-mon, ceph-osd present"
fi

quiet_phase "setup: Docker engine (dockerd --bridge=none)" bash "$_repo/scripts/start-docker.sh"

# The base image (debootstrap: Debian's mirror and the disk) is made beside the venv (pip: PyPI and the CPU), so a
# fresh machine waits for the longer of the two, not both.
_base_phase="setup: base image debian:bookworm-slim (debootstrap + docker import)"
if docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
    skip_phase "setup: base image debian:bookworm-slim" "present"
    _base_phase=""
else
    background_phase "$_base_phase" bash "$_repo/scripts/make-base-image.sh" debian:bookworm-slim
fi

VENV="${STACKCTL_VENV:-$_repo/.venv}"
# pip installs uv (the version the CPU images install with, from compat.toml), and uv installs stackctl and its
# test tools: the same versions pip resolves, in about a third of pip's time on a machine with no pip cache. It
# trusts the machine's certificate store (--system-certs), where pip reads its own settings.
_uv_version="$(sed -n 's/^cpu_uv = "\([^"]*\)".*/\1/p' "$_repo/stackctl/knowledge/compat.toml")"
_make_venv() {
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "uv==${_uv_version:?no cpu_uv in stackctl/knowledge/compat.toml}"
    "$VENV/bin/uv" pip install -q --system-certs --python "$VENV/bin/python" -e "${_repo}[test]"
}
quiet_phase "setup: venv $VENV with stackctl and its test tools" _make_venv
export PATH="$VENV/bin:$PATH"
[ -z "$_base_phase" ] || await_phase "$_base_phase"
[ -z "$_ceph_phase" ] || await_phase "$_ceph_phase"

# `stackctl` for the shell that ran this (README: `stackctl down cpu-smoke`), not only inside the venv.
STACKCTL_BIN_LINK=${STACKCTL_BIN_LINK:-/usr/local/bin/stackctl}
if [ "$STACKCTL_BIN_LINK" = none ]; then
    skip_phase "setup: stackctl on PATH" "STACKCTL_BIN_LINK=none: use $VENV/bin/stackctl"
elif [ -e "$STACKCTL_BIN_LINK" ] && [ ! -L "$STACKCTL_BIN_LINK" ]; then
    skip_phase "setup: stackctl on PATH" "$STACKCTL_BIN_LINK is another program's file, left alone"
else
    quiet_phase "setup: $STACKCTL_BIN_LINK -> $VENV/bin/stackctl" \
        ln -sfn "$VENV/bin/stackctl" "$STACKCTL_BIN_LINK"
fi

# A local CPU torch wheel (this machine kind keeps one) saves downloading a CUDA torch into CPU images.
if [ -z "${STACKCTL_WHEELHOUSE:-}" ] && ls /opt/wheels/torch-*.whl >/dev/null 2>&1; then
    export STACKCTL_WHEELHOUSE=/opt/wheels
fi
# pip inside image builds must trust what this machine trusts (proxies with TLS inspection).
if [ -z "${STACKCTL_CA_BUNDLE:-}" ] && [ -s /etc/ssl/certs/ca-certificates.crt ]; then
    export STACKCTL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
fi
