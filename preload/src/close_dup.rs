//! Closing and duplicating: `close`, `close_range`, `closefrom`, `dup`, `dup2`, `dup3`
//! (`fcntl(F_DUPFD*)` is in [`crate::fcntl`]).
//!
//! The table's bookkeeping lives here: a close clears the slot *before* the real close (after
//! it, another thread may already own the number); a dup gives the new fd the old one's mark,
//! or erases a stale mark on the new number, *after* the real call succeeded. `close_range` and
//! `closefrom` are interposed too, so fds closed in bulk (as daemons and `posix_spawn`-style
//! children do) leave no stale marks; with `CLOSE_RANGE_CLOEXEC` nothing is closed and nothing
//! is cleared.

use libc::{c_int, c_uint};

use crate::ddp::entry;
use crate::errno::{Errno, ErrnoGuard, cvt, ret};
use crate::fdtable::{self, Handle};
use crate::log::{Outcome, debug};
use crate::real;

/// `close(2)`.
///
/// # Safety
/// No pointers; as for libc's `close`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    dispatch!(fd; (fd: c_int) -> c_int; pass: real::close(fd); routed: |h| routed_close(h, fd))
}

fn routed_close(_h: Handle, fd: c_int) -> Result<c_int, Errno> {
    if fdtable::borrowed() {
        // (a vfork child: the table and the sockets are its parent's)
        // SAFETY: no pointer arguments.
        return cvt(unsafe { real::close(fd) });
    }
    // The slot is cleared first (the number may be reused as soon as the real close returns);
    // the last fd of a DDP socket closes the connection (the engine finishes on its progress
    // thread; this call waits only with SO_LINGER {1, N}, as TCP's) after the real close: by
    // then the socket's file is released unless another process still has it (a forked
    // child), which is how the engine tells the two apart (`ddp_user` keeps such a connection
    // open for them).
    let prev = fdtable::clear(fd);
    // (an epoll fd that watches DDP sockets is marked: its hints go with it)
    crate::poll::forget_epoll_fds(fd, fd);
    // SAFETY: no pointer arguments.
    let rc = unsafe { real::close(fd) };
    let res = cvt(rc);
    if let Some(prev) = prev {
        let _errno = ErrnoGuard::new();
        entry::release(prev);
    }
    if crate::log::enabled() {
        let _errno = ErrnoGuard::new();
        debug!("close({fd}) = {} [tracked]", Outcome::of(rc.into()));
    }
    res
}

/// `close_range(2)`.
///
/// # Safety
/// No pointers; as for libc's `close_range`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && fdtable::any() && !fdtable::borrowed() {
        crate::poll::forget_epoll_fds(
            c_int::try_from(first).unwrap_or(c_int::MAX),
            c_int::try_from(last).unwrap_or(c_int::MAX),
        );
        fdtable::clear_range(first, last, entry::release);
    }
    // SAFETY: no pointer arguments.
    unsafe { real::close_range(first, last, flags) }
}

/// `closefrom(3)`.
///
/// # Safety
/// No pointers; as for libc's `closefrom`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn closefrom(lowfd: c_int) {
    if let Ok(first) = c_uint::try_from(lowfd)
        && fdtable::any()
        && !fdtable::borrowed()
    {
        crate::poll::forget_epoll_fds(lowfd, c_int::MAX);
        fdtable::clear_range(first, c_uint::MAX, entry::release);
    }
    // SAFETY: no pointer arguments.
    unsafe { real::closefrom(lowfd) }
}

/// `dup(2)`.
///
/// # Safety
/// No pointers; as for libc's `dup`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    if !fdtable::any() {
        // SAFETY: no pointer arguments.
        return unsafe { real::dup(fd) };
    }
    ret(tracked_dup(fd, |old| {
        // SAFETY: no pointer arguments.
        unsafe { real::dup(old) }
    }))
}

/// `dup2(2)`.
///
/// # Safety
/// No pointers; as for libc's `dup2`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if new != old && !(fdtable::any() && fdtable::borrowed()) {
        crate::poll::forget_epoll_fds(new, new);
    }
    if !fdtable::any() {
        // SAFETY: no pointer arguments.
        return unsafe { real::dup2(old, new) };
    }
    ret(tracked_dup(old, |old| {
        // SAFETY: no pointer arguments.
        unsafe { real::dup2(old, new) }
    }))
}

/// `dup3(2)`.
///
/// # Safety
/// No pointers; as for libc's `dup3`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if !(fdtable::any() && fdtable::borrowed()) {
        crate::poll::forget_epoll_fds(new, new);
    }
    if !fdtable::any() {
        // SAFETY: no pointer arguments.
        return unsafe { real::dup3(old, new, flags) };
    }
    ret(tracked_dup(old, |old| {
        // SAFETY: no pointer arguments.
        unsafe { real::dup3(old, new, flags) }
    }))
}

/// Runs a dup-family call `f(old)` while the table is in use, then gives the new fd `old`'s
/// mark (or none; a DDP socket counts one more fd, and a DDP fd replaced by `dup2`/`dup3` one
/// fewer). Shared with `fcntl(F_DUPFD*)`.
pub fn tracked_dup(old: c_int, f: impl FnOnce(c_int) -> c_int) -> Result<c_int, Errno> {
    let new = cvt(f(old))?;
    if new != old && !fdtable::borrowed() {
        crate::route::dup_mark(old, new);
        if crate::log::enabled() && fdtable::lookup(new).is_some() {
            let _errno = ErrnoGuard::new();
            debug!("dup({old}) = {new} [tracked]");
        }
    }
    Ok(new)
}
