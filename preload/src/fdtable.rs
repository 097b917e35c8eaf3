//! The fd table: which file descriptors the library handles itself.
//!
//! Indexed by fd, with no upper limit: a static top level of `2^17` pointers to leaves of
//! `2^14` slots covers every non-negative `c_int`. Leaves are mapped (zeroed, with `mmap`, never
//! `malloc`) the first time an fd in their range is marked and are never freed, so a reader
//! holding a leaf pointer can never see it dangle. Each slot is one `AtomicU64`: `0` means "not
//! ours, pass to libc", anything else is a [`Handle`] whose meaning belongs to the routing layer.
//!
//! The ordinary path — a process in which no fd was ever marked — costs **one relaxed atomic
//! load** ([`lookup`] reads [`ANY`] and returns). Once something is marked, a lookup is two
//! acquire loads (leaf pointer, slot). No lock anywhere: lookups run in signal handlers, in the
//! child of a `fork` from a threaded parent, and re-entrantly.
//!
//! Ordering rules the hooks follow so that a recycled fd number never inherits a stale mark:
//! `close` clears the slot *before* the real close (after it, the number may already belong to a
//! socket another thread just created); creators (`socket`, `accept`, `dup*`) mark *after* the
//! real call returned the new number.
//!
//! Fork: the table is ordinary process memory, so the child gets a copy that matches the fds it
//! inherits; there are no locks to reset. Exec: the new image starts with an empty table, and
//! inherited fds are passed through like any other.

use core::num::NonZeroU64;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use libc::c_int;

/// Routing information for a marked fd (opaque here; `0` is reserved for "not marked").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle(pub NonZeroU64);

/// `true` once any fd has ever been marked. Never reset: resetting could race with a marker.
pub static ANY: AtomicBool = AtomicBool::new(false);

const LEAF_BITS: u32 = 14;
const LEAF_LEN: usize = 1 << LEAF_BITS;
const TOP_LEN: usize = 1 << (31 - LEAF_BITS);

struct Leaf([AtomicU64; LEAF_LEN]);

static TOP: [AtomicPtr<Leaf>; TOP_LEN] = [const { AtomicPtr::new(ptr::null_mut()) }; TOP_LEN];

/// The handle of `fd`, or `None` if it is passed through. The ordinary path is one relaxed load.
#[inline(always)]
pub fn lookup(fd: c_int) -> Option<Handle> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    lookup_marked(fd)
}

/// The handle of `fd`, without the [`ANY`] shortcut (for callers that tested [`any`] first).
#[inline]
pub fn lookup_marked(fd: c_int) -> Option<Handle> {
    let slot = slot(fd, false)?;
    NonZeroU64::new(slot.load(Ordering::Acquire)).map(Handle)
}

/// The process the table belongs to (set by the constructor and in a forked child).
static OWNER: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

/// The table belongs to the calling process from now on (the constructor; the `fork` child
/// handler).
pub fn own() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    OWNER.store(pid, Ordering::Relaxed);
}

/// Whether the caller is a child that shares its parent's memory without being told of the
/// fork (`vfork`, `posix_spawn`, `clone(CLONE_VM)`: no `pthread_atfork` handler ran): the
/// table is its parent's, which a `close`, `close_range` or `dup2` there must not change —
/// Python's `subprocess` closes every inherited fd with `close_range` in such a child before
/// it execs, which emptied the parent's table and closed its DDP connections. Costs a
/// `getpid`: asked by the calls that change the table only.
pub fn borrowed() -> bool {
    let owner = OWNER.load(Ordering::Relaxed);
    // SAFETY: getpid has no preconditions.
    owner != 0 && unsafe { libc::syscall(libc::SYS_getpid) } as i32 != owner
}

/// Whether any fd has ever been marked (for calls that route on something other than one fd,
/// like poll and select).
#[inline(always)]
pub fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// The slot of `fd`; with `create`, maps its leaf if needed (failing only if `mmap` does).
fn slot(fd: c_int, create: bool) -> Option<&'static AtomicU64> {
    let fd = usize::try_from(fd).ok()?;
    let top = &TOP[fd >> LEAF_BITS];
    let mut leaf = top.load(Ordering::Acquire);
    if leaf.is_null() {
        if !create {
            return None;
        }
        leaf = new_leaf()?;
        if let Err(winner) =
            top.compare_exchange(ptr::null_mut(), leaf, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: `leaf` came from `new_leaf` and was never published.
            unsafe { libc::munmap(leaf.cast(), core::mem::size_of::<Leaf>()) };
            leaf = winner;
        }
    }
    // SAFETY: published leaves are never unmapped, and the index is masked to the leaf's length.
    Some(unsafe { &(*leaf).0[fd & (LEAF_LEN - 1)] })
}

/// A zeroed leaf from `mmap` (zero is "not marked"; `AtomicU64` is valid for any bits).
fn new_leaf() -> Option<*mut Leaf> {
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            core::mem::size_of::<Leaf>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

/// Marks `fd` with `handle`. Fails (returns `false`) only if a leaf cannot be mapped.
pub fn mark(fd: c_int, handle: Handle) -> bool {
    ANY.store(true, Ordering::SeqCst);
    match slot(fd, true) {
        Some(s) => {
            s.store(handle.0.get(), Ordering::Release);
            true
        }
        None => false,
    }
}

/// Unmarks `fd`, returning what it was marked with.
pub fn clear(fd: c_int) -> Option<Handle> {
    if !any() {
        return None;
    }
    NonZeroU64::new(slot(fd, false)?.swap(0, Ordering::AcqRel)).map(Handle)
}

/// Unmarks every fd in `first..=last` (for `close_range`/`closefrom`); visits only mapped
/// leaves, and hands every mark it removes to `on_cleared`.
pub fn clear_range(first: u32, last: u32, mut on_cleared: impl FnMut(Handle)) {
    if !any() || first > last {
        return;
    }
    let last = last.min(c_int::MAX as u32) as usize;
    let first = first as usize;
    let tops = (first >> LEAF_BITS)..=(last >> LEAF_BITS);
    for (top, entry) in tops.clone().zip(&TOP[tops]) {
        let leaf = entry.load(Ordering::Acquire);
        if leaf.is_null() {
            continue;
        }
        let base = top << LEAF_BITS;
        let lo = first.max(base) - base;
        let hi = last.min(base + LEAF_LEN - 1) - base;
        // SAFETY: published leaves are never unmapped; `lo..=hi` is within the leaf.
        for slot in unsafe { &(&(*leaf).0)[lo..=hi] } {
            if slot.load(Ordering::Relaxed) != 0
                && let Some(h) = NonZeroU64::new(slot.swap(0, Ordering::AcqRel))
            {
                on_cleared(Handle(h));
            }
        }
    }
}

/// Marks `fd` with `handle` and returns its previous mark (`None` also if no leaf could be
/// mapped, in which case `fd` stays unmarked).
pub fn replace(fd: c_int, handle: Handle) -> Option<Handle> {
    ANY.store(true, Ordering::SeqCst);
    NonZeroU64::new(slot(fd, true)?.swap(handle.0.get(), Ordering::AcqRel)).map(Handle)
}

/// Makes `new` carry the same mark as `old` (after a successful `dup`-family call that made
/// `new` refer to `old`'s open file description).
pub fn copy(old: c_int, new: c_int) {
    match lookup(old) {
        Some(h) => {
            mark(new, h);
        }
        None => {
            clear(new);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: u64) -> Handle {
        Handle(NonZeroU64::new(v).unwrap())
    }

    #[test]
    fn mark_lookup_clear_copy() {
        assert_eq!(lookup(-1), None);
        assert!(!mark(-5, h(3)));
        for fd in [0, 1, 16383, 16384, 1_000_000, c_int::MAX] {
            assert_eq!(lookup(fd), None);
            assert!(mark(fd, h(7)));
            assert_eq!(lookup(fd), Some(h(7)));
            copy(fd, 77);
            assert_eq!(lookup(77), Some(h(7)));
            assert_eq!(clear(fd), Some(h(7)));
            assert_eq!(lookup(fd), None);
            copy(fd, 77);
            assert_eq!(lookup(77), None);
        }
        assert!(any());
        for fd in [5, 20_000, 40_000] {
            mark(fd, h(9));
        }
        clear_range(6, u32::MAX, |_| {});
        assert_eq!(lookup(5), Some(h(9)));
        assert_eq!(lookup(20_000), None);
        assert_eq!(lookup(40_000), None);
        clear_range(0, 5, |_| {});
        assert_eq!(lookup(5), None);
    }
}
