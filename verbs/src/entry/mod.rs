//! The exported C functions. Their safety contract is the verbs API's:
//! pointers are the ones this library handed out (or, for attributes and
//! work requests, valid ones the caller owns), as with rdma-core.
//!
//! Errors follow rdma-core's conventions: functions returning an object
//! return NULL and set `errno`; functions returning `int` return the errno
//! value (the data-path ops) or -1 with `errno` set, as verbs.h documents
//! each.

#![allow(clippy::missing_safety_doc, reason = "the verbs API's contract, stated in the module comment")]

mod datapath;
mod setup;
mod stubs;
mod symver;

use crate::Errno;

/// Sets the calling thread's `errno`.
fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e.0 }
}

/// NULL with `errno` set to `e`.
fn null_with<T>(e: Errno) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

/// -1 with `errno` set to `e`.
fn minus_one(e: Errno) -> libc::c_int {
    set_errno(e);
    -1
}

/// A new zeroed C object on the heap (every verbs struct is valid zeroed:
/// pointers, integers, unions of them, glibc's static mutex initialiser).
fn boxed<T: Copy>() -> Box<T> {
    // SAFETY: see above; T is one of the verbs ABI's plain C structs.
    Box::new(unsafe { std::mem::zeroed::<T>() })
}
