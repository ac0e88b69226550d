//! [`forward_rnic!`](crate::forward_rnic): the methods of an [`Rnic`](super::Rnic)
//! wrapper that only pass the call on to the backend it wraps.
//!
//! A wrapper ([`HostOnly`](super::host_only::HostOnly), the rendezvous
//! receiver, a boxed backend, the benches' timed NIC, the runner's shared
//! one) changes a few verbs and passes every other one through unchanged;
//! it writes the verbs it changes and names the rest in one
//! `forward_rnic!` inside its `impl Rnic`.

/// Writes, inside an `impl Rnic for Wrapper`, the [`Rnic`](crate::rnic::Rnic)
/// methods named that only pass the call on to the wrapped backend.
///
/// The backend is given as a closure-like accessor of `self`:
/// `|s| s.inner` (a field), `|s| (**s)` (a `Box`), `|s| s.lock()` (a
/// guard). Any method of the trait may be named; a method the wrapper
/// neither writes nor names keeps the trait's default (only
/// `cross_channel` has one) or fails to compile.
///
/// ```ignore
/// impl<R: Rnic> Rnic for Counting<R> {
///     fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
///         self.posts += wrs.len();
///         self.inner.post_send(qp, wrs)
///     }
///     perf_dataplane::forward_rnic!(|s| s.inner; device_info, cross_channel, port_info, clock_ns,
///         alloc_pd, reg_mr, dereg_mr, write_mr, read_mr, create_cq, destroy_cq, create_qp,
///         modify_qp, qp_state, destroy_qp, post_recv, poll_cq);
/// }
/// ```
#[macro_export]
macro_rules! forward_rnic {
    (|$s:ident| $to:expr; $($method:ident),+ $(,)?) => {
        $( $crate::forward_rnic!(@one $method |$s| $to); )+
    };
    (@one device_info |$s:ident| $to:expr) => {
        fn device_info(&self) -> $crate::rnic::DeviceInfo {
            let $s = self;
            $to.device_info()
        }
    };
    (@one cross_channel |$s:ident| $to:expr) => {
        fn cross_channel(&self) -> $crate::rnic::CrossChannel {
            let $s = self;
            $to.cross_channel()
        }
    };
    (@one port_info |$s:ident| $to:expr) => {
        fn port_info(&self) -> $crate::rnic::PortInfo {
            let $s = self;
            $to.port_info()
        }
    };
    (@one clock_ns |$s:ident| $to:expr) => {
        fn clock_ns(&self) -> u64 {
            let $s = self;
            $to.clock_ns()
        }
    };
    (@one alloc_pd |$s:ident| $to:expr) => {
        fn alloc_pd(&mut self) -> ::core::result::Result<$crate::rnic::PdHandle, $crate::rnic::RnicError> {
            let $s = self;
            $to.alloc_pd()
        }
    };
    (@one reg_mr |$s:ident| $to:expr) => {
        fn reg_mr(
            &mut self,
            pd: $crate::rnic::PdHandle,
            len: usize,
            access: $crate::rnic::AccessFlags,
        ) -> ::core::result::Result<$crate::rnic::Mr, $crate::rnic::RnicError> {
            let $s = self;
            $to.reg_mr(pd, len, access)
        }
    };
    (@one dereg_mr |$s:ident| $to:expr) => {
        fn dereg_mr(&mut self, mr: $crate::rnic::MrHandle) -> ::core::result::Result<(), $crate::rnic::RnicError> {
            let $s = self;
            $to.dereg_mr(mr)
        }
    };
    (@one write_mr |$s:ident| $to:expr) => {
        fn write_mr(
            &mut self,
            mr: $crate::rnic::MrHandle,
            offset: usize,
            data: &[u8],
        ) -> ::core::result::Result<(), $crate::rnic::RnicError> {
            let $s = self;
            $to.write_mr(mr, offset, data)
        }
    };
    (@one read_mr |$s:ident| $to:expr) => {
        fn read_mr(
            &self,
            mr: $crate::rnic::MrHandle,
            offset: usize,
            out: &mut [u8],
        ) -> ::core::result::Result<(), $crate::rnic::RnicError> {
            let $s = self;
            $to.read_mr(mr, offset, out)
        }
    };
    (@one create_cq |$s:ident| $to:expr) => {
        fn create_cq(
            &mut self,
            attr: $crate::rnic::CqAttr,
        ) -> ::core::result::Result<$crate::rnic::CqHandle, $crate::rnic::RnicError> {
            let $s = self;
            $to.create_cq(attr)
        }
    };
    (@one destroy_cq |$s:ident| $to:expr) => {
        fn destroy_cq(&mut self, cq: $crate::rnic::CqHandle) -> ::core::result::Result<(), $crate::rnic::RnicError> {
            let $s = self;
            $to.destroy_cq(cq)
        }
    };
    (@one create_qp |$s:ident| $to:expr) => {
        fn create_qp(
            &mut self,
            pd: $crate::rnic::PdHandle,
            attr: $crate::rnic::QpInitAttr,
        ) -> ::core::result::Result<$crate::rnic::Qp, $crate::rnic::RnicError> {
            let $s = self;
            $to.create_qp(pd, attr)
        }
    };
    (@one modify_qp |$s:ident| $to:expr) => {
        fn modify_qp(
            &mut self,
            qp: $crate::rnic::QpHandle,
            transition: $crate::rnic::QpTransition,
        ) -> ::core::result::Result<(), $crate::rnic::RnicError> {
            let $s = self;
            $to.modify_qp(qp, transition)
        }
    };
    (@one qp_state |$s:ident| $to:expr) => {
        fn qp_state(
            &self,
            qp: $crate::rnic::QpHandle,
        ) -> ::core::result::Result<$crate::rnic::QpState, $crate::rnic::RnicError> {
            let $s = self;
            $to.qp_state(qp)
        }
    };
    (@one destroy_qp |$s:ident| $to:expr) => {
        fn destroy_qp(&mut self, qp: $crate::rnic::QpHandle) -> ::core::result::Result<(), $crate::rnic::RnicError> {
            let $s = self;
            $to.destroy_qp(qp)
        }
    };
    (@one post_send |$s:ident| $to:expr) => {
        fn post_send(
            &mut self,
            qp: $crate::rnic::QpHandle,
            wrs: &[$crate::rnic::SendWr<'_>],
        ) -> ::core::result::Result<(), $crate::rnic::PostError> {
            let $s = self;
            $to.post_send(qp, wrs)
        }
    };
    (@one post_recv |$s:ident| $to:expr) => {
        fn post_recv(
            &mut self,
            qp: $crate::rnic::QpHandle,
            wrs: &[$crate::rnic::RecvWr<'_>],
        ) -> ::core::result::Result<(), $crate::rnic::PostError> {
            let $s = self;
            $to.post_recv(qp, wrs)
        }
    };
    (@one poll_cq |$s:ident| $to:expr) => {
        fn poll_cq(
            &mut self,
            cq: $crate::rnic::CqHandle,
            out: &mut [$crate::rnic::Wc],
        ) -> ::core::result::Result<usize, $crate::rnic::RnicError> {
            let $s = self;
            $to.poll_cq(cq, out)
        }
    };
}
