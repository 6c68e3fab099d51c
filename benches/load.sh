#!/usr/bin/env bash
# Bounded loopback load test, side by side in one run: the local upstream
# directly, nginx `proxy_pass` (Debian's package, the reference proxy) and
# releasegate with `choice`, `full_native` and WCPQ contracts in front of the
# same upstream. Reports requests/s, latency and CPU per request (utime+stime
# from /proc, divided by the requests served) for both proxies, and RSS.
#
# Logging is compared like with like: the main section runs every target in
# both modes, alternating, in one run:
#   files  both proxies write their access logs to files in bench-out/ (the
#          same filesystem), batched the same way: nginx `buffer=16k
#          flush=100ms`, the proxy's own batching (16 KiB or 100 ms);
#   off    nginx `access_log off`, the proxy `access_log = false`.
# The other sections run with access logs to files.
#
# Sections (SECTIONS="main latency questions codebooks" by default):
#   main       one 4-class choice question, ROUNDS alternating rounds of both
#              logging modes, best round of each target kept
#   latency    an upstream that sleeps 20 ms, 64 connections: added p50/p99
#   questions  CPU per request with 1, 8 and 64 questions per request
#   codebooks  WCPQ CPU per request with codebooks of denominator 10, 20, 40
#   shapes     (not by default) realistic requests, WCPQ on every choice question, the
#              contract pinning each question's text, an SDK's headers
#              (benches/shapes.py): one question; one question with its text as the
#              SDK sends it; four questions (three WCPQ, one score); eight WCPQ
#              questions; one question with a 12 KB state. ROUNDS alternating rounds
#              of nginx and the proxy in both logging modes, best round kept, each
#              shape against its target (1.5x nginx's CPU for one question, 2x else)
#   overhead   (not by default) the proxy's own time per request
#              (`releasegate_overhead_seconds`, read from /metrics before and after)
#              at fixed request rates (wrk paced by a per-connection delay), p50, p99
#              and p99.9 beside CPU per request
#   instructions  (not by default) user-space instructions per request under
#              callgrind, nginx and the three contracts, then nginx and the proxy
#              on each shape of `shapes`: deterministic, for comparing code
#              changes where timings are noise
#
# Not part of CI. Every loop is bounded; all processes stop on exit.
# Usage: benches/load.sh [seconds] [connections]   (env: ROUNDS, SECTIONS)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-8}"
CONNECTIONS="${2:-32}"
ROUNDS="${ROUNDS:-3}"
SECTIONS="${SECTIONS:-main latency questions codebooks}"
UP_PORT=18081; PROXY_PORT=18080; ADMIN_PORT=18090; NGINX_PORT=18082; NGINX_OFF_PORT=18083
OUT="$PWD/bench-out"; mkdir -p "$OUT"; rm -f "$OUT"/*access.log
TICK=$(getconf CLK_TCK)

need() { # $1 = command, $2 = Debian package
  command -v "$1" >/dev/null 2>&1 && return
  echo "installing $2 from Debian's packages" >&2
  (apt-get update -qq && apt-get install -y -qq "$2") >/dev/null
}
need wrk wrk
need nginx nginx-light
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
cargo build --release --locked --bin releasegate --example fixed_upstream
RG=target/release/releasegate

KEY=load-test-key
KEY_SHA=$(printf %s "$KEY" | $RG hash-key)
CODEBOOK="$PWD/config/codebooks/delivery-coarse_cause.json"
LABELS='"DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"'

ids() { # $1 = question count: the ids fixed_upstream answers
  if [ "$1" = 1 ]; then echo coarse_cause; else seq 0 $(($1 - 1)) | sed 's/^/q/'; fi
}

mkconfig() { # $1 = question count, $2 = variant (choice|full_native|wcpq), $3 = codebook, $4 = logging (files|off)
  cat <<TOML
[server]
listen = "127.0.0.1:$PROXY_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
access_log = $( [ "${4:-files}" = off ] && echo false || echo true )
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
TOML
  for id in $(ids "$1"); do
    echo "[contracts.load.questions.$id]"
    echo "classes = [$LABELS]"
    case "$2" in
      choice) echo 'view = "choice"' ;;
      full_native) echo 'view = "full_native"' ;;
      wcpq) echo 'view = "full_native"'
            echo "mechanism = { kind = \"wcpq\", codebook = \"$3\", fallback = \"native\" }"
            echo 'workflows = { preset = "tuple-bench" }' ;;
    esac
  done
}

mklua() { # $1 = question count
  local questions="" sep=""
  for id in $(ids "$1"); do
    questions+="$sep\"$id\":{\"type\":\"choice\",\"criteria\":{\"DELAY\":null,\"ADDRESS\":null,\"DAMAGE\":null,\"DELIVERY_RECORD\":null}}"
    sep=","
  done
  cat <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
wrk.body = '{"model":"jev-latest","state":{"note":"parcel late"},"questions":{$questions}}'
LUA
}

mknginx() { # $1 = logging (files|off), $2 = port
  local log="access_log $OUT/nginx-access.log combined buffer=16k flush=100ms;"
  [ "$1" = off ] && log="access_log off;"
  cat <<NGINX
worker_processes auto;
pid $OUT/nginx-$1.pid;
error_log $OUT/nginx-error.log warn;
events { worker_connections 4096; }
http {
  $log
  # Request bodies stay in memory, as the proxy holds them (the default 16 KiB buffer
  # writes a 12 KB request with its headers to a temporary file).
  client_body_buffer_size 1m;
  upstream up { server 127.0.0.1:$UP_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$2;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
NGINX
}
mknginx files "$NGINX_PORT" > "$OUT/nginx-files.conf"
mknginx off "$NGINX_OFF_PORT" > "$OUT/nginx-off.conf"

UP_PID=""; PROXY_PID=""; NGINX_PID=""; NGINX_OFF_PID=""
# Stops processes: TERM, at most 15 s of grace (the proxy drains), then KILL.
stop() {
  local p i
  for p in "$@"; do
    [ -n "$p" ] || continue
    kill "$p" 2>/dev/null || continue
    for i in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  return 0
}
cleanup() { set +e; stop "$PROXY_PID" "$UP_PID" "$NGINX_PID" "$NGINX_OFF_PID"; return 0; }
trap cleanup EXIT

start_upstream() { # $1 = questions or @answer-file, $2 = delay ms
  stop "$UP_PID"
  target/release/examples/fixed_upstream "127.0.0.1:$UP_PORT" "$1" "$2" 2>/dev/null & UP_PID=$!
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$UP_PORT") 2>/dev/null && break; sleep 0.1; done
}
start_proxy() { # $1 = config file; its access log (if on) goes to a file, like nginx's
  stop "$PROXY_PID"
  $RG serve --config "$1" 2>>"$OUT/releasegate-access.log" & PROXY_PID=$!
  for _ in $(seq 100); do curl -fs "127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "the proxy did not become ready with $1" >&2; exit 1
}
start_nginx() { # both nginx instances: access log to a file (NGINX_PORT) and off (NGINX_OFF_PORT)
  if [ -z "$NGINX_PID" ]; then
    "$NGINX" -p "$OUT" -c "$OUT/nginx-files.conf" -g 'daemon off;' & NGINX_PID=$!
  fi
  if [ -z "$NGINX_OFF_PID" ]; then
    "$NGINX" -p "$OUT" -c "$OUT/nginx-off.conf" -g 'daemon off;' & NGINX_OFF_PID=$!
  fi
  for port in "$NGINX_PORT" "$NGINX_OFF_PORT"; do
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  done
}
# The processes of a target: nginx is its master and workers.
pids_of() { # $1 = proxy kind
  case "$1" in
    nginx) echo "$NGINX_PID" $(pgrep -P "$NGINX_PID" || true) ;;
    nginx-off) echo "$NGINX_OFF_PID" $(pgrep -P "$NGINX_OFF_PID" || true) ;;
    releasegate) echo "$PROXY_PID" ;;
    *) echo "" ;;
  esac
}
# CPU ticks of the processes, utime and stime apart: "user system".
cpu_split() { local u=0 s=0 p pu ps; for p in "$@"; do read -r pu ps < <(awk '{print $14, $15}' "/proc/$p/stat"); u=$((u + pu)); s=$((s + ps)); done; echo "$u $s"; }
rss_mib() { local total=0 p; for p in "$@"; do total=$((total + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status"))); done; awk -v k="$total" 'BEGIN { printf "%.1f", k / 1024 }'; }
to_ms() { awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000; printf "%.2f", n }'; }

# Runs wrk against one target; prints "label rps p50_ms p99_ms cpu_us_per_request rss_mib",
# and writes the CPU per request split into user and system time ("user_us sys_us") to
# $OUT/<label>.split.
measure() { # $1 = label, $2 = url, $3 = lua, $4 = connections, $5 = proxy kind (nginx|nginx-off|releasegate|none)
  local pids before after file="$OUT/$1.txt"
  pids=$(pids_of "$5")
  before=$( [ -n "$pids" ] && cpu_split $pids || echo "0 0")
  timeout $((DURATION + 30)) wrk -t1 -c"$4" -d"${DURATION}s" --latency -s "$3" "$2" > "$file"
  after=$( [ -n "$pids" ] && cpu_split $pids || echo "0 0")
  local requests rps p50 p99 cpu user system rss="-"
  requests=$(awk '/requests in/ {print $1}' "$file")
  if grep -q -e 'Non-2xx' -e 'Socket errors' "$file"; then
    echo "$1: wrk counted failed requests: $(grep -e 'Non-2xx' -e 'Socket errors' "$file" | tr -s ' ')" >&2
  fi
  rps=$(awk '/Requests\/sec/ {printf "%.0f", $2}' "$file")
  p50=$(to_ms "$(awk '$1=="50%" {print $2}' "$file")")
  p99=$(to_ms "$(awk '$1=="99%" {print $2}' "$file")")
  if [ -n "$pids" ]; then
    read -r cpu user system < <(awk -v a="$before" -v b="$after" -v hz="$TICK" -v n="$requests" 'BEGIN {
      split(a, x, " "); split(b, y, " "); u = (y[1] - x[1]) / hz / n * 1e6; s = (y[2] - x[2]) / hz / n * 1e6
      printf "%.1f %.1f %.1f\n", u + s, u, s }')
    echo "$user $system" > "$OUT/$1.split"
    rss=$(rss_mib $pids)
  else
    cpu="-"
  fi
  echo "$1 $rps $p50 $p99 $cpu $rss"
}

# Keeps the best round (highest requests/s) of each label, in first-seen order.
best() { awk '{ if (!($1 in rps) || $2 > rps[$1]) { rps[$1] = $2; row[$1] = $0 } if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } } END { for (i = 1; i <= n; i++) print row[order[i]] }'; }

section_main() {
  local lua="$OUT/q1.lua" rows=() v mode
  mklua 1 > "$lua"
  for mode in files off; do
    for v in choice full_native wcpq; do mkconfig 1 "$v" "$CODEBOOK" "$mode" > "$OUT/main-$v-$mode.toml"; done
  done
  start_upstream 1 0
  start_nginx
  start_proxy "$OUT/main-full_native-files.toml"
  local idle_rss; idle_rss=$(rss_mib "$PROXY_PID")
  for _ in $(seq "$ROUNDS"); do
    rows+=("$(measure upstream "http://127.0.0.1:$UP_PORT/v1/systemone" "$lua" "$CONNECTIONS" none)")
    for mode in files off; do
      if [ "$mode" = files ]; then
        rows+=("$(measure nginx-files "http://127.0.0.1:$NGINX_PORT/v1/systemone" "$lua" "$CONNECTIONS" nginx)")
      else
        rows+=("$(measure nginx-off "http://127.0.0.1:$NGINX_OFF_PORT/v1/systemone" "$lua" "$CONNECTIONS" nginx-off)")
      fi
      for v in choice full_native wcpq; do
        start_proxy "$OUT/main-$v-$mode.toml"
        rows+=("$(measure "releasegate-$v-$mode" "http://127.0.0.1:$PROXY_PORT/v1/systemone" "$lua" "$CONNECTIONS" releasegate)")
      done
    done
  done
  local table; table=$(printf '%s\n' "${rows[@]}" | best)
  {
    echo "### Side by side: one 4-class choice question, access logs to files and off"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M') UTC, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores,"
    echo "\`benches/load.sh $DURATION $CONNECTIONS\`: wrk 1 thread, $CONNECTIONS connections, ${DURATION} s per target,"
    echo "$ROUNDS alternating rounds of both logging modes (best round of each target kept)."
    echo
    echo "| target | logging | requests/s | p50 | p99 | CPU per request | RSS under load | requests/s vs. nginx | CPU vs. nginx |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for mode in files off; do
      local nginx_rps nginx_cpu
      nginx_rps=$(awk -v l="nginx-$mode" '$1==l {print $2}' <<< "$table")
      nginx_cpu=$(awk -v l="nginx-$mode" '$1==l {print $5}' <<< "$table")
      while read -r label rps p50 p99 cpu rss; do
        case "$label" in
          upstream) [ "$mode" = files ] || continue; local shown=upstream ;;
          *-"$mode") local shown=${label%-"$mode"} ;;
          *) continue ;;
        esac
        local r c
        r=$(awk -v a="$rps" -v b="$nginx_rps" 'BEGIN { printf "%.2f", a / b }')
        c=$( [ "$cpu" = "-" ] && echo "-" || awk -v a="$cpu" -v b="$nginx_cpu" 'BEGIN { printf "%.2f", a / b }')
        local logged=$mode; [ "$shown" = upstream ] && logged="-"
        echo "| $shown | $logged | $rps | $p50 ms | $p99 ms | ${cpu} µs | ${rss} MiB | $r | $c |"
      done <<< "$table"
    done
    echo
    echo "Targets: CPU per request ≤ 2.00× nginx's and requests/s ≥ 0.60× nginx's, in both modes:"
    echo
    for mode in files off; do
      local nginx_rps nginx_cpu
      nginx_rps=$(awk -v l="nginx-$mode" '$1==l {print $2}' <<< "$table")
      nginx_cpu=$(awk -v l="nginx-$mode" '$1==l {print $5}' <<< "$table")
      for v in choice full_native wcpq; do
        awk -v l="releasegate-$v-$mode" -v nr="$nginx_rps" -v nc="$nginx_cpu" -v m="$mode" -v v="$v" \
          '$1==l { r = $2 / nr; c = $5 / nc; printf "- %s, logs %s: CPU %.2f×, requests/s %.2f× (%s)\n", v, m, c, r, (c <= 2.0 && r >= 0.6) ? "met" : "NOT met" }' <<< "$table"
      done
    done
    echo
    echo "releasegate RSS at idle (just started, \`full_native\`): $idle_rss MiB."
    echo
  } | tee "$OUT/main.md"
}

section_latency() {
  local lua="$OUT/q1.lua" rows=()
  mklua 1 > "$lua"
  mkconfig 1 full_native "" > "$OUT/latency.toml"
  start_upstream 1 20
  start_nginx
  start_proxy "$OUT/latency.toml"
  rows+=("$(measure slow-upstream "http://127.0.0.1:$UP_PORT/v1/systemone" "$lua" 64 none)")
  rows+=("$(measure slow-nginx "http://127.0.0.1:$NGINX_PORT/v1/systemone" "$lua" 64 nginx)")
  rows+=("$(measure slow-releasegate "http://127.0.0.1:$PROXY_PORT/v1/systemone" "$lua" 64 releasegate)")
  local base50 base99
  base50=$(awk '{print $3; exit}' <<< "${rows[0]}")
  base99=$(awk '{print $4; exit}' <<< "${rows[0]}")
  {
    echo "### Added latency in front of a 20 ms upstream (64 connections)"
    echo
    echo "| target | requests/s | p50 | p99 | added p50 | added p99 | CPU per request |"
    echo "|---|---|---|---|---|---|---|"
    local row
    for row in "${rows[@]}"; do
      read -r label rps p50 p99 cpu _ <<< "$row"
      echo "| $label | $rps | $p50 ms | $p99 ms | $(awk -v a="$p50" -v b="$base50" 'BEGIN { printf "%.2f", a - b }') ms | $(awk -v a="$p99" -v b="$base99" 'BEGIN { printf "%.2f", a - b }') ms | ${cpu} µs |"
    done
    echo
  } | tee "$OUT/latency.md"
}

section_questions() {
  local rows=() n v
  start_nginx
  for n in 1 8 64; do
    mklua "$n" > "$OUT/q$n.lua"
    start_upstream "$n" 0
    rows+=("$(measure "nginx-q$n" "http://127.0.0.1:$NGINX_PORT/v1/systemone" "$OUT/q$n.lua" "$CONNECTIONS" nginx)")
    for v in full_native wcpq; do
      mkconfig "$n" "$v" "$CODEBOOK" > "$OUT/q$n-$v.toml"
      start_proxy "$OUT/q$n-$v.toml"
      rows+=("$(measure "releasegate-$v-q$n" "http://127.0.0.1:$PROXY_PORT/v1/systemone" "$OUT/q$n.lua" "$CONNECTIONS" releasegate)")
    done
  done
  {
    echo "### CPU per request by questions per request"
    echo
    echo "| target | questions | requests/s | p50 | p99 | CPU per request | CPU per answer |"
    echo "|---|---|---|---|---|---|---|"
    local row
    for row in "${rows[@]}"; do
      read -r label rps p50 p99 cpu _ <<< "$row"
      n=${label##*-q}
      echo "| ${label%-q*} | $n | $rps | $p50 ms | $p99 ms | ${cpu} µs | $(awk -v c="$cpu" -v n="$n" 'BEGIN { printf "%.1f", c / n }') µs |"
    done
    echo
  } | tee "$OUT/questions.md"
}

section_codebooks() {
  local rows=() d worlds="$OUT/worlds.jsonl"
  [ -f "$worlds" ] || $RG simulate --pairs-per-domain 240 --seed 0 --out "$worlds" >/dev/null 2>&1
  mklua 1 > "$OUT/q1.lua"
  start_upstream 1 0
  for d in 10 20 40; do
    local cb="$OUT/codebook-d$d.json"
    [ -f "$cb" ] || $RG build-codebook --config config/releasegate.toml --contract planner \
      --question coarse_cause --worlds "$worlds" --out "$cb" --denominator "$d" --pool grid+training >/dev/null 2>&1
    local size; size=$(grep -o '"codeword_count":[0-9]*' "$cb" | cut -d: -f2)
    mkconfig 1 wcpq "$cb" > "$OUT/codebook-d$d.toml"
    start_proxy "$OUT/codebook-d$d.toml"
    rows+=("$(measure "wcpq-d$d" "http://127.0.0.1:$PROXY_PORT/v1/systemone" "$OUT/q1.lua" "$CONNECTIONS" releasegate) $size $(rss_mib "$PROXY_PID")")
  done
  {
    echo "### WCPQ CPU per request by codebook size"
    echo
    echo "| codebook | codewords | requests/s | p50 | p99 | CPU per request | RSS after load |"
    echo "|---|---|---|---|---|---|---|"
    local row
    for row in "${rows[@]}"; do
      read -r label rps p50 p99 cpu _ size rss <<< "$row"
      echo "| denominator ${label#wcpq-d} | $size | $rps | $p50 ms | $p99 ms | ${cpu} µs | $rss MiB |"
    done
    echo
  } | tee "$OUT/codebooks.md"
}

section_shapes() {
  local rows=() shapes=() name target bytes mode r
  while read -r name target bytes; do shapes+=("$name:$target:$bytes"); done < <(
    python3 benches/shapes.py "$OUT" "$PROXY_PORT" "$ADMIN_PORT" "$UP_PORT" "$KEY" "$KEY_SHA" "$CODEBOOK")
  start_nginx
  for r in $(seq "$ROUNDS"); do
    for s in "${shapes[@]}"; do
      name=${s%%:*}
      start_upstream "@$OUT/shape-$name.answer.json" 0
      for mode in files off; do
        local port=$NGINX_PORT kind=nginx
        [ "$mode" = off ] && port=$NGINX_OFF_PORT && kind=nginx-off
        rows+=("$(measure "nginx-$name-$mode" "http://127.0.0.1:$port/v1/systemone" "$OUT/shape-$name.lua" "$CONNECTIONS" "$kind") $(cat "$OUT/nginx-$name-$mode.split")")
        start_proxy "$OUT/shape-$name-$mode.toml"
        if ! curl -fs -o /dev/null -X POST -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
            --data-binary @<(awk 'sub(/^wrk.body = \[==\[/, "") { sub(/\]==\]$/, ""); print }' "$OUT/shape-$name.lua") \
            "http://127.0.0.1:$PROXY_PORT/v1/systemone"; then
          echo "the proxy refused the $name shape" >&2; exit 1
        fi
        rows+=("$(measure "releasegate-$name-$mode" "http://127.0.0.1:$PROXY_PORT/v1/systemone" "$OUT/shape-$name.lua" "$CONNECTIONS" releasegate) $(cat "$OUT/releasegate-$name-$mode.split")")
      done
    done
  done
  local table; table=$(printf '%s\n' "${rows[@]}" | best)
  {
    echo "### Request shapes: WCPQ on every choice question, pinned text, an SDK's headers"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M') UTC, $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores,"
    echo "\`ROUNDS=$ROUNDS SECTIONS=shapes benches/load.sh $DURATION $CONNECTIONS\`: wrk 1 thread, $CONNECTIONS connections, ${DURATION} s per target,"
    echo "best of $ROUNDS alternating rounds of each target."
    echo
    echo "CPU per request from \`/proc/PID/stat\`, with its user and system time (utime, stime) in parentheses."
    echo
    echo "| shape | body | logging | nginx CPU per request | proxy CPU per request | CPU vs. nginx | requests/s vs. nginx | proxy p99 | target |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for s in "${shapes[@]}"; do
      IFS=: read -r name target bytes <<< "$s"
      for mode in files off; do
        awk -v n="nginx-$name-$mode" -v p="releasegate-$name-$mode" -v shape="$name" -v b="$bytes" -v m="$mode" -v t="$target" '
          $1 == n { nr = $2; nc = $5; nu = $7; ns = $8 } $1 == p { pr = $2; pc = $5; p99 = $4; pu = $7; ps = $8 }
          END { c = pc / nc; r = pr / nr
                printf "| %s | %d B | %s | %.1f µs (%.1f + %.1f) | %.1f µs (%.1f + %.1f) | %.2f× | %.2f× | %s ms | CPU ≤ %.1f×, requests/s ≥ 0.6×: %s |\n",
                  shape, b, m, nc, nu, ns, pc, pu, ps, c, r, p99, t, (c <= t && r >= 0.6) ? "met" : "**NOT met**" }' <<< "$table"
      done
    done
    echo
  } | tee "$OUT/shapes.md"
}

# The histogram's quantile (Prometheus' linear interpolation within a bucket) from
# two scrapes of /metrics: the requests served between them.
overhead_quantiles() { # $1, $2 = scrape files; prints "p50 p99 p99.9 count" in µs
  awk '
    /^releasegate_overhead_seconds_bucket/ {
      match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
      v = $NF; if (FNR == NR) { a[le] += v } else { b[le] += v; if (!(le in seen)) { seen[le] = 1; order[++n] = le } }
    }
    END {
      total = b["+Inf"] - a["+Inf"]; split("0.5 0.99 0.999", q, " ")
      for (i = 1; i <= 3; i++) {
        rank = q[i] * total; prev_le = 0; prev_c = 0
        for (j = 1; j <= n; j++) {
          le = order[j]; c = b[le] - a[le]
          if (c >= rank) {
            if (le == "+Inf") { out = out sprintf("%s ", ">" prev_le * 1e6) }
            else { out = out sprintf("%.0f ", (prev_le + (le - prev_le) * (c == prev_c ? 1 : (rank - prev_c) / (c - prev_c))) * 1e6) }
            break
          }
          prev_le = le; prev_c = c
        }
      }
      printf "%s%d\n", out, total
    }' "$1" "$2"
}

section_overhead() {
  local rows=() rate name mode=off
  python3 benches/shapes.py "$OUT" "$PROXY_PORT" "$ADMIN_PORT" "$UP_PORT" "$KEY" "$KEY_SHA" "$CODEBOOK" >/dev/null
  for name in one four; do
    start_upstream "@$OUT/shape-$name.answer.json" 0
    start_proxy "$OUT/shape-$name-$mode.toml"
    for rate in 1000 5000 unpaced; do
      # 32 connections, each waiting 32000/rate ms between requests: at most `rate`
      # requests/s; `unpaced` sends as fast as the proxy answers.
      cp "$OUT/shape-$name.lua" "$OUT/paced.lua"
      [ "$rate" = unpaced ] || echo "function delay() return $((32000 / rate)) end" >> "$OUT/paced.lua"
      curl -fs "127.0.0.1:$ADMIN_PORT/metrics" > "$OUT/metrics-before.txt"
      local row; row=$(measure "overhead-$name-$rate" "http://127.0.0.1:$PROXY_PORT/v1/systemone" "$OUT/paced.lua" 32 releasegate)
      curl -fs "127.0.0.1:$ADMIN_PORT/metrics" > "$OUT/metrics-after.txt"
      rows+=("$row $(overhead_quantiles "$OUT/metrics-before.txt" "$OUT/metrics-after.txt")")
    done
  done
  {
    echo "### The proxy's own time per request (\`releasegate_overhead_seconds\`), access logs off"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M') UTC, $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores,"
    echo "\`SECTIONS=overhead benches/load.sh $DURATION\`: wrk 1 thread, 32 connections, paced by a per-connection delay (the last rate unpaced)."
    echo
    echo "| shape | requests/s | overhead p50 | p99 | p99.9 | wrk p50 | wrk p99 | CPU per request |"
    echo "|---|---|---|---|---|---|---|---|"
    local row
    for row in "${rows[@]}"; do
      read -r label rps p50 p99 cpu _ o50 o99 o999 _ <<< "$row"
      name=${label#overhead-}; name=${name%-*}
      echo "| $name | $rps | $o50 µs | $o99 µs | $o999 µs | $p50 ms | $p99 ms | ${cpu} µs |"
    done
    echo
  } | tee "$OUT/overhead.md"
}

# User-space instructions per request under callgrind: deterministic to about 0.1 %
# where CPU time on a shared machine is not, so it shows a code change's effect that
# timing noise hides. Counts only user space (no system calls, no scheduling), all
# threads of one process; under valgrind SHA-256 takes its software path (valgrind
# hides the CPU's SHA extensions), a few thousand instructions the native run does not
# spend. nginx runs as one process (`master_process off`), both with access logs off.
callgrind_count() { # $1 = label, $2 = url, $3 = lua, $4 = command...; prints "label requests instructions/request"
  local label=$1 url=$2 lua=$3 out="$OUT/callgrind-$1.out" pid n total
  shift 3
  rm -f "$out" "$out".*
  valgrind --tool=callgrind --callgrind-out-file="$out" "$@" 2>"$OUT/callgrind-$label.log" >/dev/null & pid=$!
  for _ in $(seq 600); do curl -fs -o /dev/null "127.0.0.1:$ADMIN_PORT/readyz" 2>/dev/null && break
    (exec 3<>"/dev/tcp/${url#http://}") 2>/dev/null && [ "${label%%-*}" = nginx ] && break; sleep 0.1; done
  timeout 60 wrk -t1 -c8 -d3s -s "$lua" "$url/v1/systemone" >/dev/null   # warm-up, not counted
  callgrind_control -z "$pid" >/dev/null 2>&1
  timeout 60 wrk -t1 -c8 -d6s -s "$lua" "$url/v1/systemone" > "$OUT/callgrind-$label.txt"
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 1
  stop "$pid"
  n=$(awk '/requests in/ {print $1}' "$OUT/callgrind-$label.txt")
  total=$(callgrind_annotate "$out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  echo "$label $n $((total / n))"
}

section_instructions() {
  need valgrind valgrind
  local rows=() shape_rows=() v name nginx_conf="$OUT/nginx-callgrind.conf"
  local nginx_cmd=("$NGINX" -p "$OUT" -c "$nginx_conf" -g 'daemon off; master_process off;')
  mklua 1 > "$OUT/q1.lua"
  mknginx off "$NGINX_OFF_PORT" | sed 's/^worker_processes auto;/worker_processes 1;/' > "$nginx_conf"
  stop "$NGINX_PID" "$NGINX_OFF_PID" "$PROXY_PID"; NGINX_PID=""; NGINX_OFF_PID=""; PROXY_PID=""
  start_upstream 1 0
  rows+=("$(callgrind_count nginx "http://127.0.0.1:$NGINX_OFF_PORT" "$OUT/q1.lua" "${nginx_cmd[@]}")")
  for v in choice full_native wcpq; do
    mkconfig 1 "$v" "$CODEBOOK" off > "$OUT/main-$v-off.toml"
    rows+=("$(callgrind_count "releasegate-$v" "http://127.0.0.1:$PROXY_PORT" "$OUT/q1.lua" $RG serve --config "$OUT/main-$v-off.toml")")
  done
  # The shapes of `SECTIONS=shapes`, each against its own nginx count: a larger body
  # costs nginx more too.
  while read -r name _; do
    start_upstream "@$OUT/shape-$name.answer.json" 0
    shape_rows+=("$(callgrind_count "nginx-$name" "http://127.0.0.1:$NGINX_OFF_PORT" "$OUT/shape-$name.lua" "${nginx_cmd[@]}")")
    shape_rows+=("$(callgrind_count "releasegate-$name" "http://127.0.0.1:$PROXY_PORT" "$OUT/shape-$name.lua" $RG serve --config "$OUT/shape-$name-off.toml")")
  done < <(python3 benches/shapes.py "$OUT" "$PROXY_PORT" "$ADMIN_PORT" "$UP_PORT" "$KEY" "$KEY_SHA" "$CODEBOOK")
  local base; base=$(awk '{print $3; exit}' <<< "${rows[0]}")
  {
    echo "### User-space instructions per request (callgrind, access logs off)"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M') UTC, $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'): \`SECTIONS=instructions benches/load.sh\`, wrk 1 thread, 8 connections, 6 s counted after a 3 s warm-up."
    echo
    echo "| target | requests counted | instructions per request | vs. nginx |"
    echo "|---|---|---|---|"
    local row label n per
    for row in "${rows[@]}"; do
      read -r label n per <<< "$row"
      echo "| $label | $n | $per | $(awk -v a="$per" -v b="$base" 'BEGIN { printf "%.2f", a / b }') |"
    done
    echo
    echo "The shapes of \`SECTIONS=shapes\` (nginx counted on each):"
    echo
    echo "| shape | nginx | proxy | vs. nginx |"
    echo "|---|---|---|---|"
    local nginx_per
    for row in "${shape_rows[@]}"; do
      read -r label n per <<< "$row"
      case "$label" in
        nginx-*) nginx_per=$per ;;
        *) echo "| ${label#releasegate-} | $nginx_per | $per | $(awk -v a="$per" -v b="$nginx_per" 'BEGIN { printf "%.2f", a / b }') |" ;;
      esac
    done
    echo
  } | tee "$OUT/instructions.md"
}

for section in $SECTIONS; do "section_$section"; done
