//! The variadic calls: `fcntl`, `fcntl64` and `ioctl`.
//!
//! Stable Rust cannot define C-variadic functions, so the exported symbols are in `shim.c`,
//! which reads the one optional argument as a pointer-sized word (as glibc does) and calls the
//! functions here under the hidden names `exsock_fcntl`, `exsock_fcntl64` and `exsock_ioctl`
//! (hidden aliases made with `global_asm!`, so the version script needs no exceptions and the
//! names are not exported). `F_DUPFD` and `F_DUPFD_CLOEXEC` create fds and so keep the table up
//! to date like `dup` does.

use libc::{c_int, c_ulong, c_void};

use crate::close_dup::tracked_dup;
use crate::errno::{Errno, cvt, ret};
use crate::fdtable::{self, Handle};
use crate::{real, route};

core::arch::global_asm!(
    ".globl exsock_fcntl",
    ".hidden exsock_fcntl",
    ".set exsock_fcntl, {fcntl}",
    ".globl exsock_fcntl64",
    ".hidden exsock_fcntl64",
    ".set exsock_fcntl64, {fcntl64}",
    ".globl exsock_ioctl",
    ".hidden exsock_ioctl",
    ".set exsock_ioctl, {ioctl}",
    fcntl = sym fcntl_entry,
    fcntl64 = sym fcntl64_entry,
    ioctl = sym ioctl_entry,
);

fn is_dupfd(cmd: c_int) -> bool {
    cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC
}

/// `fcntl(fd, cmd, arg)` from the shim.
///
/// # Safety
/// As for libc's `fcntl`.
unsafe extern "C" fn fcntl_entry(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    if !fdtable::any() {
        // SAFETY: the caller's arguments, passed on unchanged.
        return unsafe { real::fcntl(fd, cmd, arg) };
    }
    // SAFETY: as above, through the routing point.
    unsafe { fcntl_in_table(fd, cmd, arg, real::fcntl) }
}

/// `fcntl64(fd, cmd, arg)` from the shim.
///
/// # Safety
/// As for libc's `fcntl64`.
unsafe extern "C" fn fcntl64_entry(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
    if !fdtable::any() {
        // SAFETY: the caller's arguments, passed on unchanged.
        return unsafe { real::fcntl64(fd, cmd, arg) };
    }
    // SAFETY: as above, through the routing point.
    unsafe { fcntl_in_table(fd, cmd, arg, real::fcntl64) }
}

/// The C-convention form of [`tracked_fcntl`], out of line.
///
/// # Safety
/// As for [`tracked_fcntl`].
#[cold]
#[inline(never)]
unsafe fn fcntl_in_table(
    fd: c_int,
    cmd: c_int,
    arg: *mut c_void,
    real: unsafe fn(c_int, c_int, *mut c_void) -> c_int,
) -> c_int {
    // SAFETY: as the caller's contract.
    ret(unsafe { tracked_fcntl(fd, cmd, arg, real) })
}

/// fcntl while the table is in use: dup commands copy the mark; other commands on a marked fd
/// go to [`routed_fcntl`].
///
/// # Safety
/// `real` is libc's fcntl or fcntl64, and the arguments are as for it.
unsafe fn tracked_fcntl(
    fd: c_int,
    cmd: c_int,
    arg: *mut c_void,
    real: unsafe fn(c_int, c_int, *mut c_void) -> c_int,
) -> Result<c_int, Errno> {
    if is_dupfd(cmd) {
        // SAFETY: the caller's arguments (an int in `arg`), passed on unchanged.
        return tracked_dup(fd, |fd| unsafe { real(fd, cmd, arg) });
    }
    match fdtable::lookup_marked(fd) {
        // SAFETY: the caller's arguments, passed on unchanged.
        None => cvt(unsafe { real(fd, cmd, arg) }),
        // SAFETY: as above.
        Some(h) => unsafe { routed_fcntl(h, fd, cmd, arg, real) },
    }
}

/// # Safety
/// As for [`tracked_fcntl`].
unsafe fn routed_fcntl(
    h: Handle,
    fd: c_int,
    cmd: c_int,
    arg: *mut c_void,
    real: unsafe fn(c_int, c_int, *mut c_void) -> c_int,
) -> Result<c_int, Errno> {
    // SAFETY: forwarded unchanged.
    let r = cvt(unsafe { real(fd, cmd, arg) });
    if cmd == libc::F_SETFL {
        // (O_NONBLOCK may have changed: a DDP socket's blocking calls keep it)
        crate::ddp::settings_changed_h(h);
    }
    r
}

/// `ioctl(fd, request, arg)` from the shim.
///
/// # Safety
/// As for libc's `ioctl`.
unsafe extern "C" fn ioctl_entry(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    dispatch!(fd; (fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int;
        pass: real::ioctl(fd, request, arg);
        routed: |h| routed_ioctl(h, fd, request, arg))
}

/// `SIOCOUTQ` (= `TIOCOUTQ`): bytes not yet acknowledged by the peer.
const SIOCOUTQ: c_ulong = libc::TIOCOUTQ as c_ulong;
/// `SIOCOUTQNSD` (linux/sockios.h): bytes not yet sent.
const SIOCOUTQNSD: c_ulong = 0x894b;

/// # Safety
/// As for libc's `ioctl`.
unsafe fn routed_ioctl(
    h: Handle,
    fd: c_int,
    request: c_ulong,
    arg: *mut c_void,
) -> Result<c_int, Errno> {
    // On a connected DDP socket the fd is the engine's socketpair end, which answers
    // FIONREAD/SIOCINQ and FIONBIO right by itself (the received stream is in it, the
    // O_NONBLOCK flag is shared with the engine). The send queue is not: a TCP socket's
    // SIOCOUTQ counts what the peer has not acknowledged, so it is the engine's unsent bytes
    // plus the TCP socket's own (docs/engine.md, "The fd model").
    if matches!(request, SIOCOUTQ | SIOCOUTQNSD)
        && let Some(r) = route::ddp_socket(h)?
        && let Some(c) = r.conn()
    {
        let n = c
            .sock
            .out_queue(request == SIOCOUTQNSD)
            .map_err(|e| Errno(e.0))?;
        if arg.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: for these requests `arg` points to the caller's int (as for the kernel,
        // which would fault on a bad pointer: the caller's contract).
        unsafe {
            arg.cast::<c_int>()
                .write_unaligned(n.min(c_int::MAX as usize) as c_int)
        };
        return Ok(0);
    }
    if request == libc::FIONREAD as c_ulong {
        // Stream data the engine holds back for a reader told by poll that the fd is readable
        // (ddp_user::PollWait::service) goes into the socketpair first, so that it counts.
        ddp_user::flush_held();
    }
    // A DDP listener's socket requests go to its TCP listener (`FIONBIO` stays with the
    // stand-in, on which `accept` blocks).
    let target = match route::entry_of(h)? {
        Some(r) if request != libc::FIONBIO as c_ulong && r.conn().is_none() => {
            crate::ddp::listen::socket_fd(&r, fd)
        }
        _ => fd,
    };
    // SAFETY: forwarded unchanged.
    let r = cvt(unsafe { real::ioctl(target, request, arg) });
    if request == libc::FIONBIO as c_ulong {
        // (a DDP socket's blocking calls keep O_NONBLOCK)
        crate::ddp::settings_changed_h(h);
    }
    r
}
