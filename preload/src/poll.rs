//! Readiness: `poll`, `ppoll`, `select`, `pselect`, the `epoll_*` family, and glibc's fortify
//! entry points `__poll_chk` and `__ppoll_chk`.
//!
//! These calls take many fds (or none), so they do not look each one up: while no fd is marked
//! they pass straight through after one relaxed load ([`fdtable::any`]); once the table is in
//! use they go through a routed function, which is where the DDP mode can make progress before
//! blocking. Readiness itself needs no emulation in the fd model of DESIGN.md (the application's
//! fd is a real socket whose readiness the kernel reports), so the routed functions forward.
//! `epoll_ctl` routes on the fd being added. A new epoll fd erases any stale mark on its number.

use libc::timeval;
use libc::{c_int, epoll_event, fd_set, nfds_t, pollfd, sigset_t, size_t, timespec};

use crate::errno::{Errno, cvt, ret};
use crate::fdtable::{self, Handle};
use crate::{real, route};

unsafe extern "C" {
    fn __chk_fail() -> !;
}

/// Declares hooks that route when the fd table is in use at all (not on one fd).
macro_rules! table_hooks {
    ($(
        $(#[$doc:meta])*
        fn $name:ident / $routed:ident ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the libc function of the same name.
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            /// The fd table is in use: route, off the ordinary path.
            #[cold]
            #[inline(never)]
            unsafe fn in_table($($arg: $ty),*) -> $ret {
                // SAFETY: the caller's arguments, through the routing point.
                ret(unsafe { $routed($($arg),*) })
            }
            if fdtable::any() {
                // SAFETY: the caller's arguments, passed on.
                return unsafe { in_table($($arg),*) };
            }
            // SAFETY: the caller's arguments, passed on unchanged.
            unsafe { real::$name($($arg),*) }
        }

        /// The routed form: forwards to libc (readiness is the kernel's, see the module doc).
        ///
        /// # Safety
        /// As for the libc function of the same name.
        unsafe fn $routed($($arg: $ty),*) -> Result<$ret, Errno> {
            // SAFETY: forwarded unchanged.
            cvt(unsafe { real::$name($($arg),*) })
        }
    )*};
}

table_hooks! {
    /// `poll(2)`.
    fn poll / routed_poll(fds: *mut pollfd, n: nfds_t, timeout_ms: c_int) -> c_int;
    /// `ppoll(2)`.
    fn ppoll / routed_ppoll(
        fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t,
    ) -> c_int;
    /// `select(2)`.
    fn select / routed_select(
        n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *mut timeval,
    ) -> c_int;
    /// `pselect(2)`.
    fn pselect / routed_pselect(
        n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *const timespec,
        mask: *const sigset_t,
    ) -> c_int;
    /// `epoll_wait(2)`.
    fn epoll_wait / routed_epoll_wait(
        epfd: c_int, evs: *mut epoll_event, max: c_int, timeout_ms: c_int,
    ) -> c_int;
    /// `epoll_pwait(2)`.
    fn epoll_pwait / routed_epoll_pwait(
        epfd: c_int, evs: *mut epoll_event, max: c_int, timeout_ms: c_int, mask: *const sigset_t,
    ) -> c_int;
    /// `epoll_pwait2(2)` (glibc 2.35+; without it in libc, the raw system call).
    fn epoll_pwait2 / routed_epoll_pwait2(
        epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: *const timespec,
        mask: *const sigset_t,
    ) -> c_int;
}

/// glibc's fortified `poll`.
///
/// # Safety
/// As for glibc's `__poll_chk`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout_ms: c_int,
    fdslen: size_t,
) -> c_int {
    if fdtable::any() {
        // SAFETY: the caller's arguments, through the routing point.
        return unsafe { poll_chk_in_table(fds, n, timeout_ms, fdslen) };
    }
    // SAFETY: the caller's arguments, passed on unchanged (glibc checks `fdslen`).
    unsafe { real::__poll_chk(fds, n, timeout_ms, fdslen) }
}

/// glibc's fortified `ppoll`.
///
/// # Safety
/// As for glibc's `__ppoll_chk`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    if fdtable::any() {
        // SAFETY: the caller's arguments, through the routing point.
        return unsafe { ppoll_chk_in_table(fds, n, timeout, mask, fdslen) };
    }
    // SAFETY: the caller's arguments, passed on unchanged (glibc checks `fdslen`).
    unsafe { real::__ppoll_chk(fds, n, timeout, mask, fdslen) }
}

/// `__poll_chk` while the table is in use.
///
/// # Safety
/// As for glibc's `__poll_chk`.
#[cold]
#[inline(never)]
unsafe fn poll_chk_in_table(
    fds: *mut pollfd,
    n: nfds_t,
    timeout_ms: c_int,
    fdslen: size_t,
) -> c_int {
    check_nfds(n, fdslen);
    // SAFETY: the caller's arguments, through the routing point.
    ret(unsafe { routed_poll(fds, n, timeout_ms) })
}

/// `__ppoll_chk` while the table is in use.
///
/// # Safety
/// As for glibc's `__ppoll_chk`.
#[cold]
#[inline(never)]
unsafe fn ppoll_chk_in_table(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    check_nfds(n, fdslen);
    // SAFETY: the caller's arguments, through the routing point.
    ret(unsafe { routed_ppoll(fds, n, timeout, mask) })
}

/// Fails like glibc's fortify check if `n` pollfds do not fit in `fdslen` bytes.
fn check_nfds(n: nfds_t, fdslen: size_t) {
    if fdslen / core::mem::size_of::<pollfd>() < n as usize {
        // SAFETY: prints "buffer overflow detected" and aborts; no preconditions.
        unsafe { __chk_fail() }
    }
}

/// `epoll_create(2)`.
///
/// # Safety
/// No pointers; as for libc's `epoll_create`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn epoll_create(size: c_int) -> c_int {
    // SAFETY: no pointer arguments.
    let fd = unsafe { real::epoll_create(size) };
    route::new_plain(fd);
    fd
}

/// `epoll_create1(2)`.
///
/// # Safety
/// No pointers; as for libc's `epoll_create1`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: no pointer arguments.
    let fd = unsafe { real::epoll_create1(flags) };
    route::new_plain(fd);
    fd
}

/// `epoll_ctl(2)`: routed on the fd being added, modified or removed.
///
/// # Safety
/// As for libc's `epoll_ctl`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    dispatch!(fd; (epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int;
        pass: real::epoll_ctl(epfd, op, fd, ev);
        routed: |h| routed_epoll_ctl(h, epfd, op, fd, ev))
}

/// # Safety
/// As for libc's `epoll_ctl`.
unsafe fn routed_epoll_ctl(
    _h: Handle,
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> Result<c_int, Errno> {
    // SAFETY: forwarded unchanged.
    cvt(unsafe { real::epoll_ctl(epfd, op, fd, ev) })
}
