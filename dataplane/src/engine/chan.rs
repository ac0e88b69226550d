//! The queues between tenants and the loop: bounded channels whose memory
//! follows their content. Each is an unbounded `crossbeam-channel` (a
//! linked list of 31-slot blocks, allocated as messages arrive and freed
//! as they are taken) with an atomic count that enforces the bound, so a
//! tenant's queues cost a few hundred bytes while empty and grow on
//! demand up to [`DataplaneConfig::request_queue`] /
//! [`DataplaneConfig::completion_queue`] entries, instead of holding both
//! bounds' worth of slots from creation (1.25 MB per tenant at the
//! defaults).
//!
//! A request queue also tells the loop when it stops being empty: the
//! post that takes its count from 0 to 1 sends the tenant's id on the
//! loop's arrival channel, so a round drains only the tenants with
//! requests waiting (see `intake.rs`).
//!
//! [`DataplaneConfig::request_queue`]: super::DataplaneConfig::request_queue
//! [`DataplaneConfig::completion_queue`]: super::DataplaneConfig::completion_queue

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver, Sender, TrySendError};

/// The count and bound both ends share.
struct Shared {
    /// Messages sent and not yet taken, plus sends in progress.
    len: AtomicUsize,
    cap: usize,
}

/// The sending end of a bounded channel.
pub(crate) struct BoundedTx<T> {
    tx: Sender<T>,
    shared: Arc<Shared>,
    /// Where to announce that the queue stopped being empty, and with
    /// which id.
    arrivals: Option<(Sender<u32>, u32)>,
}

/// The receiving end of a bounded channel.
pub(crate) struct BoundedRx<T> {
    rx: Receiver<T>,
    shared: Arc<Shared>,
}

/// A channel of at most `cap` messages; `arrivals`, if given, receives
/// `id` each time the channel goes from empty to not empty.
pub(crate) fn bounded<T>(cap: usize, arrivals: Option<(Sender<u32>, u32)>) -> (BoundedTx<T>, BoundedRx<T>) {
    let (tx, rx) = unbounded();
    let shared = Arc::new(Shared { len: AtomicUsize::new(0), cap });
    (BoundedTx { tx, shared: shared.clone(), arrivals }, BoundedRx { rx, shared })
}

impl<T> BoundedTx<T> {
    /// Sends `v` unless the channel is full or its receiver is gone.
    pub fn try_send(&self, v: T) -> Result<(), TrySendError<T>> {
        let prev = self.shared.len.fetch_add(1, Ordering::AcqRel);
        if prev >= self.shared.cap {
            self.shared.len.fetch_sub(1, Ordering::AcqRel);
            return Err(TrySendError::Full(v));
        }
        if let Err(e) = self.tx.send(v) {
            self.shared.len.fetch_sub(1, Ordering::AcqRel);
            return Err(TrySendError::Disconnected(e.into_inner()));
        }
        if prev == 0 {
            if let Some((to, id)) = &self.arrivals {
                // The loop gone means nobody will drain it anyway.
                let _ = to.send(*id);
            }
        }
        Ok(())
    }

    /// Messages waiting (sends in progress included).
    pub fn len(&self) -> usize {
        self.shared.len.load(Ordering::Acquire).min(self.shared.cap)
    }
}

impl<T> BoundedRx<T> {
    /// Takes the next message, if one is waiting.
    pub fn try_recv(&self) -> Option<T> {
        let v = self.rx.try_recv().ok()?;
        self.shared.len.fetch_sub(1, Ordering::AcqRel);
        Some(v)
    }

    /// Whether nothing is waiting and no send is in progress: a send that
    /// starts after this returns `true` announces itself on the arrival
    /// channel.
    pub fn is_idle(&self) -> bool {
        self.shared.len.load(Ordering::Acquire) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_holds_and_arrivals_are_announced_once_per_busy_period() {
        let (atx, arx) = unbounded();
        let (tx, rx) = bounded::<u32>(3, Some((atx, 7)));
        assert!(rx.is_idle());
        for v in 0..3 {
            tx.try_send(v).expect("room");
        }
        assert!(matches!(tx.try_send(9), Err(TrySendError::Full(9))));
        assert_eq!(tx.len(), 3);
        assert_eq!(arx.try_iter().collect::<Vec<_>>(), vec![7], "one announcement for the busy period");
        assert_eq!((rx.try_recv(), rx.try_recv()), (Some(0), Some(1)));
        tx.try_send(3).expect("room again");
        assert_eq!(arx.try_iter().count(), 0, "still busy: no announcement");
        assert_eq!((rx.try_recv(), rx.try_recv(), rx.try_recv()), (Some(2), Some(3), None));
        assert!(rx.is_idle());
        tx.try_send(4).expect("room");
        assert_eq!(arx.try_iter().collect::<Vec<_>>(), vec![7], "announced again after going idle");
        drop(rx);
        assert!(matches!(tx.try_send(5), Err(TrySendError::Disconnected(5))));
    }
}
