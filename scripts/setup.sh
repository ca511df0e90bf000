#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine (as root) for stackctl: the Docker engine, debootstrap, a venv with stackctl
# and its test tools, and the local base image. Sourced by .ci/run and scripts/smoke.sh; exports PATH (the venv) and,
# where this machine keeps a local CPU torch wheel, STACKCTL_WHEELHOUSE. Safe to run again.
set -euo pipefail
_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

_log() { printf '\n==> %s\n' "$*"; }

_need_apt=()
command -v dockerd >/dev/null 2>&1 || _need_apt+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || _need_apt+=(debootstrap)
command -v ssh >/dev/null 2>&1 || _need_apt+=(openssh-client)
command -v git >/dev/null 2>&1 || _need_apt+=(git)  # ansible-lint needs git
command -v gcc >/dev/null 2>&1 || _need_apt+=(gcc)
if [ "${#_need_apt[@]}" -gt 0 ]; then
    _log "apt-get install ${_need_apt[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${_need_apt[@]}"
fi

bash "$_repo/scripts/start-docker.sh"

VENV="${STACKCTL_VENV:-$_repo/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    _log "creating $VENV"
    python3 -m venv "$VENV"
fi
_log "pip install -e .[test]"
"$VENV/bin/pip" install -q -e "${_repo}[test]"
export PATH="$VENV/bin:$PATH"

_log "base image debian:bookworm-slim"
bash "$_repo/scripts/make-base-image.sh" debian:bookworm-slim
_log "test host image (sshd) for the fleet tests"
bash "$_repo/scripts/make-sshd-image.sh"

# A local CPU torch wheel (this machine kind keeps one) saves downloading a CUDA torch into CPU images.
if [ -z "${STACKCTL_WHEELHOUSE:-}" ] && ls /opt/wheels/torch-*.whl >/dev/null 2>&1; then
    export STACKCTL_WHEELHOUSE=/opt/wheels
fi
# pip inside image builds must trust what this machine trusts (proxies with TLS inspection).
if [ -z "${STACKCTL_CA_BUNDLE:-}" ] && [ -s /etc/ssl/certs/ca-certificates.crt ]; then
    export STACKCTL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
fi

# The S3 tier's test server: a single-node Ceph RADOS Gateway on 127.0.0.1 (scripts/start-ceph-rgw.sh; the tests
# and scripts/smoke.sh start and stop it).
_need_ceph=()
for _tool in radosgw ceph-mon ceph-osd curl openssl; do
    command -v "$_tool" >/dev/null 2>&1 || _need_ceph+=("$_tool")
done
if [ "${#_need_ceph[@]}" -gt 0 ]; then
    _log "apt-get install radosgw ceph-mon ceph-osd curl openssl"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends radosgw ceph-mon ceph-osd curl openssl
fi
