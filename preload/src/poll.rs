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

/// Declares hooks that route when the fd table is in use at all (not on one fd); the routed
/// functions forward to libc.
macro_rules! table_hooks {
    ($(
        $(#[$doc:meta])*
        fn $name:ident / $routed:ident ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
    )*) => {$(
        hooks_only! {
            $(#[$doc])*
            fn $name / $routed ($($arg: $ty),*) -> $ret;
        }

        /// The routed form: forwards to libc (readiness is the kernel's, see the module doc).
        ///
        /// # Safety
        /// As for the libc function of the same name.
        unsafe fn $routed($($arg: $ty),*) -> Result<$ret, Errno> {
            // DDP sockets whose TCP fd the application holds lazily go back to the progress
            // thread before this thread blocks (ddp_user::release_lazy).
            ddp_user::release_lazy();
            // SAFETY: forwarded unchanged.
            cvt(unsafe { real::$name($($arg),*) })
        }
    )*};
}

/// Declares hooks that route when the fd table is in use at all; the routed functions are
/// written by hand.
macro_rules! hooks_only {
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
    )*};
}

hooks_only! {
    /// `poll(2)`.
    fn poll / routed_poll(fds: *mut pollfd, n: nfds_t, timeout_ms: c_int) -> c_int;
    /// `ppoll(2)`.
    fn ppoll / routed_ppoll(
        fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t,
    ) -> c_int;
}

table_hooks! {
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

/// At most this many DDP sockets of one `poll` call are served inline (the others are served
/// by the progress thread, as before: correct, only slower).
const MAX_INLINE: usize = 8;
/// `poll` sets up to this size are extended on the stack; larger ones in a `Vec`.
const STACK_FDS: usize = 64;

/// `poll(2)` with the table in use.
///
/// # Safety
/// As for libc's `poll`.
unsafe fn routed_poll(fds: *mut pollfd, n: nfds_t, timeout_ms: c_int) -> Result<c_int, Errno> {
    let timeout = (timeout_ms >= 0).then(|| core::time::Duration::from_millis(timeout_ms as u64));
    // SAFETY: the caller's arguments.
    unsafe {
        poll_inline(fds, n, timeout, core::ptr::null(), |f, k, t| {
            let ms = t.map_or(-1, |t| {
                t.as_nanos().div_ceil(1_000_000).min(c_int::MAX as u128) as c_int
            });
            real::poll(f, k, ms)
        })
    }
}

/// `ppoll(2)` with the table in use.
///
/// # Safety
/// As for libc's `ppoll`.
unsafe fn routed_ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> Result<c_int, Errno> {
    let t = if timeout.is_null() {
        None
    } else {
        // SAFETY: the caller's timespec.
        let ts = unsafe { timeout.read() };
        if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
            return Err(Errno(libc::EINVAL));
        }
        Some(core::time::Duration::new(
            ts.tv_sec as u64,
            ts.tv_nsec as u32,
        ))
    };
    // SAFETY: the caller's arguments.
    unsafe {
        poll_inline(fds, n, t, mask, |f, k, t| {
            let ts = t.map(|d| timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            });
            real::ppoll(
                f,
                k,
                ts.as_ref()
                    .map_or(core::ptr::null(), |t| t as *const timespec),
                mask,
            )
        })
    }
}

/// `poll`/`ppoll` over `fds` where DDP sockets asked for `POLLIN` are served in the calling
/// thread (docs/engine.md "Readiness waits"): their TCP fds join the kernel poll set
/// ([`ddp_user::PollWait`]); when one fires, its input is processed here (stream data lands in
/// the socketpair, i.e. the app fd) and the wait goes on with the time left, so what the
/// caller sees is the kernel's own readiness of its fds. Without such sockets: one call of
/// `call` on `fds` as given. `EINTR` and errors are the kernel's, unchanged.
///
/// # Safety
/// `fds` is valid for `n` entries (or `n` is 0); `mask` is null or valid.
unsafe fn poll_inline(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: Option<core::time::Duration>,
    _mask: *const sigset_t,
    call: impl Fn(*mut pollfd, nfds_t, Option<core::time::Duration>) -> c_int,
) -> Result<c_int, Errno> {
    let mut waits: [Option<(usize, ddp_user::PollWait)>; MAX_INLINE] = Default::default();
    let mut k = 0;
    let mut stack = [pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; STACK_FDS];
    // Only sets that fit the stack copy, in a process with DDP sockets; the caller's array is
    // copied with process_vm_readv so that a bad pointer is the kernel's EFAULT, not a fault.
    if let Some(pid) = ddp_user::engine_pid()
        && n as usize + MAX_INLINE <= STACK_FDS
        && copy_in(pid, fds, n, &mut stack)
    {
        for (i, &p) in stack[..n as usize].iter().enumerate() {
            if k == MAX_INLINE {
                break;
            }
            if p.fd < 0 || p.events & libc::POLLIN == 0 {
                continue;
            }
            let Some(h) = fdtable::lookup_marked(p.fd) else {
                continue;
            };
            if let Ok(Some(r)) = route::ddp_socket(h)
                && let Some(c) = r.conn()
                && let Some(w) = c.sock.poll_wait()
            {
                waits[k] = Some((i, w));
                k += 1;
            }
        }
    }
    // Sockets held lazily and not served by this wait go back to the progress thread before
    // it blocks (those in `waits` count as inside the library and stay); first a look without
    // waiting, so that a poll that finds its fds ready (a POLLOUT check before a write) does
    // not give them back.
    if ddp_user::lazy_held() && timeout != Some(core::time::Duration::ZERO) {
        if k == 0 {
            let r = call(fds, n, Some(core::time::Duration::ZERO));
            if r != 0 {
                return cvt(r);
            }
        }
        ddp_user::release_lazy();
    }
    if k == 0 {
        return cvt(call(fds, n, timeout));
    }
    let n = n as usize;
    let ext = &mut stack[..n + k];
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        for (j, w) in waits.iter().flatten().enumerate() {
            let ev = w.1.events();
            ext[n + j] = pollfd {
                fd: if ev != 0 { w.1.tcp_fd() } else { -1 },
                events: ev,
                revents: 0,
            };
        }
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let r = cvt(call(ext.as_mut_ptr(), (n + k) as nfds_t, left))?;
        let mut serviced = false;
        for (j, w) in waits.iter().flatten().enumerate() {
            if ext[n + j].revents != 0 {
                w.1.service();
                serviced = true;
            }
        }
        let mine = ext[..n].iter().filter(|p| p.revents != 0).count();
        let timed_out = r == 0 || left.is_some_and(|l| l.is_zero());
        if serviced && !timed_out {
            // The socketpair may have become readable: ask the kernel again, with the time left
            // (a zero wait if the caller's fds are ready already).
            if mine > 0 {
                let r2 = cvt(call(
                    ext.as_mut_ptr(),
                    n as nfds_t,
                    Some(core::time::Duration::ZERO),
                ))?;
                // SAFETY: the caller's array, `n` entries.
                unsafe { core::slice::from_raw_parts_mut(fds, n) }.copy_from_slice(&ext[..n]);
                return Ok(r2);
            }
            continue;
        }
        if mine == 0 && !timed_out {
            continue;
        }
        if serviced {
            // Timed out or zero timeout: report what is ready now.
            let r2 = cvt(call(
                ext.as_mut_ptr(),
                n as nfds_t,
                Some(core::time::Duration::ZERO),
            ))?;
            // SAFETY: the caller's array, `n` entries.
            unsafe { core::slice::from_raw_parts_mut(fds, n) }.copy_from_slice(&ext[..n]);
            return Ok(r2);
        }
        // SAFETY: the caller's array, `n` entries.
        unsafe { core::slice::from_raw_parts_mut(fds, n) }.copy_from_slice(&ext[..n]);
        return Ok(mine as c_int);
    }
}

/// Copies `n` pollfds from `fds` into `out` (`n <= out.len()`) with `process_vm_readv` on this
/// process: false if the memory is not readable (or `n` is 0).
fn copy_in(pid: libc::pid_t, fds: *const pollfd, n: nfds_t, out: &mut [pollfd]) -> bool {
    let len = n as usize * core::mem::size_of::<pollfd>();
    if n == 0 || fds.is_null() || n as usize > out.len() {
        return false;
    }
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: fds as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` is our own buffer of `len` bytes; the kernel checks `remote`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_process_vm_readv,
            pid,
            &local,
            1usize,
            &remote,
            1usize,
            0usize,
        )
    };
    r == len as libc::c_long
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
