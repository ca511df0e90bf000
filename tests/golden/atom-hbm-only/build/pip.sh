#!/usr/bin/env bash
# pip with the site's build inputs, when present: a local wheelhouse and a CA bundle (proxies with TLS inspection).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
args=()
if compgen -G "$here/wheelhouse/*.whl" >/dev/null; then
    args+=(--find-links "$here/wheelhouse")
fi
if [ -s "$here/ca/ca.crt" ]; then
    export PIP_CERT="$here/ca/ca.crt"
fi
exec python -m pip "$@" "${args[@]}"
