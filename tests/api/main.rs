//! Integration tests: the real proxy on 127.0.0.1:0 against a real local upstream.

mod access_log;
mod auth;
mod bad_input;
mod cli;
mod connections;
mod hardening;
mod helpers;
mod jev_client;
mod process;
mod release;
mod replay;
mod upstream_failures;
mod wcpq;
mod wire_format;
