# syntax=docker/dockerfile:1
# Multi-stage build: compile with the Rust toolchain image, run on a slim Debian image as a
# non-root user. CI has no container engine: deploy/dockerfile-dry-run.sh carries out these
# steps without one, and the Rust build steps live in deploy/docker-build-steps.sh for both.
FROM rust:1.95-bookworm AS builder
WORKDIR /src
# Dependencies first: stub every target of the workspace's manifests and compile all
# dependencies. This layer is rebuilt only when a manifest, Cargo.lock or the build steps change.
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/
COPY crates/sim/Cargo.toml crates/sim/
COPY crates/proxy/Cargo.toml crates/proxy/
COPY crates/lab/Cargo.toml crates/lab/
COPY crates/alloc/Cargo.toml crates/alloc/
COPY deploy/docker-build-steps.sh deploy/
RUN bash deploy/docker-build-steps.sh deps
# Then the sources: only the workspace's own crates are compiled; the binary lands in dist/.
COPY . .
RUN bash deploy/docker-build-steps.sh app

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin releasegate
WORKDIR /app
COPY --from=builder /src/dist/releasegate /usr/local/bin/releasegate
USER 10001:10001
# No configuration is baked in: the deployment mounts its own at the path CMD names (the
# Kubernetes Deployment mounts its ConfigMap there), and its `listen` and `admin_listen` say
# where to listen (0.0.0.0:8080 and 0.0.0.0:9090 in a container). Nothing here overrides
# them. Without a mounted file the proxy exits, saying so; the demo configuration (its keys
# are published) is refused on any address but loopback.
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/releasegate"]
CMD ["serve", "--config", "/etc/releasegate/releasegate.toml", "--log-json"]
