//! Listeners that answer the MPA Request themselves, as TCP's handshake needs no `accept`.
//!
//! A DDP listener's TCP connections are set up in the background by the process's *acceptor*
//! thread: it accepts each connection from the TCP listener, classifies it if the listener is
//! dual-mode (the MPA Request key, or anything else: plain TCP), answers the MPA Request
//! (RFC 5044 §7.1, through [`Startup`]) and then hands the connection to whoever calls
//! `accept`. So a client's `connect` completes whether or not the server program is in
//! `accept`, as over TCP, and `accept` returns connections that are already in full
//! operation (or plain TCP ones, from a dual listener).
//!
//! The hand-off goes through the kernel, so that `accept`'s readiness and blocking stay the
//! kernel's own: the application's listener fd is a *stand-in*, an `AF_UNIX` stream listener
//! with an abstract, kernel-chosen name. For each connection ready to be accepted the acceptor
//! connects to the stand-in and sends, in one message, the connection's TCP socket
//! (`SCM_RIGHTS`) with what the exchange negotiated ([`Handoff`]); the application's `accept`
//! (the preload's hook) accepts from the stand-in and [`take`]s the message, and the
//! connection becomes a DDP socket of *its* process's engine ([`DdpSocket::adopt`]). `poll`,
//! `select`, `epoll` (level- or edge-triggered, `EPOLLEXCLUSIVE`), blocking and non-blocking
//! `accept`, signals and forked children that share the listener behave as the kernel makes
//! them. A message is only taken with the listener's random secret, so nothing another local
//! process connects to the stand-in is ever taken for a connection.
//!
//! Bounds (our choices): the stand-in's backlog is the application's, and the acceptor keeps
//! up to that many more connections in the background (in their exchange, or established and
//! waiting for room in the stand-in; at most [`IN_FLIGHT_MAX`]); beyond that it leaves the
//! TCP listener alone, whose own backlog then fills as TCP's does (those clients' TCP
//! connects complete and their exchanges wait, bounded by their MPA timeout). So about three
//! times the backlog of clients get through their TCP handshake before the program accepts,
//! where TCP lets the backlog through: the backlog still bounds every queue. A connection whose exchange fails (a client that is not iWARP, a bad or
//! late Request: `DDP_MPA_TIMEOUT_MS`) is closed and never reaches `accept`, like a
//! connection reset before it was accepted. DDP options set on the listener after `listen`
//! reach the acceptor ([`reconfigure`]) for the exchanges that start after them.
//!
//! What it refuses to do: block (every descriptor of a connection is non-blocking; the thread
//! waits only in `epoll_wait`), or touch an application descriptor: it works on descriptors of
//! its own.

use core::fmt;
use core::time::Duration;
use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, Ordering};
use std::time::Instant;

use ddp_proto::mpa::startup::{MpaConfig, Negotiated, RtrKind};
use ddp_proto::wire::mpa::MpaV2Params;

use crate::driver::socket::DdpSocket;
use crate::driver::startup::{Startup, Step};
use crate::engine::options::Options;
use crate::sync::Mutex;
use crate::sys::{self, Errno};

/// The MPA Request key (RFC 5044 §7.1): how a dual listener tells an iWARP client.
pub const MPA_REQUEST_KEY: &[u8; 16] = b"MPA ID Req Frame";

/// How long [`take`] waits for a hand-off message that is not there yet (the acceptor writes
/// it right after it connects; only a foreign connection to the stand-in lacks one).
const TAKE_WAIT: Duration = Duration::from_secs(1);
/// How often a listener whose stand-in was full tries again when no `accept` tells it (an
/// `accept` in another process).
const FULL_RETRY: Duration = Duration::from_millis(20);
/// Connections of one listener in the background at once (classified, in the exchange, or
/// waiting for room in the stand-in) at most, whatever the backlog.
const IN_FLIGHT_MAX: usize = 4096;

/// What the first bytes of a dual listener's connection say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// The MPA Request key.
    Mpa,
    /// Something else.
    NotMpa,
    /// A proper prefix of the key: wait for more.
    NeedMore,
}

/// Judges the first bytes of a connection (pure).
pub fn judge(first: &[u8]) -> Judgement {
    let n = first.len().min(MPA_REQUEST_KEY.len());
    if first[..n] != MPA_REQUEST_KEY[..n] {
        Judgement::NotMpa
    } else if n == MPA_REQUEST_KEY.len() {
        Judgement::Mpa
    } else {
        Judgement::NeedMore
    }
}

/// Why a connection of a listener is what it is (for the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It sent the MPA Request key (or the listener is not dual).
    Ddp,
    /// It sent other bytes (the first ones, up to 16, for the log).
    Bytes([u8; 16], usize),
    /// Nothing arrived within the bound (ms).
    Silent(u32),
    /// The peer closed before sending anything.
    Eof,
    /// The peek failed (errno).
    Error(i32),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Verdict::Ddp => f.write_str("DDP (dual: the client sent an MPA Request)"),
            Verdict::Bytes(b, n) => {
                f.write_str("plain TCP (dual: first bytes are not an MPA Request: \"")?;
                for &c in &b[..n] {
                    if c.is_ascii_graphic() || c == b' ' {
                        write!(f, "{}", c as char)?;
                    } else {
                        write!(f, "\\x{c:02x}")?;
                    }
                }
                f.write_str("\")")
            }
            Verdict::Silent(0) => {
                f.write_str("plain TCP (dual: no bytes yet and the listener is non-blocking)")
            }
            Verdict::Silent(ms) => write!(f, "plain TCP (dual: no bytes within {ms} ms)"),
            Verdict::Eof => f.write_str("plain TCP (dual: the client closed before sending)"),
            Verdict::Error(e) => write!(f, "plain TCP (dual: peek failed, errno {e})"),
        }
    }
}

/// A listener to serve: what [`listen`] takes.
pub struct ListenSpec {
    /// The TCP listener (listening already); the acceptor works on a duplicate of its own.
    pub tcp_fd: RawFd,
    /// The DDP options accepted connections get (the MPA responder's configuration).
    pub opts: Options,
    /// Dual mode: how long to wait for a connection's first bytes; `None`: every connection
    /// must speak MPA.
    pub dual_wait: Option<Duration>,
    /// The stand-in's address (an abstract `AF_UNIX` name) and its length.
    pub standin: (libc::sockaddr_un, libc::socklen_t),
    /// The stand-in's backlog (the application's).
    pub backlog: usize,
    /// What every hand-off message to this stand-in carries.
    pub secret: u64,
}

/// A listener being served: [`unlisten`] it when the application closes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    /// Its number in the acceptor.
    pub id: u64,
    /// The acceptor's duplicate of the TCP listener (a forked child that closes the listener
    /// closes its copy of this too).
    pub dup_fd: RawFd,
    /// The process whose acceptor serves it.
    pub pid: i32,
}

/// Has this process's acceptor serve `spec` (started with the first listener).
pub fn listen(spec: ListenSpec) -> Result<Served, Errno> {
    let a = acceptor()?;
    let dup_fd = sys::dup_cloexec_at_least(spec.tcp_fd, super::HIGH_FD)
        .or_else(|_| sys::dup_cloexec_at_least(spec.tcp_fd, 3))?;
    if let Err(e) = sys::set_nonblocking(dup_fd, true) {
        let _ = sys::close(dup_fd);
        return Err(e);
    }
    let cfg = match spec.opts.mpa_config(false) {
        Some(c) => c,
        None => {
            let _ = sys::close(dup_fd);
            return Err(Errno::EINVAL);
        }
    };
    let id = {
        let mut c = a.cmds.lock();
        c.next_id += 1;
        let id = c.next_id;
        c.queue.push(Cmd::Add(
            id,
            Box::new(Listener {
                fd: dup_fd,
                cfg,
                dual_wait: spec.dual_wait,
                standin: spec.standin,
                secret: spec.secret,
                cap: spec.backlog.clamp(1, IN_FLIGHT_MAX),
                in_flight: 0,
                ready: VecDeque::new(),
                paused: false,
                retry_at: None,
            }),
        ));
        id
    };
    let _ = sys::eventfd_signal(a.wake);
    Ok(Served {
        id,
        dup_fd,
        pid: a.pid,
    })
}

/// Stops serving a listener the application closed (in the process that serves it).
/// Connections not yet handed off are closed. Returns once the acceptor has closed its
/// duplicate of the TCP listener (bounded: 2 s), so that the port is free when the
/// application's `close` returns, as for a TCP listener (a program may listen on it again at
/// once).
pub fn unlisten(s: Served) {
    if s.pid != sys::getpid() {
        return;
    }
    let Some(a) = this_acceptor(s.pid) else {
        return;
    };
    let seq = {
        let mut c = a.cmds.lock();
        c.queue.push(Cmd::Remove(s.id));
        c.sent = c.sent.wrapping_add(1);
        c.sent
    };
    let _ = sys::eventfd_signal(a.wake);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let done = a.done.load(Ordering::Acquire);
        // (wrapping counters: done has reached seq)
        if done.wrapping_sub(seq) < u32::MAX / 2 {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let ts = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: a futex wait on the acceptor's own counter, with our own timeout.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                a.done.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                done,
                &ts as *const libc::timespec,
            )
        };
    }
}

/// The listener's options changed after `listen`: exchanges that start from now on answer
/// with them (in the process that serves it; a configuration that cannot be negotiated is
/// ignored, as `listen` would have refused it).
pub fn reconfigure(s: Served, opts: &Options) {
    let Some(a) = this_acceptor(s.pid) else {
        return;
    };
    let Some(cfg) = opts.mpa_config(false) else {
        return;
    };
    a.cmds
        .lock()
        .queue
        .push(Cmd::Configure(s.id, Box::new(cfg)));
    let _ = sys::eventfd_signal(a.wake);
}

/// An `accept` took a connection from a stand-in: listeners that found theirs full try again.
pub fn kick() {
    if let Some(a) = this_acceptor(sys::getpid()) {
        let full = a.cmds.lock().full;
        if full {
            let _ = sys::eventfd_signal(a.wake);
        }
    }
}

/// A connection taken from a stand-in.
pub enum Accepted {
    /// A DDP socket of this process's engine, in full operation.
    Ddp(DdpSocket),
    /// A plain TCP socket (the caller owns `fd`) of a dual listener, and why.
    Plain(RawFd, Verdict),
}

/// Takes the hand-off message of the connection `ufd` accepted from a stand-in (it stays the
/// caller's): the TCP socket it carries becomes a DDP socket with `opts` (non-blocking as
/// asked) or stays plain. `ECONNABORTED` for a connection that carries no message with
/// `secret` within [`TAKE_WAIT`] (not ours); the errno of a DDP socket that cannot be made.
pub fn take(ufd: RawFd, secret: u64, opts: &Options, nonblocking: bool) -> Result<Accepted, Errno> {
    let (fd, msg) = receive(ufd)?;
    let h = match Handoff::decode(&msg) {
        Some(h) if h.secret == secret => h,
        _ => {
            if let Some(fd) = fd {
                let _ = sys::close(fd);
            }
            return Err(Errno(libc::ECONNABORTED));
        }
    };
    let fd = fd.ok_or(Errno(libc::ECONNABORTED))?;
    match h.neg {
        None => {
            if !nonblocking {
                let _ = sys::set_nonblocking(fd, false);
            }
            Ok(Accepted::Plain(fd, h.verdict))
        }
        Some(neg) => {
            let r = DdpSocket::adopt(fd, opts, neg, h.leftover, nonblocking);
            let _ = sys::close(fd);
            r.map(Accepted::Ddp)
        }
    }
}

/// Reads one hand-off message (and the descriptor that comes with its first byte) from `ufd`.
fn receive(ufd: RawFd) -> Result<(Option<RawFd>, Vec<u8>), Errno> {
    let deadline = Instant::now() + TAKE_WAIT;
    let mut fd = None;
    let mut msg = Vec::new();
    let mut want = Handoff::HEAD;
    let mut buf = [0u8; 4096];
    let fail = |fd: Option<RawFd>, e: Errno| {
        if let Some(fd) = fd {
            let _ = sys::close(fd);
        }
        Err(e)
    };
    while msg.len() < want {
        let take = (want - msg.len()).min(buf.len());
        match sys::recv_with_fd(ufd, &mut buf[..take]) {
            Ok((0, _)) => return fail(fd, Errno(libc::ECONNABORTED)),
            Ok((n, got)) => {
                if let Some(g) = got {
                    if fd.is_some() {
                        let _ = sys::close(g);
                    } else {
                        fd = Some(g);
                    }
                }
                msg.extend_from_slice(&buf[..n]);
                if msg.len() >= Handoff::HEAD && want == Handoff::HEAD {
                    match Handoff::total_len(&msg) {
                        Some(t) if (Handoff::HEAD..=Handoff::MAX).contains(&t) => want = t,
                        _ => return fail(fd, Errno(libc::ECONNABORTED)),
                    }
                }
            }
            Err(Errno::EAGAIN) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return fail(fd, Errno(libc::ECONNABORTED));
                }
                let mut p = [libc::pollfd {
                    fd: ufd,
                    events: libc::POLLIN,
                    revents: 0,
                }];
                match sys::poll(&mut p, Some(left)) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => return fail(fd, e),
                }
            }
            Err(e) => return fail(fd, e),
        }
    }
    Ok((fd, msg))
}

/// The message that goes with a connection through the stand-in.
#[derive(Debug, PartialEq, Eq)]
struct Handoff {
    secret: u64,
    verdict: Verdict,
    /// What the exchange negotiated; `None` for a plain TCP connection.
    neg: Option<Negotiated>,
    /// Bytes the exchange read past the peer's Request.
    leftover: Vec<u8>,
}

impl Handoff {
    const MAGIC: &'static [u8; 4] = b"XSA1";
    /// Magic and total length.
    const HEAD: usize = 8;
    /// No message is longer (a Request's private data is at most 512 octets, what the
    /// exchange read past it at most one read).
    const MAX: usize = 16 << 10;

    fn total_len(head: &[u8]) -> Option<usize> {
        if &head[..4] != Self::MAGIC {
            return None;
        }
        Some(u32::from_le_bytes(head[4..8].try_into().ok()?) as usize)
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(128 + self.leftover.len());
        b.extend_from_slice(Self::MAGIC);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&self.secret.to_le_bytes());
        let (kind, bytes, n, word) = match self.verdict {
            Verdict::Ddp => (0u8, [0u8; 16], 0usize, 0u32),
            Verdict::Bytes(b, n) => (1, b, n, 0),
            Verdict::Silent(ms) => (2, [0; 16], 0, ms),
            Verdict::Eof => (3, [0; 16], 0, 0),
            Verdict::Error(e) => (4, [0; 16], 0, e as u32),
        };
        b.push(kind);
        b.push(n as u8);
        b.extend_from_slice(&bytes);
        b.extend_from_slice(&word.to_le_bytes());
        match &self.neg {
            None => b.push(0),
            Some(n) => {
                b.push(1);
                b.push(n.revision);
                let flags = [
                    n.crc,
                    n.markers_tx,
                    n.markers_rx,
                    n.enhanced,
                    n.p2p,
                    n.initiator_sends_rtr,
                    n.responder_expects_rtr,
                ]
                .iter()
                .enumerate()
                .fold(0u8, |f, (i, &on)| f | (u8::from(on) << i));
                b.push(flags);
                b.extend_from_slice(&n.ird.to_le_bytes());
                b.extend_from_slice(&n.ord.to_le_bytes());
                b.push(match n.rtr {
                    None => 0,
                    Some(RtrKind::Write) => 1,
                    Some(RtrKind::Read) => 2,
                    Some(RtrKind::Send) => 3,
                });
                match &n.peer_params {
                    None => b.push(0),
                    Some(p) => {
                        b.push(1);
                        b.extend_from_slice(&p.ird_word().to_be_bytes());
                        b.extend_from_slice(&p.ord_word().to_be_bytes());
                    }
                }
                b.extend_from_slice(&(n.peer_private_data.len() as u16).to_le_bytes());
                b.extend_from_slice(&n.peer_private_data);
            }
        }
        b.extend_from_slice(&(self.leftover.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.leftover);
        let total = b.len() as u32;
        b[4..8].copy_from_slice(&total.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Handoff> {
        let mut r = Reader(b);
        if r.take(4)? != Self::MAGIC || r.u32()? as usize != b.len() {
            return None;
        }
        let secret = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
        let kind = r.u8()?;
        let n = usize::from(r.u8()?);
        let bytes: [u8; 16] = r.take(16)?.try_into().ok()?;
        let word = r.u32()?;
        let verdict = match kind {
            0 => Verdict::Ddp,
            1 if n <= 16 => Verdict::Bytes(bytes, n),
            2 => Verdict::Silent(word),
            3 => Verdict::Eof,
            4 => Verdict::Error(word as i32),
            _ => return None,
        };
        let neg = match r.u8()? {
            0 => None,
            1 => {
                let revision = r.u8()?;
                let f = r.u8()?;
                let bit = |i: u8| f & (1 << i) != 0;
                let ird = r.u16()?;
                let ord = r.u16()?;
                let rtr = match r.u8()? {
                    0 => None,
                    1 => Some(RtrKind::Write),
                    2 => Some(RtrKind::Read),
                    3 => Some(RtrKind::Send),
                    _ => return None,
                };
                let peer_params = match r.u8()? {
                    0 => None,
                    1 => Some(MpaV2Params::parse(r.take(4)?).ok()?),
                    _ => return None,
                };
                let pd_len = usize::from(r.u16()?);
                let peer_private_data = r.take(pd_len)?.to_vec();
                Some(Negotiated {
                    revision,
                    crc: bit(0),
                    markers_tx: bit(1),
                    markers_rx: bit(2),
                    enhanced: bit(3),
                    ird,
                    ord,
                    p2p: bit(4),
                    rtr,
                    peer_params,
                    peer_private_data,
                    initiator_sends_rtr: bit(5),
                    responder_expects_rtr: bit(6),
                })
            }
            _ => return None,
        };
        let len = r.u32()? as usize;
        let leftover = r.take(len)?.to_vec();
        if !r.0.is_empty() {
            return None;
        }
        Some(Handoff {
            secret,
            verdict,
            neg,
            leftover,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

// ------------------------------------------------------------------------------ the thread

enum Cmd {
    Add(u64, Box<Listener>),
    Remove(u64),
    Configure(u64, Box<MpaConfig>),
}

#[derive(Default)]
struct Cmds {
    queue: Vec<Cmd>,
    next_id: u64,
    /// Some listener found its stand-in full (an `accept` then wakes the thread).
    full: bool,
    /// Removals queued (see [`Acceptor::done`]).
    sent: u32,
}

struct Acceptor {
    pid: i32,
    wake: RawFd,
    cmds: Mutex<Cmds>,
    /// Removals carried out (a futex word: [`unlisten`] waits for its own).
    done: AtomicU32,
}

/// This process's acceptor (a forked child's replaces its parent's: the parent's thread did
/// not survive the fork).
static ACCEPTOR: AtomicPtr<Acceptor> = AtomicPtr::new(core::ptr::null_mut());
/// The pid of a process one of whose threads is starting an acceptor (0: none). A value of
/// another process is its parent's, from before a fork: nobody here holds it.
static STARTING: AtomicI32 = AtomicI32::new(0);

/// The acceptor of process `pid` if it is this one's.
fn this_acceptor(pid: i32) -> Option<&'static Acceptor> {
    // SAFETY: ACCEPTOR only ever holds null or a leaked, never freed `Box<Acceptor>`.
    unsafe { ACCEPTOR.load(Ordering::Acquire).as_ref() }.filter(|a| a.pid == pid)
}

/// This process's acceptor, started on first use (one per process, whichever thread asks).
fn acceptor() -> Result<&'static Acceptor, Errno> {
    let pid = sys::getpid();
    loop {
        if let Some(a) = this_acceptor(pid) {
            return Ok(a);
        }
        let cur = STARTING.load(Ordering::Acquire);
        if cur == pid {
            std::thread::yield_now(); // (another thread here is starting it)
            continue;
        }
        if STARTING
            .compare_exchange(cur, pid, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue;
        }
        let r = match this_acceptor(pid) {
            Some(a) => Ok(a),
            None => start(pid).inspect(|&a| {
                ACCEPTOR.store(a as *const Acceptor as *mut Acceptor, Ordering::Release);
            }),
        };
        STARTING.store(0, Ordering::Release);
        return r;
    }
}

fn start(pid: i32) -> Result<&'static Acceptor, Errno> {
    let ep = super::move_high(sys::epoll_create()?)?;
    let wake = super::move_high(sys::eventfd()?)?;
    sys::epoll_ctl(
        ep,
        libc::EPOLL_CTL_ADD,
        wake,
        libc::EPOLLIN as u32,
        KIND_WAKE,
    )?;
    let a: &'static Acceptor = Box::leak(Box::new(Acceptor {
        pid,
        wake,
        cmds: Mutex::new(Cmds::default()),
        done: AtomicU32::new(0),
    }));
    sys::spawn_quiet("exsock-accept", move || Thread::new(a, ep).run())
        .map_err(|_| Errno(libc::EAGAIN))?;
    Ok(a)
}

const KIND_WAKE: u64 = 0;
const KIND_LISTENER: u64 = 1;
const KIND_CONN: u64 = 2;

struct Listener {
    fd: RawFd,
    cfg: MpaConfig,
    dual_wait: Option<Duration>,
    standin: (libc::sockaddr_un, libc::socklen_t),
    secret: u64,
    /// Connections in the background at most (then the TCP listener is left alone).
    cap: usize,
    in_flight: usize,
    /// Connections ready for the stand-in, which was full.
    ready: VecDeque<(RawFd, Handoff)>,
    /// Not watching the TCP listener (at its cap).
    paused: bool,
    /// When to try the full stand-in again.
    retry_at: Option<Instant>,
}

enum ConnPhase {
    /// A dual listener's connection, before its first bytes: until `deadline`.
    Classify { deadline: Instant, lowat: bool },
    /// The MPA exchange.
    Mpa(Box<Startup>),
}

struct Pending {
    listener: u64,
    fd: RawFd,
    phase: ConnPhase,
    /// The last epoll interest set.
    events: u32,
}

struct Thread {
    a: &'static Acceptor,
    ep: RawFd,
    origin: Instant,
    listeners: HashMap<u64, Listener>,
    conns: HashMap<u64, Pending>,
    next_conn: u64,
}

impl Thread {
    fn new(a: &'static Acceptor, ep: RawFd) -> Thread {
        Thread {
            a,
            ep,
            origin: Instant::now(),
            listeners: HashMap::new(),
            conns: HashMap::new(),
            next_conn: 0,
        }
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn run(mut self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        loop {
            let timeout = self.next_deadline();
            // (EINTR or a failure: the timers below still run)
            let n = sys::epoll_wait(self.ep, &mut events, timeout).unwrap_or_default();
            // Commands first: one queued before a connection arrived (new options set on the
            // listener, then a client told to connect) applies to it, whatever the order of
            // the events in this batch.
            self.commands();
            for ev in &events[..n] {
                let (kind, id) = (ev.u64 & 3, ev.u64 >> 2);
                match kind {
                    KIND_WAKE => {
                        let _ = sys::eventfd_drain(self.a.wake);
                        self.commands();
                    }
                    KIND_LISTENER => self.accept_all(id),
                    _ => self.advance(id),
                }
            }
            self.timers();
        }
    }

    fn commands(&mut self) {
        let cmds = {
            let mut c = self.a.cmds.lock();
            c.full = false;
            core::mem::take(&mut c.queue)
        };
        for cmd in cmds {
            match cmd {
                Cmd::Add(id, l) => {
                    let l = *l;
                    let _ = sys::epoll_ctl(
                        self.ep,
                        libc::EPOLL_CTL_ADD,
                        l.fd,
                        libc::EPOLLIN as u32,
                        id << 2 | KIND_LISTENER,
                    );
                    self.listeners.insert(id, l);
                    self.accept_all(id);
                }
                Cmd::Configure(id, cfg) => {
                    if let Some(l) = self.listeners.get_mut(&id) {
                        l.cfg = *cfg;
                    }
                }
                Cmd::Remove(id) => {
                    self.remove(id);
                    self.a.done.fetch_add(1, Ordering::Release);
                    // SAFETY: a futex wake on our own counter.
                    unsafe {
                        libc::syscall(
                            libc::SYS_futex,
                            self.a.done.as_ptr(),
                            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                            i32::MAX,
                        )
                    };
                }
            }
        }
        // (an `accept` took a connection: full stand-ins may have room now)
        let full: Vec<u64> = self
            .listeners
            .iter()
            .filter(|(_, l)| !l.ready.is_empty())
            .map(|(&id, _)| id)
            .collect();
        for id in full {
            self.flush_ready(id);
        }
    }

    fn remove(&mut self, id: u64) {
        let Some(l) = self.listeners.remove(&id) else {
            return;
        };
        let _ = sys::epoll_ctl(self.ep, libc::EPOLL_CTL_DEL, l.fd, 0, 0);
        let _ = sys::close(l.fd);
        for (fd, _) in l.ready {
            drop_conn(fd);
        }
        let gone: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.listener == id)
            .map(|(&k, _)| k)
            .collect();
        for k in gone {
            if let Some(c) = self.conns.remove(&k) {
                let _ = sys::epoll_ctl(self.ep, libc::EPOLL_CTL_DEL, c.fd, 0, 0);
                drop_conn(c.fd);
            }
        }
    }

    /// Accepts what the TCP listener `id` has, up to its cap.
    fn accept_all(&mut self, id: u64) {
        let now = self.now();
        loop {
            let Some(l) = self.listeners.get_mut(&id) else {
                return;
            };
            if l.in_flight >= l.cap {
                if !l.paused {
                    l.paused = true;
                    let _ = sys::epoll_ctl(
                        self.ep,
                        libc::EPOLL_CTL_MOD,
                        l.fd,
                        0,
                        id << 2 | KIND_LISTENER,
                    );
                }
                return;
            }
            let fd = match sys::accept4(l.fd, libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) {
                Ok(fd) => fd,
                // (EAGAIN: all taken; anything else, e.g. ECONNABORTED or EMFILE: next time)
                Err(_) => return,
            };
            l.in_flight += 1;
            let phase = match l.dual_wait {
                Some(w) => ConnPhase::Classify {
                    deadline: Instant::now() + w,
                    lowat: false,
                },
                None => ConnPhase::Mpa(Box::new(Startup::responder(l.cfg.clone(), now))),
            };
            self.next_conn += 1;
            let k = self.next_conn;
            if sys::epoll_ctl(self.ep, libc::EPOLL_CTL_ADD, fd, 0, k << 2 | KIND_CONN).is_err() {
                drop_conn(fd);
                l.in_flight -= 1;
                continue;
            }
            self.conns.insert(
                k,
                Pending {
                    listener: id,
                    fd,
                    phase,
                    events: 0,
                },
            );
            self.advance(k);
        }
    }

    /// Moves connection `k` on as far as it goes without waiting.
    fn advance(&mut self, k: u64) {
        enum Next {
            Wait(u32),
            Ready(Handoff),
            Fail,
        }
        let now = self.now();
        let next = {
            let Some(c) = self.conns.get_mut(&k) else {
                return;
            };
            let Some(l) = self.listeners.get(&c.listener) else {
                return;
            };
            loop {
                match &mut c.phase {
                    ConnPhase::Classify { deadline, lowat } => {
                        let wait = l.dual_wait.unwrap_or_default();
                        match classify_step(c.fd, *deadline, lowat, wait) {
                            None => break Next::Wait(libc::EPOLLIN as u32),
                            Some(Verdict::Ddp) => {
                                if *lowat {
                                    let _ = sys::setsockopt(
                                        c.fd,
                                        libc::SOL_SOCKET,
                                        libc::SO_RCVLOWAT,
                                        1 as libc::c_int,
                                    );
                                }
                                let s = Startup::responder(l.cfg.clone(), now);
                                c.phase = ConnPhase::Mpa(Box::new(s));
                            }
                            Some(v) => {
                                break Next::Ready(Handoff {
                                    secret: l.secret,
                                    verdict: v,
                                    neg: None,
                                    leftover: Vec::new(),
                                });
                            }
                        }
                    }
                    ConnPhase::Mpa(s) => match s.step(c.fd, now) {
                        Step::Pending { events } => {
                            let mut ev = 0u32;
                            if events & libc::POLLIN != 0 {
                                ev |= libc::EPOLLIN as u32;
                            }
                            if events & libc::POLLOUT != 0 {
                                ev |= libc::EPOLLOUT as u32;
                            }
                            break Next::Wait(ev);
                        }
                        Step::Done(neg, leftover) => {
                            break Next::Ready(Handoff {
                                secret: l.secret,
                                verdict: Verdict::Ddp,
                                neg: Some(neg),
                                leftover,
                            });
                        }
                        Step::Failed(_) => break Next::Fail,
                    },
                }
            }
        };
        match next {
            Next::Wait(ev) => self.want(k, ev),
            Next::Ready(h) => self.ready(k, h),
            Next::Fail => self.fail(k),
        }
    }

    fn want(&mut self, k: u64, events: u32) {
        if let Some(c) = self.conns.get_mut(&k)
            && c.events != events
        {
            c.events = events;
            let _ = sys::epoll_ctl(
                self.ep,
                libc::EPOLL_CTL_MOD,
                c.fd,
                events,
                k << 2 | KIND_CONN,
            );
        }
    }

    fn fail(&mut self, k: u64) {
        if let Some(c) = self.conns.remove(&k) {
            let _ = sys::epoll_ctl(self.ep, libc::EPOLL_CTL_DEL, c.fd, 0, 0);
            drop_conn(c.fd);
            self.done_one(c.listener);
        }
    }

    /// One connection of listener `id` left the background: it may accept again.
    fn done_one(&mut self, id: u64) {
        if let Some(l) = self.listeners.get_mut(&id) {
            l.in_flight = l.in_flight.saturating_sub(1);
            if l.paused && l.in_flight < l.cap {
                l.paused = false;
                let _ = sys::epoll_ctl(
                    self.ep,
                    libc::EPOLL_CTL_MOD,
                    l.fd,
                    libc::EPOLLIN as u32,
                    id << 2 | KIND_LISTENER,
                );
                self.accept_all(id);
            }
        }
    }

    /// Connection `k` is ready to be accepted: to the stand-in (or its queue, if full).
    fn ready(&mut self, k: u64, h: Handoff) {
        let Some(c) = self.conns.remove(&k) else {
            return;
        };
        let _ = sys::epoll_ctl(self.ep, libc::EPOLL_CTL_DEL, c.fd, 0, 0);
        if let ConnPhase::Classify { lowat: true, .. } = c.phase {
            let _ = sys::setsockopt(c.fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, 1 as libc::c_int);
        }
        let Some(l) = self.listeners.get_mut(&c.listener) else {
            drop_conn(c.fd);
            return;
        };
        l.ready.push_back((c.fd, h));
        self.flush_ready(c.listener);
    }

    /// Hands listener `id`'s ready connections to its stand-in while it has room.
    fn flush_ready(&mut self, id: u64) {
        let mut handed = 0;
        let gone = {
            let Some(l) = self.listeners.get_mut(&id) else {
                return;
            };
            let mut gone = false;
            while let Some((fd, h)) = l.ready.pop_front() {
                match hand_off(&l.standin, fd, &h) {
                    Ok(()) => {
                        let _ = sys::close(fd);
                        handed += 1;
                    }
                    Err(Errno::EAGAIN) => {
                        l.ready.push_front((fd, h));
                        l.retry_at = Some(Instant::now() + FULL_RETRY);
                        self.a.cmds.lock().full = true;
                        break;
                    }
                    Err(_) => {
                        // (the stand-in is gone: every process closed the listener)
                        drop_conn(fd);
                        gone = true;
                        break;
                    }
                }
            }
            if l.ready.is_empty() {
                l.retry_at = None;
            }
            gone
        };
        for _ in 0..handed {
            self.done_one(id);
        }
        if gone {
            self.remove(id);
        }
    }

    /// Deadlines: classifications and exchanges that ran out, full stand-ins to try again.
    fn timers(&mut self) {
        let now = Instant::now();
        let t = self.now();
        let due: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| match &c.phase {
                ConnPhase::Classify { deadline, .. } => *deadline <= now,
                ConnPhase::Mpa(s) => s.deadline().is_some_and(|d| d <= t),
            })
            .map(|(&k, _)| k)
            .collect();
        for k in due {
            self.advance(k);
        }
        let retry: Vec<u64> = self
            .listeners
            .iter()
            .filter(|(_, l)| l.retry_at.is_some_and(|r| r <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in retry {
            self.flush_ready(id);
        }
    }

    fn next_deadline(&self) -> Option<Duration> {
        let now = Instant::now();
        let t = self.now();
        let conns = self.conns.values().filter_map(|c| match &c.phase {
            ConnPhase::Classify { deadline, .. } => Some(deadline.saturating_duration_since(now)),
            ConnPhase::Mpa(s) => s.deadline().map(|d| d.saturating_sub(t)),
        });
        let retries = self
            .listeners
            .values()
            .filter_map(|l| l.retry_at.map(|r| r.saturating_duration_since(now)));
        // (+1 ms: epoll_wait counts whole milliseconds and must not wake just before)
        conns
            .chain(retries)
            .min()
            .map(|d| d + Duration::from_millis(1))
    }
}

/// A connection that goes no further: FIN (or a reset, with unread input) now, whatever
/// copies a forked child holds.
fn drop_conn(fd: RawFd) {
    let _ = sys::shutdown(fd, libc::SHUT_RDWR);
    let _ = sys::close(fd);
}

/// One look at a dual listener's connection: `None` while its first bytes are still to come
/// (before `deadline`), else what they say.
fn classify_step(
    fd: RawFd,
    deadline: Instant,
    lowat: &mut bool,
    wait: Duration,
) -> Option<Verdict> {
    let mut buf = [0u8; 16];
    let expired = Instant::now() >= deadline;
    match sys::recv(fd, &mut buf, libc::MSG_PEEK | libc::MSG_DONTWAIT) {
        Ok(0) => Some(Verdict::Eof),
        Ok(n) => match judge(&buf[..n]) {
            Judgement::Mpa => Some(Verdict::Ddp),
            Judgement::NotMpa => Some(Verdict::Bytes(buf, n)),
            Judgement::NeedMore if expired => Some(Verdict::Bytes(buf, n)),
            Judgement::NeedMore => {
                if !*lowat {
                    // (readable again only once the whole key can be there)
                    let _ = sys::setsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_RCVLOWAT,
                        MPA_REQUEST_KEY.len() as libc::c_int,
                    );
                    *lowat = true;
                }
                None
            }
        },
        Err(Errno::EAGAIN) if expired => Some(Verdict::Silent(wait.as_millis() as u32)),
        Err(Errno::EAGAIN) => None,
        Err(e) => Some(Verdict::Error(e.0)),
    }
}

/// Connects to the stand-in and sends `fd` with its message. `EAGAIN`: the stand-in's
/// backlog is full.
fn hand_off(
    standin: &(libc::sockaddr_un, libc::socklen_t),
    fd: RawFd,
    h: &Handoff,
) -> Result<(), Errno> {
    let u = sys::socket(
        libc::AF_UNIX,
        libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
    )?;
    let r = sys::connect(u, &standin.0, standin.1).and_then(|()| {
        let msg = h.encode();
        let n = sys::send_with_fd(u, &msg, fd)?;
        if n == msg.len() {
            return Ok(());
        }
        // (a new connection's buffer takes far more than a message; finish it anyway)
        let mut off = n;
        while off < msg.len() {
            let mut p = [libc::pollfd {
                fd: u,
                events: libc::POLLOUT,
                revents: 0,
            }];
            sys::poll(&mut p, Some(Duration::from_millis(100)))?;
            off += sys::send(u, &msg[off..], libc::MSG_DONTWAIT)?;
        }
        Ok(())
    });
    let _ = sys::close(u);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddp_proto::mpa::startup::RtrKind;

    #[test]
    fn judges_first_bytes() {
        assert_eq!(judge(b"MPA ID Req Frame\x80\x00"), Judgement::Mpa);
        assert_eq!(judge(b"MPA ID Req Frame"), Judgement::Mpa);
        assert_eq!(judge(b"MPA ID"), Judgement::NeedMore);
        assert_eq!(judge(b"M"), Judgement::NeedMore);
        assert_eq!(judge(b"MPA ID Rep Frame"), Judgement::NotMpa);
        assert_eq!(judge(b"GET / HTTP/1.1\r\n"), Judgement::NotMpa);
        assert_eq!(judge(b""), Judgement::NeedMore);
    }

    #[test]
    fn verdicts_read_well() {
        let mut b = [0u8; 16];
        b[..6].copy_from_slice(b"GET /\n");
        assert_eq!(
            Verdict::Bytes(b, 6).to_string(),
            "plain TCP (dual: first bytes are not an MPA Request: \"GET /\\x0a\")"
        );
        assert_eq!(
            Verdict::Silent(200).to_string(),
            "plain TCP (dual: no bytes within 200 ms)"
        );
    }

    fn negotiated(i: u8) -> Negotiated {
        Negotiated {
            revision: 1 + i % 2,
            crc: i & 1 != 0,
            markers_tx: i & 2 != 0,
            markers_rx: i & 4 != 0,
            enhanced: i & 8 != 0,
            ird: 16 + u16::from(i),
            ord: 300 - u16::from(i),
            p2p: i & 16 != 0,
            rtr: [
                None,
                Some(RtrKind::Write),
                Some(RtrKind::Read),
                Some(RtrKind::Send),
            ][usize::from(i % 4)],
            peer_params: (i & 32 != 0).then_some(MpaV2Params {
                ird: 5,
                ord: 7,
                p2p: true,
                send_rtr: false,
                write_rtr: true,
                read_rtr: i & 64 != 0,
            }),
            peer_private_data: (0..i).collect(),
            initiator_sends_rtr: i & 64 != 0,
            responder_expects_rtr: i & 128 != 0,
        }
    }

    /// Every field survives the trip; a wrong length, magic or kind is refused.
    #[test]
    fn handoff_messages_round_trip() {
        for i in 0..=255u8 {
            let h = Handoff {
                secret: 0x0123_4567_89ab_cdef ^ u64::from(i),
                verdict: Verdict::Ddp,
                neg: Some(negotiated(i)),
                leftover: vec![i; usize::from(i) * 3],
            };
            let b = h.encode();
            assert_eq!(Handoff::total_len(&b), Some(b.len()));
            assert_eq!(Handoff::decode(&b), Some(h));
            assert_eq!(Handoff::decode(&b[..b.len() - 1]), None);
        }
        let mut first = [0u8; 16];
        first[..3].copy_from_slice(b"GET");
        for v in [
            Verdict::Bytes(first, 3),
            Verdict::Silent(200),
            Verdict::Eof,
            Verdict::Error(104),
        ] {
            let h = Handoff {
                secret: 7,
                verdict: v,
                neg: None,
                leftover: Vec::new(),
            };
            let mut b = h.encode();
            assert_eq!(Handoff::decode(&b), Some(h));
            b[0] = b'Y';
            assert_eq!(Handoff::decode(&b), None);
        }
    }
}
