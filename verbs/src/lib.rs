//! A verbs-compatible `libibverbs.so.1` for programs nobody recompiles:
//! loaded in place of rdma-core's (by `perf-runner exec`, through
//! `LD_LIBRARY_PATH`), it shows one device, [`device::NAME`], whose verbs
//! go to `perf-runner serve`'s dataplane over the daemon's shared-memory
//! rings (`docs/shm-abi.md`).
//!
//! The context it returns carries this library's own ops, so the inline
//! data-path calls of `<infiniband/verbs.h>` (`ibv_post_send`,
//! `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`) land here too.
//! The same library stands in for `libmlx5.so.1`, `libefa.so.1` and
//! `librdmacm.so.1` (their entry points fail: a simulated NIC has no
//! vendor interface, and connection setup over `rdma_cm` is not offered),
//! so rdma-core's providers never load against objects they did not make.
//!
//! Modules: [`abi`] (the header's types), [`device`] (what the NIC says of
//! itself), [`memory`] (an application's buffers shared in place),
//! [`process`] (the process's connection and objects), `entry` (the
//! exported C functions and their symbol versions).

pub mod abi;
pub mod device;
#[allow(unsafe_code, reason = "remapping the application's pages onto a memfd")]
pub mod memory;
pub mod process;

#[allow(unsafe_code, reason = "the C entry points take and fill the application's raw pointers")]
mod entry;

/// The environment variable naming the daemon's socket (default
/// `perf-serve.sock` in the working directory, as `serve`'s).
pub const SOCKET_ENV: &str = "PERF_VERBS_SOCKET";
/// The environment variable naming the tenant to be (default: the one the
/// daemon gives this process).
pub const TENANT_ENV: &str = "PERF_VERBS_TENANT";
/// The names this library is loaded under (the `DT_NEEDED` names of
/// programs linked against rdma-core).
pub const LIBRARY_NAMES: [&str; 4] = ["libibverbs.so.1", "libmlx5.so.1", "libefa.so.1", "librdmacm.so.1"];
/// The file cargo builds this library as.
pub const LIBRARY_FILE: &str = "libperf_verbs.so";

/// An `errno` value, as verbs functions return or set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's `errno`.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    }
}

/// Says why a call failed, once per message kind, on standard error
/// (verbs programs print only an errno).
pub(crate) fn warn(msg: &str) {
    eprintln!("perf-verbs: {msg}");
}
