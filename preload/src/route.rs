//! What a marked fd is routed to.
//!
//! The hooks (one file per family of calls) send a call here when [`crate::fdtable::lookup`]
//! finds its fd marked. In this version the only mark is [`TRACKED`] (from `EXSOCK_TRACK=all`,
//! see [`crate::config`]), and every routed call does what the unrouted one does — forward to
//! libc — but through a safe-to-extend function returning `Result<_, Errno>`. The DDP issue adds
//! handles for DDP sockets and gives the routed functions their DDP branches.

use core::num::NonZeroU64;

use libc::c_int;

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
        fdtable::mark(fd, TRACKED);
    } else {
        fdtable::clear(fd);
    }
}

/// A new fd that is not a routed socket (an accepted socket of a plain listener, a new epoll
/// fd): erase any stale mark.
#[inline]
pub fn new_plain(fd: c_int) {
    if fdtable::any() {
        fdtable::clear(fd);
    }
}
