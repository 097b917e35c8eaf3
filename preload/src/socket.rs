//! Socket creation and connection setup: `socket`, `socketpair`, `bind`, `listen`, `accept`,
//! `accept4`, `connect`, `shutdown`.
//!
//! Creators pass through and then, only if logging or tracking is on or the fd table is in use,
//! look at the new fd ([`route::new_socket`]: mark it or erase a stale mark; log it). Calls on an
//! existing fd route on [`fdtable::lookup`]. An accepted socket follows its listener: it gets the
//! listener's mark.

use libc::{c_int, sockaddr, socklen_t};

use crate::errno::{Errno, ErrnoGuard, cvt, ret};
use crate::fdtable::{self, Handle};
use crate::log::{Addr, Domain, Outcome, SockType, debug};
use crate::{config, real, route};

/// `socket(2)`.
///
/// # Safety
/// As for libc's `socket`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let fd = unsafe { real::socket(domain, ty, protocol) };
    if config::observe() || fdtable::any() {
        created(fd, domain, ty, protocol);
    }
    fd
}

#[cold]
fn created(fd: c_int, domain: c_int, ty: c_int, protocol: c_int) {
    let _errno = ErrnoGuard::new();
    if fd >= 0 {
        route::new_socket(fd, domain, ty);
    }
    debug!(
        "socket({}, {}, {protocol}) = {}{}",
        Domain(domain),
        SockType(ty),
        Outcome::of(fd.into()),
        if fdtable::lookup(fd).is_some() {
            " [tracked]"
        } else {
            ""
        }
    );
}

/// `socketpair(2)`.
///
/// # Safety
/// As for libc's `socketpair`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn socketpair(
    domain: c_int,
    ty: c_int,
    protocol: c_int,
    sv: *mut c_int,
) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let rc = unsafe { real::socketpair(domain, ty, protocol, sv) };
    if config::observe() || fdtable::any() {
        let _errno = ErrnoGuard::new();
        if rc == 0 {
            // SAFETY: on success libc stored two fds at `sv`.
            let (a, b) = unsafe { (*sv, *sv.add(1)) };
            route::new_plain(a);
            route::new_plain(b);
            debug!(
                "socketpair({}, {}, {protocol}) = [{a}, {b}]",
                Domain(domain),
                SockType(ty)
            );
        } else {
            debug!(
                "socketpair({}, {}, {protocol}) = {}",
                Domain(domain),
                SockType(ty),
                Outcome::of(rc.into())
            );
        }
    }
    rc
}

/// `bind(2)`.
///
/// # Safety
/// As for libc's `bind`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let rc = match fdtable::lookup(fd) {
        // SAFETY: the caller's arguments, passed on unchanged.
        None => unsafe { real::bind(fd, addr, len) },
        // SAFETY: as above, through the routing point.
        Some(h) => ret(unsafe { routed_bind(h, fd, addr, len) }),
    };
    if crate::log::enabled() {
        let _errno = ErrnoGuard::new();
        let outcome = Outcome::of(rc.into());
        // SAFETY: the kernel did not reject the pointer or length (see `logged_addr`).
        let a = unsafe { logged_addr(&outcome, addr, len) };
        debug!("bind({fd}, {a}) = {outcome}");
    }
    rc
}

/// The address a bind or connect was given, for the log — unless the kernel refused it as
/// unreadable (`EFAULT`) or of a bad length (`EINVAL`), in which case it is not touched.
///
/// # Safety
/// Unless `outcome` is one of those errors, `addr` is valid for `len` bytes.
unsafe fn logged_addr(outcome: &Outcome, addr: *const sockaddr, len: socklen_t) -> Addr {
    if outcome.0 == -1 && matches!(outcome.1, libc::EFAULT | libc::EINVAL) {
        return Addr::None;
    }
    // SAFETY: see above.
    unsafe { Addr::read(addr, len) }
}

/// # Safety
/// As for libc's `bind`.
unsafe fn routed_bind(
    h: Handle,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<c_int, Errno> {
    let fd = match route::entry_of(h)? {
        Some(r) => match r.conn() {
            Some(c) => c.sock.tcp_fd(),
            None => crate::ddp::listen::socket_fd(&r, fd),
        },
        None => fd,
    };
    // SAFETY: forwarded unchanged (a connected DDP socket: to its TCP socket, which refuses).
    cvt(unsafe { real::bind(fd, addr, len) })
}

/// `listen(2)`.
///
/// # Safety
/// As for libc's `listen` (no pointers: always safe in practice).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    let rc = match fdtable::lookup(fd) {
        // SAFETY: no pointer arguments.
        None => unsafe { real::listen(fd, backlog) },
        Some(h) => ret(routed_listen(h, fd, backlog)),
    };
    debug!("listen({fd}, {backlog}) = {}", Outcome::of(rc.into()));
    if rc == 0 && crate::rules::active().is_some() {
        crate::rules::on_listen(fd);
    }
    if rc == 0
        && fdtable::lookup(fd).is_some()
        && let Some(r) = crate::ddp::entry::Ref::of_fd(fd)
    {
        // (a DDP listener: the acceptor answers its MPA Requests from now on)
        let _errno = ErrnoGuard::new();
        crate::ddp::listen::serve(&r, fd, backlog);
    }
    rc
}

fn routed_listen(h: Handle, fd: c_int, backlog: c_int) -> Result<c_int, Errno> {
    let r = route::entry_of(h)?;
    if let Some(c) = r.as_ref().and_then(|r| r.conn()) {
        // SAFETY: no pointer arguments; the TCP socket of a connected DDP socket refuses.
        return cvt(unsafe { real::listen(c.sock.tcp_fd(), backlog) });
    }
    if let Some(tcp) = r
        .as_ref()
        .and_then(|r| r.pending().and_then(|p| p.standin.as_ref().map(|s| s.tcp)))
    {
        // (listening already, behind its stand-in: the hook's `serve` sets both backlogs)
        // SAFETY: no pointer arguments.
        return cvt(unsafe { real::listen(tcp, backlog) });
    }
    // SAFETY: no pointer arguments.
    let rc = cvt(unsafe { real::listen(fd, backlog) })?;
    if let Some(mut p) = r.as_ref().and_then(|r| r.pending()) {
        p.listening = true;
        if p.mode && !p.dual && crate::dual::for_sockopt_listeners() {
            p.dual = true;
            crate::dual::prepare_listener(fd);
        }
        debug!(
            "listen({fd}): {} listener (accepted sockets inherit its DDP options)",
            match (p.mode, p.dual) {
                (true, true) => "DDP, dual-mode",
                (true, false) => "DDP",
                _ => "plain",
            }
        );
    }
    Ok(rc)
}

/// `accept(2)`.
///
/// # Safety
/// As for libc's `accept`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match fdtable::lookup(fd) {
        None => {
            // SAFETY: the caller's arguments, passed on unchanged.
            let nfd = unsafe { real::accept(fd, addr, len) };
            if config::observe() || fdtable::any() {
                accepted(fd, nfd);
            }
            nfd
        }
        // SAFETY: as above, through the routing point.
        Some(h) => ret(unsafe { routed_accept(h, fd, addr, len, None) }),
    }
}

/// `accept4(2)`.
///
/// # Safety
/// As for libc's `accept4`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    match fdtable::lookup(fd) {
        None => {
            // SAFETY: the caller's arguments, passed on unchanged.
            let nfd = unsafe { real::accept4(fd, addr, len, flags) };
            if config::observe() || fdtable::any() {
                accepted(fd, nfd);
            }
            nfd
        }
        // SAFETY: as above, through the routing point.
        Some(h) => ret(unsafe { routed_accept(h, fd, addr, len, Some(flags)) }),
    }
}

/// After an accept on a listener that is not marked: erase a stale mark, log.
#[cold]
fn accepted(listener: c_int, nfd: c_int) {
    let _errno = ErrnoGuard::new();
    if nfd >= 0 {
        route::new_plain(nfd);
    }
    debug!(
        "accept({listener}) = {} from {}",
        Outcome::of(nfd.into()),
        peer(nfd)
    );
}

/// The peer address of an accepted socket, for the log (asked with the real getpeername into
/// our own buffer, so the caller's possibly truncated address is never over-read).
pub(crate) fn peer(nfd: c_int) -> Addr {
    if nfd < 0 {
        return Addr::None;
    }
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of_val(&ss) as socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast::<sockaddr>();
    // SAFETY: `p`/`len` describe our own buffer.
    if unsafe { real::getpeername(nfd, p, &mut len) } != 0 {
        return Addr::None;
    }
    // SAFETY: the kernel wrote `len` bytes (capped to the buffer) at `p`.
    unsafe { Addr::read(p, len.min(core::mem::size_of_val(&ss) as socklen_t)) }
}

/// # Safety
/// As for libc's `accept`/`accept4`.
unsafe fn routed_accept(
    h: Handle,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: Option<c_int>,
) -> Result<c_int, Errno> {
    let r = route::entry_of(h)?;
    if let Some(r) = r.as_ref()
        && let Some(l) = r
            .pending()
            .filter(|p| p.standin.is_some())
            .map(|p| p.clone())
        && let Some(s) = l.standin.as_ref()
    {
        let f = flags.unwrap_or(0);
        // SAFETY: the caller's arguments.
        return unsafe { crate::ddp::listen::accept(r, &l, s, fd, addr, len, f) };
    }
    let lfd = match r.as_ref().and_then(|r| r.conn()) {
        Some(c) => c.sock.tcp_fd(), // not a listener: the TCP socket says so
        None => fd,
    };
    // SAFETY: forwarded unchanged.
    let nfd = cvt(unsafe {
        match flags {
            None => real::accept(lfd, addr, len),
            Some(f) => real::accept4(lfd, addr, len, f),
        }
    })?;
    let listener = r.as_ref().and_then(|r| r.pending()).map(|p| p.clone());
    match listener {
        Some(l) => {
            debug!(
                "accept({fd}) = {nfd} from {}{}",
                peer(nfd),
                match (l.mode, l.dual) {
                    (true, true) => ", dual mode: classifying",
                    (true, false) => ", MPA as responder",
                    _ => "",
                }
            );
            let nb = flags.is_some_and(|f| f & libc::SOCK_NONBLOCK != 0);
            crate::ddp::accepted(&l, fd, nfd, nb)
        }
        None => {
            let _errno = ErrnoGuard::new();
            if let Some(prev) = fdtable::replace(nfd, h) {
                crate::ddp::entry::release(prev);
            }
            debug!("accept({fd}) = {nfd} from {} [tracked]", peer(nfd));
            Ok(nfd)
        }
    }
}

/// `connect(2)`.
///
/// # Safety
/// As for libc's `connect`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let rc = match fdtable::lookup(fd) {
        // SAFETY: the caller's arguments, through the rules.
        None if let Some(cfg) = crate::rules::active() => {
            ret(unsafe { crate::rules::connect(cfg, fd, addr, len) })
        }
        // SAFETY: the caller's arguments, passed on unchanged.
        None => unsafe { real::connect(fd, addr, len) },
        // SAFETY: as above, through the routing point.
        Some(h) => ret(unsafe { routed_connect(h, fd, addr, len) }),
    };
    if crate::log::enabled() {
        let _errno = ErrnoGuard::new();
        let outcome = Outcome::of(rc.into());
        // SAFETY: the kernel did not reject the pointer or length (see `logged_addr`).
        let a = unsafe { logged_addr(&outcome, addr, len) };
        debug!("connect({fd}, {a}) = {outcome}");
    }
    rc
}

/// # Safety
/// As for libc's `connect`.
unsafe fn routed_connect(
    h: Handle,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<c_int, Errno> {
    match route::entry_of(h)? {
        // SAFETY: the caller's arguments, through the rules (a tracked socket).
        None if let Some(cfg) = crate::rules::active() => unsafe {
            crate::rules::connect(cfg, fd, addr, len)
        },
        // SAFETY: forwarded unchanged.
        None => cvt(unsafe { real::connect(fd, addr, len) }),
        Some(r) => match r.conn() {
            // Already a DDP socket: connecting (non-blocking) or connected.
            Some(c) => {
                if c.sock.is_connected() {
                    return Err(Errno(libc::EISCONN));
                }
                match c.sock.take_error() {
                    // MPA still under way: the fd is writable already (writes are queued), so
                    // once TCP is connected, say what a connected TCP socket says (programs
                    // such as hiredis poll for writable, then call connect again and take
                    // anything but EISCONN as a failure); EALREADY while TCP still connects.
                    0 if tcp_connected(c.sock.tcp_fd()) => Err(Errno(libc::EISCONN)),
                    0 => Err(Errno(libc::EALREADY)),
                    e => Err(Errno(e)),
                }
            }
            // SAFETY: the caller's arguments.
            None => unsafe { crate::ddp::connect(&r, fd, addr, len) },
        },
    }
}

/// Whether the TCP socket `fd` has a peer (its connect completed).
fn tcp_connected(fd: c_int) -> bool {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of_val(&ss) as socklen_t;
    // SAFETY: our own buffer; the real getpeername.
    unsafe {
        real::getpeername(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        ) == 0
    }
}

/// `shutdown(2)`.
///
/// # Safety
/// As for libc's `shutdown` (no pointers).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    let rc = match fdtable::lookup(fd) {
        // SAFETY: no pointer arguments.
        None => unsafe { real::shutdown(fd, how) },
        Some(h) => ret(routed_shutdown(h, fd, how)),
    };
    debug!("shutdown({fd}, {how}) = {}", Outcome::of(rc.into()));
    rc
}

fn routed_shutdown(h: Handle, fd: c_int, how: c_int) -> Result<c_int, Errno> {
    if let Some(r) = route::ddp_socket(h)?
        && let Some(c) = r.conn()
    {
        c.sock.shutdown(how).map_err(|e| Errno(e.0))?;
        return Ok(0);
    }
    let fd = route::entry_of(h)?.map_or(fd, |r| crate::ddp::listen::socket_fd(&r, fd));
    // SAFETY: no pointer arguments.
    cvt(unsafe { real::shutdown(fd, how) })
}
