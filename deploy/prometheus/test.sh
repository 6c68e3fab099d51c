#!/usr/bin/env bash
# The alerting rules: `promtool check rules` and their unit tests (alerts.test.yaml).
#
#   deploy/prometheus/test.sh [--build-dir DIR]   (default: $CARGO_TARGET_DIR or target)
#
# Uses promtool from PATH; without it, takes promtool out of Debian's `prometheus` package
# (`apt-get download`, unpacked under the build directory: nothing is installed or started).
# Skips (exit 0, saying so) only where neither promtool nor apt-get and dpkg-deb exist.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir="${CARGO_TARGET_DIR:-target}"
if [ "${1:-}" = "--build-dir" ]; then
    build_dir="$2"
fi

promtool="$(command -v promtool || true)"
if [ -z "$promtool" ]; then
    if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
        echo "SKIPPED: neither promtool nor apt-get is available, so the alert rules were not tested" >&2
        exit 0
    fi
    dir="$build_dir/promtool"
    promtool="$dir/root/usr/bin/promtool"
    if [ ! -x "$promtool" ]; then
        mkdir -p "$dir"
        rm -f "$dir"/prometheus_*.deb
        if ! (cd "$dir" && apt-get download prometheus >/dev/null 2>&1); then
            # A machine whose package lists were never fetched.
            apt-get update -qq
            (cd "$dir" && apt-get download prometheus >/dev/null)
        fi
        dpkg-deb -x "$dir"/prometheus_*.deb "$dir/root"
    fi
fi
"$promtool" check rules deploy/prometheus/alerts.yaml
"$promtool" test rules deploy/prometheus/alerts.test.yaml
