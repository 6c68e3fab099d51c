# syntax=docker/dockerfile:1
# Multi-stage build: compile with the Rust toolchain image, run on a slim
# Debian image as a non-root user. (Not built in CI: no container engine there.)
FROM rust:1.95-bookworm AS builder
WORKDIR /src
# Cache dependencies: build a dummy crate against the lock file first.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches examples \
    && echo 'fn main() {}' > src/main.rs \
    && echo '' > src/lib.rs \
    && cargo fetch --locked
COPY . .
RUN cargo build --release --locked --bin releasegate \
    && strip target/release/releasegate

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin releasegate
WORKDIR /app
COPY --from=builder /src/target/release/releasegate /usr/local/bin/releasegate
COPY config/ /app/config/
USER 10001:10001
# Listen on all interfaces inside the container.
ENV RELEASEGATE_SERVER__LISTEN=0.0.0.0:8080 \
    RELEASEGATE_SERVER__ADMIN_LISTEN=0.0.0.0:9090
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/releasegate"]
CMD ["serve", "--config", "/app/config/releasegate.toml", "--log-json"]
