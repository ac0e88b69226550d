//! The application's own buffers made memory the daemon's NIC moves: at
//! `ibv_reg_mr`, the buffer's pages are copied into a memfd, and the memfd
//! is mapped over the same addresses (`MAP_SHARED | MAP_FIXED`). The
//! application's pointers and bytes stay as they were; from then on the
//! daemon's mapping of the memfd and the application's pages are the same
//! memory.
//!
//! What this exposes, and why it is acceptable here:
//! - whole pages go to the daemon: the bytes of a partly used first or
//!   last page (neighbouring heap data) become readable by the daemon,
//!   which is trusted with all of its clients' memory anyway; the *region*
//!   registered on the NIC is exactly the buffer, so no peer reaches them;
//! - the pages stay memfd-backed after `ibv_dereg_mr` (unmapping them
//!   would pull pages from under the heap); they are private to this
//!   process and the daemon, and shared with a child after `fork()`;
//! - a write by another thread to those pages while `ibv_reg_mr` copies
//!   them can be lost (registration is not expected to race with writes
//!   to the buffer).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};

use crate::process::SharedPages;
use crate::Errno;

/// The system's page size.
fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// The pages `[addr, addr + len)` lie on, remapped onto a memfd (or the
/// memfd an earlier registration made of them), counted as one more live
/// registration: returns the index in `shared`. A range that overlaps
/// earlier pages only in part is remapped whole with them when none of
/// them is registered any more (a heap that reuses a freed buffer's
/// pages); while one is, it is refused (`EINVAL`): remapping those pages
/// would cut that region off from the application's memory.
pub fn share(shared: &mut Vec<SharedPages>, addr: u64, len: u64) -> Result<usize, Errno> {
    let page = page_size();
    let end = addr.checked_add(len).ok_or(Errno(libc::EINVAL))?;
    let start = addr & !(page - 1);
    let end = end.checked_add(page - 1).ok_or(Errno(libc::EINVAL))? & !(page - 1);
    if len == 0 {
        return Err(Errno(libc::EINVAL));
    }
    if let Some(i) = shared.iter().position(|s| s.start <= start && end <= s.end) {
        shared[i].live += 1;
        return Ok(i);
    }
    let overlaps = |s: &SharedPages| s.start < end && start < s.end;
    if shared.iter().any(|s| overlaps(s) && s.live > 0) {
        crate::warn(&format!(
            "a region at 0x{addr:x} ({len} B) shares pages with a registered one but does not lie within it"
        ));
        return Err(Errno(libc::EINVAL));
    }
    // Free pages of earlier registrations it overlaps are remapped with it.
    let (mut lo, mut hi) = (start, end);
    for s in shared.iter().filter(|s| overlaps(s)) {
        (lo, hi) = (lo.min(s.start), hi.max(s.end));
    }
    let file = remap(lo, hi - lo)?;
    shared.retain(|s| !overlaps(s));
    shared.push(SharedPages { start: lo, end: hi, file, live: 1 });
    Ok(shared.len() - 1)
}

/// One registration on the pages of `[addr, addr + len)` ended.
pub fn release(shared: &mut [SharedPages], addr: u64, len: u64) {
    let end = addr.saturating_add(len);
    if let Some(s) = shared.iter_mut().find(|s| s.start <= addr && end <= s.end) {
        s.live = s.live.saturating_sub(1);
    }
}

/// Copies the `n` bytes at `start` into a new sealed memfd and maps it
/// over them.
fn remap(start: u64, n: u64) -> Result<File, Errno> {
    let name = c"perf-verbs-mr";
    // SAFETY: a valid C string; flags of memfd_create.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: memfd_create returned a new descriptor we own.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.set_len(n).map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::ENOMEM)))?;
    // SAFETY: the application registers memory it owns, readable for
    // `n` bytes from `start` (whole pages of its buffer); a page it cannot
    // read makes write(2) fail with EFAULT, not us fault.
    let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, n as usize) };
    file.write_all(bytes).map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EFAULT)))?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    // SAFETY: fcntl on our own descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the range is the application's buffer's pages, which hold
    // the same bytes in the memfd now; MAP_FIXED replaces them in place.
    let p = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            n as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remapped_buffer_keeps_its_address_and_bytes_and_is_the_memfd() {
        let mut buf = vec![0u8; 3 * 4096 + 100];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let addr = buf.as_ptr() as u64 + 10;
        let mut shared = Vec::new();
        let i = share(&mut shared, addr, 8192).expect("shared");
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "bytes kept");
        // A write through the memfd shows at the application's pointer.
        let s = &shared[i];
        let off = addr - s.start;
        use std::os::unix::fs::FileExt;
        s.file.write_at(b"hello", off).expect("pwrite");
        assert_eq!(&buf[10..15], b"hello");
        // A range within the same pages reuses them; one across their end is refused.
        assert_eq!(share(&mut shared, addr + 100, 100).expect("within"), i);
        let s_end = shared[i].end;
        assert!(share(&mut shared, s_end - 10, 4096).is_err());
        // Once both registrations on them ended, the pages are free: a
        // range across their end takes them and the next page, as one
        // memfd, bytes kept and the buffer still the memfd.
        release(&mut shared, addr, 8192);
        release(&mut shared, addr + 100, 100);
        let j = share(&mut shared, s_end - 10, 20).expect("over free pages");
        assert_eq!(shared.len(), 1, "the free pages merged into the new range");
        assert!(shared[j].start <= addr && shared[j].end > s_end);
        assert_eq!(&buf[10..15], b"hello");
        assert!(buf.iter().enumerate().skip(15).all(|(i, &b)| b == (i % 251) as u8), "bytes kept");
        let off = addr - shared[j].start;
        shared[j].file.write_at(b"again", off).expect("pwrite");
        assert_eq!(&buf[10..15], b"again");
    }
}
