//! The process's one connection to `perf-runner serve`, and what the verbs
//! objects of all its contexts are there: regions by key, QPs by the
//! daemon's index, CQs by handle. Every entry point takes the one lock
//! (verbs calls may come from several threads; the rings are single
//! producer, single consumer).
//!
//! The daemon completes every request it takes, in per-QP order. Verbs
//! gives a CQE only for the signaled ones (and for every failed one), so
//! each QP keeps, in posting order, what each send-side WR asked for; a
//! completion from the ring is matched with the oldest and shown only if
//! the application asked for it.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use perf_client::{Client, Completion, ConnectOptions, Mr, MrWindow, Op, RemoteAddr, Status, WorkRequest};

use crate::abi::{self as v};
use crate::{Errno, SOCKET_ENV, TENANT_ENV};

/// Bytes of one staging slot: inline data and gathered SGEs are copied
/// there at post time (the buffer is the application's again at once).
pub const STAGING_SLOT: usize = 256;
/// How long a post waits for room in the request ring before it fails
/// with `ENOMEM`.
pub const POST_WAIT: Duration = Duration::from_secs(1);

/// A registered region: its key (lkey and rkey), its index in the daemon,
/// its address and length.
#[derive(Debug, Clone, Copy)]
pub struct MrEntry {
    /// The region's key (the daemon's rkey, also its lkey here).
    pub key: u32,
    /// The daemon's region index.
    pub index: u32,
    /// The region's first address.
    pub iova: u64,
    /// Its length.
    pub len: u64,
}

/// Pages remapped onto a memfd (see [`crate::memory`]).
pub struct SharedPages {
    /// First page.
    pub start: u64,
    /// Past the last page.
    pub end: u64,
    /// The memfd the pages are now.
    pub file: File,
    /// Registrations on these pages not deregistered yet.
    pub live: u32,
}

/// What a send-side WR asked for, kept until its completion comes back.
#[derive(Debug, Clone, Copy)]
struct SendMeta {
    wr_id: u64,
    signaled: bool,
    opcode: v::ibv_wc_opcode,
    len: u32,
    /// Posted while the QP was in ERR: it never went to the daemon, and
    /// completes with a flush error as soon as every WR before it has.
    flushed: bool,
}

/// A QP of this process.
pub struct QpState {
    send_cq: u32,
    recv_cq: u32,
    /// Its number on the NIC.
    pub qpn: u32,
    sig_all: bool,
    /// Its verbs state (`IBV_QPS_*`).
    pub state: v::ibv_qp_state,
    /// The QP number it was connected to (meaningful once `connected`).
    pub dest_qpn: u32,
    /// Whether the daemon connected it (its RECVs go to the daemon from
    /// then on; QP number 0 is a valid number to be connected to).
    connected: bool,
    /// Its capabilities as granted.
    pub cap: v::ibv_qp_cap,
    pending: VecDeque<SendMeta>,
    /// RECVs posted before the QP was connected: verbs takes them in INIT
    /// and uses them from RTR on; the daemon's QP takes work only once
    /// connected, so they are posted right after the connection.
    early_recvs: Vec<WorkRequest>,
    staging: Mr,
    next_slot: u32,
}

impl QpState {
    /// The flush-error CQE of WR `wr_id` of this QP.
    fn flush_wc(&self, wr_id: u64, opcode: v::ibv_wc_opcode) -> Wc {
        let status = v::IBV_WC_WR_FLUSH_ERR;
        Wc { wr_id, status, opcode, byte_len: 0, imm: None, qp_num: self.qpn, src_qp: self.dest_qpn }
    }
}

/// A completion as verbs shows it.
#[derive(Debug, Clone, Copy)]
pub struct Wc {
    /// The WR's id.
    pub wr_id: u64,
    /// `IBV_WC_*` status.
    pub status: v::ibv_wc_status,
    /// `IBV_WC_*` opcode.
    pub opcode: v::ibv_wc_opcode,
    /// Bytes.
    pub byte_len: u32,
    /// Immediate data, if any.
    pub imm: Option<u32>,
    /// The QP's number.
    pub qp_num: u32,
    /// The sending QP's number (RECVs).
    pub src_qp: u32,
}

/// A CQ of this process.
pub struct CqState {
    /// Completions not yet polled.
    ready: VecDeque<Wc>,
    /// Requested notification (`ibv_req_notify_cq`).
    pub armed: bool,
    /// The completion channel's fd, if any.
    pub channel_fd: Option<i32>,
    /// The `ibv_cq` the application holds (for `ibv_get_cq_event`).
    pub object: usize,
}

impl CqState {
    /// Whether completions wait to be polled.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }
}

/// One send-side WR, translated from `ibv_send_wr`.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// The WR's id.
    pub wr_id: u64,
    /// The operation (`IBV_WR_*`).
    pub opcode: v::ibv_wr_opcode,
    /// Its local bytes: a region range, or bytes to copy now.
    pub local: Local<'a>,
    /// Remote address and key (WRITE, READ).
    pub remote: RemoteAddr,
    /// Immediate data (WRITE_WITH_IMM), as the application gave it.
    pub imm: u32,
    /// Whether the application asked for a CQE.
    pub signaled: bool,
}

/// The local side of a WR.
#[derive(Debug, Clone, Copy)]
pub enum Local<'a> {
    /// `len` bytes at `addr` of the region of key `lkey`.
    Region {
        /// The region's key.
        lkey: u32,
        /// The first byte.
        addr: u64,
        /// Bytes.
        len: u32,
    },
    /// Bytes copied at post time (inline data, gathered SGEs).
    Copied(&'a [u8]),
}

/// The process's state behind the lock.
pub struct Process {
    client: Client,
    /// Registered regions.
    pub mrs: Vec<MrEntry>,
    /// Page ranges remapped onto memfds.
    pub shared: Vec<SharedPages>,
    qps: Vec<Option<QpState>>,
    cqs: Vec<Option<CqState>>,
    polled: Vec<Completion>,
    wrs: Vec<WorkRequest>,
}

static PROCESS: Mutex<Option<Process>> = Mutex::new(None);

/// The process's state, connecting to the daemon on first use.
pub fn lock() -> Result<MutexGuard<'static, Option<Process>>, Errno> {
    let mut g = PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        *g = Some(Process::open()?);
    }
    Ok(g)
}

/// Runs `f` on the process's state (connecting on first use).
pub fn with<R>(f: impl FnOnce(&mut Process) -> Result<R, Errno>) -> Result<R, Errno> {
    let mut g = lock()?;
    match g.as_mut() {
        Some(p) => f(p),
        None => Err(Errno(libc::EIO)),
    }
}

/// The daemon's socket: [`SOCKET_ENV`], else the one `serve` makes in
/// its working directory by default.
pub fn socket_path() -> String {
    std::env::var(SOCKET_ENV).unwrap_or_else(|_| "perf-serve.sock".into())
}

impl Process {
    fn open() -> Result<Process, Errno> {
        let path = socket_path();
        let opts = ConnectOptions { tenant: std::env::var(TENANT_ENV).ok(), ..ConnectOptions::default() };
        let client = Client::connect(&path, &opts).map_err(|e| {
            crate::warn(&format!("cannot reach perf-runner serve at {path}: {e}"));
            Errno(libc::ENODEV)
        })?;
        Ok(Process {
            client,
            mrs: Vec::new(),
            shared: Vec::new(),
            qps: Vec::new(),
            cqs: Vec::new(),
            polled: Vec::new(),
            wrs: Vec::new(),
        })
    }

    /// The tenant this process is.
    pub fn tenant(&self) -> &str {
        self.client.tenant()
    }

    /// Registers `window` of `file` (`file_len` bytes) with the daemon.
    pub fn reg_window(&mut self, file: &File, file_len: u64, window: MrWindow) -> Result<MrEntry, Errno> {
        use std::os::fd::AsFd;
        let mr = self.client.reg_mr_window(file.as_fd(), file_len, window).map_err(|e| {
            crate::warn(&format!("registering {} B at 0x{:x}: {e}", window.len, window.iova));
            Errno(libc::ENOMEM)
        })?;
        let e = MrEntry { key: mr.rkey, index: mr.index, iova: window.iova, len: window.len };
        self.mrs.push(e);
        Ok(e)
    }

    /// Forgets the region of key `key` (the daemon keeps its mapping until
    /// the process ends).
    pub fn forget_mr(&mut self, key: u32) {
        self.mrs.retain(|m| m.key != key);
    }

    /// A new CQ's handle.
    pub fn create_cq(&mut self, channel_fd: Option<i32>) -> u32 {
        let cq = CqState { ready: VecDeque::new(), armed: false, channel_fd, object: 0 };
        let at = self.cqs.iter().position(Option::is_none).unwrap_or(self.cqs.len());
        if at == self.cqs.len() {
            self.cqs.push(None);
        }
        self.cqs[at] = Some(cq);
        at as u32
    }

    /// CQ `h`.
    pub fn cq(&mut self, h: u32) -> Result<&mut CqState, Errno> {
        self.cqs.get_mut(h as usize).and_then(Option::as_mut).ok_or(Errno(libc::EINVAL))
    }

    /// Destroys CQ `h`; `EBUSY` while a QP uses it.
    pub fn destroy_cq(&mut self, h: u32) -> Result<(), Errno> {
        if self.qps.iter().flatten().any(|q| q.send_cq == h || q.recv_cq == h) {
            return Err(Errno(libc::EBUSY));
        }
        self.cq(h)?;
        self.cqs[h as usize] = None;
        Ok(())
    }

    /// Creates an RC QP: returns its daemon index and its state.
    pub fn create_qp(&mut self, send_cq: u32, recv_cq: u32, cap: v::ibv_qp_cap, sig_all: bool) -> Result<u32, Errno> {
        self.cq(send_cq)?;
        self.cq(recv_cq)?;
        let (index, qpn) = self.client.create_qp_numbered(0).map_err(|e| {
            crate::warn(&format!("creating a QP: {e}"));
            Errno(libc::ENOMEM)
        })?;
        let slots = cap.max_send_wr.clamp(1, 1 << 14);
        let staging = self.client.reg_mr(slots as usize * STAGING_SLOT).map_err(|e| {
            crate::warn(&format!("registering a QP's staging buffer: {e}"));
            Errno(libc::ENOMEM)
        })?;
        let cap = v::ibv_qp_cap {
            max_send_wr: slots,
            max_recv_wr: cap.max_recv_wr.max(1),
            max_send_sge: cap.max_send_sge.clamp(1, crate::device::MAX_SGE),
            max_recv_sge: 1,
            max_inline_data: STAGING_SLOT as u32,
        };
        let q = QpState {
            send_cq,
            recv_cq,
            qpn,
            sig_all,
            state: v::IBV_QPS_RESET,
            dest_qpn: 0,
            connected: false,
            cap,
            pending: VecDeque::new(),
            early_recvs: Vec::new(),
            staging,
            next_slot: 0,
        };
        let i = index as usize;
        if self.qps.len() <= i {
            self.qps.resize_with(i + 1, || None);
        }
        self.qps[i] = Some(q);
        Ok(index)
    }

    /// QP `index`.
    pub fn qp(&mut self, index: u32) -> Result<&mut QpState, Errno> {
        self.qps.get_mut(index as usize).and_then(Option::as_mut).ok_or(Errno(libc::EINVAL))
    }

    /// Connects QP `index` to the QP numbered `dest` (at RTR).
    pub fn connect(&mut self, index: u32, dest: u32) -> Result<(), Errno> {
        self.qp(index)?;
        self.client.connect_qpn(index, dest).map_err(|e| {
            crate::warn(&format!(
                "connecting QP 0x{:06x} to 0x{dest:06x}: {e}",
                self.qps[index as usize].as_ref().map_or(0, |q| q.qpn)
            ));
            Errno(libc::EINVAL)
        })?;
        let q = self.qp(index)?;
        q.dest_qpn = dest;
        q.connected = true;
        let early = std::mem::take(&mut q.early_recvs);
        self.wrs.clear();
        self.wrs.extend(early.iter().copied());
        let n = self.post(index, false)?;
        if n < early.len() {
            crate::warn(&format!("{} RECVs posted before the connection could not be posted", early.len() - n));
            return Err(Errno(libc::ENOMEM));
        }
        Ok(())
    }

    /// Forgets QP `index` (the daemon keeps it until the process ends).
    pub fn destroy_qp(&mut self, index: u32) -> Result<(), Errno> {
        self.qp(index)?;
        self.qps[index as usize] = None;
        Ok(())
    }

    fn region(&self, lkey: u32, addr: u64, len: u32) -> Result<(u32, u64), Errno> {
        let m = self.mrs.iter().find(|m| m.key == lkey).ok_or(Errno(libc::EINVAL))?;
        let off = addr.checked_sub(m.iova).filter(|o| o + len as u64 <= m.len).ok_or(Errno(libc::EINVAL))?;
        Ok((m.index, off))
    }

    /// Stages send-side WRs of QP `qp` for [`Process::post`].
    pub fn stage_send(&mut self, qp: u32, wr: &SendWr<'_>) -> Result<(), Errno> {
        let (mr, offset, len) = match wr.local {
            Local::Region { lkey, addr, len } => {
                let (mr, off) = self.region(lkey, addr, len)?;
                (mr, off, len)
            }
            Local::Copied(bytes) => {
                let q = self.qp(qp)?;
                let (staging, slot) = (q.staging, q.next_slot);
                q.next_slot = (slot + 1) % q.cap.max_send_wr;
                let off = slot as usize * STAGING_SLOT;
                let buf = self.client.bytes(staging).map_err(|_| Errno(libc::EIO))?;
                buf[off..off + bytes.len()].copy_from_slice(bytes);
                (staging.index, off as u64, bytes.len() as u32)
            }
        };
        let (op, wc_opcode) = match wr.opcode {
            v::IBV_WR_RDMA_WRITE => (Op::Write(wr.remote), v::IBV_WC_RDMA_WRITE),
            v::IBV_WR_RDMA_WRITE_WITH_IMM => (Op::WriteImm(wr.remote, wr.imm), v::IBV_WC_RDMA_WRITE),
            v::IBV_WR_SEND => (Op::Send, v::IBV_WC_SEND),
            v::IBV_WR_RDMA_READ => (Op::Read(wr.remote), v::IBV_WC_RDMA_READ),
            _ => return Err(Errno(libc::EOPNOTSUPP)),
        };
        let q = self.qp(qp)?;
        let signaled = wr.signaled || q.sig_all;
        q.pending.push_back(SendMeta { wr_id: wr.wr_id, signaled, opcode: wc_opcode, len, flushed: false });
        self.wrs.push(WorkRequest { wr_id: wr.wr_id, qp, op, mr, offset, len });
        Ok(())
    }

    /// Whether QP `qp` is in ERR: what is posted to it then is flushed
    /// here (verbs: every WR posted to a QP in ERR completes with
    /// `IBV_WC_WR_FLUSH_ERR`, signaled or not) and never reaches the
    /// daemon.
    pub fn in_error(&mut self, qp: u32) -> bool {
        self.qp(qp).is_ok_and(|q| q.state == v::IBV_QPS_ERR)
    }

    /// Flushes send WR `wr_id` of QP `qp` (in ERR): its CQE follows those
    /// of every send WR posted before it.
    pub fn flush_send(&mut self, qp: u32, wr_id: u64) -> Result<(), Errno> {
        let q = self.qp(qp)?;
        let meta = SendMeta { wr_id, signaled: true, opcode: v::IBV_WC_SEND, len: 0, flushed: true };
        q.pending.push_back(meta);
        self.release_flushed(qp);
        Ok(())
    }

    /// Flushes RECV `wr_id` of QP `qp` (in ERR).
    pub fn flush_recv(&mut self, qp: u32, wr_id: u64) -> Result<(), Errno> {
        let q = self.qp(qp)?;
        let wc = q.flush_wc(wr_id, v::IBV_WC_RECV);
        let cq = q.recv_cq;
        if let Some(Some(cq)) = self.cqs.get_mut(cq as usize) {
            cq.ready.push_back(wc);
        }
        Ok(())
    }

    /// Gives the CQEs of the flushed send WRs at the head of QP `qp`'s
    /// pending ones (nothing the daemon has is before them).
    fn release_flushed(&mut self, qp: u32) {
        let Some(Some(q)) = self.qps.get_mut(qp as usize) else { return };
        while q.pending.front().is_some_and(|m| m.flushed) {
            let Some(m) = q.pending.pop_front() else { break };
            let wc = q.flush_wc(m.wr_id, m.opcode);
            if let Some(Some(cq)) = self.cqs.get_mut(q.send_cq as usize) {
                cq.ready.push_back(wc);
            }
        }
    }

    /// Stages a RECV of QP `qp` into `len` bytes at `addr` of region `lkey`.
    pub fn stage_recv(&mut self, qp: u32, wr_id: u64, lkey: u32, addr: u64, len: u32) -> Result<(), Errno> {
        let (mr, offset) = self.region(lkey, addr, len)?;
        let wr = WorkRequest { wr_id, qp, op: Op::Recv, mr, offset, len };
        let q = self.qp(qp)?;
        if !q.connected {
            q.early_recvs.push(wr);
        } else {
            self.wrs.push(wr);
        }
        Ok(())
    }

    /// Drops what was staged for QP `qp` and not posted (after an error
    /// in the middle of a post list): the last `n_send` send-side metas.
    pub fn unstage(&mut self, qp: u32, n_send: usize) {
        self.wrs.clear();
        if let Ok(q) = self.qp(qp) {
            for _ in 0..n_send {
                q.pending.pop_back();
            }
        }
    }

    /// WRs staged for the ring and not yet posted.
    pub fn staged(&self) -> usize {
        self.wrs.len()
    }

    /// Drops the last `n` RECVs staged for QP `qp` (after an error in the
    /// middle of a post list), wherever they were staged.
    pub fn unstage_recvs(&mut self, qp: u32, n: usize) {
        self.wrs.clear();
        if let Ok(q) = self.qp(qp) {
            let keep = q.early_recvs.len().saturating_sub(n);
            q.early_recvs.truncate(keep);
        }
    }

    /// Posts what was staged for QP `qp`, as one post list; returns how
    /// many were taken (all, or fewer when the ring stayed full for
    /// `POST_WAIT`: the rest's metas are dropped, the caller reports the
    /// first of them as the bad WR).
    pub fn post(&mut self, qp: u32, sends: bool) -> Result<usize, Errno> {
        let wrs = std::mem::take(&mut self.wrs);
        let mut done = 0;
        let deadline = Instant::now() + POST_WAIT;
        while done < wrs.len() {
            match self.client.post(&wrs[done..]) {
                Ok(n) => done += n,
                Err(e) => {
                    crate::warn(&format!("posting: {e}"));
                    break;
                }
            }
            if done < wrs.len() {
                if Instant::now() > deadline {
                    break;
                }
                // Completions waiting in the ring hold the daemon back.
                self.drain();
                std::thread::yield_now();
            }
        }
        if sends && done < wrs.len() {
            if let Ok(q) = self.qp(qp) {
                for _ in done..wrs.len() {
                    q.pending.pop_back();
                }
            }
        }
        self.wrs = wrs;
        self.wrs.clear();
        Ok(done)
    }

    /// Moves the ring's completions to their CQs.
    pub fn drain(&mut self) {
        loop {
            self.polled.clear();
            if self.client.poll(&mut self.polled, 256) == 0 {
                return;
            }
            for i in 0..self.polled.len() {
                let c = self.polled[i];
                self.route(c);
            }
        }
    }

    fn route(&mut self, c: Completion) {
        if tracing_completions() {
            eprintln!("perf-verbs: completion {c:?}");
        }
        let Some(Some(q)) = self.qps.get_mut(c.qp as usize) else { return };
        let status = wc_status(c.status);
        let (cq, wc) = if c.recv {
            let opcode = if c.imm.is_some() { v::IBV_WC_RECV_RDMA_WITH_IMM } else { v::IBV_WC_RECV };
            let wc = Wc {
                wr_id: c.wr_id,
                status,
                opcode,
                byte_len: c.byte_len,
                imm: c.imm,
                qp_num: q.qpn,
                src_qp: q.dest_qpn,
            };
            (q.recv_cq, wc)
        } else {
            let Some(m) = q.pending.pop_front() else { return };
            if !m.signaled && status == v::IBV_WC_SUCCESS {
                self.release_flushed(c.qp);
                return;
            }
            let wc = Wc {
                wr_id: m.wr_id,
                status,
                opcode: m.opcode,
                byte_len: m.len,
                imm: None,
                qp_num: q.qpn,
                src_qp: q.dest_qpn,
            };
            (q.send_cq, wc)
        };
        if let Some(Some(cq)) = self.cqs.get_mut(cq as usize) {
            cq.ready.push_back(wc);
        }
        if !c.recv {
            self.release_flushed(c.qp);
        }
    }

    /// Takes up to `n` completions of CQ `h` (after draining the ring).
    pub fn poll_cq(&mut self, h: u32, n: usize, mut out: impl FnMut(usize, Wc)) -> Result<usize, Errno> {
        self.drain();
        let cq = self.cq(h)?;
        let mut got = 0;
        while got < n {
            let Some(wc) = cq.ready.pop_front() else { break };
            out(got, wc);
            got += 1;
        }
        Ok(got)
    }

    /// The first armed CQ of completion channel `fd` with completions
    /// waiting; disarms it and returns its `ibv_cq` object.
    pub fn take_event(&mut self, fd: i32) -> Option<usize> {
        self.drain();
        let cq = self.cqs.iter_mut().flatten().find(|c| c.channel_fd == Some(fd) && c.armed && c.has_ready())?;
        cq.armed = false;
        Some(cq.object)
    }
}

/// Whether `PERF_VERBS_TRACE` asks for each ring completion on standard
/// error (read once: the environment lookup takes a lock).
fn tracing_completions() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("PERF_VERBS_TRACE").is_some())
}

/// The verbs status of a ring status.
fn wc_status(s: Option<Status>) -> v::ibv_wc_status {
    match s {
        Some(Status::Success) => v::IBV_WC_SUCCESS,
        Some(Status::LocLenErr) => v::IBV_WC_LOC_LEN_ERR,
        Some(Status::LocQpOpErr) => v::IBV_WC_LOC_QP_OP_ERR,
        Some(Status::LocProtErr) => v::IBV_WC_LOC_PROT_ERR,
        Some(Status::WrFlushErr) => v::IBV_WC_WR_FLUSH_ERR,
        Some(Status::RemInvReqErr) => v::IBV_WC_REM_INV_REQ_ERR,
        Some(Status::RemAccessErr) => v::IBV_WC_REM_ACCESS_ERR,
        Some(Status::RemOpErr) => v::IBV_WC_REM_OP_ERR,
        Some(Status::RetryExcErr) => v::IBV_WC_RETRY_EXC_ERR,
        Some(Status::RnrRetryExcErr) => v::IBV_WC_RNR_RETRY_EXC_ERR,
        None => v::IBV_WC_GENERAL_ERR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ring_status_has_its_verbs_meaning() {
        assert_eq!(wc_status(Some(Status::Success)), 0);
        assert_eq!(wc_status(Some(Status::WrFlushErr)), 5);
        assert_eq!(wc_status(Some(Status::RemAccessErr)), 10);
        assert_eq!(wc_status(Some(Status::RnrRetryExcErr)), 13);
        assert_eq!(wc_status(None), 21);
    }
}
