//! Data transfer: `read`, `readv`, `write`, `writev`, `send`, `sendto`, `sendmsg`, `sendmmsg`,
//! `recv`, `recvfrom`, `recvmsg`, `recvmmsg`, `sendfile`, `sendfile64`, and glibc's fortify
//! entry points `__read_chk`, `__recv_chk`, `__recvfrom_chk`.
//!
//! This is the hot path. Each hook is `fdtable::lookup` (one relaxed load of a global while no
//! fd is marked) and a tail call through the real-function slot; errno is whatever libc set.
//! Calls on a connected DDP socket go to [`crate::ddp::io`] (the engine's stream send/receive).
//! The fortify variants take the caller's buffer size as an extra argument: unrouted, they go to
//! glibc's own `_chk` function, which checks it; routed, the check is done here first and fails
//! the way glibc does (`__chk_fail`, an abort).

use libc::{c_int, c_uint, c_void, iovec, mmsghdr, msghdr, off_t, off64_t, size_t, sockaddr};
use libc::{socklen_t, ssize_t, timespec};

use crate::ddp::io as dio;
use crate::errno::{Errno, cvt, ret};
use crate::fdtable::{self, Handle};
use crate::{real, route};

unsafe extern "C" {
    fn __chk_fail() -> !;
}

/// Fails like glibc's fortify checks if `n` exceeds the caller's buffer size.
fn check_len(n: size_t, buflen: size_t) {
    if n > buflen {
        // SAFETY: prints "buffer overflow detected" and aborts; no preconditions.
        unsafe { __chk_fail() }
    }
}

/// Declares one hook: an exported C function that passes its call to libc unless the fd
/// (`route_on`) is marked, and a routed function that sends calls on a connected DDP socket to
/// the engine (`ddp: |s| ...`, with `s` the socket) and forwards the others to libc.
macro_rules! hooks {
    ($(
        $(#[$doc:meta])*
        fn $name:ident / $routed:ident ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty, route_on $fd:ident,
            ddp |$s:ident| $ddp:expr;
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// As for the libc function of the same name.
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            dispatch!($fd; ($($arg: $ty),*) -> $ret;
                pass: real::$name($($arg),*);
                routed: |h| $routed(h, $($arg),*))
        }

        /// The routed form: a connected DDP socket goes to the engine, anything else to libc.
        ///
        /// # Safety
        /// As for the libc function of the same name.
        #[allow(clippy::too_many_arguments, unused_variables)]
        unsafe fn $routed(h: Handle, $($arg: $ty),*) -> Result<$ret, Errno> {
            if let Some(r) = route::ddp_socket(h)?
                && let Some(c) = r.conn()
            {
                let $s = &c.sock;
                // SAFETY: the caller's arguments, as for the libc function.
                return unsafe { $ddp };
            }
            let _forwarding = match route::entry_of(h)? {
                Some(r) => match crate::ddp::wait_setup(&r, h, $fd)? {
                    crate::ddp::Setup::Again => {
                        // (its DDP socket was installed meanwhile)
                        // SAFETY: the caller's arguments, dispatched again.
                        return cvt(unsafe { $name($($arg),*) });
                    }
                    crate::ddp::Setup::Forward(g) => g,
                },
                None => None,
            };
            // SAFETY: forwarded unchanged.
            cvt(unsafe { real::$name($($arg),*) })
        }
    )*};
}

hooks! {
    /// `read(2)`.
    fn read / routed_read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t, route_on fd,
        ddp |s| dio::recv(s, buf, n, 0);
    /// `readv(2)`.
    fn readv / routed_readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t, route_on fd,
        ddp |s| dio::readv(s, iov, n);
    /// `write(2)`.
    fn write / routed_write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t, route_on fd,
        ddp |s| dio::send(s, buf, n, 0);
    /// `writev(2)`.
    fn writev / routed_writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t, route_on fd,
        ddp |s| dio::writev(s, iov, n);
    /// `send(2)`.
    fn send / routed_send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t,
        route_on fd, ddp |s| dio::send(s, buf, n, flags);
    /// `sendto(2)` (the address is ignored on a connected DDP socket, as TCP does).
    fn sendto / routed_sendto(
        fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr,
        len: socklen_t,
    ) -> ssize_t, route_on fd, ddp |s| dio::send(s, buf, n, flags);
    /// `sendmsg(2)`.
    fn sendmsg / routed_sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t,
        route_on fd, ddp |s| dio::sendmsg(s, msg, flags);
    /// `sendmmsg(2)`.
    fn sendmmsg / routed_sendmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int,
        route_on fd, ddp |s| dio::sendmmsg(s, msgs, n, flags);
    /// `recv(2)`.
    fn recv / routed_recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t,
        route_on fd, ddp |s| dio::recv(s, buf, n, flags);
    /// `recvfrom(2)` (no address is reported on a connected DDP socket, as TCP does).
    fn recvfrom / routed_recvfrom(
        fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr,
        len: *mut socklen_t,
    ) -> ssize_t, route_on fd, ddp |s| {
        let r = dio::recv(s, buf, n, flags);
        if r.is_ok() && !addr.is_null() && !len.is_null() {
            len.write_unaligned(0);
        }
        r
    };
    /// `recvmsg(2)`.
    fn recvmsg / routed_recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t,
        route_on fd, ddp |s| dio::recvmsg(s, msg, flags);
    /// `recvmmsg(2)`.
    fn recvmmsg / routed_recvmmsg(
        fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int, timeout: *mut timespec,
    ) -> c_int, route_on fd, ddp |s| dio::recvmmsg(s, msgs, n, flags);
}

/// `sendfile(2)`: routed if either fd is marked.
///
/// # Safety
/// As for libc's `sendfile`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    n: size_t,
) -> ssize_t {
    if fdtable::any() {
        // SAFETY: the caller's arguments, through the routing point.
        return unsafe { sendfile_in_table(out_fd, in_fd, offset.cast(), n) };
    }
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { real::sendfile(out_fd, in_fd, offset, n) }
}

/// `sendfile64`: the same as `sendfile` with a 64-bit offset (identical on LP64).
///
/// # Safety
/// As for libc's `sendfile64`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off64_t,
    n: size_t,
) -> ssize_t {
    if fdtable::any() {
        // SAFETY: the caller's arguments, through the routing point.
        return unsafe { sendfile_in_table(out_fd, in_fd, offset, n) };
    }
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { real::sendfile64(out_fd, in_fd, offset, n) }
}

/// sendfile while the table is in use: routed if either fd is marked.
///
/// # Safety
/// As for libc's `sendfile64`.
#[cold]
#[inline(never)]
unsafe fn sendfile_in_table(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off64_t,
    n: size_t,
) -> ssize_t {
    if fdtable::lookup_marked(out_fd).is_some() || fdtable::lookup_marked(in_fd).is_some() {
        // SAFETY: the caller's arguments, through the routing point.
        ret(unsafe { routed_sendfile(out_fd, in_fd, offset, n) })
    } else {
        // SAFETY: the caller's arguments, passed on unchanged.
        unsafe { real::sendfile64(out_fd, in_fd, offset, n) }
    }
}

/// # Safety
/// As for libc's `sendfile64`.
unsafe fn routed_sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off64_t,
    n: size_t,
) -> Result<ssize_t, Errno> {
    if let Some(h) = fdtable::lookup(in_fd)
        && route::ddp_socket(h)?.is_some()
    {
        return Err(Errno(libc::EINVAL)); // a socket in_fd, as Linux says
    }
    if let Some(h) = fdtable::lookup(out_fd)
        && let Some(r) = route::ddp_socket(h)?
        && let Some(c) = r.conn()
    {
        // SAFETY: the caller's offset.
        return unsafe { dio::sendfile(&c.sock, in_fd, offset, n) };
    }
    // SAFETY: forwarded unchanged.
    cvt(unsafe { real::sendfile64(out_fd, in_fd, offset, n) })
}

/// glibc's fortified `read`.
///
/// # Safety
/// As for glibc's `__read_chk`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    // glibc's own __read_chk checks `buflen` on the ordinary path.
    dispatch!(fd; (fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t;
        pass: real::__read_chk(fd, buf, n, buflen);
        routed: |h| { check_len(n, buflen); routed_read(h, fd, buf, n) })
}

/// glibc's fortified `recv`.
///
/// # Safety
/// As for glibc's `__recv_chk`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    dispatch!(fd; (fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t;
        pass: real::__recv_chk(fd, buf, n, buflen, flags);
        routed: |h| { check_len(n, buflen); routed_recv(h, fd, buf, n, flags) })
}

/// glibc's fortified `recvfrom`.
///
/// # Safety
/// As for glibc's `__recvfrom_chk`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    dispatch!(fd; (
            fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int,
            addr: *mut sockaddr, len: *mut socklen_t,
        ) -> ssize_t;
        pass: real::__recvfrom_chk(fd, buf, n, buflen, flags, addr, len);
        routed: |h| { check_len(n, buflen); routed_recvfrom(h, fd, buf, n, flags, addr, len) })
}
