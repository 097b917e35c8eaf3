//! What a marked fd is routed to.
//!
//! The hooks (one file per family of calls) send a call here when [`crate::fdtable::lookup`]
//! finds its fd marked. A mark is either [`TRACKED`] (from `EXSOCK_TRACK=all`, see
//! [`crate::config`]: the call is forwarded to libc through the routed path) or a DDP entry
//! ([`crate::ddp::entry`]): a socket with pending DDP state (options, listener; its calls
//! mostly go to libc too) or a connected DDP socket, whose calls go to the engine.

use core::num::NonZeroU64;

use libc::c_int;

use crate::ddp::entry::{self, CallRef};
use crate::errno::Errno;
use crate::fdtable::{self, Handle};

/// A plain TCP socket the library tracks without changing its behaviour.
pub const TRACKED: Handle = Handle(NonZeroU64::MIN);

/// Marks a newly created socket `fd` as tracked if `EXSOCK_TRACK=all` asks for it and it is a
/// TCP socket, and otherwise erases any stale mark left by an fd closed behind our back (by
/// `close_range` in a raw system call, for example).
pub fn new_socket(fd: c_int, domain: c_int, ty: c_int) {
    let tcp = matches!(domain, libc::AF_INET | libc::AF_INET6)
        && ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) == libc::SOCK_STREAM;
    if tcp && crate::config::track() {
        if let Some(prev) = fdtable::replace(fd, TRACKED) {
            entry::release(prev);
        }
    } else if let Some(prev) = fdtable::clear(fd) {
        entry::release(prev);
    }
}

/// A new fd that is not a routed socket (an accepted socket of a plain listener, a new epoll
/// fd): erase any stale mark.
#[inline]
pub fn new_plain(fd: c_int) {
    if fdtable::any()
        && let Some(prev) = fdtable::clear(fd)
    {
        entry::release(prev);
    }
}

/// The entry of a marked fd: `Ok(None)` for the tracked mark, `EBADF` if the entry was closed
/// by another thread meanwhile.
pub fn entry_of(h: Handle) -> Result<Option<CallRef>, Errno> {
    if h == TRACKED {
        return Ok(None);
    }
    CallRef::from_handle(h).map(Some).ok_or(Errno(libc::EBADF))
}

/// The connected DDP socket a marked fd refers to, if it is one.
pub fn ddp_socket(h: Handle) -> Result<Option<CallRef>, Errno> {
    Ok(entry_of(h)?.filter(|r| r.conn().is_some()))
}

/// After a dup-family call made `new` refer to `old`'s open file description: `new` gets
/// `old`'s mark (one more fd of a DDP socket), and whatever `new` was marked with is released.
pub fn dup_mark(old: c_int, new: c_int) {
    let prev = match fdtable::lookup(old) {
        Some(h) => match entry_of(h) {
            Ok(Some(r)) => {
                r.attach(new);
                None
            }
            Ok(None) => fdtable::replace(new, h).filter(|&p| p != h),
            Err(_) => fdtable::clear(new),
        },
        None => fdtable::clear(new),
    };
    if let Some(p) = prev {
        entry::release(p);
    }
}
