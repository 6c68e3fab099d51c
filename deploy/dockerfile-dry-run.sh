#!/usr/bin/env bash
# Runs the Dockerfile without a container engine (CI has none): the build context is the
# repository minus .dockerignore, each stage gets its own root directory, and the instructions
# are carried out in order on this machine, with these differences:
#
#   - the builder stage's RUN steps run on the host toolchain instead of the base image's
#     (they call deploy/docker-build-steps.sh, so they are the steps the image runs);
#   - RUN steps of later stages (apt-get in the Debian runtime image) are only listed;
#   - absolute paths map into the stage's root directory.
#
# On top of what `docker build` would check, it requires that no dependency is compiled after
# the full source tree is copied (the dependency layer really caches the compiled dependencies),
# and it runs the final image's binary with the image's environment: its CMD with nothing
# mounted must fail, saying where to mount a configuration; with the Kubernetes ConfigMap's
# configuration mounted at the path CMD names, `check-config` must accept it and keep the
# file's own `listen` (the image sets no RELEASEGATE_* variable that would override it).
#
#   deploy/dockerfile-dry-run.sh [--profile release|dev] [--build-dir DIR]
#
#   --profile dev   Build the dev profile instead of release (DOCKER_BUILD_PROFILE): the same
#                   steps at a fraction of the cost (CI).
#   --build-dir DIR Cargo's build directory (intermediate artifacts) for the emulated builds,
#                   e.g. the repository's `target` after `cargo test`: the dependencies compiled
#                   there are reused, and only the crate itself is compiled (twice: the stub,
#                   then the real sources). Without it the builder starts from nothing, as in a
#                   fresh `docker build`. Final artifacts always stay in the emulated stage.
#
# Instructions it does not know (ARG, ADD, ONBUILD, ...) are errors, so the emulation never
# silently differs from the Dockerfile.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
profile=release
build_dir=
while (($#)); do
    case $1 in
        --profile) profile=${2:?--profile needs release or dev}; shift 2 ;;
        --build-dir) build_dir=$(cd "${2:?--build-dir needs a directory}" && pwd); shift 2 ;;
        *) echo "usage: $0 [--profile release|dev] [--build-dir DIR]" >&2; exit 64 ;;
    esac
done
case $profile in
    release) profile_dir=release ;;
    dev) profile_dir=debug ;;
    *) echo "--profile must be release or dev" >&2; exit 64 ;;
esac

say() { echo "dockerfile-dry-run: $*"; }
die() { echo "dockerfile-dry-run: $*" >&2; exit 1; }

# A fixed place (inside target/, which git and .dockerignore leave out): the crate's artifact
# names depend on its path, so a fixed path lets repeated runs reuse them instead of piling up.
work=$repo/target/dockerfile-dry-run
if [[ -n $build_dir ]]; then
    # The emulated workspace holds the repository's crates at another path, and cargo names
    # a workspace crate's artifacts by its path relative to the workspace: in a shared build
    # directory their fingerprints then list the emulated copy's files, and the repository's
    # next build would take its own changed sources for fresh. Forget them on the way out
    # (the dependencies stay built).
    trap 'rm -rf "$build_dir/$profile_dir/.fingerprint/"releasegate*' EXIT
fi
rm -rf "$work"
mkdir -p "$work/context"
touch "$work/started"

# --- the build context -------------------------------------------------------------------
excludes=()
if [[ -f $repo/.dockerignore ]]; then
    while IFS= read -r pattern || [[ -n $pattern ]]; do
        pattern=${pattern%%#*}
        pattern=$(echo "$pattern" | xargs)
        [[ -z $pattern ]] && continue
        [[ $pattern == *'!'* || $pattern == *'**'* ]] && die ".dockerignore pattern '$pattern' is not supported here"
        excludes+=("--exclude=./${pattern#/}")
    done <"$repo/.dockerignore"
fi
# tar keeps modification times, as COPY does.
(cd "$repo" && tar -c "${excludes[@]}" .) | (cd "$work/context" && tar -x)

# --- the Dockerfile, one logical line at a time -------------------------------------------
instructions=()
line=
while IFS= read -r raw || [[ -n $raw ]]; do
    if [[ -z $line && ($raw =~ ^[[:space:]]*# || $raw =~ ^[[:space:]]*$) ]]; then continue; fi
    if [[ $raw =~ ^(.*)\\[[:space:]]*$ ]]; then
        line+="${BASH_REMATCH[1]} "
        continue
    fi
    [[ $raw =~ ^[[:space:]]*# ]] && continue # a comment inside a continued instruction
    line+=$raw
    instructions+=("$line")
    line=
done <"$repo/Dockerfile"
[[ -z $line ]] || die "the Dockerfile ends inside a continued line"

declare -A stage_roots=()
stage=-1
root=
cwd=/
stage_env=()
snapshot= # dependency artifacts when the whole context was copied into the builder
deps_dir=
entrypoint=()
cmd=()

# Maps an image path (absolute, or relative to WORKDIR) into the stage's root.
in_stage() {
    local path=$1
    [[ $path == /* ]] || path=${cwd%/}/$path
    echo "$root$path"
}

# "name mtime" of every compiled dependency artifact (the crate's own excluded).
dependency_artifacts() {
    [[ -d $deps_dir ]] || return 0
    find "$deps_dir" -maxdepth 1 -type f ! -name '*releasegate*' -printf '%f %T@\n' | sort
}

# Parses a JSON array of plain strings (["a", "b"]) into the named array.
json_array() {
    local -n out=$1
    local text=$2
    [[ $text =~ ^\[(.*)\]$ ]] || die "expected a JSON array, got $text"
    out=()
    local item
    while IFS= read -r item; do
        [[ -z $item ]] && continue
        [[ $item =~ ^\"([^\"\\]*)\"$ ]] || die "unsupported array item $item"
        out+=("${BASH_REMATCH[1]}")
    done < <(echo "${BASH_REMATCH[1]}" | sed 's/",[[:space:]]*"/"\n"/g; s/^[[:space:]]*//; s/[[:space:]]*$//')
}

end_stage() {
    if ((stage == 0)) && [[ -n $snapshot ]]; then
        local after
        after=$(dependency_artifacts)
        local changed
        changed=$(comm -13 <(echo "$snapshot") <(echo "$after") | cut -d' ' -f1)
        [[ -z $changed ]] || die "dependencies were compiled after the sources were copied (the dependency layer caches nothing for them):
$changed"
        say "no dependency was compiled after the sources were copied"
    fi
}

for instruction in "${instructions[@]}"; do
    keyword=${instruction%%[[:space:]]*}
    args=${instruction#"$keyword"}
    args=${args#"${args%%[![:space:]]*}"}
    keyword=${keyword^^}
    case $keyword in
        FROM)
            end_stage
            stage=$((stage + 1))
            root=$work/stage$stage
            mkdir -p "$root"
            cwd=/
            stage_env=()
            read -r image as name rest <<<"$args"
            [[ -z ${as:-} || ${as^^} == AS ]] || die "unsupported FROM: $args"
            stage_roots[$stage]=$root
            [[ -n ${name:-} ]] && stage_roots[$name]=$root
            say "stage $stage: $image${name:+ ($name)}$( ((stage == 0)) && echo ', built on this machine' || echo ', files only')"
            ;;
        WORKDIR)
            cwd=$(realpath -m "$(in_stage "$args")")
            cwd=${cwd#"$root"}
            [[ -n $cwd ]] || cwd=/
            mkdir -p "$root$cwd"
            ;;
        ENV)
            [[ $args == *'"'* || $args == *"'"* ]] && die "quoted ENV values are not supported: $args"
            for pair in $args; do
                [[ $pair == *=* ]] || die "ENV KEY=VALUE expected: $args"
                stage_env+=("$pair")
            done
            ;;
        COPY)
            read -r -a words <<<"$args"
            from=
            while [[ ${words[0]} == --* ]]; do
                case ${words[0]} in
                    --from=*) from=${words[0]#--from=} ;;
                    --chown=* | --chmod=* | --link) ;;
                    *) die "unsupported COPY flag ${words[0]}" ;;
                esac
                words=("${words[@]:1}")
            done
            ((${#words[@]} >= 2)) || die "COPY needs a source and a destination: $args"
            dest=${words[-1]}
            sources=("${words[@]:0:${#words[@]}-1}")
            if [[ -n $from ]]; then
                [[ -n ${stage_roots[$from]:-} ]] || die "COPY --from=$from: no such stage"
                source_root=${stage_roots[$from]}
            else
                source_root=$work/context
            fi
            target=$(in_stage "$dest")
            for source in "${sources[@]}"; do
                if [[ -n $from ]]; then
                    path=$source_root$source
                else
                    path=$source_root/$source
                fi
                [[ -e $path ]] || die "COPY ${from:+--from=$from }$source: not found"
                if [[ -d $path ]]; then
                    mkdir -p "$target"
                    cp -a "$path/." "$target/"
                elif [[ $dest == */ || ${#sources[@]} -gt 1 ]]; then
                    mkdir -p "$target"
                    cp -a "$path" "$target/"
                else
                    mkdir -p "$(dirname "$target")"
                    cp -a "$path" "$target"
                fi
            done
            if ((stage == 0)) && [[ -z $from && ${sources[*]} == . ]]; then
                base=${build_dir:-$root$cwd/target}
                deps_dir=$base/$profile_dir/deps
                snapshot=$(dependency_artifacts)
                # Cargo compiles the crate after all its dependencies: a stub crate compiled by
                # this run shows the dependency step built (or found built) every dependency.
                [[ -n $snapshot && -n $(find "$deps_dir" -maxdepth 1 -name '*releasegate*' -newer "$work/started" -print -quit) ]] ||
                    die "nothing was compiled before the sources were copied: the dependency layer caches nothing"
            fi
            say "COPY ${from:+--from=$from }${sources[*]} -> $dest"
            ;;
        RUN)
            if ((stage == 0)); then
                say "RUN $args"
                (
                    cd "$root$cwd"
                    unset CARGO_TARGET_DIR
                    export DOCKER_BUILD_PROFILE=$profile
                    if [[ -n $build_dir ]]; then export CARGO_BUILD_BUILD_DIR=$build_dir; fi
                    for pair in "${stage_env[@]}"; do export "${pair?}"; done
                    sh -c "$args"
                ) || die "RUN failed: $args"
            else
                say "RUN (needs the base image, not run here): $args"
            fi
            ;;
        ENTRYPOINT) json_array entrypoint "$args" ;;
        CMD) json_array cmd "$args" ;;
        USER | EXPOSE | LABEL | STOPSIGNAL | HEALTHCHECK) ;;
        *) die "unsupported instruction $keyword" ;;
    esac
done
end_stage

# --- the final image ----------------------------------------------------------------------
((${#entrypoint[@]} == 1)) || die "expected ENTRYPOINT [\"/path/to/binary\"]"
binary=$root${entrypoint[0]}
[[ -x $binary ]] || die "the image's entrypoint ${entrypoint[0]} is not an executable file"
config=
for ((i = 0; i < ${#cmd[@]}; i++)); do
    [[ ${cmd[i]} == --config ]] && config=${cmd[i + 1]:-}
done
[[ -n $config ]] || die "expected CMD to pass --config"
say "the image runs: ${entrypoint[*]} ${cmd[*]}"
for pair in "${stage_env[@]}"; do
    [[ $pair != RELEASEGATE_* ]] || die "the image sets $pair: it would override the mounted configuration"
done
[[ ! -e $root$config ]] || die "the image holds a configuration at $config: the deployment mounts its own there"
# Nothing mounted: the image's CMD (its config path mapped into the stage) must stop at once
# and say how to give it a configuration.
image_cmd=()
for word in "${cmd[@]}"; do
    [[ $word == "$config" ]] && word=$root$config
    image_cmd+=("$word")
done
status=0
unmounted=$(
    for pair in "${stage_env[@]}"; do export "${pair?}"; done
    cd "$root"
    timeout 60 "$binary" "${image_cmd[@]}" 2>&1
) || status=$?
((status != 0 && status != 124)) || die "with nothing mounted the image's CMD did not fail at once (exit $status): $unmounted"
[[ $unmounted == *"does not exist"*"mount it at that path"* ]] ||
    die "with nothing mounted the image's CMD failed without saying where to mount a configuration: $unmounted"
say "nothing mounted: the image's CMD exits $status, naming the path to mount"
# Mounted: the Kubernetes ConfigMap's configuration at the path CMD names, with a provider key
# from the environment as the Deployment's Secret gives it.
mkdir -p "$(dirname "$root$config")"
awk '/^  releasegate.toml: [|]/ { inside = 1; next } inside && /^    / { print substr($0, 5); next } inside && /^$/ { print ""; next } inside { exit }' \
    "$repo/deploy/kubernetes/configmap.yaml" >"$root$config"
grep -q '^\[server\]' "$root$config" || die "no configuration found in deploy/kubernetes/configmap.yaml"
summary=$(
    for pair in "${stage_env[@]}"; do export "${pair?}"; done
    export TYPESAFE_API_KEY=dry-run-key
    cd "$root"
    "$binary" check-config --config "$root$config"
) || die "the image's binary rejects the mounted configuration"
[[ $summary == "configuration OK"* ]] || die "the image's binary is not releasegate (check-config printed: $summary)"
[[ $summary == *"listen 0.0.0.0:8080 · admin 0.0.0.0:9090"* ]] ||
    die "the mounted configuration's listen is not what the image serves: $(echo "$summary" | sed -n 2p)"
echo "$summary" | head -2
say "OK"
