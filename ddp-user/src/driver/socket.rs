//! [`DdpSocket`]: the native API of a connected DDP socket (what the preload calls, and
//! what Rust programs may use directly).

use core::time::Duration;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use crate::sync::{Guard, Mutex};
use std::time::Instant;

use ddp_proto::conn::{PostError, Role, SMALL_SEND_MAX, SendFlags, State};
use ddp_proto::ddp::{STag, Sge, SgeList};
use ddp_proto::mpa::startup::{Negotiated, RtrKind};

use crate::driver::conn::{ConnState, Phase, SmallRound, TX_STREAM_LIMIT, ended_errno};
use crate::driver::mem::{UserSink, plausible};
use crate::driver::settings::{Settings, Timeout};
use crate::driver::startup::Startup;
use crate::driver::waitset::Role as WaitRole;
use crate::driver::{FORK_GEN, PARENT_FORKS, Shared, engine, move_high};
use crate::engine::cq::{ConnInfo, LastTerminate, Wc, state};
use crate::engine::options::{Options, RTR_READ, RTR_SEND, RTR_WRITE};
use crate::engine::registry::RegError;
use crate::sys::{self, Errno};

/// `DDP_MAX_SGE`.
pub const MAX_SGE: usize = 16;
/// `DDP_SIGNALED`.
pub const SIGNALED: u32 = 0x1;
/// `DDP_SOLICITED`.
pub const SOLICITED: u32 = 0x2;
/// `DDP_MORE`: the work request may wait in the send queue for the ones that follow.
pub const MORE: u32 = 0x4;

/// A connected (or connecting) DDP socket. Cheap to clone (`Arc`), `Send + Sync`. When the
/// last clone is dropped the socket is closed ([`DdpSocket::close`]).
#[derive(Clone)]
pub struct DdpSocket {
    h: Arc<Handle>,
}

struct Handle {
    sh: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.sh.close();
    }
}

impl core::fmt::Debug for DdpSocket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DdpSocket")
            .field("tcp_fd", &self.h.sh.tcp_fd)
            .field("app_fd", &self.h.sh.app_end)
            .finish()
    }
}

/// Where a socket's data is at one moment, and who watches it ([`DdpSocket::queues`]): what a
/// stalled connection is diagnosed with (`exsock-stat`). Byte counts saturate at `u32::MAX`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queues {
    /// Input in the TCP socket that the engine has not read (`FIONREAD` of the TCP fd).
    pub tcp_in: u32,
    /// Received stream data in the engine's backlog (held for a reader, or waiting for room
    /// in the socketpair).
    pub backlog: u32,
    /// Received stream data in the socketpair, for the application's reads.
    pub pair_in: u32,
    /// Stream data the application wrote into the socketpair that the engine has not taken.
    pub pair_out: u32,
    /// Bytes the engine has still to write to the TCP socket (framed or queued).
    pub unsent: u32,
    /// Bytes in the TCP socket's send queue (`SIOCOUTQ`: not yet acknowledged by the peer).
    pub tcp_out: u32,
    /// Application threads inside the library on this socket now.
    pub inside: u16,
    /// `QUEUE_*` flags.
    pub flags: u16,
}

/// [`Queues::flags`]: received data is held in the engine for a reader that was told the fd
/// is readable.
pub const QUEUE_HELD: u16 = 1;
/// ... and that data is still in the TCP socket (announced to the reader, not yet read).
pub const QUEUE_ANNOUNCED: u16 = 2;
/// The TCP fd is watched by an application thread (held lazily after its last wait), not by
/// the progress thread.
pub const QUEUE_LAZY: u16 = 4;
/// The progress thread is armed for the TCP fd's input.
pub const QUEUE_ARMED_IN: u16 = 8;
/// The progress thread is armed for the TCP fd's output (an unsent tail).
pub const QUEUE_ARMED_OUT: u16 = 16;
/// Stream sends went into the socketpair (the engine's send limit was reached).
pub const QUEUE_SPILLED: u16 = 32;
/// The connection's input has ended (EOF, or the connection failed).
pub const QUEUE_RX_DONE: u16 = 64;
/// The application closed the socket while another process still had it (a forked child):
/// the engine serves the connection for them ([`WeakDdpSocket::upgrade_served`]).
pub const QUEUE_OTHERS: u16 = 128;

/// Counters beyond `DDP_CONN_INFO` ([`DdpSocket::counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// FPDUs whose CRC did not match.
    pub crc_errors: u64,
    /// Terminates sent.
    pub terminates_sent: u64,
    /// Terminates received.
    pub terminates_received: u64,
    /// Reads of the TCP socket for input.
    pub rx_reads: u64,
    /// Large stream FPDUs placed straight into a reader's buffer by a read that placed
    /// another one before them (several FPDUs per read).
    pub rx_chained: u64,
    /// Such reads whose guess of the FPDUs to come was wrong: the bytes after the wrong
    /// guess were copied back out and taken as buffered input.
    pub rx_chain_misses: u64,
    /// Receive rounds that took their input whole in one step: a poll's small stream
    /// messages (`ConnState::small_round`), a completion wait's Sends into posted receives
    /// (`ConnState::posted_round`).
    pub rx_small_rounds: u64,
}

/// A [`DdpSocket`] that does not keep the socket open ([`DdpSocket::downgrade`]).
#[derive(Clone)]
pub struct WeakDdpSocket {
    h: Weak<Handle>,
    sh: Weak<Shared>,
}

impl WeakDdpSocket {
    /// The socket, while any [`DdpSocket`] of it is alive.
    pub fn upgrade(&self) -> Option<DdpSocket> {
        self.h.upgrade().map(|h| DdpSocket { h })
    }

    /// [`WeakDdpSocket::upgrade`], or, once every [`DdpSocket`] of it is gone, the socket
    /// while the engine still serves it for another process ([`QUEUE_OTHERS`]): a view for
    /// looking at it (its drop closes nothing; the socket's own close was done and waits for
    /// the others' hang-up).
    pub fn upgrade_served(&self) -> Option<DdpSocket> {
        if let Some(s) = self.upgrade() {
            return Some(s);
        }
        let sh = self.sh.upgrade()?;
        if sh.in_child() || !sh.user_closed.load(Ordering::Acquire) {
            return None;
        }
        let served = {
            let st = sh.lock();
            st.others_hold && !st.finalized
        };
        // (the view's `Handle` calls `close` when dropped: a no-op on a closed socket)
        served.then(|| DdpSocket {
            h: Arc::new(Handle { sh }),
        })
    }
}

/// Moves the front of the backlog into the caller's buffers after the `filled` bytes already
/// there (`recv`'s steps that take from it); returns the bytes moved.
#[inline]
fn take_backlog(st: &mut ConnState, bufs: &mut [IoSliceMut<'_>], filled: usize) -> usize {
    if let [one] = bufs {
        st.backlog.drain_to(&mut one[filled..])
    } else {
        let mut sink = UserSink::new(bufs, filled);
        st.backlog.drain_into(|d| sink.put(d))
    }
}

/// An application thread inside the library on a socket: the progress thread leaves the
/// socket's TCP input to it until it leaves (see [`crate::driver::conn`]).
struct Inline<'a> {
    sh: &'a Shared,
    st: Option<Guard<'a, ConnState>>,
}

impl<'a> Inline<'a> {
    fn enter(sh: &'a Shared) -> Inline<'a> {
        let mut st = sh.lock();
        st.inline += 1;
        Inline { sh, st: Some(st) }
    }

    fn st(&mut self) -> &mut ConnState {
        self.st.as_mut().expect("held between waits")
    }

    /// Releases the lock and waits for the TCP socket (what this socket needs from it) and
    /// `extra`, at most `timeout`. `Ok(false)` on timeout.
    fn wait(
        &mut self,
        extra: Option<(RawFd, i16)>,
        timeout: Option<Duration>,
    ) -> Result<bool, Errno> {
        let sh = self.sh;
        let st = self.st.as_mut().expect("held between waits");
        let mut ev: i16 = 0;
        if st.is_connecting() {
            ev = st.startup_events;
        } else {
            if st.wants_input() {
                ev |= libc::POLLIN;
            }
            if st.has_tail() {
                ev |= libc::POLLOUT;
            }
        }
        let mut fds = [
            libc::pollfd {
                fd: if ev != 0 { sh.tcp_fd } else { -1 },
                events: ev,
                revents: 0,
            },
            libc::pollfd {
                fd: extra.map_or(-1, |e| e.0),
                events: extra.map_or(0, |e| e.1),
                revents: 0,
            },
        ];
        // Take the socket away from the progress thread while we wait on it ourselves:
        // a wakeup on the other CPU would only contend with us (engine.md: 15-20 us).
        if st.tcp_armed != 0 {
            sh.disarm_tcp(st);
        }
        // Two fds to wait on: on the socket's wait set if it is free (one wait-queue entry,
        // not one per fd: `waitset`). The app end's role for the socketpair, the CQ's for
        // the completion eventfd.
        let solo = ev != 0
            && extra.is_some()
            && !st.wait_set_busy
            && !sh.in_child()
            && sh.wait_set.usable();
        st.wait_set_busy |= solo;
        let roles = [
            WaitRole::Tcp,
            if extra.is_some_and(|e| e.0 == sh.app_end) {
                WaitRole::App
            } else {
                WaitRole::Cq
            },
        ];
        // Other sockets held lazily would not be served while we block here (this one
        // stays: we are inside on it).
        let others = crate::driver::lazy_held_elsewhere(st);
        self.st = None;
        if others {
            crate::driver::release_lazy();
        }
        let r = if solo {
            // SAFETY: no signal mask.
            unsafe {
                sh.wait_set
                    .wait(&mut fds, roles, timeout, core::ptr::null())
            }
            .unwrap_or_else(|| sys::poll(&mut fds, timeout))
        } else {
            sys::poll(&mut fds, timeout)
        };
        let mut st = self.sh.lock();
        if solo {
            st.wait_set_busy = false;
        }
        self.st = Some(st);
        r.map(|n| n > 0)
    }
}

impl Drop for Inline<'_> {
    fn drop(&mut self) {
        let mut st = self.st.take().unwrap_or_else(|| self.sh.lock());
        st.inline -= 1;
        if st.inline == 0 {
            self.sh.leave_inline(&mut st);
        }
    }
}

/// An application thread waiting in `poll`/`ppoll` on a socket's app fd (from
/// [`DdpSocket::poll_wait`]): while it lives, the socket's TCP fd belongs to that thread (as
/// for a thread blocked in `recv`: the progress thread's interest is removed), the thread adds
/// [`PollWait::tcp_fd`] with [`PollWait::events`] to its poll set and, when it fires, calls
/// [`PollWait::service`], which processes the input inline (stream data lands in the
/// socketpair, so the app fd's own readiness is then right). This saves the two cross-thread
/// handoffs (TCP -> progress thread -> application) of a receive behind a poll. Dropping it
/// gives the socket back to the progress thread (level-triggered: nothing is lost).
pub struct PollWait {
    sock: DdpSocket,
    /// [`PollWait::events`] as they were when the wait was made, for its first call (one
    /// lock less per `poll`); taken by it.
    first_events: core::cell::Cell<Option<i16>>,
    /// Whether the socket was held lazily, and held stream data, when the wait was made:
    /// what [`release_lazy_besides`] counts (a thread inside on a socket keeps both as they
    /// are until it leaves, except that a round of its own may start a hold).
    lazy: bool,
    held: bool,
    /// [`PollWait::service_last`] left the socket already: nothing for `drop` to do.
    left: core::cell::Cell<bool>,
    /// The wait has the socket's wait set ([`PollWait::wait_alone`]).
    solo: bool,
    /// The report the next service answers showed the peer's FIN ([`PollWait::reported`]).
    fin: core::cell::Cell<bool>,
}

/// What `poll` does with a socket it is asked `POLLIN` of ([`DdpSocket::poll_enter`]).
pub enum PollEnter {
    /// Stream data is held for the socket's next `recv`: report `POLLIN` on its fd now.
    Held,
    /// Wait on the socket's TCP fd and serve its input in the calling thread.
    Wait(PollWait),
    /// Nothing to gain: leave the fd to the kernel.
    Kernel,
}

/// [`crate::release_lazy`] for a thread about to block with `waits` in its wait set: skipped
/// when the only sockets held lazily (or holding data) are among those (they stay with this
/// thread anyway: it is inside on them), which saves the walk over the engine's sockets on
/// every blocking `poll`/`epoll_wait` of a request-response loop.
pub fn release_lazy_besides<'a>(waits: impl IntoIterator<Item = &'a PollWait>) {
    if !crate::driver::lazy_held() {
        return;
    }
    let mut waits = waits.into_iter();
    // (one wait, the usual blocking `poll` of a request-response loop: its counts alone)
    let Some(w0) = waits.next() else {
        crate::driver::release_lazy();
        return;
    };
    let (mut lazy, mut held) = (usize::from(w0.lazy), usize::from(w0.held));
    if let Some(w1) = waits.next() {
        let mut seen = [0u64; 8];
        seen[0] = w0.sock.sh().id;
        let mut n_seen = 1;
        for w in core::iter::once(w1).chain(waits) {
            let sh = w.sock.sh();
            if seen[..n_seen].contains(&sh.id) {
                continue; // (the same socket twice in one set: count it once)
            }
            if n_seen == seen.len() {
                crate::driver::release_lazy(); // (more than we count: walk them all)
                return;
            }
            seen[n_seen] = sh.id;
            n_seen += 1;
            // (as they were when the wait was made: no lock here)
            lazy += usize::from(w.lazy);
            held += usize::from(w.held);
        }
    }
    if crate::driver::lazy_held_beyond(lazy, held) {
        crate::driver::release_lazy();
    }
}

impl PollWait {
    /// The socket waited on.
    pub fn socket(&self) -> &DdpSocket {
        &self.sock
    }

    /// The TCP fd to add to the poll set.
    pub fn tcp_fd(&self) -> RawFd {
        self.sock.sh().tcp_fd
    }

    /// For a caller whose poll set is this socket's app fd alone: waits as the caller's
    /// `ppoll` would on `fds` = [its app fd entry, [`PollWait::tcp_fd`] with
    /// [`PollWait::events`]] (the TCP entry's events not 0), on the socket's own epoll
    /// instance, where both stay registered between waits: one wait-queue entry per wait
    /// instead of two (`waitset`). Writes both `revents` and returns how many are set.
    /// `None`: this wait does not have the wait set, or it could not be used; nothing was
    /// waited for, and the caller polls both fds itself.
    ///
    /// # Safety
    /// `mask` is null or points to a valid signal set (the caller's `ppoll` mask).
    pub unsafe fn wait_alone(
        &self,
        fds: &mut [libc::pollfd; 2],
        timeout: Option<Duration>,
        mask: *const libc::sigset_t,
    ) -> Option<Result<usize, Errno>> {
        if !self.solo {
            return None;
        }
        let sh = self.sock.sh();
        let mut set = [
            libc::pollfd {
                fd: sh.app_end,
                ..fds[0]
            },
            libc::pollfd {
                fd: sh.tcp_fd,
                ..fds[1]
            },
        ];
        // SAFETY: `mask` as the caller promises.
        let r = unsafe {
            sh.wait_set
                .wait(&mut set, [WaitRole::App, WaitRole::Tcp], timeout, mask)
        };
        fds[0].revents = set[0].revents;
        fds[1].revents = set[1].revents;
        r
    }

    /// The events to ask for on [`PollWait::tcp_fd`] now (0: none; leave it out). The first
    /// call answers what they were when the wait was made.
    pub fn events(&self) -> i16 {
        if let Some(ev) = self.first_events.take() {
            return ev;
        }
        let st = self.sock.sh().lock();
        tcp_events(&st)
    }

    /// One round of the socket's work in the calling thread (input, unsent tails, Read
    /// Responses owed), after its TCP fd was reported ready.
    ///
    /// Returns true when stream data arrived while the socketpair was empty: the data is then
    /// held in the engine for the caller's next `recv` on the socket (which copies it straight
    /// into its buffer), the app fd itself is *not* readable yet, and the caller must report
    /// it readable (`POLLIN`) itself. Held data goes into the socketpair if no reader takes it
    /// within [`crate::driver::LAZY_REARM`], or as soon as any thread is about to wait in the
    /// library elsewhere ([`crate::release_lazy`]) or asks `FIONREAD` ([`crate::flush_held`]),
    /// so other waiters see the kernel's readiness after at most that. Otherwise (false) the
    /// input went where it always goes and the kernel's readiness of the app fd is right.
    pub fn service(&self) -> bool {
        self.service_as(true)
    }

    /// Like [`PollWait::service`], but stream data always goes into the socketpair (for
    /// waits that report the kernel's readiness only, such as `epoll_wait`).
    pub fn service_plain(&self) {
        self.service_as(false);
    }

    /// [`PollWait::service`] by a caller that returns at once when it says true: the wait
    /// then ends here, under the same lock (as dropping it would, one lock less).
    pub fn service_last(&self) -> bool {
        let sh = self.sock.sh();
        let mut st = sh.lock();
        // (one re-arm, after the round or as this thread leaves, not one for each)
        let held = sh.serve_round(&mut st, true, false);
        if self.fin.take() {
            read_to_fin(sh, &mut st);
        }
        if held {
            self.left.set(true);
            leave_poll(sh, &mut st, self.solo);
            if st.inline > 0 {
                sh.rearm(&mut st); // (not left: another thread is inside)
            }
        } else {
            sh.rearm(&mut st);
        }
        held
    }

    fn service_as(&self, may_hold: bool) -> bool {
        let sh = self.sock.sh();
        let mut st = sh.lock();
        let held = sh.serve_round(&mut st, may_hold, true);
        if self.fin.take() {
            read_to_fin(sh, &mut st);
        }
        held
    }

    /// What the poll set reported for [`PollWait::tcp_fd`] (its `revents`), before the
    /// service that answers it: a report with `POLLRDHUP` (asked for with the input, or the
    /// wait set's own) says that the peer's FIN is in, and that round reads on up to it, so
    /// that the stream's end is known with the data it came behind ([`read_to_fin`]).
    pub fn reported(&self, revents: i16) {
        self.fin.set(revents & libc::POLLRDHUP != 0);
    }
}

/// After a round served a report of the TCP fd that showed the peer's FIN (`POLLRDHUP`):
/// the input is read on up to the end (one `recv` more, once in a connection), so that the
/// end is recorded with the data the round held for its reader and the report answers
/// `EPOLLRDHUP` with its `EPOLLIN`, as a TCP socket's would ([`held_events`]). Not while the
/// input is announced to the reader (its FPDU stays in the kernel for its `recv`; the end is
/// then read after it, and reported with the next report).
pub(crate) fn read_to_fin(sh: &Shared, st: &mut ConnState) {
    if !st.rx_done() && !st.announced && !st.finalized && st.is_open() {
        sh.progress(st, None, true);
    }
}

impl Drop for PollWait {
    fn drop(&mut self) {
        if self.left.get() {
            return;
        }
        let sh = self.sock.sh();
        leave_poll(sh, &mut sh.lock(), self.solo);
    }
}

/// A thread waiting in `poll` on the socket leaves it ([`PollWait`]), giving back the wait
/// set if it had it (`solo`).
fn leave_poll(sh: &Shared, st: &mut ConnState, solo: bool) {
    if solo {
        st.wait_set_busy = false;
    }
    st.pollers -= 1;
    st.inline -= 1;
    if st.inline == 0 {
        sh.leave_inline(st);
    }
}

/// Whether stream data is held for the reader that was told of it (see
/// [`DdpSocket::epoll_held`]).
fn held_for_reader(st: &ConnState) -> bool {
    st.hold && (!st.backlog.is_empty() || st.announced) && !st.rd_shut && !st.finalized
}

/// Stream data held for a socket's reader, as `epoll_wait` reports it
/// ([`DdpSocket::epoll_held`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// The count of stream bytes received so far, plus one once the stream's end has been
    /// read: it changes with every arrival, which is the edge an edge-triggered registration
    /// reports.
    pub rx: u64,
    /// The events a TCP socket would report with this data ([`held_events`]; epoll bits, to be
    /// masked with what a registration asked for).
    pub events: u32,
}

/// The events a TCP socket shows when the data held for its reader has arrived (epoll bits):
/// a wakeup of a TCP socket's wait queue reports its whole state, so a registration that asked for `EPOLLOUT` too sees `EPOLLIN|EPOLLOUT` in
/// one entry (also edge-triggered), where the kernel, which never saw the held data, has no
/// new edge on the app fd to report.
/// - `EPOLLIN|EPOLLRDNORM` always.
/// - `EPOLLRDHUP` once the engine has read the stream's end behind the data (a round whose
///   report showed the FIN reads up to it: [`read_to_fin`]). The socketpair shows it only
///   once the backlog has gone; TCP as soon as the FIN is in.
/// - `EPOLLOUT|EPOLLWRNORM` (TCP's bits: no `EPOLLWRBAND`) while the app end is writable:
///   not while the back-pressure token is in (`ConnState::press`), the kernel's word on it
///   after a send spilled into the socketpair, else writable (our choice: bytes the
///   application wrote with raw system calls and the engine has not read yet are not looked
///   for; they would have to fill a quarter of the socketpair's send buffer to matter).
fn held_events(sh: &Shared, st: &ConnState) -> u32 {
    let mut ev = (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;
    if st.rx_done() {
        ev |= libc::EPOLLRDHUP as u32;
    }
    let writable = if st.pressed {
        false
    } else if st.spilled {
        let mut p = [libc::pollfd {
            fd: sh.app_end,
            events: libc::POLLOUT,
            revents: 0,
        }];
        sys::poll(&mut p, Some(Duration::ZERO)).is_ok() && p[0].revents & libc::POLLOUT != 0
    } else {
        true
    };
    if writable {
        ev |= (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32;
    }
    ev
}

/// What an inline waiter polls the TCP fd for on an open connection.
fn tcp_events(st: &ConnState) -> i16 {
    if !st.is_open() || st.finalized {
        return 0;
    }
    let mut ev: i16 = 0;
    if st.wants_input() {
        ev |= libc::POLLIN;
    }
    if st.has_tail() {
        ev |= libc::POLLOUT;
    }
    ev
}

/// Whether the connection has ended (no completion can come any more once the CQ is empty).
fn ended(st: &ConnState) -> bool {
    st.finalized
        || matches!(st.phase, Phase::Failed)
        || st
            .conn
            .as_ref()
            .is_some_and(|c| matches!(c.state(), State::Error | State::Closed))
}

fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

fn post_errno(st: &ConnState, e: PostError) -> Errno {
    match e {
        PostError::NotOpen => ended_errno(st),
        PostError::TooLong | PostError::SinkTooSmall | PostError::NoReads => Errno::EINVAL,
    }
}

/// Converts application iovecs into SGEs (`EINVAL`: more than [`MAX_SGE`], or one longer
/// than 2^32 - 1 bytes).
fn sges(iov: &[libc::iovec]) -> Result<SgeList, Errno> {
    if iov.len() > MAX_SGE {
        return Err(Errno::EINVAL);
    }
    SgeList::try_from_fn(iov.len(), |i| {
        let v = &iov[i];
        let l = u32::try_from(v.iov_len).map_err(|_| Errno::EINVAL)?;
        Ok(Sge::new(v.iov_base as u64, l))
    })
}

/// The total of `iov` if it is a small Send's: 1 ..= [`SMALL_SEND_MAX`] octets.
fn small_total(iov: &[libc::iovec]) -> Option<usize> {
    let mut total = 0usize;
    for v in iov {
        total = total.checked_add(v.iov_len)?;
    }
    (1..=SMALL_SEND_MAX).contains(&total).then_some(total)
}

fn reg_errno(e: RegError) -> Errno {
    match e {
        RegError::Invalid | RegError::NoSuchStag => Errno::EINVAL,
        RegError::NoStags => Errno::ENOMEM,
    }
}

fn random_key() -> u8 {
    let mut b = [0u8; 1];
    if sys::getrandom(&mut b).is_err() {
        b[0] = (Instant::now().elapsed().subsec_nanos() & 0xff) as u8;
    }
    b[0]
}

impl DdpSocket {
    /// Runs the MPA exchange as initiator on `tcp_fd` (a connected TCP socket, or one whose
    /// non-blocking connect is in progress) and returns the DDP socket.
    ///
    /// The engine works on its own duplicate of `tcp_fd` (close-on-exec, moved to a high
    /// number, made non-blocking, `TCP_NODELAY`); the caller keeps `tcp_fd` and must close
    /// it or `dup3` [`DdpSocket::app_fd`] over it (what the preload does).
    ///
    /// Blocking (`nonblocking == false`): the exchange runs in the calling thread, bounded by
    /// `opts.mpa_timeout`; errors: `ETIMEDOUT`, `ECONNREFUSED` (rejected), `ECONNRESET`
    /// (stream lost), `EPROTO` (invalid exchange), `EINVAL` (options). Non-blocking: returns
    /// at once; the progress thread runs the exchange; the app fd is readable (EOF, with
    /// [`DdpSocket::take_error`] telling why) if it fails, writes are queued until it
    /// completes, extension calls say `ENOTCONN` until then.
    pub fn connect(tcp_fd: RawFd, opts: &Options, nonblocking: bool) -> Result<DdpSocket, Errno> {
        Self::start(tcp_fd, opts, nonblocking, Role::Initiator, &mut |_| Ok(()))
    }

    /// Like [`DdpSocket::connect`], as MPA responder on an accepted TCP socket.
    pub fn accept(tcp_fd: RawFd, opts: &Options, nonblocking: bool) -> Result<DdpSocket, Errno> {
        Self::start(tcp_fd, opts, nonblocking, Role::Responder, &mut |_| Ok(()))
    }

    /// [`DdpSocket::connect`] (`initiator`) or [`DdpSocket::accept`], with `made` called on
    /// the new socket before its MPA exchange runs: the preload installs the app fd there,
    /// so that no other thread of the application can read the exchange's bytes from the TCP
    /// socket while a blocking exchange runs. An error from `made` ends the socket and is
    /// returned; so is a failed blocking exchange (then `made`'s work is the caller's to undo).
    pub fn start_with(
        tcp_fd: RawFd,
        opts: &Options,
        nonblocking: bool,
        initiator: bool,
        made: &mut dyn FnMut(&DdpSocket) -> Result<(), Errno>,
    ) -> Result<DdpSocket, Errno> {
        let role = if initiator {
            Role::Initiator
        } else {
            Role::Responder
        };
        Self::start(tcp_fd, opts, nonblocking, role, made)
    }

    /// A DDP socket on a TCP connection whose MPA exchange another thread already ran as
    /// responder (the listener's background acceptor, [`crate::driver::listener`]): `neg`
    /// is what it negotiated, `leftover` the bytes it read past the peer's Request. The
    /// socket starts in full operation; `tcp_fd` is the caller's, as for [`DdpSocket::accept`].
    pub fn adopt(
        tcp_fd: RawFd,
        opts: &Options,
        neg: Negotiated,
        leftover: Vec<u8>,
        nonblocking: bool,
    ) -> Result<DdpSocket, Errno> {
        let sh = Self::make(tcp_fd, opts, nonblocking, Role::Responder, None)?;
        let sock = DdpSocket {
            h: Arc::new(Handle { sh: sh.clone() }),
        };
        let mut st = sh.lock();
        st.inline = 0;
        st.open(&sh, neg, leftover);
        // (bytes that came with the Request are processed now: no readiness announces them)
        sh.progress(&mut st, None, false);
        drop(st);
        Ok(sock)
    }

    /// The socket's shared state, registered with the engine: in its MPA exchange
    /// (`startup`), or not yet open (`None`: the caller opens it).
    fn make(
        tcp_fd: RawFd,
        opts: &Options,
        nonblocking: bool,
        role: Role,
        startup: Option<Startup>,
    ) -> Result<Arc<Shared>, Errno> {
        let engine = engine()?;
        let fds = Fds::open(tcp_fd, nonblocking, !opts.tcp_nagle)?;
        let phase = match startup {
            Some(s) => Phase::Startup(Box::new(s)),
            None => Phase::Failed,
        };
        let mut st = ConnState::new(phase, role);
        st.nodelay = !opts.tcp_nagle;
        if opts.tcp_nagle {
            st.follow_app_nagle(fds.tcp);
        }
        st.registered = true;
        st.inline = u32::from(!nonblocking);
        let (pd, own_pd) = if opts.pd != 0 {
            (opts.pd, false)
        } else {
            (engine.own_pd(), true)
        };
        let sh = Arc::new(Shared {
            id: engine.next_id(),
            engine,
            tcp_fd: fds.tcp,
            eng_end: fds.eng,
            app_end: fds.app,
            inodes: [fds.tcp, fds.eng, fds.app].map(|fd| sys::inode(fd).unwrap_or(0)),
            pd,
            own_pd,
            zero_based: opts.zero_based_to,
            fork_gen: FORK_GEN.load(Ordering::Acquire),
            parent_forks: PARENT_FORKS.load(Ordering::Acquire),
            forked: AtomicBool::new(false),
            user_closed: AtomicBool::new(false),
            tx_deferred: AtomicBool::new(false),
            st: Mutex::new(st),
            cq: Mutex::new(Default::default()),
            deadline_visits: AtomicU32::new(0),
            wait_set: crate::driver::waitset::WaitSet::new(),
            settings: Settings::new(),
        });
        core::mem::forget(fds); // owned by `sh` now (closed in its Drop)
        if let Err(e) = engine.add(&sh) {
            sh.finalize(&mut sh.lock());
            return Err(e);
        }
        Ok(sh)
    }

    fn start(
        tcp_fd: RawFd,
        opts: &Options,
        nonblocking: bool,
        role: Role,
        made: &mut dyn FnMut(&DdpSocket) -> Result<(), Errno>,
    ) -> Result<DdpSocket, Errno> {
        let cfg = opts
            .mpa_config(role == Role::Initiator)
            .ok_or(Errno::EINVAL)?;
        let now = engine()?.now();
        let startup = match role {
            Role::Initiator => Startup::initiator(cfg, true, now),
            Role::Responder => Startup::responder(cfg, now),
        };
        let sh = Self::make(tcp_fd, opts, nonblocking, role, Some(startup))?;
        let engine = sh.engine;
        let sock = DdpSocket {
            h: Arc::new(Handle { sh: sh.clone() }),
        };
        if let Err(e) = made(&sock) {
            let mut st = sh.lock();
            st.fail_startup(e);
            sh.finalize(&mut st);
            return Err(e);
        }
        if nonblocking {
            let mut st = sh.lock();
            sh.progress(&mut st, None, false);
            // The progress thread watches the exchange's deadline only if it did not end
            // here (on loopback a responder usually finds the request waiting): a wake-up of
            // that thread per connection fewer. Under the socket's lock, as the thread's walk
            // of the deadlines expects.
            if matches!(st.phase, Phase::Startup(_)) {
                engine.watch_deadline(sh.id);
            }
            return Ok(sock);
        }
        // Blocking: the exchange runs here (inline was set to 1 above).
        let mut g = Inline {
            sh: &sh,
            st: Some(sh.lock()),
        };
        loop {
            let st = g.st();
            sh.progress(st, None, true);
            match st.phase {
                Phase::Open => break,
                Phase::Failed => {
                    let e = Errno(st.so_error);
                    sh.finalize(st);
                    return Err(e);
                }
                Phase::Startup(_) => {}
            }
            let left = st
                .startup_deadline()
                .map(|d| d.saturating_sub(engine.now()));
            match g.wait(None, left) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => {
                    let st = g.st();
                    st.fail_startup(e);
                    sh.finalize(st);
                    return Err(e);
                }
            }
        }
        drop(g);
        Ok(sock)
    }

    pub(crate) fn sh(&self) -> &Shared {
        &self.h.sh
    }

    /// The socketpair end to install under the application's fd number (`dup3`). Stream
    /// data arrives there; poll/select/epoll on it report the stream's readiness.
    pub fn app_fd(&self) -> RawFd {
        self.sh().app_end
    }

    /// The engine's TCP socket (for socket-level queries: names, `SOL_SOCKET`/`IPPROTO_TCP`
    /// options). Never read or write it.
    pub fn tcp_fd(&self) -> RawFd {
        self.sh().tcp_fd
    }

    /// The completion eventfd: readable while completions are pending. Owned by the socket.
    /// (Until this is called nobody outside the library can wait on it, and completions do
    /// not touch it: see `Shared::push_wc`.) Made by the first call: `EMFILE`/`ENFILE` if
    /// no descriptor is left for it.
    pub fn event_fd(&self) -> Result<RawFd, Errno> {
        self.sh().export_event_fd()
    }

    /// The protection domain of the socket.
    pub fn pd(&self) -> u32 {
        self.sh().pd
    }

    // (out of line: asked only where a call would wait or say EAGAIN, off the data path)
    #[inline(never)]
    fn nonblocking(&self, flags: i32) -> bool {
        let sh = self.sh();
        flags & libc::MSG_DONTWAIT != 0
            || sh
                .settings
                .nonblocking(sh.settings_ours(), || sys::is_nonblocking(sh.app_end).ok())
    }

    /// `SO_RCVTIMEO` or `SO_SNDTIMEO` of the TCP socket (`None`: not set).
    #[cold]
    #[inline(never)]
    fn timeout(&self, which: Timeout) -> Option<Duration> {
        let sh = self.sh();
        let name = match which {
            Timeout::Recv => libc::SO_RCVTIMEO,
            Timeout::Send => libc::SO_SNDTIMEO,
        };
        sh.settings.timeout(which, sh.settings_ours(), || {
            sys::socket_timeout(sh.tcp_fd, name)
        })
    }

    /// The application set `TCP_NODELAY` to `nodelay` (the caller forwarded it to
    /// [`DdpSocket::tcp_fd`]): with `Options::tcp_nagle`, plain writes follow it.
    pub fn app_set_nodelay(&self, nodelay: bool) {
        self.sh().lock().app_set_nodelay(nodelay);
    }

    /// `TCP_NODELAY` as the application last made it, while the engine may set it underneath
    /// (it follows the application's Nagle's algorithm write by write, or keeps `TCP_NODELAY`
    /// on a path with a small MSS: `Options::tcp_nagle`); `None`: the TCP socket's value is
    /// the answer.
    pub fn app_nodelay(&self) -> Option<bool> {
        self.sh().lock().app_nodelay()
    }

    /// The caller reports every change of the app fd's `O_NONBLOCK` (`fcntl(F_SETFL)`,
    /// `ioctl(FIONBIO)`) and of the socket's options with [`DdpSocket::settings_changed`]:
    /// blocking calls may then keep what they asked of the kernel instead of asking again
    /// each time (an `fcntl` and a `getsockopt` fewer per wait). Without it they ask each
    /// time, so changes made directly on the fd are seen.
    pub fn track_settings(&self) {
        self.sh().settings.track();
    }

    /// The app fd's `O_NONBLOCK` or an option of the socket may have changed (after
    /// [`DdpSocket::track_settings`]; call it after the change is made).
    pub fn settings_changed(&self) {
        self.sh().settings.changed();
    }

    /// For `poll`/`ppoll` asking for `POLLIN` on the app fd: whether stream data is held in
    /// the engine for this socket's next `recv` (an inline wait or receive took more than the
    /// reader has read so far). The hold goes on, its timer restarted: the caller reports
    /// `POLLIN` for the fd itself (as [`PollWait::service`] says), and the bytes go from the
    /// engine straight into the reader's buffer instead of through the socketpair.
    pub fn poll_held(&self) -> bool {
        self.epoll_held().is_some()
    }

    /// For `poll`/`ppoll` asking for `POLLIN` on the app fd, under one lock: held data
    /// ([`DdpSocket::poll_held`]), else a wait in the calling thread
    /// ([`DdpSocket::poll_wait`]).
    ///
    /// `alone`: the caller's poll set is this socket's fd alone, so the wait may use the
    /// socket's wait set ([`PollWait::wait_alone`]) if no other thread has it.
    pub fn poll_enter(&self, alone: bool) -> PollEnter {
        let sh = self.sh();
        if sh.in_child() {
            return PollEnter::Kernel;
        }
        let mut st = sh.lock();
        st.poll_reader = true;
        if held_for_reader(&st) {
            sh.note_hold(&mut st);
            return PollEnter::Held;
        }
        match self.wait_locked(st, alone) {
            Some(w) => PollEnter::Wait(w),
            None => PollEnter::Kernel,
        }
    }

    /// For `poll`/`ppoll` asking only for `POLLOUT` on the app fd: whether the kernel would
    /// answer exactly `POLLOUT` for it now, so that the caller may answer without asking it.
    /// The app fd is the socketpair's app end, writable unless sends spilled into it; true
    /// only while nothing else could show as well (the connection open, neither side shut
    /// down, no pending error, no EOF) and the state's lock is free. A `poll(POLLOUT)`
    /// before each write (request-response clients) saves a system call.
    pub fn poll_out_ready(&self) -> bool {
        let sh = self.sh();
        if sh.in_child() || sh.user_closed.load(Ordering::Relaxed) {
            return false;
        }
        let Ok(st) = sh.st.try_lock() else {
            return false;
        };
        !st.spilled
            && !st.pressed
            && st.is_open()
            && !st.finalized
            && st.close_deadline.is_none()
            && !st.want_shut_wr
            && !st.tcp_shut_wr
            && !st.rd_shut
            && !st.eng_shut
            && !st.rx_eof
            && !st.conn_done
            && st.so_error == 0
            && st.eng_open()
    }

    /// For `epoll_wait` on a set that watches this socket for input (and nothing else does):
    /// as [`DdpSocket::poll_held`], with what the caller reports for the held data (None:
    /// nothing held). The hold goes on, its timer restarted.
    pub fn epoll_held(&self) -> Option<Held> {
        let sh = self.sh();
        if sh.in_child() {
            return None;
        }
        let mut st = sh.lock();
        st.poll_reader = true;
        if held_for_reader(&st) {
            sh.note_hold(&mut st);
            Some(Held {
                rx: st.bytes_rx + st.announces + u64::from(st.rx_done()),
                events: held_events(sh, &st),
            })
        } else {
            None
        }
    }

    /// For `poll`/`ppoll` on a socket that [`DdpSocket::poll_enter`] or
    /// [`PollWait::service_last`] found holding stream data: the `poll` events a TCP socket
    /// would show with that data's `POLLIN` ([`Held::events`] as `poll` bits). 0 if nothing
    /// is held now.
    pub fn poll_held_events(&self) -> i16 {
        let sh = self.sh();
        if sh.in_child() {
            return 0;
        }
        let st = sh.lock();
        if held_for_reader(&st) {
            // (the epoll and poll bits of these events have the same values)
            held_events(sh, &st) as i16
        } else {
            0
        }
    }

    /// The socket's identity in this process (never reused while the engine runs).
    pub fn id(&self) -> u64 {
        self.sh().id
    }

    /// `epoll_ctl` added (or modified) this socket's fd in an epoll set: its readiness is
    /// asked of the kernel from now on, so received data is not held for a reader (see
    /// `ConnState::poll_reader`) until a `poll`/`select` asks for it again.
    pub fn epoll_watched(&self) {
        let sh = self.sh();
        if !sh.in_child() {
            sh.lock().poll_reader = false;
        }
    }

    /// For `poll`/`ppoll` on the app fd: takes the socket's TCP input into the calling
    /// thread for the duration of the wait ([`PollWait`]). `None` when there is nothing to
    /// gain (a forked child, a connection not open or ended, input paused by back-pressure).
    pub fn poll_wait(&self) -> Option<PollWait> {
        let sh = self.sh();
        if sh.in_child() {
            return None;
        }
        self.wait_locked(sh.lock(), false)
    }

    /// The wait of [`DdpSocket::poll_enter`] and [`DdpSocket::poll_wait`]; with `alone`, it
    /// takes the socket's wait set if it is free and usable.
    fn wait_locked(&self, mut st: Guard<'_, ConnState>, alone: bool) -> Option<PollWait> {
        let sh = self.sh();
        // Data held for a reader that polls again instead: into the socketpair, where the
        // kernel reports it.
        if st.hold {
            sh.end_hold(&mut st);
        }
        if tcp_events(&st) & libc::POLLIN == 0 {
            return None;
        }
        st.inline += 1;
        st.pollers += 1;
        if st.tcp_armed != 0 {
            sh.disarm_tcp(&mut st);
        }
        sh.rearm(&mut st); // (EPOLLOUT for an unsent tail stays with the progress thread)
        let solo = alone && !st.wait_set_busy && sh.wait_set.usable();
        st.wait_set_busy |= solo;
        let w = PollWait {
            sock: self.clone(),
            first_events: core::cell::Cell::new(Some(tcp_events(&st))),
            lazy: st.lazy_until.is_some(),
            held: st.hold_until.is_some(),
            left: core::cell::Cell::new(false),
            solo,
            fin: core::cell::Cell::new(false),
        };
        drop(st);
        Some(w)
    }

    /// Stream send (plain `write`/`send`/`writev`/`sendmsg`): the bytes are copied, framed
    /// as RDMAP Sends and written at once. Blocking sockets wait (at most `SO_SNDTIMEO` of
    /// the TCP socket) until everything is accepted; non-blocking ones accept what fits
    /// under the engine's send limit and say `EAGAIN` only when nothing fit. `EPIPE` once
    /// the connection has ended or writing was shut down (no `SIGPIPE` is raised: the
    /// preload decides). Only `MSG_DONTWAIT` and `MSG_NOSIGNAL` are meaningful in `flags`.
    pub fn send(&self, bufs: &[IoSlice<'_>], flags: i32) -> Result<usize, Errno> {
        let sh = self.sh();
        if sh.in_child() {
            let iov: Vec<libc::iovec> = bufs
                .iter()
                .map(|b| sys::iovec(b.as_ptr(), b.len()))
                .collect();
            return sys::sendmsg(sh.app_end, &iov, flags & libc::MSG_DONTWAIT);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        // (asked only where it decides something: one `fcntl` less per call)
        let nonblock = || self.nonblocking(flags);
        {
            let mut st = sh.lock();
            if st.app_nagle {
                st.nagle_for(sh, total);
            }
            if st.spilled {
                if sys::inq(sh.eng_end).unwrap_or(0) > 0 {
                    // Earlier bytes wait in the socketpair: these go behind them.
                    drop(st);
                    return self.spill(bufs, nonblock());
                }
                st.spilled = false;
            }
            if total <= SMALL_SEND_MAX
                && bufs.len() <= REST_INLINE
                && !sh.user_closed.load(Ordering::Acquire)
            {
                let mut small: [&[u8]; REST_INLINE] = [&[]; REST_INLINE];
                let n = rest_into(bufs, 0, &mut small);
                if let Some(n) = st.send_small_now(sh, &small[..n], total) {
                    if st.has_tail() && nonblock() {
                        st.press(sh);
                    }
                    return Ok(n);
                }
            }
        }
        let mut deadline = None;
        let mut g = Inline::enter(sh);
        let mut done = 0usize;
        let mut waited = false;
        loop {
            let st = g.st();
            if st.want_shut_wr || st.tcp_shut_wr || sh.user_closed.load(Ordering::Acquire) {
                return if done > 0 {
                    Ok(done)
                } else {
                    Err(Errno::EPIPE)
                };
            }
            let mut inline: [&[u8]; REST_INLINE] = [&[]; REST_INLINE];
            let heap;
            let rest: &[&[u8]] = if bufs.len() <= REST_INLINE {
                let n = rest_into(bufs, done, &mut inline);
                &inline[..n]
            } else {
                heap = rest_of(bufs, done);
                &heap
            };
            match st.phase {
                Phase::Startup(_) => done += st.queue_pre_open(rest),
                Phase::Failed => {
                    return if done > 0 {
                        Ok(done)
                    } else {
                        Err(ended_errno(st))
                    };
                }
                Phase::Open => {
                    if !st.is_open() {
                        return if done > 0 {
                            Ok(done)
                        } else {
                            Err(ended_errno(st))
                        };
                    }
                    if st.pressed && nonblock() {
                        // Bytes the kernel refused earlier wait (the app fd shows no
                        // POLLOUT): written now if it takes them, else EAGAIN, as from a TCP
                        // socket whose send buffer is full.
                        sh.progress(st, None, false);
                        if st.pressed {
                            return if done > 0 {
                                Ok(done)
                            } else {
                                Err(Errno::EAGAIN)
                            };
                        }
                    }
                    if st.may_lend(total - done) {
                        // Posted from the caller's buffers: written at once below, copied
                        // only as far as the kernel does not take them (`end_lent`).
                        let r = st.accept_stream_lent(rest);
                        if r.is_err() {
                            sh.end_lent(st);
                        }
                        done += r?;
                    } else {
                        done += st.accept_stream(rest)?;
                    }
                }
            }
            // Input: not while the TCP fd is held lazily for a thread about to come back for
            // it (a request-response exchange: nothing has arrived yet, a read would only say
            // EAGAIN); the hold ends within LAZY_REARM and the progress thread takes over.
            // Nor while its input interest is armed, with the progress thread or in an epoll
            // group's shadow: input is reported there (a read here would mostly say EAGAIN,
            // one `recvfrom` per write of a sender that receives nothing). A report that
            // came while this thread is inside disarmed it (`Shared::on_event` leaves the
            // input to this thread): then it is read here.
            let read_input =
                waited || (st.lazy_until.is_none() && st.tcp_armed & libc::EPOLLIN as u32 == 0);
            sh.progress(st, None, read_input);
            sh.end_lent(st);
            if done == total {
                if st.unsent_bytes() > 0 && nonblock() {
                    st.press(sh);
                }
                return Ok(done);
            }
            let st = g.st();
            let room = match st.phase {
                Phase::Startup(_) => false,
                _ => st.stream_queued < TX_STREAM_LIMIT,
            };
            if room && st.is_open() {
                continue; // the writes freed room: take more at once
            }
            if nonblock() {
                if done > 0 {
                    return Ok(done);
                }
                if !st.is_open() {
                    return Err(Errno::EAGAIN);
                }
                // The engine's queue is full: write into the socketpair (the progress thread
                // sends it as stream data once there is room), so that the kernel's own
                // POLLOUT on the app fd reports the back-pressure and EAGAIN comes from it.
                st.spilled = true;
                return self.spill(bufs, true);
            }
            if deadline.is_none() {
                deadline = Some(self.timeout(Timeout::Send).map(|d| Instant::now() + d));
            }
            let deadline = deadline.flatten();
            waited = true;
            match g.wait(None, remaining(deadline)) {
                Ok(true) => {}
                Ok(false) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return if done > 0 {
                        Ok(done)
                    } else {
                        Err(Errno::EAGAIN)
                    };
                }
                Ok(false) => {}
                // A signal handler ran: restart as the kernel does for a TCP socket (see
                // `sys::signal_restarts`; a socket timeout makes it EINTR, as signal(7)).
                Err(Errno::EINTR) if deadline.is_none() && sys::signal_restarts() => {}
                Err(e) => return if done > 0 { Ok(done) } else { Err(e) },
            }
        }
    }

    /// A send through the socketpair (the raw-write path the progress thread drains into the
    /// stream): while it holds earlier bytes, or when a nonblocking send found the engine's
    /// queue full. A blocking one blocks in the kernel (signals and `SA_RESTART` behave as
    /// the kernel makes them; `SO_SNDTIMEO` of the TCP socket is not applied to it).
    fn spill(&self, bufs: &[IoSlice<'_>], nonblock: bool) -> Result<usize, Errno> {
        let iov: Vec<libc::iovec> = bufs
            .iter()
            .map(|b| sys::iovec(b.as_ptr(), b.len()))
            .collect();
        let f = libc::MSG_NOSIGNAL | if nonblock { libc::MSG_DONTWAIT } else { 0 };
        sys::sendmsg(self.sh().app_end, &iov, f)
    }

    /// Stream receive (plain `read`/`recv`/`readv`/`recvmsg`): first from the socketpair;
    /// when it is empty, the calling thread receives inline, placing stream data straight
    /// into `bufs`. `MSG_PEEK`, `MSG_WAITALL`, `MSG_DONTWAIT` are honoured; blocking sockets
    /// wait at most `SO_RCVTIMEO` of the TCP socket (`EAGAIN` after it). Returns 0 at EOF
    /// (peer closed, or the connection ended: [`DdpSocket::take_error`] says why).
    pub fn recv(&self, bufs: &mut [IoSliceMut<'_>], flags: i32) -> Result<usize, Errno> {
        let sh = self.sh();
        if sh.in_child() {
            let mut iov = iovecs_mut(bufs, 0);
            return sys::recvmsg(sh.app_end, &mut iov, flags);
        }
        let cap: usize = bufs.iter().map(|b| b.len()).sum();
        if cap == 0 {
            return Ok(0);
        }
        let peek = flags & libc::MSG_PEEK != 0;
        let waitall = flags & libc::MSG_WAITALL != 0 && !peek;
        // (asked only when there is nothing to return: one `fcntl` less per call)
        let nonblock = || self.nonblocking(flags);
        let mut deadline = None;
        let mut g = Inline::enter(sh);
        let mut filled = 0usize;
        loop {
            let st = g.st();
            if peek && st.hold {
                // Peeked data must stay readable: held data goes to the socketpair first.
                sh.end_hold(st);
            }
            // 1. The socketpair holds the oldest data (all writers to it hold the lock); when
            //    it is known to be empty, the `recvmsg` that could only say EAGAIN is skipped.
            if st.pair_maybe_readable() {
                let mut inline = [sys::iovec(core::ptr::null(), 0); REST_INLINE];
                let mut heap;
                let iov: &mut [libc::iovec] = if bufs.len() <= REST_INLINE {
                    let n = iovecs_into(bufs, filled, &mut inline);
                    &mut inline[..n]
                } else {
                    heap = iovecs_mut(bufs, filled);
                    &mut heap
                };
                let pflags = libc::MSG_DONTWAIT | if peek { libc::MSG_PEEK } else { 0 };
                match sys::recvmsg(sh.app_end, iov, pflags) {
                    Ok(0) => {
                        if filled == 0 && st.so_error != 0 && matches!(st.phase, Phase::Failed) {
                            return Err(Errno(core::mem::take(&mut st.so_error)));
                        }
                        return Ok(filled);
                    }
                    Ok(n) => {
                        if !peek {
                            st.pair_read += n as u64;
                            if st.poll_reader
                                && st.inline <= 1
                                && !st.pair_maybe_readable()
                                && !st.backlog.is_empty()
                                && st.is_open()
                            {
                                // The socketpair is empty again and the backlog is the front
                                // of the stream: held for this reader from now on (the
                                // progress thread stops moving it into the socketpair).
                                st.hold = true;
                            }
                        }
                        filled += n;
                        if !waitall || filled == cap {
                            return Ok(filled);
                        }
                        continue;
                    }
                    Err(Errno::EAGAIN) => {}
                    Err(e) => return if filled > 0 { Ok(filled) } else { Err(e) },
                }
            }
            let before = st.bytes_rx;
            if peek {
                // Peeked data must stay readable: let it land in the socketpair.
                sh.progress(st, None, true);
                if st.bytes_rx != before || st.eng_shut {
                    continue;
                }
            } else if !st.backlog.is_empty() {
                // 2. Then what the socketpair could not take.
                let held = st.hold;
                filled += take_backlog(st, bufs, filled);
                if held && !st.has_tail() {
                    // Data held for us after an inline poll (nothing else happened since that
                    // round of work): only the end of the hold (or the EOF after the last
                    // byte) is left to do.
                    st.flush_backlog(sh);
                    if st.inline > 1 {
                        // (alone inside, this thread's leaving re-arms at once: `Inline`'s
                        // drop, under the same lock)
                        sh.rearm(st);
                    }
                } else {
                    sh.progress(st, None, false);
                }
                if !waitall || filled == cap {
                    return Ok(filled);
                }
                continue;
            } else {
                // 3. Then the TCP socket, inline, straight into the caller's buffers. The
                //    socketpair and the backlog are empty (known, or just seen: all writers to
                //    the socketpair hold the lock), so what does not fit may be held for this
                //    reader's next call rather than go through the socketpair: a stream reader
                //    takes it from the backlog, a `poll` reports it (`poll_held`), anything
                //    else that waits or asks ends the hold as it does after an inline poll.
                //    Only while this thread is alone inside: another one may sleep in the
                //    kernel on the socketpair (as `Shared::serve_round` says).
                if st.poll_reader && st.inline <= 1 && st.is_open() && !st.rd_shut {
                    st.hold = true;
                }
                // Small plain Sends, whole in one read, and nothing else to do: a poll's
                // round in one step (`ConnState::small_round`) into the backlog, the front of
                // the stream, and from there to the caller, without the general round.
                let read = match st.small_round(sh, true) {
                    SmallRound::Done => {
                        filled += take_backlog(st, bufs, filled);
                        // (what did not fit goes where the general round puts it: into the
                        // socketpair, or held for this reader)
                        if !st.backlog.is_empty() {
                            st.flush_backlog(sh);
                        }
                        if filled > 0 && (!waitall || filled == cap) {
                            return Ok(filled);
                        }
                        continue;
                    }
                    // (some of the read is in the backlog: taken first, in order, by step 2)
                    SmallRound::General { .. } if !st.backlog.is_empty() => continue,
                    SmallRound::General { read } => read,
                };
                let mut sink = UserSink::new(bufs, filled);
                sh.progress(st, Some(&mut sink), read);
                filled += sink.filled();
                if filled > 0 && (!waitall || filled == cap) {
                    return Ok(filled);
                }
                if st.bytes_rx != before || st.eng_shut {
                    continue;
                }
            }
            if nonblock() {
                return if filled > 0 {
                    Ok(filled)
                } else {
                    Err(Errno::EAGAIN)
                };
            }
            if deadline.is_none() {
                deadline = Some(self.timeout(Timeout::Recv).map(|d| Instant::now() + d));
            }
            let deadline = deadline.flatten();
            match g.wait(Some((sh.app_end, libc::POLLIN)), remaining(deadline)) {
                Ok(true) => {}
                Ok(false) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return if filled > 0 {
                        Ok(filled)
                    } else {
                        Err(Errno::EAGAIN)
                    };
                }
                Ok(false) => {}
                // As in `send`: SA_RESTART restarts the wait unless SO_RCVTIMEO is set.
                Err(Errno::EINTR) if deadline.is_none() && sys::signal_restarts() => {}
                Err(e) => return if filled > 0 { Ok(filled) } else { Err(e) },
            }
        }
    }

    /// `shutdown(how)`: `SHUT_WR` sends what is queued (bytes left in the socketpair
    /// included), then the TCP FIN (later sends say `EPIPE`; RDMA Read Requests from the
    /// peer can no longer be answered); `SHUT_RD` makes
    /// the app fd read EOF and drops later stream data; `SHUT_RDWR` both.
    pub fn shutdown(&self, how: i32) -> Result<(), Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return sys::shutdown(sh.app_end, how);
        }
        if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
            return Err(Errno::EINVAL);
        }
        let mut st = sh.lock();
        if how != libc::SHUT_WR {
            st.rd_shut = true;
            let _ = sys::shutdown(sh.app_end, libc::SHUT_RD);
        }
        if how != libc::SHUT_RD {
            sh.end_writing(&mut st);
        }
        sh.progress(&mut st, None, false);
        Ok(())
    }

    /// Closes the socket (also done when the last clone is dropped), as TCP closes one:
    /// everything written or posted before still goes out (an MPA exchange still under way
    /// is finished first), owed Read Responses are still served, outstanding Reads awaited,
    /// then the FIN, on the progress thread; the call itself does not wait. The close gives
    /// up when no byte could be written for 2 s (the peer reads nothing, or never answers
    /// a Read): what is left completes with `FLUSH_ERR` and the connection is reset.
    /// `SO_LINGER` of the TCP socket is honoured: on with 0, an abort (no flush, posted work
    /// completes with `FLUSH_ERR`, the peer gets a reset); on with a time, the call waits
    /// that long at most until everything is written and the FIN sent. Own-PD registrations
    /// are deregistered.
    pub fn close(&self) {
        self.sh().close();
    }

    /// The pending socket error (`SO_ERROR` of the DDP socket: why the MPA exchange failed
    /// or the connection ended), cleared by reading; 0 if none.
    pub fn take_error(&self) -> i32 {
        if self.sh().in_child() {
            return 0;
        }
        core::mem::take(&mut self.sh().lock().so_error)
    }

    /// Whether the MPA exchange has completed successfully.
    pub fn is_connected(&self) -> bool {
        !self.sh().in_child() && matches!(self.sh().lock().phase, Phase::Open)
    }

    // ------------------------------------------------------------ memory

    /// Registers `[addr, addr + len)` in this socket's protection domain with `access`
    /// (`DDP_ACCESS_*` bits); tagged offsets are virtual addresses unless the socket was
    /// created with `zero_based_to`. `EINVAL`: len 0 or bad bits; `ENOMEM`: out of STags.
    ///
    /// # Safety
    ///
    /// Until [`DdpSocket::dereg_mr`] returns, the memory must stay allocated and may be
    /// written by the peer (RDMA Write) or read (RDMA Read) at any time: the caller must
    /// not rely on its contents changing only under its own control.
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: u32) -> Result<STag, Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return Err(Errno::EOPNOTSUPP);
        }
        sh.engine
            .registry
            .register(
                sh.pd,
                addr as u64,
                len as u64,
                access,
                sh.zero_based,
                random_key(),
            )
            .map_err(reg_errno)
    }

    /// Deregisters: returns only when no placement into the region (and no Read Response
    /// from it) is in flight. `EINVAL`: no such STag in this socket's protection domain.
    pub fn dereg_mr(&self, stag: STag) -> Result<(), Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return Err(Errno::EOPNOTSUPP);
        }
        sh.engine
            .registry
            .deregister(stag, sh.pd)
            .map_err(reg_errno)
    }

    // ------------------------------------------------------------ work requests

    fn post(
        &self,
        wr_id: u64,
        flags: u32,
        allowed: u32,
        payload: u64,
        f: impl FnOnce(&mut ddp_proto::conn::Connection) -> Result<(), PostError>,
    ) -> Result<(), Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return Err(Errno::EOPNOTSUPP);
        }
        if flags & !allowed != 0 {
            return Err(Errno::EINVAL);
        }
        let mut st = sh.lock();
        match st.phase {
            Phase::Startup(_) => return Err(Errno::ENOTCONN),
            Phase::Failed => return Err(ended_errno(&st)),
            Phase::Open => {}
        }
        st.end_lowat(sh);
        let conn = st.conn.as_mut().expect("open");
        if let Err(e) = f(conn) {
            return Err(post_errno(&st, e));
        }
        st.note_app_wr(wr_id, flags & SIGNALED != 0, payload);
        // DDP_MORE: leave it queued (several FPDUs per sendmsg later) unless the batch is
        // full or an unsent tail means the socket is full anyway (then the progress thread
        // writes on POLLOUT: nothing to gain from trying now).
        if flags & MORE != 0 && st.defer_tx(payload) {
            sh.tx_deferred.store(true, Ordering::Release);
            return Ok(());
        }
        sh.tx_deferred.store(false, Ordering::Relaxed);
        sh.progress(&mut st, None, false);
        Ok(())
    }

    /// Puts out work requests left queued by `DDP_MORE` posts (if any).
    #[inline]
    fn flush_deferred(&self) {
        // (a load first, inline: the swap, a locked instruction, only when a batch waits)
        if self.sh().tx_deferred.load(Ordering::Acquire) {
            self.flush_deferred_now();
        }
    }

    #[cold]
    fn flush_deferred_now(&self) {
        let sh = self.sh();
        if sh.tx_deferred.swap(false, Ordering::AcqRel) {
            let mut st = sh.lock();
            st.end_deferral();
            sh.progress(&mut st, None, false);
        }
    }

    /// Posts a receive buffer for one incoming Send. The first one switches the socket from
    /// stream mode to posted mode (see the crate docs for what a Send without a posted
    /// receive does then).
    ///
    /// # Safety
    ///
    /// The memory named by `iov` must stay valid for writing until the receive's completion
    /// has been taken from the CQ (or the socket is closed).
    pub unsafe fn post_recv(&self, wr_id: u64, iov: &[libc::iovec]) -> Result<(), Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return Err(Errno::EOPNOTSUPP);
        }
        let sges = sges(iov)?;
        let mut st = sh.lock();
        match st.phase {
            Phase::Startup(_) => return Err(Errno::ENOTCONN),
            Phase::Failed => return Err(ended_errno(&st)),
            Phase::Open => {}
        }
        st.end_lowat(sh);
        let conn = st.conn.as_mut().expect("open");
        if let Err(e) = conn.post_recv_list(wr_id, sges) {
            return Err(post_errno(&st, e));
        }
        conn.set_recv_mode(ddp_proto::conn::RecvMode::Posted);
        // A posted receive changes nothing to write or wait for: a round of progress only
        // for the first one (the switch to posted mode) or input read with the MPA exchange.
        let first = core::mem::replace(&mut st.stream_mode, false);
        if first || st.has_pending_input() {
            sh.progress(&mut st, None, false);
        }
        Ok(())
    }

    /// Posts a Send of `iov` (`SIGNALED`, `SOLICITED`, `MORE` flags). Without `MORE` it is
    /// framed and written at once (with everything queued before it); with `MORE` it may stay
    /// queued until a post without it, a `poll_cq`/`wait_cq`, any other round of work on the
    /// socket, or a full batch (sockopt_ext.h `DDP_MORE`). The same holds for the other posts.
    ///
    /// # Safety
    ///
    /// The memory named by `iov` must stay valid for reading until the completion (or, if
    /// unsignaled, until a later signaled request on this socket completed, or close).
    pub unsafe fn post_send(
        &self,
        wr_id: u64,
        iov: &[libc::iovec],
        flags: u32,
    ) -> Result<(), Errno> {
        let fl = SendFlags {
            signaled: true,
            solicited: flags & SOLICITED != 0,
        };
        // (the small fast path straight from the iovecs: no SGE list to build for it)
        if flags & !(SIGNALED | SOLICITED) == 0
            && iov.len() <= MAX_SGE
            && let Some(len) = small_total(iov)
            // SAFETY: the caller's contract (readable until the completion) covers the read.
            && unsafe {
                let app = SendFlags {
                    signaled: flags & SIGNALED != 0,
                    ..fl
                };
                self.post_send_small(wr_id, iov, len, app)
            }
        {
            return Ok(());
        }
        let s = sges(iov)?;
        let len = ddp_proto::ddp::sge_total(&s);
        self.post(wr_id, flags, SIGNALED | SOLICITED | MORE, len, |c| {
            c.post_send(wr_id, &s, fl)
        })
    }

    /// `post_send`'s fast path for a small Send on an open socket with nothing queued
    /// ([`ConnState::post_send_small_now`]): the payload is framed (copied) from the
    /// iovecs and written at once. False (nothing done) when it does not apply.
    ///
    /// # Safety
    ///
    /// As [`DdpSocket::post_send`]; `len` is the iovecs' total, 1 ..= [`SMALL_SEND_MAX`],
    /// and there are at most [`MAX_SGE`] of them; `fl` as the application asked (`signaled`
    /// included).
    unsafe fn post_send_small(
        &self,
        wr_id: u64,
        iov: &[libc::iovec],
        len: usize,
        fl: SendFlags,
    ) -> bool {
        let sh = self.sh();
        // (buffers the general path would refuse mid-message go there: it reports them)
        if sh.in_child() || !iov.iter().all(|v| plausible(v.iov_base as u64, v.iov_len)) {
            return false;
        }
        let mut parts: [&[u8]; MAX_SGE] = [&[]; MAX_SGE];
        for (p, v) in parts.iter_mut().zip(iov) {
            // SAFETY: a plausible range the caller lent us for reading (this function's
            // contract).
            *p = unsafe { core::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) };
        }
        debug_assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), len);
        let mut st = sh.lock();
        if !st.nodelay {
            st.set_nodelay(sh);
        }
        matches!(st.phase, Phase::Open)
            && st.post_send_small_now(sh, wr_id, &parts[..iov.len()], len, fl)
    }

    /// Posts a Send with Invalidate of the peer's `inv_stag`.
    ///
    /// # Safety
    ///
    /// As [`DdpSocket::post_send`].
    pub unsafe fn post_send_inv(
        &self,
        wr_id: u64,
        iov: &[libc::iovec],
        inv_stag: STag,
        flags: u32,
    ) -> Result<(), Errno> {
        let s = sges(iov)?;
        let len = ddp_proto::ddp::sge_total(&s);
        let fl = SendFlags {
            signaled: true,
            solicited: flags & SOLICITED != 0,
        };
        self.post(wr_id, flags, SIGNALED | SOLICITED | MORE, len, |c| {
            c.post_send_inv(wr_id, &s, inv_stag, fl)
        })
    }

    /// Posts an RDMA Write of `iov` into the peer's region `rstag` at tagged offset `rto`.
    ///
    /// # Safety
    ///
    /// As [`DdpSocket::post_send`].
    pub unsafe fn post_write(
        &self,
        wr_id: u64,
        iov: &[libc::iovec],
        rstag: STag,
        rto: u64,
        flags: u32,
    ) -> Result<(), Errno> {
        let s = sges(iov)?;
        let len = ddp_proto::ddp::sge_total(&s);
        self.post(wr_id, flags, SIGNALED | MORE, len, |c| {
            c.post_write(wr_id, &s, rstag, rto, true)
        })
    }

    /// Posts an RDMA Read from the peer's region `rstag` at `rto` into `iov` (total length =
    /// read size). At most ORD reads are on the wire; more wait in order.
    ///
    /// # Safety
    ///
    /// The memory named by `iov` must stay valid for writing until the completion.
    pub unsafe fn post_read(
        &self,
        wr_id: u64,
        iov: &[libc::iovec],
        rstag: STag,
        rto: u64,
        flags: u32,
    ) -> Result<(), Errno> {
        let s = sges(iov)?;
        let len = u32::try_from(ddp_proto::ddp::sge_total(&s)).map_err(|_| Errno::EINVAL)?;
        self.post(wr_id, flags, SIGNALED | MORE, 0, |c| {
            c.post_read(wr_id, &s, rstag, rto, len, true)
        })
    }

    // ------------------------------------------------------------ completions

    /// Takes up to `out.len()` completions without blocking. `EPIPE` once the connection
    /// has ended and every completion was taken (sockopt_ext.h).
    pub fn poll_cq(&self, out: &mut [Wc]) -> Result<usize, Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return Err(Errno::EOPNOTSUPP);
        }
        self.flush_deferred();
        let n = sh.poll_cq(out, false);
        if n > 0 || out.is_empty() {
            return Ok(n);
        }
        // sockopt_ext.h: once the connection has ended and every completion was taken, EPIPE.
        let st = sh.lock();
        if ended(&st) {
            let n = sh.poll_cq(out, false);
            return if n > 0 { Ok(n) } else { Err(Errno::EPIPE) };
        }
        Ok(0)
    }

    /// Like [`DdpSocket::poll_cq`], but waits up to `timeout` (`None`: no limit) for at
    /// least one completion, making progress inline meanwhile. `Ok(0)` on timeout; `EINTR`
    /// if a signal arrived first; `EPIPE` once the connection has ended and every completion
    /// was taken.
    pub fn wait_cq(&self, out: &mut [Wc], timeout: Option<Duration>) -> Result<usize, Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return Err(Errno::EOPNOTSUPP);
        }
        self.flush_deferred();
        // A signal left on the emptied queue (Shared::poll_cq) stays while this thread comes
        // back for the next completion soon; it is noted for release_lazy and the progress
        // thread's timer, and drained before this thread blocks.
        let (n, stale) = sh.poll_cq_noting(out, true);
        if n > 0 || out.is_empty() {
            if n > 0 && stale {
                sh.note_hold(&mut sh.lock());
            }
            return Ok(n);
        }
        // The clock is read only when this thread is about to block (once per wait on the
        // latency path, not three times: `sys::Deadline`): the timeout counts from there, a
        // round of progress (microseconds) later than the call.
        let mut deadline: Option<sys::Deadline> = None;
        let mut timed_out = false;
        let mut g = Inline::enter(sh);
        // While the TCP fd is held lazily nothing was read since the last call: poll it
        // first rather than try a read that would (very likely) only say EAGAIN.
        let mut read_input = g.st().lazy_until.is_none() || timeout == Some(Duration::ZERO);
        loop {
            let st = g.st();
            // (nothing to do yet in a first round that does not read: skip it, and the look
            // at the queue after it unless the connection ended: `cq_wait_begin` looks under
            // its lock anyway)
            let round = read_input || st.has_tail() || st.has_pending_input() || st.is_connecting();
            if round {
                st.defer_wc = true;
                sh.progress_posted(st, read_input);
                st.defer_wc = false;
            }
            read_input = true;
            if round || ended(g.st()) {
                let (n, stale) = sh.poll_cq_noting(out, true);
                if n > 0 {
                    if stale {
                        sh.note_hold(g.st());
                    }
                    return Ok(n);
                }
            }
            if ended(g.st()) {
                sh.drain_stale_signal();
                return Err(Errno::EPIPE);
            }
            let left = match (timeout, deadline) {
                (None, _) => None,
                (Some(t), None) => {
                    deadline = Some(sys::Deadline::after(t));
                    Some(t)
                }
                (Some(_), Some(d)) => Some(d.left()),
            };
            // (a kernel wait that timed out waited out what was left: the time is up)
            if timed_out || left.is_some_and(|l| l.is_zero()) {
                sh.drain_stale_signal();
                return Ok(0);
            }
            let Some(event_fd) = sh.cq_wait_begin()? else {
                continue; // (a completion arrived meanwhile)
            };
            let r = g.wait(Some((event_fd, libc::POLLIN)), left);
            sh.cq_wait_end();
            timed_out = !r?;
        }
    }

    // ------------------------------------------------------------ information

    /// `DDP_CONN_INFO`.
    pub fn info(&self) -> Result<ConnInfo, Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return Err(Errno::EOPNOTSUPP);
        }
        let st = sh.lock();
        let mut i = ConnInfo {
            initiator: u8::from(st.role == Role::Initiator),
            pd: sh.pd,
            mulpdu: st.mulpdu as u32,
            bytes_tx: st.bytes_tx,
            bytes_rx: st.bytes_rx,
            ..ConnInfo::default()
        };
        if let Some(n) = &st.neg {
            i.mpa_rev = n.revision;
            i.crc = u8::from(n.crc);
            i.markers_tx = u8::from(n.markers_tx);
            i.markers_rx = u8::from(n.markers_rx);
            i.p2p = u8::from(n.p2p);
            i.rtr = match n.rtr {
                Some(RtrKind::Write) => RTR_WRITE as u8,
                Some(RtrKind::Read) => RTR_READ as u8,
                Some(RtrKind::Send) => RTR_SEND as u8,
                None => 0,
            };
            i.ird = u32::from(n.ird);
            i.ord = u32::from(n.ord);
        }
        if let Some(c) = &st.conn {
            let s = c.stats();
            i.fpdus_tx = s.fpdus_out;
            i.fpdus_rx = s.fpdus_in;
            i.placed_direct = s.bytes_placed_direct;
            // Tagged traffic counts too, so that one side's bytes_tx is the other's bytes_rx:
            // the peer's RDMA Writes and our Reads' responses placed here, and the Read
            // Responses we sent for the peer's Reads.
            i.bytes_rx += s.bytes_tagged_in;
            i.bytes_tx += s.bytes_read_response_out;
        }
        if let Some(t) = st.last_term {
            let c = t.code();
            i.term_layer = c.layer.to_raw();
            i.term_etype = c.etype;
            i.term_ecode = c.ecode;
            i.term_sent = match t {
                LastTerminate::Sent(_) => 1,
                LastTerminate::Received(_) => 2,
            };
        }
        i.state = match (&st.phase, st.conn.as_ref().map(|c| c.state())) {
            (Phase::Startup(_), _) => state::CONNECTING,
            (Phase::Failed, _) => state::ERROR,
            (_, _) if st.finalized => state::CLOSED,
            (_, Some(State::Open)) if st.rx_eof || st.tcp_shut_wr => state::CLOSING,
            (_, Some(State::Open)) => state::RTS,
            (_, Some(State::Closing)) => state::CLOSING,
            (_, Some(State::Error)) => state::ERROR,
            (_, _) if st.last_term.is_some() || st.so_error != 0 => state::ERROR,
            _ => state::CLOSED,
        };
        Ok(i)
    }

    /// `ioctl(SIOCOUTQ)` (`not_sent` false) or `ioctl(SIOCOUTQNSD)` (true) of the DDP socket,
    /// as a TCP socket answers them: bytes written by the application that the peer's TCP
    /// has not acknowledged yet (`SIOCOUTQ`), or that have not been sent yet (`SIOCOUTQNSD`).
    /// The sum of what the application wrote into its socketpair end and the engine has not
    /// taken yet, the engine's unsent bytes (MPA frames, queued and framed FPDUs: the stream
    /// as it goes on the wire, so headers and CRCs count), and the kernel's answer for the TCP
    /// socket. Read in that order, the first two under the lock the engine moves bytes
    /// under, so a byte moving from one to the next may be counted twice but never missed: 0
    /// means everything was acknowledged. In a forked child the engine's part is not visible (its lock may
    /// have been held at the fork): socketpair and kernel only.
    pub fn out_queue(&self, not_sent: bool) -> Result<usize, Errno> {
        const SIOCOUTQNSD: libc::c_ulong = 0x894b;
        let sh = self.sh();
        let req = if not_sent {
            SIOCOUTQNSD
        } else {
            libc::TIOCOUTQ as libc::c_ulong
        };
        if sh.in_child() {
            let pair = sys::inq(sh.eng_end).unwrap_or(0);
            return Ok(pair + sys::ioctl_count(sh.tcp_fd, req)?);
        }
        let st = sh.lock();
        // (a back-pressure token is not the application's)
        let pair = sys::inq(sh.eng_end)
            .unwrap_or(0)
            .saturating_sub(st.token_bytes());
        let engine = st.unsent_bytes() as usize;
        Ok(pair + engine + sys::ioctl_count(sh.tcp_fd, req)?)
    }

    /// Counters that `DDP_CONN_INFO` does not carry (for the stats surface of the preload):
    /// CRC errors detected, Terminates sent and received.
    pub fn counters(&self) -> Result<Counters, Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return Err(Errno::EOPNOTSUPP);
        }
        let st = sh.lock();
        let rx = st.rx_counts;
        Ok(st.conn.as_ref().map_or(Counters::default(), |c| {
            let s = c.stats();
            Counters {
                crc_errors: s.crc_errors,
                terminates_sent: s.terminates_sent,
                terminates_received: s.terminates_received,
                rx_reads: rx.reads,
                rx_chained: rx.chained,
                rx_chain_misses: rx.chain_misses,
                rx_small_rounds: rx.small_rounds,
            }
        }))
    }

    /// Where the socket's data is now ([`Queues`]): for observers (the stats thread), off the
    /// data path (takes the socket's lock; four `ioctl`s).
    pub fn queues(&self) -> Result<Queues, Errno> {
        let sh = self.sh();
        if sh.in_child() {
            return Err(Errno::EOPNOTSUPP);
        }
        let sat = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let st = sh.lock();
        let flag = |on: bool, f: u16| if on { f } else { 0 };
        let armed = st.tcp_armed;
        Ok(Queues {
            tcp_in: sat(sys::inq(sh.tcp_fd).unwrap_or(0)),
            backlog: sat(st.backlog.len()),
            pair_in: sat(sys::inq(sh.app_end).unwrap_or(0)),
            pair_out: sat(sys::inq(sh.eng_end).unwrap_or(0)),
            unsent: sat(st.unsent_bytes() as usize),
            tcp_out: sat(sys::ioctl_count(sh.tcp_fd, libc::TIOCOUTQ).unwrap_or(0)),
            inside: st.inline.min(u32::from(u16::MAX)) as u16,
            flags: flag(st.hold, QUEUE_HELD)
                | flag(st.hold && st.announced, QUEUE_ANNOUNCED)
                | flag(st.lazy_until.is_some(), QUEUE_LAZY)
                | flag(armed & libc::EPOLLIN as u32 != 0, QUEUE_ARMED_IN)
                | flag(armed & libc::EPOLLOUT as u32 != 0, QUEUE_ARMED_OUT)
                | flag(st.spilled, QUEUE_SPILLED)
                | flag(st.rx_done(), QUEUE_RX_DONE)
                | flag(st.others_hold, QUEUE_OTHERS),
        })
    }

    /// A reference that does not keep the socket open (for observers such as a stats thread).
    pub fn downgrade(&self) -> WeakDdpSocket {
        WeakDdpSocket {
            h: Arc::downgrade(&self.h),
            sh: Arc::downgrade(&self.h.sh),
        }
    }

    /// The peer's MPA private data (`DDP_PEER_PRIVATE_DATA`), once connected.
    pub fn peer_private_data(&self) -> Option<Vec<u8>> {
        if self.sh().in_child() {
            return None;
        }
        self.sh()
            .lock()
            .neg
            .as_ref()
            .map(|n| n.peer_private_data.clone())
    }

    /// Fork policy (engine.md): in a forked child the socket is a plain byte stream over the
    /// socketpair, served by the parent's engine; `send`/`recv`/`shutdown` go straight to
    /// the socketpair, extension calls fail with `EOPNOTSUPP`, `close` only drops the
    /// child's descriptors. [`crate::after_fork_in_child`] does the same for every socket at
    /// once; this marks one socket. Takes no lock (a parent thread may have held it at fork).
    pub fn after_fork_in_child(&self) {
        self.sh().forked.store(true, Ordering::Release);
    }
}

/// The parts of `bufs` after the first `skip` bytes.
/// How many buffers [`DdpSocket::send`] and [`DdpSocket::recv`] take apart without allocating.
const REST_INLINE: usize = 8;

/// [`rest_of`] into `out` (`bufs.len() <= out.len()`); returns how many parts.
fn rest_into<'a>(bufs: &'a [IoSlice<'_>], mut skip: usize, out: &mut [&'a [u8]]) -> usize {
    let mut n = 0;
    for b in bufs {
        let b: &[u8] = b;
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        out[n] = &b[skip..];
        n += 1;
        skip = 0;
    }
    n
}

fn rest_of<'a>(bufs: &'a [IoSlice<'_>], mut skip: usize) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(bufs.len());
    for b in bufs {
        let b: &[u8] = b;
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        out.push(&b[skip..]);
        skip = 0;
    }
    out
}

/// iovecs for the parts of `bufs` after the first `skip` bytes.
/// [`iovecs_mut`] into `out` (`bufs.len() <= out.len()`); returns how many.
fn iovecs_into(bufs: &mut [IoSliceMut<'_>], mut skip: usize, out: &mut [libc::iovec]) -> usize {
    let mut n = 0;
    for b in bufs.iter_mut() {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        let s = &mut b[skip..];
        out[n] = sys::iovec(s.as_mut_ptr(), s.len());
        n += 1;
        skip = 0;
    }
    n
}

fn iovecs_mut(bufs: &mut [IoSliceMut<'_>], mut skip: usize) -> Vec<libc::iovec> {
    let mut out = Vec::with_capacity(bufs.len());
    for b in bufs.iter_mut() {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        let s = &mut b[skip..];
        out.push(sys::iovec(s.as_mut_ptr(), s.len()));
        skip = 0;
    }
    out
}

/// The descriptors of a new socket, closed again if setup fails.
struct Fds {
    tcp: RawFd,
    app: RawFd,
    eng: RawFd,
}

impl Fds {
    fn open(tcp_fd: RawFd, nonblocking: bool, nodelay: bool) -> Result<Fds, Errno> {
        let mut f = Fds {
            tcp: -1,
            app: -1,
            eng: -1,
        };
        f.tcp = sys::dup_cloexec_at_least(tcp_fd, super::HIGH_FD)
            .or_else(|_| sys::dup_cloexec_at_least(tcp_fd, 3))?;
        sys::set_nonblocking(f.tcp, true)?;
        if nodelay {
            let _ = sys::setsockopt(
                f.tcp,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                1 as libc::c_int,
            );
        }
        // (reads that ask say what is left in the kernel: `ConnState::stream_waiting`)
        let _ = sys::set_inq_hint(f.tcp);
        // (both ends non-blocking from the start: the flags of the new file are known, so a
        // blocking app end is one `F_SETFL`, not a `F_GETFL` and a `F_SETFL` per end)
        let (a, e) = sys::socketpair(libc::SOCK_NONBLOCK)?;
        f.app = move_high(a)?;
        f.eng = move_high(e)?;
        if !nonblocking {
            sys::fcntl(f.app, libc::F_SETFL, libc::O_RDWR as libc::c_long)?;
        }
        Ok(f)
    }
}

impl Drop for Fds {
    fn drop(&mut self) {
        for fd in [self.tcp, self.app, self.eng] {
            if fd >= 0 {
                let _ = sys::close(fd);
            }
        }
    }
}
