//! Raw system calls, and nothing else.
//!
//! ddp-user runs inside `libexsock.so`, which interposes the libc socket and I/O functions
//! (`read`, `write`, `close`, `poll`, ...). Calling them from the engine would re-enter the
//! preload's hooks, so every system call the engine makes goes through this module, which
//! issues it with `libc::syscall` (the raw `syscall(2)` entry point, which nobody interposes).
//! `std::fs`, `std::net`, `std::io` on file descriptors, and `File` drops are never used by
//! the engine. Threads, `Mutex`, `Condvar` and allocation are fine (they do not go through
//! interposed symbols).
//!
//! Conventions: every function returns `Result<_, Errno>`; calls that cannot block (all the
//! engine's data-path calls are made on non-blocking descriptors or with `MSG_DONTWAIT`) are
//! retried on `EINTR`; the waiting calls ([`poll`], [`epoll_wait`]) return `EINTR` to the
//! caller, which decides (a `wait_cq` reports it, the progress thread loops).
//!
//! Only Linux is supported (x86_64 and aarch64 use the same calls here: `ppoll` and
//! `epoll_pwait` exist on both).

use core::fmt;
use core::ptr;
use std::os::fd::RawFd;
use std::time::Duration;

use libc::{c_int, c_long, c_void};

/// An `errno` value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// Operation would block.
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    /// Interrupted by a signal.
    pub const EINTR: Errno = Errno(libc::EINTR);
    /// The connection has ended.
    pub const EPIPE: Errno = Errno(libc::EPIPE);
    /// Bad argument.
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// Not connected (MPA not complete).
    pub const ENOTCONN: Errno = Errno(libc::ENOTCONN);
    /// Not supported on this descriptor.
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    /// Out of memory or STags.
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    /// Timed out.
    pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
    /// Connection reset.
    pub const ECONNRESET: Errno = Errno(libc::ECONNRESET);
    /// Connection refused (also: MPA rejected).
    pub const ECONNREFUSED: Errno = Errno(libc::ECONNREFUSED);
    /// Protocol error (MPA exchange failed).
    pub const EPROTO: Errno = Errno(libc::EPROTO);
    /// Bad file descriptor.
    pub const EBADF: Errno = Errno(libc::EBADF);

    /// The calling thread's current `errno`.
    pub fn last() -> Errno {
        // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
        Errno(unsafe { *libc::__errno_location() })
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            libc::EAGAIN => "EAGAIN",
            libc::EINTR => "EINTR",
            libc::EPIPE => "EPIPE",
            libc::EINVAL => "EINVAL",
            libc::ENOTCONN => "ENOTCONN",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::ENOMEM => "ENOMEM",
            libc::ETIMEDOUT => "ETIMEDOUT",
            libc::ECONNRESET => "ECONNRESET",
            libc::ECONNREFUSED => "ECONNREFUSED",
            libc::EPROTO => "EPROTO",
            libc::EBADF => "EBADF",
            _ => return write!(f, "Errno({})", self.0),
        };
        f.write_str(name)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?} ({})", self.0)
    }
}

impl std::error::Error for Errno {}

/// Shorthand.
pub type Result<T> = core::result::Result<T, Errno>;

fn cvt(ret: c_long) -> Result<usize> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret as usize)
    }
}

/// Retries `f` while it fails with `EINTR`.
fn restart(mut f: impl FnMut() -> c_long) -> Result<usize> {
    loop {
        match cvt(f()) {
            Err(Errno::EINTR) => continue,
            r => return r,
        }
    }
}

/// `CLOCK_MONOTONIC` (the clock `std::time::Instant` reads) in nanoseconds: one vDSO call and
/// integer arithmetic, without `Instant`'s checked `timespec` subtraction (this is read on
/// the latency path: see `Engine::now`).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock` in nanoseconds (`CLOCK_MONOTONIC`, which always exists).
#[inline(always)]
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// The deadline of a wait that may take several kernel waits, on `CLOCK_MONOTONIC`, read
/// once per blocking wait on the latency path. The first kernel wait takes the whole timeout
/// itself (and a kernel wait that times out ends the call); the deadline bounds the waits
/// after a wake-up that ended nothing, which thus end no earlier than the timeout after the
/// deadline was dated. (Until session 47 it was dated on `CLOCK_MONOTONIC_COARSE`, 4 ns to
/// read here against 17 ns, plus one tick for the coarse clock's lag; but on this VM the
/// coarse clock lags by up to 7.8 ms with a 4 ms tick, and `wait_cq(300 ms)` woken by
/// messages that completed nothing returned after 297-298 ms.)
#[derive(Clone, Copy, Debug)]
pub struct Deadline(u64);

impl Deadline {
    /// `t` from now.
    pub fn after(t: Duration) -> Deadline {
        let t = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        Deadline(monotonic_ns().saturating_add(t))
    }

    /// The time left (zero once it has passed).
    pub fn left(self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(monotonic_ns()))
    }
}

/// A `struct iovec` for `len` bytes at `ptr` (read or written by the kernel).
pub fn iovec(ptr: *const u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: ptr as *mut c_void,
        iov_len: len,
    }
}

/// `recvmsg(fd, iov, flags)` without control data or address. One iovec goes as `recvfrom`
/// (the same effect on a stream socket, without the kernel's copy-in of a `msghdr` and an
/// iovec array: measurably cheaper per small message).
pub fn recvmsg(fd: RawFd, iov: &mut [libc::iovec], flags: c_int) -> Result<usize> {
    if let [one] = iov {
        let (ptr, len) = (one.iov_base, one.iov_len);
        // SAFETY: the iovec names memory the caller lent us for writing (their contract);
        // no address is asked for.
        return restart(|| unsafe {
            libc::syscall(libc::SYS_recvfrom, fd, ptr, len, flags, 0usize, 0usize)
        });
    }
    // SAFETY: an all-zero msghdr is a valid "no name, no control" header.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: the iovecs name memory the caller lent us for writing (their contract); the
    // msghdr lives across the call.
    restart(|| unsafe { libc::syscall(libc::SYS_recvmsg, fd, &mut msg as *mut _, flags) })
}

/// `recvmsg(fd, iov, flags)` on a TCP socket with `TCP_INQ` set ([`set_inq_hint`]): also
/// returns what the kernel says is left to read after this read (its `TCP_CM_INQ` control
/// message), or `None` if it sent none (`TCP_INQ` not set, or a kernel without it). One
/// system call where a read and a `FIONREAD` would be two.
pub fn recvmsg_inq(
    fd: RawFd,
    iov: &mut [libc::iovec],
    flags: c_int,
) -> Result<(usize, Option<usize>)> {
    // (u64s: aligned for a `cmsghdr`; room for one `int` message)
    let mut ctl = [0u64; 4];
    // SAFETY: an all-zero msghdr is a valid "no name, no control" header.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    msg.msg_control = ctl.as_mut_ptr().cast();
    msg.msg_controllen = core::mem::size_of_val(&ctl) as _;
    // SAFETY: the iovecs name memory the caller lent us for writing (their contract); the
    // msghdr and its control buffer live across the call.
    let n = restart(|| unsafe { libc::syscall(libc::SYS_recvmsg, fd, &mut msg as *mut _, flags) })?;
    let mut inq = None;
    // SAFETY: the kernel filled `msg_controllen` bytes of `ctl` with well-formed control
    // messages; CMSG_FIRSTHDR/CMSG_NXTHDR stay inside them, and a TCP_CM_INQ message
    // carries one int (read unaligned: CMSG_DATA need not be aligned for it).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_TCP && (*c).cmsg_type == libc::TCP_CM_INQ {
                let v = libc::CMSG_DATA(c).cast::<c_int>().read_unaligned();
                inq = Some(v.max(0) as usize);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n, inq))
}

/// Asks the kernel to say, with every `recvmsg` that has room for it, how many bytes are
/// left to read on this TCP socket (`TCP_INQ`, Linux 4.18; see [`recvmsg_inq`]).
pub fn set_inq_hint(fd: RawFd) -> Result<()> {
    setsockopt(fd, libc::SOL_TCP, libc::TCP_INQ, 1 as c_int)
}

/// `recv(fd, buf, flags)`.
pub fn recv(fd: RawFd, buf: &mut [u8], flags: c_int) -> Result<usize> {
    let mut iov = [iovec(buf.as_mut_ptr(), buf.len())];
    recvmsg(fd, &mut iov, flags)
}

/// `sendmsg(fd, iov, flags | MSG_NOSIGNAL)`: never raises `SIGPIPE`.
pub fn sendmsg(fd: RawFd, iov: &[libc::iovec], flags: c_int) -> Result<usize> {
    let flags = flags | libc::MSG_NOSIGNAL;
    if let [one] = iov {
        let (ptr, len) = (one.iov_base, one.iov_len);
        // SAFETY: the iovec names readable memory (caller's contract); `sendto` without an
        // address (see `recvmsg` for why).
        return restart(|| unsafe {
            libc::syscall(libc::SYS_sendto, fd, ptr, len, flags, 0usize, 0usize)
        });
    }
    // SAFETY: see `recvmsg`.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: the iovecs name readable memory (caller's contract); msghdr lives across the call.
    restart(|| unsafe { libc::syscall(libc::SYS_sendmsg, fd, &msg as *const _, flags) })
}

/// `send(fd, buf, flags | MSG_NOSIGNAL)`.
pub fn send(fd: RawFd, buf: &[u8], flags: c_int) -> Result<usize> {
    sendmsg(fd, &[iovec(buf.as_ptr(), buf.len())], flags)
}

/// `read(fd, buf)`.
pub fn read(fd: RawFd, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: `buf` is writable for its length.
    restart(|| unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) })
}

/// `write(fd, buf)`.
pub fn write(fd: RawFd, buf: &[u8]) -> Result<usize> {
    // SAFETY: `buf` is readable for its length.
    restart(|| unsafe { libc::syscall(libc::SYS_write, fd, buf.as_ptr(), buf.len()) })
}

/// `close(fd)`. Not retried: after `EINTR` the descriptor is gone on Linux.
pub fn close(fd: RawFd) -> Result<()> {
    // SAFETY: plain syscall on an integer.
    cvt(unsafe { libc::syscall(libc::SYS_close, fd) }).map(drop)
}

/// Lets go of the file open at `fd` while keeping the number taken: the eventfd `inert`,
/// which nobody signals or reads, is put in its place (`dup3`, close-on-exec), so that no
/// other open can get the number while code that still holds it runs. The file's other
/// descriptors (and processes) keep it. If `inert` is not an open descriptor (the
/// application closed it), a new eventfd serves.
pub fn retire(fd: RawFd, inert: RawFd) -> Result<()> {
    // SAFETY: plain syscall on integers.
    match cvt(unsafe { libc::syscall(libc::SYS_dup3, inert, fd, libc::O_CLOEXEC) }) {
        Err(Errno::EBADF) => {}
        r => return r.map(drop),
    }
    let inert = eventfd()?;
    // SAFETY: plain syscall on integers.
    let r = cvt(unsafe { libc::syscall(libc::SYS_dup3, inert, fd, libc::O_CLOEXEC) });
    let _ = close(inert);
    r.map(drop)
}

/// The inode number of the file `fd` refers to (`fstat`).
pub fn inode(fd: RawFd) -> Result<u64> {
    // SAFETY: all-zero is a valid `stat`.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `st` is a valid, writable `stat`.
    cvt(unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) })?;
    Ok(st.st_ino)
}

/// Whether the socket `fd` reports a hang-up (`POLLHUP`: for one end of a socketpair, the
/// other end's file was released by every process), without waiting.
pub fn hung_up(fd: RawFd) -> bool {
    let mut p = [libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    }];
    matches!(poll(&mut p, Some(Duration::ZERO)), Ok(1) if p[0].revents & libc::POLLHUP != 0)
}

/// `socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | extra, 0)`.
pub fn socketpair(extra_flags: c_int) -> Result<(RawFd, RawFd)> {
    let mut fds = [-1 as c_int; 2];
    let ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | extra_flags;
    // SAFETY: `fds` has room for the two descriptors.
    cvt(unsafe { libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, ty, 0, fds.as_mut_ptr()) })?;
    Ok((fds[0], fds[1]))
}

/// `socket(domain, ty, 0)`.
pub fn socket(domain: c_int, ty: c_int) -> Result<RawFd> {
    // SAFETY: plain syscall on integers.
    cvt(unsafe { libc::syscall(libc::SYS_socket, domain, ty, 0) }).map(|v| v as RawFd)
}

/// `accept4(fd, NULL, NULL, flags)`.
pub fn accept4(fd: RawFd, flags: c_int) -> Result<RawFd> {
    // SAFETY: no address is asked for.
    restart(|| unsafe { libc::syscall(libc::SYS_accept4, fd, 0usize, 0usize, flags) })
        .map(|v| v as RawFd)
}

/// `connect(fd, addr, len)` to an `AF_UNIX` address (a non-blocking socket: `EAGAIN` when
/// the listener's backlog is full).
pub fn connect(fd: RawFd, addr: &libc::sockaddr_un, len: libc::socklen_t) -> Result<()> {
    // SAFETY: `addr` is a valid sockaddr_un of at least `len` bytes (callers pass its size or
    // the length the kernel gave for it).
    cvt(unsafe {
        libc::syscall(
            libc::SYS_connect,
            fd,
            addr as *const libc::sockaddr_un,
            len.min(core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t),
        )
    })
    .map(drop)
}

/// `sendmsg` of `buf` with one descriptor (`SCM_RIGHTS`), non-blocking, no `SIGPIPE`.
pub fn send_with_fd(fd: RawFd, buf: &[u8], pass: RawFd) -> Result<usize> {
    #[repr(C)]
    struct Cmsg {
        hdr: libc::cmsghdr,
        fd: c_int,
    }
    // SAFETY: all-zero is a valid cmsghdr/msghdr.
    let mut c: Cmsg = unsafe { core::mem::zeroed() };
    // SAFETY: CMSG_LEN is a pure computation.
    c.hdr.cmsg_len = unsafe { libc::CMSG_LEN(core::mem::size_of::<c_int>() as u32) } as _;
    c.hdr.cmsg_level = libc::SOL_SOCKET;
    c.hdr.cmsg_type = libc::SCM_RIGHTS;
    c.fd = pass;
    let mut iov = [iovec(buf.as_ptr(), buf.len())];
    // SAFETY: see above.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = 1;
    msg.msg_control = (&mut c as *mut Cmsg).cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(core::mem::size_of::<c_int>() as u32) } as _;
    debug_assert!(msg.msg_controllen as usize <= core::mem::size_of::<Cmsg>());
    let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
    // SAFETY: msghdr, iovec and control buffer live across the call.
    restart(|| unsafe { libc::syscall(libc::SYS_sendmsg, fd, &msg as *const _, flags) })
}

/// `recvmsg` into `buf` (non-blocking), with the descriptor an `SCM_RIGHTS` message carries
/// (close-on-exec); any further descriptors are closed.
pub fn recv_with_fd(fd: RawFd, buf: &mut [u8]) -> Result<(usize, Option<RawFd>)> {
    let mut control = [0u64; 8];
    let mut iov = [iovec(buf.as_mut_ptr(), buf.len())];
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = core::mem::size_of_val(&control) as _;
    let flags = libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC;
    // SAFETY: msghdr, iovec and control buffer live across the call.
    let n = restart(|| unsafe { libc::syscall(libc::SYS_recvmsg, fd, &mut msg as *mut _, flags) })?;
    let mut got = None;
    // SAFETY: walking the control buffer the kernel filled, with the libc macros.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(&msg);
        while !cm.is_null() {
            if (*cm).cmsg_level == libc::SOL_SOCKET && (*cm).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cm).cast::<c_int>();
                let count = ((*cm).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / core::mem::size_of::<c_int>();
                for i in 0..count {
                    let f = data.add(i).read_unaligned();
                    if got.is_none() {
                        got = Some(f);
                    } else {
                        let _ = close(f);
                    }
                }
            }
            cm = libc::CMSG_NXTHDR(&msg, cm);
        }
    }
    Ok((n, got))
}

/// `fcntl(fd, cmd, arg)` with an integer argument.
pub fn fcntl(fd: RawFd, cmd: c_int, arg: c_long) -> Result<usize> {
    // SAFETY: integer-argument fcntl commands only.
    restart(|| unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) })
}

/// Sets or clears `O_NONBLOCK` on `fd`.
pub fn set_nonblocking(fd: RawFd, on: bool) -> Result<()> {
    let fl = fcntl(fd, libc::F_GETFL, 0)? as c_long;
    let nb = libc::O_NONBLOCK as c_long;
    let new = if on { fl | nb } else { fl & !nb };
    if new != fl {
        fcntl(fd, libc::F_SETFL, new)?;
    }
    Ok(())
}

/// Whether `O_NONBLOCK` is set on `fd` (shared by every dup of the open file description).
pub fn is_nonblocking(fd: RawFd) -> Result<bool> {
    Ok(fcntl(fd, libc::F_GETFL, 0)? as c_int & libc::O_NONBLOCK != 0)
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, min)`.
pub fn dup_cloexec_at_least(fd: RawFd, min: RawFd) -> Result<RawFd> {
    fcntl(fd, libc::F_DUPFD_CLOEXEC, min as c_long).map(|v| v as RawFd)
}

/// `shutdown(fd, how)`.
pub fn shutdown(fd: RawFd, how: c_int) -> Result<()> {
    // SAFETY: plain syscall on integers.
    cvt(unsafe { libc::syscall(libc::SYS_shutdown, fd, how) }).map(drop)
}

/// `getsockopt` of a plain value.
pub fn getsockopt<T: Copy>(fd: RawFd, level: c_int, name: c_int, init: T) -> Result<T> {
    let mut v = init;
    let mut len = core::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a `T` of `len` bytes, written by the kernel.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_getsockopt,
            fd,
            level,
            name,
            &mut v as *mut T,
            &mut len as *mut libc::socklen_t,
        )
    })?;
    Ok(v)
}

/// `setsockopt` of a plain value.
pub fn setsockopt<T: Copy>(fd: RawFd, level: c_int, name: c_int, v: T) -> Result<()> {
    let len = core::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a readable `T` of `len` bytes.
    cvt(unsafe { libc::syscall(libc::SYS_setsockopt, fd, level, name, &v as *const T, len) })
        .map(drop)
}

/// `eventfd2(0, EFD_CLOEXEC | EFD_NONBLOCK)`.
pub fn eventfd() -> Result<RawFd> {
    // SAFETY: plain syscall on integers.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_eventfd2,
            0,
            libc::EFD_CLOEXEC | libc::EFD_NONBLOCK,
        )
    })
    .map(|v| v as RawFd)
}

/// Adds 1 to an eventfd counter.
pub fn eventfd_signal(fd: RawFd) -> Result<()> {
    write(fd, &1u64.to_ne_bytes()).map(drop)
}

/// Resets an eventfd counter to 0 (non-blocking; `EAGAIN` when it already was 0 is fine).
pub fn eventfd_drain(fd: RawFd) -> Result<()> {
    let mut b = [0u8; 8];
    match read(fd, &mut b) {
        Ok(_) | Err(Errno::EAGAIN) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `epoll_create1(EPOLL_CLOEXEC)`.
pub fn epoll_create() -> Result<RawFd> {
    // SAFETY: plain syscall on integers.
    cvt(unsafe { libc::syscall(libc::SYS_epoll_create1, libc::EPOLL_CLOEXEC) }).map(|v| v as RawFd)
}

/// `epoll_ctl(ep, op, fd, {events, data})`.
pub fn epoll_ctl(ep: RawFd, op: c_int, fd: RawFd, events: u32, data: u64) -> Result<()> {
    let mut ev = libc::epoll_event { events, u64: data };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
    restart(|| unsafe { libc::syscall(libc::SYS_epoll_ctl, ep, op, fd, &mut ev as *mut _) })
        .map(drop)
}

/// `epoll_pwait(ep, events, timeout, NULL)`; `EINTR` is returned to the caller.
pub fn epoll_wait(
    ep: RawFd,
    events: &mut [libc::epoll_event],
    timeout: Option<Duration>,
) -> Result<usize> {
    // SAFETY: a null sigmask means "do not change it".
    unsafe { epoll_pwait_ms(ep, events, timeout, ptr::null()) }
}

/// `epoll_pwait(ep, events, timeout, mask)`, the timeout rounded up to whole milliseconds.
///
/// # Safety
/// `mask` is null or points to a valid signal set.
unsafe fn epoll_pwait_ms(
    ep: RawFd,
    events: &mut [libc::epoll_event],
    timeout: Option<Duration>,
    mask: *const libc::sigset_t,
) -> Result<usize> {
    no_lock_held(timeout);
    // SAFETY: `events` has room for `len` entries; `mask` is null or the caller's valid
    // sigset (the kernel reads `_NSIG / 8` bytes).
    cvt(unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait,
            ep,
            events.as_mut_ptr(),
            events.len() as c_int,
            timeout_ms(timeout),
            mask,
            if mask.is_null() { 0usize } else { 8usize },
        )
    })
}

/// `epoll_pwait2` answered `ENOSYS` once (Linux before 5.11, or under a valgrind that does not
/// know it, such as Debian 12's 3.19): from then on [`epoll_pwait_ts`] takes `epoll_pwait`.
static NO_PWAIT2: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// An epoll wait as `ppoll` takes its arguments: a timeout to the nanosecond (`None`: none)
/// and the caller's signal mask during the wait (null: unchanged); `EINTR` is returned to the
/// caller. `epoll_pwait2`; where it is missing, `epoll_pwait` with the timeout rounded up to
/// whole milliseconds (never shorter than asked).
///
/// # Safety
/// `mask` is null or points to a valid signal set.
pub unsafe fn epoll_pwait_ts(
    ep: RawFd,
    events: &mut [libc::epoll_event],
    timeout: Option<Duration>,
    mask: *const libc::sigset_t,
) -> Result<usize> {
    no_lock_held(timeout);
    use core::sync::atomic::Ordering;
    // (the kernel reads `_NSIG / 8` bytes of the mask)
    let mask_len = if mask.is_null() { 0usize } else { 8usize };
    if !NO_PWAIT2.load(Ordering::Relaxed) {
        let r = with_timespec(timeout, |tsp| {
            // SAFETY: `events` has room for `len` entries; `tsp` is null or a valid
            // timespec; `mask` is null or the caller's valid sigset.
            cvt(unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    ep,
                    events.as_mut_ptr(),
                    events.len() as c_int,
                    tsp,
                    mask,
                    mask_len,
                )
            })
        });
        if r != Err(Errno(libc::ENOSYS)) {
            return r;
        }
        NO_PWAIT2.store(true, Ordering::Relaxed);
    }
    // SAFETY: `mask` as the caller promises.
    unsafe { epoll_pwait_ms(ep, events, timeout, mask) }
}

/// Calls `f` with a timeout as the kernel's `ppoll`/`epoll_pwait2` take it: null for none,
/// else a pointer to a timespec that lives during the call (whole seconds beyond `i64::MAX`
/// are capped).
fn with_timespec<R>(timeout: Option<Duration>, f: impl FnOnce(*const libc::timespec) -> R) -> R {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    f(ts.as_ref()
        .map_or(ptr::null(), |t| t as *const libc::timespec))
}

/// Rounds a timeout up to whole milliseconds (`-1` = none), so that a wait never ends early.
fn timeout_ms(timeout: Option<Duration>) -> c_int {
    match timeout {
        None => -1,
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            ms.min(c_int::MAX as u128) as c_int
        }
    }
}

/// A wait that may block is never made with one of the library's locks held (it would hold
/// the application's signal handlers back for the wait, see [`crate::sigdefer`]): checked in
/// debug builds.
#[inline]
fn no_lock_held(timeout: Option<Duration>) {
    debug_assert!(
        timeout == Some(Duration::ZERO) || crate::sigdefer::depth() == 0,
        "a blocking wait with a library lock held"
    );
}

/// `ppoll(fds, timeout, NULL)`; `EINTR` is returned to the caller.
pub fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> Result<usize> {
    no_lock_held(timeout);
    with_timespec(timeout, |tsp| {
        // SAFETY: `fds` is a valid array of pollfd; `tsp` is null or a valid timespec.
        cvt(unsafe {
            libc::syscall(
                libc::SYS_ppoll,
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                tsp,
                ptr::null::<libc::sigset_t>(),
                0usize,
            )
        })
    })
}

/// Whether a blocking socket call interrupted by a signal handler (`EINTR` from a wait) should
/// be restarted, as the kernel would for `read`/`recv`/`write`/`send` on a TCP socket: only if
/// every signal that currently has a handler was installed with `SA_RESTART` (the interrupting
/// signal is not known here, so one handler without it makes the call fail with `EINTR`, the
/// conservative answer: such a program must handle `EINTR` anyway). Queries every signal with
/// `rt_sigaction(sig, NULL, &old)`: costs ~64 system calls, paid only after an `EINTR`.
pub fn signal_restarts() -> bool {
    #[repr(C)]
    struct KSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let mut old = KSigaction {
            handler: 0,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        // SAFETY: queries only (act = NULL); `old` is a kernel `struct sigaction` of the
        // size given (8-byte signal set).
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                ptr::null::<KSigaction>(),
                &mut old as *mut KSigaction,
                8usize,
            )
        };
        if r != 0 {
            continue;
        }
        let handled = old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN;
        if handled && old.flags & libc::SA_RESTART as u64 == 0 {
            return false;
        }
    }
    true
}

/// Bytes waiting to be read on a socket (`ioctl(FIONREAD)`).
pub fn inq(fd: RawFd) -> Result<usize> {
    let mut n: c_int = 0;
    // SAFETY: FIONREAD writes one int to the pointer given.
    cvt(unsafe { libc::syscall(libc::SYS_ioctl, fd, libc::FIONREAD, &mut n as *mut c_int) })?;
    Ok(n.max(0) as usize)
}

/// An `ioctl` that writes one int (`SIOCOUTQ`, `SIOCOUTQNSD`, ...), as a count.
pub fn ioctl_count(fd: RawFd, request: libc::c_ulong) -> Result<usize> {
    let mut n: c_int = 0;
    // SAFETY: the requests used with this write one int to the pointer given.
    cvt(unsafe { libc::syscall(libc::SYS_ioctl, fd, request, &mut n as *mut c_int) })?;
    Ok(n.max(0) as usize)
}

/// Fills `buf` from `getrandom(2)`.
pub fn getrandom(buf: &mut [u8]) -> Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let rest = &mut buf[at..];
        // SAFETY: `rest` is writable for its length.
        at += restart(|| unsafe {
            libc::syscall(libc::SYS_getrandom, rest.as_mut_ptr(), rest.len(), 0)
        })?;
    }
    Ok(())
}

/// The signals a fault raises on the faulting thread, whose handler must run on the faulting
/// instruction: never blocked in a library thread, never deferred ([`crate::sigdefer`]).
pub const FAULT_SIGNALS: [c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// Starts a library thread (the progress thread, the statistics thread) with every
/// asynchronous signal blocked, so that it never runs the application's signal handlers: a
/// process-directed signal (`SIGALRM` from `setitimer`, `SIGCHLD`, a `kill` of the pid) goes
/// to a thread that does not block it, and a handler on a library thread would run beside the
/// application's own threads (its single-threaded state raced) or interrupt the library while
/// it holds a socket's lock. The faults (`SIGSEGV`, `SIGBUS`, `SIGFPE`, `SIGILL`, `SIGTRAP`,
/// `SIGSYS`) stay deliverable, as to any thread; libc's `pthread_sigmask` keeps its own
/// internal signals (thread cancellation, `setuid` broadcast) open. The mask is set in the
/// calling thread around the spawn (a new thread inherits it), so no signal can reach the new
/// thread before it is blocked; one arriving meanwhile waits for the caller's mask to return.
pub fn spawn_quiet<F>(name: &str, f: F) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    // SAFETY: sigset_t is plain data; sigfillset/sigdelset initialise and edit it.
    let mut block: libc::sigset_t = unsafe { core::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: `block` is a valid sigset_t; the signal numbers are valid.
    unsafe {
        libc::sigfillset(&mut block);
        for s in FAULT_SIGNALS {
            libc::sigdelset(&mut block, s);
        }
    }
    // SAFETY: valid sets; pthread_sigmask is not interposed by the preload.
    let masked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old) } == 0;
    let h = std::thread::Builder::new().name(name.into()).spawn(f);
    if masked {
        // SAFETY: `old` is the mask pthread_sigmask returned above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, ptr::null_mut()) };
    }
    h
}

/// The calling thread's `errno`, raw (saved and restored around work done between an
/// application's calls, see [`crate::sigdefer`]).
pub fn errno() -> c_int {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = e };
}

/// `rt_sigprocmask(how, set, old)` of the calling thread (raw: the full set is taken as
/// given, which libc's `pthread_sigmask` would trim of its own signals); the previous mask in
/// `old` if given.
pub fn sigprocmask(
    how: c_int,
    set: &libc::sigset_t,
    old: Option<&mut libc::sigset_t>,
) -> Result<()> {
    let old = old.map_or(ptr::null_mut(), |o| o as *mut libc::sigset_t);
    // SAFETY: `set` is a valid set; `old` is null or writable; the kernel's set is 8 bytes.
    cvt(unsafe { libc::syscall(libc::SYS_rt_sigprocmask, how, set as *const _, old, 8usize) })
        .map(drop)
}

/// `gettid()`.
pub fn gettid() -> i32 {
    // SAFETY: gettid cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// `rt_tgsigqueueinfo(pid, tid, sig, info)`: `sig` with `info` to thread `tid` of `pid`.
pub fn tgsigqueueinfo(pid: i32, tid: i32, sig: c_int, info: &libc::siginfo_t) -> Result<()> {
    // SAFETY: `info` is a valid siginfo_t the kernel copies.
    cvt(unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, sig, info as *const _) })
        .map(drop)
}

/// `tgkill(pid, tid, sig)`.
pub fn tgkill(pid: i32, tid: i32, sig: c_int) -> Result<()> {
    // SAFETY: plain syscall on integers.
    cvt(unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, sig) }).map(drop)
}

/// `getpid()`.
pub fn getpid() -> i32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// The pending error of a socket (`SO_ERROR`), 0 if none.
pub fn socket_error(fd: RawFd) -> Result<i32> {
    getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, 0 as c_int)
}

/// The effective MSS of a TCP socket (`TCP_MAXSEG`).
pub fn tcp_maxseg(fd: RawFd) -> Result<usize> {
    getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, 0 as c_int).map(|v| v.max(0) as usize)
}

/// A socket timeout (`SO_RCVTIMEO` / `SO_SNDTIMEO`); `None` when not set.
pub fn socket_timeout(fd: RawFd, name: c_int) -> Option<Duration> {
    let tv = getsockopt(
        fd,
        libc::SOL_SOCKET,
        name,
        libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
    )
    .ok()?;
    let d = Duration::new(tv.tv_sec.max(0) as u64, (tv.tv_usec.max(0) as u32) * 1000);
    (!d.is_zero()).then_some(d)
}

/// `SO_LINGER` of a socket: `None` when off, else the linger time (zero: a close resets the
/// connection).
pub fn linger(fd: RawFd) -> Option<Duration> {
    let off = libc::linger {
        l_onoff: 0,
        l_linger: 0,
    };
    let l = getsockopt(fd, libc::SOL_SOCKET, libc::SO_LINGER, off).ok()?;
    (l.l_onoff != 0).then(|| Duration::from_secs(l.l_linger.max(0) as u64))
}

/// `SO_LINGER` off (a close of the socket's last descriptor does not wait).
pub fn linger_off(fd: RawFd) -> Result<()> {
    let off = libc::linger {
        l_onoff: 0,
        l_linger: 0,
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_LINGER, off)
}

/// Aborts a TCP connection at once, the descriptor kept: `connect` with an `AF_UNSPEC`
/// address (`tcp_disconnect`, RFC 793's ABORT) sends a reset and drops what was queued in
/// either direction; threads waiting on the socket are woken.
pub fn disconnect(fd: RawFd) -> Result<()> {
    // SAFETY: all-zero is a valid `sockaddr`; its family is set to AF_UNSPEC below.
    let mut sa: libc::sockaddr = unsafe { core::mem::zeroed() };
    sa.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    let len = core::mem::size_of::<libc::sockaddr>() as libc::socklen_t;
    // SAFETY: `sa` is a readable `sockaddr` of `len` bytes.
    cvt(unsafe { libc::syscall(libc::SYS_connect, fd, &sa as *const libc::sockaddr, len) })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    /// The mask of the calling thread (`how` = SIG_BLOCK with an empty set changes nothing).
    fn mask_now() -> libc::sigset_t {
        // SAFETY: plain sets; an empty SIG_BLOCK set leaves the mask as it is.
        unsafe {
            let (mut none, mut cur) = (core::mem::zeroed(), core::mem::zeroed());
            libc::sigemptyset(&mut none);
            assert_eq!(libc::pthread_sigmask(libc::SIG_BLOCK, &none, &mut cur), 0);
            cur
        }
    }

    fn has(set: &libc::sigset_t, sig: c_int) -> bool {
        // SAFETY: a valid set and signal number.
        unsafe { libc::sigismember(set, sig) == 1 }
    }

    /// A library thread blocks the asynchronous signals (so an application's handler never
    /// runs on it), not the faults; the caller's mask is as it was.
    #[test]
    fn quiet_threads_block_asynchronous_signals() {
        let before = mask_now();
        let inner = spawn_quiet("quiet-test", || {
            let m = mask_now();
            assert_eq!(std::thread::current().name(), Some("quiet-test"));
            for s in [
                libc::SIGALRM,
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGCHLD,
                libc::SIGIO,
            ] {
                assert!(has(&m, s), "signal {s} not blocked in a library thread");
            }
            assert!(
                has(&m, libc::SIGRTMIN() + 1),
                "a real-time signal not blocked"
            );
            for s in [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL] {
                assert!(!has(&m, s), "fault signal {s} blocked in a library thread");
            }
        })
        .unwrap()
        .join();
        assert!(inner.is_ok(), "the check in the library thread failed");
        let after = mask_now();
        for s in 1..libc::SIGRTMIN() {
            assert_eq!(
                has(&before, s),
                has(&after, s),
                "the caller's mask changed at {s}"
            );
        }
    }

    /// A deadline never says less than what is left of the time asked, and a passed one says
    /// zero.
    #[test]
    fn deadline_says_what_is_left() {
        let t = Duration::from_millis(100);
        let start = std::time::Instant::now();
        let d = Deadline::after(t);
        let left = d.left();
        let since = start.elapsed();
        assert!(left + since >= t, "left {left:?} after {since:?}");
        assert!(left <= t, "left {left:?}");
        std::thread::sleep(Duration::from_millis(20)); // (time passing is what is checked)
        let later = d.left();
        assert!(
            later + start.elapsed() >= t && later <= t - Duration::from_millis(20),
            "left {later:?} after {:?}",
            start.elapsed()
        );
        assert_eq!(Deadline::after(Duration::ZERO).left(), Duration::ZERO);
        let passed = Deadline(monotonic_ns().saturating_sub(1_000_000_000));
        assert_eq!(passed.left(), Duration::ZERO);
    }

    /// Waits (bounded) until `fd` has `n` bytes to read.
    fn wait_inq(fd: RawFd, n: usize) {
        for _ in 0..5000 {
            if inq(fd).unwrap() >= n {
                return;
            }
            let mut p = [libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }];
            let _ = poll(&mut p, Some(Duration::from_millis(1)));
        }
        panic!("{n} bytes never arrived");
    }

    #[test]
    fn recvmsg_inq_says_what_is_left() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        let fd = rx.as_raw_fd();
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        tx.write_all(&data).unwrap();
        wait_inq(fd, 1000);
        let mut buf = [0u8; 300];
        // Without TCP_INQ the kernel says nothing.
        let mut iov = [iovec(buf.as_mut_ptr(), 100)];
        assert_eq!(recvmsg_inq(fd, &mut iov, 0).unwrap(), (100, None));
        assert_eq!(buf[..100], data[..100]);
        set_inq_hint(fd).unwrap();
        let mut iov = [
            iovec(buf.as_mut_ptr(), 120),
            iovec(buf[120..].as_mut_ptr(), 180),
        ];
        assert_eq!(recvmsg_inq(fd, &mut iov, 0).unwrap(), (300, Some(600)));
        assert_eq!(buf[..], data[100..400]);
        let mut iov = [iovec(buf.as_mut_ptr(), 300)];
        assert_eq!(recvmsg_inq(fd, &mut iov, 0).unwrap(), (300, Some(300)));
        assert_eq!(buf[..], data[400..700]);
        let mut big = [0u8; 600];
        let mut iov = [iovec(big.as_mut_ptr(), 600)];
        assert_eq!(recvmsg_inq(fd, &mut iov, 0).unwrap(), (300, Some(0)));
        assert_eq!(big[..300], data[700..]);
    }
}
