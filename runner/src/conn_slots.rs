//! Slots for connections served at once: a listener takes one per
//! connection it serves and refuses the connection when none is left; the
//! slot comes back when the connection's [`ConnSlot`] is dropped, however
//! its thread ends. `serve`'s tenants' socket and the control socket each
//! have their own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The connections being served.
#[derive(Debug, Clone, Default)]
pub struct ConnSlots(Arc<AtomicUsize>);

/// One connection's slot, given back when dropped.
#[derive(Debug)]
pub struct ConnSlot(Arc<AtomicUsize>);

impl ConnSlots {
    /// A slot if fewer than `max` are taken.
    pub fn take(&self, max: usize) -> Option<ConnSlot> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| ConnSlot(self.0.clone()))
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_slots_are_capped_and_come_back_when_dropped() {
        let slots = ConnSlots::default();
        let a = slots.take(2).expect("first");
        let b = slots.take(2).expect("second");
        assert!(slots.take(2).is_none());
        drop(a);
        let c = slots.take(2).expect("a freed slot");
        assert!(slots.take(2).is_none());
        drop((b, c));
        let both = (slots.take(2), slots.take(2));
        assert!(both.0.is_some() && both.1.is_some());
    }
}
