//! DDP listeners: the TCP listener goes out of the application's sight, the engine's acceptor
//! answers each connection's MPA Request in the background (`ddp_user::driver::listener`),
//! and the application's fd number holds the *stand-in* (an `AF_UNIX` listener) through which
//! established connections reach `accept`. So `connect` completes as soon as the exchange does,
//! whatever the server program is doing, and `accept` returns connections in full operation.
//!
//! What the application's calls on a DDP listener reach:
//! - `accept`/`accept4`: the stand-in (the kernel blocks, times out with `SO_RCVTIMEO`, is
//!   interrupted, reports readiness to `poll`/`select`/`epoll`), then the connection's message
//!   is taken and the new fd becomes the DDP socket (or the plain TCP socket, from a dual
//!   listener) under the number `accept` returned. The peer's address is the TCP socket's.
//! - names, socket options (`SO_RCVTIMEO`/`SO_SNDTIMEO` go to both), `shutdown`, `listen`
//!   again: the TCP listener ([`socket_fd`]). `O_NONBLOCK` and `FIONBIO`: the stand-in
//!   (`accept` blocks on it).
//! - `close` of its last fd: the acceptor lets go of it; connections not yet accepted are
//!   closed.
//!
//! A forked child that has the listener takes connections from the same stand-in (the
//! message carries the connection's TCP socket); its first `accept` or `epoll_ctl` of the
//! listener also starts its own acceptor on the TCP listener, so the listener keeps serving
//! when the parent is gone.
//! A program started with `exec` that inherits the listener sees only the stand-in (docs/rules.md,
//! LIMITATIONS).

use libc::{c_int, sockaddr, socklen_t};

use ddp_user::driver::listener::{self, Accepted, ListenSpec, Served};
use ddp_user::{DdpSocket, Options};

use super::entry::{Pending, Ref};
use crate::errno::{Errno, cvt};
use crate::log::debug;
use crate::real;

/// A DDP listener's hidden half (kept in its [`Pending`] entry).
#[derive(Debug, Clone)]
pub struct Standin {
    /// The TCP listener (close-on-exec, a high number).
    pub tcp: c_int,
    /// What the hand-off messages to this stand-in carry.
    pub secret: u64,
    /// The acceptor serving it (of the process that called `listen`, or of a forked child).
    pub served: Served,
    /// The acceptor of the process that called `listen` (a forked child closes its copy of
    /// that acceptor's duplicate with the listener).
    pub creator: Served,
    /// The inode of `tcp` (a forked child may have closed and reused that number).
    pub tcp_ino: u64,
}

fn raw(r: libc::c_long) -> Result<c_int, Errno> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as c_int)
    }
}

fn cloexec(fd: c_int) -> bool {
    // SAFETY: integer fcntl; raw.
    let f = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFD, 0) };
    f >= 0 && f as c_int & libc::FD_CLOEXEC != 0
}

/// The engine's options for a listener's connections (Nagle's algorithm stays the
/// application's, as for every socket the preload makes: see `ddp::start`).
fn engine_options(p: &Pending) -> Options {
    Options {
        tcp_nagle: true,
        ..p.opts.clone()
    }
}

/// After a successful `listen(fd, backlog)` on a socket whose pending entry `r` is a DDP
/// listener: the stand-in takes the TCP listener's place under `fd`, and the acceptor serves
/// it. A second `listen` changes both backlogs. If anything fails the listener stays as it
/// was: its connections then make their MPA exchange when the program accepts them.
pub fn serve(r: &Ref, fd: c_int, backlog: c_int) {
    let Some(mut p) = r.pending() else {
        return;
    };
    if !p.mode || !p.listening {
        return;
    }
    if let Some(s) = &p.standin {
        // SAFETY: no pointers.
        unsafe {
            real::listen(s.tcp, backlog);
            real::listen(fd, backlog);
        }
        return;
    }
    match make_standin(&p, fd, backlog) {
        Ok(s) => {
            debug!(
                "listen({fd}): MPA answered in the background (TCP listener at fd {}, acceptor of pid {})",
                s.tcp, s.served.pid
            );
            p.standin = Some(s);
        }
        Err(e) => debug!(
            "listen({fd}): no background acceptor (errno {}): MPA exchanges run in accept",
            e.0
        ),
    }
}

fn make_standin(p: &Pending, fd: c_int, backlog: c_int) -> Result<Standin, Errno> {
    let nonblocking = super::is_nonblocking(fd)?;
    // SAFETY: integer arguments; raw fcntl.
    let tcp = raw(unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, 256) })
        .or_else(|_| {
            // SAFETY: as above.
            raw(unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, 3) })
        })?;
    let undo = |u: c_int| {
        // SAFETY: our own descriptors.
        unsafe {
            if u >= 0 {
                real::close(u);
            }
            real::close(tcp);
        }
    };
    // SAFETY: integer arguments; raw socket.
    let u = match raw(unsafe {
        libc::syscall(
            libc::SYS_socket,
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        )
    }) {
        Ok(u) => u,
        Err(e) => {
            undo(-1);
            return Err(e);
        }
    };
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut sun: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let mut len = core::mem::size_of::<libc::sa_family_t>() as socklen_t;
    let setup = (|| -> Result<(), Errno> {
        // SAFETY: `sun` is ours; a family-only length asks the kernel for an abstract name.
        raw(unsafe { libc::syscall(libc::SYS_bind, u, &sun as *const libc::sockaddr_un, len) })?;
        // SAFETY: integers.
        raw(unsafe { libc::syscall(libc::SYS_listen, u, backlog) })?;
        len = core::mem::size_of::<libc::sockaddr_un>() as socklen_t;
        // SAFETY: `sun`/`len` describe our own buffer.
        raw(unsafe {
            libc::syscall(
                libc::SYS_getsockname,
                u,
                &mut sun as *mut libc::sockaddr_un,
                &mut len as *mut socklen_t,
            )
        })?;
        Ok(())
    })();
    if let Err(e) = setup {
        undo(u);
        return Err(e);
    }
    let mut secret = [0u8; 8];
    if let Err(e) = ddp_user::sys::getrandom(&mut secret) {
        undo(u);
        return Err(Errno(e.0));
    }
    let secret = u64::from_ne_bytes(secret);
    let spec = ListenSpec {
        tcp_fd: tcp,
        opts: engine_options(p),
        dual_wait: p
            .dual
            .then(|| core::time::Duration::from_millis(u64::from(crate::dual::wait_ms()))),
        standin: (sun, len),
        backlog: usize::try_from(backlog).unwrap_or(0),
        secret,
    };
    let served = match listener::listen(spec) {
        Ok(s) => s,
        Err(e) => {
            undo(u);
            return Err(Errno(e.0));
        }
    };
    let flags = if cloexec(fd) { libc::O_CLOEXEC } else { 0 };
    // SAFETY: integers; the real dup3, not our hook.
    let installed = cvt(unsafe { real::dup3(u, fd, flags) });
    // SAFETY: our own descriptor (now also at `fd`, or not installed).
    unsafe { real::close(u) };
    if let Err(e) = installed {
        listener::unlisten(served);
        // SAFETY: our own descriptor.
        unsafe { real::close(tcp) };
        return Err(e);
    }
    if nonblocking {
        // SAFETY: integers; raw fcntl on the stand-in now at `fd`.
        unsafe {
            libc::syscall(
                libc::SYS_fcntl,
                fd,
                libc::F_SETFL,
                libc::O_RDWR | libc::O_NONBLOCK,
            )
        };
    }
    Ok(Standin {
        tcp,
        secret,
        served,
        creator: served,
        tcp_ino: ddp_user::sys::inode(tcp).unwrap_or(0),
    })
}

/// `SOL_DDP` options set on a listener after `listen`: the acceptor answers the next MPA
/// Requests with them (a program may set IRD/ORD between two accepts).
pub fn options_changed(s: &Standin, p: &Pending) {
    listener::reconfigure(s.served, &engine_options(p));
}

/// The fd that socket-level calls on `fd` go to: a DDP listener's TCP listener, else `fd`.
pub fn socket_fd(r: &Ref, fd: c_int) -> c_int {
    r.pending()
        .and_then(|p| p.standin.as_ref().map(|s| s.tcp))
        .unwrap_or(fd)
}

/// The last fd of a DDP listener is closed (the stand-in with it): this process's acceptor
/// lets go of it, and so go this process's descriptors of the TCP listener (in a forked child,
/// only those that still are the listener: the numbers may have been closed and reused).
pub fn closed(s: &Standin) {
    listener::unlisten(s.served);
    let me = ddp_user::sys::getpid();
    let mut fds = [s.tcp, -1];
    if s.creator.pid != me {
        fds[1] = s.creator.dup_fd;
    }
    for fd in fds {
        if fd >= 0 && s.tcp_ino != 0 && ddp_user::sys::inode(fd) == Ok(s.tcp_ino) {
            // SAFETY: a descriptor of the listener's.
            unsafe { real::close(fd) };
        }
    }
}

/// `accept`/`accept4` on a DDP listener with a stand-in (`l` is its pending state).
///
/// # Safety
/// As for libc's `accept4` (`addr`/`len` are the caller's).
pub unsafe fn accept(
    r: &Ref,
    l: &Pending,
    s: &Standin,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> Result<c_int, Errno> {
    if s.served.pid != ddp_user::sys::getpid() {
        serve_in_child(r, s, fd);
    }
    let nb = flags & libc::SOCK_NONBLOCK != 0;
    let opts = engine_options(l);
    loop {
        // (the caller's flags: close-on-exec stays on the number we return)
        // SAFETY: no address is asked for from the stand-in.
        let ufd = cvt(unsafe {
            real::accept4(
                fd,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                flags | libc::SOCK_CLOEXEC,
            )
        })?;
        listener::kick();
        let cloexec = if flags & libc::SOCK_CLOEXEC != 0 {
            libc::O_CLOEXEC
        } else {
            0
        };
        match listener::take(ufd, s.secret, &opts, nb).map_err(|e| Errno(e.0)) {
            Ok(Accepted::Ddp(sock)) => {
                let tcp = sock.tcp_fd();
                let sc = sock.clone();
                if let Err(e) = install(ufd, sock, l, cloexec) {
                    // SAFETY: the connection we could not install.
                    unsafe { real::close(ufd) };
                    return Err(e);
                }
                // SAFETY: the caller's address buffer, filled as accept would.
                unsafe { peer_into(tcp, addr, len) };
                debug!(
                    "accept({fd}) = {ufd} from {}, MPA answered by the acceptor",
                    crate::socket::peer(tcp)
                );
                if l.dual {
                    debug!("mode: accept({fd}) = {ufd}: {}", listener::Verdict::Ddp);
                }
                super::log_negotiated("accept", ufd, &sc);
                crate::stats::register(ufd, &sc);
                if l.dual {
                    crate::stats::mark_dual(ufd);
                }
                return Ok(ufd);
            }
            Ok(Accepted::Plain(tfd, verdict)) => {
                // SAFETY: integers; the real dup3 and close.
                let r = cvt(unsafe { real::dup3(tfd, ufd, cloexec) });
                // SAFETY: our own descriptor.
                unsafe { real::close(tfd) };
                if let Err(e) = r {
                    // SAFETY: the connection we could not install.
                    unsafe { real::close(ufd) };
                    return Err(e);
                }
                crate::route::new_plain(ufd);
                // SAFETY: the caller's address buffer.
                unsafe { peer_into(ufd, addr, len) };
                debug!("mode: accept({fd}) = {ufd}: {verdict}");
                return Ok(ufd);
            }
            Err(Errno(libc::ECONNABORTED)) => {
                // (not one of ours: a foreign connection to the stand-in)
                debug!("accept({fd}): a connection to the stand-in without a hand-off, dropped");
                // SAFETY: the connection we accepted.
                unsafe { real::close(ufd) };
            }
            Err(e) => {
                // SAFETY: as above.
                unsafe { real::close(ufd) };
                return Err(e);
            }
        }
    }
}

/// A forked child shows that it waits for connections of listener `fd` (`epoll_ctl` of it,
/// before any `accept`): its own acceptor serves the listener too, so that a child whose
/// parent has exited (a daemon) is not left waiting on a stand-in nobody fills.
pub fn watched(r: &Ref, fd: c_int) {
    let s = match r.pending() {
        Some(p) => match &p.standin {
            Some(s) if s.served.pid != ddp_user::sys::getpid() => s.clone(),
            _ => return,
        },
        None => return,
    };
    serve_in_child(r, &s, fd);
}

/// In a forked child: its own acceptor on the TCP listener too (the parent's may be gone).
fn serve_in_child(r: &Ref, s: &Standin, stand: c_int) {
    let Some(mut p) = r.pending() else { return };
    if p.standin
        .as_ref()
        .is_none_or(|c| c.served.pid == ddp_user::sys::getpid())
    {
        return;
    }
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut sun: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of::<libc::sockaddr_un>() as socklen_t;
    // SAFETY: `sun`/`len` describe our own buffer.
    if stand < 0
        || unsafe {
            libc::syscall(
                libc::SYS_getsockname,
                stand,
                &mut sun as *mut libc::sockaddr_un,
                &mut len as *mut socklen_t,
            )
        } != 0
    {
        return;
    }
    let spec = ListenSpec {
        tcp_fd: s.tcp,
        opts: engine_options(&p),
        dual_wait: p
            .dual
            .then(|| core::time::Duration::from_millis(u64::from(crate::dual::wait_ms()))),
        standin: (sun, len),
        backlog: 128,
        secret: s.secret,
    };
    if let Ok(served) = listener::listen(spec) {
        // (the parent's duplicate stays open here until the listener closes: `closed`)
        debug!("accept: this child serves the listener's MPA exchanges too");
        if let Some(cur) = p.standin.as_mut() {
            cur.served = served;
        }
    }
}

/// Installs the adopted socket under `fd` (the number `accept` returns).
fn install(fd: c_int, sock: DdpSocket, l: &Pending, cloexec: c_int) -> Result<(), Errno> {
    sock.track_settings();
    // SAFETY: integers; the real dup3.
    cvt(unsafe { real::dup3(sock.app_fd(), fd, cloexec) })?;
    let r = Ref::new(super::entry::Payload::Socket(super::entry::Conn {
        sock,
        opts: l.opts.clone(),
    }))
    .ok_or(Errno(libc::ENOMEM))?;
    r.attach(fd);
    Ok(())
}

/// Writes `fd`'s peer address into the caller's `addr`/`len` as `accept` would (nothing if
/// `addr` is null).
///
/// # Safety
/// `addr`/`len` are the caller's, as for `accept`.
unsafe fn peer_into(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: the caller's buffer and length, checked by the kernel.
    unsafe { real::getpeername(fd, addr, len) };
}
