//! `EXSOCK_LOG`: diagnostics that never re-enter the hooks.
//!
//! `EXSOCK_LOG=debug` logs every socket the library sees (creation, bind, listen, accept,
//! connect, shutdown, and the close of a socket in the fd table) to stderr;
//! `EXSOCK_LOG=debug:/path` appends to a file instead. Any other value, or none, logs nothing.
//!
//! A line is formatted with `core::fmt` into a fixed stack buffer (cut at 512 bytes, never
//! allocating) and written with raw `write` system calls, so logging works inside signal
//! handlers, between `fork` and `exec`, and never calls our own `write`. A log file is opened,
//! appended to and closed for every line (raw `openat`/`close`), so the library never holds an
//! fd the application could close or `dup2` over; `O_APPEND` keeps lines from several processes
//! whole. errno is saved and restored around each line.

use core::cell::UnsafeCell;
use core::ffi::CStr;
use core::fmt::{self, Write};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use core::sync::atomic::{AtomicBool, Ordering};

use libc::{c_int, sockaddr, socklen_t};

use crate::errno::ErrnoGuard;

static DEBUG: AtomicBool = AtomicBool::new(false);

const PATH_MAX: usize = 256;

/// The log file path, NUL-terminated (empty: stderr). Written only by [`init`] before
/// [`DEBUG`] is published with release ordering, read only after an acquire load saw it set.
struct LogPath(UnsafeCell<[u8; PATH_MAX]>);

// SAFETY: written once before publication (see above), then only read.
unsafe impl Sync for LogPath {}

static PATH: LogPath = LogPath(UnsafeCell::new([0; PATH_MAX]));

/// Parses an `EXSOCK_LOG` value. Called once, from the constructor.
pub fn init(spec: &CStr) {
    let spec = spec.to_bytes();
    let (level, path) = match spec.iter().position(|&b| b == b':') {
        Some(i) => (&spec[..i], &spec[i + 1..]),
        None => (spec, &b""[..]),
    };
    if level != b"debug" || path.len() >= PATH_MAX {
        return;
    }
    // SAFETY: DEBUG is still false, so no reader looks at PATH yet (see `LogPath`).
    unsafe { (&mut *PATH.0.get())[..path.len()].copy_from_slice(path) };
    DEBUG.store(true, Ordering::Release);
}

/// Whether debug logging is on (one relaxed load; the hooks test it only off the data path).
#[inline(always)]
pub fn enabled() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// Logs one line if debug logging is on.
macro_rules! debug {
    ($($arg:tt)*) => {
        if $crate::log::enabled() {
            $crate::log::emit(format_args!($($arg)*));
        }
    };
}
pub(crate) use debug;

/// A fixed buffer that `core::fmt` writes into; output past its end is dropped.
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Formats and writes one line. Prefer the [`debug!`] macro.
#[cold]
#[inline(never)]
pub fn emit(args: fmt::Arguments<'_>) {
    if !DEBUG.load(Ordering::Acquire) {
        return;
    }
    let _errno = ErrnoGuard::new();
    let mut line = Line {
        buf: [0; 512],
        len: 0,
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) };
    let _ = write!(line, "exsock[{pid}]: {args}");
    let n = line.len.min(line.buf.len() - 1);
    line.buf[n] = b'\n';
    let bytes = &line.buf[..=n];
    // SAFETY: DEBUG was seen set with acquire ordering, so PATH is final.
    let path = unsafe { &*PATH.0.get() };
    if path[0] == 0 {
        write_all(2, bytes);
    } else {
        // SAFETY: `path` is NUL-terminated (PATH_MAX > its length); raw openat, no hooks.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                path.as_ptr(),
                libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
                0o644,
            )
        } as c_int;
        if fd >= 0 {
            write_all(fd, bytes);
            // SAFETY: closes the fd opened just above, with the raw system call.
            unsafe { libc::syscall(libc::SYS_close, fd) };
        }
    }
}

/// A warning (a rule that does not parse, a bad `EXSOCK_*` value): always written, to the
/// `EXSOCK_LOG` destination if logging is on, else to stderr, as `exsock[PID]: warning: ...`.
#[cold]
#[inline(never)]
pub fn warn(args: fmt::Arguments<'_>) {
    if enabled() {
        emit(format_args!("warning: {args}"));
        return;
    }
    let _errno = ErrnoGuard::new();
    let mut line = Line {
        buf: [0; 512],
        len: 0,
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) };
    let _ = write!(line, "exsock[{pid}]: warning: {args}");
    let n = line.len.min(line.buf.len() - 1);
    line.buf[n] = b'\n';
    write_all(2, &line.buf[..=n]);
}

fn write_all(fd: c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid buffer of this length; raw write, no hooks.
        let n = unsafe { libc::syscall(libc::SYS_write, fd, bytes.as_ptr(), bytes.len()) };
        if n <= 0 {
            if n < 0 && crate::errno::Errno::last().0 == libc::EINTR {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// A socket address copied out of the caller's memory, for display.
pub enum Addr {
    /// No address (null pointer or too short).
    None,
    /// IPv4.
    V4(SocketAddrV4),
    /// IPv6.
    V6(SocketAddrV6),
    /// AF_UNIX: path bytes (abstract names start with a NUL, shown as `@`).
    Unix([u8; 108], usize),
    /// Another family, by number.
    Other(c_int),
}

impl Addr {
    /// Copies `len` bytes of address at `p`.
    ///
    /// # Safety
    /// `p` is null or valid for reads of `len` bytes.
    pub unsafe fn read(p: *const sockaddr, len: socklen_t) -> Addr {
        let len = len as usize;
        if p.is_null() || len < 2 {
            return Addr::None;
        }
        // SAFETY: p is valid for at least 2 bytes (sa_family); unaligned reads throughout
        // because the caller's buffer need not be aligned.
        let family = c_int::from(unsafe { core::ptr::addr_of!((*p).sa_family).read_unaligned() });
        match family {
            libc::AF_INET if len >= core::mem::size_of::<libc::sockaddr_in>() => {
                // SAFETY: long enough for a sockaddr_in.
                let a = unsafe { p.cast::<libc::sockaddr_in>().read_unaligned() };
                Addr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                ))
            }
            libc::AF_INET6 if len >= core::mem::size_of::<libc::sockaddr_in6>() => {
                // SAFETY: long enough for a sockaddr_in6.
                let a = unsafe { p.cast::<libc::sockaddr_in6>().read_unaligned() };
                Addr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    u32::from_be(a.sin6_flowinfo),
                    a.sin6_scope_id,
                ))
            }
            libc::AF_UNIX => {
                let n = (len - 2).min(108);
                let mut path = [0u8; 108];
                // SAFETY: `n` bytes after the family field are within `len`.
                unsafe {
                    core::ptr::copy_nonoverlapping(p.cast::<u8>().add(2), path.as_mut_ptr(), n)
                };
                Addr::Unix(path, n)
            }
            f => Addr::Other(f),
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::None => f.write_str("-"),
            Addr::V4(a) => write!(f, "{a}"),
            Addr::V6(a) => write!(f, "{a}"),
            Addr::Unix(path, n) => {
                let path = &path[..*n];
                let (at, path) = match path.first() {
                    Some(0) => ("@", &path[1..]),
                    _ => ("", path),
                };
                let end = if at.is_empty() {
                    path.iter().position(|&b| b == 0).unwrap_or(path.len())
                } else {
                    path.len()
                };
                f.write_str("unix:")?;
                f.write_str(at)?;
                for &b in &path[..end] {
                    if b.is_ascii_graphic() {
                        f.write_char(b as char)?;
                    } else {
                        write!(f, "\\x{b:02x}")?;
                    }
                }
                Ok(())
            }
            Addr::Other(fam) => write!(f, "family {fam}"),
        }
    }
}

/// A socket domain, by name where we know it.
pub struct Domain(pub c_int);

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            libc::AF_UNIX => f.write_str("AF_UNIX"),
            libc::AF_INET => f.write_str("AF_INET"),
            libc::AF_INET6 => f.write_str("AF_INET6"),
            libc::AF_NETLINK => f.write_str("AF_NETLINK"),
            libc::AF_PACKET => f.write_str("AF_PACKET"),
            d => write!(f, "AF_{d}"),
        }
    }
}

/// A socket type with its creation flags.
pub struct SockType(pub c_int);

impl fmt::Display for SockType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        match self.0 & !flags {
            libc::SOCK_STREAM => f.write_str("SOCK_STREAM")?,
            libc::SOCK_DGRAM => f.write_str("SOCK_DGRAM")?,
            libc::SOCK_SEQPACKET => f.write_str("SOCK_SEQPACKET")?,
            libc::SOCK_RAW => f.write_str("SOCK_RAW")?,
            t => write!(f, "type {t}")?,
        }
        if self.0 & libc::SOCK_NONBLOCK != 0 {
            f.write_str("|SOCK_NONBLOCK")?;
        }
        if self.0 & libc::SOCK_CLOEXEC != 0 {
            f.write_str("|SOCK_CLOEXEC")?;
        }
        Ok(())
    }
}

/// A C result with errno for failures: `= 5` or `= -1 (errno 111)`.
pub struct Outcome(pub i64, pub c_int);

impl Outcome {
    /// Captures `rc` and, if it is `-1`, the current errno.
    pub fn of(rc: i64) -> Outcome {
        Outcome(
            rc,
            if rc == -1 {
                crate::errno::Errno::last().0
            } else {
                0
            },
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == -1 {
            write!(f, "-1 (errno {})", self.1)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(d: impl fmt::Display) -> ([u8; 512], usize) {
        let mut l = Line {
            buf: [0; 512],
            len: 0,
        };
        write!(l, "{d}").unwrap();
        (l.buf, l.len)
    }

    #[test]
    fn formats_addresses_without_allocating() {
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as _,
            sin_port: 8080u16.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: a valid sockaddr_in and its size.
        let a = unsafe {
            Addr::read(
                (&sin as *const libc::sockaddr_in).cast(),
                core::mem::size_of_val(&sin) as _,
            )
        };
        let (b, n) = show(a);
        assert_eq!(&b[..n], b"127.0.0.1:8080");
        let (b, n) = show(SockType(libc::SOCK_STREAM | libc::SOCK_CLOEXEC));
        assert_eq!(&b[..n], b"SOCK_STREAM|SOCK_CLOEXEC");
        let (b, n) = show(Outcome(-1, 9));
        assert_eq!(&b[..n], b"-1 (errno 9)");
    }

    #[test]
    fn long_lines_are_cut() {
        let mut l = Line {
            buf: [0; 512],
            len: 0,
        };
        for _ in 0..100 {
            write!(l, "0123456789").unwrap();
        }
        assert_eq!(l.len, 512);
    }
}
