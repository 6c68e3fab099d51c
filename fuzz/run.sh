#!/usr/bin/env bash
# Builds the fuzz targets once (nightly, libFuzzer, the instrumentation cargo-fuzz uses, no
# sanitizer) and runs each for a bounded time, one at a time on a single job.
#
#   fuzz/run.sh [TARGET|all] [SECONDS]
#
# SECONDS defaults to $FUZZ_SECONDS, else 20 (0: build only). Each run starts from the committed seeds
# (fuzz/corpus/TARGET, never written) plus what earlier runs here found
# (fuzz/target/corpus/TARGET); a crash, a failed assertion, a timeout or running out of
# memory leaves its input under fuzz/target/artifacts/TARGET/ and fails the script. Without a
# nightly toolchain it says so and does nothing. FUZZ_PROFILE=dev builds the lightly
# optimized profile (a shorter cold build, fewer runs per second; CI's choice) instead of
# release. FUZZ_TARGET_DIR overrides the build directory (fuzz/target). Extra libFuzzer
# options may follow in FUZZ_ARGS.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

all=(json plain_request upstream_answer multipart release)
target="${1:-all}"
seconds="${2:-${FUZZ_SECONDS:-20}}"
case "$target" in
    all) targets=("${all[@]}") ;;
    *)
        if [[ ! " ${all[*]} " == *" $target "* ]]; then
            echo "usage: fuzz/run.sh [${all[*]// /|}|all] [SECONDS]" >&2
            exit 64
        fi
        targets=("$target")
        ;;
esac

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "note: no nightly toolchain (cargo +nightly): the fuzz targets are not run" >&2
    exit 0
fi

# The flags cargo-fuzz passes (without its default address sanitizer), for the host triple
# only, so that build scripts and procedural macros are not instrumented.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$here/target}"
host="$(rustc +nightly -vV | sed -n 's/^host: //p')"
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
profile="${FUZZ_PROFILE:-release}"
case "$profile" in
    release) out=release ;;
    dev) out=debug ;;
    *)
        echo "error: FUZZ_PROFILE is release or dev, not $profile" >&2
        exit 64
        ;;
esac
cargo +nightly build --locked --profile "$profile" --target "$host" "${bins[@]}"
if [[ "$seconds" == 0 ]]; then
    exit 0
fi

# The largest input each target takes (bytes).
max_len() {
    case "$1" in
        upstream_answer | multipart) echo 16384 ;;
        *) echo 4096 ;;
    esac
}

failed=()
for t in "${targets[@]}"; do
    work="$CARGO_TARGET_DIR/corpus/$t"
    artifacts="$CARGO_TARGET_DIR/artifacts/$t"
    mkdir -p "$work" "$artifacts"
    echo "== fuzz $t: ${seconds}s"
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of options.
    if ! "$CARGO_TARGET_DIR/$host/$out/$t" "$work" "corpus/$t" \
        -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1 \
        ${FUZZ_ARGS:-} 2>"$CARGO_TARGET_DIR/$t.log"; then
        failed+=("$t")
        tail -n 40 "$CARGO_TARGET_DIR/$t.log" >&2
    fi
    grep -E '^(#[0-9]+[[:space:]]+DONE|Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb)' \
        "$CARGO_TARGET_DIR/$t.log" || true
done
if ((${#failed[@]})); then
    echo "error: fuzz findings in: ${failed[*]} (inputs under $CARGO_TARGET_DIR/artifacts/)" >&2
    exit 1
fi
