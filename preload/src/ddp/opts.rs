//! `setsockopt`/`getsockopt` at level `SOL_DDP` (sockopt_ext.h).
//!
//! Errors, in the order they are checked: `EBADF`/`ENOTSOCK` (not an open socket),
//! `EOPNOTSUPP` (not a TCP socket), `ENOPROTOOPT` (unknown option; setting `DDP_CONN_INFO` or
//! `DDP_PEER_PRIVATE_DATA`), `EFAULT` (null value or length pointer), `EINVAL` (an int option
//! with a length below `sizeof(int)`, a value out of range: flags (`DDP_CRC`, `DDP_MARKERS`,
//! `DDP_MARKERS_ALLOW`, `DDP_ZERO_BASED_TO`, `DDP_MODE`) other than 0/1, `DDP_MPA_REV`
//! other than 1/2, IRD/ORD above 16383 or negative, `DDP_P2P` bits other than `DDP_RTR_*`,
//! a negative `DDP_PD` (ids from 2^31 up are the library's own PDs), `DDP_MPA_TIMEOUT_MS` ≤ 0,
//! private data longer than 512 bytes), `EISCONN` (an option set after the MPA exchange; setting
//! `DDP_MODE` to 1 again on a DDP socket is accepted and does nothing). A `getsockopt` of an int
//! option needs room for an int (`EINVAL`); `DDP_PRIVATE_DATA`, `DDP_PEER_PRIVATE_DATA` and
//! `DDP_CONN_INFO` are truncated to the caller's length, which is set to the bytes written.
//! `DDP_CONN_INFO`/`DDP_PEER_PRIVATE_DATA`: `EOPNOTSUPP` on a socket not in DDP mode,
//! `ENOTCONN` before the MPA exchange completed.
//!
//! The values are kept in the fd's pending state until the MPA exchange; after it,
//! `getsockopt` reports the options the socket was set up with (`DDP_PD`: the PD in use,
//! its own PD's id included); negotiated values are in `DDP_CONN_INFO`.

use core::time::Duration;

use libc::{c_int, c_void, socklen_t};

use ddp_user::Options;
use ddp_user::engine::options::{MAX_IRD_ORD, rtr_from_bits, rtr_to_bits};

use super::entry::{Payload, Ref};
use crate::errno::Errno;

/// `SOL_DDP`.
pub const SOL_DDP: c_int = 0x6578;
/// `DDP_MODE`.
pub const DDP_MODE: c_int = 1;
/// `DDP_CRC`.
pub const DDP_CRC: c_int = 2;
/// `DDP_MARKERS`.
pub const DDP_MARKERS: c_int = 3;
/// `DDP_MPA_REV`.
pub const DDP_MPA_REV: c_int = 4;
/// `DDP_PRIVATE_DATA`.
pub const DDP_PRIVATE_DATA: c_int = 5;
/// `DDP_PEER_PRIVATE_DATA`.
pub const DDP_PEER_PRIVATE_DATA: c_int = 6;
/// `DDP_IRD`.
pub const DDP_IRD: c_int = 7;
/// `DDP_ORD`.
pub const DDP_ORD: c_int = 8;
/// `DDP_P2P`.
pub const DDP_P2P: c_int = 9;
/// `DDP_CONN_INFO`.
pub const DDP_CONN_INFO: c_int = 10;
/// `DDP_PD`.
pub const DDP_PD: c_int = 11;
/// `DDP_ZERO_BASED_TO`.
pub const DDP_ZERO_BASED_TO: c_int = 12;
/// `DDP_MPA_TIMEOUT_MS`.
pub const DDP_MPA_TIMEOUT_MS: c_int = 13;
/// `DDP_MARKERS_ALLOW`.
pub const DDP_MARKERS_ALLOW: c_int = 14;

/// Largest `DDP_PRIVATE_DATA` (RFC 5044).
pub const MAX_PRIVATE_DATA: usize = 512;

fn known(name: c_int) -> bool {
    (DDP_MODE..=DDP_MARKERS_ALLOW).contains(&name)
}

/// The entry of `fd` if it has one, else a check that it is a TCP socket.
fn existing(fd: c_int) -> Result<Option<Ref>, Errno> {
    match Ref::of_fd(fd) {
        Some(r) => Ok(Some(r)),
        None => super::check_tcp(fd).map(|()| None),
    }
}

/// A validated option value.
enum Value {
    Int(c_int),
    Bytes(Vec<u8>),
}

fn flag(v: c_int) -> Result<bool, Errno> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Errno(libc::EINVAL)),
    }
}

fn ird_ord(v: c_int) -> Result<u16, Errno> {
    u16::try_from(v)
        .ok()
        .filter(|&v| v <= MAX_IRD_ORD)
        .ok_or(Errno(libc::EINVAL))
}

/// Applies a set option to `o` (`DDP_MODE` aside).
fn apply(o: &mut Options, name: c_int, v: Value) -> Result<(), Errno> {
    let int = |v: &Value| match v {
        Value::Int(i) => *i,
        Value::Bytes(_) => 0,
    };
    let i = int(&v);
    match name {
        DDP_CRC => o.crc = flag(i)?,
        DDP_MARKERS => o.markers = flag(i)?,
        DDP_MARKERS_ALLOW => o.allow_markers = flag(i)?,
        DDP_MPA_REV => {
            if !(1..=2).contains(&i) {
                return Err(Errno(libc::EINVAL));
            }
            o.mpa_rev = i as u8;
        }
        DDP_PRIVATE_DATA => {
            if let Value::Bytes(b) = v {
                o.private_data = b;
            }
        }
        DDP_IRD => o.ird = ird_ord(i)?,
        DDP_ORD => o.ord = ird_ord(i)?,
        DDP_P2P => {
            let bits = u32::try_from(i).map_err(|_| Errno(libc::EINVAL))?;
            if bits & !7 != 0 {
                return Err(Errno(libc::EINVAL));
            }
            o.p2p = rtr_from_bits(bits);
        }
        DDP_PD => o.pd = u32::try_from(i).map_err(|_| Errno(libc::EINVAL))?,
        DDP_ZERO_BASED_TO => o.zero_based_to = flag(i)?,
        DDP_MPA_TIMEOUT_MS => {
            let ms = u64::try_from(i)
                .ok()
                .filter(|&m| m > 0)
                .ok_or(Errno(libc::EINVAL))?;
            o.mpa_timeout = Duration::from_millis(ms);
        }
        _ => return Err(Errno(libc::ENOPROTOOPT)),
    }
    Ok(())
}

/// `setsockopt(fd, SOL_DDP, name, val, len)`.
///
/// # Safety
/// `val` is null or valid for reads of `len` bytes.
pub unsafe fn set(
    fd: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> Result<c_int, Errno> {
    let existing = existing(fd)?;
    if !known(name) || name == DDP_CONN_INFO || name == DDP_PEER_PRIVATE_DATA {
        return Err(Errno(libc::ENOPROTOOPT));
    }
    let len = len as usize;
    let v = if name == DDP_PRIVATE_DATA {
        if len > MAX_PRIVATE_DATA {
            return Err(Errno(libc::EINVAL));
        }
        if len > 0 && val.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        let mut b = vec![0u8; len];
        if len > 0 {
            // SAFETY: the caller's buffer of `len` bytes.
            unsafe { core::ptr::copy_nonoverlapping(val.cast::<u8>(), b.as_mut_ptr(), len) };
        }
        Value::Bytes(b)
    } else {
        if len < core::mem::size_of::<c_int>() {
            return Err(Errno(libc::EINVAL));
        }
        if val.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: the caller's buffer holds at least an int (unaligned read).
        Value::Int(unsafe { val.cast::<c_int>().read_unaligned() })
    };
    // Validate on a scratch copy first, so a bad value changes nothing.
    let mut scratch = Options::default();
    let mode = match (&v, name) {
        (Value::Int(i), DDP_MODE) => Some(flag(*i)?),
        _ => {
            apply(&mut scratch, name, clone_value(&v))?;
            None
        }
    };
    if let Some(r) = &existing
        && let Payload::Socket(_) = r.payload()
    {
        return if mode == Some(true) {
            Ok(0)
        } else {
            Err(Errno(libc::EISCONN))
        };
    }
    let r = match existing {
        Some(r) => r,
        // (`existing` found it a TCP socket)
        None => super::entry_for_option(fd)?,
    };
    match mode {
        Some(true) => super::set_mode(&r, fd)?,
        Some(false) => {
            if let Some(mut p) = r.pending() {
                p.mode = false;
            }
        }
        None => {
            if let Some(mut p) = r.pending() {
                apply(&mut p.opts, name, v)?;
                if let Some(s) = &p.standin {
                    // (a listener answering in the background: its next exchanges use them)
                    super::listen::options_changed(s, &p);
                }
            }
        }
    }
    Ok(0)
}

fn clone_value(v: &Value) -> Value {
    match v {
        Value::Int(i) => Value::Int(*i),
        Value::Bytes(b) => Value::Bytes(b.clone()),
    }
}

/// An int option value of `o`.
fn int_of(o: &Options, name: c_int) -> c_int {
    match name {
        DDP_CRC => o.crc.into(),
        DDP_MARKERS => o.markers.into(),
        DDP_MARKERS_ALLOW => o.allow_markers.into(),
        DDP_MPA_REV => o.mpa_rev.into(),
        DDP_IRD => o.ird.into(),
        DDP_ORD => o.ord.into(),
        DDP_P2P => rtr_to_bits(o.p2p) as c_int,
        DDP_PD => o.pd as c_int,
        DDP_ZERO_BASED_TO => o.zero_based_to.into(),
        DDP_MPA_TIMEOUT_MS => o.mpa_timeout.as_millis().min(c_int::MAX as u128) as c_int,
        _ => 0,
    }
}

/// `getsockopt(fd, SOL_DDP, name, val, len)`.
///
/// # Safety
/// `val` is null or valid for writes of `*len` bytes; `len` is null or valid.
pub unsafe fn get(
    fd: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> Result<c_int, Errno> {
    let existing = existing(fd)?;
    if !known(name) {
        return Err(Errno(libc::ENOPROTOOPT));
    }
    if len.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: non-null, the caller's socklen_t.
    let cap = unsafe { len.read_unaligned() };
    if (cap as i32) < 0 {
        return Err(Errno(libc::EINVAL));
    }
    let cap = cap as usize;
    if val.is_null() && cap > 0 {
        return Err(Errno(libc::EFAULT));
    }
    let out_bytes = |b: &[u8]| {
        let n = b.len().min(cap);
        if n > 0 {
            // SAFETY: the caller's buffer holds `cap` >= n bytes.
            unsafe { core::ptr::copy_nonoverlapping(b.as_ptr(), val.cast::<u8>(), n) };
        }
        // SAFETY: as above.
        unsafe { len.write_unaligned(n as socklen_t) };
        Ok(0)
    };
    let out_int = |v: c_int| {
        if cap < core::mem::size_of::<c_int>() {
            return Err(Errno(libc::EINVAL));
        }
        // SAFETY: room for an int (unaligned write).
        unsafe { val.cast::<c_int>().write_unaligned(v) };
        // SAFETY: as above.
        unsafe { len.write_unaligned(core::mem::size_of::<c_int>() as socklen_t) };
        Ok(0)
    };
    let conn = existing.as_ref().and_then(|r| r.conn());
    if let Some(c) = conn {
        return match name {
            DDP_MODE => out_int(1),
            DDP_PD => out_int(c.sock.pd() as c_int),
            DDP_PRIVATE_DATA => out_bytes(&c.opts.private_data),
            DDP_PEER_PRIVATE_DATA => match c.sock.peer_private_data() {
                Some(b) => out_bytes(&b),
                None if c.sock.is_connected() => out_bytes(&[]),
                None => Err(Errno(libc::ENOTCONN)),
            },
            DDP_CONN_INFO => {
                let i = c.sock.info().map_err(|e| Errno(e.0))?;
                // SAFETY: ConnInfo is plain old data (repr(C), integers only).
                let b = unsafe {
                    core::slice::from_raw_parts(
                        (&i as *const ddp_user::ConnInfo).cast::<u8>(),
                        core::mem::size_of_val(&i),
                    )
                };
                out_bytes(b)
            }
            _ => out_int(int_of(&c.opts, name)),
        };
    }
    let (opts, mode) = match existing.as_ref().and_then(|r| r.pending()) {
        Some(p) => (p.opts.clone(), p.mode),
        None => (Options::default(), false),
    };
    match name {
        DDP_MODE => out_int(mode.into()),
        DDP_PRIVATE_DATA => out_bytes(&opts.private_data),
        DDP_PEER_PRIVATE_DATA | DDP_CONN_INFO if mode => Err(Errno(libc::ENOTCONN)),
        DDP_PEER_PRIVATE_DATA | DDP_CONN_INFO => Err(Errno(libc::EOPNOTSUPP)),
        _ => out_int(int_of(&opts, name)),
    }
}
