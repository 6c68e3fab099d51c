#!/usr/bin/env bash
# The JS conformance suite: the official JS SDK (@typesafe-ai/sdk, pinned in
# tests/js/package-lock.json) against the real proxy binary, under node's own
# test runner.
#
#   tests/js/run.sh [NODE TEST ARGS...]
#
# Builds the debug binary (or uses $PROXY_BIN), installs the SDK with `npm ci`
# into tests/js/node_modules (never committed) and runs node --test. Skips
# (exit 0) only when node itself is missing; anything else that goes wrong
# fails, including npm being absent or a run that finds no tests.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v node >/dev/null 2>&1; then
    echo "SKIPPED: node is not installed, so the JS conformance suite did not run" >&2
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "FAILED: node is installed but npm is not; install npm to run the JS suite" >&2
    exit 1
fi

if [ -z "${PROXY_BIN:-}" ]; then
    cargo build --locked --quiet
    export PROXY_BIN="$PWD/target/debug/releasegate"
fi

suite=tests/js
# Reinstall only when the lock file changed.
if ! cmp -s "$suite/package-lock.json" "$suite/node_modules/.installed-lock.json"; then
    npm ci --prefix "$suite" --no-audit --no-fund --loglevel=error
    cp "$suite/package-lock.json" "$suite/node_modules/.installed-lock.json"
fi

# Loopback traffic must not go through a proxy configured for the machine.
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
output=$(mktemp)
trap 'rm -f "$output"' EXIT
status=0
node --test --test-reporter=spec "$@" "$suite"/*.test.mjs 2>&1 | tee "$output" || status=$?
if ! grep -Eq '^ℹ tests [1-9]' "$output"; then
    echo "FAILED: node --test ran no tests" >&2
    exit 1
fi
exit "$status"
