//! Readiness: `poll`, `ppoll`, `select`, `pselect`, the `epoll_*` family, and glibc's fortify
//! entry points `__poll_chk` and `__ppoll_chk`.
//!
//! These calls take many fds (or none), so they do not look each one up: while no fd is marked
//! they pass straight through after one relaxed load ([`fdtable::any`]); once the table is in
//! use they go through a routed function, which is where the DDP mode can make progress before
//! blocking. Readiness itself needs no emulation in the fd model of DESIGN.md (the application's
//! fd is a real socket whose readiness the kernel reports), so the routed functions forward,
//! except that `poll`/`ppoll`, `select`/`pselect` and the `epoll_wait` family serve the input of
//! the DDP sockets they wait for in the calling thread (docs/engine.md "Readiness waits and the
//! latency path"), and `poll`/`select` may report a socket readable themselves for stream data
//! the engine holds for its next read.
//! `epoll_ctl` routes on the fd being added (and notes DDP fds watched for input). A new epoll
//! fd erases any stale mark on its number.

use core::mem::size_of;

use libc::timeval;
use libc::{c_int, epoll_event, fd_set, nfds_t, pollfd, sigset_t, size_t, timespec};

use crate::errno::{Errno, cvt, ret};
use crate::fdtable::{self, Handle};
use crate::{real, route};

unsafe extern "C" {
    fn __chk_fail() -> !;
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
    /// `epoll_wait(2)`.
    fn epoll_wait / routed_epoll_wait(
        epfd: c_int, evs: *mut epoll_event, max: c_int, timeout_ms: c_int,
    ) -> c_int;
    /// `epoll_pwait(2)`.
    fn epoll_pwait / routed_epoll_pwait(
        epfd: c_int, evs: *mut epoll_event, max: c_int, timeout_ms: c_int, mask: *const sigset_t,
    ) -> c_int;
    /// `poll(2)`.
    fn poll / routed_poll(fds: *mut pollfd, n: nfds_t, timeout_ms: c_int) -> c_int;
    /// `ppoll(2)`.
    fn ppoll / routed_ppoll(
        fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t,
    ) -> c_int;
}

hooks_only! {
    /// `select(2)`.
    fn select / routed_select(
        n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *mut timeval,
    ) -> c_int;
    /// `pselect(2)`.
    fn pselect / routed_pselect(
        n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *const timespec,
        mask: *const sigset_t,
    ) -> c_int;
}

hooks_only! {
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
        poll_inline(fds, n, timeout, false, |f, k, t| {
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
        Some(timeout_of(ts.tv_sec, ts.tv_nsec, 1_000_000_000).ok_or(Errno(libc::EINVAL))?)
    };
    // SAFETY: the caller's arguments.
    unsafe { poll_inline(fds, n, t, false, |f, k, t| real_ppoll(f, k, t, mask)) }
}

/// The real `ppoll` with a `Duration` timeout (`None`: none) and a signal mask.
///
/// # Safety
/// `fds` is valid for `n` entries (or `n` is 0); `mask` is null or valid.
unsafe fn real_ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: Option<core::time::Duration>,
    mask: *const sigset_t,
) -> c_int {
    let ts = timeout.map(|d| timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tp = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const timespec);
    // SAFETY: as the caller promises; `tp` is null or our own timespec.
    unsafe { real::ppoll(fds, n, tp, mask) }
}

unsafe extern "C" {
    /// glibc (ld.so): the stack pointer at the program's entry, near the top of the main
    /// thread's stack.
    static __libc_stack_end: *const core::ffi::c_void;
}

/// How far below `__libc_stack_end` this frame may be for [`on_main_stack`].
const MAIN_STACK_WINDOW: usize = 256 << 10;

/// Whether `[p, p + len)` lies on the live part of the main thread's stack, between this
/// frame and `__libc_stack_end`: memory that is certainly mapped and readable, so a poll array
/// there can be read without asking the kernel. Sound because that range is inside the one
/// stack mapping, which has no holes: this frame is on it, since Linux places every other
/// mapping (`mmap_base`) at least the stack rlimit plus the stack guard gap (1 MiB by default)
/// below the stack's top, and we ask for this frame to be within [`MAIN_STACK_WINDOW`] of it.
/// Other threads' stacks, alternate signal stacks and the heap say false (the caller then lets
/// the kernel validate the array).
fn on_main_stack(p: *const u8, len: usize) -> bool {
    let here = 0u8;
    let sp = core::hint::black_box(&here) as *const u8 as usize;
    // SAFETY: a plain read of a pointer-sized variable glibc sets once before main.
    let top = unsafe { __libc_stack_end } as usize;
    let a = p as usize;
    top > sp
        && top - sp < MAIN_STACK_WINDOW
        && sp <= a
        && a.checked_add(len).is_some_and(|e| e <= top)
}

/// `poll`/`ppoll` over `fds` where DDP sockets asked for `POLLIN` are served in the calling
/// thread (docs/engine.md "Readiness waits and the latency path"): first one look without
/// waiting at `fds` as given (ready fds return at once; the kernel validates the array), then
/// their TCP fds join the kernel poll set ([`ddp_user::PollWait`]); when one fires, its input
/// is processed here. Stream data that found the socketpair empty is held for the next read
/// and reported as `POLLIN` on its fd directly ([`ddp_user::PollWait::service`]); other input
/// lands where it always does and the wait goes on with the time left, so what the caller sees
/// is otherwise the kernel's own readiness of its fds. A socket that still holds stream data
/// for its reader ([`ddp_user::DdpSocket::poll_held`]) is readable at once: no wait. Without
/// such sockets: `call` on `fds` as given. `EINTR` and errors are the kernel's, unchanged.
/// `own_array`: `fds` is the library's own (select's conversion), known to be readable.
///
/// # Safety
/// `fds` is valid for `n` entries (or `n` is 0); `call` is the real poll with the caller's
/// signal mask, if any.
unsafe fn poll_inline(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: Option<core::time::Duration>,
    own_array: bool,
    call: impl Fn(*mut pollfd, nfds_t, Option<core::time::Duration>) -> c_int,
) -> Result<c_int, Errno> {
    let mut waits: [Option<(usize, ddp_user::PollWait)>; MAX_INLINE] = Default::default();
    let mut k = 0;
    let mut stack = [pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; STACK_FDS];
    let mut looked = false;
    // Fds whose socket holds stream data for its next read (`poll_held`): readable now.
    let mut held_now = [0usize; MAX_INLINE];
    let mut h_n = 0;
    // Only sets that fit the stack copy, in a process with DDP sockets.
    if ddp_user::engine_started() && n > 0 && n as usize + MAX_INLINE <= STACK_FDS {
        if !own_array && !on_main_stack(fds.cast(), n as usize * core::mem::size_of::<pollfd>()) {
            // First a look without waiting, on the caller's array as given: fds that are
            // ready (a POLLOUT check before a write, data already in a socketpair) return at
            // once, and the kernel validates the array (a bad pointer stays its EFAULT).
            let r = call(fds, n, Some(core::time::Duration::ZERO));
            if r != 0 || timeout == Some(core::time::Duration::ZERO) {
                return cvt(r);
            }
            looked = true;
        }
        // SAFETY: on the live part of the main thread's stack, or the kernel has just read the
        // array and written its revents: `n` readable entries (a concurrent munmap of a poll
        // array by another thread is the caller's bug).
        stack[..n as usize]
            .copy_from_slice(unsafe { core::slice::from_raw_parts(fds, n as usize) });
        for (i, &p) in stack[..n as usize].iter().enumerate() {
            if p.fd < 0 || p.events & libc::POLLIN == 0 {
                continue;
            }
            let Some(h) = fdtable::lookup_marked(p.fd) else {
                continue;
            };
            let Ok(Some(r)) = route::ddp_socket(h) else {
                continue;
            };
            let Some(c) = r.conn() else {
                continue;
            };
            if c.sock.poll_held() {
                held_now[h_n] = i;
                h_n += 1;
            } else if let Some(w) = c.sock.poll_wait() {
                waits[k] = Some((i, w));
                k += 1;
            }
            if k + h_n == MAX_INLINE {
                break;
            }
        }
    }
    if h_n > 0 {
        // Readable now: no wait. The other fds as the kernel sees them, without waiting (the
        // look above, if it was made, found none ready and wrote their revents).
        drop(waits);
        if !looked {
            cvt(call(fds, n, Some(core::time::Duration::ZERO)))?;
        }
        // SAFETY: the kernel has just read and written the caller's `n` entries.
        let arr = unsafe { core::slice::from_raw_parts_mut(fds, n as usize) };
        for &i in &held_now[..h_n] {
            let fd = stack[i].fd;
            for p in arr.iter_mut().filter(|p| p.fd == fd) {
                p.revents |= p.events & (libc::POLLIN | libc::POLLRDNORM);
            }
        }
        return Ok(arr.iter().filter(|p| p.revents != 0).count() as c_int);
    }
    // Sockets held lazily and not served by this wait go back to the progress thread before
    // it blocks (those in `waits` count as inside the library and stay); first a look without
    // waiting, so that a poll that finds its fds ready (a POLLOUT check before a write) does
    // not give them back.
    if ddp_user::lazy_held() && timeout != Some(core::time::Duration::ZERO) {
        if k == 0 && !looked {
            let r = call(fds, n, Some(core::time::Duration::ZERO));
            if r != 0 {
                return cvt(r);
            }
        }
        ddp_user::release_lazy_besides(waits.iter().flatten().map(|w| &w.1));
    }
    if k == 0 {
        return cvt(call(fds, n, timeout));
    }
    let n = n as usize;
    let ext = &mut stack[..n + k];
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    let mut first = true;
    loop {
        for (j, w) in waits.iter().flatten().enumerate() {
            let ev = w.1.events();
            ext[n + j] = pollfd {
                fd: if ev != 0 { w.1.tcp_fd() } else { -1 },
                events: ev,
                revents: 0,
            };
        }
        // (the first wait takes the timeout as given: the deadline was set just before)
        let left = if core::mem::take(&mut first) {
            timeout
        } else {
            deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()))
        };
        let r = cvt(call(ext.as_mut_ptr(), (n + k) as nfds_t, left))?;
        let mut serviced = false;
        let mut held = false;
        for (j, w) in waits.iter().flatten().enumerate() {
            if ext[n + j].revents != 0 {
                serviced = true;
                if w.1.service() {
                    // Stream data waits in the engine for this fd's next read: readable.
                    held = true;
                    let fd = ext[w.0].fd;
                    for p in ext[..n].iter_mut().filter(|p| p.fd == fd) {
                        p.revents |= p.events & (libc::POLLIN | libc::POLLRDNORM);
                    }
                }
            }
        }
        let mine = ext[..n].iter().filter(|p| p.revents != 0).count();
        if held {
            // SAFETY: the caller's array, `n` entries.
            unsafe { core::slice::from_raw_parts_mut(fds, n) }.copy_from_slice(&ext[..n]);
            return Ok(mine as c_int);
        }
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

/// `select(2)` with the table in use: see [`select_inline`]; otherwise the kernel's, after
/// giving sockets held lazily back to the progress thread.
///
/// # Safety
/// As for libc's `select`.
unsafe fn routed_select(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: *mut timeval,
) -> Result<c_int, Errno> {
    // (an unreadable or invalid timeout is the kernel's to refuse)
    if let Some(sets) = SelectSets::read(n, [r, w, e], timeout.cast(), size_of::<timeval>())
        && let Some(tv) = sets.timeout.map_or(Some(None), |b| {
            let t = timeval_of(&b);
            timeout_of(t.tv_sec, t.tv_usec, 1_000_000).map(Some)
        })
    {
        let start = tv.map(|_| std::time::Instant::now());
        // SAFETY: the caller's sets, read above; no signal mask.
        if let Some(res) = unsafe { select_inline(n, [r, w, e], &sets, tv, core::ptr::null()) } {
            // Linux writes the time left back into the caller's timeval.
            if let (Some(t), Some(start)) = (tv, start) {
                let left = t.saturating_sub(start.elapsed());
                // SAFETY: read above, so a valid timeval the caller lent us.
                unsafe {
                    timeout.write_unaligned(timeval {
                        tv_sec: left.as_secs() as libc::time_t,
                        tv_usec: left.subsec_micros() as libc::suseconds_t,
                    })
                };
            }
            return res;
        }
    }
    ddp_user::release_lazy();
    // SAFETY: forwarded unchanged.
    cvt(unsafe { real::select(n, r, w, e, timeout) })
}

/// `pselect(2)` with the table in use: as [`routed_select`], with the caller's signal mask
/// (and its timeout left as it is, as Linux does for `pselect`).
///
/// # Safety
/// As for libc's `pselect`.
unsafe fn routed_pselect(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> Result<c_int, Errno> {
    if let Some(sets) = SelectSets::read(n, [r, w, e], timeout.cast(), size_of::<timespec>())
        && let Some(t) = sets.timeout.map_or(Some(None), |b| {
            let t = timespec_of(&b);
            timeout_of(t.tv_sec, t.tv_nsec, 1_000_000_000).map(Some)
        })
        // SAFETY: the caller's sets, read above; `mask` is the caller's.
        && let Some(res) = unsafe { select_inline(n, [r, w, e], &sets, t, mask) }
    {
        return res;
    }
    ddp_user::release_lazy();
    // SAFETY: forwarded unchanged.
    cvt(unsafe { real::pselect(n, r, w, e, timeout, mask) })
}

/// A valid timeout of `sec` seconds and `frac` of `per_sec` parts of a second (a `timespec`:
/// 10^9, a `timeval`: 10^6) as a `Duration`; `None` if the kernel would refuse it (`EINVAL`).
fn timeout_of(
    sec: impl Into<i64>,
    frac: impl Into<i64>,
    per_sec: i64,
) -> Option<core::time::Duration> {
    let (sec, frac) = (sec.into(), frac.into());
    (sec >= 0 && (0..per_sec).contains(&frac))
        .then(|| core::time::Duration::new(sec as u64, (frac * (1_000_000_000 / per_sec)) as u32))
}

/// A `timeval` from its bytes.
fn timeval_of(b: &[u8; 16]) -> timeval {
    timeval {
        tv_sec: i64::from_ne_bytes(b[..8].try_into().expect("8 bytes")) as libc::time_t,
        tv_usec: i64::from_ne_bytes(b[8..].try_into().expect("8 bytes")) as libc::suseconds_t,
    }
}

/// A `timespec` from its bytes.
fn timespec_of(b: &[u8; 16]) -> timespec {
    timespec {
        tv_sec: i64::from_ne_bytes(b[..8].try_into().expect("8 bytes")) as libc::time_t,
        tv_nsec: i64::from_ne_bytes(b[8..].try_into().expect("8 bytes")) as libc::c_long,
    }
}

/// Words of an `fd_set` (`FD_SETSIZE` bits).
const SET_WORDS: usize = libc::FD_SETSIZE / 64;

/// Copies of a `select` call's fd sets (the first `n` bits, in whole words as the kernel reads
/// them) and timeout, read with `process_vm_readv` so that a bad pointer is found as the
/// kernel would find it (`EFAULT`, from the kernel's own call then) instead of faulting here.
struct SelectSets {
    words: usize,
    set: [[u64; SET_WORDS]; 3],
    timeout: Option<[u8; 16]>,
}

impl SelectSets {
    /// `None` when the call is not one to serve inline (no engine, no read set, `n` out of
    /// range, or something unreadable: the kernel's call then says what it says).
    fn read(n: c_int, sets: [*mut fd_set; 3], timeout: *const u8, tlen: usize) -> Option<Self> {
        if !ddp_user::engine_started()
            || sets[0].is_null()
            || n <= 0
            || n as usize > libc::FD_SETSIZE
            || tlen != 16
        {
            return None;
        }
        let words = (n as usize).div_ceil(64);
        let mut out = SelectSets {
            words,
            set: [[0; SET_WORDS]; 3],
            timeout: None,
        };
        let mut tbuf = [0u8; 16];
        let mut pieces: [(*mut u8, *const u8, usize); 4] =
            [(core::ptr::null_mut(), core::ptr::null(), 0); 4];
        let mut k = 0;
        for (i, p) in sets.iter().enumerate() {
            if !p.is_null() {
                pieces[k] = (
                    out.set[i].as_mut_ptr().cast(),
                    p.cast_const().cast(),
                    words * 8,
                );
                k += 1;
            }
        }
        if !timeout.is_null() {
            pieces[k] = (tbuf.as_mut_ptr(), timeout, 16);
            k += 1;
        }
        if !read_own(&pieces[..k]) {
            return None;
        }
        if !timeout.is_null() {
            out.timeout = Some(tbuf);
        }
        Some(out)
    }

    fn has(&self, set: usize, fd: usize) -> bool {
        self.set[set][fd / 64] & (1 << (fd % 64)) != 0
    }
}

/// `select`/`pselect` whose read set holds a connected DDP socket: served as `poll` is
/// ([`poll_inline`]: the socket's input is taken in this thread, stream data held for the
/// next read is readable at once), over a `pollfd` array made from the sets, the results
/// turned back into sets as Linux's select does (read: `POLLIN`/`POLLHUP`/`POLLERR`; write:
/// `POLLOUT`/`POLLERR`; except: `POLLPRI`; a closed fd in any set is `EBADF`). `None` when the
/// call is not one to serve so (no DDP socket asked for input, more fds than the stack copy
/// takes): the caller makes the kernel's call.
///
/// # Safety
/// `sets` are the caller's (readable: `copy` was read from them) and `mask` null or valid.
unsafe fn select_inline(
    n: c_int,
    sets: [*mut fd_set; 3],
    copy: &SelectSets,
    timeout: Option<core::time::Duration>,
    mask: *const sigset_t,
) -> Option<Result<c_int, Errno>> {
    let n = n as usize;
    let ddp = (0..n).any(|fd| {
        copy.has(0, fd)
            && fdtable::lookup_marked(fd as c_int)
                .is_some_and(|h| matches!(route::ddp_socket(h), Ok(Some(_))))
    });
    if !ddp {
        return None;
    }
    let mut pfds = [pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; STACK_FDS - MAX_INLINE];
    let mut k = 0;
    for fd in 0..n {
        let ev = if copy.has(0, fd) { libc::POLLIN } else { 0 }
            | if copy.has(1, fd) { libc::POLLOUT } else { 0 }
            | if copy.has(2, fd) { libc::POLLPRI } else { 0 };
        if ev != 0 {
            if k == pfds.len() {
                return None;
            }
            pfds[k] = pollfd {
                fd: fd as c_int,
                events: ev,
                revents: 0,
            };
            k += 1;
        }
    }
    // SAFETY: our own array of `k` entries; `mask` as the caller's.
    let r = unsafe {
        poll_inline(pfds.as_mut_ptr(), k as nfds_t, timeout, true, |f, k, t| {
            real_ppoll(f, k, t, mask)
        })
    };
    if let Err(e) = r {
        return Some(Err(e));
    }
    let pfds = &pfds[..k];
    if pfds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        return Some(Err(Errno(libc::EBADF)));
    }
    const MASKS: [i16; 3] = [
        libc::POLLIN | libc::POLLRDNORM | libc::POLLHUP | libc::POLLERR,
        libc::POLLOUT | libc::POLLWRNORM | libc::POLLERR,
        libc::POLLPRI,
    ];
    let mut out = [[0u64; SET_WORDS]; 3];
    let mut count = 0;
    for p in pfds {
        let fd = p.fd as usize;
        for (i, m) in MASKS.iter().enumerate() {
            if copy.has(i, fd) && p.revents & m != 0 {
                out[i][fd / 64] |= 1 << (fd % 64);
                count += 1;
            }
        }
    }
    for (i, p) in sets.iter().enumerate() {
        if !p.is_null() {
            // SAFETY: the caller's set, `words` words of which were just read from it.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    out[i].as_ptr().cast::<u8>(),
                    p.cast::<u8>(),
                    copy.words * 8,
                )
            };
        }
    }
    Some(Ok(count))
}

/// Which DDP fds each epoll fd was asked to watch for input (`epoll_ctl` on a DDP fd with
/// `EPOLLIN`): hints for [`epoll_inline`], by fd number, at most [`MAX_INLINE`] per epoll fd
/// (an epoll fd given more is marked `over` and left to the progress thread until its number
/// is reused). A stale hint (the fd closed or reused) costs at most serving a socket's input
/// inline, which is always right. Cost per call: a scan over the epoll fds, not the sockets.
static EPOLL_HINTS: std::sync::Mutex<Vec<EpollHints>> = std::sync::Mutex::new(Vec::new());
/// Epoll fds tracked at most (beyond, new ones are not served inline).
const MAX_EPOLL_FDS: usize = 64;

struct EpollHints {
    epfd: c_int,
    fds: [c_int; MAX_INLINE],
    len: usize,
    over: bool,
}

/// The hints, unless another thread (or the code a signal handler interrupted) holds them:
/// never wait for them (a hint missed costs latency only).
fn hints() -> Option<std::sync::MutexGuard<'static, Vec<EpollHints>>> {
    match EPOLL_HINTS.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Records (or forgets) that `epfd` watches DDP fd `fd` for input.
fn epoll_hint(epfd: c_int, fd: c_int, watch: bool) {
    let Some(mut h) = hints() else {
        return;
    };
    let i = match h.iter().position(|e| e.epfd == epfd) {
        Some(i) => i,
        None if watch && h.len() < MAX_EPOLL_FDS => {
            h.push(EpollHints {
                epfd,
                fds: [-1; MAX_INLINE],
                len: 0,
                over: false,
            });
            h.len() - 1
        }
        None => return,
    };
    let e = &mut h[i];
    if e.over {
        return;
    }
    if let Some(j) = e.fds[..e.len].iter().position(|&f| f == fd) {
        e.len -= 1;
        e.fds[j] = e.fds[e.len];
    }
    if watch {
        if e.len == MAX_INLINE {
            e.over = true;
        } else {
            e.fds[e.len] = fd;
            e.len += 1;
        }
    }
}

/// `epoll_wait`/`epoll_pwait` where the epoll fd watches at most [`MAX_INLINE`] DDP sockets
/// for input: as `poll` does (see [`poll_inline`]), the calling thread waits on the epoll fd
/// and those sockets' TCP fds together (`ppoll`, with the caller's signal mask) and processes
/// their input itself when they fire (stream data lands in the socketpair, which the epoll
/// set watches), then asks the epoll fd again without waiting. This saves the two
/// cross-thread handoffs (TCP -> progress thread -> application) per received message of an
/// epoll event loop. Larger sets, and waits without timeout 0 on epoll fds with no DDP
/// sockets, are the kernel's call as before. Results, `EINTR` (never restarted, as
/// `epoll_wait`) and errors are the kernel's.
///
/// # Safety
/// `look` and `block` call the real epoll wait on the caller's arguments; `mask` is null or
/// valid.
unsafe fn epoll_inline(
    epfd: c_int,
    timeout: Option<core::time::Duration>,
    mask: *const sigset_t,
    look: impl Fn() -> c_int,
    block: impl Fn(Option<core::time::Duration>) -> c_int,
) -> Result<c_int, Errno> {
    let mut waits: [Option<ddp_user::PollWait>; MAX_INLINE] = Default::default();
    let mut k = 0;
    if timeout != Some(core::time::Duration::ZERO) && ddp_user::engine_started() {
        let mut fds = [-1; MAX_INLINE];
        let mut m = 0;
        if let Some(h) = hints()
            && let Some(e) = h.iter().find(|e| e.epfd == epfd && !e.over)
        {
            fds = e.fds;
            m = e.len;
        }
        for &fd in &fds[..m] {
            let Some(h) = fdtable::lookup_marked(fd) else {
                continue;
            };
            if let Ok(Some(r)) = route::ddp_socket(h)
                && let Some(c) = r.conn()
                && let Some(w) = c.sock.poll_wait()
            {
                waits[k] = Some(w);
                k += 1;
            }
        }
    }
    if k == 0 {
        ddp_user::release_lazy();
        return cvt(block(timeout));
    }
    // A look without waiting first (it also validates the caller's arguments).
    let r = cvt(look())?;
    if r > 0 {
        return Ok(r);
    }
    ddp_user::release_lazy_besides(waits.iter().flatten());
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    let mut first = true;
    let mut set = [pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX_INLINE + 1];
    loop {
        set[0] = pollfd {
            fd: epfd,
            events: libc::POLLIN,
            revents: 0,
        };
        for (j, w) in waits.iter().flatten().enumerate() {
            let ev = w.events();
            set[1 + j] = pollfd {
                fd: if ev != 0 { w.tcp_fd() } else { -1 },
                events: ev,
                revents: 0,
            };
        }
        // (the first wait takes the timeout as given: the deadline was set just before)
        let left = if core::mem::take(&mut first) {
            timeout
        } else {
            deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()))
        };
        // SAFETY: our own array of `k + 1` entries; `mask` is null or valid.
        let r = cvt(unsafe { real_ppoll(set.as_mut_ptr(), (k + 1) as nfds_t, left, mask) })?;
        let mut again = set[0].revents != 0;
        for (j, w) in waits.iter().flatten().enumerate() {
            if set[1 + j].revents != 0 {
                w.service_plain();
                again = true;
            }
        }
        if again {
            let r = cvt(look())?;
            if r > 0 {
                return Ok(r);
            }
        }
        if r == 0 || left.is_some_and(|l| l.is_zero()) {
            return Ok(0);
        }
    }
}

/// `epoll_wait(2)` with the table in use.
///
/// # Safety
/// As for libc's `epoll_wait`.
unsafe fn routed_epoll_wait(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout_ms: c_int,
) -> Result<c_int, Errno> {
    let timeout = (timeout_ms >= 0).then(|| core::time::Duration::from_millis(timeout_ms as u64));
    // SAFETY: the caller's arguments.
    unsafe {
        epoll_inline(
            epfd,
            timeout,
            core::ptr::null(),
            || real::epoll_wait(epfd, evs, max, 0),
            |_| real::epoll_wait(epfd, evs, max, timeout_ms),
        )
    }
}

/// `epoll_pwait(2)` with the table in use.
///
/// # Safety
/// As for libc's `epoll_pwait`.
unsafe fn routed_epoll_pwait(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout_ms: c_int,
    mask: *const sigset_t,
) -> Result<c_int, Errno> {
    let timeout = (timeout_ms >= 0).then(|| core::time::Duration::from_millis(timeout_ms as u64));
    // SAFETY: the caller's arguments.
    unsafe {
        epoll_inline(
            epfd,
            timeout,
            mask,
            || real::epoll_wait(epfd, evs, max, 0),
            |_| real::epoll_pwait(epfd, evs, max, timeout_ms, mask),
        )
    }
}

/// `epoll_pwait2(2)` with the table in use: as `epoll_pwait`, with a `timespec` timeout
/// (read with `process_vm_readv`, so that a bad pointer or value stays the kernel's error:
/// such a call goes to the kernel as it is).
///
/// # Safety
/// As for `epoll_pwait2`.
unsafe fn routed_epoll_pwait2(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> Result<c_int, Errno> {
    let t = if timeout.is_null() {
        Some(None)
    } else {
        read_timespec(timeout)
            .and_then(|t| timeout_of(t.tv_sec, t.tv_nsec, 1_000_000_000))
            .map(Some)
    };
    let Some(t) = t else {
        ddp_user::release_lazy();
        // SAFETY: forwarded unchanged.
        return cvt(unsafe { real::epoll_pwait2(epfd, evs, max, timeout, mask) });
    };
    let zero = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the caller's arguments.
    unsafe {
        epoll_inline(
            epfd,
            t,
            mask,
            || real::epoll_pwait2(epfd, evs, max, &zero, mask),
            |_| real::epoll_pwait2(epfd, evs, max, timeout, mask),
        )
    }
}

/// A caller's `timespec`, read with `process_vm_readv` (`None`: unreadable).
fn read_timespec(p: *const timespec) -> Option<timespec> {
    let mut b = [0u8; 16];
    read_own(&[(b.as_mut_ptr(), p.cast(), 16)]).then(|| timespec_of(&b))
}

/// Copies `(to, from, len)` pieces of this process's memory with one `process_vm_readv`:
/// false if any `from` range is unreadable (where a plain read would fault, the kernel says
/// `EFAULT`). The `to` ranges are the caller's own buffers of `len` bytes.
fn read_own(pieces: &[(*mut u8, *const u8, usize)]) -> bool {
    let mut local = [libc::iovec {
        iov_base: core::ptr::null_mut(),
        iov_len: 0,
    }; 4];
    let mut remote = local;
    let k = pieces.len().min(local.len());
    let mut want = 0;
    for (i, &(to, from, len)) in pieces[..k].iter().enumerate() {
        local[i] = libc::iovec {
            iov_base: to.cast(),
            iov_len: len,
        };
        remote[i] = libc::iovec {
            iov_base: from as *mut libc::c_void,
            iov_len: len,
        };
        want += len;
    }
    // SAFETY: the local iovecs are the caller's own buffers of those lengths; the remote
    // ranges are only read, by the kernel, which checks them.
    let got = unsafe {
        libc::syscall(
            libc::SYS_process_vm_readv,
            libc::getpid(),
            local.as_ptr(),
            k as libc::c_ulong,
            remote.as_ptr(),
            k as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    k == pieces.len() && got == want as libc::c_long
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
    if fd >= 0
        && let Some(mut h) = hints()
    {
        h.retain(|e| e.epfd != fd); // (hints of an earlier epoll fd of that number)
    }
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
    if fd >= 0
        && let Some(mut h) = hints()
    {
        h.retain(|e| e.epfd != fd); // (hints of an earlier epoll fd of that number)
    }
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
    h: Handle,
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> Result<c_int, Errno> {
    // SAFETY: forwarded unchanged.
    let r = cvt(unsafe { real::epoll_ctl(epfd, op, fd, ev) })?;
    // The kernel accepted it: for ADD/MOD `ev` was read and is valid.
    let watch = op != libc::EPOLL_CTL_DEL
        && !ev.is_null()
        // SAFETY: see above.
        && unsafe { ev.read_unaligned() }.events & libc::EPOLLIN as u32 != 0;
    epoll_hint(epfd, fd, watch);
    if watch
        && let Ok(Some(r)) = route::ddp_socket(h)
        && let Some(c) = r.conn()
    {
        c.sock.epoll_watched();
    }
    Ok(r)
}
