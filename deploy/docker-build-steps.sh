#!/usr/bin/env bash
# The Rust build steps of the Dockerfile's builder stage. The Dockerfile RUNs this script, and
# deploy/dockerfile-dry-run.sh runs the same Dockerfile steps without a container engine.
#
#   docker-build-steps.sh deps   In a directory holding the workspace's manifests (Cargo.toml,
#                                crates/*/Cargo.toml) and Cargo.lock only: write a stub for every
#                                target the manifests declare (Cargo rejects a manifest whose
#                                targets are missing) and compile every dependency against the
#                                lock file. Docker caches this layer
#                                until the manifest, the lock file or this script changes.
#   docker-build-steps.sh app    After the real sources are copied over the stubs: mark the
#                                workspace's own sources newer than the stub build (COPY keeps the
#                                files' old modification times, so Cargo would keep the stubs),
#                                rebuild the crate only, check the binaries are the real ones and
#                                put them, stripped, in dist/.
#
# DOCKER_BUILD_PROFILE: release (default) or dev (the no-engine CI run: same steps, cheaper).
set -euo pipefail

profile=${DOCKER_BUILD_PROFILE:-release}
case $profile in
    release) profile_flag=(--release) profile_dir=release ;;
    dev) profile_flag=() profile_dir=debug ;;
    *)
        echo "DOCKER_BUILD_PROFILE must be release or dev, not $profile" >&2
        exit 64
        ;;
esac

die() {
    echo "docker-build-steps: $*" >&2
    exit 1
}

# The workspace's manifests: the root one and every crates/*/Cargo.toml.
manifests() {
    echo Cargo.toml
    local manifest
    for manifest in crates/*/Cargo.toml; do
        [[ -f $manifest ]] && echo "$manifest"
    done
}

# Prints "KIND NAME PATH" for every target of every manifest (declared, else Cargo's default
# src/lib.rs for a package that declares no target; a binary must be declared) and the build
# script if declared, paths relative to the workspace root.
targets() {
    local manifest
    for manifest in $(manifests); do
        package_targets "$manifest" | while read -r kind name path; do
            local dir
            dir=$(dirname "$manifest")
            if [[ $dir == . ]]; then echo "$kind $name $path"; else echo "$kind $name $dir/$path"; fi
        done
    done | sort -u
}

package_targets() {
    awk '
        function flush() {
            if (kind == "") return
            if (path == "") {
                if (kind == "lib") path = "src/lib.rs"
                else if (kind == "bin") path = (name == package) ? "src/main.rs" : "src/bin/" name ".rs"
                else if (kind == "bench") path = "benches/" name ".rs"
                else if (kind == "test") path = "tests/" name ".rs"
                else if (kind == "example") path = "examples/" name ".rs"
            }
            print kind, (name == "" ? package : name), path
            seen[kind] = 1
            kind = ""; name = ""; path = ""
        }
        function value(line) {
            sub(/^[^=]*=[ \t]*/, "", line); sub(/[ \t]*(#.*)?$/, "", line); gsub(/"/, "", line)
            return line
        }
        /^[ \t]*\[/ {
            flush(); table = $0; gsub(/[ \t]/, "", table)
            if (table == "[lib]") kind = "lib"
            else if (table ~ /^\[\[(bin|bench|test|example)\]\]$/) { kind = table; gsub(/[\[\]]/, "", kind) }
            next
        }
        table == "[package]" && /^[ \t]*name[ \t]*=/ { package = value($0) }
        table == "[package]" && /^[ \t]*build[ \t]*=/ { v = value($0); if (v != "false") build = v }
        kind != "" && /^[ \t]*name[ \t]*=/ { name = value($0) }
        kind != "" && /^[ \t]*path[ \t]*=/ { path = value($0) }
        END {
            flush()
            # Cargo`s default library, for a package that declares neither a library nor a binary.
            if (package != "" && !seen["lib"] && !seen["bin"]) print "lib", package, "src/lib.rs"
            if (build != "" && build != "true") print "build", "build-script", build
        }
    ' "$1"
}

# Binary names: the declared [[bin]] targets, else the package name.
bins() {
    targets | awk '$1 == "bin" { print $2 }' | sort -u
}

deps() {
    [[ -f Cargo.toml && -f Cargo.lock ]] || die "deps runs beside Cargo.toml and Cargo.lock"
    [[ -n $(bins) ]] || die "Cargo.toml declares no [[bin]] target"
    local kind name path
    while read -r kind name path; do
        [[ $kind == error ]] && die "$name $path"
        [[ -e $path ]] && continue
        mkdir -p "$(dirname "$path")"
        if [[ $kind == lib ]]; then
            : >"$path"
        else
            echo 'fn main() {}' >"$path"
        fi
    done < <(targets)
    # Compiles every (non-dev) dependency; the stub crate itself is thrown away by `app`.
    cargo build "${profile_flag[@]}" --locked --bins
}

app() {
    local kind name path target_dir bin
    while read -r kind name path; do
        [[ $kind == error ]] && die "$name $path"
        if [[ -e $path ]]; then touch "$path"; fi
    done < <(targets)
    cargo build "${profile_flag[@]}" --locked --bins
    target_dir=${CARGO_TARGET_DIR:-target}
    mkdir -p dist
    for bin in $(bins); do
        cp "$target_dir/$profile_dir/$bin" "dist/$bin"
        if command -v strip >/dev/null; then strip "dist/$bin"; fi
        # A stub `fn main() {}` prints nothing: the real binary names itself.
        "dist/$bin" --version | grep -q "^$bin " || die "dist/$bin is not the real $bin (a stale stub build?)"
        echo "docker-build-steps: dist/$bin ($("dist/$bin" --version))"
    done
}

case ${1:-} in
    deps) deps ;;
    app) app ;;
    targets) targets ;;
    *)
        echo "usage: $0 deps|app|targets" >&2
        exit 64
        ;;
esac
