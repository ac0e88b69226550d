//! Where a capped tenant's QP rotation happens, chosen from the NIC's
//! [`CrossChannel`](crate::rnic::CrossChannel) placement when the tenant is
//! added.
//!
//! - **In the NIC** (the simulator, MLNX_OFED 4.x experimental verbs): the
//!   tenant gets a preemption control QP ([`super::control_qp`]); the QP
//!   giving up its slot ends its stream with a SEND_ENABLE on it and the QP
//!   taking over starts with a WAIT on its CQ, so the switch happens inside
//!   the NIC with no gap on the wire. Zero-weight WRs (WAITs on an
//!   always-satisfied CQ) take turns of the NIC's round-robin scheduler.
//! - **On the host** (upstream rdma-core, where the backend can only
//!   host-gate WAIT and SEND_ENABLE, or a NIC without them): no control QP.
//!   The QP giving up its slot stops being fed and keeps the slot until its
//!   posted messages have completed ([`DpQp::draining`]); only then does
//!   the QP taking over get the slot, so at most the plan's number of the
//!   tenant's QPs have work in the NIC at any time, as in the NIC, at the
//!   cost of a pipeline gap (one completion round trip plus a round of the
//!   loop) at each hand-off. Zero-weight WRs are not posted: a host-gated
//!   WAIT completes in software and takes no turn of the NIC's scheduler,
//!   so it would cost CPU and weigh nothing.

use super::qp::DpQp;

/// Whether the QP counts against its tenant's active-QP cap: fed by the
/// loop, or draining after a host hand-off.
pub(super) fn holds_slot(q: &DpQp) -> bool {
    q.active || q.draining
}

/// Ends a host hand-off's drain once the QP has nothing in the NIC.
pub(super) fn end_drain(q: &mut DpQp) {
    if q.draining && q.outstanding == 0 {
        q.draining = false;
    }
}

/// The QP gives up its slot. With an in-NIC hand-off (`release`: a
/// SEND_ENABLE ends its stream) the taking-over QP may start at once;
/// otherwise only when the QP has drained. Returns whether it may start now.
pub(super) fn give_up_slot(q: &mut DpQp, release: bool) -> bool {
    q.active = false;
    q.pending_release = release;
    q.draining = !release && q.outstanding > 0;
    !q.draining
}

/// Zero-weight WRs per chunk on this NIC: none without an in-NIC hand-off.
pub(super) fn zero_weight_per_chunk(planned: u32, in_nic: bool) -> u32 {
    if in_nic {
        planned
    } else {
        0
    }
}
