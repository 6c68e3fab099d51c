#!/usr/bin/env bash
# Bounded loopback load test: the local upstream directly, then the proxy with
# a full_native contract and with a WCPQ contract in front of it, side by side
# in one run.
# Writes the figures to docs/benchmarks.md (section "Proxy overhead").
# Not part of CI. Usage: benches/load.sh [seconds] [connections]
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-10}"
CONNECTIONS="${2:-32}"
ROUNDS="${ROUNDS:-3}"   # variants alternate in every round; the best round of each is reported
UP_PORT=18081; PROXY_PORT=18080; ADMIN_PORT=18090
OUT=bench-out; mkdir -p "$OUT"

if ! command -v wrk >/dev/null 2>&1; then
  echo "installing wrk from Debian's packages" >&2
  (apt-get update -qq && apt-get install -y -qq wrk) >/dev/null
fi
cargo build --release --locked --bin releasegate --example fixed_upstream

KEY=load-test-key
KEY_SHA=$(printf %s "$KEY" | target/release/releasegate hash-key)
mkconfig() { # $1 = contract body appended to the questions table
  cat <<TOML
[server]
listen = "127.0.0.1:$PROXY_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
[providers.up]
kind = "systemone"
base_url = "http://127.0.0.1:$UP_PORT"
timeout_ms = 5000
max_concurrency = 256
[[recipients]]
name = "load"
key_sha256 = "$KEY_SHA"
contracts = ["load"]
[contracts.load]
provider = "up"
[contracts.load.questions.coarse_cause]
classes = ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"]
$1
TOML
}

cat > "$OUT/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
wrk.body = '{"model":"jev-latest","state":{"note":"parcel late"},"questions":{"coarse_cause":{"type":"choice","criteria":{"DELAY":null,"ADDRESS":null,"DAMAGE":null,"DELIVERY_RECORD":null}}}}'
LUA

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
target/release/examples/fixed_upstream "127.0.0.1:$UP_PORT" 2>/dev/null & pids+=($!)
sleep 0.5

run_wrk() { # $1 = label, $2 = url
  timeout $((DURATION + 30)) wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$OUT/post.lua" "$2" > "$OUT/$1.txt"
  local rps p50 p99
  rps=$(awk '/Requests\/sec/ {print $2}' "$OUT/$1.txt")
  p50=$(awk '$1=="50%" {print $2}' "$OUT/$1.txt")
  p99=$(awk '$1=="99%" {print $2}' "$OUT/$1.txt")
  echo "$1 $rps $p50 $p99"
}

results=()
# Each variant: name and contract lines for the coarse_cause question.
CODEBOOK="$PWD/config/codebooks/delivery-coarse_cause.json"
VARIANTS=(
  "full_native|view = \"full_native\""
  "wcpq|view = \"full_native\"
mechanism = { kind = \"wcpq\", codebook = \"$CODEBOOK\" }
workflows = {}"
)
if [ -n "${EXTRA_VARIANTS:-}" ]; then IFS=';' read -ra extra <<< "$EXTRA_VARIANTS"; VARIANTS+=("${extra[@]}"); fi
for variant in "${VARIANTS[@]}"; do
  name="${variant%%|*}"; body="${variant#*|}"
  mkconfig "$body" > "$OUT/$name.toml"
done
for round in $(seq "$ROUNDS"); do
  results+=("$(run_wrk upstream "http://127.0.0.1:$UP_PORT/v1/systemone")")
  for variant in "${VARIANTS[@]}"; do
    name="${variant%%|*}"
    target/release/releasegate serve --config "$OUT/$name.toml" 2>/dev/null & proxy=$!
    pids+=($proxy)
    for _ in $(seq 50); do curl -fs "127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
    results+=("$(run_wrk "proxy-$name" "http://127.0.0.1:$PROXY_PORT/v1/systemone")")
    kill "$proxy"; wait "$proxy" 2>/dev/null || true
  done
done
# Keep the best round (highest requests/s) of each target.
mapfile -t results < <(printf '%s\n' "${results[@]}" | sort -k1,1 -k2,2gr | awk '!seen[$1]++' | sort -k2,2gr)
base_rps=$(printf '%s\n' "${results[@]}" | awk '$1=="upstream" {print $2}')
{
  echo "## Proxy overhead (loopback, wrk)"
  echo
  echo "Measured $(date -u +%Y-%m-%d) on $(nproc) cores with \`benches/load.sh $DURATION $CONNECTIONS\`:"
  echo "wrk 1 thread, $CONNECTIONS connections, ${DURATION} s per target, $ROUNDS alternating rounds"
  echo "(best round kept), client, proxy and upstream sharing the same cores, one request shape"
  echo "(one 4-class choice question)."
  echo
  echo "| target | requests/s | p50 | p99 | throughput vs. upstream direct |"
  echo "|---|---|---|---|---|"
  for row in "${results[@]}"; do
    read -r label rps p50 p99 <<< "$row"
    ratio=$(awk -v a="$rps" -v b="$base_rps" 'BEGIN { printf "%.2f", a / b }')
    echo "| $label | $rps | $p50 | $p99 | $ratio |"
  done
} > "$OUT/overhead.md"
cat "$OUT/overhead.md"
