//! The only module with `unsafe`: reading and writing a shared mapping
//! that another process writes too, and adopting file descriptors
//! received over a socket.
//!
//! Invariants the rest of the crate relies on:
//! - A [`Mapping`] maps a whole memfd that is sealed against shrinking
//!   (checked by [`crate::region`] before mapping, or made so by us), so
//!   every byte in `[0, len)` stays backed for the mapping's life: no
//!   access through it can fault.
//! - Every access is bounds-checked against `len` before the pointer is
//!   formed; typed accesses are of [`Plain`] types (every bit pattern is a
//!   value), copied in and out with volatile reads and writes, so a peer
//!   that scribbles on shared memory gives us wrong values to validate,
//!   never an invalid one.
//! - Indices shared between processes are `AtomicU64`s on their own
//!   8-byte-aligned slots (the mapping is page-aligned); they are the
//!   only places both sides write, and they order the entries
//!   (Release on publish, Acquire on observe).
//! - Byte slices of a region ([`Mapping::bytes`], [`Mapping::bytes_mut`])
//!   may change under us when the other process writes its buffer while
//!   the NIC moves it: as with a real NIC, the bytes are then unspecified,
//!   but they are plain bytes of live memory.

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU64;

use memmap2::MmapRaw;

/// Types that are plain integers and arrays of them, `#[repr(C)]`, with
/// no padding the compiler may assume anything about: any bytes are a
/// valid value.
///
/// # Safety
/// Implement only for such types.
pub(crate) unsafe trait Plain: Copy {}

// SAFETY: all fields are integers or arrays of integers, #[repr(C)].
unsafe impl Plain for crate::abi::SegmentHeader {}
// SAFETY: as above.
unsafe impl Plain for crate::abi::RequestEntry {}
// SAFETY: as above.
unsafe impl Plain for crate::abi::CompletionEntry {}

/// A shared, read-write mapping of a whole file.
pub(crate) struct Mapping {
    map: MmapRaw,
    len: usize,
}

// SAFETY: the mapping is plain memory; all access goes through the
// bounds-checked volatile / atomic accessors below.
unsafe impl Send for Mapping {}
// SAFETY: as above; concurrent access is what the atomics order.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps all `len` bytes of `file` shared, read-write. The caller has
    /// checked that `file` is a memfd of at least `len` bytes sealed
    /// against shrinking.
    pub fn new(file: &File, len: usize) -> std::io::Result<Self> {
        let map = memmap2::MmapOptions::new().len(len).map_raw(file)?;
        Ok(Mapping { map, len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    fn check(&self, offset: usize, size: usize, align: usize) {
        let end = offset.checked_add(size);
        assert!(
            end.is_some_and(|e| e <= self.len) && offset.is_multiple_of(align),
            "shared-memory access of {size} B at {offset} outside the {} B mapping",
            self.len
        );
    }

    /// The atomic index at `offset`.
    pub fn atomic(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8, 8);
        // SAFETY: in bounds, 8-aligned (the mapping is page-aligned), live
        // as long as `self`; AtomicU64 has the layout of u64 and any bits
        // are a valid u64.
        unsafe { &*(self.map.as_mut_ptr().add(offset) as *const AtomicU64) }
    }

    /// A copy of the `T` at `offset`.
    pub fn read<T: Plain>(&self, offset: usize) -> T {
        self.check(offset, std::mem::size_of::<T>(), std::mem::align_of::<T>());
        // SAFETY: in bounds and aligned; `T: Plain` makes any bytes a value.
        unsafe { std::ptr::read_volatile(self.map.as_ptr().add(offset) as *const T) }
    }

    /// Writes `v` at `offset`.
    pub fn write<T: Plain>(&self, offset: usize, v: T) {
        self.check(offset, std::mem::size_of::<T>(), std::mem::align_of::<T>());
        // SAFETY: in bounds and aligned; plain bytes.
        unsafe { std::ptr::write_volatile(self.map.as_mut_ptr().add(offset) as *mut T, v) }
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes are mapped and stay so while `self` lives
        // (see the module comment for writes by the other process).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.len) }
    }

    /// The mapped bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `bytes`; `&mut self` makes this the only slice of
        // this mapping in this process.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr(), self.len) }
    }

    /// The first mapped byte (for the C API, which hands it to the
    /// application).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
}

/// Takes ownership of a descriptor the kernel just installed in this
/// process (from an `SCM_RIGHTS` message).
pub(crate) fn adopt_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the kernel created `fd` for us in `recvmsg`; nothing else in
    // this process knows it, so we are its only owner.
    unsafe { OwnedFd::from_raw_fd(fd) }
}
