//! Socket-level queries and options: `setsockopt`, `getsockopt`, `getsockname`, `getpeername`.
//!
//! Everything passes through, level `SOL_DDP` included: until the DDP issue defines it, libc
//! answers it as it answers any unknown level (`ENOPROTOOPT`). This is where the DDP issue
//! intercepts `setsockopt(fd, SOL_DDP, DDP_MODE, 1)` and forwards socket-level queries on DDP
//! sockets to their TCP fd.

use libc::{c_int, c_void, sockaddr, socklen_t};

use crate::errno::{Errno, cvt};
use crate::fdtable::Handle;
use crate::real;

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
    dispatch!(fd; (fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int;
        pass: real::setsockopt(fd, level, name, val, len);
        routed: |h| routed_setsockopt(h, fd, level, name, val, len))
}

/// # Safety
/// As for libc's `setsockopt`.
unsafe fn routed_setsockopt(
    _h: Handle,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> Result<c_int, Errno> {
    // SAFETY: forwarded unchanged.
    cvt(unsafe { real::setsockopt(fd, level, name, val, len) })
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
    dispatch!(fd; (fd: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int;
        pass: real::getsockopt(fd, level, name, val, len);
        routed: |h| routed_getsockopt(h, fd, level, name, val, len))
}

/// # Safety
/// As for libc's `getsockopt`.
unsafe fn routed_getsockopt(
    _h: Handle,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> Result<c_int, Errno> {
    // SAFETY: forwarded unchanged.
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
    _h: Handle,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> Result<c_int, Errno> {
    // SAFETY: forwarded unchanged.
    cvt(unsafe { real::getsockname(fd, addr, len) })
}

/// # Safety
/// As for libc's `getpeername`.
unsafe fn routed_getpeername(
    _h: Handle,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> Result<c_int, Errno> {
    // SAFETY: forwarded unchanged.
    cvt(unsafe { real::getpeername(fd, addr, len) })
}
