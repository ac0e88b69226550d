//! RNIC profiles: every timing constant of the model, named, with its
//! source. `cx6-100g` is the default; `cx6-100g-costly` puts every cost
//! that no public figure pins at the expensive end of its bracket; see
//! `docs/rnic-model.md`.

/// Picoseconds: the simulator's internal time unit.
pub type Ps = u64;

/// Picoseconds per nanosecond.
pub const PS_PER_NS: Ps = 1_000;

/// How the NIC arbitrates between hardware traffic classes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TcScheduler {
    /// No class distinction: QPs are served round-robin, packets leave in
    /// arrival order between classes (the default NIC configuration).
    #[default]
    RoundRobin,
    /// Strict priority: a higher class number always goes first.
    StrictPriority,
    /// Enhanced transmission selection: deficit round-robin on wire bytes
    /// between classes with these weights (index = class).
    Ets(Vec<u32>),
}

/// The timing and capacity model of one RNIC and its link.
///
/// All times are picoseconds. The model's stages are described in
/// `docs/rnic-model.md`; each field's doc names the stage and the source of
/// its value.
#[derive(Debug, Clone, PartialEq)]
pub struct RnicProfile {
    /// Profile name (`cx6-100g`).
    pub name: &'static str,
    /// Link rate in Gb/s (ConnectX-6 100 GbE).
    pub link_gbps: u64,
    /// Active MTU: 4096 B (RoCEv2 maximum, perftest default on CX-6).
    pub mtu: u32,
    /// Per-packet header bytes on the wire: Ethernet 14 + 802.1Q tag 4 (the
    /// PCP priority that lossless RoCE uses for PFC) + FCS 4 + IPv4 20 +
    /// UDP 8 + BTH 12 + ICRC 4 = 66 (RoCEv2 framing; reference notes section 5).
    pub header_bytes: u32,
    /// Preamble, SFD and inter-frame gap per packet: 8 + 12 = 20 B (IEEE 802.3).
    pub preamble_ifg_bytes: u32,
    /// Extended transport header on the first packet of an RDMA WRITE or
    /// READ request (RETH, 16 B).
    pub reth_bytes: u32,
    /// One-way propagation plus PHY/MAC latency of both ends (a few metres
    /// of cable and two SerDes; calibrated with `ib_write_lat`).
    pub propagation_ps: Ps,
    /// Doorbell: MMIO write of the doorbell / BlueFlame WQE until the NIC
    /// sees the new WQEs (PCIe posted write; calibrated with `ib_write_lat`).
    pub doorbell_ps: Ps,
    /// Mean of the exponential jitter added to each doorbell (PCIe and
    /// host-side variance; gives ib_write_lat its tail).
    pub doorbell_jitter_ps: Ps,
    /// Latency of the DMA read of a non-inline payload before its first
    /// packet can leave (PCIe round trip).
    pub payload_dma_ps: Ps,
    /// Per-QP WQE processing time for a data WQE (fetch, context update,
    /// packet build). One QP is processed serially, so this sets the
    /// per-QP message rate: 1 / 80.6 ns = 12.4 M msg/s (PERF_NIC_MSG_RATE).
    pub wqe_process_ps: Ps,
    /// Per-QP processing time of a WAIT, SEND_ENABLE or NOP (no payload,
    /// no packet build).
    pub ctrl_wqe_process_ps: Ps,
    /// From the completion that satisfies a parked WAIT to the QP holding
    /// it being eligible for a scheduler turn again (the NIC noticing the
    /// CQ counter and waking the waiter). A WAIT already satisfied when it
    /// reaches the head (a zero-weight WR) does not pay it.
    pub wait_wake_ps: Ps,
    /// How many WQEs ahead of execution a QP's processing may run
    /// (WQE prefetch window).
    pub prefetch_wqes: u32,
    /// Time the NIC-wide send scheduler spends per WQE it dispatches. Sets
    /// the NIC-wide message-rate ceiling: 1 / 8.96 ns = 112 M WQE/s,
    /// reached with 9 QPs of 12.4 M/s each (PERF_NIC_QPS_CAPA = 9).
    pub sched_wqe_ps: Ps,
    /// Largest number of payload bytes one QP sends per scheduling turn; a
    /// larger message continues in the QP's next turn. Calibrated so that a
    /// 1 MB WRITE stream inflates a 16 B ping-pong as on ConnectX-6.
    pub turn_max_bytes: u32,
    /// Largest number of WQEs one QP executes per scheduling turn (burst of
    /// consecutive prefetched data WQEs).
    pub turn_max_wqes: u32,
    /// The scheduler grants a new data turn to a traffic class only while
    /// the wire time still queued for that class is at most this much
    /// (egress buffer look-ahead: 150 ns, under half an MTU packet, enough
    /// to keep the wire busy; calibrated against the PeRF ping-pong tail).
    pub egress_lookahead_ps: Ps,
    /// Receive processing at the responder: packet parse, key check, DMA
    /// write of the payload into host memory (PCIe write latency).
    pub rx_process_ps: Ps,
    /// Mean of the exponential jitter added to receive processing.
    pub rx_jitter_ps: Ps,
    /// From the responder's last packet to the ACK leaving, plus the
    /// ACK's transmission (64 B frame).
    pub ack_turnaround_ps: Ps,
    /// From a response at the requester to its CQE in host memory.
    pub cqe_write_ps: Ps,
    /// Loopback path of a QP connected on the same NIC: from the end of a
    /// looped segment's transmission on the port (looped packets take the
    /// port's turns and its rate like any) to its delivery, in place of the
    /// wire's propagation and receive processing.
    pub loopback_ps: Ps,
    /// Receiver-not-ready NAK back-off before a retransmission.
    pub rnr_timer_ps: Ps,
    /// Local ACK timeout: how long the requester waits for an answer after
    /// the last one before it retransmits (`4.096 us x 2^timeout` in verbs;
    /// a QP gives up after `retry_cnt` retransmissions).
    pub transport_timeout_ps: Ps,
    /// Largest CQ depth.
    pub max_cqe: u32,
    /// Largest QP depth.
    pub max_qp_wr: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl RnicProfile {
    /// ConnectX-6 100 Gb/s RoCEv2, calibrated against the reference figures
    /// (section 5 of the reference notes; `perf-runner calibrate`).
    pub fn cx6_100g() -> Self {
        RnicProfile {
            name: "cx6-100g",
            link_gbps: 100,
            mtu: 4096,
            header_bytes: 66,
            preamble_ifg_bytes: 20,
            reth_bytes: 16,
            propagation_ps: 150_000,
            doorbell_ps: 330_000,
            doorbell_jitter_ps: 40_000,
            payload_dma_ps: 450_000,
            wqe_process_ps: 80_600,
            ctrl_wqe_process_ps: 40_000,
            wait_wake_ps: 0,
            prefetch_wqes: 64,
            sched_wqe_ps: 8_960,
            turn_max_bytes: 64 * 1024,
            turn_max_wqes: 16,
            egress_lookahead_ps: 150_000,
            rx_process_ps: 380_000,
            rx_jitter_ps: 30_000,
            ack_turnaround_ps: 200_000,
            cqe_write_ps: 250_000,
            loopback_ps: 400_000,
            rnr_timer_ps: 10_000_000,
            // IB timeout code 14 (perftest's default): 4.096 us x 2^14.
            transport_timeout_ps: super::fault::ib_timeout_ps(14),
            max_cqe: 4 * 1024 * 1024,
            max_qp_wr: 32 * 1024,
            max_inline_data: 220,
        }
    }

    /// `cx6-100g` with the costs that decide isolation at the expensive end
    /// of their brackets (`docs/rnic-model.md`, "Costs that decide
    /// isolation"): a control WQE processed like a data WQE, a parked WAIT
    /// woken 1 us after its completion, a prefetch window of 8 WQEs and
    /// turns of up to 32 WQEs. Every calibrated figure of `cx6-100g` that
    /// does not involve these costs is unchanged.
    pub fn cx6_100g_costly() -> Self {
        let base = Self::cx6_100g();
        RnicProfile {
            name: "cx6-100g-costly",
            ctrl_wqe_process_ps: base.wqe_process_ps,
            wait_wake_ps: 1_000_000,
            prefetch_wqes: 8,
            turn_max_wqes: 32,
            ..base
        }
    }

    /// Looks a profile up by name (one of [`RnicProfile::NAMES`]).
    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "cx6-100g" => Some(Self::cx6_100g()),
            "cx6-100g-costly" => Some(Self::cx6_100g_costly()),
            _ => None,
        }
    }

    /// Names of the built-in profiles.
    pub const NAMES: &'static [&'static str] = &["cx6-100g", "cx6-100g-costly"];

    /// Wire time of `bytes` frame bytes.
    pub fn wire_ps(&self, frame_bytes: u64) -> Ps {
        frame_bytes * 8 * 1000 / self.link_gbps
    }

    /// The most payload goodput messages of `size` bytes can reach on the
    /// wire, Gb/s: every MTU packet pays its headers, preamble and gap
    /// (no transport extension header counted, so every operation stays
    /// at or under it).
    pub fn goodput_gbps(&self, size: u32) -> f64 {
        let pkts = size.div_ceil(self.mtu).max(1) as u64;
        let frame = size as u64 + pkts * (self.header_bytes + self.preamble_ifg_bytes) as u64;
        self.link_gbps as f64 * size as f64 / frame as f64
    }

    /// Wire time of one packet carrying `payload` bytes (plus `extra`
    /// transport header bytes).
    pub fn packet_ps(&self, payload: u32, extra: u32) -> Ps {
        self.wire_ps((payload + extra + self.header_bytes + self.preamble_ifg_bytes) as u64)
    }
}
