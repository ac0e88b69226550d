//! The C API (`client/include/perf_client.h`) over [`Client`]: opaque
//! handles, plain structs, errors as -1 with [`perf_last_error`].
//!
//! `unsafe` here is the C boundary only: every pointer comes from the C
//! caller, who promises what the header says (a live `perf_client*` from
//! [`perf_connect`], `n` readable `perf_wr`s, `max` writable `perf_wc`s,
//! NUL-terminated strings). Null pointers are checked and refused.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};

use crate::{Client, Completion, ConnectOptions, Mr, Op, RemoteAddr, WorkRequest};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(msg: impl std::fmt::Display) -> c_int {
    let text = CString::new(msg.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
    -1
}

/// [`fail`] with `e` and its causes on one line (`call: what: why`): C
/// reads one string, so the error's sources are spelt out in it.
fn fail_with(call: &str, e: &dyn std::error::Error) -> c_int {
    let mut text = format!("{call}: {e}");
    let mut cause = e.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    fail(text)
}

/// A region as C sees it.
#[repr(C)]
pub struct perf_mr {
    index: u32,
    rkey: u32,
    addr: u64,
    len: u64,
    data: *mut u8,
}

/// A work request as C writes it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct perf_wr {
    wr_id: u64,
    offset: u64,
    remote_addr: u64,
    qp: u32,
    opcode: u32,
    mr: u32,
    len: u32,
    rkey: u32,
    imm: u32,
}

/// A completion as C reads it.
#[repr(C)]
pub struct perf_wc {
    wr_id: u64,
    latency_ns: u64,
    qp: u32,
    byte_len: u32,
    imm: u32,
    status: u8,
    is_recv: u8,
    has_imm: u8,
    pad: u8,
}

/// The opaque handle.
pub struct perf_client {
    client: Client,
    cpl: Vec<Completion>,
}

/// A string from C (`None` for NULL or invalid UTF-8).
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn text<'a>(s: *const c_char) -> Option<&'a str> {
    if s.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(s) }.to_str().ok()
}

/// See `perf_client.h`.
///
/// # Safety
/// `socket` and `tenant` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn perf_connect(socket: *const c_char, tenant: *const c_char) -> *mut perf_client {
    // SAFETY: the caller's promise.
    let Some(path) = (unsafe { text(socket) }) else {
        fail("perf_connect: no socket path");
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's promise.
    let opts = ConnectOptions { tenant: unsafe { text(tenant) }.map(str::to_string), ..ConnectOptions::default() };
    match Client::connect(path, &opts) {
        Ok(client) => Box::into_raw(Box::new(perf_client { client, cpl: Vec::new() })),
        Err(e) => {
            fail_with("perf_connect", &e);
            std::ptr::null_mut()
        }
    }
}

/// See `perf_client.h`.
///
/// # Safety
/// `c` is NULL or from [`perf_connect`], not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn perf_disconnect(c: *mut perf_client) {
    if !c.is_null() {
        // SAFETY: from Box::into_raw in perf_connect, given back once.
        drop(unsafe { Box::from_raw(c) });
    }
}

/// See `perf_client.h`.
#[no_mangle]
pub extern "C" fn perf_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// # Safety
/// `c` is NULL or a live handle from [`perf_connect`].
unsafe fn handle<'a>(c: *mut perf_client) -> Option<&'a mut perf_client> {
    // SAFETY: the caller's promise.
    unsafe { c.as_mut() }
}

/// See `perf_client.h`.
///
/// # Safety
/// `c` is a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn perf_reg_mr(c: *mut perf_client, len: usize, out: *mut perf_mr) -> c_int {
    // SAFETY: the caller's promise.
    let (Some(h), Some(out)) = (unsafe { handle(c) }, unsafe { out.as_mut() }) else {
        return fail("perf_reg_mr: NULL argument");
    };
    let mr: Mr = match h.client.reg_mr(len) {
        Ok(m) => m,
        Err(e) => return fail_with("perf_reg_mr", &e),
    };
    let data = match h.client.region_ptr(mr) {
        Ok(p) => p,
        Err(e) => return fail_with("perf_reg_mr", &e),
    };
    *out = perf_mr { index: mr.index, rkey: mr.rkey, addr: mr.addr, len: mr.len as u64, data };
    0
}

/// See `perf_client.h`.
///
/// # Safety
/// `c` is a live handle; `qp` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn perf_create_qp(c: *mut perf_client, tc: u8, qp: *mut u32) -> c_int {
    // SAFETY: the caller's promise.
    let (Some(h), Some(qp)) = (unsafe { handle(c) }, unsafe { qp.as_mut() }) else {
        return fail("perf_create_qp: NULL argument");
    };
    match h.client.create_qp(tc) {
        Ok(q) => {
            *qp = q;
            0
        }
        Err(e) => fail_with("perf_create_qp", &e),
    }
}

/// See `perf_client.h`.
///
/// # Safety
/// `c` is a live handle; `peer` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn perf_connect_qp(c: *mut perf_client, qp: u32, peer: *const c_char, peer_qp: u32) -> c_int {
    // SAFETY: the caller's promise.
    let (Some(h), Some(peer)) = (unsafe { handle(c) }, unsafe { text(peer) }) else {
        return fail("perf_connect_qp: NULL argument");
    };
    match h.client.connect_qp(qp, peer, peer_qp) {
        Ok(()) => 0,
        Err(e) => fail_with("perf_connect_qp", &e),
    }
}

fn request(w: &perf_wr) -> Result<WorkRequest, String> {
    let remote = RemoteAddr { addr: w.remote_addr, rkey: w.rkey };
    let op = match w.opcode {
        1 => Op::Write(remote),
        2 => Op::WriteImm(remote, w.imm),
        3 => Op::Send,
        4 => Op::Recv,
        5 => Op::Read(remote),
        o => return Err(format!("perf_post: unknown opcode {o} (wr_id {})", w.wr_id)),
    };
    Ok(WorkRequest { wr_id: w.wr_id, qp: w.qp, op, mr: w.mr, offset: w.offset, len: w.len })
}

/// See `perf_client.h`.
///
/// # Safety
/// `c` is a live handle; `wrs` points to `n` readable requests.
#[no_mangle]
pub unsafe extern "C" fn perf_post(c: *mut perf_client, wrs: *const perf_wr, n: usize) -> c_int {
    // SAFETY: the caller's promise.
    let Some(h) = (unsafe { handle(c) }) else { return fail("perf_post: NULL handle") };
    if n == 0 {
        return 0;
    }
    if wrs.is_null() {
        return fail("perf_post: NULL requests");
    }
    // SAFETY: the caller's promise: n readable perf_wr.
    let wrs = unsafe { std::slice::from_raw_parts(wrs, n) };
    let list: Result<Vec<WorkRequest>, String> = wrs.iter().map(request).collect();
    let list = match list {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    match h.client.post(&list) {
        Ok(k) => k.min(c_int::MAX as usize) as c_int,
        Err(e) => fail_with("perf_post", &e),
    }
}

/// See `perf_client.h`.
///
/// # Safety
/// `c` is a live handle; `out` points to `max` writable completions.
#[no_mangle]
pub unsafe extern "C" fn perf_poll(c: *mut perf_client, out: *mut perf_wc, max: usize) -> c_int {
    // SAFETY: the caller's promise.
    let Some(h) = (unsafe { handle(c) }) else { return fail("perf_poll: NULL handle") };
    if max == 0 {
        return 0;
    }
    if out.is_null() {
        return fail("perf_poll: NULL output");
    }
    h.cpl.clear();
    let n = h.client.poll(&mut h.cpl, max.min(c_int::MAX as usize));
    for (i, x) in h.cpl.iter().enumerate() {
        let wc = perf_wc {
            wr_id: x.wr_id,
            latency_ns: x.latency_ns,
            qp: x.qp,
            byte_len: x.byte_len,
            imm: x.imm.unwrap_or(0),
            status: x.status.map_or(u8::MAX, |s| s as u8),
            is_recv: x.recv as u8,
            has_imm: x.imm.is_some() as u8,
            pad: 0,
        };
        // SAFETY: i < n <= max writable slots, the caller's promise.
        unsafe { out.add(i).write(wc) };
    }
    n as c_int
}
