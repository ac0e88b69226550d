//! Devices, contexts, protection domains, regions, CQs, completion
//! channels and QPs: the control path. Each call that needs the daemon
//! goes through [`crate::process`]; the objects handed out are this
//! library's own heap allocations, freed by their destroy call.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;
use std::time::Duration;

use perf_client::MrWindow;

use super::{boxed, minus_one, null_with};
use crate::abi::{self as v};
use crate::{device, memory, process, Errno};

/// The one device, made once and never freed (as rdma-core keeps its
/// device list for the process's life).
fn the_device() -> *mut v::ibv_device {
    static DEVICE: OnceLock<usize> = OnceLock::new();
    *DEVICE.get_or_init(|| {
        let mut d = boxed::<v::ibv_device>();
        device::fill_device(&mut d);
        Box::into_raw(d) as usize
    }) as *mut v::ibv_device
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut v::ibv_device {
    let list: Box<[*mut v::ibv_device; 2]> = Box::new([the_device(), std::ptr::null_mut()]);
    if !num.is_null() {
        *num = 1;
    }
    Box::into_raw(list) as *mut *mut v::ibv_device
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut v::ibv_device) {
    if !list.is_null() {
        drop(Box::from_raw(list as *mut [*mut v::ibv_device; 2]));
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut v::ibv_device) -> *const c_char {
    if dev.is_null() {
        return std::ptr::null();
    }
    (*dev).name.as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_get_device_guid(_dev: *mut v::ibv_device) -> u64 {
    device::NODE_GUID.to_be()
}

#[no_mangle]
pub extern "C" fn ibv_get_device_index(_dev: *mut v::ibv_device) -> c_int {
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(dev: *mut v::ibv_device) -> *mut v::ibv_context {
    if dev != the_device() {
        return null_with(Errno(libc::ENODEV));
    }
    if let Err(e) = process::lock() {
        return null_with(e);
    }
    let mut ctx = boxed::<v::ibv_context>();
    ctx.device = dev;
    ctx.ops.poll_cq = Some(super::datapath::poll_cq);
    ctx.ops.req_notify_cq = Some(super::datapath::req_notify_cq);
    ctx.ops.post_send = Some(super::datapath::post_send);
    ctx.ops.post_recv = Some(super::datapath::post_recv);
    ctx.ops.post_srq_recv = Some(super::datapath::post_srq_recv);
    ctx.cmd_fd = -1;
    // Programs poll the async fd for port and QP events: one that never
    // becomes readable (this NIC reports none).
    ctx.async_fd = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
    ctx.num_comp_vectors = 1;
    Box::into_raw(ctx)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut v::ibv_context) -> c_int {
    if ctx.is_null() {
        return minus_one(Errno(libc::EINVAL));
    }
    let ctx = Box::from_raw(ctx);
    if ctx.async_fd >= 0 {
        libc::close(ctx.async_fd);
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(_ctx: *mut v::ibv_context, attr: *mut v::ibv_device_attr) -> c_int {
    if attr.is_null() {
        return libc::EINVAL;
    }
    let mut a = *boxed::<v::ibv_device_attr>();
    device::fill_device_attr(&mut a);
    *attr = a;
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(_ctx: *mut v::ibv_context, port: u8, attr: *mut c_void) -> c_int {
    if port != 1 || attr.is_null() {
        return libc::EINVAL;
    }
    let mut a = *boxed::<v::ibv_port_attr>();
    device::fill_port_attr(&mut a);
    // The exported call's struct is the compat one, which ends before
    // `flags`: write no further (verbs.h's inline caller zeroed the rest).
    let n = std::mem::offset_of!(v::ibv_port_attr, flags);
    std::ptr::copy_nonoverlapping(&a as *const v::ibv_port_attr as *const u8, attr as *mut u8, n);
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    _ctx: *mut v::ibv_context,
    port: u8,
    index: c_int,
    gid: *mut v::ibv_gid,
) -> c_int {
    if port != 1 || index != 0 || gid.is_null() {
        return -1;
    }
    (*gid).raw = device::gid();
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    _ctx: *mut v::ibv_context,
    port: u8,
    index: u32,
    gid_type: *mut c_int,
) -> c_int {
    if port != 1 || index != 0 || gid_type.is_null() {
        return libc::EINVAL;
    }
    *gid_type = 0; // IBV_GID_TYPE_IB
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(_ctx: *mut v::ibv_context, port: u8, index: c_int, pkey: *mut u16) -> c_int {
    if port != 1 || index != 0 || pkey.is_null() {
        return -1;
    }
    *pkey = 0xffffu16.to_be();
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut v::ibv_context) -> *mut v::ibv_pd {
    let mut pd = boxed::<v::ibv_pd>();
    pd.context = ctx;
    Box::into_raw(pd)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut v::ibv_pd) -> c_int {
    if pd.is_null() {
        return libc::EINVAL;
    }
    drop(Box::from_raw(pd));
    0
}

/// Registers `[addr, addr + len)` at address `iova`.
unsafe fn reg_mr(pd: *mut v::ibv_pd, addr: *mut c_void, len: usize, iova: u64) -> *mut v::ibv_mr {
    if pd.is_null() || addr.is_null() {
        return null_with(Errno(libc::EINVAL));
    }
    let r = process::with(|p| {
        let i = memory::share(&mut p.shared, addr as u64, len as u64)?;
        let s = &p.shared[i];
        let (start, pages) = (s.start, s.end - s.start);
        let registered = s.file.try_clone().map_err(|_| Errno(libc::EMFILE)).and_then(|file| {
            let window = MrWindow { offset: addr as u64 - start, len: len as u64, iova };
            p.reg_window(&file, pages, window)
        });
        if registered.is_err() {
            memory::release(&mut p.shared, addr as u64, len as u64);
        }
        registered
    });
    match r {
        Err(e) => null_with(e),
        Ok(m) => {
            let mut mr = boxed::<v::ibv_mr>();
            mr.context = (*pd).context;
            mr.pd = pd;
            mr.addr = addr;
            mr.length = len;
            mr.handle = m.index;
            mr.lkey = m.key;
            mr.rkey = m.key;
            Box::into_raw(mr)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    _access: c_int,
) -> *mut v::ibv_mr {
    reg_mr(pd, addr, len, addr as u64)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut v::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    _access: u32,
) -> *mut v::ibv_mr {
    reg_mr(pd, addr, len, iova)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut v::ibv_mr) -> c_int {
    if mr.is_null() {
        return libc::EINVAL;
    }
    let mr = Box::from_raw(mr);
    let _ = process::with(|p| {
        p.forget_mr(mr.lkey);
        memory::release(&mut p.shared, mr.addr as u64, mr.length as u64);
        Ok(())
    });
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut v::ibv_context) -> *mut v::ibv_comp_channel {
    let mut ch = boxed::<v::ibv_comp_channel>();
    ch.context = ctx;
    ch.fd = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
    if ch.fd < 0 {
        return null_with(Errno::last());
    }
    Box::into_raw(ch)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut v::ibv_comp_channel) -> c_int {
    if ch.is_null() {
        return minus_one(Errno(libc::EINVAL));
    }
    let ch = Box::from_raw(ch);
    libc::close(ch.fd);
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut v::ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut v::ibv_comp_channel,
    _comp_vector: c_int,
) -> *mut v::ibv_cq {
    if cqe <= 0 {
        return null_with(Errno(libc::EINVAL));
    }
    let fd = (!channel.is_null()).then(|| (*channel).fd);
    let mut cq = boxed::<v::ibv_cq>();
    cq.context = ctx;
    cq.channel = channel;
    cq.cq_context = cq_context;
    cq.cqe = cqe;
    let cq = Box::into_raw(cq);
    match process::with(|p| {
        let h = p.create_cq(fd);
        p.cq(h)?.object = cq as usize;
        Ok(h)
    }) {
        Ok(h) => {
            (*cq).handle = h;
            cq
        }
        Err(e) => {
            drop(Box::from_raw(cq));
            null_with(e)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut v::ibv_cq, cqe: c_int) -> c_int {
    if cq.is_null() || cqe <= 0 {
        return libc::EINVAL;
    }
    (*cq).cqe = cqe;
    0
}

/// Destroys the process's object behind `obj` (`gone` on its handle),
/// then frees `obj`; the errno if either fails.
unsafe fn destroy<T>(
    obj: *mut T,
    handle: impl FnOnce(&T) -> u32,
    gone: impl FnOnce(&mut process::Process, u32) -> Result<(), Errno>,
) -> c_int {
    if obj.is_null() {
        return libc::EINVAL;
    }
    let h = handle(&*obj);
    match process::with(|p| gone(p, h)) {
        Ok(()) => {
            drop(Box::from_raw(obj));
            0
        }
        Err(e) => e.0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut v::ibv_cq) -> c_int {
    destroy(cq, |c| c.handle, |p, h| p.destroy_cq(h))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut v::ibv_comp_channel,
    cq: *mut *mut v::ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    if ch.is_null() || cq.is_null() || cq_context.is_null() {
        return minus_one(Errno(libc::EINVAL));
    }
    let fd = (*ch).fd;
    // No thread of ours watches the rings: the wait polls them, backing
    // off to 50 us between looks.
    let mut pause = Duration::from_micros(1);
    loop {
        match process::with(|p| Ok(p.take_event(fd))) {
            Err(e) => return minus_one(e),
            Ok(Some(obj)) => {
                let c = obj as *mut v::ibv_cq;
                *cq = c;
                *cq_context = (*c).cq_context;
                return 0;
            }
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_micros(50));
            }
        }
    }
}

#[no_mangle]
pub extern "C" fn ibv_ack_cq_events(_cq: *mut v::ibv_cq, _n: u32) {}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut v::ibv_pd, init: *mut v::ibv_qp_init_attr) -> *mut v::ibv_qp {
    if pd.is_null() || init.is_null() {
        return null_with(Errno(libc::EINVAL));
    }
    let a = &mut *init;
    if a.qp_type != v::IBV_QPT_RC || !a.srq.is_null() || a.send_cq.is_null() || a.recv_cq.is_null() {
        crate::warn("only RC QPs without an SRQ are offered");
        return null_with(Errno(libc::EOPNOTSUPP));
    }
    let (scq, rcq) = ((*a.send_cq).handle, (*a.recv_cq).handle);
    let r = process::with(|p| {
        let i = p.create_qp(scq, rcq, a.cap, a.sq_sig_all != 0)?;
        let q = p.qp(i)?;
        Ok((i, q.qpn, q.cap))
    });
    match r {
        Err(e) => null_with(e),
        Ok((index, qpn, cap)) => {
            a.cap = cap;
            let mut qp = boxed::<v::ibv_qp>();
            qp.context = (*pd).context;
            qp.qp_context = a.qp_context;
            qp.pd = pd;
            qp.send_cq = a.send_cq;
            qp.recv_cq = a.recv_cq;
            qp.handle = index;
            qp.qp_num = qpn;
            qp.state = v::IBV_QPS_RESET;
            qp.qp_type = v::IBV_QPT_RC;
            Box::into_raw(qp)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut v::ibv_qp, attr: *mut v::ibv_qp_attr, mask: c_int) -> c_int {
    if qp.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    let mask = mask as u32;
    if mask & v::IBV_QP_STATE == 0 {
        return 0;
    }
    let (index, to) = ((*qp).handle, (*attr).qp_state);
    let dest = (mask & v::IBV_QP_DEST_QPN != 0).then(|| (*attr).dest_qp_num);
    let r = process::with(|p| {
        if to == v::IBV_QPS_RTR {
            let dest = dest.ok_or(Errno(libc::EINVAL))?;
            p.connect(index, dest)?;
        }
        p.qp(index)?.state = to;
        Ok(())
    });
    match r {
        Ok(()) => {
            (*qp).state = to;
            0
        }
        Err(e) => e.0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut v::ibv_qp,
    attr: *mut v::ibv_qp_attr,
    _mask: c_int,
    init: *mut v::ibv_qp_init_attr,
) -> c_int {
    if qp.is_null() || attr.is_null() || init.is_null() {
        return libc::EINVAL;
    }
    let r = process::with(|p| {
        let q = p.qp((*qp).handle)?;
        Ok((q.state, q.dest_qpn, q.cap))
    });
    let (state, dest, cap) = match r {
        Ok(x) => x,
        Err(e) => return e.0,
    };
    let mut a = *boxed::<v::ibv_qp_attr>();
    a.qp_state = state;
    a.cur_qp_state = state;
    a.path_mtu = v::IBV_MTU_4096;
    a.dest_qp_num = dest;
    a.qp_access_flags = v::IBV_ACCESS_LOCAL_WRITE | v::IBV_ACCESS_REMOTE_WRITE | v::IBV_ACCESS_REMOTE_READ;
    a.cap = cap;
    a.max_rd_atomic = 16;
    a.max_dest_rd_atomic = 16;
    a.port_num = 1;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    *attr = a;
    let i = &mut *init;
    i.qp_context = (*qp).qp_context;
    i.send_cq = (*qp).send_cq;
    i.recv_cq = (*qp).recv_cq;
    i.srq = std::ptr::null_mut();
    i.cap = cap;
    i.qp_type = v::IBV_QPT_RC;
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut v::ibv_qp) -> c_int {
    destroy(qp, |q| q.handle, |p, h| p.destroy_qp(h))
}
