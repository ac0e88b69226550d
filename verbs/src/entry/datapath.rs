//! The data path: the ops of the contexts this library opens, which
//! verbs.h's inline `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and
//! `ibv_req_notify_cq` call. A post list becomes one post list on the
//! request ring (one index store); a poll drains the completion ring.

use std::ffi::c_int;

use perf_client::RemoteAddr;

use crate::abi::{self as v};
use crate::process::{self, Local, SendWr, STAGING_SLOT};
use crate::Errno;

/// Copies the SGEs of a WR into `buf` (inline data, or a gather list the
/// ring's one local buffer cannot name); returns the bytes copied.
unsafe fn gather(sges: &[v::ibv_sge], buf: &mut [u8; STAGING_SLOT]) -> Result<usize, Errno> {
    let mut n = 0;
    for s in sges {
        let len = s.length as usize;
        if n + len > STAGING_SLOT {
            return Err(Errno(libc::EINVAL));
        }
        std::ptr::copy_nonoverlapping(s.addr as *const u8, buf[n..].as_mut_ptr(), len);
        n += len;
    }
    Ok(n)
}

/// The SGE list of a WR.
unsafe fn sges<'a>(list: *mut v::ibv_sge, n: c_int) -> Result<&'a [v::ibv_sge], Errno> {
    match n {
        0 => Ok(&[]),
        n if n < 0 || list.is_null() => Err(Errno(libc::EINVAL)),
        n => Ok(std::slice::from_raw_parts(list, n as usize)),
    }
}

/// Stages one send-side WR of QP `qp`.
unsafe fn stage(p: &mut process::Process, qp: u32, wr: &v::ibv_send_wr) -> Result<(), Errno> {
    let list = sges(wr.sg_list, wr.num_sge)?;
    let inline = wr.send_flags & v::IBV_SEND_INLINE != 0;
    let mut buf = [0u8; STAGING_SLOT];
    let local = match list {
        [s] if !inline => Local::Region { lkey: s.lkey, addr: s.addr, len: s.length },
        _ if wr.opcode == v::IBV_WR_RDMA_READ => return Err(Errno(libc::EINVAL)),
        _ => {
            let n = gather(list, &mut buf)?;
            Local::Copied(&buf[..n])
        }
    };
    let rdma = wr.wr.rdma;
    let s = SendWr {
        wr_id: wr.wr_id,
        opcode: wr.opcode,
        local,
        remote: RemoteAddr { addr: rdma.remote_addr, rkey: rdma.rkey },
        imm: wr.__bindgen_anon_1.imm_data,
        signaled: wr.send_flags & v::IBV_SEND_SIGNALED != 0,
    };
    p.stage_send(qp, &s)
}

/// A verbs post list's work request (`ibv_send_wr`, `ibv_recv_wr`).
trait WrList {
    fn wr_id(&self) -> u64;
    fn next(&self) -> *mut Self;
}

impl WrList for v::ibv_send_wr {
    fn wr_id(&self) -> u64 {
        self.wr_id
    }
    fn next(&self) -> *mut Self {
        self.next
    }
}

impl WrList for v::ibv_recv_wr {
    fn wr_id(&self) -> u64 {
        self.wr_id
    }
    fn next(&self) -> *mut Self {
        self.next
    }
}

/// Flushes every WR of the list at `wr` with `flush` (a QP in ERR).
unsafe fn flush_all<W: WrList>(
    wr: *mut W,
    mut flush: impl FnMut(u64) -> Result<(), Errno>,
) -> Result<Result<(), (*mut W, Errno)>, Errno> {
    let mut at = wr;
    while !at.is_null() {
        flush((*at).wr_id())?;
        at = (*at).next();
    }
    Ok(Ok(()))
}

/// The post's outcome when the ring took `taken` of its `n` WRs: the
/// first one not taken is the bad WR (`ENOMEM`: the ring stayed full).
unsafe fn taken_of<W: WrList>(wr: *mut W, taken: usize, n: usize) -> Result<(), (*mut W, Errno)> {
    if taken == n {
        return Ok(());
    }
    let mut first = wr;
    for _ in 0..taken {
        first = (*first).next();
    }
    Err((first, Errno(libc::ENOMEM)))
}

pub unsafe extern "C" fn post_send(
    qp: *mut v::ibv_qp,
    wr: *mut v::ibv_send_wr,
    bad: *mut *mut v::ibv_send_wr,
) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    let index = (*qp).handle;
    let r = process::with(|p| {
        if p.in_error(index) {
            return flush_all(wr, |id| p.flush_send(index, id));
        }
        let (mut at, mut n) = (wr, 0usize);
        while !at.is_null() {
            if let Err(e) = stage(p, index, &*at) {
                p.unstage(index, n);
                return Ok(Err((at, e)));
            }
            n += 1;
            at = (*at).next;
        }
        let taken = p.post(index, true)?;
        Ok(taken_of(wr, taken, n))
    });
    finish(r, bad)
}

/// The op's return: 0, or the errno with `*bad` the first WR not taken.
unsafe fn finish<W>(r: Result<Result<(), (*mut W, Errno)>, Errno>, bad: *mut *mut W) -> c_int {
    match r {
        Ok(Ok(())) => 0,
        Ok(Err((at, e))) => {
            if !bad.is_null() {
                *bad = at;
            }
            e.0
        }
        Err(e) => e.0,
    }
}

pub unsafe extern "C" fn post_recv(
    qp: *mut v::ibv_qp,
    wr: *mut v::ibv_recv_wr,
    bad: *mut *mut v::ibv_recv_wr,
) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    let index = (*qp).handle;
    let r = process::with(|p| {
        if p.in_error(index) {
            return flush_all(wr, |id| p.flush_recv(index, id));
        }
        let (mut at, mut n) = (wr, 0usize);
        while !at.is_null() {
            let w = &*at;
            let staged = match sges(w.sg_list, w.num_sge) {
                Ok([s]) => p.stage_recv(index, w.wr_id, s.lkey, s.addr, s.length),
                Ok(_) => Err(Errno(libc::EINVAL)),
                Err(e) => Err(e),
            };
            if let Err(e) = staged {
                p.unstage_recvs(index, n);
                return Ok(Err((at, e)));
            }
            n += 1;
            at = w.next;
        }
        // Before the connection every RECV waits in the QP (none in the
        // ring); after it, none does.
        let waiting = n - p.staged();
        let taken = waiting + p.post(index, false)?;
        Ok(taken_of(wr, taken, n))
    });
    finish(r, bad)
}

pub unsafe extern "C" fn post_srq_recv(
    _srq: *mut v::ibv_srq,
    wr: *mut v::ibv_recv_wr,
    bad: *mut *mut v::ibv_recv_wr,
) -> c_int {
    if !bad.is_null() {
        *bad = wr;
    }
    libc::EOPNOTSUPP
}

pub unsafe extern "C" fn poll_cq(cq: *mut v::ibv_cq, n: c_int, wc: *mut v::ibv_wc) -> c_int {
    if cq.is_null() || n < 0 || (n > 0 && wc.is_null()) {
        return -1;
    }
    let h = (*cq).handle;
    let r = process::with(|p| {
        p.poll_cq(h, n as usize, |i, c| {
            let mut w: v::ibv_wc = std::mem::zeroed();
            w.wr_id = c.wr_id;
            w.status = c.status;
            w.opcode = c.opcode;
            w.byte_len = c.byte_len;
            w.qp_num = c.qp_num;
            w.src_qp = c.src_qp;
            if let Some(imm) = c.imm {
                w.__bindgen_anon_1.imm_data = imm;
                w.wc_flags = v::IBV_WC_WITH_IMM;
            }
            *wc.add(i) = w;
        })
    });
    match r {
        Ok(got) => got as c_int,
        Err(_) => -1,
    }
}

pub unsafe extern "C" fn req_notify_cq(cq: *mut v::ibv_cq, _solicited_only: c_int) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    let h = (*cq).handle;
    match process::with(|p| {
        p.cq(h)?.armed = true;
        Ok(())
    }) {
        Ok(()) => 0,
        Err(e) => e.0,
    }
}
