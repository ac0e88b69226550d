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
/// neither writes nor names keeps the trait's default (`cross_channel`,
/// `port_traffic`, `initial_psn` and `backend_counters` have one) or fails to compile: a
/// wrapper of a hardware backend must name `initial_psn`.
///
/// ```ignore
/// impl<R: Rnic> Rnic for Counting<R> {
///     fn post_send(&mut self, qp: QpHandle, wrs: &[SendWr<'_>]) -> ::core::result::Result<(), PostError> {
///         self.posts += wrs.len();
///         self.inner.post_send(qp, wrs)
///     }
///     perf_dataplane::forward_rnic!(|s| s.inner; device_info, cross_channel, port_info, port_traffic, initial_psn,
///         clock_ns, alloc_pd, reg_mr, dereg_mr, write_mr, read_mr, create_cq, destroy_cq, create_qp,
///         modify_qp, qp_state, destroy_qp, post_recv, poll_cq);
/// }
/// ```
#[macro_export]
macro_rules! forward_rnic {
    (|$s:ident| $to:expr; $($method:ident),+ $(,)?) => {
        $( $crate::forward_rnic!(@sig $method |$s| $to); )+
    };
    // Each method's receiver, arguments and result, as the trait has them.
    (@sig device_info $($to:tt)+) => {
        $crate::forward_rnic!(@ref device_info() -> $crate::rnic::DeviceInfo; $($to)+);
    };
    (@sig cross_channel $($to:tt)+) => {
        $crate::forward_rnic!(@ref cross_channel() -> $crate::rnic::CrossChannel; $($to)+);
    };
    (@sig port_info $($to:tt)+) => { $crate::forward_rnic!(@ref port_info() -> $crate::rnic::PortInfo; $($to)+); };
    (@sig port_traffic $($to:tt)+) => {
        $crate::forward_rnic!(@ref port_traffic() -> ::core::option::Option<$crate::rnic::PortTraffic>; $($to)+);
    };
    (@sig initial_psn $($to:tt)+) => { $crate::forward_rnic!(@ref initial_psn(qp_num: u32) -> u32; $($to)+); };
    (@sig backend_counters $($to:tt)+) => {
        $crate::forward_rnic!(@ref backend_counters() -> ::std::vec::Vec<(&'static str, u64)>; $($to)+);
    };
    (@sig clock_ns $($to:tt)+) => { $crate::forward_rnic!(@ref clock_ns() -> u64; $($to)+); };
    (@sig alloc_pd $($to:tt)+) => {
        $crate::forward_rnic!(@mut alloc_pd()
            -> ::core::result::Result<$crate::rnic::PdHandle, $crate::rnic::RnicError>; $($to)+);
    };
    (@sig reg_mr $($to:tt)+) => {
        $crate::forward_rnic!(@mut reg_mr(pd: $crate::rnic::PdHandle, len: usize, access: $crate::rnic::AccessFlags)
            -> ::core::result::Result<$crate::rnic::Mr, $crate::rnic::RnicError>; $($to)+);
    };
    (@sig dereg_mr $($to:tt)+) => {
        $crate::forward_rnic!(@mut dereg_mr(mr: $crate::rnic::MrHandle)
            -> ::core::result::Result<(), $crate::rnic::RnicError>; $($to)+);
    };
    (@sig write_mr $($to:tt)+) => {
        $crate::forward_rnic!(@mut write_mr(mr: $crate::rnic::MrHandle, offset: usize, data: &[u8])
            -> ::core::result::Result<(), $crate::rnic::RnicError>; $($to)+);
    };
    (@sig read_mr $($to:tt)+) => {
        $crate::forward_rnic!(@ref read_mr(mr: $crate::rnic::MrHandle, offset: usize, out: &mut [u8])
            -> ::core::result::Result<(), $crate::rnic::RnicError>; $($to)+);
    };
    (@sig create_cq $($to:tt)+) => {
        $crate::forward_rnic!(@mut create_cq(attr: $crate::rnic::CqAttr)
            -> ::core::result::Result<$crate::rnic::CqHandle, $crate::rnic::RnicError>; $($to)+);
    };
    (@sig destroy_cq $($to:tt)+) => {
        $crate::forward_rnic!(@mut destroy_cq(cq: $crate::rnic::CqHandle)
            -> ::core::result::Result<(), $crate::rnic::RnicError>; $($to)+);
    };
    (@sig create_qp $($to:tt)+) => {
        $crate::forward_rnic!(@mut create_qp(pd: $crate::rnic::PdHandle, attr: $crate::rnic::QpInitAttr)
            -> ::core::result::Result<$crate::rnic::Qp, $crate::rnic::RnicError>; $($to)+);
    };
    (@sig modify_qp $($to:tt)+) => {
        $crate::forward_rnic!(@mut modify_qp(qp: $crate::rnic::QpHandle, transition: $crate::rnic::QpTransition)
            -> ::core::result::Result<(), $crate::rnic::RnicError>; $($to)+);
    };
    (@sig qp_state $($to:tt)+) => {
        $crate::forward_rnic!(@ref qp_state(qp: $crate::rnic::QpHandle)
            -> ::core::result::Result<$crate::rnic::QpState, $crate::rnic::RnicError>; $($to)+);
    };
    (@sig destroy_qp $($to:tt)+) => {
        $crate::forward_rnic!(@mut destroy_qp(qp: $crate::rnic::QpHandle)
            -> ::core::result::Result<(), $crate::rnic::RnicError>; $($to)+);
    };
    (@sig post_send $($to:tt)+) => {
        $crate::forward_rnic!(@mut post_send(qp: $crate::rnic::QpHandle, wrs: &[$crate::rnic::SendWr<'_>])
            -> ::core::result::Result<(), $crate::rnic::PostError>; $($to)+);
    };
    (@sig post_recv $($to:tt)+) => {
        $crate::forward_rnic!(@mut post_recv(qp: $crate::rnic::QpHandle, wrs: &[$crate::rnic::RecvWr<'_>])
            -> ::core::result::Result<(), $crate::rnic::PostError>; $($to)+);
    };
    (@sig poll_cq $($to:tt)+) => {
        $crate::forward_rnic!(@mut poll_cq(cq: $crate::rnic::CqHandle, out: &mut [$crate::rnic::Wc])
            -> ::core::result::Result<usize, $crate::rnic::RnicError>; $($to)+);
    };
    // The method itself: `self` and its use come from the same arm.
    (@ref $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; |$s:ident| $to:expr) => {
        fn $name(&self, $($arg: $ty),*) -> $ret {
            let $s = self;
            $to.$name($($arg),*)
        }
    };
    (@mut $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty; |$s:ident| $to:expr) => {
        fn $name(&mut self, $($arg: $ty),*) -> $ret {
            let $s = self;
            $to.$name($($arg),*)
        }
    };
}
