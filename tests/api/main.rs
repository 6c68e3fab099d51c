//! Integration tests: the real proxy on 127.0.0.1:0 against a real local upstream.

mod access_log;
mod auth;
mod bad_input;
mod binary;
mod cli;
mod collect;
mod connections;
mod decisions;
mod deploy;
mod hardening;
mod helpers;
mod images;
mod jev_client;
mod own_provider;
mod pinning;
mod process;
mod ratelimit;
mod ratelimit_store;
mod release;
mod reload;
mod replay;
mod traces;
mod tracing;
mod upstream_failures;
mod wcpq;
mod wire_format;
