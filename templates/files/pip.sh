#!/usr/bin/env bash
# pip with the site's build inputs, when present: a local wheelhouse, an index (PIP_INDEX_URL) and a CA bundle
# (proxies with TLS inspection). `install` goes through uv when the venv has it (CPU images install it first), with
# the same inputs and, like pip, the bytecode compiled at build time so the server does not compile it at start.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
args=()
if compgen -G "$here/wheelhouse/*.whl" >/dev/null; then
    args+=(--find-links "$here/wheelhouse")
fi
if [ -s "$here/ca/ca.crt" ]; then
    export PIP_CERT="$here/ca/ca.crt" SSL_CERT_FILE="$here/ca/ca.crt"
fi
python="$(command -v python)"
uv="$(dirname "$python")/uv"
if [ "${1:-}" = install ] && [ -x "$uv" ]; then
    shift
    if [ -n "${PIP_INDEX_URL:-}" ]; then
        args+=(--index-url "$PIP_INDEX_URL")
    fi
    exec "$uv" pip install --python "$python" --no-cache --compile-bytecode "$@" "${args[@]}"
fi
exec python -m pip "$@" "${args[@]}"
