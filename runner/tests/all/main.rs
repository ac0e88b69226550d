//! `perf-runner`'s integration tests, one test binary with a module per
//! area (they run the built binary; `serve`, which needs its own harness,
//! is the other one). Filter by module: `cargo test -p perf-runner --test
//! all -- cli::`.

mod common;

mod cli;
mod getting_started;
mod isolation;
mod policy_suite;
mod realtime_ctl;
mod scenarios;
mod verbs_backend;
mod verbs_over_perf_verbs;
