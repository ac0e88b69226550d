//! Entry points this NIC does not offer: vendor interfaces (mlx5dv,
//! efadv), connection setup over `rdma_cm`, UD address handles,
//! multicast, shared receive queues, sysfs. Each fails as its real
//! counterpart does on a device without the feature.

use std::ffi::{c_char, c_int, c_void};

use super::{minus_one, null_with, set_errno};
use crate::Errno;

const NO: Errno = Errno(libc::EOPNOTSUPP);

macro_rules! null_stubs {
    ($($name:ident),+ $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name(_a: *mut c_void, _b: *mut c_void, _c: *mut c_void) -> *mut c_void {
            null_with(NO)
        }
    )+};
}

macro_rules! errno_stubs {
    ($($name:ident),+ $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name(_a: *mut c_void, _b: *mut c_void, _c: *mut c_void) -> c_int {
            set_errno(NO);
            libc::EOPNOTSUPP
        }
    )+};
}

macro_rules! minus_one_stubs {
    ($($name:ident),+ $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name(_a: *mut c_void, _b: *mut c_void, _c: *mut c_void) -> c_int {
            minus_one(NO)
        }
    )+};
}

null_stubs!(
    mlx5dv_create_qp,
    mlx5dv_open_device,
    mlx5dv_create_mkey,
    mlx5dv_qp_ex_from_ibv_qp_ex,
    mlx5dv_dek_create,
    efadv_create_qp_ex,
    ibv_create_ah,
    ibv_create_ah_from_wc,
    ibv_create_srq,
    ibv_qp_to_qp_ex,
    rdma_create_event_channel,
);

errno_stubs!(
    mlx5dv_destroy_mkey,
    mlx5dv_devx_general_cmd,
    mlx5dv_crypto_login,
    mlx5dv_dek_destroy,
    efadv_query_device,
    ibv_attach_mcast,
    ibv_detach_mcast,
    ibv_destroy_ah,
    ibv_destroy_srq,
    _ibv_query_gid_ex,
);

minus_one_stubs!(
    rdma_accept,
    rdma_ack_cm_event,
    rdma_bind_addr,
    rdma_connect,
    rdma_create_id,
    rdma_create_qp,
    rdma_create_qp_ex,
    rdma_destroy_id,
    rdma_disconnect,
    rdma_get_cm_event,
    rdma_getaddrinfo,
    rdma_listen,
    rdma_reject,
    rdma_resolve_addr,
    rdma_resolve_route,
    rdma_set_option,
    ibv_read_sysfs_file,
    ibv_get_async_event,
);

#[no_mangle]
pub extern "C" fn rdma_destroy_event_channel(_c: *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_destroy_qp(_id: *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_freeaddrinfo(_res: *mut c_void) {}

#[no_mangle]
pub extern "C" fn rdma_event_str(_event: c_int) -> *const c_char {
    c"RDMA_CM_EVENT_UNSUPPORTED (rdma_cm is not offered by perf-verbs)".as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_ack_async_event(_e: *mut c_void) {}

#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    match t {
        1 => c"InfiniBand channel adapter",
        2 => c"InfiniBand switch",
        3 => c"InfiniBand router",
        4 => c"iWARP NIC",
        _ => c"unknown",
    }
    .as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_port_state_str(s: c_int) -> *const c_char {
    match s {
        0 => c"no state change (NOP)",
        1 => c"down",
        2 => c"init",
        3 => c"armed",
        4 => c"active",
        5 => c"active deferred",
        _ => c"unknown",
    }
    .as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_event_type_str(_e: c_int) -> *const c_char {
    c"unknown".as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_wc_status_str(s: c_int) -> *const c_char {
    const NAMES: [&std::ffi::CStr; 22] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
    ];
    NAMES.get(s as usize).copied().unwrap_or(c"unknown").as_ptr()
}
