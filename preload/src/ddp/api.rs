//! The extension API of `sockopt_ext.h`, exported as C functions (`ddp_*` in `exsock.map`).
//!
//! Each function checks the fd (`EBADF` not open, `ENOTSOCK` not a socket, `EOPNOTSUPP` not a
//! DDP socket or an inherited one in a forked child, `ENOTCONN` a DDP socket whose MPA exchange
//! has not completed), its arguments (`EINVAL`: null or misaligned pointers where memory is
//! required, `iovcnt` outside `0..=DDP_MAX_SGE`, negative `max`, unknown flag or access bits,
//! `len` 0), then calls the engine, whose errors pass through (`EAGAIN`, `ENOMEM`, `EPIPE`,
//! ...). Nothing here panics on bad input; memory the caller names is the caller's
//! responsibility (a wild pointer faults, as it would in the kernel's verbs library).

use core::ffi::{CStr, c_char};
use core::time::Duration;
use std::sync::OnceLock;

use libc::{c_int, c_void, iovec, size_t};

use ddp_user::engine::cq::{self, ConnInfo, Wc};
use ddp_user::{DdpSocket, STag};

use super::entry::CallRef;
use super::opts;
use crate::errno::{Errno, cvt, ret};
use crate::real;

/// `DDP_API_VERSION`.
pub const API_VERSION: c_int = 1;
/// `DDP_QUEUE_DEPTH`.
pub const QUEUE_DEPTH: usize = 1024;
/// `DDP_ACCESS_*`.
pub const ACCESS_LOCAL_WRITE: u32 = 0x1;
/// `DDP_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: u32 = 0x2;
/// `DDP_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: u32 = 0x4;

fn errno(e: ddp_user::Errno) -> Errno {
    Errno(e.0)
}

/// The connected DDP socket of `fd`, or the header's error for it.
fn sock_of(fd: c_int) -> Result<CallRef, Errno> {
    if fd < 0 {
        return Err(Errno(libc::EBADF));
    }
    if let Some(r) = crate::fdtable::lookup(fd).and_then(CallRef::from_handle) {
        if r.conn().is_some() {
            return Ok(r);
        }
        let mode = r.pending().is_some_and(|p| p.mode);
        return Err(Errno(if mode {
            libc::ENOTCONN
        } else {
            libc::EOPNOTSUPP
        }));
    }
    // Not ours: say what it is.
    let mut ty: c_int = 0;
    let mut len = core::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: our own int.
    cvt(unsafe {
        real::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut c_int).cast(),
            &mut len,
        )
    })?;
    Err(Errno(libc::EOPNOTSUPP))
}

fn with_sock<T>(fd: c_int, f: impl FnOnce(&DdpSocket) -> Result<T, Errno>) -> Result<T, Errno> {
    let r = sock_of(fd)?;
    let c = r.conn().expect("sock_of returns connected sockets");
    f(&c.sock)
}

/// The caller's SGE list.
///
/// # Safety
/// `iov` is valid for `n` entries when `n` > 0.
unsafe fn sge_list<'a>(iov: *const iovec, n: c_int) -> Result<&'a [iovec], Errno> {
    let n = usize::try_from(n).map_err(|_| Errno(libc::EINVAL))?;
    if n > ddp_user::MAX_SGE {
        return Err(Errno(libc::EINVAL));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() || !iov.cast::<iovec>().is_aligned() {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: the caller's array of `n` iovecs.
    Ok(unsafe { core::slice::from_raw_parts(iov, n) })
}

fn wr_flags(flags: c_int) -> Result<u32, Errno> {
    u32::try_from(flags).map_err(|_| Errno(libc::EINVAL))
}

/// `ddp_reg_mr`.
///
/// # Safety
/// As documented in sockopt_ext.h: the region stays valid until deregistered.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_reg_mr(
    fd: c_int,
    addr: *mut c_void,
    len: size_t,
    access: c_int,
    stag: *mut u32,
) -> c_int {
    ret(with_sock(fd, |s| {
        if stag.is_null() || addr.is_null() || len == 0 {
            return Err(Errno(libc::EINVAL));
        }
        let access = u32::try_from(access).map_err(|_| Errno(libc::EINVAL))?;
        if access & !(ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ) != 0 {
            return Err(Errno(libc::EINVAL));
        }
        // SAFETY: the caller's region (sockopt_ext.h: valid until ddp_dereg_mr).
        let t = unsafe { s.reg_mr(addr.cast(), len, access) }.map_err(errno)?;
        // SAFETY: non-null, the caller's uint32_t.
        unsafe { stag.write_unaligned(t.0) };
        Ok(0)
    }))
}

/// `ddp_dereg_mr`.
///
/// # Safety
/// No pointers.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_dereg_mr(fd: c_int, stag: u32) -> c_int {
    ret(with_sock(fd, |s| {
        s.dereg_mr(STag(stag)).map_err(errno)?;
        Ok(0)
    }))
}

/// `ddp_post_recv`.
///
/// # Safety
/// As documented in sockopt_ext.h (buffers valid until the completion).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_post_recv(
    fd: c_int,
    wr_id: u64,
    iov: *const iovec,
    iovcnt: c_int,
) -> c_int {
    ret(with_sock(fd, |s| {
        // SAFETY: the caller's iovecs.
        let v = unsafe { sge_list(iov, iovcnt) }?;
        // SAFETY: the caller keeps the buffers valid until the completion.
        unsafe { s.post_recv(wr_id, v) }.map_err(errno)?;
        Ok(0)
    }))
}

/// `ddp_post_send`.
///
/// # Safety
/// As documented in sockopt_ext.h (buffers valid until the completion).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_post_send(
    fd: c_int,
    wr_id: u64,
    iov: *const iovec,
    iovcnt: c_int,
    flags: c_int,
) -> c_int {
    ret(with_sock(fd, |s| {
        // SAFETY: the caller's iovecs.
        let v = unsafe { sge_list(iov, iovcnt) }?;
        // SAFETY: the caller keeps the buffers valid until the completion.
        unsafe { s.post_send(wr_id, v, wr_flags(flags)?) }.map_err(errno)?;
        Ok(0)
    }))
}

/// `ddp_post_send_inv`.
///
/// # Safety
/// As documented in sockopt_ext.h (buffers valid until the completion).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_post_send_inv(
    fd: c_int,
    wr_id: u64,
    iov: *const iovec,
    iovcnt: c_int,
    inv_stag: u32,
    flags: c_int,
) -> c_int {
    ret(with_sock(fd, |s| {
        // SAFETY: the caller's iovecs.
        let v = unsafe { sge_list(iov, iovcnt) }?;
        // SAFETY: the caller keeps the buffers valid until the completion.
        unsafe { s.post_send_inv(wr_id, v, STag(inv_stag), wr_flags(flags)?) }.map_err(errno)?;
        Ok(0)
    }))
}

/// `ddp_post_write`.
///
/// # Safety
/// As documented in sockopt_ext.h (buffers valid until the completion).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_post_write(
    fd: c_int,
    wr_id: u64,
    iov: *const iovec,
    iovcnt: c_int,
    rstag: u32,
    rto: u64,
    flags: c_int,
) -> c_int {
    ret(with_sock(fd, |s| {
        // SAFETY: the caller's iovecs.
        let v = unsafe { sge_list(iov, iovcnt) }?;
        // SAFETY: the caller keeps the buffers valid until the completion.
        unsafe { s.post_write(wr_id, v, STag(rstag), rto, wr_flags(flags)?) }.map_err(errno)?;
        Ok(0)
    }))
}

/// `ddp_post_read`.
///
/// # Safety
/// As documented in sockopt_ext.h (buffers valid until the completion).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_post_read(
    fd: c_int,
    wr_id: u64,
    iov: *const iovec,
    iovcnt: c_int,
    rstag: u32,
    rto: u64,
    flags: c_int,
) -> c_int {
    ret(with_sock(fd, |s| {
        // SAFETY: the caller's iovecs.
        let v = unsafe { sge_list(iov, iovcnt) }?;
        // SAFETY: the caller keeps the buffers valid until the completion.
        unsafe { s.post_read(wr_id, v, STag(rstag), rto, wr_flags(flags)?) }.map_err(errno)?;
        Ok(0)
    }))
}

/// The caller's completion array.
///
/// # Safety
/// `wc` is valid for `max` entries when `max` > 0.
unsafe fn wc_out<'a>(wc: *mut c_void, max: c_int) -> Result<&'a mut [Wc], Errno> {
    let n = usize::try_from(max).map_err(|_| Errno(libc::EINVAL))?;
    if n == 0 {
        return Ok(&mut []);
    }
    if wc.is_null() || !wc.cast::<Wc>().is_aligned() {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: `struct ddp_wc` and `Wc` have the same layout; the caller's array of `n`.
    Ok(unsafe { core::slice::from_raw_parts_mut(wc.cast::<Wc>(), n) })
}

/// `ddp_poll`.
///
/// # Safety
/// `wc` is valid for `max` entries.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_poll(fd: c_int, wc: *mut c_void, max: c_int) -> c_int {
    ret(with_sock(fd, |s| {
        // SAFETY: the caller's array.
        let out = unsafe { wc_out(wc, max) }?;
        s.poll_cq(out).map(|n| n as c_int).map_err(errno)
    }))
}

/// `ddp_wait`.
///
/// # Safety
/// `wc` is valid for `max` entries.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_wait(
    fd: c_int,
    wc: *mut c_void,
    max: c_int,
    timeout_ms: c_int,
) -> c_int {
    ret(with_sock(fd, |s| {
        // SAFETY: the caller's array.
        let out = unsafe { wc_out(wc, max) }?;
        let t = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        s.wait_cq(out, t).map(|n| n as c_int).map_err(errno)
    }))
}

/// `ddp_event_fd`.
///
/// # Safety
/// No pointers.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn ddp_event_fd(fd: c_int) -> c_int {
    ret(with_sock(fd, |s| {
        // In a forked child the socket's engine is the parent's: info() says EOPNOTSUPP.
        s.info().map_err(errno)?;
        s.event_fd().map_err(errno)
    }))
}

/// `ddp_version`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn ddp_version() -> c_int {
    API_VERSION
}

/// `ddp_abi_describe`: the library's view of the interface, computed from the Rust
/// definitions (`sockopt-ext-h/test/abi.c` compares it with the header).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn ddp_abi_describe() -> *const c_char {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut s = abi_table().into_bytes();
        s.push(0);
        s
    });
    CStr::from_bytes_with_nul(t)
        .map(CStr::as_ptr)
        .unwrap_or(c"".as_ptr())
}

/// The `name value` lines of [`ddp_abi_describe`].
pub fn abi_table() -> String {
    use core::fmt::Write;
    use core::mem::{align_of, offset_of, size_of};
    let mut s = String::new();
    let mut k = |name: &str, v: i64| {
        let _ = writeln!(s, "{name} {v}");
    };
    let consts: &[(&str, i64)] = &[
        ("SOL_DDP", opts::SOL_DDP.into()),
        ("DDP_MODE", opts::DDP_MODE.into()),
        ("DDP_CRC", opts::DDP_CRC.into()),
        ("DDP_MARKERS", opts::DDP_MARKERS.into()),
        ("DDP_MPA_REV", opts::DDP_MPA_REV.into()),
        ("DDP_PRIVATE_DATA", opts::DDP_PRIVATE_DATA.into()),
        ("DDP_PEER_PRIVATE_DATA", opts::DDP_PEER_PRIVATE_DATA.into()),
        ("DDP_IRD", opts::DDP_IRD.into()),
        ("DDP_ORD", opts::DDP_ORD.into()),
        ("DDP_P2P", opts::DDP_P2P.into()),
        ("DDP_CONN_INFO", opts::DDP_CONN_INFO.into()),
        ("DDP_PD", opts::DDP_PD.into()),
        ("DDP_ZERO_BASED_TO", opts::DDP_ZERO_BASED_TO.into()),
        ("DDP_MPA_TIMEOUT_MS", opts::DDP_MPA_TIMEOUT_MS.into()),
        ("DDP_MARKERS_ALLOW", opts::DDP_MARKERS_ALLOW.into()),
        ("DDP_RTR_WRITE", ddp_user::engine::options::RTR_WRITE.into()),
        ("DDP_RTR_READ", ddp_user::engine::options::RTR_READ.into()),
        ("DDP_RTR_SEND", ddp_user::engine::options::RTR_SEND.into()),
        ("DDP_STATE_CONNECTING", cq::state::CONNECTING.into()),
        ("DDP_STATE_RTS", cq::state::RTS.into()),
        ("DDP_STATE_CLOSING", cq::state::CLOSING.into()),
        ("DDP_STATE_ERROR", cq::state::ERROR.into()),
        ("DDP_STATE_CLOSED", cq::state::CLOSED.into()),
        ("DDP_ACCESS_LOCAL_WRITE", ACCESS_LOCAL_WRITE.into()),
        ("DDP_ACCESS_REMOTE_WRITE", ACCESS_REMOTE_WRITE.into()),
        ("DDP_ACCESS_REMOTE_READ", ACCESS_REMOTE_READ.into()),
        ("DDP_MAX_SGE", ddp_user::MAX_SGE as i64),
        ("DDP_QUEUE_DEPTH", QUEUE_DEPTH as i64),
        ("DDP_SIGNALED", ddp_user::SIGNALED.into()),
        ("DDP_SOLICITED", ddp_user::SOLICITED.into()),
        ("DDP_MORE", ddp_user::MORE.into()),
        ("DDP_WC_SUCCESS", cq::status::SUCCESS.into()),
        ("DDP_WC_FLUSH_ERR", cq::status::FLUSH_ERR.into()),
        ("DDP_WC_LOC_LEN_ERR", cq::status::LOC_LEN_ERR.into()),
        ("DDP_WC_LOC_PROT_ERR", cq::status::LOC_PROT_ERR.into()),
        ("DDP_WC_REM_ACCESS_ERR", cq::status::REM_ACCESS_ERR.into()),
        ("DDP_WC_REM_OP_ERR", cq::status::REM_OP_ERR.into()),
        ("DDP_WC_FATAL_ERR", cq::status::FATAL_ERR.into()),
        ("DDP_WC_OP_SEND", cq::opcode::SEND.into()),
        ("DDP_WC_OP_WRITE", cq::opcode::WRITE.into()),
        ("DDP_WC_OP_READ", cq::opcode::READ.into()),
        ("DDP_WC_OP_RECV", cq::opcode::RECV.into()),
        ("DDP_WC_WITH_INV", cq::WC_WITH_INV.into()),
        ("DDP_WC_SOLICITED", cq::WC_SOLICITED.into()),
        ("DDP_API_VERSION", API_VERSION.into()),
    ];
    for &(n, v) in consts {
        k(n, v);
    }
    macro_rules! fields {
        ($k:ident, $t:ty, $cname:literal: $($f:ident),*) => {
            $k(concat!("sizeof.", $cname), size_of::<$t>() as i64);
            $k(concat!("alignof.", $cname), align_of::<$t>() as i64);
            $(
                $k(concat!("offsetof.", $cname, ".", stringify!($f)), offset_of!($t, $f) as i64);
                $k(
                    concat!("sizeof.", $cname, ".", stringify!($f)),
                    {
                        let v = <$t>::default();
                        core::mem::size_of_val(&v.$f) as i64
                    },
                );
            )*
        };
    }
    fields!(k, ConnInfo, "ddp_conn_info": mpa_rev, crc, markers_tx, markers_rx, p2p, rtr,
        initiator, state, ird, ord, mulpdu, pd, term_layer, term_etype, term_ecode, term_sent,
        reserved0, bytes_tx, bytes_rx, fpdus_tx, fpdus_rx, placed_direct, reserved);
    fields!(k, Wc, "ddp_wc": wr_id, status, opcode, byte_len, flags, inv_stag, vendor_err);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_table_has_layouts() {
        let t = abi_table();
        assert!(t.contains("SOL_DDP 25976\n"));
        assert!(t.contains("sizeof.ddp_conn_info 104\n"));
        assert!(t.contains("offsetof.ddp_conn_info.reserved0 28\n"));
        assert!(t.contains("offsetof.ddp_wc.vendor_err 28\n"));
        assert!(t.contains("sizeof.ddp_conn_info.reserved 32\n"));
    }
}
