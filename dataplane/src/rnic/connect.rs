//! Bringing RC QPs up: the INIT -> RTR -> RTS sequence with the endpoint
//! data two sides exchange out of band.

use super::{AccessFlags, QpEndpoint, QpHandle, QpTransition, Rnic, RnicError};

/// Default transport retry count used when bringing QPs up (perftest's 7).
pub const DEFAULT_RETRY_CNT: u8 = 7;
/// Default RNR retry count (7 = retry forever, perftest's default).
pub const DEFAULT_RNR_RETRY: u8 = 7;

/// The endpoint data of a local QP, to hand to the peer.
pub fn endpoint(nic: &dyn Rnic, qp_num: u32) -> QpEndpoint {
    let port = nic.port_info();
    let psn = nic.initial_psn(qp_num) & 0xff_ffff;
    QpEndpoint { gid: port.gid, qp_num, psn, mtu: port.mtu, max_rd_atomic: nic.device_info().caps.max_rd_atomic }
}

/// Moves `qp` from RESET to RTS, connected to `remote`.
pub fn bring_up(nic: &mut dyn Rnic, qp: QpHandle, remote: QpEndpoint, access: AccessFlags) -> Result<(), RnicError> {
    nic.modify_qp(qp, QpTransition::Init { access })?;
    nic.modify_qp(qp, QpTransition::Rtr { remote })?;
    nic.modify_qp(qp, QpTransition::Rts { retry_cnt: DEFAULT_RETRY_CNT, rnr_retry: DEFAULT_RNR_RETRY })
}

/// Connects QP `a` on `nic_a` with QP `b` on `nic_b` (both in RESET) and
/// brings both to RTS.
pub fn connect_pair(
    nic_a: &mut dyn Rnic,
    a: (QpHandle, u32),
    nic_b: &mut dyn Rnic,
    b: (QpHandle, u32),
    access: AccessFlags,
) -> Result<(), RnicError> {
    let ea = endpoint(nic_a, a.1);
    let eb = endpoint(nic_b, b.1);
    bring_up(nic_a, a.0, eb, access)?;
    bring_up(nic_b, b.0, ea, access)
}
