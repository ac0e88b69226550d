//! The queues between tenants and the loop: bounded channels whose memory
//! follows their content. Each is a `VecDeque` behind a mutex (one
//! uncontended lock per operation, or per batch on the loop's side) that
//! grows on demand up to its bound ([`DataplaneConfig::request_queue`] /
//! [`DataplaneConfig::completion_queue`] entries) and gives its memory back
//! when a burst has drained, instead of holding both bounds' worth of
//! slots from creation (1.25 MB per tenant at the defaults).
//!
//! A request queue also tells the loop when it stops being empty: the
//! post that finds it empty adds the tenant's id to the loop's arrival
//! list ([`Arrivals`]), so a round drains only the tenants with requests
//! waiting (see `intake.rs`).
//!
//! [`DataplaneConfig::request_queue`]: super::DataplaneConfig::request_queue
//! [`DataplaneConfig::completion_queue`]: super::DataplaneConfig::completion_queue

use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam_channel::TrySendError;
use parking_lot::Mutex;

/// A drained queue keeps at most this many slots: enough for a tenant
/// that completes a few deep QPs' worth per round without giving the
/// memory back and growing it again every round (at most about 20 KB for
/// a request queue), far below the bounds' megabyte.
const KEEP_SLOTS: usize = 256;

/// Ids of the tenants whose request queue stopped being empty, in the
/// order they did; the loop takes them all at the start of a round.
#[derive(Clone, Default)]
pub(crate) struct Arrivals(Arc<Mutex<Vec<u32>>>);

impl Arrivals {
    /// Whether an announced id satisfies `f`.
    pub fn any(&self, f: impl FnMut(&u32) -> bool) -> bool {
        self.0.lock().iter().any(f)
    }

    /// Moves the announced ids into `out` (emptied first).
    pub fn take(&self, out: &mut Vec<u32>) {
        out.clear();
        std::mem::swap(&mut *self.0.lock(), out);
    }
}

struct Queue<T> {
    items: VecDeque<T>,
    /// Whether the receiving end is gone.
    closed: bool,
}

struct Shared<T> {
    q: Mutex<Queue<T>>,
    cap: usize,
}

/// The sending end of a bounded channel.
pub(crate) struct BoundedTx<T> {
    shared: Arc<Shared<T>>,
    /// Where to announce that the queue stopped being empty, and with
    /// which id.
    arrivals: Option<(Arrivals, u32)>,
}

/// The receiving end of a bounded channel.
pub(crate) struct BoundedRx<T> {
    shared: Arc<Shared<T>>,
}

/// A channel of at most `cap` messages; `arrivals`, if given, receives
/// `id` each time a send finds the channel empty.
pub(crate) fn bounded<T>(cap: usize, arrivals: Option<(Arrivals, u32)>) -> (BoundedTx<T>, BoundedRx<T>) {
    let q = Queue { items: VecDeque::new(), closed: false };
    let shared = Arc::new(Shared { q: Mutex::new(q), cap });
    (BoundedTx { shared: shared.clone(), arrivals }, BoundedRx { shared })
}

impl<T> BoundedTx<T> {
    /// Sends `v` unless the channel is full or its receiver is gone.
    pub fn try_send(&self, v: T) -> Result<(), TrySendError<T>> {
        let was_empty = {
            let mut q = self.shared.q.lock();
            if q.closed {
                return Err(TrySendError::Disconnected(v));
            }
            if q.items.len() >= self.shared.cap {
                return Err(TrySendError::Full(v));
            }
            q.items.push_back(v);
            q.items.len() == 1
        };
        if was_empty {
            if let Some((to, id)) = &self.arrivals {
                to.0.lock().push(*id);
            }
        }
        Ok(())
    }

    /// Moves as many of `from`'s messages as the channel has room for, in
    /// order, under one lock; returns how many (0 once the receiver is
    /// gone: they stay in `from`).
    pub fn send_from(&self, from: &mut VecDeque<T>) -> usize {
        let was_empty;
        let n = {
            let mut q = self.shared.q.lock();
            if q.closed {
                return 0;
            }
            was_empty = q.items.is_empty();
            let n = from.len().min(self.shared.cap.saturating_sub(q.items.len()));
            if was_empty && n == from.len() {
                // All of it into an empty queue: the buffers trade places.
                std::mem::swap(&mut q.items, from);
            } else {
                q.items.extend(from.drain(..n));
            }
            n
        };
        if was_empty && n > 0 {
            if let Some((to, id)) = &self.arrivals {
                to.0.lock().push(*id);
            }
        }
        n
    }

    /// Sends all of `items` in order under one lock, or none of them if
    /// the channel has not room for all (a post list is one item).
    pub fn try_send_all(&self, items: &[T]) -> Result<(), TrySendError<()>>
    where
        T: Clone,
    {
        let was_empty = {
            let mut q = self.shared.q.lock();
            if q.closed {
                return Err(TrySendError::Disconnected(()));
            }
            if q.items.len() + items.len() > self.shared.cap {
                return Err(TrySendError::Full(()));
            }
            let was_empty = q.items.is_empty();
            q.items.extend(items.iter().cloned());
            was_empty
        };
        if was_empty && !items.is_empty() {
            if let Some((to, id)) = &self.arrivals {
                to.0.lock().push(*id);
            }
        }
        Ok(())
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.shared.q.lock().items.len()
    }
}

impl<T> BoundedRx<T> {
    /// Takes the next message, if one is waiting.
    pub fn try_recv(&self) -> Option<T> {
        let mut q = self.shared.q.lock();
        let v = q.items.pop_front();
        shrink(&mut q.items);
        v
    }

    /// Takes up to `n` messages into `out`, in order; returns how many.
    pub fn recv_into(&self, n: usize, out: &mut VecDeque<T>) -> usize {
        let mut q = self.shared.q.lock();
        let k = n.min(q.items.len());
        if out.is_empty() && k == q.items.len() {
            // All of it into an empty batch: the buffers trade places.
            std::mem::swap(&mut q.items, out);
        } else {
            out.extend(q.items.drain(..k));
        }
        shrink(&mut q.items);
        k
    }

    /// Whether nothing is waiting: the next send announces itself on the
    /// arrival list.
    pub fn is_idle(&self) -> bool {
        self.shared.q.lock().items.is_empty()
    }
}

impl<T> Drop for BoundedRx<T> {
    fn drop(&mut self) {
        let mut q = self.shared.q.lock();
        q.closed = true;
        q.items = VecDeque::new();
    }
}

/// Gives a drained queue's memory back after a burst.
fn shrink<T>(items: &mut VecDeque<T>) {
    if items.is_empty() && items.capacity() > KEEP_SLOTS {
        *items = VecDeque::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_holds_and_arrivals_are_announced_once_per_busy_period() {
        let arrivals = Arrivals::default();
        let mut ids = Vec::new();
        let (tx, rx) = bounded::<u32>(3, Some((arrivals.clone(), 7)));
        assert!(rx.is_idle());
        for v in 0..3 {
            tx.try_send(v).expect("room");
        }
        assert!(matches!(tx.try_send(9), Err(TrySendError::Full(9))));
        assert_eq!(tx.len(), 3);
        arrivals.take(&mut ids);
        assert_eq!(ids, vec![7], "one announcement for the busy period");
        assert_eq!((rx.try_recv(), rx.try_recv()), (Some(0), Some(1)));
        tx.try_send(3).expect("room again");
        arrivals.take(&mut ids);
        assert!(ids.is_empty(), "still busy: no announcement");
        let mut out = VecDeque::new();
        assert_eq!(rx.recv_into(5, &mut out), 2);
        assert_eq!(out, [2, 3]);
        assert!(rx.is_idle());
        tx.try_send(4).expect("room");
        arrivals.take(&mut ids);
        assert_eq!(ids, vec![7], "announced again after going idle");
        drop(tx);
        assert_eq!(rx.try_recv(), Some(4), "what was sent outlives the sender");
        let (tx, rx) = bounded::<u32>(3, None);
        drop(rx);
        assert!(matches!(tx.try_send(5), Err(TrySendError::Disconnected(5))));
    }

    #[test]
    fn a_list_goes_whole_or_not_at_all_and_a_batch_as_far_as_there_is_room() {
        let arrivals = Arrivals::default();
        let mut ids = Vec::new();
        let (tx, rx) = bounded::<u32>(4, Some((arrivals.clone(), 3)));
        tx.try_send_all(&[1, 2, 3]).expect("room for three");
        assert!(matches!(tx.try_send_all(&[4, 5]), Err(TrySendError::Full(()))), "no room for both");
        assert_eq!(tx.len(), 3, "a refused list leaves nothing behind");
        arrivals.take(&mut ids);
        assert_eq!(ids, vec![3], "a list announces itself once");
        let mut from: VecDeque<u32> = (4..8).collect();
        assert_eq!(tx.send_from(&mut from), 1, "one slot left");
        assert_eq!(from, [5, 6, 7], "the rest stays, in order");
        let mut out = VecDeque::new();
        assert_eq!(rx.recv_into(10, &mut out), 4);
        assert_eq!(out, [1, 2, 3, 4]);
        assert_eq!(tx.send_from(&mut from), 3);
        drop(rx);
        let mut more: VecDeque<u32> = [9].into();
        assert_eq!(tx.send_from(&mut more), 0, "the receiver is gone");
        assert!(matches!(tx.try_send_all(&[9]), Err(TrySendError::Disconnected(()))));
    }

    #[test]
    fn a_drained_burst_gives_its_memory_back() {
        let (tx, rx) = bounded::<u64>(10_000, None);
        for v in 0..5000 {
            tx.try_send(v).expect("room");
        }
        assert!(rx.shared.q.lock().items.capacity() >= 5000);
        while rx.try_recv().is_some() {}
        assert!(rx.shared.q.lock().items.capacity() <= KEEP_SLOTS);
    }
}
