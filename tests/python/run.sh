#!/usr/bin/env bash
# The Python conformance suite: the official System One SDK (typesafe-sdk,
# sync and async, zstd bodies) against the real proxy binary.
#
#   tests/python/run.sh [PYTEST ARGS...]
#
# Builds the debug binary (or uses $PROXY_BIN), creates the virtual
# environment target/conformance-venv from tests/python/requirements.txt and
# runs pytest. Skips (exit 0) only when python3 itself is missing; anything
# else that goes wrong fails, including a run that collects no tests.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIPPED: python3 is not installed, so the Python conformance suite did not run" >&2
    exit 0
fi

if [ -z "${PROXY_BIN:-}" ]; then
    cargo build --locked --quiet
    export PROXY_BIN="$PWD/target/debug/releasegate"
fi

venv=target/conformance-venv
requirements=tests/python/requirements.txt
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# Reinstall only when the pinned requirements changed.
if ! cmp -s "$requirements" "$venv/installed-requirements.txt"; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/installed-requirements.txt"
fi

export PYTHONDONTWRITEBYTECODE=1
status=0
"$venv/bin/python" -m pytest -p no:cacheprovider -q tests/python "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "FAILED: pytest collected no tests" >&2
    exit 1
fi
exit "$status"
