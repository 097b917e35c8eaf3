//! The one table of real functions: the libc definitions our exported symbols shadow.
//!
//! Each symbol has one `AtomicUsize` slot. The ELF constructor ([`resolve_all`], called from
//! `lib.rs`) fills every slot with `dlsym(RTLD_NEXT, name)` before `main` runs, so the call path
//! is one relaxed load, one test and an indirect call. A call that arrives before the
//! constructor (another library's constructor, or a thread started by one) resolves its own
//! slot on first use.
//!
//! Two situations must never reach libc through `dlsym`:
//! - **re-entry**: `dlsym` can allocate, and an interposed allocator may call `read`, `write` or
//!   `close`, which land here again while the slot is still empty. A per-thread flag detects
//!   that, and the nested call uses the symbol's *fallback*;
//! - **a symbol the running libc lacks** (`epoll_pwait2` before glibc 2.35, the fortify entry
//!   points in a non-glibc libc): the slot then holds the fallback for good.
//!
//! A fallback does what the libc wrapper does, with a raw system call (so `epoll_pwait2` on a
//! kernel without it fails with `ENOSYS`, as glibc's would). The exceptions are `fork`, which
//! cannot be done right without libc's atfork machinery, and `execv`, `execvp` and `execvpe`
//! (libc's `environ` and `PATH` search), which fail with `ENOSYS`, and the
//! variadic `fcntl`/`fcntl64`/`ioctl`, whose slots are handled by hand below.
//!
//! Resolution saves and restores errno, so it is invisible to the caller. Nothing here
//! allocates, locks or makes a system call once a slot is filled.

#![allow(clippy::missing_safety_doc)]

use core::cell::Cell;
use core::ffi::CStr;
use core::sync::atomic::{AtomicUsize, Ordering};

use libc::{
    c_char, c_int, c_long, c_uint, c_ulong, c_void, epoll_event, fd_set, iovec, mmsghdr, msghdr,
    nfds_t, off_t, off64_t, pid_t, pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t,
    timespec, timeval,
};

use crate::errno::{Errno, ErrnoGuard};

thread_local! {
    /// Set while this thread is inside `dlsym`; nested calls use the fallbacks.
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// `sizeof(sigset_t)` as the kernel wants it (`_NSIG / 8`).
const KERNEL_SIGSET_SIZE: c_long = 8;

unsafe extern "C" {
    /// glibc's fortify failure report: prints "buffer overflow detected" and aborts.
    fn __chk_fail() -> !;
}

/// Looks `name` up with `dlsym(RTLD_NEXT)`. Returns `None` on re-entry or if it is absent.
#[cold]
#[inline(never)]
fn lookup(name: &CStr) -> Option<usize> {
    if RESOLVING.with(|r| r.replace(true)) {
        return None;
    }
    let _errno = ErrnoGuard::new();
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT is valid from code inside a shared object.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    RESOLVING.with(|r| r.set(false));
    (p != 0).then_some(p)
}

/// Fills `slot` with the real function or, if libc lacks it, the fallback; on re-entry returns
/// the fallback without storing it.
#[cold]
#[inline(never)]
fn resolve(slot: &AtomicUsize, name: &CStr, fallback: usize) -> usize {
    match lookup(name) {
        Some(p) => {
            slot.store(p, Ordering::Relaxed);
            p
        }
        None if RESOLVING.with(|r| r.get()) => fallback,
        None => {
            slot.store(fallback, Ordering::Relaxed);
            fallback
        }
    }
}

/// Fails with `e` in the C convention.
fn fail<T: crate::errno::MinusOne>(e: c_int) -> T {
    Errno(e).set();
    T::MINUS_ONE
}

macro_rules! real_fns {
    ($( fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $fallback:block )*) => {
        /// One slot per symbol: 0 = unresolved, otherwise the address to call.
        #[allow(non_upper_case_globals)]
        mod slots {
            use core::sync::atomic::AtomicUsize;
            $( pub(super) static $name: AtomicUsize = AtomicUsize::new(0); )*
        }

        /// Raw-syscall stand-ins, used only on re-entry during resolution or when libc lacks
        /// the symbol.
        mod fallbacks {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[allow(unused_variables, clippy::unnecessary_cast)]
                pub(super) unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $fallback
            )*
        }

        /// First calls (before the constructor): resolve, then call. Out of line, so that the
        /// ordinary path needs no stack frame.
        mod first_call {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[cold]
                #[inline(never)]
                pub(super) unsafe fn $name($($arg: $ty),*) -> $ret {
                    let p = resolve(
                        &slots::$name,
                        // SAFETY: the literal ends with its only NUL.
                        unsafe { CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) },
                        fallbacks::$name as unsafe extern "C" fn($($ty),*) -> $ret as usize,
                    );
                    // SAFETY: `p` is the address of libc's function of this name or of our
                    // fallback, both with exactly this C signature.
                    unsafe {
                        core::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> $ret>(p)($($arg),*)
                    }
                }
            )*
        }

        $(
            /// Calls the real (libc) function of this name.
            #[inline(always)]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                let p = slots::$name.load(Ordering::Relaxed);
                if p == 0 {
                    // SAFETY: the caller's arguments, passed on.
                    return unsafe { first_call::$name($($arg),*) };
                }
                // SAFETY: `p` is the address of libc's function of this name or of our fallback,
                // both with exactly this C signature.
                unsafe {
                    core::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> $ret>(p)($($arg),*)
                }
            }
        )*

        /// Resolves every non-variadic slot (called from the constructor).
        fn resolve_fixed() {
            $(
                if slots::$name.load(Ordering::Relaxed) == 0 {
                    resolve(
                        &slots::$name,
                        // SAFETY: the literal ends with its only NUL.
                        unsafe { CStr::from_bytes_with_nul_unchecked(concat!(stringify!($name), "\0").as_bytes()) },
                        fallbacks::$name as unsafe extern "C" fn($($ty),*) -> $ret as usize,
                    );
                }
            )*
        }
    };
}

/// `libc::syscall` with the result narrowed to the wrapper's return type.
macro_rules! sys {
    ($t:ty; $nr:expr $(, $a:expr)* $(,)?) => {
        // SAFETY: the arguments are the caller's, passed on unchanged to the system call of the
        // same meaning; the kernel validates them (EFAULT, EBADF, ...).
        unsafe { libc::syscall($nr $(, $a)*) as $t }
    };
}

real_fns! {
    fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
        sys!(c_int; libc::SYS_socket, domain, ty, protocol)
    }
    fn socketpair(domain: c_int, ty: c_int, protocol: c_int, sv: *mut c_int) -> c_int {
        sys!(c_int; libc::SYS_socketpair, domain, ty, protocol, sv)
    }
    fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
        sys!(c_int; libc::SYS_bind, fd, addr, len)
    }
    fn listen(fd: c_int, backlog: c_int) -> c_int {
        sys!(c_int; libc::SYS_listen, fd, backlog)
    }
    fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
        sys!(c_int; libc::SYS_accept4, fd, addr, len, 0)
    }
    fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
        sys!(c_int; libc::SYS_accept4, fd, addr, len, flags)
    }
    fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
        sys!(c_int; libc::SYS_connect, fd, addr, len)
    }
    fn shutdown(fd: c_int, how: c_int) -> c_int {
        sys!(c_int; libc::SYS_shutdown, fd, how)
    }
    fn close(fd: c_int) -> c_int {
        sys!(c_int; libc::SYS_close, fd)
    }
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
        sys!(c_int; libc::SYS_close_range, first, last, flags)
    }
    fn closefrom(lowfd: c_int) -> () {
        sys!(c_int; libc::SYS_close_range, lowfd, c_uint::MAX, 0);
    }
    fn dup(fd: c_int) -> c_int {
        sys!(c_int; libc::SYS_dup, fd)
    }
    fn dup2(old: c_int, new: c_int) -> c_int {
        if old == new {
            // dup2 onto itself: succeed iff `old` is open.
            if sys!(c_int; libc::SYS_fcntl, old, libc::F_GETFD) < 0 { -1 } else { new }
        } else {
            sys!(c_int; libc::SYS_dup3, old, new, 0)
        }
    }
    fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
        sys!(c_int; libc::SYS_dup3, old, new, flags)
    }
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
        sys!(ssize_t; libc::SYS_read, fd, buf, n)
    }
    fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
        sys!(ssize_t; libc::SYS_readv, fd, iov, n)
    }
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
        sys!(ssize_t; libc::SYS_write, fd, buf, n)
    }
    fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
        sys!(ssize_t; libc::SYS_writev, fd, iov, n)
    }
    fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
        sys!(ssize_t; libc::SYS_sendto, fd, buf, n, flags, 0usize, 0)
    }
    fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t {
        sys!(ssize_t; libc::SYS_sendto, fd, buf, n, flags, addr, len)
    }
    fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
        sys!(ssize_t; libc::SYS_sendmsg, fd, msg, flags)
    }
    fn sendmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int {
        sys!(c_int; libc::SYS_sendmmsg, fd, msgs, n, flags)
    }
    fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
        sys!(ssize_t; libc::SYS_recvfrom, fd, buf, n, flags, 0usize, 0usize)
    }
    fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t {
        sys!(ssize_t; libc::SYS_recvfrom, fd, buf, n, flags, addr, len)
    }
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
        sys!(ssize_t; libc::SYS_recvmsg, fd, msg, flags)
    }
    fn recvmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int, timeout: *mut timespec) -> c_int {
        sys!(c_int; libc::SYS_recvmmsg, fd, msgs, n, flags, timeout)
    }
    fn sendfile(out_fd: c_int, in_fd: c_int, offset: *mut off_t, n: size_t) -> ssize_t {
        sys!(ssize_t; libc::SYS_sendfile, out_fd, in_fd, offset, n)
    }
    fn sendfile64(out_fd: c_int, in_fd: c_int, offset: *mut off64_t, n: size_t) -> ssize_t {
        sys!(ssize_t; libc::SYS_sendfile, out_fd, in_fd, offset, n)
    }
    fn poll(fds: *mut pollfd, n: nfds_t, timeout_ms: c_int) -> c_int {
        let ts = (timeout_ms >= 0).then(|| timespec {
            tv_sec: (timeout_ms / 1000) as _,
            tv_nsec: ((timeout_ms % 1000) * 1_000_000) as _,
        });
        let tsp = ts.as_ref().map_or(core::ptr::null(), |t| t as *const timespec);
        sys!(c_int; libc::SYS_ppoll, fds, n, tsp, 0usize, KERNEL_SIGSET_SIZE)
    }
    fn ppoll(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t) -> c_int {
        sys!(c_int; libc::SYS_ppoll, fds, n, timeout, mask, KERNEL_SIGSET_SIZE)
    }
    fn select(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *mut timeval) -> c_int {
        if timeout.is_null() {
            return sys!(c_int; libc::SYS_pselect6, n, r, w, e, 0usize, 0usize);
        }
        // SAFETY: a non-null timeout is the caller's valid `struct timeval`.
        let tv = unsafe { &mut *timeout };
        if tv.tv_sec < 0 || !(0..1_000_000).contains(&tv.tv_usec) {
            return fail(libc::EINVAL);
        }
        let mut ts = timespec { tv_sec: tv.tv_sec, tv_nsec: (tv.tv_usec * 1000) as _ };
        let rc = sys!(c_int; libc::SYS_pselect6, n, r, w, e, &mut ts as *mut timespec, 0usize);
        // Linux select reports the time not slept.
        tv.tv_sec = ts.tv_sec;
        tv.tv_usec = (ts.tv_nsec / 1000) as _;
        rc
    }
    fn pselect(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, timeout: *const timespec, mask: *const sigset_t) -> c_int {
        // pselect must not update the caller's timeout: use a copy.
        let mut ts = (!timeout.is_null()).then(|| {
            // SAFETY: a non-null timeout is the caller's valid `struct timespec`.
            unsafe { *timeout }
        });
        let tsp = ts.as_mut().map_or(core::ptr::null_mut(), |t| t as *mut timespec);
        let data: [usize; 2] = [mask as usize, KERNEL_SIGSET_SIZE as usize];
        let datap = if mask.is_null() { core::ptr::null() } else { data.as_ptr() };
        sys!(c_int; libc::SYS_pselect6, n, r, w, e, tsp, datap)
    }
    fn epoll_create(size: c_int) -> c_int {
        if size <= 0 {
            return fail(libc::EINVAL);
        }
        sys!(c_int; libc::SYS_epoll_create1, 0)
    }
    fn epoll_create1(flags: c_int) -> c_int {
        sys!(c_int; libc::SYS_epoll_create1, flags)
    }
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
        sys!(c_int; libc::SYS_epoll_ctl, epfd, op, fd, ev)
    }
    fn epoll_wait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout_ms: c_int) -> c_int {
        sys!(c_int; libc::SYS_epoll_pwait, epfd, evs, max, timeout_ms, 0usize, KERNEL_SIGSET_SIZE)
    }
    fn epoll_pwait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout_ms: c_int, mask: *const sigset_t) -> c_int {
        sys!(c_int; libc::SYS_epoll_pwait, epfd, evs, max, timeout_ms, mask, KERNEL_SIGSET_SIZE)
    }
    fn epoll_pwait2(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: *const timespec, mask: *const sigset_t) -> c_int {
        sys!(c_int; libc::SYS_epoll_pwait2, epfd, evs, max, timeout, mask, KERNEL_SIGSET_SIZE)
    }
    fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int {
        sys!(c_int; libc::SYS_setsockopt, fd, level, name, val, len)
    }
    fn getsockopt(fd: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int {
        sys!(c_int; libc::SYS_getsockopt, fd, level, name, val, len)
    }
    fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
        sys!(c_int; libc::SYS_getsockname, fd, addr, len)
    }
    fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
        sys!(c_int; libc::SYS_getpeername, fd, addr, len)
    }
    fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
        // (libc always has sigaction; this is reached only on re-entry from inside dlsym)
        fail(libc::ENOSYS)
    }
    fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
        Errno(libc::ENOSYS).set();
        libc::SIG_ERR
    }
    fn fork() -> pid_t {
        // Without libc's atfork handlers a child of a threaded program can deadlock in malloc:
        // refuse rather than fork badly. (libc always has fork; this is reached only on
        // re-entry from inside dlsym, which does not fork.)
        fail(libc::ENOSYS)
    }
    fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
        sys!(c_int; libc::SYS_execve, path, argv, envp)
    }
    fn execveat(dirfd: c_int, path: *const c_char, argv: *const *const c_char, envp: *const *const c_char, flags: c_int) -> c_int {
        sys!(c_int; libc::SYS_execveat, dirfd, path, argv, envp, flags)
    }
    fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
        sys!(c_int; libc::SYS_execveat, fd, c"".as_ptr(), argv, envp, libc::AT_EMPTY_PATH)
    }
    fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
        // (needs libc's `environ`; libc always has execv: this is reached only on re-entry
        // from inside dlsym, which does not exec)
        fail(libc::ENOSYS)
    }
    fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
        // (the PATH search is libc's; as for execv)
        fail(libc::ENOSYS)
    }
    fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
        // (as for execvp)
        fail(libc::ENOSYS)
    }
    fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t {
        if n > buflen {
            // SAFETY: reports the overflow and aborts, as glibc's __read_chk does.
            unsafe { __chk_fail() }
        }
        sys!(ssize_t; libc::SYS_read, fd, buf, n)
    }
    fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t {
        if n > buflen {
            // SAFETY: as in __read_chk.
            unsafe { __chk_fail() }
        }
        sys!(ssize_t; libc::SYS_recvfrom, fd, buf, n, flags, 0usize, 0usize)
    }
    fn __recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t {
        if n > buflen {
            // SAFETY: as in __read_chk.
            unsafe { __chk_fail() }
        }
        sys!(ssize_t; libc::SYS_recvfrom, fd, buf, n, flags, addr, len)
    }
    fn __poll_chk(fds: *mut pollfd, n: nfds_t, timeout_ms: c_int, fdslen: size_t) -> c_int {
        if fdslen / core::mem::size_of::<pollfd>() < n as usize {
            // SAFETY: as in __read_chk.
            unsafe { __chk_fail() }
        }
        // SAFETY: same arguments, same contract.
        unsafe { fallbacks::poll(fds, n, timeout_ms) }
    }
    fn __ppoll_chk(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t, fdslen: size_t) -> c_int {
        if fdslen / core::mem::size_of::<pollfd>() < n as usize {
            // SAFETY: as in __read_chk.
            unsafe { __chk_fail() }
        }
        sys!(c_int; libc::SYS_ppoll, fds, n, timeout, mask, KERNEL_SIGSET_SIZE)
    }
}

/// The variadic libc functions, called with their one optional argument.
type FcntlFn = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
type IoctlFn = unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;

/// Slot value meaning "libc lacks it or we are re-entering": use the raw system call.
const MISSING: usize = 1;

static FCNTL: AtomicUsize = AtomicUsize::new(0);
static FCNTL64: AtomicUsize = AtomicUsize::new(0);
static IOCTL: AtomicUsize = AtomicUsize::new(0);

#[inline(always)]
fn variadic_slot(slot: &AtomicUsize, name: &CStr) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        p
    } else {
        resolve(slot, name, MISSING)
    }
}

/// Calls the real `fcntl(fd, cmd, arg)`.
#[inline(always)]
pub unsafe fn fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    match variadic_slot(&FCNTL, c"fcntl") {
        MISSING => sys!(c_int; libc::SYS_fcntl, fd, cmd, arg),
        // SAFETY: `p` is libc's fcntl; its optional argument is read as a pointer-sized word.
        p => unsafe { core::mem::transmute::<usize, FcntlFn>(p)(fd, cmd, arg) },
    }
}

/// Calls the real `fcntl64(fd, cmd, arg)`.
#[inline(always)]
pub unsafe fn fcntl64(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    match variadic_slot(&FCNTL64, c"fcntl64") {
        MISSING => sys!(c_int; libc::SYS_fcntl, fd, cmd, arg),
        // SAFETY: as in `fcntl`.
        p => unsafe { core::mem::transmute::<usize, FcntlFn>(p)(fd, cmd, arg) },
    }
}

/// Calls the real `ioctl(fd, request, arg)`.
#[inline(always)]
pub unsafe fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    match variadic_slot(&IOCTL, c"ioctl") {
        MISSING => sys!(c_int; libc::SYS_ioctl, fd, request, arg),
        // SAFETY: as in `fcntl`.
        p => unsafe { core::mem::transmute::<usize, IoctlFn>(p)(fd, request, arg) },
    }
}

/// Resolves every slot. Called once from the ELF constructor; harmless to repeat.
pub fn resolve_all() {
    resolve_fixed();
    for (slot, name) in [
        (&FCNTL, c"fcntl"),
        (&FCNTL64, c"fcntl64"),
        (&IOCTL, c"ioctl"),
    ] {
        if slot.load(Ordering::Relaxed) == 0 {
            resolve(slot, name, MISSING);
        }
    }
}
