//! Opening a real RDMA device by name in any build, for callers (the
//! runner) that choose the backend at run time: with the `verbs` feature
//! it opens a `VerbsRnic`; without it, it fails with an
//! error that says what this machine has (the same report as
//! `perf-runner devices`) and how to rebuild. Either way, never a panic.
//!
//! Also: a boxed backend is a backend (`Box<dyn Rnic>` implements
//! [`Rnic`]), so the dataplane and the perftest sides run over a device
//! chosen at run time.

use crate::rnic::*;

/// How to pick the GID of port 1 (the rest of the device's setup is
/// automatic): in any build, so that the runner's flags exist in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GidChoice {
    /// This GID index (`--gid-index`), as perftest's `-x`.
    pub index: Option<u32>,
    /// Else prefer the GID of this local address: the out-of-band socket's,
    /// i.e. the interface the kernel routes to the peer.
    pub prefer_addr: Option<std::net::IpAddr>,
}

/// Opens port 1 of RDMA device `name` through the verbs backend.
pub fn open_verbs(name: &str) -> Result<Box<dyn Rnic>, RnicError> {
    open_impl(name, &GidChoice::default())
}

/// [`open_verbs`] with a GID choice.
pub fn open_verbs_with(name: &str, gid: &GidChoice) -> Result<Box<dyn Rnic>, RnicError> {
    open_impl(name, gid)
}

#[cfg(feature = "verbs")]
fn open_impl(name: &str, gid: &GidChoice) -> Result<Box<dyn Rnic>, RnicError> {
    let opts = super::OpenOptions { port: 1, gid_index: gid.index, prefer_addr: gid.prefer_addr };
    let nic = super::VerbsRnic::open_with(name, opts)?;
    Ok(Box::new(nic))
}

#[cfg(not(feature = "verbs"))]
fn open_impl(name: &str, _gid: &GidChoice) -> Result<Box<dyn Rnic>, RnicError> {
    let probe = super::probe::probe();
    let found = probe.absence_report().unwrap_or_else(|| "libibverbs lists devices".into());
    Err(RnicError::Device(format!(
        "cannot open RDMA device {name:?}: this binary was built without the verbs backend \
         (rebuild with `--features perf-dataplane/verbs`, see docs/hardware.md)\n{found}"
    )))
}

impl<R: Rnic + ?Sized> Rnic for Box<R> {
    crate::forward_rnic!(|s| (**s); device_info, cross_channel, port_info, port_traffic, initial_psn, backend_counters, clock_ns, alloc_pd, reg_mr, dereg_mr,
        write_mr, read_mr, create_cq, destroy_cq, create_qp, modify_qp, qp_state, destroy_qp, post_send, post_recv,
        poll_cq);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_device_is_a_clear_error() {
        let Err(RnicError::Device(m)) = open_verbs("perf-rs-no-such-device") else {
            panic!("expected a Device error for a device that does not exist");
        };
        assert!(m.contains("\"perf-rs-no-such-device\""), "{m}");
        if !cfg!(feature = "verbs") {
            assert!(m.contains("--features perf-dataplane/verbs"), "{m}");
        }
    }

    #[test]
    fn a_boxed_backend_is_a_backend() {
        let fabric = sim::SimFabric::pair(1);
        let mut nic: Box<dyn Rnic> = Box::new(fabric.nic(0));
        assert_eq!(nic.cross_channel(), CrossChannel::InNic);
        let pd = nic.alloc_pd().expect("pd");
        let mr = nic.reg_mr(pd, 64, AccessFlags::LOCAL_WRITE).expect("mr");
        nic.write_mr(mr.handle, 0, b"abc").expect("write");
        let mut out = [0u8; 3];
        nic.read_mr(mr.handle, 0, &mut out).expect("read");
        assert_eq!(&out, b"abc");
    }
}
