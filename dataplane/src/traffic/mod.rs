//! Traffic on an [`Rnic`]: perftest-style generators that drive it
//! directly, with no dataplane and no policy in between (the
//! `ib_write_bw` / `ib_write_lat` families, [`bw`], [`lat`]), the
//! calibration suite built from them ([`calibrate`]), the [`App`] trait
//! every application on a host implements (the generators, the dataplane,
//! the runner's tenants), and the virtual-time driver that runs apps on a
//! [`SimFabric`] ([`run_virtual`]).

pub mod bw;
pub mod calibrate;
pub mod lat;

use crate::rnic::sim::{SimFabric, PS_PER_NS};
use crate::rnic::{AccessFlags, CqAttr, CqHandle, Mr, PdHandle, Qp, QpCaps, QpInitAttr, Rnic, RnicError, Wc, WcStatus};

/// An application on one host that reacts to its NIC.
pub trait App {
    /// Polls completions and memory, posts what it can. Returns whether it
    /// did anything (the driver polls again until no app does).
    fn poll(&mut self) -> Result<bool, AppError>;

    /// When the app next has timed work even if its NIC shows nothing new
    /// (a tenant's start, an open-loop arrival, the end of the dataplane's
    /// busy time), in ns; [`run_virtual`] wakes it then. Default: never.
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }

    /// A time the app would like to poll at when the NIC has nothing
    /// pending at all (a soft timer, such as the dataplane's policy tick:
    /// while the NIC is busy its events wake everyone often enough, and
    /// waking for the timer as well would move the work off those
    /// instants). Default: never.
    fn idle_timer_ns(&self) -> Option<u64> {
        None
    }
}

/// An application's failure.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A verb failed.
    #[error(transparent)]
    Verb(#[from] RnicError),
    /// A post list was rejected.
    #[error(transparent)]
    Post(#[from] crate::rnic::PostError),
    /// A work completion carried an error status.
    #[error("work request {wr_id} completed with {status:?}")]
    Completion {
        /// The request.
        wr_id: u64,
        /// Its status.
        status: WcStatus,
    },
}

/// Fails on an unsuccessful completion.
pub fn check(wc: &Wc) -> Result<(), AppError> {
    if wc.status.is_ok() {
        Ok(())
    } else {
        Err(AppError::Completion { wr_id: wc.wr_id, status: wc.status })
    }
}

/// Runs `apps` on `fabric` in virtual time until `until_ns`: at every event
/// instant that changed something the apps can observe (a completion, a
/// memory write, a QP error), and at every app's timer
/// ([`App::next_timer_ns`], and [`App::idle_timer_ns`] while the NIC has
/// nothing pending), each app polls until none has anything left to do.
/// The apps react only to what they observe and to their timers, so
/// skipping the NIC's internal instants changes nothing but the cost.
pub fn run_virtual(fabric: &SimFabric, apps: &mut [&mut dyn App], until_ns: u64) -> Result<(), AppError> {
    run_virtual_observed(fabric, apps, until_ns, &mut |_, _| {})
}

/// [`run_virtual`], calling `observe(fabric, now_ns)` after the apps went
/// quiet at each wake-up, and once more at `until_ns` (the runner samples
/// the NIC's counters and moves its progress bar there): the one
/// virtual-time driver of every run.
pub fn run_virtual_observed(
    fabric: &SimFabric,
    apps: &mut [&mut dyn App],
    until_ns: u64,
    observe: &mut dyn FnMut(&SimFabric, u64),
) -> Result<(), AppError> {
    loop {
        let mut progressed = true;
        while progressed {
            progressed = false;
            for a in apps.iter_mut() {
                progressed |= a.poll()?;
            }
        }
        let now = fabric.now_ns();
        observe(fabric, now);
        let idle = fabric.next_event_ps().is_none();
        let timer = apps
            .iter()
            .flat_map(|a| a.next_timer_ns().into_iter().chain(a.idle_timer_ns().filter(|_| idle)))
            .filter(|&t| t > now)
            .min();
        let limit = timer.unwrap_or(until_ns).min(until_ns);
        if !fabric.step_until_visible(limit * PS_PER_NS) {
            fabric.advance_to_ps(limit * PS_PER_NS);
            if limit >= until_ns {
                observe(fabric, until_ns);
                return Ok(());
            }
        }
    }
}

/// The objects one side of a perftest-style run uses: a PD, one CQ for
/// sends and receives, one buffer, and its QPs.
pub struct Side<R: Rnic> {
    /// The NIC.
    pub nic: R,
    /// Protection domain.
    pub pd: PdHandle,
    /// Completion queue (sends and receives).
    pub cq: CqHandle,
    /// The buffer.
    pub mr: Mr,
    /// The QPs, in RESET until connected.
    pub qps: Vec<Qp>,
}

impl<R: Rnic> Side<R> {
    /// Creates a PD, a CQ, a buffer of `buf_len` bytes and `nqps` QPs in
    /// traffic class `tc`.
    pub fn new(mut nic: R, nqps: usize, buf_len: usize, tc: u8, depth: u32) -> Result<Self, RnicError> {
        let pd = nic.alloc_pd()?;
        let cq = nic.create_cq(CqAttr { depth: (depth * 2 * nqps as u32).max(64), ignore_overrun: false })?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let mr = nic.reg_mr(pd, buf_len.max(64), access)?;
        let mut qps = Vec::with_capacity(nqps);
        for _ in 0..nqps {
            let mut attr = QpInitAttr::new(cq, cq);
            attr.caps = QpCaps { max_send_wr: depth, max_recv_wr: depth, ..QpCaps::default() };
            attr.traffic_class = tc;
            qps.push(nic.create_qp(pd, attr)?);
        }
        Ok(Side { nic, pd, cq, mr, qps })
    }

    /// Connects QP `i` of each side, both ways, to RTS.
    pub fn connect(&mut self, peer: &mut Side<R>) -> Result<(), RnicError> {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        for (a, b) in self.qps.iter().zip(peer.qps.iter()) {
            crate::rnic::connect::connect_pair(
                &mut self.nic,
                (a.handle, a.qp_num),
                &mut peer.nic,
                (b.handle, b.qp_num),
                access,
            )?;
        }
        Ok(())
    }
}

/// The perftest operation a generator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestOp {
    /// RDMA WRITE (`ib_write_*`).
    Write,
    /// SEND / RECV (`ib_send_*`).
    Send,
    /// RDMA READ (`ib_read_*`).
    Read,
}
