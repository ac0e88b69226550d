//! Shared memory as file descriptors: a memfd sealed against shrinking
//! and growing, mapped by the side that made it and, after it crosses the
//! socket, by the other. [`SharedRegion`] is both a client's registered
//! memory and the ring segment.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use memfd::{FileSeal, MemfdOptions};

use crate::sys::Mapping;
use crate::ShmError;

/// The seals every shared region carries: its size is fixed, so a mapping
/// of it can never fault.
const SIZE_SEALS: [FileSeal; 2] = [FileSeal::SealShrink, FileSeal::SealGrow];

/// A memfd of fixed size, mapped into this process.
pub struct SharedRegion {
    file: File,
    map: Mapping,
}

impl SharedRegion {
    /// A new zeroed region of `len` bytes (a memfd named `name`, sealed).
    pub fn create(name: &str, len: usize) -> Result<Self, ShmError> {
        if len == 0 {
            return Err(ShmError::Region("a region of 0 bytes".into()));
        }
        let mfd = MemfdOptions::new().allow_sealing(true).create(name).map_err(ShmError::Memfd)?;
        mfd.as_file().set_len(len as u64).map_err(|e| ShmError::Io("sizing a memfd", e))?;
        mfd.add_seals(&SIZE_SEALS).map_err(ShmError::Memfd)?;
        let file = mfd.into_file();
        let map = Mapping::new(&file, len).map_err(|e| ShmError::Io("mapping a memfd", e))?;
        Ok(SharedRegion { file, map })
    }

    /// Maps a region the other side made: it must be a memfd of exactly
    /// `len` bytes sealed against shrinking and growing (so the other side
    /// cannot pull pages from under this mapping).
    pub fn open(fd: OwnedFd, len: usize) -> Result<Self, ShmError> {
        let mfd =
            memfd::Memfd::try_from_fd(fd).map_err(|_| ShmError::Region("the descriptor is not a memfd".into()))?;
        let seals = mfd.seals().map_err(ShmError::Memfd)?;
        if !SIZE_SEALS.iter().all(|s| seals.contains(s)) {
            return Err(ShmError::Region("the memfd is not sealed against shrinking and growing".into()));
        }
        let file = mfd.into_file();
        let have = file.metadata().map_err(|e| ShmError::Io("reading a memfd's size", e))?.len();
        if have != len as u64 {
            return Err(ShmError::Region(format!("the memfd has {have} B, not the {len} B announced")));
        }
        if len == 0 {
            return Err(ShmError::Region("a region of 0 bytes".into()));
        }
        let map = Mapping::new(&file, len).map_err(|e| ShmError::Io("mapping a memfd", e))?;
        Ok(SharedRegion { file, map })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it has no bytes (never: regions are at least 1 byte).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// The region's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.bytes()
    }

    /// The region's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.map.bytes_mut()
    }

    /// The first byte (for the C API).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// The descriptor, to send to the other side.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    pub(crate) fn mapping(&self) -> &Mapping {
        &self.map
    }
}
