#!/usr/bin/env bash
# Renders deploy/kubernetes with kustomize and checks every object offline: the Kubernetes
# schemas (kubernetes-validate, pinned in requirements.txt, in a virtual environment under
# the build directory), Pod Security "restricted", and the settings that must agree (check.py).
#
#   deploy/kubernetes/ci/validate.sh [--build-dir DIR]   (default: $CARGO_TARGET_DIR or target)
#
# Skips (exit 0, saying so) only when kubectl or python3 is missing.
set -euo pipefail
cd "$(dirname "$0")/../../.."
build_dir="${CARGO_TARGET_DIR:-target}"
if [ "${1:-}" = "--build-dir" ]; then
    build_dir="$2"
fi

if ! command -v kubectl >/dev/null 2>&1; then
    echo "SKIPPED: kubectl is not installed, so the Kubernetes manifests were not rendered" >&2
    exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIPPED: python3 is not installed, so the Kubernetes manifests were not validated" >&2
    exit 0
fi

mkdir -p "$build_dir"
rendered="$build_dir/kubernetes-rendered.yaml"
kubectl kustomize deploy/kubernetes > "$rendered"

venv="$build_dir/kubernetes-venv"
requirements=deploy/kubernetes/ci/requirements.txt
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$venv/installed-requirements.txt"; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/installed-requirements.txt"
fi
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" deploy/kubernetes/ci/check.py \
    "$rendered" deploy/kubernetes/secret.template.yaml
