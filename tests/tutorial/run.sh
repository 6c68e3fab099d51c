#!/usr/bin/env bash
# docs/tutorial.md, run as written: every ```sh block of it, in order, in one bash in an empty
# directory, against a stand-in for the team's model on loopback (fake_provider.py: it writes
# the team's cases and answers System One with the key in $LENDER_KEY). The only changes: the
# debug binary is `releasegate` on PATH, and free ports replace the tutorial's 8080 and 9090.
#
#   tests/tutorial/run.sh
#
# Uses $PROXY_BIN (default target/debug/releasegate, built when missing). Skips (exit 0) only
# when python3 or curl is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

for tool in python3 curl; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIPPED: $tool is not installed, so docs/tutorial.md did not run" >&2
        exit 0
    fi
done
if [ -z "${PROXY_BIN:-}" ]; then
    [ -x target/debug/releasegate ] || cargo build --locked --quiet
    PROXY_BIN=target/debug/releasegate
fi
[ -x "$PROXY_BIN" ] || { echo "FAILED: $PROXY_BIN is not an executable" >&2; exit 1; }
PROXY_BIN=$(cd "$(dirname "$PROXY_BIN")" && pwd)/$(basename "$PROXY_BIN")

work=$(mktemp -d "${TMPDIR:-/tmp}/releasegate-tutorial.XXXXXX")
provider=
cleanup() {
    [ -n "$provider" ] && kill "$provider" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/bin" "$work/run"
ln -s "$PROXY_BIN" "$work/bin/releasegate"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
public=$(free_port)
admin=$(free_port)

# The team's model and its cases.
export LENDER_KEY=tutorial-provider-key
python3 tests/tutorial/fake_provider.py serve "$work/port" &
provider=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { echo "FAILED: the fake provider did not start" >&2; exit 1; }
export PROVIDER_URL="http://127.0.0.1:$(cat "$work/port")"
python3 tests/tutorial/fake_provider.py cases "$work/run/cases.jsonl" 120

# The tutorial's sh blocks, ports replaced.
python3 - "$repo/docs/tutorial.md" "$public" "$admin" >"$work/tutorial.sh" <<'PY'
import re
import sys

text = open(sys.argv[1]).read()
blocks = re.findall(r"^```sh\n(.*?)^```$", text, flags=re.S | re.M)
assert blocks, "docs/tutorial.md has no sh block"
script = "\n".join(blocks)
print(script.replace("8080", sys.argv[2]).replace("9090", sys.argv[3]))
PY
echo "tutorial: $(grep -c '^```sh' docs/tutorial.md) blocks, provider $PROVIDER_URL, ports $public/$admin"
started=$(date +%s)
# RELEASEGATE_* variables in the caller's environment would be configuration: none passes.
(
    cd "$work/run"
    for name in $(env | grep -o '^RELEASEGATE_[A-Z0-9_]*' || true); do unset "$name"; done
    PATH="$work/bin:$PATH" bash -euo pipefail -x "$work/tutorial.sh"
) >"$work/log" 2>&1 || {
    status=$?
    cat "$work/log" >&2
    echo "FAILED: docs/tutorial.md (exit $status); its output is above" >&2
    exit 1
}
grep -q 'certificate: certificates/contract-triage.json' "$work/log" ||
    { cat "$work/log" >&2; echo "FAILED: the gate wrote no certificate" >&2; exit 1; }
[ -z "${TUTORIAL_VERBOSE:-}" ] || cat "$work/log"
echo "tutorial: OK in $(($(date +%s) - started)) s (certified, served, answered)"
