//! Guarded memory for the hostile-peer tests: every buffer the engine may touch lives in its
//! own `mmap` with a `PROT_NONE` page on each side, so a placement one byte outside the
//! mapping kills the test process (= the test fails), and a checksum of every byte a valid
//! operation must not have touched catches placements that stay inside the mapping.
//!
//! Layout of one [`Guarded`] buffer (`len` bytes):
//!
//! ```text
//! | PROT_NONE page | slack (untouchable) | buffer: len bytes, ends at the page end | PROT_NONE page |
//! ```
//!
//! The buffer's end abuts the trailing guard page (an overrun faults at once); the slack in
//! front of it (at least [`MIN_SLACK`] bytes) is checksummed (an underrun shows there).
#![allow(dead_code)]

use std::ops::Range;

/// Bytes in front of every buffer that nothing may touch (checksummed).
pub const MIN_SLACK: usize = 1024;

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    assert!(p > 0);
    p as usize
}

/// FNV-1a, 64 bits: the checksum of untouched bytes.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// One guarded buffer (see the module docs).
pub struct Guarded {
    map: *mut u8,
    map_len: usize,
    /// Start of the accessible pages.
    inner: *mut u8,
    inner_len: usize,
    /// Offset of the buffer inside the accessible pages.
    off: usize,
    len: usize,
    /// The checksum of the slack, taken when the buffer was made.
    slack_sum: u64,
}

// SAFETY: the mapping is owned by this value and only reached through raw pointers whose
// users (the engine, the test) synchronise through the engine's completions.
unsafe impl Send for Guarded {}
// SAFETY: as above; `&Guarded` only reads.
unsafe impl Sync for Guarded {}

impl Guarded {
    /// A buffer of `len` bytes filled with a pattern derived from `seed`.
    pub fn new(len: usize, seed: u64) -> Guarded {
        let page = page_size();
        let inner_len = (len + MIN_SLACK).div_ceil(page) * page;
        let map_len = inner_len + 2 * page;
        // SAFETY: a fresh anonymous private mapping; no existing memory is affected.
        let map = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED, "mmap");
        let map = map.cast::<u8>();
        // SAFETY: both guard pages are inside the mapping made above.
        unsafe {
            assert_eq!(libc::mprotect(map.cast(), page, libc::PROT_NONE), 0);
            assert_eq!(
                libc::mprotect(map.add(page + inner_len).cast(), page, libc::PROT_NONE),
                0
            );
        }
        // SAFETY: `page` is inside the mapping.
        let inner = unsafe { map.add(page) };
        let mut g = Guarded {
            map,
            map_len,
            inner,
            inner_len,
            off: inner_len - len,
            len,
            slack_sum: 0,
        };
        let fill = crate::common::pattern(inner_len, seed);
        // SAFETY: `inner` is writable for `inner_len` bytes and nothing else uses it yet.
        unsafe { core::ptr::copy_nonoverlapping(fill.as_ptr(), inner, inner_len) };
        g.slack_sum = fnv1a(&[&g.slack()]);
        g
    }

    /// The buffer's first byte.
    pub fn ptr(&self) -> *mut u8 {
        // SAFETY: `off` is inside the accessible pages.
        unsafe { self.inner.add(self.off) }
    }

    /// The buffer's address as a tagged offset / SGE address.
    pub fn addr(&self) -> u64 {
        self.ptr() as u64
    }

    /// Length of the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// One iovec over `range` of the buffer.
    pub fn iov(&self, range: Range<usize>) -> libc::iovec {
        assert!(range.end <= self.len);
        libc::iovec {
            // SAFETY: inside the buffer.
            iov_base: unsafe { self.ptr().add(range.start) }.cast(),
            iov_len: range.len(),
        }
    }

    /// A copy of the buffer's current contents (call only while the engine cannot write it:
    /// after the connection ended or the operation completed).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // SAFETY: the buffer is readable for `len` bytes.
        unsafe { core::ptr::copy_nonoverlapping(self.ptr(), v.as_mut_ptr(), self.len) };
        v
    }

    fn slack(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.off];
        // SAFETY: the slack is readable for `off` bytes.
        unsafe { core::ptr::copy_nonoverlapping(self.inner, v.as_mut_ptr(), self.off) };
        v
    }

    /// Overwrites `range` of the buffer with `data` (test-side setup).
    pub fn write(&self, at: usize, data: &[u8]) {
        assert!(at + data.len() <= self.len);
        // SAFETY: inside the buffer; the engine does not write it now (setup only).
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr().add(at), data.len()) };
    }

    /// The checksum of the buffer's bytes outside `touched` (offsets in the buffer).
    pub fn sum_outside(&self, touched: &[Range<usize>]) -> u64 {
        let snap = self.snapshot();
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut ranges: Vec<Range<usize>> = touched.to_vec();
        ranges.sort_by_key(|r| r.start);
        let mut at = 0;
        for r in ranges {
            if r.start > at {
                parts.push(&snap[at..r.start]);
            }
            at = at.max(r.end);
        }
        if at < snap.len() {
            parts.push(&snap[at..]);
        }
        fnv1a(&parts)
    }

    /// Panics if the slack in front of the buffer changed.
    pub fn assert_slack_untouched(&self, what: &str) {
        assert_eq!(
            fnv1a(&[&self.slack()]),
            self.slack_sum,
            "{what}: bytes in front of the buffer were written"
        );
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the tests deregister / take every completion
        // naming it before dropping.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// A guarded buffer plus the checksum of what no valid operation may touch.
pub struct Watched {
    /// The buffer.
    pub g: Guarded,
    /// Ranges valid operations of the test may write.
    pub allowed: Vec<Range<usize>>,
    sum: u64,
}

impl Watched {
    /// A watched buffer of `len` bytes; `allowed` are the ranges the test's valid
    /// operations may write.
    pub fn new(len: usize, seed: u64, allowed: Vec<Range<usize>>) -> Watched {
        let g = Guarded::new(len, seed);
        let sum = g.sum_outside(&allowed);
        Watched { g, allowed, sum }
    }

    /// Panics if anything outside the allowed ranges (or in front of the buffer) changed.
    pub fn assert_untouched(&self, what: &str) {
        self.g.assert_slack_untouched(what);
        assert_eq!(
            self.g.sum_outside(&self.allowed),
            self.sum,
            "{what}: bytes no valid operation names were written"
        );
    }
}
