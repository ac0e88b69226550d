//! Shared helpers of the PeRF-rs benchmarks.
