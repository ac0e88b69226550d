//! One bulk tenant of a single-tenant bench: a dataplane tenant with one QP
//! on host 0 of a simulated pair, connected to a passive peer on host 1.

use perf_dataplane::engine::{Dataplane, TenantHandle};
use perf_dataplane::rnic::connect::{bring_up, endpoint};
use perf_dataplane::rnic::sim::{SimFabric, SimRnic};
use perf_dataplane::rnic::{AccessFlags, Mr, RemoteAddr, Rnic};
use perf_dataplane::traffic::Side;

/// One bulk tenant of a benchmark: its handle, its `len`-byte region on
/// host 0, its peer side on host 1, and where its WRITEs land there.
pub struct BulkTenant {
    /// The tenant's handle.
    pub h: TenantHandle,
    /// Its region on the dataplane's host.
    pub mr: Mr,
    /// The peer side (one QP, a `len`-byte region).
    pub side: Side<SimRnic>,
    /// The start of the peer's region.
    pub remote: RemoteAddr,
}

/// Adds a tenant called `bulk` with one QP to `dp` (on host 0 of `f`),
/// connected to a passive peer on host 1.
pub fn bulk_tenant<R: Rnic>(dp: &mut Dataplane<R>, f: &SimFabric, len: usize) -> BulkTenant {
    let h = dp.add_tenant("bulk", 1).expect("tenant");
    let mr = dp.reg_mr(h.id, len).expect("mr");
    let mut side = Side::new(f.nic(1), 1, len, 0, 64).expect("peer");
    let (index, ep) = dp.create_qp(h.id, 0).expect("qp");
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    dp.connect_qp(h.id, index, endpoint(&side.nic, side.qps[0].qp_num)).expect("connect");
    bring_up(&mut side.nic, side.qps[0].handle, ep, access).expect("peer bring_up");
    let remote = side.mr.remote(0);
    BulkTenant { h, mr, side, remote }
}
