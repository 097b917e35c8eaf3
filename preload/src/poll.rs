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
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
        poll_inline(fds, n, timeout, false, core::ptr::null(), |f, k, t| {
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
    unsafe { poll_inline(fds, n, t, false, mask, |f, k, t| real_ppoll(f, k, t, mask)) }
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
/// A set of one DDP fd asked for input takes [`poll_one`], which waits on that socket's own
/// epoll instance, where its two fds stay registered, with `mask` as `call` has it.
///
/// # Safety
/// `fds` is valid for `n` entries (or `n` is 0); `call` is the real poll with the caller's
/// signal mask, if any, and `mask` is that mask (null: none).
unsafe fn poll_inline(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: Option<core::time::Duration>,
    own_array: bool,
    mask: *const sigset_t,
    call: impl Fn(*mut pollfd, nfds_t, Option<core::time::Duration>) -> c_int,
) -> Result<c_int, Errno> {
    // The caller's entries (copied in below) and one per wait: only the first `n + k` entries
    // are ever written or read, so the array is not filled first (64 entries on every call).
    let mut stack_mem = core::mem::MaybeUninit::<[pollfd; STACK_FDS]>::uninit();
    let mut looked = false;
    let mut timeout = timeout;
    // Fds whose socket holds stream data for its next read (`poll_held`): readable now, with
    // the bits to add ([`held_bits`]).
    let mut held_now: [(c_int, i16); MAX_INLINE] = [(-1, 0); MAX_INLINE];
    let mut h_n = 0;
    // One DDP fd asked only for `POLLOUT` (a check before a write), in an array we may read
    // (the caller's on the main stack, or ours): answered here when the socket says the
    // kernel's answer would be `POLLOUT` and nothing else (`DdpSocket::poll_out_ready`).
    if n == 1 && ddp_user::engine_started() {
        let readable = own_array || on_main_stack(fds.cast(), core::mem::size_of::<pollfd>());
        if readable {
            // SAFETY: readable memory (see above), one entry; written back the same way.
            let p = unsafe { fds.read() };
            if p.fd >= 0
                && p.events & (libc::POLLOUT | libc::POLLWRNORM) != 0
                && p.events & (libc::POLLIN | libc::POLLRDNORM | libc::POLLPRI) == 0
                && let Some(h) = fdtable::lookup_marked(p.fd)
                && let Ok(Some(r)) = route::ddp_socket(h)
                && let Some(c) = r.conn()
                && c.sock.poll_out_ready()
            {
                // SAFETY: as above (the main stack is writable, as is our own array).
                unsafe {
                    // (what the kernel sets for a writable unix socket, as asked)
                    (*fds).revents =
                        p.events & (libc::POLLOUT | libc::POLLWRNORM | libc::POLLWRBAND);
                }
                return Ok(1);
            }
        }
    }
    // Only sets that fit the stack copy, in a process with DDP sockets.
    let inline = ddp_user::engine_started() && n > 0 && n as usize + MAX_INLINE <= STACK_FDS;
    if inline && !own_array && !on_main_stack(fds.cast(), n as usize * size_of::<pollfd>()) {
        // First a look without waiting, on the caller's array as given: fds that are ready
        // (a POLLOUT check before a write, data already in a socketpair) return at once, and
        // the kernel validates the array (a bad pointer stays its EFAULT). Not when a DDP
        // socket asked for input shows none: its input may wait in its TCP fd, where a TCP
        // socket's kernel would have seen it (`POLLIN|POLLOUT` in one answer, not `POLLOUT`
        // alone); then one round without waiting, as for an array we may read.
        let r = cvt(call(fds, n, Some(core::time::Duration::ZERO)))?;
        // SAFETY: the kernel has just read and written the caller's `n` entries.
        let arr = unsafe { core::slice::from_raw_parts(fds, n as usize) };
        if r > 0 || timeout == Some(core::time::Duration::ZERO) {
            if !input_unseen(arr) {
                return Ok(r);
            }
            timeout = Some(core::time::Duration::ZERO);
        } else {
            looked = true;
        }
    }
    // One DDP fd asked for input (a request-response loop's wait): as below for a set of one,
    // without the arrays a set of several needs.
    if inline && n == 1 {
        // SAFETY: the caller's array is its own or on the live part of the main thread's
        // stack, or the kernel has just read it: one readable and writable entry.
        let p = unsafe { fds.read() };
        if p.fd >= 0
            && p.events & libc::POLLIN != 0
            && let Some(h) = fdtable::lookup_marked(p.fd)
            && let Ok(Some(r)) = route::ddp_socket(h)
            && let Some(c) = r.conn()
        {
            // SAFETY: as the caller promises; `fds` is one readable and writable entry.
            return unsafe { poll_one(fds, p, &c.sock, timeout, looked, mask, &call) };
        }
    }
    // (declared here: the answers above drop no array of waits)
    let mut waits: [Option<(usize, ddp_user::PollWait)>; MAX_INLINE] = Default::default();
    let mut k = 0;
    if inline {
        // SAFETY: the caller's array is on the live part of the main thread's stack, or the
        // kernel has just read it and written its revents: `n` readable entries (a concurrent
        // munmap of a poll array by another thread is the caller's bug). They are copied into
        // our own array, which has room for them and `MAX_INLINE` more; the slice covers only
        // what was just written.
        let stack = unsafe {
            let at = stack_mem.as_mut_ptr().cast::<pollfd>();
            core::ptr::copy_nonoverlapping(fds, at, n as usize);
            core::slice::from_raw_parts(at, n as usize)
        };
        for (i, &p) in stack.iter().enumerate() {
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
            match c.sock.poll_enter(false) {
                ddp_user::PollEnter::Held => {
                    held_now[h_n] = (p.fd, held_bits(&c.sock, p.events));
                    h_n += 1;
                }
                ddp_user::PollEnter::Wait(w) => {
                    waits[k] = Some((i, w));
                    k += 1;
                }
                ddp_user::PollEnter::Kernel => {}
            }
            if k + h_n == MAX_INLINE {
                break;
            }
        }
    }
    let held_now = &held_now[..h_n];
    if h_n > 0 && k == 0 {
        // Readable now: no wait. The other fds as the kernel sees them, without waiting (the
        // look above, if it was made, found none ready and wrote their revents).
        drop(waits);
        if !looked {
            cvt(call(fds, n, Some(core::time::Duration::ZERO)))?;
        }
        // SAFETY: the kernel has just read and written the caller's `n` entries.
        let arr = unsafe { core::slice::from_raw_parts_mut(fds, n as usize) };
        return Ok(with_held(arr, held_now));
    }
    // Readable now, and other DDP sockets' input waits in their TCP fds, which no one else
    // may be watching (this thread's lazily, see `LAZY_REARM`): one round over those without
    // waiting, so that data its reader leaves unread does not hide theirs from every call
    // after (iperf3 -R reads its data stream only after a control message that came behind).
    let timeout = if h_n > 0 {
        Some(core::time::Duration::ZERO)
    } else {
        timeout
    };
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
        ddp_user::release_lazy_besides(waits[..k].iter().flatten().map(|w| &w.1));
    }
    if k == 0 {
        return cvt(call(fds, n, timeout));
    }
    let n = n as usize;
    // SAFETY: our own array, with room for `n + k` entries (`n + MAX_INLINE <= STACK_FDS`);
    // the first `n` were written above and the `k` after them are written here.
    let ext = unsafe {
        let at = stack_mem.as_mut_ptr().cast::<pollfd>();
        for j in 0..k {
            at.add(n + j).write(pollfd {
                fd: -1,
                events: 0,
                revents: 0,
            });
        }
        core::slice::from_raw_parts_mut(at, n + k)
    };
    let mut time = TimeLeft::new(timeout);
    loop {
        for (j, w) in waits[..k].iter().flatten().enumerate() {
            ext[n + j] = with_fin(tcp_entry(&w.1));
        }
        let left = time.next();
        let r = cvt(call(ext.as_mut_ptr(), (n + k) as nfds_t, left))?;
        let mut serviced = false;
        let mut held = false;
        for (j, w) in waits[..k].iter().flatten().enumerate() {
            if ext[n + j].revents != 0 {
                serviced = true;
                w.1.reported(ext[n + j].revents);
                // (true: this call returns below; the wait ends with the round)
                if w.1.service_last() {
                    // Stream data waits in the engine for this fd's next read: readable.
                    held = true;
                    let fd = ext[w.0].fd;
                    for p in ext[..n].iter_mut().filter(|p| p.fd == fd) {
                        p.revents |= held_bits(w.1.socket(), p.events);
                    }
                }
            }
        }
        let mine = ext[..n].iter().filter(|p| p.revents != 0).count();
        // SAFETY: the caller's array, `n` entries.
        let out = || unsafe { core::slice::from_raw_parts_mut(fds, n) };
        // (the sockets found readable before the round added)
        let finish = |ext: &[pollfd], count: usize| {
            let out = out();
            out.copy_from_slice(ext);
            if held_now.is_empty() {
                count as c_int
            } else {
                with_held(out, held_now)
            }
        };
        if held {
            return Ok(finish(&ext[..n], mine));
        }
        let timed_out = r == 0 || left.is_some_and(|l| l.is_zero());
        match after_wait(serviced, mine > 0, timed_out) {
            AfterWait::Again => continue,
            AfterWait::Recheck => {
                let r2 = cvt(call(
                    ext.as_mut_ptr(),
                    n as nfds_t,
                    Some(core::time::Duration::ZERO),
                ))?;
                return Ok(finish(&ext[..n], r2 as usize));
            }
            AfterWait::Done => return Ok(finish(&ext[..n], mine)),
        }
    }
}

/// Adds `POLLIN` (as asked, with [`held_bits`]) to the entries of `fds` whose socket holds
/// data for its reader (`held`: their fds and bits); returns how many entries show anything.
fn with_held(fds: &mut [pollfd], held: &[(c_int, i16)]) -> c_int {
    for p in fds.iter_mut() {
        if let Some(&(_, bits)) = held.iter().find(|h| h.0 == p.fd) {
            p.revents |= bits & p.events;
        }
    }
    fds.iter().filter(|p| p.revents != 0).count() as c_int
}

/// The `poll` bits of `asked` to add for a socket that holds stream data for its reader:
/// `POLLIN` (`POLLRDNORM`), and `POLLRDHUP` if the stream's end has arrived behind the data,
/// as a TCP socket shows it (`DdpSocket::poll_held_events`, asked only when `POLLRDHUP` is
/// asked for). The rest (`POLLOUT`) is the app fd's own, which the kernel reports.
fn held_bits(sock: &ddp_user::DdpSocket, asked: i16) -> i16 {
    let mut bits = asked & (libc::POLLIN | libc::POLLRDNORM);
    if asked & libc::POLLRDHUP != 0 {
        bits |= asked & sock.poll_held_events() & libc::POLLRDHUP;
    }
    bits
}

/// Whether an entry of `fds` (written by the kernel) is a connected DDP socket asked for
/// `POLLIN` that does not show it: input may wait in its TCP fd, which only the library
/// looks at.
fn input_unseen(fds: &[pollfd]) -> bool {
    fds.iter().any(|p| {
        p.fd >= 0
            && p.events & libc::POLLIN != 0
            && p.revents & libc::POLLIN == 0
            && fdtable::lookup_marked(p.fd)
                .and_then(|h| route::ddp_socket(h).ok().flatten())
                .is_some_and(|r| r.conn().is_some())
    })
}

/// What a `poll` does after a kernel wait in which no socket's round held data for its reader.
enum AfterWait {
    /// Wait again, with the time left.
    Again,
    /// Ask the kernel again without waiting and report what it says: a round ran, and the
    /// socketpair may have become readable meanwhile.
    Recheck,
    /// Report what the wait found.
    Done,
}

/// [`AfterWait`] from whether a socket's round ran (`serviced`), the caller's fds showed
/// anything (`mine`) and the time is up (`timed_out`, a zero wait included).
fn after_wait(serviced: bool, mine: bool, timed_out: bool) -> AfterWait {
    match (serviced, mine, timed_out) {
        (true, true, _) | (true, false, true) => AfterWait::Recheck,
        (true, false, false) | (false, false, false) => AfterWait::Again,
        (false, _, _) => AfterWait::Done,
    }
}

/// `p` (a TCP fd's entry) asking for `POLLRDHUP` too if it asks for input: a report that
/// shows it tells the round that the peer's FIN is in ([`ddp_user::PollWait::reported`]).
fn with_fin(p: pollfd) -> pollfd {
    if p.events & libc::POLLIN != 0 {
        pollfd {
            events: p.events | libc::POLLRDHUP,
            ..p
        }
    } else {
        p
    }
}

/// The kernel poll entry for a wait's TCP fd, with the events it serves now (fd -1: none).
fn tcp_entry(w: &ddp_user::PollWait) -> pollfd {
    let ev = w.events();
    pollfd {
        fd: if ev != 0 { w.tcp_fd() } else { -1 },
        events: ev,
        revents: 0,
    }
}

/// The time left of a `poll`'s timeout for each of its kernel waits: the first takes the
/// timeout as given (the deadline is dated just before it), the others what is left then.
/// (`ddp_user::sys::Deadline`); a kernel wait that times out ends the call.
struct TimeLeft {
    timeout: Option<core::time::Duration>,
    deadline: Option<ddp_user::sys::Deadline>,
    first: bool,
}

impl TimeLeft {
    fn new(timeout: Option<core::time::Duration>) -> TimeLeft {
        TimeLeft {
            timeout,
            deadline: timeout.map(ddp_user::sys::Deadline::after),
            first: true,
        }
    }

    fn next(&mut self) -> Option<core::time::Duration> {
        if core::mem::take(&mut self.first) {
            self.timeout
        } else {
            self.deadline.map(ddp_user::sys::Deadline::left)
        }
    }
}

/// [`poll_inline`] for a set of one DDP socket's fd `p` (asked for `POLLIN`, maybe more) at
/// `fds`: the same steps as there for a set of one, in the same order, without the arrays
/// that a set of several needs (fewer instructions on the latency path), and the wait on the
/// socket's own wait set ([`ddp_user::PollWait::wait_alone`]). `looked`: the kernel has
/// just looked at `fds` without waiting and found nothing ready.
///
/// # Safety
/// `fds` is one entry the caller may read and write (its own array, or the main thread's
/// live stack); `call` and `mask` as for [`poll_inline`].
unsafe fn poll_one(
    fds: *mut pollfd,
    p: pollfd,
    sock: &ddp_user::DdpSocket,
    timeout: Option<core::time::Duration>,
    looked: bool,
    mask: *const sigset_t,
    call: &impl Fn(*mut pollfd, nfds_t, Option<core::time::Duration>) -> c_int,
) -> Result<c_int, Errno> {
    let zero = Some(core::time::Duration::ZERO);
    let w = match sock.poll_enter(true) {
        ddp_user::PollEnter::Held => {
            // Readable now: the fd's other events as the kernel sees them, without waiting
            // (the look made before, if there was one, found none and wrote them).
            if !looked {
                cvt(call(fds, 1, zero))?;
            }
            // SAFETY: one entry, readable and writable (see above).
            unsafe { (*fds).revents |= held_bits(sock, p.events) };
            return Ok(1);
        }
        ddp_user::PollEnter::Kernel => {
            if ddp_user::lazy_held() && timeout != zero {
                if !looked {
                    let r = call(fds, 1, zero);
                    if r != 0 {
                        return cvt(r);
                    }
                }
                ddp_user::release_lazy_besides([]);
            }
            return cvt(call(fds, 1, timeout));
        }
        ddp_user::PollEnter::Wait(w) => w,
    };
    if ddp_user::lazy_held() && timeout != zero {
        ddp_user::release_lazy_besides([&w]);
    }
    let mut ext = [
        pollfd { revents: 0, ..p },
        pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        },
    ];
    let mut time = TimeLeft::new(timeout);
    loop {
        ext[0].revents = 0;
        ext[1] = tcp_entry(&w);
        let left = time.next();
        // SAFETY: `mask` is the caller's (null or valid, as `call` has it).
        let alone = (ext[1].fd >= 0)
            .then(|| unsafe { w.wait_alone(&mut ext, left, mask) })
            .flatten();
        let r = match alone {
            Some(r) => r.map(|v| v as c_int).map_err(|e| Errno(e.0))?,
            None => {
                // (the wait set registers `POLLRDHUP` itself: asked of the kernel only here)
                ext[1] = with_fin(ext[1]);
                cvt(call(ext.as_mut_ptr(), 2, left))?
            }
        };
        let serviced = ext[1].revents != 0;
        w.reported(ext[1].revents);
        // (true: this call returns below; the wait ends with the round)
        if serviced && w.service_last() {
            // Stream data waits in the engine for this fd's next read: readable.
            ext[0].revents |= held_bits(sock, p.events);
            // SAFETY: one entry, writable (see above).
            unsafe { fds.write(ext[0]) };
            return Ok(1);
        }
        let mine = ext[0].revents != 0;
        let timed_out = r == 0 || left.is_some_and(|l| l.is_zero());
        match after_wait(serviced, mine, timed_out) {
            AfterWait::Again => continue,
            AfterWait::Recheck => {
                let r2 = cvt(call(ext.as_mut_ptr(), 1, zero))?;
                // SAFETY: as above.
                unsafe { fds.write(ext[0]) };
                return Ok(r2);
            }
            AfterWait::Done => {
                // SAFETY: as above.
                unsafe { fds.write(ext[0]) };
                return Ok(c_int::from(mine));
            }
        }
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
        poll_inline(
            pfds.as_mut_ptr(),
            k as nfds_t,
            timeout,
            true,
            mask,
            |f, k, t| real_ppoll(f, k, t, mask),
        )
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
/// `EPOLLIN`), with the registration (events, data): for [`epoll_inline`], by fd number, at
/// most [`MAX_INLINE`] per epoll fd (an epoll fd given more is marked `over` and left to the
/// progress thread until its number is reused). A registration names its socket
/// ([`ddp_user::DdpSocket::id`]), so a hint whose fd was closed or reused meanwhile is ignored;
/// the epoll fd's own close (`close`, `close_range`, `closefrom`, `dup2`/`dup3` over it) drops
/// its hints ([`forget_epoll_fds`]; such an epoll fd is marked [`route::TRACKED`] so that its
/// `close` is routed). An update that cannot take the lock (another thread or an
/// interrupted caller holds it) drops every hint instead: without a hint a socket's input goes
/// where the kernel reports it, which is always right. Cost per call: a scan over the epoll
/// fds, not the sockets.
static EPOLL_HINTS: std::sync::Mutex<Vec<EpollHints>> = std::sync::Mutex::new(Vec::new());
/// Whether hints may exist (so that `close` of an fd that is not a DDP socket costs one load).
static HINTED: AtomicBool = AtomicBool::new(false);
/// [`report_held`]'s turns: which held socket comes first, and (short of room) whether the
/// kernel's events come first.
static HELD_TURN: AtomicUsize = AtomicUsize::new(0);
/// An update of the hints was missed: drop them all at the next chance.
static HINTS_MISSED: AtomicBool = AtomicBool::new(false);
/// Epoll fds tracked at most (beyond, new ones are not served inline).
const MAX_EPOLL_FDS: usize = 64;

struct EpollHints {
    epfd: c_int,
    regs: [EpollReg; MAX_INLINE],
    len: usize,
    /// More than [`MAX_INLINE`] registrations: all of them, and the set's epoll group.
    big: Option<Box<BigSet>>,
}

/// An epoll fd watching many DDP sockets: its registrations by fd and by socket, served
/// through an epoll group ([`ddp_user::EpollGroup`]; [`epoll_group_wait`]).
struct BigSet {
    /// None if the group could not be made (the sockets stay with the progress thread).
    group: Option<std::sync::Arc<ddp_user::EpollGroup>>,
    regs: std::collections::HashMap<c_int, EpollReg>,
    by_sock: std::collections::HashMap<u64, c_int>,
    /// Sockets that held data for their reader when last served (reported until read).
    pending: Vec<u64>,
}

impl EpollHints {
    /// Whether this set watches socket `sock` (by its id).
    fn watches(&self, sock: u64) -> bool {
        match &self.big {
            Some(b) => b.by_sock.contains_key(&sock),
            None => self.regs[..self.len].iter().any(|r| r.sock == sock),
        }
    }
}

/// Whether no epoll fd but `epfd` watches socket `sock` (data held for it may be reported by
/// `epfd`'s waits alone).
fn alone_in(h: &[EpollHints], epfd: c_int, sock: u64) -> bool {
    !h.iter().any(|x| x.epfd != epfd && x.watches(sock))
}

/// One DDP fd in an epoll set, as `epoll_ctl` registered it.
#[derive(Clone, Copy, Default)]
struct EpollReg {
    fd: c_int,
    /// The socket's id (0: not a connection; never reported by us).
    sock: u64,
    events: u32,
    data: u64,
    /// Edge-triggered: the socket's received byte count when its held data was last reported.
    seen_rx: u64,
}

impl EpollReg {
    /// Whether data may be held for this registration and reported by us (`EPOLLIN`, neither
    /// one-shot nor exclusive: those keep the kernel's readiness only).
    fn holdable(&self) -> bool {
        self.sock != 0
            && self.events & libc::EPOLLIN as u32 != 0
            && self.events & (libc::EPOLLONESHOT | libc::EPOLLEXCLUSIVE) as u32 == 0
    }
}

/// The hints, unless another thread (or the code a signal handler interrupted) holds them:
/// never wait for them (a hint missed costs latency only; an update missed drops them all).
fn hints() -> Option<std::sync::MutexGuard<'static, Vec<EpollHints>>> {
    let mut g = match EPOLL_HINTS.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    if HINTS_MISSED.swap(false, Ordering::Relaxed) {
        g.clear();
    }
    Some(g)
}

/// The hints for an update: `None` (and all hints dropped at the next chance) if busy.
fn hints_for_update() -> Option<std::sync::MutexGuard<'static, Vec<EpollHints>>> {
    let g = hints();
    if g.is_none() {
        HINTS_MISSED.store(true, Ordering::Relaxed);
    }
    g
}

/// Drops the hints of the epoll fds `first..=last` (about to be closed or replaced).
pub(crate) fn forget_epoll_fds(first: c_int, last: c_int) {
    if !HINTED.load(Ordering::Relaxed) {
        return;
    }
    if let Some(mut h) = hints_for_update() {
        h.retain(|e| e.epfd < first || e.epfd > last);
    }
}

/// Records (`Some`: added or modified with `EPOLLIN`) or forgets (`None`) that `epfd` watches
/// DDP fd `fd` (socket `sock`, if it is a connection) for input.
fn epoll_hint(epfd: c_int, fd: c_int, reg: Option<EpollReg>, sock: Option<&ddp_user::DdpSocket>) {
    let Some(mut h) = hints_for_update() else {
        return;
    };
    let i = match h.iter().position(|e| e.epfd == epfd) {
        Some(i) => i,
        None if reg.is_some() && h.len() < MAX_EPOLL_FDS => {
            HINTED.store(true, Ordering::Relaxed);
            // Marked, so that its `close` comes through `routed_close` (which forgets it).
            if fdtable::lookup(epfd).is_none() {
                fdtable::mark(epfd, route::TRACKED);
            }
            h.push(EpollHints {
                epfd,
                regs: [EpollReg::default(); MAX_INLINE],
                len: 0,
                big: None,
            });
            h.len() - 1
        }
        None => return,
    };
    let e = &mut h[i];
    if e.big.is_none() {
        if let Some(j) = e.regs[..e.len].iter().position(|r| r.fd == fd) {
            e.len -= 1;
            e.regs[j] = e.regs[e.len];
        }
        match reg {
            Some(reg)
                if e.len
                    < crate::config::epoll_inline().map_or(MAX_INLINE, |n| n.min(MAX_INLINE)) =>
            {
                e.regs[e.len] = reg;
                e.len += 1;
                return;
            }
            Some(_) => {
                // The set outgrows the inline waits: an epoll group from now on, with the
                // registrations so far.
                let group = ddp_user::EpollGroup::new().ok().map(std::sync::Arc::new);
                let mut big = BigSet {
                    group,
                    regs: Default::default(),
                    by_sock: Default::default(),
                    pending: Vec::new(),
                };
                for r in &e.regs[..e.len] {
                    big.regs.insert(r.fd, *r);
                    if r.sock != 0 {
                        big.by_sock.insert(r.sock, r.fd);
                        if let (Some(g), Some(s)) = (&big.group, reg_socket(r)) {
                            g.add(&s);
                        }
                    }
                }
                e.len = 0;
                e.big = Some(Box::new(big));
            }
            None => return,
        }
    }
    let Some(big) = e.big.as_mut() else {
        return;
    };
    // (a socket whose registration goes stays in the group: event loops drop and restore
    // their read interest per request, and moving the TCP fd out and back costs six
    // `epoll_ctl`s; a member nobody waits for is served by the progress thread, and a
    // thread receiving on it reads its input itself)
    if let Some(old) = big.regs.remove(&fd)
        && old.sock != 0
    {
        big.by_sock.remove(&old.sock);
        big.pending.retain(|&id| id != old.sock);
    }
    if let Some(reg) = reg {
        big.regs.insert(fd, reg);
        if reg.sock != 0 {
            big.by_sock.insert(reg.sock, fd);
            if let (Some(g), Some(s)) = (&big.group, sock) {
                g.add(s);
            }
        }
    }
}

/// The registrations of `epfd` (none if it has more than [`MAX_INLINE`], or the hints are
/// busy), each with whether its socket is watched by this epoll fd only (data held for it is
/// then reported by [`epoll_inline`]; a socket in two sets keeps the kernel's readiness).
fn epoll_regs(epfd: c_int) -> ([(EpollReg, bool); MAX_INLINE], usize) {
    let mut out = [(EpollReg::default(), false); MAX_INLINE];
    let Some(h) = hints() else {
        return (out, 0);
    };
    let Some(e) = h.iter().find(|e| e.epfd == epfd && e.big.is_none()) else {
        return (out, 0);
    };
    for (o, r) in out.iter_mut().zip(&e.regs[..e.len]) {
        *o = (*r, r.holdable() && alone_in(&h, epfd, r.sock));
    }
    (out, e.len)
}

/// Notes that the held data of `epfd`'s registration of `fd` was reported at `rx` bytes
/// received (edge-triggered registrations report it again only after more arrives).
fn epoll_seen(epfd: c_int, fd: c_int, sock: u64, rx: u64) {
    let Some(mut h) = hints() else {
        return;
    };
    let Some(e) = h.iter_mut().find(|e| e.epfd == epfd) else {
        return;
    };
    let r = match e.big.as_mut() {
        Some(b) => b.regs.get_mut(&fd),
        None => e.regs[..e.len].iter_mut().find(|r| r.fd == fd),
    };
    if let Some(r) = r.filter(|r| r.sock == sock) {
        r.seen_rx = rx;
    }
}

/// The DDP socket behind `fd` if it is still the one `reg` registered.
fn reg_socket(reg: &EpollReg) -> Option<ddp_user::DdpSocket> {
    let h = fdtable::lookup_marked(reg.fd)?;
    let r = route::ddp_socket(h).ok()??;
    let c = r.conn()?;
    (c.sock.id() == reg.sock).then(|| c.sock.clone())
}

/// An event for a socket that holds stream data for its reader.
#[derive(Clone, Copy, Default)]
struct Held {
    reg: EpollReg,
    /// The socket's received byte count now.
    rx: u64,
    /// What a TCP socket would report with the data (`ddp_user::Held::events`).
    events: u32,
}

impl Held {
    fn new(reg: EpollReg, h: ddp_user::Held) -> Held {
        Held {
            reg,
            rx: h.rx,
            events: h.events,
        }
    }

    /// The events reported for it: of those a TCP socket would report with the data
    /// (`EPOLLIN`, and `EPOLLOUT` or `EPOLLRDHUP` with it), the ones the registration asked
    /// for.
    fn bits(&self) -> u32 {
        self.events & self.reg.events
    }
}

/// The sockets of `regs` that hold stream data for their reader (`DdpSocket::epoll_held`;
/// edge-triggered ones only if more arrived since they were last reported).
fn held_of(regs: &[(EpollReg, bool)]) -> ([Held; MAX_INLINE], usize) {
    let mut out = [Held::default(); MAX_INLINE];
    let mut n = 0;
    for (reg, alone) in regs {
        if !alone {
            continue;
        }
        let Some(h) = reg_socket(reg).and_then(|s| s.epoll_held()) else {
            continue;
        };
        if reg.events & libc::EPOLLET as u32 != 0 && h.rx == reg.seen_rx {
            continue;
        }
        out[n] = Held::new(*reg, h);
        n += 1;
    }
    (out, n)
}

/// Adds the `held` events to the `r` events the kernel wrote at `evs`: an entry with the
/// same data gets them ([`Held::bits`]: `EPOLLIN`, with `EPOLLOUT` and `EPOLLRDHUP` as a TCP
/// socket shows them, as asked), others are appended while there is room (a bad `evs` is
/// left alone: the kernel never checked the part it did not write). Returns the new count.
///
/// # Safety
/// `evs[..r]` were just written by the kernel; `max` is the caller's (> 0: the kernel took it).
unsafe fn add_held(
    epfd: c_int,
    held: &[Held],
    evs: *mut epoll_event,
    max: c_int,
    mut r: c_int,
) -> c_int {
    for h in held {
        let bits = h.bits();
        // SAFETY: the kernel wrote these `r` entries (epoll_event is packed: bytes 4..12 are
        // the data).
        let kernel = unsafe { core::slice::from_raw_parts(evs.cast::<u8>(), r as usize * EV) };
        let same = kernel
            .chunks_exact(EV)
            .position(|c| u64::from_ne_bytes(c[4..12].try_into().expect("8 bytes")) == h.reg.data);
        if let Some(i) = same {
            // SAFETY: entry `i` of the kernel's `r`.
            unsafe {
                let p = evs.add(i);
                let mut e = p.read_unaligned();
                e.events |= bits;
                p.write_unaligned(e);
            }
        } else if r < max {
            let e = epoll_event {
                events: bits,
                u64: h.reg.data,
            };
            // SAFETY: only an address; the write goes to checked memory.
            let at = unsafe { evs.add(r as usize) };
            if !write_event(at, e) {
                return r;
            }
            r += 1;
        } else {
            continue;
        }
        if h.reg.events & libc::EPOLLET as u32 != 0 {
            epoll_seen(epfd, h.reg.fd, h.reg.sock, h.rx);
        }
    }
    r
}

/// Reports `held` with the kernel's ready events: the kernel fills what the held ones leave
/// of the caller's `max` (so that each held socket has room: an fd that is always ready, such
/// as `EPOLLOUT`, never crowds them out), then [`add_held`]. With more held sockets than room,
/// every other call reports only held ones (written through the kernel: `EFAULT` for a bad
/// array, as the kernel's), so neither kind waits for the other for long.
///
/// # Safety
/// `look(m)` is the caller's epoll wait without waiting, at most `m` entries into `evs`.
unsafe fn report_held(
    epfd: c_int,
    held: &[Held],
    evs: *mut epoll_event,
    max: c_int,
    look: &impl Fn(c_int) -> c_int,
) -> Result<c_int, Errno> {
    // (a different first one each call: an array with less room than held sockets reports
    // each in turn, as the kernel's level-triggered list does)
    let mut turn = [Held::default(); HELD_REPORT];
    let held = &held[..held.len().min(HELD_REPORT)];
    let t = HELD_TURN.fetch_add(1, Ordering::Relaxed);
    let first = (t / 2) % held.len().max(1);
    for (t, h) in turn
        .iter_mut()
        .zip(held[first..].iter().chain(&held[..first]))
    {
        *t = *h;
    }
    let held = &turn[..held.len()];
    let room = max - held.len().min(c_int::MAX as usize) as c_int;
    if room <= 0 && max > 0 && t.is_multiple_of(2) {
        let mut r = 0;
        for h in &held[..max as usize] {
            let e = epoll_event {
                events: h.bits(),
                u64: h.reg.data,
            };
            // SAFETY: only an address; the write goes to checked memory.
            let at = unsafe { evs.add(r as usize) };
            if !write_event(at, e) {
                return if r > 0 {
                    Ok(r)
                } else {
                    Err(Errno(libc::EFAULT))
                };
            }
            if h.reg.events & libc::EPOLLET as u32 != 0 {
                epoll_seen(epfd, h.reg.fd, h.reg.sock, h.rx);
            }
            r += 1;
        }
        return Ok(r);
    }
    let r = cvt(look(if room > 0 { room } else { max }))?;
    // SAFETY: the kernel took `evs` and wrote `r` entries; `max` > 0 (it took it).
    Ok(unsafe { add_held(epfd, held, evs, max, r) })
}

thread_local! {
    /// The part of this thread's last `epoll_wait` array known to be writable (`[start,
    /// end)`: written through the kernel before): an event loop reuses one array, so an event
    /// appended there is written directly, without a `process_vm_writev` each time.
    static EVS_OK: core::cell::Cell<(usize, usize)> = const { core::cell::Cell::new((0, 0)) };
}

/// Writes `e` at `at` of a caller's event array: directly where a write through the kernel
/// succeeded before, else with `process_vm_writev` (false if it is not writable).
fn write_event(at: *mut epoll_event, e: epoll_event) -> bool {
    let a = at as usize;
    let (start, end) = EVS_OK.with(|c| c.get());
    if start <= a && a + EV <= end {
        // SAFETY: this thread wrote these bytes through the kernel before (see `EVS_OK`).
        unsafe { at.write_unaligned(e) };
        return true;
    }
    if !write_own(at.cast(), (&raw const e).cast(), EV) {
        return false;
    }
    EVS_OK.with(|c| {
        c.set(if a == end && start < end {
            (start, a + EV)
        } else {
            (a, a + EV)
        })
    });
    true
}

/// Held sockets reported by one wait at most (the others in later ones).
const HELD_REPORT: usize = 64;

/// The size of one `epoll_event` (packed on x86_64).
const EV: usize = size_of::<epoll_event>();

/// `epoll_wait`/`epoll_pwait` where the epoll fd watches at most [`MAX_INLINE`] DDP sockets
/// for input: as `poll` does (see [`poll_inline`]), the calling thread waits on the epoll fd
/// and those sockets' TCP fds together (`ppoll`, with the caller's signal mask) and processes
/// their input itself when they fire, then asks the epoll fd again without waiting. This saves
/// the two cross-thread handoffs (TCP -> progress thread -> application) per received message
/// of an epoll event loop. Stream data that found a socket's socketpair empty is held in the
/// engine for its next read and reported (`EPOLLIN` with the registration's data) by this call
/// itself, for a socket registered level- or edge-triggered (not one-shot or exclusive) in
/// this epoll fd only; otherwise it lands in the socketpair, which the epoll set watches. A
/// socket still holding data is reported at once, level-triggered, or when more arrived,
/// edge-triggered; held data not read goes into the socketpair as after a `poll`. Larger sets,
/// and waits without timeout 0 on epoll fds with no DDP sockets, are the kernel's call as
/// before. Results, `EINTR` (never restarted, as `epoll_wait`) and errors are the kernel's.
///
/// # Safety
/// `look` and `block` call the real epoll wait on the caller's arguments; `mask` is null or
/// valid; `evs` and `max` are the caller's.
unsafe fn epoll_inline(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: Option<core::time::Duration>,
    mask: *const sigset_t,
    look: impl Fn(c_int) -> c_int,
    block: impl Fn(Option<core::time::Duration>) -> c_int,
) -> Result<c_int, Errno> {
    if ddp_user::engine_started()
        && let Some(g) = big_group(epfd)
    {
        // SAFETY: the caller's arguments.
        return unsafe { epoll_group_wait(epfd, &g, evs, max, timeout, mask, &look) };
    }
    let mut waits: Waits = Default::default();
    let mut k = 0;
    let (regs, m) = if ddp_user::engine_started() {
        epoll_regs(epfd)
    } else {
        ([(EpollReg::default(), false); MAX_INLINE], 0)
    };
    let regs = &regs[..m];
    let (held, h_n) = held_of(regs);
    if timeout != Some(core::time::Duration::ZERO) || h_n > 0 {
        for (reg, alone) in regs {
            if held[..h_n].iter().any(|h| h.reg.fd == reg.fd) {
                continue; // (its data stays held: a PollWait would pass it to the socketpair)
            }
            if let Some(sock) = reg_socket(reg)
                && let Some(w) = sock.poll_wait()
            {
                waits[k] = Some((w, *alone, *reg));
                k += 1;
            }
        }
    }
    if h_n > 0 {
        // Sockets that hold data for their reader: readable now, no wait (input waiting for
        // the others is served first: a socket holding data must not keep it waiting).
        // SAFETY: our own PollWaits; `mask` as given.
        unsafe { serve_now(&waits, mask) };
        let (held, h_n) = held_of(regs);
        // SAFETY: `look` and `evs`/`max` are the caller's.
        return unsafe { report_held(epfd, &held[..h_n], evs, max, &look) };
    }
    if k == 0 {
        ddp_user::release_lazy();
        return cvt(block(timeout));
    }
    // A look without waiting first (it also validates the caller's arguments).
    let r = cvt(look(max))?;
    if r > 0 {
        // Input waiting on the TCP fds is served too: an fd that is always ready (EPOLLOUT)
        // must not keep it waiting (the fds stay with this thread while it comes back). The
        // kernel's entries of the sockets served are then a look too early: each gets what
        // its fd shows now, and held data is added, so that an entry says what a TCP
        // socket's would (EPOLLIN|EPOLLOUT, not EPOLLOUT alone with the input just in).
        // SAFETY: as above.
        let served = unsafe { serve_now(&waits, mask) };
        if served.any {
            // SAFETY: the kernel took `evs`/`max` and wrote `r` entries.
            unsafe { refresh_served(evs, r, &waits, &served) };
        }
        if served.held {
            let (held, h_n) = held_of(regs);
            // SAFETY: as above.
            return Ok(unsafe { add_held(epfd, &held[..h_n], evs, max, r) });
        }
        return Ok(r);
    }
    ddp_user::release_lazy_besides(waits[..k].iter().flatten().map(|w| &w.0));
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
        for (j, w) in waits[..k].iter().flatten().enumerate() {
            set[1 + j] = with_fin(tcp_entry(&w.0));
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
        let mut held = false;
        for (j, w) in waits[..k].iter().flatten().enumerate() {
            if set[1 + j].revents != 0 {
                w.0.reported(set[1 + j].revents);
                if w.1 {
                    held |= w.0.service();
                } else {
                    w.0.service_plain();
                }
                again = true;
            }
        }
        if again {
            let (held, h_n) = if held {
                held_of(regs)
            } else {
                Default::default()
            };
            if h_n > 0 {
                // SAFETY: as above.
                return unsafe { report_held(epfd, &held[..h_n], evs, max, &look) };
            }
            let r = cvt(look(max))?;
            if r > 0 {
                return Ok(r);
            }
        }
        if r == 0 || left.is_some_and(|l| l.is_zero()) {
            return Ok(0);
        }
    }
}

/// The epoll group of `epfd`, if it watches many DDP sockets (and the group is this
/// process's).
fn big_group(epfd: c_int) -> Option<std::sync::Arc<ddp_user::EpollGroup>> {
    let h = hints()?;
    let g = h
        .iter()
        .find(|e| e.epfd == epfd)?
        .big
        .as_ref()?
        .group
        .clone()?;
    g.usable().then_some(g)
}

/// The sockets of `epfd`'s group that hold data for their reader now (edge-triggered ones
/// only if more arrived since they were last reported); those that no longer hold any leave
/// the pending list.
fn group_held(epfd: c_int) -> Vec<Held> {
    let mut regs = Vec::new();
    if let Some(h) = hints()
        && let Some(b) = h
            .iter()
            .find(|e| e.epfd == epfd)
            .and_then(|e| e.big.as_ref())
    {
        regs.extend(
            b.pending
                .iter()
                .filter_map(|id| b.by_sock.get(id).and_then(|fd| b.regs.get(fd)))
                .copied(),
        );
    }
    if regs.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut gone = Vec::new();
    for reg in regs {
        match reg_socket(&reg).and_then(|s| s.epoll_held()) {
            Some(h) if reg.events & libc::EPOLLET as u32 == 0 || h.rx != reg.seen_rx => {
                out.push(Held::new(reg, h));
            }
            Some(_) => {}
            None => gone.push(reg.sock),
        }
    }
    if !gone.is_empty()
        && let Some(mut h) = hints()
        && let Some(b) = h
            .iter_mut()
            .find(|e| e.epfd == epfd)
            .and_then(|e| e.big.as_mut())
    {
        b.pending.retain(|id| !gone.contains(id));
    }
    out
}

/// `epoll_wait` on an epoll fd with an epoll group ([`ddp_user::EpollGroup`]): the calling
/// thread waits on the epoll fd and the group's shadow together and serves the input the
/// shadow reports (up to 64 sockets a round); stream data held for a reader is reported as in
/// [`epoll_inline`] (for sockets registered level- or edge-triggered in this epoll fd only).
/// Results, `EINTR` and errors are the kernel's.
///
/// # Safety
/// As for [`epoll_inline`].
unsafe fn epoll_group_wait(
    epfd: c_int,
    g: &ddp_user::EpollGroup,
    evs: *mut epoll_event,
    max: c_int,
    timeout: Option<core::time::Duration>,
    mask: *const sigset_t,
    look: &impl Fn(c_int) -> c_int,
) -> Result<c_int, Errno> {
    const BATCH: usize = 64;
    let _visit = g.enter();
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    let mut first = true;
    loop {
        // 1. The input the shadow reports, served here.
        let mut ready = [(0u64, 0u32); BATCH];
        let n = g.ready_events(&mut ready);
        let mut ids = [0u64; BATCH];
        for (id, r) in ids.iter_mut().zip(&ready[..n]) {
            *id = r.0;
        }
        if n > 0 {
            let mut hold = [false; BATCH];
            if let Some(h) = hints()
                && let Some(b) = h
                    .iter()
                    .find(|e| e.epfd == epfd)
                    .and_then(|e| e.big.as_ref())
            {
                for (f, id) in hold.iter_mut().zip(&ids[..n]) {
                    *f = b
                        .by_sock
                        .get(id)
                        .and_then(|fd| b.regs.get(fd))
                        .is_some_and(|r| r.holdable())
                        && alone_in(&h, epfd, *id);
                }
            }
            let mut newly = [0u64; BATCH];
            let mut m = 0;
            for (&(id, events), &f) in ready[..n].iter().zip(&hold) {
                if g.service_report(id, f, events) && f {
                    newly[m] = id;
                    m += 1;
                }
            }
            if m > 0
                && let Some(mut h) = hints()
                && let Some(b) = h
                    .iter_mut()
                    .find(|e| e.epfd == epfd)
                    .and_then(|e| e.big.as_mut())
            {
                for id in &newly[..m] {
                    if !b.pending.contains(id) {
                        b.pending.push(*id);
                    }
                }
            }
        }
        // 2. Data held for readers: readable now.
        let held = group_held(epfd);
        if !held.is_empty() {
            // SAFETY: `look` and `evs`/`max` are the caller's.
            return unsafe { report_held(epfd, &held, evs, max, look) };
        }
        // 3. The kernel's events.
        let r = cvt(look(max))?;
        if r > 0 {
            return Ok(r);
        }
        let left = if core::mem::take(&mut first) {
            timeout
        } else {
            deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()))
        };
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(0);
        }
        // 4. Wait for either (data held for other sockets goes where the kernel sees it).
        ddp_user::release_lazy();
        let mut set = [
            pollfd {
                fd: epfd,
                events: libc::POLLIN,
                revents: 0,
            },
            pollfd {
                fd: g.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: our own array of 2 entries; `mask` is null or valid.
        if cvt(unsafe { real_ppoll(set.as_mut_ptr(), 2, left, mask) })? == 0 {
            return Ok(0);
        }
    }
}

/// The waits of an inline `epoll_wait` ([`epoll_inline`]): each socket's, with whether its
/// data may be held for the reader (watched by this epoll fd only), and its registration.
type Waits = [Option<(ddp_user::PollWait, bool, EpollReg)>; MAX_INLINE];

/// Which of an inline `epoll_wait`'s waits [`serve_now`] served.
#[derive(Default)]
struct Served {
    /// By position in the waits that are there.
    which: [bool; MAX_INLINE],
    /// Any of them.
    any: bool,
    /// Stream data is now held for a reader (see [`ddp_user::PollWait::service`]).
    held: bool,
}

/// Serves the input waiting on the TCP fds of `waits` now (one `ppoll` without waiting).
///
/// # Safety
/// `mask` is null or valid.
unsafe fn serve_now(waits: &Waits, mask: *const sigset_t) -> Served {
    let mut served = Served::default();
    let mut set = [pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX_INLINE];
    let mut k = 0;
    for (p, w) in set.iter_mut().zip(waits.iter().flatten()) {
        *p = with_fin(pollfd {
            fd: w.0.tcp_fd(),
            events: w.0.events() & libc::POLLIN,
            revents: 0,
        });
        k += 1;
    }
    if k == 0 {
        return served;
    }
    // SAFETY: our own array of `k` entries; `mask` as the caller says.
    let n = unsafe {
        real_ppoll(
            set.as_mut_ptr(),
            k as nfds_t,
            Some(Default::default()),
            mask,
        )
    };
    if n > 0 {
        for ((p, w), f) in set
            .iter()
            .zip(waits.iter().flatten())
            .zip(&mut served.which)
        {
            if p.revents != 0 {
                w.0.reported(p.revents);
                if w.1 {
                    served.held |= w.0.service();
                } else {
                    w.0.service_plain();
                }
                *f = true;
                served.any = true;
            }
        }
    }
    served
}

/// The kernel's entries (the `r` at `evs`) of the sockets `served` after the kernel wrote
/// them get what their fds show now (a zero-timeout `poll` of each, with the registration's
/// events): the input just served may be in the socketpair. Entries are only added to, never
/// made: a socket the kernel did not report (a one-shot registration used up, an
/// edge-triggered one without an edge) is the kernel's to report when it sees its data, and
/// held data is added by [`add_held`].
///
/// # Safety
/// `evs[..r]` were just written by the kernel.
unsafe fn refresh_served(evs: *mut epoll_event, r: c_int, waits: &Waits, served: &Served) {
    // (what `poll` can be asked: the low bits of an epoll registration, less the flags)
    const POLL_BITS: u32 = 0x7fff;
    for (w, _) in waits
        .iter()
        .flatten()
        .zip(&served.which)
        .filter(|(_, f)| **f)
    {
        let reg = &w.2;
        for i in 0..r as usize {
            // SAFETY: entry `i` of the kernel's `r`, written by it (readable and writable).
            let (p, mut e) = unsafe { (evs.add(i), evs.add(i).read_unaligned()) };
            if e.u64 != reg.data {
                continue;
            }
            let mut q = [pollfd {
                fd: reg.fd,
                events: (reg.events & POLL_BITS) as i16,
                revents: 0,
            }];
            // SAFETY: our own array of one entry.
            if unsafe { real::poll(q.as_mut_ptr(), 1, 0) } == 1
                && q[0].revents & libc::POLLNVAL == 0
            {
                e.events |= q[0].revents as u16 as u32;
                // SAFETY: as above.
                unsafe { p.write_unaligned(e) };
            }
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
            evs,
            max,
            timeout,
            core::ptr::null(),
            |m| real::epoll_wait(epfd, evs, m, 0),
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
            evs,
            max,
            timeout,
            mask,
            |m| real::epoll_wait(epfd, evs, m, 0),
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
            evs,
            max,
            t,
            mask,
            |m| real::epoll_pwait2(epfd, evs, m, &zero, mask),
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
    copy_own(pieces, libc::SYS_process_vm_readv)
}

/// Copies `len` bytes from our own `from` to `to` with `process_vm_writev`: false if `to` is
/// not writable (where a plain write would fault).
fn write_own(to: *mut u8, from: *const u8, len: usize) -> bool {
    copy_own(&[(from.cast_mut(), to, len)], libc::SYS_process_vm_writev)
}

/// `process_vm_readv`/`process_vm_writev` on this process: the first of each piece is the
/// local range, the second the one the kernel checks (read from or written to).
fn copy_own(pieces: &[(*mut u8, *const u8, usize)], call: libc::c_long) -> bool {
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
    // SAFETY: the local iovecs are our own buffers of those lengths; the remote ranges are
    // accessed by the kernel, which checks them.
    let got = unsafe {
        libc::syscall(
            call,
            // (the engine's pid saves a `getpid` system call)
            ddp_user::engine_pid().unwrap_or_else(|| libc::getpid()),
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
    if op != libc::EPOLL_CTL_DEL
        && let Ok(Some(l)) = route::entry_of(h)
        && l.conn().is_none()
    {
        // (a DDP listener watched by a forked child: see `listen::watched`)
        crate::ddp::listen::watched(&l, fd);
    }
    // The kernel accepted it: for ADD/MOD `ev` was read and is valid.
    let e = (op != libc::EPOLL_CTL_DEL && !ev.is_null())
        // SAFETY: see above.
        .then(|| unsafe { ev.read_unaligned() })
        .filter(|e| e.events & libc::EPOLLIN as u32 != 0);
    let sock = route::ddp_socket(h)
        .ok()
        .flatten()
        .and_then(|r| r.conn().map(|c| c.sock.clone()));
    let reg = e.map(|e| EpollReg {
        fd,
        sock: sock.as_ref().map_or(0, |s| s.id()),
        events: e.events,
        data: e.u64,
        seen_rx: 0,
    });
    epoll_hint(epfd, fd, reg, sock.as_ref());
    if e.is_some()
        && let Some(s) = sock
    {
        s.epoll_watched();
    }
    Ok(r)
}
