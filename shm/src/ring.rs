//! The segment of one client: a header, the request ring (client
//! produces, daemon consumes) and the completion ring (daemon produces,
//! client consumes), each single-producer / single-consumer with 64-bit
//! free-running indices on cache lines of their own.
//!
//! Each side keeps its own copy of the indices it writes and never reads
//! them back from shared memory; it reads only the other side's index
//! (Acquire), checks it against what it knows, then reads or writes
//! entries and publishes its own index (Release). [`DaemonEnd`] treats the
//! client's indices as hostile: an index that leaves the ring or moves
//! backwards is a [`RingFault`].

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

use crate::abi::*;
use crate::region::SharedRegion;
use crate::ShmError;

/// A client broke the ring protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingFault {
    /// The request ring's tail left `[head, head + entries]` or moved
    /// backwards.
    #[error("request ring tail {tail} out of range (head {head}, last tail {last}, {entries} entries)")]
    RequestTail {
        /// The tail read.
        tail: u64,
        /// The daemon's head.
        head: u64,
        /// The tail read before.
        last: u64,
        /// Ring size.
        entries: u32,
    },
    /// The completion ring's head left `[last head, tail]`.
    #[error("completion ring head {head} out of range (last head {last}, tail {tail})")]
    CompletionHead {
        /// The head read.
        head: u64,
        /// The head read before.
        last: u64,
        /// The daemon's tail.
        tail: u64,
    },
}

/// A mapped segment with its layout.
struct Segment {
    region: SharedRegion,
    layout: Layout,
}

impl Segment {
    fn req_at(&self, index: u64) -> usize {
        self.layout.req_offset()
            + (index & (self.layout.req_entries as u64 - 1)) as usize * std::mem::size_of::<RequestEntry>()
    }

    fn cpl_at(&self, index: u64) -> usize {
        self.layout.cpl_offset()
            + (index & (self.layout.cpl_entries as u64 - 1)) as usize * std::mem::size_of::<CompletionEntry>()
    }

    fn load(&self, offset: usize) -> u64 {
        self.region.mapping().atomic(offset).load(Ordering::Acquire)
    }

    fn store(&self, offset: usize, v: u64) {
        self.region.mapping().atomic(offset).store(v, Ordering::Release)
    }
}

/// The daemon's end of a client's segment.
pub struct DaemonEnd {
    seg: Segment,
    req_head: u64,
    req_tail_seen: u64,
    cpl_tail: u64,
    cpl_head_seen: u64,
}

impl DaemonEnd {
    /// A new segment with `layout`, status [`SegmentStatus::Running`].
    pub fn create(layout: Layout) -> Result<Self, ShmError> {
        let region = SharedRegion::create("perf-rings", layout.total_bytes())?;
        region.mapping().write(0, layout.header());
        Ok(DaemonEnd { seg: Segment { region, layout }, req_head: 0, req_tail_seen: 0, cpl_tail: 0, cpl_head_seen: 0 })
    }

    /// The segment's descriptor, for the client.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.seg.region.fd()
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.seg.layout
    }

    /// Sets the status word the client reads.
    pub fn set_status(&self, s: SegmentStatus) {
        self.seg.store(STATUS_OFFSET, s as u64);
    }

    /// Requests waiting in the ring, after checking the client's tail.
    pub fn requests_waiting(&mut self) -> Result<u64, RingFault> {
        let tail = self.seg.load(REQ_TAIL_OFFSET);
        let entries = self.seg.layout.req_entries;
        let ahead = tail.wrapping_sub(self.req_head);
        if ahead > entries as u64 || tail.wrapping_sub(self.req_tail_seen) > entries as u64 {
            return Err(RingFault::RequestTail { tail, head: self.req_head, last: self.req_tail_seen, entries });
        }
        self.req_tail_seen = tail;
        Ok(ahead)
    }

    /// A copy of the `i`th waiting request (`i` below what
    /// [`requests_waiting`](Self::requests_waiting) said).
    pub fn request(&self, i: u64) -> RequestEntry {
        self.seg.region.mapping().read(self.seg.req_at(self.req_head.wrapping_add(i)))
    }

    /// Frees the first `n` waiting requests' slots for the client.
    pub fn consume_requests(&mut self, n: u64) {
        self.req_head = self.req_head.wrapping_add(n);
        self.seg.store(REQ_HEAD_OFFSET, self.req_head);
    }

    /// Completion slots free, after checking the client's head.
    pub fn completion_room(&mut self) -> Result<u64, RingFault> {
        let head = self.seg.load(CPL_HEAD_OFFSET);
        if head.wrapping_sub(self.cpl_head_seen) > self.cpl_tail.wrapping_sub(self.cpl_head_seen) {
            return Err(RingFault::CompletionHead { head, last: self.cpl_head_seen, tail: self.cpl_tail });
        }
        self.cpl_head_seen = head;
        Ok(self.seg.layout.cpl_entries as u64 - self.cpl_tail.wrapping_sub(head))
    }

    /// Writes a completion into the next slot (the caller checked
    /// [`completion_room`](Self::completion_room)); visible to the client
    /// after [`publish_completions`](Self::publish_completions).
    pub fn push_completion(&mut self, c: CompletionEntry) {
        self.seg.region.mapping().write(self.seg.cpl_at(self.cpl_tail), c);
        self.cpl_tail = self.cpl_tail.wrapping_add(1);
    }

    /// Makes the completions pushed so far visible.
    pub fn publish_completions(&self) {
        self.seg.store(CPL_TAIL_OFFSET, self.cpl_tail);
    }
}

/// The client's end of its segment.
pub struct ClientEnd {
    seg: Segment,
    req_tail: u64,
    req_head_cache: u64,
    cpl_head: u64,
}

impl ClientEnd {
    /// Maps the segment the daemon sent (`len` bytes), checking its header.
    pub fn open(fd: OwnedFd, len: usize) -> Result<Self, ShmError> {
        let region = SharedRegion::open(fd, len)?;
        let header: SegmentHeader = region.mapping().read(0);
        let layout = Layout::from_header(&header, len as u64)?;
        let seg = Segment { region, layout };
        let req_tail = seg.load(REQ_TAIL_OFFSET);
        let cpl_head = seg.load(CPL_HEAD_OFFSET);
        Ok(ClientEnd { req_head_cache: seg.load(REQ_HEAD_OFFSET), seg, req_tail, cpl_head })
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.seg.layout
    }

    /// What the daemon says of the segment (`None`: a code this version
    /// does not know).
    pub fn status(&self) -> Option<SegmentStatus> {
        SegmentStatus::from_code(self.seg.load(STATUS_OFFSET) as u32)
    }

    /// Free request slots.
    pub fn request_room(&mut self) -> u64 {
        let entries = self.seg.layout.req_entries as u64;
        let used = self.req_tail.wrapping_sub(self.req_head_cache);
        if used < entries {
            return entries - used;
        }
        self.req_head_cache = self.seg.load(REQ_HEAD_OFFSET);
        entries.saturating_sub(self.req_tail.wrapping_sub(self.req_head_cache))
    }

    /// Posts as many of `wrs` as fit, in order, with one index update (a
    /// post list); returns how many.
    pub fn post(&mut self, wrs: &[RequestEntry]) -> usize {
        let n = (self.request_room() as usize).min(wrs.len());
        for wr in &wrs[..n] {
            self.seg.region.mapping().write(self.seg.req_at(self.req_tail), *wr);
            self.req_tail = self.req_tail.wrapping_add(1);
        }
        if n > 0 {
            self.seg.store(REQ_TAIL_OFFSET, self.req_tail);
        }
        n
    }

    /// Takes up to `out.len()` completions; returns how many.
    pub fn poll(&mut self, out: &mut [CompletionEntry]) -> usize {
        let tail = self.seg.load(CPL_TAIL_OFFSET);
        let n = (tail.wrapping_sub(self.cpl_head) as usize).min(out.len());
        for o in out[..n].iter_mut() {
            *o = self.seg.region.mapping().read(self.seg.cpl_at(self.cpl_head));
            self.cpl_head = self.cpl_head.wrapping_add(1);
        }
        if n > 0 {
            self.seg.store(CPL_HEAD_OFFSET, self.cpl_head);
        }
        n
    }

    /// Writes raw values into the ring's indices and entries (for tests
    /// of a hostile client: the daemon must survive whatever is here).
    pub fn scribble(&mut self, req_tail: u64, cpl_head: u64, entries: &[RequestEntry]) {
        for (i, e) in entries.iter().enumerate() {
            self.seg.region.mapping().write(self.seg.req_at(self.req_tail.wrapping_add(i as u64)), *e);
        }
        self.seg.store(CPL_HEAD_OFFSET, cpl_head);
        self.seg.store(REQ_TAIL_OFFSET, req_tail);
    }

    /// The request ring's tail as this end knows it.
    pub fn request_tail(&self) -> u64 {
        self.req_tail
    }
}
