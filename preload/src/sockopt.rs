//! Socket-level queries and options: `setsockopt`, `getsockopt`, `getsockname`, `getpeername`.
//!
//! Level `SOL_DDP` is answered by the library on any TCP socket ([`crate::ddp::opts`]): that
//! is how a socket is switched to DDP mode. On a connected DDP socket (whose fd is the engine's
//! socketpair end) every other level, `getsockname` and `getpeername` go to the TCP socket;
//! `SO_ERROR` reports the DDP socket's pending error first. Everything else passes through.

use libc::{c_int, c_void, sockaddr, socklen_t};

use crate::ddp::opts::{self, SOL_DDP};
use crate::errno::{Errno, ErrnoGuard, cvt, ret};
use crate::fdtable::Handle;
use crate::log::{Outcome, debug};
use crate::{real, route};

/// `setsockopt(fd, SOL_DDP, ...)`, logged.
///
/// # Safety
/// As for libc's `setsockopt`.
#[cold]
#[inline(never)]
unsafe fn ddp_setsockopt(fd: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int {
    // SAFETY: the caller's arguments.
    let rc = ret(unsafe { opts::set(fd, name, val, len) });
    if crate::log::enabled() {
        let _errno = ErrnoGuard::new();
        let v = if len as usize >= core::mem::size_of::<c_int>()
            && !val.is_null()
            && name != opts::DDP_PRIVATE_DATA
        {
            // SAFETY: an int option the kernel-style checks above found readable.
            Some(unsafe { val.cast::<c_int>().read_unaligned() })
        } else {
            None
        };
        let opt = match name {
            opts::DDP_MODE => "DDP_MODE",
            opts::DDP_CRC => "DDP_CRC",
            opts::DDP_MARKERS => "DDP_MARKERS",
            opts::DDP_MPA_REV => "DDP_MPA_REV",
            opts::DDP_PRIVATE_DATA => "DDP_PRIVATE_DATA",
            opts::DDP_IRD => "DDP_IRD",
            opts::DDP_ORD => "DDP_ORD",
            opts::DDP_P2P => "DDP_P2P",
            opts::DDP_PD => "DDP_PD",
            opts::DDP_ZERO_BASED_TO => "DDP_ZERO_BASED_TO",
            opts::DDP_MPA_TIMEOUT_MS => "DDP_MPA_TIMEOUT_MS",
            _ => "?",
        };
        match v {
            Some(v) => debug!(
                "setsockopt({fd}, SOL_DDP, {opt}({name}), {v}) = {}",
                Outcome::of(rc.into())
            ),
            None => debug!(
                "setsockopt({fd}, SOL_DDP, {opt}({name}), {len} bytes) = {}",
                Outcome::of(rc.into())
            ),
        }
    }
    rc
}

/// `getsockopt(fd, SOL_DDP, ...)`.
///
/// # Safety
/// As for libc's `getsockopt`.
#[cold]
#[inline(never)]
unsafe fn ddp_getsockopt(fd: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's arguments.
    ret(unsafe { opts::get(fd, name, val, len) })
}

/// The fd socket-level calls go to: the TCP socket of a connected DDP socket, the TCP
/// listener of a DDP listener, else `fd`.
fn target(h: Handle, fd: c_int) -> Result<c_int, Errno> {
    Ok(match route::entry_of(h)? {
        Some(r) => match r.conn() {
            Some(c) => c.sock.tcp_fd(),
            None => crate::ddp::listen::socket_fd(&r, fd),
        },
        None => fd,
    })
}

/// `setsockopt(2)`.
///
/// # Safety
/// As for libc's `setsockopt`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    if level == SOL_DDP {
        // SAFETY: the caller's arguments.
        return unsafe { ddp_setsockopt(fd, name, val, len) };
    }
    dispatch!(fd; (fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int;
        pass: real::setsockopt(fd, level, name, val, len);
        routed: |h| routed_setsockopt(h, fd, level, name, val, len))
}

/// # Safety
/// As for libc's `setsockopt`.
unsafe fn routed_setsockopt(
    h: Handle,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> Result<c_int, Errno> {
    let app_fd = fd;
    let fd = target(h, fd)?;
    // SAFETY: forwarded unchanged.
    let r = cvt(unsafe { real::setsockopt(fd, level, name, val, len) });
    if r.is_ok()
        && fd != app_fd
        && level == libc::SOL_SOCKET
        && matches!(name, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO)
        && route::ddp_socket(h)?.is_none()
    {
        // (a DDP listener's `accept` waits on its stand-in: the timeouts go there too)
        // SAFETY: as above, the same arguments.
        let _ = unsafe { real::setsockopt(app_fd, level, name, val, len) };
    }
    if r.is_ok() && level == libc::IPPROTO_TCP && name == libc::TCP_NODELAY {
        // (the engine follows the application's choice of Nagle's algorithm write by write)
        if let Some(r) = route::ddp_socket(h)?
            && let Some(c) = r.conn()
            && !val.is_null()
            && len as usize >= core::mem::size_of::<c_int>()
        {
            // SAFETY: the kernel read an int from `val` just now.
            let v = unsafe { val.cast::<c_int>().read_unaligned() };
            c.sock.app_set_nodelay(v != 0);
        }
    }
    if level == libc::SOL_SOCKET {
        // (`SO_RCVTIMEO`/`SO_SNDTIMEO`, in any of their forms: a DDP socket's blocking calls
        // keep them)
        crate::ddp::settings_changed_h(h);
    }
    r
}

/// `getsockopt(2)`.
///
/// # Safety
/// As for libc's `getsockopt`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    if level == SOL_DDP {
        // SAFETY: the caller's arguments.
        return unsafe { ddp_getsockopt(fd, name, val, len) };
    }
    dispatch!(fd; (fd: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int;
        pass: real::getsockopt(fd, level, name, val, len);
        routed: |h| routed_getsockopt(h, fd, level, name, val, len))
}

/// # Safety
/// As for libc's `getsockopt`.
unsafe fn routed_getsockopt(
    h: Handle,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> Result<c_int, Errno> {
    if let Some(r) = route::ddp_socket(h)?
        && let Some(c) = r.conn()
    {
        if level == libc::SOL_SOCKET && name == libc::SO_ERROR {
            let e = c.sock.take_error();
            if e != 0 {
                if val.is_null() || len.is_null() {
                    return Err(Errno(libc::EFAULT));
                }
                // SAFETY: the caller's length.
                let cap = unsafe { len.read_unaligned() } as usize;
                if cap < core::mem::size_of::<c_int>() {
                    return Err(Errno(libc::EINVAL));
                }
                // SAFETY: room for an int, as checked.
                unsafe {
                    val.cast::<c_int>().write_unaligned(e);
                    len.write_unaligned(core::mem::size_of::<c_int>() as socklen_t);
                }
                return Ok(0);
            }
        }
        if level == libc::IPPROTO_TCP
            && name == libc::TCP_NODELAY
            && let Some(nd) = c.sock.app_nodelay()
        {
            // (the TCP socket's value follows the writes' sizes; the application's is this)
            // SAFETY: the kernel's checks on the caller's buffer and length, first.
            cvt(unsafe { real::getsockopt(c.sock.tcp_fd(), level, name, val, len) })?;
            // SAFETY: the kernel accepted `len` and wrote that many octets (at most an int's)
            // of its value at `val` just now: ours go over them.
            unsafe {
                let n = (len.read_unaligned() as usize).min(core::mem::size_of::<c_int>());
                let v = c_int::from(nd).to_ne_bytes();
                core::ptr::copy_nonoverlapping(v.as_ptr(), val.cast::<u8>(), n);
            }
            return Ok(0);
        }
        // SAFETY: forwarded to the TCP socket.
        return cvt(unsafe { real::getsockopt(c.sock.tcp_fd(), level, name, val, len) });
    }
    let fd = target(h, fd)?;
    // SAFETY: forwarded unchanged (a DDP listener: to its TCP listener).
    cvt(unsafe { real::getsockopt(fd, level, name, val, len) })
}

/// `getsockname(2)`.
///
/// # Safety
/// As for libc's `getsockname`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    dispatch!(fd; (fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
        pass: real::getsockname(fd, addr, len);
        routed: |h| routed_getsockname(h, fd, addr, len))
}

/// `getpeername(2)`.
///
/// # Safety
/// As for libc's `getpeername`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    dispatch!(fd; (fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
        pass: real::getpeername(fd, addr, len);
        routed: |h| routed_getpeername(h, fd, addr, len))
}

/// # Safety
/// As for libc's `getsockname`.
unsafe fn routed_getsockname(
    h: Handle,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> Result<c_int, Errno> {
    let fd = target(h, fd)?;
    // SAFETY: forwarded unchanged (a DDP socket: to its TCP socket).
    cvt(unsafe { real::getsockname(fd, addr, len) })
}

/// # Safety
/// As for libc's `getpeername`.
unsafe fn routed_getpeername(
    h: Handle,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> Result<c_int, Errno> {
    let fd = target(h, fd)?;
    // SAFETY: forwarded unchanged (a DDP socket: to its TCP socket).
    cvt(unsafe { real::getpeername(fd, addr, len) })
}
