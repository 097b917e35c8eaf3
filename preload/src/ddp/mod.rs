//! DDP mode: sockets switched with `setsockopt(fd, SOL_DDP, DDP_MODE, 1)` are routed into the
//! engine of `ddp-user` (docs/engine.md). This module holds no protocol logic: it keeps the
//! per-fd DDP state ([`entry`]), runs the TCP part of connect/accept, hands the socket to
//! [`DdpSocket::connect`]/[`DdpSocket::accept`] and installs the engine's socketpair end under
//! the application's fd number.
//!
//! - [`entry`]: the lock-free, reference-counted per-fd state.
//! - [`opts`]: `setsockopt`/`getsockopt` at level `SOL_DDP`.
//! - [`io`]: the data calls on connected DDP sockets.
//! - [`api`]: the exported extension API (`ddp_reg_mr`, `ddp_post_*`, `ddp_poll`, ...).
//!
//! ## Choices (where the header leaves room)
//!
//! - **Connect.** The app fd is the engine's socketpair before the exchange starts; other
//!   threads' data calls on the socket meanwhile wait for it ([`wait_setup`]).
//!   Blocking socket: TCP connect, then the MPA exchange inline (bounded by
//!   `DDP_MPA_TIMEOUT_MS`); its errors are connect's: `ECONNREFUSED` (MPA Reply with the
//!   Reject flag), `ETIMEDOUT` (no or incomplete MPA Reply in time), `ECONNRESET` (the peer
//!   closed or reset the TCP connection during the exchange — what a peer that does not
//!   speak MPA usually does), `EPROTO` (bytes that are not a valid MPA Reply: the peer is not
//!   iWARP), `EINVAL` (options that cannot be carried, e.g. `DDP_P2P` with revision 1). After a
//!   failed exchange the TCP connection is closed. Non-blocking socket: `EINPROGRESS` as usual;
//!   the fd is the engine's socketpair from then on (writable at once, writes queued), the
//!   exchange runs on the progress thread; its failure shows as `SO_ERROR` and EOF;
//!   `DDP_CONN_INFO.state` says when it is done (`DDP_STATE_RTS`). A later `connect` says
//!   `EALREADY` while TCP connects, `EISCONN` once TCP is connected (the fd is writable from
//!   then on, so that is what programs that poll for writable and connect again expect), and
//!   the exchange's error if it failed.
//! - **Accept.** The listener's acceptor answers MPA in the background and `accept` returns
//!   connections in full operation ([`listen`]); an exchange that fails never reaches
//!   `accept`. `SOCK_NONBLOCK`/`SOCK_CLOEXEC` of accept4 apply to the returned fd as usual.
//!   Where the acceptor could not be started, the exchange runs in `accept`: inline for a
//!   blocking listener (a failure reports `ECONNABORTED`, which programs retry), on the
//!   progress thread for a non-blocking one.
//! - **Switch in place** (`DDP_MODE` = 1 on a connected plain socket): the side that called
//!   `connect` initiates. When we did not see how the connection was made (the socket was
//!   never marked before), a socket whose local port has a TCP listener (in
//!   `/proc/net/tcp{,6}`) is taken as the accepted side, any other as the connecting side.
//!   The exchange blocks the `setsockopt` (blocking socket) or runs on the progress thread.
//! - **O_NONBLOCK** lives in the open file description the app fd shares with the engine's
//!   socketpair end. The engine asks the kernel when a call would wait and keeps the answer
//!   (and `SO_RCVTIMEO`/`SO_SNDTIMEO`) until `fcntl(F_SETFL)`, `ioctl(FIONBIO)` or a
//!   `setsockopt(SOL_SOCKET)` on one of the socket's fds passes here ([`settings_changed`]);
//!   sockets that existed at a `fork` ask every time (the child may change them). A raw
//!   system call's change is seen at the next such call (docs/rules.md, LIMITATIONS).
//! - **dup of a socket before its MPA exchange:** only the fd that calls `connect` becomes the
//!   DDP socket; other fds of the same TCP socket keep referring to the TCP socket.
//! - **fork:** the child handler calls [`ddp_user::after_fork_in_child`]; inherited connected
//!   DDP sockets are byte streams served by the parent, extension calls on them fail with
//!   `EOPNOTSUPP` (engine.md). The connection lives as long as the *parent* keeps an fd of
//!   it: a parent that closes its last fd ends the connection for the child too (unlike a
//!   TCP socket shared after fork).
//! - **exec:** the engine's descriptors are close-on-exec, so an inherited DDP fd (the
//!   socketpair end) reads EOF in the new program once the old image is gone.

pub mod api;
pub mod entry;
pub mod io;
pub mod listen;
pub mod opts;

use core::sync::atomic::{AtomicU32, Ordering};

use libc::{c_int, sockaddr, socklen_t};

use ddp_user::{DdpSocket, Options};

use crate::errno::{Errno, ErrnoGuard, cvt};
use crate::log::{Addr, debug};
use crate::real;
use entry::{Conn, Payload, Pending, Ref, Role};

/// Raw `fcntl`, never our hook.
fn raw_fcntl(fd: c_int, cmd: c_int, arg: libc::c_long) -> Result<c_int, Errno> {
    // SAFETY: fcntl commands used here take an integer argument.
    let r = unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as c_int)
    }
}

/// Whether `fd`'s open file description is non-blocking.
pub fn is_nonblocking(fd: c_int) -> Result<bool, Errno> {
    Ok(raw_fcntl(fd, libc::F_GETFL, 0)? & libc::O_NONBLOCK != 0)
}

fn is_cloexec(fd: c_int) -> bool {
    raw_fcntl(fd, libc::F_GETFD, 0).is_ok_and(|f| f & libc::FD_CLOEXEC != 0)
}

/// An int socket option through the real getsockopt.
fn sockopt_int(fd: c_int, level: c_int, name: c_int) -> Result<c_int, Errno> {
    let mut v: c_int = 0;
    let mut len = core::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: `v`/`len` describe our own int.
    cvt(unsafe { real::getsockopt(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) })?;
    Ok(v)
}

/// `Ok` if `fd` is a TCP socket; `EBADF`, `ENOTSOCK` or `EOPNOTSUPP` otherwise.
pub fn check_tcp(fd: c_int) -> Result<(), Errno> {
    let domain = match sockopt_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN) {
        Ok(d) => d,
        Err(Errno(libc::ENOTSOCK)) => return Err(Errno(libc::ENOTSOCK)),
        Err(e) => return Err(e),
    };
    let ty = sockopt_int(fd, libc::SOL_SOCKET, libc::SO_TYPE)?;
    let proto = sockopt_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)?;
    if matches!(domain, libc::AF_INET | libc::AF_INET6)
        && ty == libc::SOCK_STREAM
        && proto == libc::IPPROTO_TCP
    {
        Ok(())
    } else {
        Err(Errno(libc::EOPNOTSUPP))
    }
}

/// The entry of `fd` for a DDP option: its own, or a new pending entry for a socket without
/// one that the caller has found to be a TCP socket ([`check_tcp`]; not asked again here:
/// three `getsockopt`s per connection fewer).
pub fn entry_for_option(fd: c_int) -> Result<Ref, Errno> {
    if let Some(r) = Ref::of_fd(fd) {
        return Ok(r);
    }
    let r = Ref::new(Payload::Pending(ddp_user::sync::Mutex::new(Pending::new(
        None,
    ))))
    .ok_or(Errno(libc::ENOMEM))?;
    r.attach(fd);
    Ok(r)
}

/// Installs a new DDP socket under `fd`: the engine's socketpair end replaces the TCP socket
/// there (keeping `fd`'s close-on-exec flag), and the slot refers to the new socket.
fn install(fd: c_int, sock: DdpSocket, opts: Options) -> Result<(), Errno> {
    let flags = if is_cloexec(fd) { libc::O_CLOEXEC } else { 0 };
    // SAFETY: no pointers; the real dup3, not our hook.
    cvt(unsafe { real::dup3(sock.app_fd(), fd, flags) })?;
    let r = Ref::new(Payload::Socket(Conn { sock, opts })).ok_or(Errno(libc::ENOMEM))?;
    r.attach(fd);
    Ok(())
}

/// Counts the DDP sockets installed (and set-ups abandoned): a futex word for calls that wait
/// for another thread's set-up of their socket ([`wait_setup`]).
static SETUPS: AtomicU32 = AtomicU32::new(0);

fn setups_changed() {
    SETUPS.fetch_add(1, Ordering::Release);
    // SAFETY: a futex wake on our own static word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            SETUPS.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

/// What a data call on a socket in DDP mode that is not a connected DDP socket does
/// ([`wait_setup`]).
pub enum Setup {
    /// Dispatch the call again: its DDP socket was installed meanwhile.
    Again,
    /// Forward it to libc; the guard (if any) counts it until it returns.
    Forward(Option<Forwarding>),
}

/// A call forwarded to the unconnected TCP socket of a socket in DDP mode (see
/// [`super::ddp::entry::Pending::forwarded`]).
pub struct Forwarding(Ref);

impl Drop for Forwarding {
    fn drop(&mut self) {
        if let Some(mut p) = self.0.pending() {
            p.forwarded = p.forwarded.saturating_sub(1);
        }
    }
}

/// A data call on `fd` (slot `h`, entry `r`) that is not a connected DDP socket: if it is a
/// socket in DDP mode whose connection another thread is setting up (`connect`, or the switch
/// of a connected socket), the call must not reach the TCP socket, whose first bytes are the
/// MPA exchange's. It waits until the DDP socket is installed (then [`Setup::Again`]) as a
/// call on a connecting TCP socket waits; a non-blocking one says `EAGAIN`. Otherwise (an
/// unconnected socket, a listener) it is forwarded, and a `connect` waits for it to return
/// before it starts ([`begin_setup`]).
pub fn wait_setup(r: &Ref, h: crate::fdtable::Handle, fd: c_int) -> Result<Setup, Errno> {
    loop {
        let seen = SETUPS.load(Ordering::Acquire);
        if crate::fdtable::lookup(fd) != Some(h) {
            return Ok(Setup::Again);
        }
        {
            let Some(mut p) = r.pending() else {
                return Ok(Setup::Again);
            };
            if !p.mode || p.listening {
                return Ok(Setup::Forward(None));
            }
            if !p.setting_up {
                p.forwarded += 1;
                drop(p);
                return Ok(Setup::Forward(Some(Forwarding(r.clone()))));
            }
        }
        if is_nonblocking(fd)? {
            return Err(Errno(libc::EAGAIN));
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        // SAFETY: a futex wait on our own static word, with our own timeout (bounded: the
        // state is asked again).
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                SETUPS.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                seen,
                &ts as *const libc::timespec,
            )
        };
    }
}

/// Before a `connect` (or switch in place) of a socket in DDP mode: data calls wait from now
/// on, and the ones already forwarded to the TCP socket return first (they are calls on an
/// unconnected socket, which return at once; bounded anyway).
fn begin_setup(r: &Ref) {
    let deadline = std::time::Instant::now() + core::time::Duration::from_millis(100);
    loop {
        {
            let Some(mut p) = r.pending() else { return };
            p.setting_up = true;
            if p.forwarded == 0 {
                return;
            }
        }
        if std::time::Instant::now() >= deadline {
            return;
        }
        std::thread::yield_now();
    }
}

/// The set-up did not happen (the TCP connect failed, the exchange failed): data calls are
/// forwarded again.
fn end_setup(r: &Ref) {
    if let Some(mut p) = r.pending() {
        p.setting_up = false;
    }
    setups_changed();
}

/// Logs what a finished MPA exchange negotiated.
pub(crate) fn log_negotiated(what: &str, fd: c_int, sock: &DdpSocket) {
    if !crate::log::enabled() {
        return;
    }
    let _errno = ErrnoGuard::new();
    match sock.info() {
        Ok(i) if i.state == ddp_user::engine::cq::state::CONNECTING => {
            debug!("ddp {what}({fd}): MPA exchange under way (non-blocking) {sock:?}");
        }
        Ok(i) => debug!(
            "ddp {what}({fd}): {} MPA rev {}, CRC {}, markers tx {} rx {}, IRD {} ORD {}, \
             MULPDU {}, p2p {} rtr {:#x}, PD {:#x}, state {} {sock:?}",
            if i.initiator != 0 {
                "initiator"
            } else {
                "responder"
            },
            i.mpa_rev,
            if i.crc != 0 { "on" } else { "off" },
            i.markers_tx,
            i.markers_rx,
            i.ird,
            i.ord,
            i.mulpdu,
            i.p2p,
            i.rtr,
            i.pd,
            i.state,
        ),
        Err(e) => debug!("ddp {what}({fd}): info: errno {}", e.0),
    }
}

/// Why an MPA exchange failed, in words (for the log).
fn why(e: Errno) -> &'static str {
    match e.0 {
        libc::ECONNREFUSED => "the peer rejected the MPA request",
        libc::ETIMEDOUT => "no complete MPA reply/request within DDP_MPA_TIMEOUT_MS",
        libc::ECONNRESET => "the TCP connection ended during the MPA exchange (peer not iWARP?)",
        libc::EPROTO => "invalid MPA frames (peer not iWARP, or incompatible options)",
        libc::EINVAL => "options that cannot be negotiated (DDP_P2P with MPA rev 1, sizes)",
        _ => "engine error",
    }
}

/// Runs the MPA exchange on the connected (or connecting) TCP socket `fd` and installs the
/// DDP socket under `fd`.
fn start(fd: c_int, opts: &Options, role: Role, nonblocking: bool) -> Result<(), Errno> {
    // Nagle's algorithm stays the application's choice for its byte stream, as on a TCP
    // socket (`TCP_NODELAY` for good from its first extension call).
    let eng_opts = Options {
        tcp_nagle: true,
        ..opts.clone()
    };
    let what = match role {
        Role::Initiator => "connect",
        Role::Responder => "accept",
    };
    // The app fd becomes the socketpair before the exchange runs: another thread reading the
    // fd meanwhile waits for the stream's first bytes instead of reading the MPA frames from
    // the TCP socket. A blocking exchange that fails gives the number its TCP socket back.
    let old = Ref::of_fd(fd);
    let saved = if nonblocking {
        -1
    } else {
        // SAFETY: integers; raw fcntl.
        unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, 3) as c_int }
    };
    let fd_cloexec = if is_cloexec(fd) { libc::O_CLOEXEC } else { 0 };
    let mut installed = false;
    let r = DdpSocket::start_with(
        fd,
        &eng_opts,
        nonblocking,
        role == Role::Initiator,
        &mut |sock| {
            // Every fcntl/ioctl/setsockopt on its fds passes here: changes are reported
            // (`settings_changed`), so its blocking calls may keep what they asked.
            sock.track_settings();
            install(fd, sock.clone(), opts.clone()).map_err(|e| ddp_user::Errno(e.0))?;
            installed = true;
            setups_changed();
            Ok(())
        },
    );
    match r {
        Ok(sock) => {
            if saved >= 0 {
                // SAFETY: our own duplicate.
                unsafe { real::close(saved) };
            }
            log_negotiated(what, fd, &sock);
            crate::stats::register(fd, &sock);
            Ok(())
        }
        Err(e) => {
            let e = Errno(e.0);
            if installed {
                if let Some(h) = crate::fdtable::clear(fd) {
                    entry::release(h);
                }
                if saved >= 0 {
                    // SAFETY: integers; our duplicate of the TCP socket goes back under `fd`.
                    unsafe { real::dup3(saved, fd, fd_cloexec) };
                }
                // (the fd keeps its pending DDP state, as before the exchange)
                if let Some(old) = &old {
                    old.attach(fd);
                }
            }
            if let Some(old) = &old {
                end_setup(old);
            }
            if saved >= 0 {
                // SAFETY: our own duplicate.
                unsafe { real::close(saved) };
            }
            debug!(
                "ddp {what}({fd}): MPA exchange failed: errno {} ({})",
                e.0,
                why(e)
            );
            Err(e)
        }
    }
}

/// `connect` on a socket with pending DDP state.
///
/// # Safety
/// As for libc's `connect`.
pub unsafe fn connect(
    r: &Ref,
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<c_int, Errno> {
    let (mode, opts) = match r.pending() {
        Some(p) => (p.mode, p.opts.clone()),
        None => return Err(Errno(libc::EISCONN)),
    };
    if mode && opts.mpa_config(true).is_none() {
        debug!("ddp connect({fd}): options cannot be negotiated: EINVAL");
        return Err(Errno(libc::EINVAL));
    }
    if mode {
        begin_setup(r);
    }
    // SAFETY: the caller's arguments, passed on.
    let rc = cvt(unsafe { real::connect(fd, addr, len) });
    let in_progress = matches!(rc, Err(Errno(libc::EINPROGRESS)));
    if mode && !matches!(rc, Ok(_) | Err(Errno(libc::EINPROGRESS | libc::EISCONN))) {
        end_setup(r);
    }
    if (rc.is_ok() || in_progress)
        && let Some(mut p) = r.pending()
    {
        p.role = Some(Role::Initiator);
    }
    if !mode {
        return rc;
    }
    // A connect interrupted by a signal completes in the background; when the application
    // calls again, the kernel says EISCONN: the TCP part is done, run MPA now.
    match rc {
        Ok(_) | Err(Errno(libc::EISCONN)) => {}
        Err(Errno(libc::EINPROGRESS)) => {}
        Err(e) => return Err(e),
    }
    let nonblocking = is_nonblocking(fd)?;
    if crate::log::enabled() {
        // SAFETY: the kernel accepted the address.
        let a = unsafe { Addr::read(addr, len) };
        debug!("ddp connect({fd}, {a}): TCP connected, MPA as initiator");
    }
    start(fd, &opts, Role::Initiator, nonblocking)?;
    if in_progress {
        Err(Errno(libc::EINPROGRESS))
    } else {
        Ok(0)
    }
}

/// After a real accept on a listener with pending DDP state: the accepted socket `nfd`
/// inherits the listener's options; in DDP mode it runs the MPA exchange as responder.
/// `nb` is the O_NONBLOCK the new fd must end with (accept4's SOCK_NONBLOCK: an accepted
/// socket does not inherit the listener's on Linux, so it need not be asked).
pub fn accepted(listener: &Pending, lfd: c_int, nfd: c_int, nb: bool) -> Result<c_int, Errno> {
    if !listener.mode {
        let mut p = Pending::new(Some(Role::Responder));
        p.opts = listener.opts.clone();
        let r =
            Ref::new(Payload::Pending(ddp_user::sync::Mutex::new(p))).ok_or(Errno(libc::ENOMEM))?;
        r.attach(nfd);
        return Ok(nfd);
    }
    let lnb = is_nonblocking(lfd).unwrap_or(false);
    if listener.dual && !crate::dual::accept_as_ddp(lfd, nfd, lnb) {
        crate::route::new_plain(nfd);
        return Ok(nfd);
    }
    let r = start(nfd, &listener.opts, Role::Responder, lnb).and_then(|()| {
        // The engine made the app fd (non-)blocking like the exchange; give it accept's.
        if lnb != nb {
            set_nonblocking(nfd, nb)?;
            settings_changed(nfd);
        }
        if listener.dual {
            crate::stats::mark_dual(nfd);
        }
        Ok(nfd)
    });
    if r.is_err() {
        if let Some(h) = crate::fdtable::clear(nfd) {
            entry::release(h);
        }
        // SAFETY: no pointers; the connection we accepted and could not set up.
        unsafe { real::close(nfd) };
        return Err(Errno(libc::ECONNABORTED));
    }
    r
}

/// After a change of `fd`'s `O_NONBLOCK` or socket options: if it is a connected DDP socket,
/// what its blocking calls keep of them is forgotten (`DdpSocket::track_settings`).
pub fn settings_changed(fd: c_int) {
    if let Some(h) = crate::fdtable::lookup_marked(fd) {
        settings_changed_h(h);
    }
}

/// [`settings_changed`] for a looked-up fd.
pub fn settings_changed_h(h: crate::fdtable::Handle) {
    if let Ok(Some(r)) = crate::route::ddp_socket(h)
        && let Some(c) = r.conn()
    {
        c.sock.settings_changed();
    }
}

fn set_nonblocking(fd: c_int, on: bool) -> Result<(), Errno> {
    let fl = raw_fcntl(fd, libc::F_GETFL, 0)?;
    let want = if on {
        fl | libc::O_NONBLOCK
    } else {
        fl & !libc::O_NONBLOCK
    };
    if want != fl {
        raw_fcntl(fd, libc::F_SETFL, want.into())?;
    }
    Ok(())
}

/// `DDP_MODE` = 1 on a socket with pending state: before connect/listen it only records the
/// mode; on a connected socket it switches in place (MPA exchange now).
pub fn set_mode(r: &Ref, fd: c_int) -> Result<(), Errno> {
    let (opts, role) = {
        let Some(mut p) = r.pending() else {
            return Ok(()); // already a DDP socket
        };
        p.mode = true;
        if p.listening || !is_connected(fd) {
            return Ok(());
        }
        (p.opts.clone(), p.role)
    };
    let role = role.unwrap_or_else(|| guess_role(fd));
    if opts.mpa_config(role == Role::Initiator).is_none() {
        return Err(Errno(libc::EINVAL));
    }
    debug!("ddp setsockopt({fd}, DDP_MODE, 1): switching a connected socket in place ({role:?})");
    let nonblocking = is_nonblocking(fd)?;
    begin_setup(r);
    start(fd, &opts, role, nonblocking)
}

fn is_connected(fd: c_int) -> bool {
    // SAFETY: sockaddr_storage is plain data.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of_val(&ss) as socklen_t;
    // SAFETY: our own buffer.
    unsafe {
        real::getpeername(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        ) == 0
    }
}

/// The local port of `fd` (host order).
fn local_port(fd: c_int) -> Option<u16> {
    // SAFETY: sockaddr_storage is plain data.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of_val(&ss) as socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast::<sockaddr>();
    // SAFETY: our own buffer.
    if unsafe { real::getsockname(fd, p, &mut len) } != 0 {
        return None;
    }
    match c_int::from(ss.ss_family) {
        // SAFETY: the family says which layout the kernel wrote.
        libc::AF_INET => Some(u16::from_be(unsafe {
            (*p.cast::<libc::sockaddr_in>()).sin_port
        })),
        libc::AF_INET6 => Some(u16::from_be(
            // SAFETY: as above.
            unsafe { (*p.cast::<libc::sockaddr_in6>()).sin6_port },
        )),
        _ => None,
    }
}

/// A connected socket we did not see being made: responder if a TCP listener has its local
/// port (then it came from accept), else initiator.
fn guess_role(fd: c_int) -> Role {
    let Some(port) = local_port(fd) else {
        return Role::Initiator;
    };
    for path in [c"/proc/net/tcp", c"/proc/net/tcp6"] {
        if let Some(text) = read_file(path)
            && listener_on(&text, port)
        {
            return Role::Responder;
        }
    }
    Role::Initiator
}

/// Whether a `/proc/net/tcp` table has a LISTEN (state 0A) socket on `port`.
fn listener_on(text: &[u8], port: u16) -> bool {
    text.split(|&b| b == b'\n').skip(1).any(|line| {
        let mut f = line.split(|&b| b == b' ').filter(|s| !s.is_empty());
        let (Some(_sl), Some(local), Some(_rem), Some(st)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            return false;
        };
        let Some(colon) = local.iter().rposition(|&b| b == b':') else {
            return false;
        };
        let p = core::str::from_utf8(&local[colon + 1..])
            .ok()
            .and_then(|s| u16::from_str_radix(s, 16).ok());
        st == b"0A" && p == Some(port)
    })
}

/// Reads a (small, /proc) file with raw system calls.
pub(crate) fn read_file(path: &core::ffi::CStr) -> Option<Vec<u8>> {
    // SAFETY: NUL-terminated path; raw openat, no hooks.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    } as c_int;
    if fd < 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // SAFETY: our own buffer; raw read.
        let n = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 || out.len() > (64 << 20) {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: closes the fd opened above; raw close.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    Some(out)
}

/// The pthread_atfork child handler: the engine's threads did not survive the fork.
extern "C" fn atfork_child() {
    crate::fdtable::own();
    ddp_user::after_fork_in_child();
}

/// The pthread_atfork parent handler: the child may write on the sockets that exist.
extern "C" fn atfork_parent() {
    ddp_user::after_fork_in_parent();
}

/// Registers the fork handlers (from the constructor).
pub fn init() {
    crate::fdtable::own();
    // SAFETY: registering handlers that take no lock and make no system call but `getpid`.
    unsafe { libc::pthread_atfork(None, Some(atfork_parent), Some(atfork_child)) };
    ddp_user::sigdefer::on_engine_start(crate::signals::adopt);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tcp_listener() {
        let t = b"  sl  local_address rem_address   st tx_queue rx_queue\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n\
   1: 0100007F:C350 0100007F:1F90 01 00000000:00000000 00:00000000 00000000\n";
        assert!(listener_on(t, 0x1f90));
        assert!(!listener_on(t, 0xc350));
        assert!(!listener_on(t, 1));
    }
}
