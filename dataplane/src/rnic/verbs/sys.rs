//! The only module of the verbs backend with `unsafe` code: thin owning
//! wrappers over the libibverbs objects (`rdma-sys` bindings), each call
//! with a `// SAFETY:` comment.
//!
//! Ownership makes use-after-free unwritable in safe code:
//! - a [`Pd`] and a [`Cq`] hold an `Arc<Context>`; an [`Mr`] holds an
//!   `Arc<Pd>`; a [`Qp`] holds an `Arc<Pd>` and `Arc<Cq>`s for its CQs;
//! - each wrapper destroys its object in `Drop`, so a parent (context, PD,
//!   CQ) is destroyed only after the last object that uses it;
//! - if a destroy call fails, the object may still be in use by the device:
//!   the wrapper then leaks a reference to its parents (and an MR its
//!   buffer) instead of freeing memory the NIC might still access.
//!
//! Memory regions are buffers this module allocates (page-aligned,
//! zeroed) and owns. The CPU reaches them only by raw copies
//! ([`Mr::write`], [`Mr::read`]); no Rust reference to a buffer is ever
//! created, because the NIC may DMA into it at any time.

use std::alloc::{self, Layout};
use std::os::raw::c_int;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use rdma_sys as ffi;

use crate::rnic::verbs::ibv_abi::cq_attr::{
    IGNORE_OVERRUN as IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN, MASK_FLAGS as IBV_CQ_INIT_ATTR_MASK_FLAGS,
};
use crate::rnic::verbs::ibv_abi::{errno_to_error, GidEntry, GidKind, IbvSendWr, Verb};
use crate::rnic::{Gid, QpCaps, RnicError, Sge};

/// The extended context behind `ctx` (`verbs_get_ctx` of
/// `<infiniband/verbs.h>`), if the provider has one and it is large
/// enough to hold the member at byte `member_offset`.
///
/// rdma-sys 0.3.0 reimplements this inline function in Rust
/// (`src/verbs.rs`, `verbs_get_ctx`) with `abi_compat as usize !=
/// u32::MAX as usize`, where rdma-core's header compares with
/// `__VERBS_ABI_IS_EXTENDED`, `(void *)UINTPTR_MAX`: on a 64-bit host the
/// test never matches, so every rdma-sys wrapper of an extended verb
/// (`___ibv_query_port`, `ibv_create_cq_ex`, `ibv_query_device_ex`, ...)
/// takes its fallback or fails with EOPNOTSUPP. This module therefore
/// reaches the extended ops itself, through this function.
fn verbs_ctx(ctx: NonNull<ffi::ibv_context>, member_offset: usize) -> Option<NonNull<ffi::verbs_context>> {
    // SAFETY: `ctx` is a live context; reading one pointer-sized field.
    let compat = unsafe { (*ctx.as_ptr()).abi_compat } as usize;
    if compat != usize::MAX {
        return None;
    }
    // SAFETY: an extended context embeds the `ibv_context` as its last
    // member (`struct verbs_context { ...; struct ibv_context context; }`),
    // which `abi_compat == UINTPTR_MAX` promises; stepping back by the
    // member's offset gives the enclosing struct, as `container_of` does.
    let vctx = unsafe {
        (ctx.as_ptr() as *mut u8).sub(std::mem::offset_of!(ffi::verbs_context, context)) as *mut ffi::verbs_context
    };
    // SAFETY: `vctx` points at the provider's live extended context; `sz`
    // says how much of it (counted back from `context`) the provider has.
    let sz = unsafe { (*vctx).sz };
    if sz < std::mem::size_of::<ffi::verbs_context>() - member_offset {
        return None;
    }
    NonNull::new(vctx)
}

/// `_ibv_query_gid_table` (rdma-core v32+, `IBVERBS_1.11`), looked up at
/// run time: rdma-sys binds only `ibv_*` names, and an older libibverbs
/// does not have it. The prototype is that of `<infiniband/verbs.h>`.
type QueryGidTable = unsafe extern "C" fn(
    context: *mut ffi::ibv_context,
    entries: *mut IbvGidEntry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize;

/// `struct ibv_gid_entry` of `<infiniband/verbs.h>`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IbvGidEntry {
    gid: [u8; 16],
    gid_index: u32,
    port_num: u32,
    gid_type: u32,
    ndev_ifindex: u32,
}

fn query_gid_table_fn() -> Option<QueryGidTable> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no
    // other precondition; libibverbs is linked into this process.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_ibv_query_gid_table".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: the symbol of that name is the function of this prototype
    // in every libibverbs that exports it.
    Some(unsafe { std::mem::transmute::<*mut libc::c_void, QueryGidTable>(sym) })
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// The errno of a verb that returns it directly (0 on success); some
/// providers return -1 and set `errno` instead.
fn rc_errno(rc: c_int) -> i32 {
    if rc > 0 {
        rc
    } else {
        last_errno()
    }
}

/// Destroys a verbs object once: `destroy` (its `ibv_destroy_*` or
/// `ibv_dereg_mr`) runs only if `released` is not set yet. A failure leaves
/// the object to the device, so `keep` leaks what the device may still
/// reach, and the errno is reported.
fn release_once(released: &mut bool, destroy: impl FnOnce() -> c_int, keep: impl FnOnce()) -> Result<(), RnicError> {
    if *released {
        return Ok(());
    }
    *released = true;
    let rc = destroy();
    if rc != 0 {
        keep();
        return Err(errno_to_error(Verb::Destroy, rc_errno(rc), 0));
    }
    Ok(())
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it returns -1 on error.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn c_chars_to_string(chars: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The list of devices libibverbs knows (`ibv_get_device_list`).
pub struct DeviceList {
    list: NonNull<*mut ffi::ibv_device>,
    len: usize,
}

impl DeviceList {
    /// Asks libibverbs for its devices. Fails (with the errno's text) when
    /// the kernel has no RDMA support (`ENOSYS`) or uverbs is unreachable.
    pub fn get() -> Result<DeviceList, RnicError> {
        let mut n: c_int = 0;
        // SAFETY: the pointer is valid for the call; the function returns
        // NULL or an array of `n` device pointers (NULL-terminated) that we
        // own until `ibv_free_device_list`.
        let p = unsafe { ffi::ibv_get_device_list(&mut n) };
        match NonNull::new(p) {
            Some(list) => Ok(DeviceList { list, len: n.max(0) as usize }),
            None => {
                let e = last_errno();
                Err(RnicError::Device(format!("ibv_get_device_list failed: {}", std::io::Error::from_raw_os_error(e))))
            }
        }
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.len
    }

    fn device(&self, i: usize) -> Option<NonNull<ffi::ibv_device>> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `i < len`, and the array holds `len` valid entries while
        // the list is alive.
        NonNull::new(unsafe { *self.list.as_ptr().add(i) })
    }

    /// The name of device `i`.
    pub fn name(&self, i: usize) -> Option<String> {
        let d = self.device(i)?;
        // SAFETY: `d` is a live device of the list; the returned pointer is
        // NULL or the device's NUL-terminated name, valid while the list is.
        let p = unsafe { ffi::ibv_get_device_name(d.as_ptr()) };
        if p.is_null() {
            return None;
        }
        // SAFETY: non-NULL, NUL-terminated, valid for the list's lifetime.
        Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// The transport type (`IBV_TRANSPORT_*`) of device `i`.
    pub fn transport(&self, i: usize) -> Option<i32> {
        let d = self.device(i)?;
        // SAFETY: `d` points at a live `struct ibv_device`; reading a field.
        Some(unsafe { (*d.as_ptr()).transport_type })
    }

    /// Opens device `i` (`ibv_open_device`).
    pub fn open(&self, i: usize) -> Result<Context, RnicError> {
        let d = self.device(i).ok_or_else(|| RnicError::InvalidArgument(format!("no device number {i}")))?;
        // SAFETY: `d` is a live device of the list. The context stays valid
        // after the list is freed (libibverbs documents this).
        let ctx = unsafe { ffi::ibv_open_device(d.as_ptr()) };
        let ptr = NonNull::new(ctx).ok_or_else(|| errno_to_error(Verb::OpenDevice, last_errno(), 0))?;
        Ok(Context { ptr })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        unsafe { ffi::ibv_free_device_list(self.list.as_ptr()) }
    }
}

/// The device attributes the backend uses (`struct ibv_device_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (network byte order as stored).
    pub node_guid: u64,
    /// PCI vendor id.
    pub vendor_id: u32,
    /// PCI part id.
    pub vendor_part_id: u32,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Largest number of QPs.
    pub max_qp: u32,
    /// Largest work queue.
    pub max_qp_wr: u32,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Largest CQ.
    pub max_cqe: u32,
    /// Outstanding RDMA READs a QP may answer.
    pub max_qp_rd_atom: u32,
    /// Outstanding RDMA READs a QP may issue.
    pub max_qp_init_rd_atom: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
}

/// The port attributes the backend uses (`struct ibv_port_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// `IBV_PORT_*` state.
    pub state: u32,
    /// Active MTU (`IBV_MTU_*`).
    pub active_mtu: u32,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// Raw active width.
    pub active_width: u8,
    /// Raw active speed.
    pub active_speed: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
}

/// An open device context (`struct ibv_context`).
pub struct Context {
    ptr: NonNull<ffi::ibv_context>,
}

// SAFETY: libibverbs objects may be used from any thread (the library and
// its providers lock internally); the wrapper has no thread-local state.
unsafe impl Send for Context {}
// SAFETY: as above; the methods taking `&self` are thread-safe verbs.
unsafe impl Sync for Context {}

impl Context {
    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr, RnicError> {
        // SAFETY: `ibv_device_attr` is plain data; all-zero is a valid value.
        let mut a: ffi::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context; `a` is valid for writes for the call.
        let rc = unsafe { ffi::ibv_query_device(self.ptr.as_ptr(), &mut a) };
        if rc != 0 {
            return Err(errno_to_error(Verb::QueryDevice, rc_errno(rc), 0));
        }
        let u = |v: c_int| v.max(0) as u32;
        Ok(DeviceAttr {
            fw_ver: c_chars_to_string(&a.fw_ver),
            node_guid: a.node_guid,
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            max_mr_size: a.max_mr_size,
            max_qp: u(a.max_qp),
            max_qp_wr: u(a.max_qp_wr),
            max_sge: u(a.max_sge),
            max_cqe: u(a.max_cqe),
            max_qp_rd_atom: u(a.max_qp_rd_atom),
            max_qp_init_rd_atom: u(a.max_qp_init_rd_atom),
            phys_port_cnt: a.phys_port_cnt,
        })
    }

    /// `ibv_query_port`, as the inline function of `<infiniband/verbs.h>`
    /// does it: through the extended context's `query_port` with the
    /// caller's struct size, else the compat symbol.
    pub fn query_port(&self, port: u8) -> Result<PortAttr, RnicError> {
        // SAFETY: `ibv_port_attr` is plain data; all-zero is a valid value.
        let mut a: ffi::ibv_port_attr = unsafe { std::mem::zeroed() };
        let ext = verbs_ctx(self.ptr, std::mem::offset_of!(ffi::verbs_context, query_port))
            // SAFETY: a live extended context (see `verbs_ctx`); reading a field.
            .and_then(|v| unsafe { (*v.as_ptr()).query_port });
        let rc = match ext {
            // SAFETY: live context; `a` is valid for writes of the size
            // passed, the provider writes at most that much.
            Some(f) => unsafe { f(self.ptr.as_ptr(), port, &mut a, std::mem::size_of::<ffi::ibv_port_attr>()) },
            // SAFETY: live context; the exported `ibv_query_port` fills the
            // old `struct _compat_ibv_port_attr`, a prefix of `ibv_port_attr`
            // (the fields read below all lie in it).
            None => unsafe { ffi::ibv_query_port(self.ptr.as_ptr(), port, (&mut a as *mut ffi::ibv_port_attr).cast()) },
        };
        if rc != 0 {
            return Err(errno_to_error(Verb::QueryPort, rc_errno(rc), 0));
        }
        Ok(PortAttr {
            state: a.state,
            active_mtu: a.active_mtu,
            gid_tbl_len: a.gid_tbl_len.max(0) as u32,
            lid: a.lid,
            active_width: a.active_width,
            active_speed: a.active_speed,
            link_layer: a.link_layer,
        })
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid, RnicError> {
        let mut g = ffi::ibv_gid { raw: [0; 16] };
        let idx = c_int::try_from(index).map_err(|_| RnicError::InvalidArgument(format!("GID index {index}")))?;
        // SAFETY: live context; `g` is valid for writes for the call.
        let rc = unsafe { ffi::ibv_query_gid(self.ptr.as_ptr(), port, idx, &mut g) };
        if rc != 0 {
            return Err(errno_to_error(Verb::QueryGid, rc_errno(rc), 0));
        }
        // SAFETY: every bit pattern of the union is a valid `[u8; 16]`.
        Ok(unsafe { g.raw })
    }

    /// The port's valid GID entries with their types, from
    /// `_ibv_query_gid_table` (rdma-core v32+); `None` where the library
    /// does not have it or it fails (the caller then reads sysfs).
    pub fn query_gid_table(&self, port: u8, max: usize) -> Option<Vec<GidEntry>> {
        let f = query_gid_table_fn()?;
        let blank = IbvGidEntry { gid: [0; 16], gid_index: 0, port_num: 0, gid_type: 0, ndev_ifindex: 0 };
        let mut buf = vec![blank; max.max(1)];
        // SAFETY: live context; `buf` holds `buf.len()` writable entries of
        // the size passed, and the function writes at most that many.
        let n = unsafe { f(self.ptr.as_ptr(), buf.as_mut_ptr(), buf.len(), 0, std::mem::size_of::<IbvGidEntry>()) };
        let n = usize::try_from(n).ok()?.min(buf.len());
        Some(
            buf[..n]
                .iter()
                .filter(|e| e.port_num == port as u32)
                .map(|e| GidEntry { index: e.gid_index, gid: e.gid, kind: GidKind::from_ibv(e.gid_type) })
                .collect(),
        )
    }

    /// Makes the asynchronous event file descriptor non-blocking, so that
    /// [`Context::next_async_event`] never waits.
    pub fn async_nonblocking(&self) -> Result<(), RnicError> {
        // SAFETY: live context; reading the fd field.
        let fd = unsafe { (*self.ptr.as_ptr()).async_fd };
        // SAFETY: fcntl on a file descriptor the context owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(RnicError::Device(format!(
                "cannot make the async event fd non-blocking: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    /// The next asynchronous event, if one is pending (`ibv_get_async_event`
    /// on the non-blocking fd, then `ibv_ack_async_event`): its raw
    /// `ibv_event_type` and what it names.
    pub fn next_async_event(&self) -> Option<RawAsyncEvent> {
        // SAFETY: plain data (a union of pointers and an int, and a u32);
        // all-zero is a valid value.
        let mut ev: AsyncEventC = unsafe { std::mem::zeroed() };
        // SAFETY: live context; `ev` has the layout of `ibv_async_event`
        // (with the enum read as the `u32` C writes, so an event type this
        // build does not know is a value, not undefined behaviour) and is
        // valid for writes. The fd is non-blocking, so the call returns -1
        // (EAGAIN) when none is pending.
        let rc = unsafe { ffi::ibv_get_async_event(self.ptr.as_ptr(), (&mut ev as *mut AsyncEventC).cast()) };
        if rc != 0 {
            return None;
        }
        let kind = ev.event_type;
        let what = crate::rnic::verbs::ibv_abi::async_event_subject(kind);
        // SAFETY: the union member that `event_type` says is set; the QP
        // and CQ are live until the event is acknowledged (below).
        let subject = unsafe {
            match what {
                crate::rnic::verbs::ibv_abi::AsyncSubject::Qp => {
                    let qp = ev.element.qp;
                    AsyncElement::Qp(if qp.is_null() { 0 } else { (*qp).qp_num })
                }
                crate::rnic::verbs::ibv_abi::AsyncSubject::Cq => AsyncElement::Cq(ev.element.cq as usize),
                crate::rnic::verbs::ibv_abi::AsyncSubject::Port => AsyncElement::Port(ev.element.port_num as u32),
                crate::rnic::verbs::ibv_abi::AsyncSubject::Device => AsyncElement::Device,
            }
        };
        // SAFETY: the event came from ibv_get_async_event and is acked once.
        unsafe { ffi::ibv_ack_async_event((&mut ev as *mut AsyncEventC).cast()) };
        Some(RawAsyncEvent { kind, element: subject })
    }
}

/// `struct ibv_async_event` with its `enum ibv_event_type` as the plain
/// `u32` it is in C (rdma-sys declares a Rust enum there).
#[repr(C)]
struct AsyncEventC {
    element: ffi::ibv_async_event_element_t,
    event_type: u32,
}

/// What an asynchronous event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncElement {
    /// A QP, by number.
    Qp(u32),
    /// A CQ, by the address of its `struct ibv_cq` ([`Cq::raw_addr`]).
    Cq(usize),
    /// A port.
    Port(u32),
    /// The device.
    Device,
}

/// One asynchronous event, copied out of `struct ibv_async_event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawAsyncEvent {
    /// `enum ibv_event_type`.
    pub kind: u32,
    /// What it names.
    pub element: AsyncElement,
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every PD and CQ holds an `Arc<Context>`, so none is alive
        // any more; the context is closed once.
        unsafe {
            ffi::ibv_close_device(self.ptr.as_ptr());
        }
    }
}

/// A protection domain.
pub struct Pd {
    ptr: NonNull<ffi::ibv_pd>,
    ctx: Arc<Context>,
}

// SAFETY: see `Context`.
unsafe impl Send for Pd {}
// SAFETY: see `Context`.
unsafe impl Sync for Pd {}

impl Pd {
    /// `ibv_alloc_pd`.
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<Pd>, RnicError> {
        // SAFETY: live context.
        let p = unsafe { ffi::ibv_alloc_pd(ctx.ptr.as_ptr()) };
        let ptr = NonNull::new(p).ok_or_else(|| errno_to_error(Verb::AllocPd, last_errno(), 0))?;
        Ok(Arc::new(Pd { ptr, ctx: ctx.clone() }))
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP of the PD holds an `Arc<Pd>`, so none is
        // alive; the PD is deallocated once.
        let rc = unsafe { ffi::ibv_dealloc_pd(self.ptr.as_ptr()) };
        if rc != 0 {
            // The device still knows the PD: keep the context open.
            std::mem::forget(self.ctx.clone());
        }
    }
}

struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    fn zeroed(len: usize) -> Result<AlignedBuf, RnicError> {
        if len == 0 {
            return Err(RnicError::InvalidArgument("memory region length 0".into()));
        }
        let layout = Layout::from_size_align(len, page_size())
            .map_err(|e| RnicError::InvalidArgument(format!("memory region of {len} B: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let ptr =
            NonNull::new(p).ok_or_else(|| RnicError::Device(format!("cannot allocate {len} B of host memory")))?;
        Ok(AlignedBuf { ptr, layout })
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc_zeroed` with this layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A registered memory region over a buffer this wrapper owns.
pub struct Mr {
    ptr: NonNull<ffi::ibv_mr>,
    buf: Option<AlignedBuf>,
    pd: Arc<Pd>,
    len: usize,
    lkey: u32,
    rkey: u32,
    released: bool,
}

// SAFETY: see `Context`; the buffer is reached only by raw copies.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers
    /// it (`ibv_reg_mr`) with the `IBV_ACCESS_*` bits `access`.
    pub fn register(pd: &Arc<Pd>, len: usize, access: u32) -> Result<Mr, RnicError> {
        let buf = AlignedBuf::zeroed(len)?;
        let acc =
            c_int::try_from(access).map_err(|_| RnicError::InvalidArgument(format!("access flags {access:#x}")))?;
        // SAFETY: live PD; the buffer is valid for `len` bytes and outlives
        // the registration (it is freed only after `ibv_dereg_mr` succeeded).
        let p = unsafe { ffi::ibv_reg_mr(pd.ptr.as_ptr(), buf.ptr.as_ptr().cast(), len, acc) };
        let ptr = NonNull::new(p).ok_or_else(|| errno_to_error(Verb::RegMr, last_errno(), 0))?;
        // SAFETY: `ptr` is the live `struct ibv_mr` just returned.
        let (lkey, rkey) = unsafe { ((*ptr.as_ptr()).lkey, (*ptr.as_ptr()).rkey) };
        Ok(Mr { ptr, buf: Some(buf), pd: pd.clone(), len, lkey, rkey, released: false })
    }

    /// Virtual address of the first byte.
    pub fn addr(&self) -> u64 {
        self.buf.as_ref().map_or(0, |b| b.ptr.as_ptr() as u64)
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    fn span(&self, off: usize, n: usize, what: &str) -> Result<*mut u8, RnicError> {
        let buf = self.buf.as_ref().ok_or(RnicError::Device("memory region without a buffer".into()))?;
        match off.checked_add(n) {
            Some(end) if end <= self.len => Ok(buf.ptr.as_ptr().wrapping_add(off)),
            _ => Err(RnicError::InvalidArgument(format!(
                "{what} of {n} B at offset {off} leaves the {} B region",
                self.len
            ))),
        }
    }

    /// Copies `data` into the region at `off`.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<(), RnicError> {
        let dst = self.span(off, data.len(), "write")?;
        // SAFETY: `dst..dst+len` lies inside the owned buffer (checked by
        // `span`); `data` is a distinct Rust slice, so the ranges do not
        // overlap. No reference to the buffer exists (only raw copies).
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) }
        Ok(())
    }

    /// Copies the region at `off` into `out`.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<(), RnicError> {
        let src = self.span(off, out.len(), "read")?;
        // SAFETY: as in `write`, with the roles swapped.
        unsafe { ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) }
        Ok(())
    }
}

impl Mr {
    /// `ibv_dereg_mr`, reporting a failure (the buffer and the PD are then
    /// kept forever, since the NIC may still reach the buffer).
    pub fn deregister(mut self) -> Result<(), RnicError> {
        self.release()
    }

    fn release(&mut self) -> Result<(), RnicError> {
        let mr = self.ptr.as_ptr();
        release_once(
            &mut self.released,
            // SAFETY: the MR is live and deregistered once (`released`).
            || unsafe { ffi::ibv_dereg_mr(mr) },
            // The NIC may still reach the buffer: never free it, keep the PD.
            || {
                std::mem::forget(self.buf.take());
                std::mem::forget(self.pd.clone());
            },
        )
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // A failure is already handled (by leaking); nobody to tell here.
        let _ = self.release();
    }
}

/// A completion as libibverbs reports it, copied out of `struct ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawWc {
    /// The device `wr_id`.
    pub wr_id: u64,
    /// `ibv_wc_status`.
    pub status: u32,
    /// `ibv_wc_opcode` (valid only on success).
    pub opcode: u32,
    /// Vendor syndrome of an error.
    pub vendor_err: u32,
    /// Bytes (receive side, READ).
    pub byte_len: u32,
    /// Immediate data, host order, if `IBV_WC_WITH_IMM`.
    pub imm: Option<u32>,
    /// Local QP number.
    pub qp_num: u32,
}

/// A reusable buffer for `ibv_poll_cq`.
pub struct WcBuf(Vec<ffi::ibv_wc>);

impl WcBuf {
    /// Room for `n` completions per poll.
    pub fn new(n: usize) -> WcBuf {
        // SAFETY: `ibv_wc` is plain data (integers and a union of u32s);
        // all-zero is a valid value.
        WcBuf((0..n.max(1)).map(|_| unsafe { std::mem::zeroed() }).collect())
    }
}

/// A completion queue.
pub struct Cq {
    ptr: NonNull<ffi::ibv_cq>,
    ctx: Arc<Context>,
    ignore_overrun: bool,
}

// SAFETY: see `Context`.
unsafe impl Send for Cq {}
// SAFETY: see `Context`.
unsafe impl Sync for Cq {}

impl Cq {
    /// `ibv_create_cq` with at least `depth` entries. With `ignore_overrun`,
    /// first `ibv_create_cq_ex` with `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`
    /// (called through the extended context: see [`verbs_ctx`]); where the
    /// provider has no such CQ (rxe, older mlx5), a plain one, which
    /// [`Cq::ignores_overrun`] then says.
    pub fn new(ctx: &Arc<Context>, depth: u32, ignore_overrun: bool) -> Result<Arc<Cq>, RnicError> {
        let n = c_int::try_from(depth).map_err(|_| RnicError::InvalidArgument(format!("CQ depth {depth}")))?;
        if ignore_overrun {
            if let Some(ptr) = Self::create_ex_ignore_overrun(ctx, depth) {
                return Ok(Arc::new(Cq { ptr, ctx: ctx.clone(), ignore_overrun: true }));
            }
        }
        // SAFETY: live context; no completion channel, no user context.
        let p = unsafe { ffi::ibv_create_cq(ctx.ptr.as_ptr(), n, ptr::null_mut(), ptr::null_mut(), 0) };
        let ptr = NonNull::new(p).ok_or_else(|| errno_to_error(Verb::CreateCq, last_errno(), 0))?;
        Ok(Arc::new(Cq { ptr, ctx: ctx.clone(), ignore_overrun: false }))
    }

    fn create_ex_ignore_overrun(ctx: &Arc<Context>, depth: u32) -> Option<NonNull<ffi::ibv_cq>> {
        let vctx = verbs_ctx(ctx.ptr, std::mem::offset_of!(ffi::verbs_context, create_cq_ex))?;
        // SAFETY: a live extended context; reading a field.
        let create = unsafe { (*vctx.as_ptr()).create_cq_ex }?;
        // SAFETY: plain data; all-zero is a valid value (no channel, no
        // parent domain).
        let mut attr: ffi::ibv_cq_init_attr_ex = unsafe { std::mem::zeroed() };
        attr.cqe = depth;
        attr.wc_flags = 0;
        attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
        attr.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
        // SAFETY: live context; `attr` is valid for the call. The returned
        // `ibv_cq_ex` starts with the `ibv_cq` fields (`ibv_cq_ex_to_cq` is
        // a cast), and is destroyed with `ibv_destroy_cq` and polled with
        // `ibv_poll_cq` like any CQ.
        let p = unsafe { create(ctx.ptr.as_ptr(), &mut attr) };
        NonNull::new(p.cast::<ffi::ibv_cq>())
    }

    /// Whether the device drops CQEs on overrun instead of failing the CQ.
    pub fn ignores_overrun(&self) -> bool {
        self.ignore_overrun
    }

    /// The address of the `struct ibv_cq`, as asynchronous events name it.
    pub fn raw_addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// `ibv_resize_cq` to at least `depth` entries.
    pub fn resize(&self, depth: u32) -> Result<(), RnicError> {
        let n = c_int::try_from(depth).map_err(|_| RnicError::InvalidArgument(format!("CQ depth {depth}")))?;
        // SAFETY: live CQ; the provider keeps the CQEs already in it.
        let rc = unsafe { ffi::ibv_resize_cq(self.ptr.as_ptr(), n) };
        if rc != 0 {
            return Err(errno_to_error(Verb::ResizeCq, rc_errno(rc), 0));
        }
        Ok(())
    }

    /// `ibv_poll_cq` for up to the buffer's size; appends to `out`.
    pub fn poll(&self, buf: &mut WcBuf, out: &mut Vec<RawWc>) -> Result<usize, RnicError> {
        let n = c_int::try_from(buf.0.len()).unwrap_or(c_int::MAX);
        // SAFETY: live CQ; the buffer holds `n` writable `ibv_wc`s.
        let got = unsafe { ffi::ibv_poll_cq(self.ptr.as_ptr(), n, buf.0.as_mut_ptr()) };
        if got < 0 {
            // Not an errno: providers return -1 (mlx5: a CQE it cannot
            // parse, or a CQ in error after an overrun) without setting it.
            return Err(RnicError::Device(format!(
                "ibv_poll_cq failed (returned {got}): the completion queue is in error \
                 (an overrun, or a device error: see the async events)"
            )));
        }
        let got = (got as usize).min(buf.0.len());
        for wc in &buf.0[..got] {
            let with_imm = wc.wc_flags & ffi::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            // SAFETY: both members of the union are `u32`; any value is valid.
            let imm_be = unsafe { wc.imm_data_invalidated_rkey_union.imm_data };
            out.push(RawWc {
                wr_id: wc.wr_id,
                status: wc.status,
                opcode: wc.opcode,
                vendor_err: wc.vendor_err,
                byte_len: wc.byte_len,
                imm: with_imm.then(|| u32::from_be(imm_be)),
                qp_num: wc.qp_num,
            });
        }
        Ok(got)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: every QP using the CQ holds an `Arc<Cq>`, so none is alive;
        // destroyed once.
        let rc = unsafe { ffi::ibv_destroy_cq(self.ptr.as_ptr()) };
        if rc != 0 {
            std::mem::forget(self.ctx.clone());
        }
    }
}

/// Attributes of the INIT -> RTR transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    /// `IBV_MTU_*` path MTU.
    pub path_mtu: u32,
    /// Remote QP number.
    pub dest_qp_num: u32,
    /// Remote starting PSN.
    pub rq_psn: u32,
    /// Incoming RDMA READs in flight.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Local port.
    pub port: u8,
    /// Remote GID.
    pub dgid: Gid,
    /// Local GID index.
    pub sgid_index: u8,
    /// IP TTL / hop limit.
    pub hop_limit: u8,
    /// IP traffic class byte (DSCP << 2).
    pub traffic_class: u8,
    /// Service level (PCP priority on RoCE, SL on InfiniBand).
    pub sl: u8,
    /// Remote LID (InfiniBand; 0 on RoCE).
    pub dlid: u16,
}

/// Attributes of the RTR -> RTS transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    /// Local starting PSN.
    pub sq_psn: u32,
    /// Local ACK timeout code (4.096 us * 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Outgoing RDMA READs in flight.
    pub max_rd_atomic: u8,
}

/// One QP state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpModify {
    /// RESET -> INIT.
    Init {
        /// Port number.
        port: u8,
        /// `IBV_ACCESS_*` remote rights.
        access: u32,
    },
    /// INIT -> RTR.
    Rtr(RtrAttr),
    /// RTR -> RTS.
    Rts(RtsAttr),
    /// Any -> ERR.
    Err,
    /// Any -> RESET.
    Reset,
}

/// One send WQE to post.
pub struct SendItem<'a> {
    /// Device `wr_id`.
    pub wr_id: u64,
    /// `IBV_SEND_SIGNALED`.
    pub signaled: bool,
    /// The fields.
    pub wr: &'a IbvSendWr,
}

/// An RC queue pair.
pub struct Qp {
    ptr: NonNull<ffi::ibv_qp>,
    pd: Arc<Pd>,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    qp_num: u32,
    caps: QpCaps,
    released: bool,
}

// SAFETY: see `Context`.
unsafe impl Send for Qp {}
// SAFETY: see `Context`.
unsafe impl Sync for Qp {}

impl Qp {
    /// `ibv_create_qp` of an RC QP (`sq_sig_all = 0`).
    pub fn new(pd: &Arc<Pd>, send_cq: &Arc<Cq>, recv_cq: &Arc<Cq>, caps: QpCaps) -> Result<Qp, RnicError> {
        // SAFETY: `ibv_qp_init_attr` is plain data; all-zero is valid.
        let mut a: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.send_cq = send_cq.ptr.as_ptr();
        a.recv_cq = recv_cq.ptr.as_ptr();
        a.cap = ffi::ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: caps.max_inline_data,
        };
        a.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
        a.sq_sig_all = 0;
        // SAFETY: live PD and CQs of the same context (the backend creates
        // them all from one context); `a` is valid for reads and writes.
        let p = unsafe { ffi::ibv_create_qp(pd.ptr.as_ptr(), &mut a) };
        let ptr = NonNull::new(p).ok_or_else(|| errno_to_error(Verb::CreateQp, last_errno(), 0))?;
        // SAFETY: `ptr` is the live QP just created.
        let qp_num = unsafe { (*ptr.as_ptr()).qp_num };
        let actual = QpCaps {
            max_send_wr: a.cap.max_send_wr,
            max_recv_wr: a.cap.max_recv_wr,
            max_send_sge: a.cap.max_send_sge,
            max_recv_sge: a.cap.max_recv_sge,
            max_inline_data: a.cap.max_inline_data,
        };
        Ok(Qp {
            ptr,
            pd: pd.clone(),
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            qp_num,
            caps: actual,
            released: false,
        })
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// The queue sizes the device granted.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// `ibv_modify_qp` with the attribute mask of the transition.
    pub fn modify(&self, m: QpModify) -> Result<(), RnicError> {
        use ffi::ibv_qp_attr_mask as k;
        use ffi::ibv_qp_state as s;
        // SAFETY: `ibv_qp_attr` is plain data; all-zero is valid.
        let mut a: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        let mask = match m {
            QpModify::Init { port, access } => {
                a.qp_state = s::IBV_QPS_INIT;
                a.pkey_index = 0;
                a.port_num = port;
                a.qp_access_flags = access;
                k::IBV_QP_STATE.0 | k::IBV_QP_PKEY_INDEX.0 | k::IBV_QP_PORT.0 | k::IBV_QP_ACCESS_FLAGS.0
            }
            QpModify::Rtr(r) => {
                a.qp_state = s::IBV_QPS_RTR;
                a.path_mtu = r.path_mtu;
                a.dest_qp_num = r.dest_qp_num;
                a.rq_psn = r.rq_psn;
                a.max_dest_rd_atomic = r.max_dest_rd_atomic;
                a.min_rnr_timer = r.min_rnr_timer;
                a.ah_attr.is_global = 1;
                a.ah_attr.grh.dgid = ffi::ibv_gid { raw: r.dgid };
                a.ah_attr.grh.sgid_index = r.sgid_index;
                a.ah_attr.grh.hop_limit = r.hop_limit;
                a.ah_attr.grh.traffic_class = r.traffic_class;
                a.ah_attr.sl = r.sl;
                a.ah_attr.dlid = r.dlid;
                a.ah_attr.port_num = r.port;
                k::IBV_QP_STATE.0
                    | k::IBV_QP_AV.0
                    | k::IBV_QP_PATH_MTU.0
                    | k::IBV_QP_DEST_QPN.0
                    | k::IBV_QP_RQ_PSN.0
                    | k::IBV_QP_MAX_DEST_RD_ATOMIC.0
                    | k::IBV_QP_MIN_RNR_TIMER.0
            }
            QpModify::Rts(r) => {
                a.qp_state = s::IBV_QPS_RTS;
                a.sq_psn = r.sq_psn;
                a.timeout = r.timeout;
                a.retry_cnt = r.retry_cnt;
                a.rnr_retry = r.rnr_retry;
                a.max_rd_atomic = r.max_rd_atomic;
                k::IBV_QP_STATE.0
                    | k::IBV_QP_SQ_PSN.0
                    | k::IBV_QP_TIMEOUT.0
                    | k::IBV_QP_RETRY_CNT.0
                    | k::IBV_QP_RNR_RETRY.0
                    | k::IBV_QP_MAX_QP_RD_ATOMIC.0
            }
            QpModify::Err => {
                a.qp_state = s::IBV_QPS_ERR;
                k::IBV_QP_STATE.0
            }
            QpModify::Reset => {
                a.qp_state = s::IBV_QPS_RESET;
                k::IBV_QP_STATE.0
            }
        };
        // SAFETY: live QP; `a` is valid for the call and `mask` names only
        // the fields set above.
        let rc = unsafe { ffi::ibv_modify_qp(self.ptr.as_ptr(), &mut a, mask as c_int) };
        if rc != 0 {
            return Err(errno_to_error(Verb::ModifyQp, rc_errno(rc), 0));
        }
        Ok(())
    }

    /// The QP's state (`ibv_query_qp`), as a raw `IBV_QPS_*` value.
    pub fn query_state(&self) -> Result<u32, RnicError> {
        // SAFETY: plain data; all-zero is valid.
        let mut a: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain data; all-zero is valid.
        let mut init: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        let mask = ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int;
        // SAFETY: live QP; both structs are valid for writes for the call.
        let rc = unsafe { ffi::ibv_query_qp(self.ptr.as_ptr(), &mut a, mask, &mut init) };
        if rc != 0 {
            return Err(errno_to_error(Verb::QueryQp, rc_errno(rc), 0));
        }
        Ok(a.qp_state)
    }

    /// Posts a chained list of send WQEs with one `ibv_post_send`. On
    /// failure, returns the index of the first WQE not posted (`bad_wr`).
    pub fn post_send(&self, items: &[SendItem<'_>]) -> Result<(), (usize, RnicError)> {
        let n = items.len();
        if n == 0 {
            return Ok(());
        }
        let nsge: usize =
            items.iter().map(|it| if it.wr.inline_data.is_some() { 1 } else { it.wr.sg_list.len() }).sum();
        let mut sges: Vec<ffi::ibv_sge> = Vec::with_capacity(nsge);
        let mut wrs: Vec<ffi::ibv_send_wr> = Vec::with_capacity(n);
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(n);
        for it in items {
            let start = sges.len();
            match &it.wr.inline_data {
                // The driver copies inline bytes during ibv_post_send; the SGE
                // points at the WQE's own buffer, alive for the call.
                Some(b) => sges.push(ffi::ibv_sge { addr: b.as_ptr() as u64, length: b.len() as u32, lkey: 0 }),
                None => sges.extend(it.wr.sg_list.iter().map(|s| ffi::ibv_sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                })),
            }
            spans.push((start, sges.len() - start));
            // SAFETY: `ibv_send_wr` is plain data (integers, raw pointers and
            // unions of them); all-zero is a valid value.
            let mut w: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
            w.wr_id = it.wr_id;
            w.opcode = it.wr.opcode;
            w.send_flags = it.wr.flags(it.signaled);
            w.imm_data_invalidated_rkey_union.imm_data = it.wr.imm_data_be;
            w.wr.rdma = ffi::rdma_t { remote_addr: it.wr.remote_addr, rkey: it.wr.rkey };
            wrs.push(w);
        }
        let wr_base = wrs.as_mut_ptr();
        let sge_base = sges.as_mut_ptr();
        let mut bad: *mut ffi::ibv_send_wr = ptr::null_mut();
        // SAFETY: both vectors are fully built and not touched again until
        // after the call, so the raw pointers derived from them stay valid:
        // `chain` points each `next` at the following element of `wrs` (the
        // last at NULL), each `sg_list` at `count` initialised SGEs of
        // `sges` (NULL when there are none). Every SGE names either
        // registered memory (the NIC checks lkey and bounds) or, for inline
        // WQEs, the WQE's own buffer, alive for the call. The QP is live.
        let rc = unsafe {
            chain(wr_base, sge_base, &spans);
            ffi::ibv_post_send(self.ptr.as_ptr(), wr_base, &mut bad)
        };
        if rc == 0 {
            return Ok(());
        }
        Err((bad_index(bad as usize, wr_base as usize, std::mem::size_of::<ffi::ibv_send_wr>(), n), {
            errno_to_error(Verb::PostSend, rc_errno(rc), self.caps.max_send_wr)
        }))
    }

    /// Posts a chained list of receive WQEs with one `ibv_post_recv`.
    pub fn post_recv(&self, items: &[(u64, &[Sge])]) -> Result<(), (usize, RnicError)> {
        let n = items.len();
        if n == 0 {
            return Ok(());
        }
        let nsge: usize = items.iter().map(|(_, s)| s.len()).sum();
        let mut sges: Vec<ffi::ibv_sge> = Vec::with_capacity(nsge);
        let mut wrs: Vec<ffi::ibv_recv_wr> = Vec::with_capacity(n);
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(n);
        for (wr_id, sgl) in items {
            let start = sges.len();
            sges.extend(sgl.iter().map(|s| ffi::ibv_sge { addr: s.addr, length: s.length, lkey: s.lkey }));
            spans.push((start, sgl.len()));
            wrs.push(ffi::ibv_recv_wr { wr_id: *wr_id, next: ptr::null_mut(), sg_list: ptr::null_mut(), num_sge: 0 });
        }
        let wr_base = wrs.as_mut_ptr();
        let sge_base = sges.as_mut_ptr();
        let mut bad: *mut ffi::ibv_recv_wr = ptr::null_mut();
        // SAFETY: as in `post_send`: fully built vectors, pointers into them
        // only, SGEs checked by the NIC against registered memory, live QP.
        let rc = unsafe {
            chain(wr_base, sge_base, &spans);
            ffi::ibv_post_recv(self.ptr.as_ptr(), wr_base, &mut bad)
        };
        if rc == 0 {
            return Ok(());
        }
        Err((bad_index(bad as usize, wr_base as usize, std::mem::size_of::<ffi::ibv_recv_wr>(), n), {
            errno_to_error(Verb::PostRecv, rc_errno(rc), self.caps.max_recv_wr)
        }))
    }
}

/// A verbs work request posted as a chain (`ibv_send_wr`, `ibv_recv_wr`).
trait ChainedWr {
    /// Points the WR at its `num_sge` SGEs and at the next WR of the chain.
    fn link(&mut self, sg_list: *mut ffi::ibv_sge, num_sge: c_int, next: *mut Self);
}

impl ChainedWr for ffi::ibv_send_wr {
    fn link(&mut self, sg_list: *mut ffi::ibv_sge, num_sge: c_int, next: *mut Self) {
        (self.sg_list, self.num_sge, self.next) = (sg_list, num_sge, next);
    }
}

impl ChainedWr for ffi::ibv_recv_wr {
    fn link(&mut self, sg_list: *mut ffi::ibv_sge, num_sge: c_int, next: *mut Self) {
        (self.sg_list, self.num_sge, self.next) = (sg_list, num_sge, next);
    }
}

/// Chains the `spans.len()` WRs at `wrs` for one post: WR `i` gets the
/// `count` SGEs at `sges + start` of `spans[i]` (`sg_list` NULL when it has
/// none) and points at WR `i + 1`; the last one's `next` is NULL.
///
/// # Safety
/// `wrs` points at `spans.len()` initialised WRs and `sges` at an array
/// holding every span, both valid for writes and not otherwise borrowed
/// while this runs.
unsafe fn chain<W: ChainedWr>(wrs: *mut W, sges: *mut ffi::ibv_sge, spans: &[(usize, usize)]) {
    for (i, &(start, count)) in spans.iter().enumerate() {
        // SAFETY: `i` and `start` lie inside the arrays (the caller's
        // promise), so every pointer formed and the WR written are theirs.
        unsafe {
            let sg_list = if count > 0 { sges.add(start) } else { ptr::null_mut() };
            let next = if i + 1 < spans.len() { wrs.add(i + 1) } else { ptr::null_mut() };
            (*wrs.add(i)).link(sg_list, count as c_int, next);
        }
    }
}

/// Index of `bad_wr` in a list starting at `base` (0 if it is not in it).
fn bad_index(bad: usize, base: usize, size: usize, n: usize) -> usize {
    bad.checked_sub(base).map(|d| d / size.max(1)).filter(|&i| i < n).unwrap_or(0)
}

impl Qp {
    /// `ibv_destroy_qp`, reporting a failure (the QP's PD and CQs are then
    /// kept forever, since the device still references them).
    pub fn destroy(mut self) -> Result<(), RnicError> {
        self.release()
    }

    fn release(&mut self) -> Result<(), RnicError> {
        let qp = self.ptr.as_ptr();
        release_once(
            &mut self.released,
            // SAFETY: the QP is live and destroyed once (`released`); its PD
            // and CQs are kept alive by the Arcs this struct holds until
            // after this.
            || unsafe { ffi::ibv_destroy_qp(qp) },
            // The device still holds the QP: keep what it references.
            || {
                std::mem::forget(self.pd.clone());
                std::mem::forget(self.send_cq.clone());
                std::mem::forget(self.recv_cq.clone());
            },
        )
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // A failure is already handled (by leaking); nobody to tell here.
        let _ = self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_index_stays_in_the_list() {
        assert_eq!(bad_index(1000 + 3 * 128, 1000, 128, 5), 3);
        assert_eq!(bad_index(0, 1000, 128, 5), 0, "NULL bad_wr");
        assert_eq!(bad_index(1000 + 9 * 128, 1000, 128, 5), 0, "outside the list");
    }

    #[test]
    fn hand_written_structs_match_the_headers() {
        use std::mem::{align_of, size_of};
        assert_eq!(size_of::<AsyncEventC>(), size_of::<ffi::ibv_async_event>());
        assert_eq!(align_of::<AsyncEventC>(), align_of::<ffi::ibv_async_event>());
        // struct ibv_gid_entry: a 16 B GID and four u32s.
        assert_eq!(size_of::<IbvGidEntry>(), 32);
        assert_eq!(size_of::<IbvGidEntry>(), size_of::<ffi::ibv_gid_entry>());
    }

    #[test]
    fn page_size_is_a_power_of_two() {
        let p = page_size();
        assert!(p >= 4096 && p.is_power_of_two(), "{p}");
    }

    #[test]
    fn c_strings_stop_at_nul() {
        let raw: Vec<std::os::raw::c_char> = b"20.31.1014\0junk".iter().map(|&b| b as std::os::raw::c_char).collect();
        assert_eq!(c_chars_to_string(&raw), "20.31.1014");
    }
}
