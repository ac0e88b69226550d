//! # perf-policy-sdk
//!
//! The policy ABI of PeRF-rs (filled in by the policy-interface issues):
//! `#[repr(C)]` types shared by the dataplane host and policies compiled to
//! `wasm32-unknown-unknown`. Nothing is defined here yet.
#![no_std]
