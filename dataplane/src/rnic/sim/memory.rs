//! Memory regions of one simulated host: real byte buffers with keys,
//! bounds and access rights, and the copy path that moves payload between
//! them.
//!
//! Every byte an RDMA operation moves is really copied. To keep bulk
//! streams fast, a copy between two of the model's own buffers whose pages
//! have not been written since the same copy was last made is skipped: the
//! destination provably already holds those bytes. Each 4 KiB page carries
//! the stamp of its last write; a copy is elided only if every source page
//! is older than the recorded copy and every destination page is no newer
//! than it. The stamps see every write the model makes and every CPU write
//! through the verbs interface; they cannot see a process writing memory it
//! lent ([`ExternalMemory`]), so a copy touching lent memory is always made.
//!
//! Keys are drawn from the operating system's random source, as real NICs
//! draw the variable part of theirs, and regions are placed at a random
//! page-aligned distance from each other: knowing one's own keys and
//! addresses tells nothing of another tenant's.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use rustc_hash::FxHashMap;
use std::ops::{Deref, DerefMut};

use crate::rnic::{AccessFlags, RnicError};

/// Memory a caller lends a simulated host to back a region with (instead
/// of a buffer the model allocates): for example pages shared with another
/// process, so the simulated NIC moves that process's real bytes. The
/// region owns it until it is deregistered, then drops it.
pub trait ExternalMemory: Send {
    /// The region's bytes.
    fn bytes(&self) -> &[u8];
    /// The region's bytes, for the NIC to write.
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// The bytes behind a region: the model's own buffer or lent memory.
enum MrBuf {
    Owned(Vec<u8>),
    External(Box<dyn ExternalMemory>),
}

impl Deref for MrBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            MrBuf::Owned(v) => v,
            MrBuf::External(m) => m.bytes(),
        }
    }
}

impl MrBuf {
    /// Whether every write to these bytes goes through the model (and so
    /// through its page stamps): never for lent memory, which its owner
    /// writes directly.
    fn stamped(&self) -> bool {
        matches!(self, MrBuf::Owned(_))
    }
}

impl DerefMut for MrBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            MrBuf::Owned(v) => v,
            MrBuf::External(m) => m.bytes_mut(),
        }
    }
}

const PAGE_SHIFT: u32 = 12;

/// One registered region.
pub(crate) struct MrState {
    pub pd: u32,
    pub addr: u64,
    pub access: AccessFlags,
    pub key: u32,
    buf: MrBuf,
    stamps: Vec<u64>,
}

impl MrState {
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    fn pages(&self, off: usize, len: usize) -> std::ops::Range<usize> {
        if len == 0 {
            return 0..0;
        }
        (off >> PAGE_SHIFT)..((off + len - 1) >> PAGE_SHIFT) + 1
    }

    fn max_stamp(&self, off: usize, len: usize) -> u64 {
        self.stamps[self.pages(off, len)].iter().copied().max().unwrap_or(0)
    }

    fn stamp(&mut self, off: usize, len: usize, stamp: u64) {
        let r = self.pages(off, len);
        self.stamps[r].fill(stamp);
    }
}

/// Why a key check failed (mapped to a completion status by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyFault {
    /// No live region has this key.
    UnknownKey,
    /// The region belongs to another protection domain.
    WrongPd,
    /// The range leaves the region.
    OutOfBounds,
    /// The region does not grant the needed right.
    Access,
}

/// All regions of one host.
pub(crate) struct MemStore {
    mrs: Vec<Option<MrState>>,
    /// Live keys to their region's index.
    keys: FxHashMap<u32, u32>,
    next_addr: u64,
    /// Draws keys and address gaps; seeded from the OS, never from the
    /// simulation's seed (no result depends on a key's value).
    keygen: ChaCha20Rng,
}

/// The largest random gap between two regions' addresses, in pages.
const MAX_GAP_PAGES: u64 = 1 << 16;

/// A generator seeded from the OS's random source (or, should it fail,
/// from the process's hash seed and the time: still unknown to a tenant).
fn os_seeded() -> ChaCha20Rng {
    ChaCha20Rng::try_from_os_rng().unwrap_or_else(|_| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
        ChaCha20Rng::seed_from_u64(h.finish())
    })
}

impl MemStore {
    pub fn new(host: usize) -> Self {
        let mut keygen = os_seeded();
        let base = 0x7f00_0000_0000 + ((host as u64) << 40) + ((keygen.next_u64() % (1 << 24)) << 12);
        MemStore { mrs: Vec::new(), keys: FxHashMap::default(), next_addr: base, keygen }
    }

    pub fn register(&mut self, pd: u32, len: usize, access: AccessFlags) -> (u32, u64, u32) {
        self.register_buf(pd, MrBuf::Owned(vec![0; len]), access)
    }

    /// Registers lent memory (all of it) as a region, at address `iova`
    /// when one is asked (as `ibv_reg_mr_iova2` does: the region's
    /// address is then the caller's, and only its key tells it apart).
    pub fn register_external(
        &mut self,
        pd: u32,
        mem: Box<dyn ExternalMemory>,
        access: AccessFlags,
        iova: Option<u64>,
    ) -> (u32, u64, u32) {
        self.register_buf_at(pd, MrBuf::External(mem), access, iova)
    }

    fn register_buf(&mut self, pd: u32, buf: MrBuf, access: AccessFlags) -> (u32, u64, u32) {
        self.register_buf_at(pd, buf, access, None)
    }

    fn register_buf_at(&mut self, pd: u32, buf: MrBuf, access: AccessFlags, iova: Option<u64>) -> (u32, u64, u32) {
        let len = buf.len();
        let idx = self.mrs.len() as u32;
        let key = loop {
            let k = self.keygen.next_u32();
            if k != 0 && !self.keys.contains_key(&k) {
                break k;
            }
        };
        self.keys.insert(key, idx);
        let addr = match iova {
            Some(a) => a,
            None => {
                let gap = (1 + self.keygen.next_u64() % MAX_GAP_PAGES) << PAGE_SHIFT;
                let addr = self.next_addr + gap;
                self.next_addr = addr + ((len as u64 + 4095) & !4095);
                addr
            }
        };
        let pages = len.div_ceil(1 << PAGE_SHIFT).max(1);
        self.mrs.push(Some(MrState { pd, addr, access, key, buf, stamps: vec![0; pages] }));
        (idx, addr, key)
    }

    pub fn get(&self, idx: u32) -> Result<&MrState, RnicError> {
        self.mrs.get(idx as usize).and_then(Option::as_ref).ok_or(RnicError::InvalidHandle { kind: "mr", id: idx })
    }

    pub fn remove(&mut self, idx: u32) -> Result<(), RnicError> {
        match self.mrs.get_mut(idx as usize) {
            Some(slot @ Some(_)) => {
                if let Some(mr) = slot.take() {
                    self.keys.remove(&mr.key);
                }
                Ok(())
            }
            _ => Err(RnicError::InvalidHandle { kind: "mr", id: idx }),
        }
    }

    /// Resolves `key` + `[addr, addr+len)` to (region index, offset),
    /// checking PD, bounds and rights.
    pub fn resolve(&self, key: u32, addr: u64, len: u64, pd: u32, need: AccessFlags) -> Result<(u32, usize), KeyFault> {
        let (idx, mr) = self.by_key(key).ok_or(KeyFault::UnknownKey)?;
        if mr.pd != pd {
            return Err(KeyFault::WrongPd);
        }
        if addr < mr.addr || addr.checked_add(len).is_none_or(|end| end > mr.addr + mr.len() as u64) {
            return Err(KeyFault::OutOfBounds);
        }
        if !mr.access.contains(need) {
            return Err(KeyFault::Access);
        }
        Ok((idx, (addr - mr.addr) as usize))
    }

    pub fn cpu_write(&mut self, idx: u32, off: usize, data: &[u8], stamp: u64) -> Result<(), RnicError> {
        let mr = self
            .mrs
            .get_mut(idx as usize)
            .and_then(Option::as_mut)
            .ok_or(RnicError::InvalidHandle { kind: "mr", id: idx })?;
        let range = cpu_range("write", off, data.len(), mr.len())?;
        mr.buf[range].copy_from_slice(data);
        mr.stamp(off, data.len(), stamp);
        Ok(())
    }

    pub fn cpu_read(&self, idx: u32, off: usize, out: &mut [u8]) -> Result<(), RnicError> {
        let mr = self.get(idx)?;
        let range = cpu_range("read", off, out.len(), mr.len())?;
        out.copy_from_slice(&mr.buf[range]);
        Ok(())
    }

    /// The live region holding `key`, with its index.
    fn by_key(&self, key: u32) -> Option<(u32, &MrState)> {
        let idx = *self.keys.get(&key)?;
        self.mrs.get(idx as usize).and_then(Option::as_ref).filter(|mr| mr.key == key).map(|mr| (idx, mr))
    }

    fn mr_mut(&mut self, idx: u32) -> Option<&mut MrState> {
        self.mrs.get_mut(idx as usize).and_then(Option::as_mut)
    }
}

/// A contiguous piece of some host's region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Span {
    pub host: usize,
    pub mr: u32,
    pub off: usize,
    pub len: usize,
}

/// The copy engine shared by all hosts: page stamps' clock and the cache
/// of copies already made.
#[derive(Default)]
pub(crate) struct CopyEngine {
    clock: u64,
    done: FxHashMap<(Span, Span), u64>,
    /// Bytes actually copied.
    pub copied_bytes: u64,
    /// Bytes whose copy was elided because the destination already held them.
    pub elided_bytes: u64,
}

impl CopyEngine {
    /// A fresh stamp for a CPU write.
    pub fn next_stamp(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Copies `src` to `dst` (same length), across hosts if needed.
    pub fn copy(&mut self, mems: &mut [MemStore], src: Span, dst: Span) {
        debug_assert_eq!(src.len, dst.len);
        if src.len == 0 {
            return;
        }
        let key = (src, dst);
        let stamped = mems[src.host].mr_mut(src.mr).is_some_and(|m| m.buf.stamped())
            && mems[dst.host].mr_mut(dst.mr).is_some_and(|m| m.buf.stamped());
        if !stamped {
            // Lent memory: its owner's writes are invisible here, so no
            // record of an earlier copy says anything of its bytes now.
            self.raw_copy(mems, src, dst);
            return;
        }
        if let Some(&t) = self.done.get(&key) {
            let fresh = mems[src.host].mr_mut(src.mr).is_some_and(|m| m.max_stamp(src.off, src.len) < t)
                && mems[dst.host].mr_mut(dst.mr).is_some_and(|m| m.max_stamp(dst.off, dst.len) <= t);
            if fresh {
                self.elided_bytes += src.len as u64;
                return;
            }
        }
        let stamp = self.raw_copy(mems, src, dst);
        if self.done.len() > 65_536 {
            self.done.clear();
        }
        self.done.insert(key, stamp);
    }

    /// Copies `src` to `dst` and stamps the destination's pages; returns
    /// the stamp.
    fn raw_copy(&mut self, mems: &mut [MemStore], src: Span, dst: Span) -> u64 {
        let stamp = self.next_stamp();
        if src.host == dst.host && src.mr == dst.mr {
            let Some(m) = mems[src.host].mr_mut(src.mr) else { return stamp };
            m.buf.copy_within(src.off..src.off + src.len, dst.off);
            m.stamp(dst.off, dst.len, stamp);
        } else if src.host == dst.host {
            let store = &mut mems[src.host];
            let (s, d) = two_mut(&mut store.mrs, src.mr as usize, dst.mr as usize);
            let (Some(s), Some(d)) = (s, d) else { return stamp };
            d.buf[dst.off..dst.off + dst.len].copy_from_slice(&s.buf[src.off..src.off + src.len]);
            d.stamp(dst.off, dst.len, stamp);
        } else {
            let (a, b) = two_mut(mems, src.host, dst.host);
            let (Some(s), Some(d)) = (a.mr_mut(src.mr), b.mr_mut(dst.mr)) else { return stamp };
            d.buf[dst.off..dst.off + dst.len].copy_from_slice(&s.buf[src.off..src.off + src.len]);
            d.stamp(dst.off, dst.len, stamp);
        }
        self.copied_bytes += src.len as u64;
        stamp
    }

    /// Writes `data` (an inline payload) into `dst`.
    pub fn write_bytes(&mut self, mems: &mut [MemStore], data: &[u8], dst: Span) {
        let stamp = self.next_stamp();
        if let Some(d) = mems[dst.host].mr_mut(dst.mr) {
            d.buf[dst.off..dst.off + dst.len].copy_from_slice(data);
            d.stamp(dst.off, dst.len, stamp);
            self.copied_bytes += data.len() as u64;
        }
    }
}

/// The bytes `[off, off + len)` of a `mr_len`-byte region for a CPU
/// `what` (read or write), or an error if they leave the region.
fn cpu_range(what: &str, off: usize, len: usize, mr_len: usize) -> Result<std::ops::Range<usize>, RnicError> {
    match off.checked_add(len) {
        Some(end) if end <= mr_len => Ok(off..end),
        _ => Err(RnicError::InvalidArgument(format!("{what} of {len} B at offset {off} leaves the {mr_len} B region"))),
    }
}

/// Two distinct mutable elements of a slice.
fn two_mut<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b);
    if a < b {
        let (l, r) = v.split_at_mut(b);
        (&mut l[a], &mut r[0])
    } else {
        let (l, r) = v.split_at_mut(a);
        (&mut r[0], &mut l[b])
    }
}

impl MemStore {
    /// Resolves a local key without PD or rights checks (the requester's
    /// SGEs were checked when the WQE was dispatched).
    pub(crate) fn resolve_any(&self, key: u32, addr: u64, len: u64) -> Result<(u32, usize), KeyFault> {
        let (idx, mr) = self.by_key(key).ok_or(KeyFault::OutOfBounds)?;
        if addr < mr.addr || addr.checked_add(len).is_none_or(|end| end > mr.addr + mr.len() as u64) {
            return Err(KeyFault::OutOfBounds);
        }
        Ok((idx, (addr - mr.addr) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory lent by its owner, who writes it without telling the model.
    struct Lent(Vec<u8>);

    impl ExternalMemory for Lent {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
        fn bytes_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }

    fn span(mr: u32) -> Span {
        Span { host: 0, mr, off: 0, len: 4096 }
    }

    fn read(mems: &[MemStore], mr: u32) -> Vec<u8> {
        let mut out = vec![0; 4096];
        mems[0].cpu_read(mr, 0, &mut out).expect("read");
        out
    }

    #[test]
    fn a_copy_touching_lent_memory_is_made_again_after_its_owner_writes_it() {
        let mut mems = vec![MemStore::new(0)];
        let (lent, _, _) = mems[0].register_external(0, Box::new(Lent(vec![1; 4096])), AccessFlags::LOCAL_WRITE, None);
        let (own, _, _) = mems[0].register(0, 4096, AccessFlags::LOCAL_WRITE);
        let mut copier = CopyEngine::default();
        for round in 2..6u8 {
            copier.copy(&mut mems, span(lent), span(own));
            assert!(read(&mems, own).iter().all(|&b| b == round - 1), "round {round}: stale bytes");
            // The owner rewrites its buffer behind the model's back.
            if let Some(m) = mems[0].mr_mut(lent) {
                m.buf.fill(round);
            }
        }
        // And into lent memory: the owner may have overwritten what landed.
        copier.copy(&mut mems, span(own), span(lent));
        if let Some(m) = mems[0].mr_mut(lent) {
            m.buf.fill(0);
        }
        copier.copy(&mut mems, span(own), span(lent));
        assert!(read(&mems, lent).iter().all(|&b| b == 4));
        assert_eq!(copier.elided_bytes, 0);
    }

    #[test]
    fn a_copy_between_the_models_buffers_is_elided_until_a_cpu_write() {
        let mut mems = vec![MemStore::new(0)];
        let (a, _, _) = mems[0].register(0, 4096, AccessFlags::LOCAL_WRITE);
        let (b, _, _) = mems[0].register(0, 4096, AccessFlags::LOCAL_WRITE);
        let mut copier = CopyEngine::default();
        let stamp = copier.next_stamp();
        mems[0].cpu_write(a, 0, &[7; 4096], stamp).expect("write");
        copier.copy(&mut mems, span(a), span(b));
        copier.copy(&mut mems, span(a), span(b));
        assert_eq!(copier.elided_bytes, 4096, "the second copy is elided");
        let stamp = copier.next_stamp();
        mems[0].cpu_write(a, 0, &[8; 4096], stamp).expect("write");
        copier.copy(&mut mems, span(a), span(b));
        assert!(read(&mems, b).iter().all(|&x| x == 8));
    }

    #[test]
    fn keys_resolve_to_their_region_and_a_dropped_key_to_none() {
        let mut mems = MemStore::new(0);
        let (i, addr, key) = mems.register(3, 8192, AccessFlags::REMOTE_READ);
        assert_eq!(mems.resolve(key, addr + 4096, 4096, 3, AccessFlags::REMOTE_READ), Ok((i, 4096)));
        assert_eq!(mems.resolve(key ^ 1, addr, 1, 3, AccessFlags::REMOTE_READ), Err(KeyFault::UnknownKey));
        assert_eq!(mems.resolve(key, addr, 1, 4, AccessFlags::REMOTE_READ), Err(KeyFault::WrongPd));
        mems.remove(i).expect("remove");
        assert_eq!(mems.resolve(key, addr, 1, 3, AccessFlags::REMOTE_READ), Err(KeyFault::UnknownKey));
    }
}
