//! The data calls on a connected DDP socket: every read/recv/write/send variant becomes
//! [`DdpSocket::recv`]/[`DdpSocket::send`] with the caller's flags.
//!
//! - Receive flags: `MSG_PEEK`, `MSG_WAITALL`, `MSG_DONTWAIT` are honoured; `MSG_OOB` fails
//!   with `EINVAL` (as TCP without urgent data), `MSG_TRUNC`/`MSG_ERRQUEUE` with `EOPNOTSUPP`;
//!   others are ignored.
//!   `recvfrom`/`recvmsg` report no address (length 0) and no control data, as TCP does.
//! - Send flags: `MSG_DONTWAIT`, `MSG_NOSIGNAL`; `MSG_OOB` fails with `EOPNOTSUPP` (iWARP
//!   has no urgent data; a warning says so once per process); others
//!   (`MSG_MORE`, `MSG_EOR`, ...) are accepted and ignored. `EPIPE` raises `SIGPIPE` unless
//!   `MSG_NOSIGNAL`, like the kernel. A destination address on a connected stream is
//!   ignored, as TCP does.
//! - `recvmmsg`/`sendmmsg`: one message after the other; after the first, a failure ends the
//!   call with the count so far. `recvmmsg`'s timeout is not applied (as documented for
//!   Linux, it is only checked between messages).
//! - `sendfile` to a DDP socket: reads `in_fd` into a 64 KiB buffer and sends it (from
//!   `*offset` with `pread` if given, else from the file position, which is moved by exactly
//!   the bytes sent); from a DDP socket: `EINVAL`, as Linux for a socket `in_fd`.

use std::io::{IoSlice, IoSliceMut};

use libc::{c_int, c_uint, c_void, iovec, mmsghdr, msghdr, off64_t, size_t, ssize_t};

use ddp_user::DdpSocket;

use crate::errno::Errno;

fn errno(e: ddp_user::Errno) -> Errno {
    Errno(e.0)
}

/// `IOV_MAX`.
const IOV_MAX: c_int = 1024;

/// Validates the caller's iovec array and turns each non-empty entry into `make(base, len)`:
/// `iovcnt` outside `0..=IOV_MAX` is EINVAL, a null array or null base is EFAULT (as the
/// kernel reports them); empty entries are skipped.
///
/// # Safety
/// `iov` is valid for `n` entries.
unsafe fn walk_iovecs<T>(
    iov: *const iovec,
    n: c_int,
    mut make: impl FnMut(*mut u8, usize) -> T,
) -> Result<Vec<T>, Errno> {
    if !(0..=IOV_MAX).contains(&n) {
        return Err(Errno(libc::EINVAL));
    }
    if n > 0 && iov.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        // SAFETY: within the caller's array.
        let v = unsafe { iov.add(i).read() };
        if v.iov_len == 0 {
            continue;
        }
        if v.iov_base.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        out.push(make(v.iov_base.cast::<u8>(), v.iov_len));
    }
    Ok(out)
}

/// The caller's iovecs as slices.
///
/// # Safety
/// `iov` is valid for `n` entries, each describing memory valid for reads and writes.
unsafe fn slices_mut<'a>(iov: *const iovec, n: c_int) -> Result<Vec<IoSliceMut<'a>>, Errno> {
    // SAFETY: the caller's array and buffers (see above).
    unsafe {
        walk_iovecs(iov, n, |p, len| {
            IoSliceMut::new(core::slice::from_raw_parts_mut(p, len))
        })
    }
}

/// # Safety
/// As [`slices_mut`], for reads.
unsafe fn slices<'a>(iov: *const iovec, n: c_int) -> Result<Vec<IoSlice<'a>>, Errno> {
    // SAFETY: the caller's array and buffers (see above).
    unsafe {
        walk_iovecs(iov, n, |p, len| {
            IoSlice::new(core::slice::from_raw_parts(p, len))
        })
    }
}

fn recv_flags(flags: c_int) -> Result<c_int, Errno> {
    if flags & libc::MSG_OOB != 0 {
        return Err(Errno(libc::EINVAL));
    }
    if flags & (libc::MSG_TRUNC | libc::MSG_ERRQUEUE) != 0 {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    Ok(flags & (libc::MSG_PEEK | libc::MSG_WAITALL | libc::MSG_DONTWAIT))
}

fn send_flags(flags: c_int) -> Result<c_int, Errno> {
    if flags & libc::MSG_OOB != 0 {
        oob_refused();
        return Err(Errno(libc::EOPNOTSUPP));
    }
    Ok(flags & (libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL))
}

/// Says once per process why `send(MSG_OOB)` fails (docs/rules.md, "Urgent data").
#[cold]
fn oob_refused() {
    static SAID: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, core::sync::atomic::Ordering::Relaxed) {
        crate::log::warn(format_args!(
            "send(MSG_OOB) on a DDP socket: iWARP carries no urgent data, EOPNOTSUPP; a rule \
             `use tcp tcp_client|tcp_server ADDR:PORT program NAME` keeps this program's sockets \
             plain TCP"
        ));
    }
}

/// Receives into `bufs`.
pub fn recv_slices(
    s: &DdpSocket,
    bufs: &mut [IoSliceMut<'_>],
    flags: c_int,
) -> Result<ssize_t, Errno> {
    let f = recv_flags(flags)?;
    if bufs.is_empty() {
        return Ok(0);
    }
    s.recv(bufs, f).map(|n| n as ssize_t).map_err(errno)
}

/// Sends `bufs`, raising SIGPIPE on EPIPE unless `MSG_NOSIGNAL`.
pub fn send_slices(s: &DdpSocket, bufs: &[IoSlice<'_>], flags: c_int) -> Result<ssize_t, Errno> {
    let f = send_flags(flags)?;
    if bufs.is_empty() {
        return Ok(0);
    }
    match s.send(bufs, f) {
        Ok(n) => Ok(n as ssize_t),
        Err(e) => {
            if e.0 == libc::EPIPE && flags & libc::MSG_NOSIGNAL == 0 {
                // SAFETY: sends SIGPIPE to the calling thread, as the kernel would.
                unsafe {
                    libc::syscall(
                        libc::SYS_tgkill,
                        libc::syscall(libc::SYS_getpid),
                        libc::syscall(libc::SYS_gettid),
                        libc::SIGPIPE,
                    )
                };
            }
            Err(errno(e))
        }
    }
}

/// `read`/`recv`/`recvfrom` into one buffer.
///
/// # Safety
/// `buf` is valid for writes of `n` bytes (or `n` is 0).
pub unsafe fn recv(
    s: &DdpSocket,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
) -> Result<ssize_t, Errno> {
    if n == 0 {
        recv_flags(flags)?;
        return Ok(0);
    }
    if buf.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the caller's buffer.
    let b = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
    recv_slices(s, &mut [IoSliceMut::new(b)], flags)
}

/// `write`/`send`/`sendto` of one buffer.
///
/// # Safety
/// `buf` is valid for reads of `n` bytes (or `n` is 0).
pub unsafe fn send(
    s: &DdpSocket,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
) -> Result<ssize_t, Errno> {
    if n == 0 {
        send_flags(flags)?;
        return Ok(0);
    }
    if buf.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the caller's buffer.
    let b = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), n) };
    send_slices(s, &[IoSlice::new(b)], flags)
}

/// `readv`.
///
/// # Safety
/// As for `readv`.
pub unsafe fn readv(s: &DdpSocket, iov: *const iovec, n: c_int) -> Result<ssize_t, Errno> {
    // SAFETY: the caller's iovecs.
    let mut b = unsafe { slices_mut(iov, n) }?;
    recv_slices(s, &mut b, 0)
}

/// `writev`.
///
/// # Safety
/// As for `writev`.
pub unsafe fn writev(s: &DdpSocket, iov: *const iovec, n: c_int) -> Result<ssize_t, Errno> {
    // SAFETY: the caller's iovecs.
    let b = unsafe { slices(iov, n) }?;
    send_slices(s, &b, 0)
}

/// `recvmsg`.
///
/// # Safety
/// As for `recvmsg`.
pub unsafe fn recvmsg(s: &DdpSocket, msg: *mut msghdr, flags: c_int) -> Result<ssize_t, Errno> {
    if msg.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the caller's msghdr.
    let m = unsafe { &mut *msg };
    let n = c_int::try_from(m.msg_iovlen).map_err(|_| Errno(libc::EMSGSIZE))?;
    // SAFETY: the caller's iovecs.
    let mut b = unsafe { slices_mut(m.msg_iov, n) }?;
    let r = recv_slices(s, &mut b, flags)?;
    m.msg_namelen = 0;
    m.msg_controllen = 0;
    m.msg_flags = 0;
    Ok(r)
}

/// `sendmsg`.
///
/// # Safety
/// As for `sendmsg`.
pub unsafe fn sendmsg(s: &DdpSocket, msg: *const msghdr, flags: c_int) -> Result<ssize_t, Errno> {
    if msg.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: the caller's msghdr.
    let m = unsafe { &*msg };
    let n = c_int::try_from(m.msg_iovlen).map_err(|_| Errno(libc::EMSGSIZE))?;
    // SAFETY: the caller's iovecs.
    let b = unsafe { slices(m.msg_iov, n) }?;
    send_slices(s, &b, flags)
}

/// `recvmmsg` (the timeout is not applied: see the module docs).
///
/// # Safety
/// As for `recvmmsg`.
pub unsafe fn recvmmsg(
    s: &DdpSocket,
    msgs: *mut mmsghdr,
    n: c_uint,
    flags: c_int,
) -> Result<c_int, Errno> {
    let n = n.min(IOV_MAX as c_uint);
    if n > 0 && msgs.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    let mut done = 0;
    for i in 0..n as usize {
        let mut f = flags & !libc::MSG_WAITFORONE;
        if done > 0 && flags & libc::MSG_WAITFORONE != 0 {
            f |= libc::MSG_DONTWAIT;
        }
        // SAFETY: within the caller's array.
        let mm = unsafe { &mut *msgs.add(i) };
        // SAFETY: the caller's msghdr.
        match unsafe { recvmsg(s, &mut mm.msg_hdr, f) } {
            Ok(len) => {
                mm.msg_len = len as c_uint;
                done += 1;
                if len == 0 {
                    break; // EOF
                }
            }
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(done)
}

/// `sendmmsg`.
///
/// # Safety
/// As for `sendmmsg`.
pub unsafe fn sendmmsg(
    s: &DdpSocket,
    msgs: *mut mmsghdr,
    n: c_uint,
    flags: c_int,
) -> Result<c_int, Errno> {
    let n = n.min(IOV_MAX as c_uint);
    if n > 0 && msgs.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    let mut done = 0;
    for i in 0..n as usize {
        // SAFETY: within the caller's array.
        let mm = unsafe { &mut *msgs.add(i) };
        // SAFETY: the caller's msghdr.
        match unsafe { sendmsg(s, &mm.msg_hdr, flags) } {
            Ok(len) => {
                mm.msg_len = len as c_uint;
                done += 1;
            }
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(done)
}

/// `sendfile(out, in_fd, offset, n)` with a DDP socket `out`.
///
/// # Safety
/// `offset` is null or valid.
pub unsafe fn sendfile(
    out: &DdpSocket,
    in_fd: c_int,
    offset: *mut off64_t,
    n: size_t,
) -> Result<ssize_t, Errno> {
    const CHUNK: usize = 64 * 1024;
    let mut pos: off64_t = if offset.is_null() {
        // SAFETY: no pointers (lseek is not interposed).
        let p = unsafe { libc::lseek64(in_fd, 0, libc::SEEK_CUR) };
        if p < 0 {
            return Err(Errno::last());
        }
        p
    } else {
        // SAFETY: the caller's offset.
        unsafe { offset.read() }
    };
    if pos < 0 {
        return Err(Errno(libc::EINVAL));
    }
    let mut buf = vec![0u8; CHUNK.min(n.max(1))];
    let mut sent = 0usize;
    let mut result = Ok(());
    while sent < n {
        let want = (n - sent).min(buf.len());
        // SAFETY: our own buffer; pread is not interposed.
        let got = unsafe { libc::pread64(in_fd, buf.as_mut_ptr().cast(), want, pos) };
        if got < 0 {
            result = Err(Errno::last());
            break;
        }
        if got == 0 {
            break;
        }
        let chunk = &buf[..got as usize];
        let mut off = 0;
        while off < chunk.len() {
            match send_slices(out, &[IoSlice::new(&chunk[off..])], 0) {
                Ok(k) => off += k as usize,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        sent += off;
        pos += off as off64_t;
        if result.is_err() || off < chunk.len() {
            break;
        }
    }
    if offset.is_null() {
        // SAFETY: no pointers.
        unsafe { libc::lseek64(in_fd, pos, libc::SEEK_SET) };
    } else {
        // SAFETY: the caller's offset.
        unsafe { offset.write(pos) };
    }
    match result {
        Err(e) if sent == 0 => Err(e),
        _ => Ok(sent as ssize_t),
    }
}
