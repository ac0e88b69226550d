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
    fn device_info(&self) -> DeviceInfo {
        (**self).device_info()
    }

    fn cross_channel(&self) -> CrossChannel {
        (**self).cross_channel()
    }

    fn port_info(&self) -> PortInfo {
        (**self).port_info()
    }

    fn clock_ns(&self) -> u64 {
        (**self).clock_ns()
    }

    fn alloc_pd(&mut self) -> Result<PdHandle, RnicError> {
        (**self).alloc_pd()
    }

    fn reg_mr(&mut self, pd: PdHandle, len: usize, access: AccessFlags) -> Result<Mr, RnicError> {
        (**self).reg_mr(pd, len, access)
    }

    fn dereg_mr(&mut self, mr: MrHandle) -> Result<(), RnicError> {
        (**self).dereg_mr(mr)
    }

    fn write_mr(&mut self, mr: MrHandle, offset: usize, data: &[u8]) -> Result<(), RnicError> {
        (**self).write_mr(mr, offset, data)
    }

    fn read_mr(&self, mr: MrHandle, offset: usize, out: &mut [u8]) -> Result<(), RnicError> {
        (**self).read_mr(mr, offset, out)
    }

    fn create_cq(&mut self, attr: CqAttr) -> Result<CqHandle, RnicError> {
        (**self).create_cq(attr)
    }

    fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), RnicError> {
        (**self).destroy_cq(cq)
    }

    fn create_qp(&mut self, pd: PdHandle, attr: QpInitAttr) -> Result<Qp, RnicError> {
        (**self).create_qp(pd, attr)
    }

    fn modify_qp(&mut self, qp: QpHandle, transition: QpTransition) -> Result<(), RnicError> {
        (**self).modify_qp(qp, transition)
    }

    fn qp_state(&self, qp: QpHandle) -> Result<QpState, RnicError> {
        (**self).qp_state(qp)
    }

    fn destroy_qp(&mut self, qp: QpHandle) -> Result<(), RnicError> {
        (**self).destroy_qp(qp)
    }

    fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        (**self).post_send(qp, wrs)
    }

    fn post_recv(&mut self, qp: QpHandle, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        (**self).post_recv(qp, wrs)
    }

    fn poll_cq(&mut self, cq: CqHandle, out: &mut [Wc]) -> Result<usize, RnicError> {
        (**self).poll_cq(cq, out)
    }
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
