//! The verbs ABI's types as rdma-core's `<infiniband/verbs.h>` lays them
//! out (generated: `generated.rs`), which the shim's objects must match
//! byte for byte: programs reach `ibv_post_send` and the other inline
//! calls through `ibv_context.ops`, and read `ibv_qp`, `ibv_cq` and
//! `ibv_mr` fields directly.

#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    missing_docs,
    unsafe_code,
    clippy::all,
    reason = "bindgen's output of a C header, kept as generated"
)]
mod generated;

pub use generated::*;
