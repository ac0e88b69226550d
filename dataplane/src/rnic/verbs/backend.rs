//! The real ibverbs backend: [`VerbsRnic`] implements [`Rnic`] over
//! libibverbs through `rdma-sys` (cargo feature `verbs`).
//!
//! - Objects: device discovery ([`list_devices`]), open by name
//!   ([`VerbsRnic::open`]), PD, MRs over page-aligned buffers the backend
//!   owns, CQs and RC QPs (RESET -> INIT -> RTR -> RTS with the peer's
//!   GID / QPN / PSN; RoCE v2 GID selection). All `unsafe` code is in
//!   [`super::sys`], whose reference counting destroys MRs, CQs and QPs before the
//!   PD and context they depend on.
//! - Work: `post_send` with post lists (one chained `ibv_send_wr` list and
//!   one doorbell per QP), inline payloads, `post_recv`, `poll_cq` mapping
//!   `ibv_wc_status` / `ibv_wc_opcode` to the trait's types.
//! - Cross-channel: upstream rdma-core has no WAIT, SEND_ENABLE or managed
//!   QPs, so [`DeviceInfo::caps`] reports `cross_channel: false` and
//!   `managed_send: false` (nothing runs in the NIC), and the backend
//!   implements the trait's semantics by host gating
//!   ([`super::host_gate`]): a managed QP's WQEs are held in host memory and
//!   posted when a SEND_ENABLE executes; a WAIT holds the rest of its QP's
//!   send queue until the watched CQ's completion count (counted by the
//!   backend as it reaps CQEs) reaches the target; WAIT, SEND_ENABLE and NOP
//!   complete in software and produce a CQE when signaled. The gate runs on
//!   every `post_send`, `poll_cq` and `modify_qp` of this backend.
//!   [`Rnic::cross_channel`] says so ([`CrossChannel::HostGated`]), and the
//!   dataplane then hands QPs off on the host itself, without control QPs
//!   or zero-weight WRs (`engine/handoff.rs`).
//!
//! Sizing: the application's CQ depth is a queue in host memory (the gate
//! delivers into it); the device CQ behind it starts small and grows with
//! `ibv_resize_cq` to what the QPs attached to it can produce, within
//! `max_cqe` ([`crate::rnic::sizing`]). A QP's device send queue is its depth
//! plus [`sizing::MARKER_SLOTS`], checked against mlx5's 64 B WQE blocks.
//! `ENOMEM` on a queue says to raise the locked-memory limit.
//!
//! Errors: asynchronous events (a QP or CQ error, a port going down, a
//! fatal device error) are read from the context's event fd, at most every
//! [`ASYNC_POLL_NS`], fail what they name, and are kept in
//! [`VerbsRnic::device_events`].
//!
//! Connection: each QP's starting PSN is a 24-bit keyed hash of its number
//! ([`initial_psn`], the key random per opened device), which is what
//! [`crate::rnic::connect::endpoint`] advertises, so PSNs are unpredictable
//! and differ from QP to QP and run to run, as perftest's do. The path MTU is the
//! smaller of both ports' (the peer's comes in its [`QpEndpoint`]), and a
//! QP keeps no more RDMA READs in flight than the peer accepts. On InfiniBand ports a QP
//! can be connected only to a QP of the same port (the trait's
//! [`QpEndpoint`] carries no LID); iWARP devices (siw) need rdma_cm and are
//! refused at RTR.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::host_gate::{GateAction, GateCounters, GateQpConfig, GateWr, HostGate, HwWork, HwWrId, MAX_QPS};
use super::ibv_abi::{self, link_layer, transport, GidEntry, GidKind, IbvSendWr};
use super::oob::ConnInfo;
use super::port_counters::{self, PortSampler};
use super::probe::{VerbsDeviceReport, VerbsPortReport};
use super::sys;
use super::sysfs;
use crate::rnic::sizing::{self, SqModel, MARKER_SLOTS};
use crate::rnic::*;

pub use sys::{DeviceAttr, PortAttr};

/// The starting PSN of local QP `qp_num`: 24 bits of a keyed SipHash of
/// its number (`keys` are random per opened device).
pub fn initial_psn(keys: &std::collections::hash_map::RandomState, qp_num: u32) -> u32 {
    use std::hash::BuildHasher;
    (keys.hash_one(qp_num) & 0xff_ffff) as u32
}
/// ACK timeout code used at RTS (4.096 us * 2^14 = 67 ms, perftest's default).
pub const ACK_TIMEOUT: u8 = 14;
/// RNR NAK timer code used at RTR (12 = 0.64 ms, perftest's default).
pub const MIN_RNR_TIMER: u8 = 12;
/// IP hop limit of RoCE v2 packets.
pub const HOP_LIMIT: u8 = 64;
pub use crate::rnic::sizing::MELLANOX_OUI;
const POLL_BATCH: usize = 64;
/// How often `poll_cq` reads the asynchronous event fd (a system call).
pub const ASYNC_POLL_NS: u64 = 1_000_000;
/// Device CQEs of a new CQ before any QP is attached to it.
const INITIAL_CQ_RING: u32 = 64;
/// The largest application CQ depth: the queue the gate delivers into is
/// host memory that grows as CQEs arrive, so this only bounds nonsense.
pub const MAX_HOST_CQE: u32 = 1 << 24;
const ZERO_GID: Gid = [0; 16];

/// How to open a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenOptions {
    /// Port number (from 1).
    pub port: u8,
    /// GID index to use instead of the automatic choice (RoCE v2 with an
    /// IPv4 address first; see [`ibv_abi::select_gid_for`]).
    pub gid_index: Option<u32>,
    /// Prefer the GID of this local address (the out-of-band socket's, so
    /// the interface that reaches the peer) in the automatic choice.
    pub prefer_addr: Option<std::net::IpAddr>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { port: 1, gid_index: None, prefer_addr: None }
    }
}

struct MrEntry {
    mr: sys::Mr,
}

struct CqEntry {
    cq: Arc<sys::Cq>,
    users: u32,
    /// Entries of the device queues attached to this CQ.
    attached: u64,
    /// Device CQEs the CQ holds.
    ring: u32,
}

struct QpEntry {
    qp: sys::Qp,
    caps: QpCaps,
    send_cq: u32,
    recv_cq: u32,
    /// Device send-queue depth (markers included) and receive depth, as
    /// counted against the CQs.
    hw_send: u32,
    tc: u8,
    /// RDMA READs the peer accepts (from its endpoint at RTR).
    peer_rd_atomic: u32,
}

/// One opened ibv device port; implements [`Rnic`]. See the module
/// documentation for what runs in the NIC and what is host-gated.
pub struct VerbsRnic {
    // Declared children first so that they are dropped before the PDs and
    // the context (the Arcs in `sys` guarantee the order in any case).
    qps: Vec<Option<QpEntry>>,
    mrs: Vec<Option<MrEntry>>,
    cqs: Vec<Option<CqEntry>>,
    pds: Vec<Option<Arc<sys::Pd>>>,
    ctx: Arc<sys::Context>,
    gate: HostGate<IbvSendWr>,
    name: String,
    transport: i32,
    port: u8,
    dev: sys::DeviceAttr,
    port_attr: sys::PortAttr,
    gid: Gid,
    gid_index: u32,
    max_inline: u32,
    start: Instant,
    wc_buf: sys::WcBuf,
    raw: Vec<sys::RawWc>,
    watch: Vec<CqHandle>,
    last_device_error: Option<String>,
    device_events: Vec<String>,
    next_async_ns: u64,
    /// The port's traffic counters, sampled beside the loop (`None` where
    /// sysfs has none for the port).
    port_counters: Option<PortSampler>,
    /// The key of the QPs' starting PSNs ([`initial_psn`]).
    psn_keys: std::collections::hash_map::RandomState,
    /// CQEs reaped from the device CQs into the gate.
    reaped: u64,
}

fn sysfs_summary() -> String {
    let s = sysfs::scan();
    if !s.root_exists {
        format!("{} is missing", s.root.display())
    } else if s.devices.is_empty() {
        format!("{} lists no device", s.root.display())
    } else {
        let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
        format!("{} lists {}", s.root.display(), names.join(", "))
    }
}

fn gid_table(ctx: &sys::Context, name: &str, port: u8, attr: &sys::PortAttr) -> Vec<GidEntry> {
    let from_library = ctx.query_gid_table(port, attr.gid_tbl_len.clamp(1, 4096) as usize * 4);
    let mut entries = from_library.filter(|t| !t.is_empty()).unwrap_or_else(|| sysfs::device_gids(name, port));
    if entries.is_empty() {
        entries = (0..attr.gid_tbl_len.min(256))
            .filter_map(|index| {
                let gid = ctx.query_gid(port, index).ok().filter(|g| *g != ZERO_GID)?;
                Some(GidEntry { index, gid, kind: GidKind::Unknown })
            })
            .collect();
    }
    entries.retain(|e| e.index <= u8::MAX as u32);
    entries
}

fn choose_gid(
    ctx: &sys::Context,
    name: &str,
    port: u8,
    attr: &sys::PortAttr,
    opts: &OpenOptions,
) -> Result<(u32, Gid), RnicError> {
    if let Some(i) = opts.gid_index {
        if i > u8::MAX as u32 {
            return Err(RnicError::InvalidArgument(format!("GID index {i} exceeds 255")));
        }
        let g = ctx.query_gid(port, i)?;
        if g == ZERO_GID {
            return Err(RnicError::InvalidArgument(format!("GID index {i} of {name} port {port} is empty")));
        }
        return Ok((i, g));
    }
    let entries = gid_table(ctx, name, port, attr);
    let ethernet = attr.link_layer == link_layer::ETHERNET;
    ibv_abi::select_gid_for(&entries, ethernet, opts.prefer_addr).map(|e| (e.index, e.gid)).ok_or_else(|| {
        RnicError::Device(format!(
            "{name} port {port} has no usable GID (on RoCE its network device needs an IP address and to be up)"
        ))
    })
}

/// The largest inline payload the device accepts on an RC QP, found by
/// creating small QPs (0 if none accepts any).
fn probe_max_inline(ctx: &Arc<sys::Context>) -> u32 {
    let (Ok(pd), Ok(cq)) = (sys::Pd::new(ctx), sys::Cq::new(ctx, 2, false)) else { return 0 };
    for want in [1024u32, 512, 256, 220, 128, 64, 32] {
        let caps = QpCaps { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: want };
        if let Ok(qp) = sys::Qp::new(&pd, &cq, &cq, caps) {
            return qp.caps().max_inline_data.max(want);
        }
    }
    0
}

fn traffic_classes(dev: &sys::DeviceAttr) -> u8 {
    if dev.vendor_id == MELLANOX_OUI {
        8
    } else {
        0
    }
}

fn caps_of(dev: &sys::DeviceAttr, max_inline: u32) -> DeviceCaps {
    DeviceCaps {
        cross_channel: false,
        managed_send: false,
        max_qp_wr: dev.max_qp_wr,
        max_cqe: dev.max_cqe,
        max_inline_data: max_inline,
        traffic_classes: traffic_classes(dev),
        max_rd_atomic: dev.max_qp_rd_atom,
        vendor: (dev.vendor_id, dev.vendor_part_id),
    }
}

fn transport_name(t: i32) -> &'static str {
    match t {
        transport::IB => "InfiniBand/RoCE",
        transport::IWARP => "iWARP",
        _ => "other",
    }
}

fn device_report(ctx: &Arc<sys::Context>, name: &str, transport_type: i32) -> Result<VerbsDeviceReport, RnicError> {
    let dev = ctx.query_device()?;
    let mut ports = Vec::new();
    for num in 1..=dev.phys_port_cnt {
        let a = ctx.query_port(num)?;
        let gids = gid_table(ctx, name, num, &a);
        let selected_gid = ibv_abi::select_gid(&gids, a.link_layer == link_layer::ETHERNET).map(|e| e.index);
        ports.push(VerbsPortReport {
            num,
            state: ibv_abi::port_state_name(a.state),
            active: a.state == ibv_abi::port_state::ACTIVE,
            link_layer: ibv_abi::link_layer_name(a.link_layer),
            mtu: ibv_abi::mtu_bytes(a.active_mtu),
            link_gbps: ibv_abi::link_gbps(a.active_width, a.active_speed),
            lid: a.lid,
            gids,
            selected_gid,
        });
    }
    let unusable = if transport_type == transport::IWARP {
        Some("iWARP: RC QPs are connected through rdma_cm, which this backend does not use".to_string())
    } else if !ports.iter().any(|p| p.active) {
        Some("no port is ACTIVE".to_string())
    } else if !ports.iter().any(|p| p.active && p.selected_gid.is_some()) {
        Some("no active port has a usable GID".to_string())
    } else {
        None
    };
    Ok(VerbsDeviceReport {
        name: name.to_owned(),
        transport: transport_name(transport_type),
        fw_ver: dev.fw_ver.clone(),
        caps: caps_of(&dev, probe_max_inline(ctx)),
        max_qp: dev.max_qp,
        ports,
        unusable,
    })
}

/// Every device libibverbs lists, with its ports, GIDs and capabilities.
/// A device that cannot be opened is listed with the reason in `unusable`.
/// Fails only when `ibv_get_device_list` itself fails (no kernel support).
pub fn list_devices() -> Result<Vec<VerbsDeviceReport>, RnicError> {
    let list = sys::DeviceList::get()?;
    let mut out = Vec::new();
    for i in 0..list.len() {
        let name = list.name(i).unwrap_or_else(|| format!("device{i}"));
        let t = list.transport(i).unwrap_or(-1);
        let report = list.open(i).map(Arc::new).and_then(|ctx| device_report(&ctx, &name, t));
        out.push(report.unwrap_or_else(|e| VerbsDeviceReport {
            name: name.clone(),
            transport: transport_name(t),
            fw_ver: String::new(),
            caps: caps_of(
                &sys::DeviceAttr {
                    fw_ver: String::new(),
                    node_guid: 0,
                    vendor_id: 0,
                    vendor_part_id: 0,
                    max_mr_size: 0,
                    max_qp: 0,
                    max_qp_wr: 0,
                    max_sge: 0,
                    max_cqe: 0,
                    max_qp_rd_atom: 0,
                    max_qp_init_rd_atom: 0,
                    phys_port_cnt: 0,
                },
                0,
            ),
            max_qp: 0,
            ports: Vec::new(),
            unusable: Some(format!("cannot open or query it: {e}")),
        }));
    }
    Ok(out)
}

fn rd_atomic(v: u32) -> u8 {
    v.clamp(1, 16) as u8
}

impl VerbsRnic {
    /// Opens port 1 of device `name` (`mlx5_0`, `rxe0`, ...). Fails with a
    /// clear [`RnicError::Device`] (never a panic) when there is no RDMA
    /// support, no such device, or no usable GID.
    pub fn open(name: &str) -> Result<VerbsRnic, RnicError> {
        Self::open_with(name, OpenOptions::default())
    }

    /// Opens a device with explicit options.
    pub fn open_with(name: &str, opts: OpenOptions) -> Result<VerbsRnic, RnicError> {
        let list = sys::DeviceList::get().map_err(|e| {
            let why = match e {
                RnicError::Device(m) => m,
                other => other.to_string(),
            };
            RnicError::Device(format!("cannot open RDMA device {name:?}: {why}; {}", sysfs_summary()))
        })?;
        let names: Vec<String> = (0..list.len()).filter_map(|i| list.name(i)).collect();
        let idx = (0..list.len()).find(|&i| list.name(i).as_deref() == Some(name)).ok_or_else(|| {
            RnicError::Device(if names.is_empty() {
                format!("RDMA device {name:?} not found: ibv_get_device_list returned 0 devices; {}", sysfs_summary())
            } else {
                format!("RDMA device {name:?} not found; libibverbs lists: {}", names.join(", "))
            })
        })?;
        let transport = list.transport(idx).unwrap_or(-1);
        let ctx = Arc::new(list.open(idx)?);
        drop(list);
        let dev = ctx.query_device()?;
        if opts.port == 0 || opts.port > dev.phys_port_cnt {
            return Err(RnicError::InvalidArgument(format!(
                "{name} has ports 1 to {}, not {}",
                dev.phys_port_cnt, opts.port
            )));
        }
        let port_attr = ctx.query_port(opts.port)?;
        let (gid_index, gid) = choose_gid(&ctx, name, opts.port, &port_attr, &opts)?;
        let max_inline = probe_max_inline(&ctx);
        // Without a non-blocking fd, events are not read (and never block).
        let events_readable = ctx.async_nonblocking().is_ok();
        let start = Instant::now();
        let counters = port_counters::counters_dir(Path::new(sysfs::SYSFS_ROOT), name, opts.port);
        Ok(VerbsRnic {
            qps: Vec::new(),
            mrs: Vec::new(),
            cqs: Vec::new(),
            pds: Vec::new(),
            ctx,
            gate: HostGate::new(),
            name: name.to_owned(),
            transport,
            port: opts.port,
            dev,
            port_attr,
            gid,
            gid_index,
            max_inline,
            start,
            wc_buf: sys::WcBuf::new(POLL_BATCH),
            raw: Vec::with_capacity(POLL_BATCH),
            watch: Vec::new(),
            last_device_error: None,
            device_events: Vec::new(),
            next_async_ns: if events_readable { 0 } else { u64::MAX },
            port_counters: PortSampler::start(counters, start),
            psn_keys: std::collections::hash_map::RandomState::new(),
            reaped: 0,
        })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The port in use.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The GID index QPs use as `sgid_index`.
    pub fn gid_index(&self) -> u32 {
        self.gid_index
    }

    /// The device attributes.
    pub fn device_attr(&self) -> &DeviceAttr {
        &self.dev
    }

    /// The host gate's counters (software-executed control WQEs, markers).
    pub fn gate_counters(&self) -> GateCounters {
        self.gate.counters()
    }

    /// The last error the device reported asynchronously (an error CQE's
    /// raw status and vendor syndrome, a refused post of gated work, an
    /// asynchronous event).
    pub fn last_device_error(&self) -> Option<&str> {
        self.last_device_error.as_deref()
    }

    /// Whether the device CQ behind `cq` drops CQEs on overrun
    /// (`IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`, asked for an ignore-overrun
    /// CQ) rather than being a plain CQ sized for its QPs.
    pub fn device_cq_ignores_overrun(&self, cq: CqHandle) -> Result<bool, RnicError> {
        Ok(self.cq_entry(cq)?.cq.ignores_overrun())
    }

    /// The asynchronous events read so far (QP and CQ errors, port state
    /// changes, fatal device errors), one line each, oldest first.
    pub fn device_events(&self) -> &[String] {
        &self.device_events
    }

    /// The endpoint data of a local QP, for the peer.
    pub fn endpoint(&self, qp: QpHandle) -> Result<QpEndpoint, RnicError> {
        let e = self.qp_entry(qp)?;
        Ok(QpEndpoint {
            gid: self.gid,
            qp_num: e.qp.qp_num(),
            psn: initial_psn(&self.psn_keys, e.qp.qp_num()),
            mtu: ibv_abi::mtu_bytes(self.port_attr.active_mtu).unwrap_or(0),
            max_rd_atomic: self.dev.max_qp_rd_atom,
        })
    }

    /// The out-of-band record for a local QP and a region the peer may
    /// access (see [`super::oob`]).
    pub fn conn_info(&self, qp: QpHandle, mr: &Mr) -> Result<ConnInfo, RnicError> {
        Ok(ConnInfo { lid: self.port_attr.lid, endpoint: self.endpoint(qp)?, rkey: mr.rkey, addr: mr.addr })
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn pd_of(&self, pd: PdHandle) -> Result<&Arc<sys::Pd>, RnicError> {
        self.pds.get(pd.0 as usize).and_then(Option::as_ref).ok_or(RnicError::InvalidHandle { kind: "pd", id: pd.0 })
    }

    fn cq_entry(&self, cq: CqHandle) -> Result<&CqEntry, RnicError> {
        self.cqs.get(cq.0 as usize).and_then(Option::as_ref).ok_or(RnicError::InvalidHandle { kind: "cq", id: cq.0 })
    }

    fn qp_entry(&self, qp: QpHandle) -> Result<&QpEntry, RnicError> {
        self.qps.get(qp.0 as usize).and_then(Option::as_ref).ok_or(RnicError::InvalidHandle { kind: "qp", id: qp.0 })
    }

    fn mr_entry(&self, mr: MrHandle) -> Result<&MrEntry, RnicError> {
        self.mrs.get(mr.0 as usize).and_then(Option::as_ref).ok_or(RnicError::InvalidHandle { kind: "mr", id: mr.0 })
    }

    /// Carries out what the gate decided: posts (one doorbell per run of
    /// consecutive WQEs of a QP) and moves to ERR.
    fn flush_actions(&mut self) {
        let marker = IbvSendWr::completion_marker();
        loop {
            let actions = self.gate.take_actions();
            if actions.is_empty() {
                return;
            }
            let now = self.now();
            let mut failed: Vec<u32> = Vec::new();
            let mut i = 0;
            while i < actions.len() {
                let qp = match &actions[i] {
                    GateAction::MoveToError(qp) => {
                        if let Some(e) = self.qps.get(qp.0 as usize).and_then(Option::as_ref) {
                            if let Err(err) = e.qp.modify(sys::QpModify::Err) {
                                self.last_device_error = Some(format!("moving QP {} to ERR: {err}", qp.0));
                            }
                        }
                        i += 1;
                        continue;
                    }
                    GateAction::Post(p) => p.qp,
                };
                let mut j = i;
                while matches!(actions.get(j), Some(GateAction::Post(p)) if p.qp == qp) {
                    j += 1;
                }
                let run = &actions[i..j];
                i = j;
                if failed.contains(&qp.0) {
                    continue;
                }
                let Some(entry) = self.qps.get(qp.0 as usize).and_then(Option::as_ref) else { continue };
                let items: Vec<sys::SendItem<'_>> = run
                    .iter()
                    .filter_map(|a| match a {
                        GateAction::Post(p) => Some(sys::SendItem {
                            wr_id: p.wr_id,
                            signaled: p.signaled,
                            wr: match &p.work {
                                HwWork::User(w) => w,
                                HwWork::Marker => &marker,
                            },
                        }),
                        GateAction::MoveToError(_) => None,
                    })
                    .collect();
                if let Err((k, err)) = entry.qp.post_send(&items) {
                    let seq = items.get(k).map_or(0, |it| HwWrId::decode(it.wr_id).seq);
                    self.last_device_error = Some(format!("ibv_post_send on QP {} refused gated work: {err}", qp.0));
                    failed.push(qp.0);
                    self.gate.on_post_failed(qp, seq, now);
                }
            }
        }
    }

    fn deliver(&mut self, w: sys::RawWc, now: u64) {
        let id = HwWrId::decode(w.wr_id);
        let status = ibv_abi::wc_status_from_raw(w.status);
        if !status.is_ok() && status != WcStatus::WrFlushErr {
            self.last_device_error = Some(format!(
                "QP 0x{:x}: {} (status {}, vendor_err 0x{:x})",
                w.qp_num,
                ibv_abi::wc_status_name(w.status),
                w.status,
                w.vendor_err
            ));
        }
        if id.recv {
            let opcode = match ibv_abi::wc_opcode_from_raw(w.opcode) {
                Some(WcOpcode::RecvRdmaWithImm) => WcOpcode::RecvRdmaWithImm,
                _ => WcOpcode::Recv,
            };
            self.gate.on_recv_completion(QpHandle(id.qp), id.seq, status, opcode, w.byte_len, w.imm, now);
        } else {
            self.gate.on_send_completion(QpHandle(id.qp), id.seq, status, now);
        }
    }

    /// Moves every CQE of the device CQ into the gate.
    fn reap(&mut self, cq: CqHandle) -> Result<(), RnicError> {
        let Some(hw) = self.cqs.get(cq.0 as usize).and_then(Option::as_ref).map(|e| e.cq.clone()) else {
            return Ok(());
        };
        let mut raw = std::mem::take(&mut self.raw);
        let result = loop {
            raw.clear();
            let n = match hw.poll(&mut self.wc_buf, &mut raw) {
                Ok(n) => n,
                Err(e) => break Err(e),
            };
            let now = self.now();
            self.reaped += n as u64;
            for w in raw.drain(..) {
                self.deliver(w, now);
            }
            if n < POLL_BATCH {
                break Ok(());
            }
        };
        self.raw = raw;
        result
    }

    /// Runs the gate to a fixed point: posts what it released, reaps the
    /// CQs it depends on, and again while that releases more.
    fn progress(&mut self) -> Result<(), RnicError> {
        for _ in 0..8 {
            self.flush_actions();
            let mut watch = std::mem::take(&mut self.watch);
            watch.clear();
            watch.extend_from_slice(self.gate.cqs_to_watch());
            let reaped = watch.iter().try_for_each(|&cq| self.reap(cq));
            self.watch = watch;
            reaped?;
            if !self.gate.has_actions() {
                break;
            }
        }
        self.flush_actions();
        Ok(())
    }

    /// Reads the pending asynchronous events (at most every
    /// [`ASYNC_POLL_NS`]): an error event fails what it names in the gate
    /// (whose drain then completes its work) and is recorded.
    fn read_async_events(&mut self) {
        let now = self.now();
        if now < self.next_async_ns {
            return;
        }
        self.next_async_ns = now + ASYNC_POLL_NS;
        while let Some(ev) = self.ctx.next_async_event() {
            let (name, is_error) = ibv_abi::async_event_name(ev.kind);
            let mut failed: Vec<QpHandle> = Vec::new();
            let what = match ev.element {
                sys::AsyncElement::Qp(num) => {
                    let handle = self.qps.iter().position(|q| q.as_ref().is_some_and(|q| q.qp.qp_num() == num));
                    failed.extend(handle.map(|i| QpHandle(i as u32)));
                    format!("QP 0x{num:x}")
                }
                sys::AsyncElement::Cq(addr) => {
                    let cq = self.cqs.iter().position(|c| c.as_ref().is_some_and(|c| c.cq.raw_addr() == addr));
                    if let Some(cq) = cq {
                        let cq = cq as u32;
                        failed.extend(self.qps.iter().enumerate().filter_map(|(i, q)| {
                            q.as_ref().filter(|q| q.send_cq == cq || q.recv_cq == cq).map(|_| QpHandle(i as u32))
                        }));
                    }
                    cq.map_or_else(|| "a CQ".to_string(), |c| format!("CQ {c}"))
                }
                sys::AsyncElement::Port(p) => format!("port {p}"),
                sys::AsyncElement::Device => {
                    if ev.kind == ibv_abi::event::DEVICE_FATAL {
                        failed
                            .extend((0..self.qps.len()).filter(|&i| self.qps[i].is_some()).map(|i| QpHandle(i as u32)));
                    }
                    "the device".to_string()
                }
            };
            let line = format!("{}: {what}: {name} (event {})", self.name, ev.kind);
            if is_error {
                self.last_device_error = Some(line.clone());
                for qp in failed {
                    // The device has moved the QP to ERR (or will flush
                    // nothing more on it): complete its work.
                    self.gate.set_state(qp, QpState::Err, now);
                }
            }
            self.device_events.push(line);
        }
    }
}

impl Rnic for VerbsRnic {
    fn device_info(&self) -> DeviceInfo {
        DeviceInfo { name: self.name.clone(), caps: caps_of(&self.dev, self.max_inline) }
    }

    fn cross_channel(&self) -> CrossChannel {
        CrossChannel::HostGated
    }

    fn initial_psn(&self, qp_num: u32) -> u32 {
        initial_psn(&self.psn_keys, qp_num)
    }

    fn backend_counters(&self) -> Vec<(&'static str, u64)> {
        let g = self.gate.counters();
        vec![
            ("gate_ctrl_executed", g.ctrl_executed),
            ("gate_hw_posted", g.hw_posted),
            ("gate_markers", g.markers),
            ("gate_signals_added", g.signals_added),
            ("gate_hidden_cqes", g.hidden_cqes),
            ("gate_wait_blocks", g.wait_blocks),
            ("cqes_reaped", self.reaped),
        ]
    }

    fn port_info(&self) -> PortInfo {
        let (a, active) = match self.ctx.query_port(self.port) {
            Ok(a) => (a, a.state == ibv_abi::port_state::ACTIVE),
            Err(_) => (self.port_attr, false),
        };
        PortInfo {
            active,
            link_gbps: ibv_abi::link_gbps(a.active_width, a.active_speed).map_or(0, |g| g.round() as u32),
            mtu: ibv_abi::mtu_bytes(a.active_mtu).unwrap_or(0),
            gid: self.gid,
        }
    }

    fn port_traffic(&self) -> Option<PortTraffic> {
        self.port_counters.as_ref()?.latest()
    }

    fn clock_ns(&self) -> u64 {
        self.now()
    }

    fn alloc_pd(&mut self) -> Result<PdHandle, RnicError> {
        let pd = sys::Pd::new(&self.ctx)?;
        self.pds.push(Some(pd));
        Ok(PdHandle(self.pds.len() as u32 - 1))
    }

    fn reg_mr(&mut self, pd: PdHandle, len: usize, access: AccessFlags) -> Result<Mr, RnicError> {
        let pdp = self.pd_of(pd)?.clone();
        if len == 0 || len as u64 > self.dev.max_mr_size {
            return Err(RnicError::InvalidArgument(format!(
                "memory region length {len} out of range (1 B to {} B)",
                self.dev.max_mr_size
            )));
        }
        // libibverbs refuses remote write access without local write.
        let bits = if access.contains(AccessFlags::REMOTE_WRITE) { access | AccessFlags::LOCAL_WRITE } else { access };
        let mr = sys::Mr::register(&pdp, len, bits.bits())?;
        let out =
            Mr { handle: MrHandle(self.mrs.len() as u32), addr: mr.addr(), len, lkey: mr.lkey(), rkey: mr.rkey() };
        self.mrs.push(Some(MrEntry { mr }));
        Ok(out)
    }

    fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), RnicError> {
        self.mr_entry(mr)?;
        match self.mrs.get_mut(mr.0 as usize).and_then(Option::take) {
            Some(e) => e
                .mr
                .deregister()
                .map_err(|err| RnicError::Device(format!("deregistering MR {}: {err}; its buffer stays pinned", mr.0))),
            None => Ok(()),
        }
    }

    fn write_mr(&mut self, mr: MrHandle, offset: usize, data: &[u8]) -> Result<(), RnicError> {
        self.mr_entry(mr)?.mr.write(offset, data)
    }

    fn read_mr(&self, mr: MrHandle, offset: usize, out: &mut [u8]) -> Result<(), RnicError> {
        self.mr_entry(mr)?.mr.read(offset, out)
    }

    fn create_cq(&mut self, attr: CqAttr) -> Result<CqHandle, RnicError> {
        if attr.depth == 0 || attr.depth > MAX_HOST_CQE {
            return Err(RnicError::InvalidArgument(format!(
                "CQ depth {} out of range (1 to {MAX_HOST_CQE})",
                attr.depth
            )));
        }
        // The application's depth is the gate's host queue; the device
        // ring grows with the QPs attached (create_qp), within max_cqe.
        let ring = INITIAL_CQ_RING.min(self.dev.max_cqe).max(1);
        let cq = sys::Cq::new(&self.ctx, ring, attr.ignore_overrun)?;
        // Without the flag (rxe, older mlx5) a plain CQ: it cannot overrun
        // either, since its ring grows with the queues attached to it.
        let handle = CqHandle(self.cqs.len() as u32);
        self.cqs.push(Some(CqEntry { cq, users: 0, attached: 0, ring }));
        self.gate.add_cq(handle, attr.depth, attr.ignore_overrun);
        Ok(handle)
    }

    fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), RnicError> {
        if self.cq_entry(cq)?.users > 0 {
            return Err(RnicError::Busy("CQ is still attached to a QP"));
        }
        self.gate.remove_cq(cq);
        if let Some(slot) = self.cqs.get_mut(cq.0 as usize) {
            *slot = None;
        }
        self.progress()
    }

    fn create_qp(&mut self, pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError> {
        let pdp = self.pd_of(pd)?.clone();
        let scq = self.cq_entry(attr.send_cq)?.cq.clone();
        let rcq = self.cq_entry(attr.recv_cq)?.cq.clone();
        let c = attr.caps;
        let d = &self.dev;
        let most_send = d.max_qp_wr.saturating_sub(MARKER_SLOTS);
        if c.max_send_wr == 0 || c.max_send_wr > most_send || c.max_recv_wr > d.max_qp_wr {
            return Err(RnicError::InvalidArgument(format!(
                "QP depth out of range (send 1 to {most_send}: max_qp_wr {} less {MARKER_SLOTS} marker slots; \
                 receive up to {})",
                d.max_qp_wr, d.max_qp_wr
            )));
        }
        if c.max_send_sge > d.max_sge || c.max_recv_sge > d.max_sge {
            return Err(RnicError::InvalidArgument(format!("SGE count exceeds the device's {}", d.max_sge)));
        }
        if c.max_inline_data > self.max_inline {
            return Err(RnicError::InvalidArgument(format!(
                "max_inline_data {} exceeds the device's {}",
                c.max_inline_data, self.max_inline
            )));
        }
        if attr.traffic_class > 7 {
            return Err(RnicError::InvalidArgument(format!(
                "traffic class {} out of range (0 to 7)",
                attr.traffic_class
            )));
        }
        let idx = self.qps.len() as u32;
        if idx >= MAX_QPS {
            return Err(RnicError::Device(format!("this backend names at most {MAX_QPS} QPs per context")));
        }
        // The device queue holds the application's WQEs and the gate's
        // completion and drain markers.
        let hw_caps = QpCaps {
            max_send_wr: c.max_send_wr + MARKER_SLOTS,
            max_recv_wr: c.max_recv_wr.max(1),
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: c.max_recv_sge.max(1),
            max_inline_data: c.max_inline_data,
        };
        sizing::check_send_depth(
            &self.name,
            SqModel::of_vendor((self.dev.vendor_id, self.dev.vendor_part_id)).0,
            d.max_qp_wr,
            &hw_caps,
            hw_caps.max_send_wr,
        )?;
        // Every WQE in the device can produce a CQE: each CQ's ring must
        // hold those of all the queues attached to it.
        let (scq_i, rcq_i) = (attr.send_cq.0, attr.recv_cq.0);
        let adds: Vec<(u32, u64)> = if scq_i == rcq_i {
            vec![(scq_i, hw_caps.max_send_wr as u64 + hw_caps.max_recv_wr as u64)]
        } else {
            vec![(scq_i, hw_caps.max_send_wr as u64), (rcq_i, hw_caps.max_recv_wr as u64)]
        };
        for &(cq, add) in &adds {
            let e = self.cq_entry(CqHandle(cq))?;
            let need = sizing::cq_ring_need(cq, e.attached, add, self.dev.max_cqe)?;
            if need > e.ring {
                // Grow by doubling (fewer resizes as QPs are added), within max_cqe.
                let ring = need.max(e.ring.saturating_mul(2)).min(self.dev.max_cqe);
                e.cq.resize(ring)?;
                if let Some(e) = self.cqs.get_mut(cq as usize).and_then(Option::as_mut) {
                    e.ring = ring;
                }
            }
        }
        let qp = sys::Qp::new(&pdp, &scq, &rcq, hw_caps)?;
        let handle = QpHandle(idx);
        self.gate.add_qp(
            handle,
            GateQpConfig {
                qp_num: qp.qp_num(),
                send_cq: attr.send_cq,
                recv_cq: attr.recv_cq,
                managed: attr.managed_send,
                cross_channel: attr.cross_channel,
                sig_all: attr.sq_sig_all,
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                hw_send_depth: hw_caps.max_send_wr,
            },
        )?;
        for cq in [attr.send_cq, attr.recv_cq] {
            if let Some(e) = self.cqs.get_mut(cq.0 as usize).and_then(Option::as_mut) {
                e.users += 1;
            }
        }
        for (cq, add) in adds {
            if let Some(e) = self.cqs.get_mut(cq as usize).and_then(Option::as_mut) {
                e.attached += add;
            }
        }
        let qp_num = qp.qp_num();
        self.qps.push(Some(QpEntry {
            qp,
            caps: c,
            send_cq: attr.send_cq.0,
            recv_cq: attr.recv_cq.0,
            hw_send: hw_caps.max_send_wr,
            tc: attr.traffic_class,
            peer_rd_atomic: 0,
        }));
        Ok(Qp { handle, qp_num })
    }

    fn modify_qp(&mut self, qp: QpHandle, transition: QpTransition) -> Result<(), RnicError> {
        let e = self.qp_entry(qp)?;
        let state = self.gate.state(qp).unwrap_or(QpState::Reset);
        let bad = |op| Err(RnicError::InvalidState { op, state });
        let now = self.now();
        match transition {
            QpTransition::Init { access } => {
                if state != QpState::Reset {
                    return bad("modify to INIT");
                }
                e.qp.modify(sys::QpModify::Init { port: self.port, access: access.bits() })?;
                self.gate.set_state(qp, QpState::Init, now);
            }
            QpTransition::Rtr { remote } => {
                if state != QpState::Init {
                    return bad("modify to RTR");
                }
                if self.transport == transport::IWARP {
                    return Err(RnicError::NotSupported(
                        "iWARP devices (siw) connect RC QPs through rdma_cm, which this backend does not use",
                    ));
                }
                let pa = self.ctx.query_port(self.port)?;
                let dlid = if pa.link_layer == link_layer::ETHERNET {
                    0
                } else if remote.gid == self.gid {
                    pa.lid
                } else {
                    return Err(RnicError::NotSupported(
                        "InfiniBand link layer: a peer on another port needs its LID, which QpEndpoint does not carry",
                    ));
                };
                // Both sides connect at the smaller of their MTUs.
                let local_mtu = ibv_abi::mtu_bytes(pa.active_mtu).unwrap_or(0);
                let path_mtu = ibv_abi::mtu_from_bytes(remote.negotiated_mtu(local_mtu)).unwrap_or(pa.active_mtu);
                e.qp.modify(sys::QpModify::Rtr(sys::RtrAttr {
                    path_mtu,
                    dest_qp_num: remote.qp_num,
                    rq_psn: remote.psn & 0xff_ffff,
                    max_dest_rd_atomic: rd_atomic(self.dev.max_qp_rd_atom),
                    min_rnr_timer: MIN_RNR_TIMER,
                    port: self.port,
                    dgid: remote.gid,
                    sgid_index: self.gid_index as u8,
                    hop_limit: HOP_LIMIT,
                    traffic_class: e.tc << 5,
                    sl: e.tc,
                    dlid,
                }))?;
                if let Some(e) = self.qps.get_mut(qp.0 as usize).and_then(Option::as_mut) {
                    e.peer_rd_atomic = remote.max_rd_atomic;
                }
                self.gate.set_state(qp, QpState::Rtr, now);
            }
            QpTransition::Rts { retry_cnt, rnr_retry } => {
                if state != QpState::Rtr {
                    return bad("modify to RTS");
                }
                if retry_cnt > 7 || rnr_retry > 7 {
                    return Err(RnicError::InvalidArgument("retry_cnt and rnr_retry range over 0 to 7".into()));
                }
                e.qp.modify(sys::QpModify::Rts(sys::RtsAttr {
                    sq_psn: initial_psn(&self.psn_keys, e.qp.qp_num()),
                    timeout: ACK_TIMEOUT,
                    retry_cnt,
                    rnr_retry,
                    // No more READs in flight than the peer's QP accepts.
                    max_rd_atomic: rd_atomic(
                        QpEndpoint { max_rd_atomic: e.peer_rd_atomic, ..QpEndpoint::default() }
                            .negotiated_rd_atomic(self.dev.max_qp_init_rd_atom),
                    ),
                }))?;
                self.gate.set_state(qp, QpState::Rts, now);
                self.progress()?;
            }
            QpTransition::Err => {
                e.qp.modify(sys::QpModify::Err)?;
                self.gate.set_state(qp, QpState::Err, now);
                self.progress()?;
            }
            QpTransition::Reset => {
                e.qp.modify(sys::QpModify::Reset)?;
                self.gate.set_state(qp, QpState::Reset, now);
            }
        }
        Ok(())
    }

    fn qp_state(&self, qp: QpHandle) -> Result<QpState, RnicError> {
        let e = self.qp_entry(qp)?;
        let tracked = self.gate.state(qp).unwrap_or(QpState::Reset);
        Ok(e.qp.query_state().ok().and_then(ibv_abi::qp_state_from_raw).unwrap_or(tracked))
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), RnicError> {
        self.qp_entry(qp)?;
        self.gate.remove_qp(qp);
        let Some(e) = self.qps.get_mut(qp.0 as usize).and_then(Option::take) else { return Ok(()) };
        let recv = e.caps.max_recv_wr.max(1) as u64;
        let detach = [(e.send_cq, e.hw_send as u64), (e.recv_cq, recv)];
        let destroyed = e.qp.destroy();
        for (cq, n) in detach {
            if let Some(c) = self.cqs.get_mut(cq as usize).and_then(Option::as_mut) {
                c.users = c.users.saturating_sub(1);
                if destroyed.is_ok() {
                    c.attached = c.attached.saturating_sub(n);
                }
            }
        }
        destroyed.map_err(|err| RnicError::Device(format!("destroying QP {}: {err}; the device keeps it", qp.0)))
    }

    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let at = |index, error| PostError { index, error };
        let caps = self.qp_entry(qp).map_err(|e| at(0, e))?.caps;
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            let op = ibv_abi::validate_send(wr, &caps).and_then(|()| ibv_abi::translate_send(wr));
            let submitted = op.and_then(|op| {
                let gw = GateWr {
                    wr_id: wr.wr_id,
                    signaled: wr.signaled,
                    opcode: wr.opcode.wc_opcode(),
                    byte_len: wr.len() as u32,
                    op,
                };
                self.gate.submit(qp, gw)
            });
            if let Err(e) = submitted {
                result = Err(at(i, e));
                break;
            }
        }
        let now = self.now();
        self.gate.run(now);
        if let Err(e) = self.progress() {
            // Reaping failed after the list was accepted; poll_cq reports it.
            self.last_device_error = Some(e.to_string());
        }
        result
    }

    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let at = |index, error| PostError { index, error };
        let caps = self.qp_entry(qp).map_err(|e| at(0, e))?.caps;
        let now = self.now();
        let mut batch: Vec<(u64, &[Sge])> = Vec::with_capacity(wrs.len());
        let mut index: Vec<usize> = Vec::with_capacity(wrs.len());
        let mut refused = None;
        for (i, wr) in wrs.iter().enumerate() {
            if wr.sgl.len() as u32 > caps.max_recv_sge {
                refused = Some(at(i, RnicError::InvalidArgument(format!("{} SGEs exceed max_recv_sge", wr.sgl.len()))));
                break;
            }
            match self.gate.submit_recv(qp, wr.wr_id, now) {
                Ok(Some(hw)) => {
                    batch.push((hw, wr.sgl));
                    index.push(i);
                }
                Ok(None) => {}
                Err(e) => {
                    refused = Some(at(i, e));
                    break;
                }
            }
        }
        if let Some(e) = self.qps.get(qp.0 as usize).and_then(Option::as_ref) {
            if let Err((k, err)) = e.qp.post_recv(&batch) {
                self.gate.unpost_recvs(qp, batch.len() - k);
                return Err(at(index.get(k).copied().unwrap_or(0), err));
            }
        }
        refused.map_or(Ok(()), Err)
    }

    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        self.cq_entry(cq)?;
        self.read_async_events();
        self.reap(cq)?;
        self.progress()?;
        self.gate.poll(cq, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_psns_are_24_bit_and_differ_by_qp_and_by_device() {
        let (a, b) = (std::collections::hash_map::RandomState::new(), std::collections::hash_map::RandomState::new());
        let of =
            |k: &std::collections::hash_map::RandomState| (0..64u32).map(|q| initial_psn(k, q)).collect::<Vec<_>>();
        let (pa, pb) = (of(&a), of(&b));
        assert!(pa.iter().chain(&pb).all(|&p| p <= 0xff_ffff));
        let distinct: std::collections::HashSet<_> = pa.iter().collect();
        assert!(distinct.len() >= 60, "64 QPs, {} PSNs", distinct.len());
        assert_ne!(pa, pb, "two devices' keys give other PSNs");
        assert_eq!(initial_psn(&a, 7), pa[7], "a QP's PSN is the same at its endpoint and at RTS");
    }
    use rdma_sys as ffi;

    #[test]
    fn abi_constants_match_the_installed_headers() {
        use ibv_abi::*;
        assert_eq!(wr_opcode::RDMA_WRITE, ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE);
        assert_eq!(wr_opcode::RDMA_WRITE_WITH_IMM, ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(wr_opcode::SEND, ffi::ibv_wr_opcode::IBV_WR_SEND);
        assert_eq!(wr_opcode::SEND_WITH_IMM, ffi::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM);
        assert_eq!(wr_opcode::RDMA_READ, ffi::ibv_wr_opcode::IBV_WR_RDMA_READ);
        assert_eq!(send_flags::FENCE, ffi::ibv_send_flags::IBV_SEND_FENCE.0);
        assert_eq!(send_flags::SIGNALED, ffi::ibv_send_flags::IBV_SEND_SIGNALED.0);
        assert_eq!(send_flags::SOLICITED, ffi::ibv_send_flags::IBV_SEND_SOLICITED.0);
        assert_eq!(send_flags::INLINE, ffi::ibv_send_flags::IBV_SEND_INLINE.0);
        assert_eq!(wc_flags::WITH_IMM, ffi::ibv_wc_flags::IBV_WC_WITH_IMM.0);
        assert_eq!(access::LOCAL_WRITE, ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
        assert_eq!(access::REMOTE_WRITE, ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
        assert_eq!(access::REMOTE_READ, ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);
        use ffi::ibv_wc_status as s;
        let statuses = [
            (wc_status::SUCCESS, s::IBV_WC_SUCCESS),
            (wc_status::LOC_LEN_ERR, s::IBV_WC_LOC_LEN_ERR),
            (wc_status::LOC_QP_OP_ERR, s::IBV_WC_LOC_QP_OP_ERR),
            (wc_status::LOC_EEC_OP_ERR, s::IBV_WC_LOC_EEC_OP_ERR),
            (wc_status::LOC_PROT_ERR, s::IBV_WC_LOC_PROT_ERR),
            (wc_status::WR_FLUSH_ERR, s::IBV_WC_WR_FLUSH_ERR),
            (wc_status::MW_BIND_ERR, s::IBV_WC_MW_BIND_ERR),
            (wc_status::BAD_RESP_ERR, s::IBV_WC_BAD_RESP_ERR),
            (wc_status::LOC_ACCESS_ERR, s::IBV_WC_LOC_ACCESS_ERR),
            (wc_status::REM_INV_REQ_ERR, s::IBV_WC_REM_INV_REQ_ERR),
            (wc_status::REM_ACCESS_ERR, s::IBV_WC_REM_ACCESS_ERR),
            (wc_status::REM_OP_ERR, s::IBV_WC_REM_OP_ERR),
            (wc_status::RETRY_EXC_ERR, s::IBV_WC_RETRY_EXC_ERR),
            (wc_status::RNR_RETRY_EXC_ERR, s::IBV_WC_RNR_RETRY_EXC_ERR),
            (wc_status::LOC_RDD_VIOL_ERR, s::IBV_WC_LOC_RDD_VIOL_ERR),
            (wc_status::REM_INV_RD_REQ_ERR, s::IBV_WC_REM_INV_RD_REQ_ERR),
            (wc_status::REM_ABORT_ERR, s::IBV_WC_REM_ABORT_ERR),
            (wc_status::INV_EECN_ERR, s::IBV_WC_INV_EECN_ERR),
            (wc_status::INV_EEC_STATE_ERR, s::IBV_WC_INV_EEC_STATE_ERR),
            (wc_status::FATAL_ERR, s::IBV_WC_FATAL_ERR),
            (wc_status::RESP_TIMEOUT_ERR, s::IBV_WC_RESP_TIMEOUT_ERR),
            (wc_status::GENERAL_ERR, s::IBV_WC_GENERAL_ERR),
        ];
        for (ours, theirs) in statuses {
            assert_eq!(ours, theirs);
        }
        use ffi::ibv_wc_opcode as o;
        assert_eq!(wc_opcode::SEND, o::IBV_WC_SEND);
        assert_eq!(wc_opcode::RDMA_WRITE, o::IBV_WC_RDMA_WRITE);
        assert_eq!(wc_opcode::RDMA_READ, o::IBV_WC_RDMA_READ);
        assert_eq!(wc_opcode::RECV, o::IBV_WC_RECV);
        assert_eq!(wc_opcode::RECV_RDMA_WITH_IMM, o::IBV_WC_RECV_RDMA_WITH_IMM);
        use ffi::ibv_qp_state as q;
        assert_eq!(
            [
                qp_state::RESET,
                qp_state::INIT,
                qp_state::RTR,
                qp_state::RTS,
                qp_state::SQD,
                qp_state::SQE,
                qp_state::ERR
            ],
            [
                q::IBV_QPS_RESET,
                q::IBV_QPS_INIT,
                q::IBV_QPS_RTR,
                q::IBV_QPS_RTS,
                q::IBV_QPS_SQD,
                q::IBV_QPS_SQE,
                q::IBV_QPS_ERR
            ]
        );
        use ffi::ibv_port_state as p;
        assert_eq!(port_state::ACTIVE, p::IBV_PORT_ACTIVE);
        assert_eq!(port_state::DOWN, p::IBV_PORT_DOWN);
        assert_eq!(mtu_bytes(ffi::ibv_mtu::IBV_MTU_4096), Some(4096));
        assert_eq!(mtu_bytes(ffi::ibv_mtu::IBV_MTU_1024), Some(1024));
        assert_eq!(cq_attr::MASK_FLAGS, ffi::ibv_cq_init_attr_mask::IBV_CQ_INIT_ATTR_MASK_FLAGS.0);
        assert_eq!(cq_attr::IGNORE_OVERRUN, ffi::ibv_create_cq_attr_flags::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN.0);
        use ffi::ibv_event_type as ev;
        let events = [
            (event::CQ_ERR, ev::IBV_EVENT_CQ_ERR),
            (event::QP_FATAL, ev::IBV_EVENT_QP_FATAL),
            (event::QP_REQ_ERR, ev::IBV_EVENT_QP_REQ_ERR),
            (event::QP_ACCESS_ERR, ev::IBV_EVENT_QP_ACCESS_ERR),
            (event::COMM_EST, ev::IBV_EVENT_COMM_EST),
            (event::SQ_DRAINED, ev::IBV_EVENT_SQ_DRAINED),
            (event::PATH_MIG, ev::IBV_EVENT_PATH_MIG),
            (event::PATH_MIG_ERR, ev::IBV_EVENT_PATH_MIG_ERR),
            (event::DEVICE_FATAL, ev::IBV_EVENT_DEVICE_FATAL),
            (event::PORT_ACTIVE, ev::IBV_EVENT_PORT_ACTIVE),
            (event::PORT_ERR, ev::IBV_EVENT_PORT_ERR),
            (event::LID_CHANGE, ev::IBV_EVENT_LID_CHANGE),
            (event::PKEY_CHANGE, ev::IBV_EVENT_PKEY_CHANGE),
            (event::SM_CHANGE, ev::IBV_EVENT_SM_CHANGE),
            (event::SRQ_ERR, ev::IBV_EVENT_SRQ_ERR),
            (event::SRQ_LIMIT_REACHED, ev::IBV_EVENT_SRQ_LIMIT_REACHED),
            (event::QP_LAST_WQE_REACHED, ev::IBV_EVENT_QP_LAST_WQE_REACHED),
            (event::CLIENT_REREGISTER, ev::IBV_EVENT_CLIENT_REREGISTER),
            (event::GID_CHANGE, ev::IBV_EVENT_GID_CHANGE),
            (event::WQ_FATAL, ev::IBV_EVENT_WQ_FATAL),
        ];
        for (ours, theirs) in events {
            assert_eq!(ours, theirs as u32);
        }
        assert_eq!(transport::IB, ffi::ibv_transport_type::IBV_TRANSPORT_IB);
        assert_eq!(transport::IWARP, ffi::ibv_transport_type::IBV_TRANSPORT_IWARP);
    }

    #[test]
    fn errno_constants_match_libc() {
        use ibv_abi::errno as e;
        let pairs = [
            (e::EPERM, libc::EPERM),
            (e::ENOENT, libc::ENOENT),
            (e::EIO, libc::EIO),
            (e::ENXIO, libc::ENXIO),
            (e::EAGAIN, libc::EAGAIN),
            (e::ENOMEM, libc::ENOMEM),
            (e::EACCES, libc::EACCES),
            (e::EFAULT, libc::EFAULT),
            (e::EBUSY, libc::EBUSY),
            (e::ENODEV, libc::ENODEV),
            (e::EINVAL, libc::EINVAL),
            (e::ENOSPC, libc::ENOSPC),
            (e::ENOSYS, libc::ENOSYS),
            (e::EOPNOTSUPP, libc::EOPNOTSUPP),
            (e::ETIMEDOUT, libc::ETIMEDOUT),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn opening_a_missing_device_is_an_error_not_a_panic() {
        let r = VerbsRnic::open("perf-rs-no-such-device");
        match r {
            Err(RnicError::Device(m)) => {
                assert!(m.contains("perf-rs-no-such-device"), "{m}");
            }
            Err(other) => panic!("expected a Device error, got {other}"),
            Ok(_) => panic!("a device named perf-rs-no-such-device exists"),
        }
    }
}
