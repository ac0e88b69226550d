//! Safe wrappers for the host's imports (module `perf`; wasm32 only). A
//! policy that does not call them does not import them.

#[link(wasm_import_module = "perf")]
extern "C" {
    #[link_name = "now_ns"]
    fn perf_now_ns() -> i64;
    #[link_name = "log"]
    fn perf_log(ptr: *const u8, len: usize);
}

/// The host's current time in ns (the dataplane's clock: virtual time in
/// a simulated run).
pub fn now_ns() -> u64 {
    // SAFETY: a plain host call with no arguments.
    unsafe { perf_now_ns() as u64 }
}

/// Sends `msg` to the host's log (the host keeps a bounded number of
/// lines and truncates long ones).
pub fn log(msg: &str) {
    // SAFETY: the pointer and length describe `msg`, valid for the call.
    unsafe { perf_log(msg.as_ptr(), msg.len()) }
}
