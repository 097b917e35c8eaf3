//! The I/O half of the engine: threads, epoll, eventfds, sockets.
//!
//! - [`mem`]: the only `unsafe` code touching application memory ([`ddp_proto::ddp::Memory`]
//!   over real memory, direct placement reads).
//! - [`startup`]: the MPA exchange over a socket.
//! - [`conn`]: one socket's state and the non-blocking protocol steps (inline and progress
//!   thread share them; see its docs for the locking rules).
//! - [`socket`]: [`DdpSocket`](socket::DdpSocket), the native API.
//! - [`close`]: closing a socket, and the flush at process exit.
//! - this module: [`Shared`] (what a socket's threads share), the per-process [`Engine`]
//!   (registry, epoll, the progress thread) and the progress thread's loop.

pub(crate) mod close;
pub(crate) mod conn;
pub mod group;
pub mod listener;
pub(crate) mod mem;
pub(crate) mod settings;
pub mod socket;
pub(crate) mod startup;
pub(crate) mod waitset;

use core::time::Duration;
use std::collections::{HashMap, HashSet};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Once};

use crate::sync::{Guard, Mutex};

use crate::driver::conn::{ConnState, Phase, SmallRound};
use crate::driver::mem::{SessionMem, UserSink};
use crate::engine::cq::{Cq, Wc};
use crate::engine::registry::Registry;
use crate::sys::{self, Errno};

const KIND_TCP: u64 = 0;
const KIND_ENG: u64 = 1;
const KIND_WAKE: u64 = 2;

/// Engine descriptors are moved at or above this number, out of the application's way.
const HIGH_FD: RawFd = 256;

/// Own protection domains (`DDP_PD` = 0) are numbered from here; shared ids chosen by
/// applications are expected below.
const OWN_PD_BASE: u32 = 0x8000_0000;

/// Bumped in a forked child by [`after_fork_in_child`]: sockets of an older generation
/// belong to the parent's engine.
static FORK_GEN: AtomicU64 = AtomicU64::new(0);
static ENGINE: AtomicPtr<Engine> = AtomicPtr::new(core::ptr::null_mut());
/// Bumped in the parent at every `fork` by [`after_fork_in_parent`]: the sockets made before
/// may be shared with a child.
static PARENT_FORKS: AtomicU64 = AtomicU64::new(0);

/// Moves `fd` to a close-on-exec descriptor at or above [`HIGH_FD`] (or wherever there is
/// room) and closes the original.
pub(crate) fn move_high(fd: RawFd) -> Result<RawFd, Errno> {
    let new = sys::dup_cloexec_at_least(fd, HIGH_FD).or_else(|_| sys::dup_cloexec_at_least(fd, 3));
    let _ = sys::close(fd);
    new
}

/// Receive buffers kept for reuse (a thread receiving needs one; the backlogs keep buffers
/// of stream data by reference and give them back when read: 64 × 64 KiB at most idle).
const RX_BUF_POOL: usize = 64;

/// The per-process engine: registry, epoll set, progress thread (started lazily).
pub(crate) struct Engine {
    pid: i32,
    pub(crate) registry: Registry,
    epfd: RawFd,
    wake_fd: RawFd,
    /// An eventfd nobody signals or reads: closed sockets' app ends are retired onto it
    /// ([`sys::retire`]), a `dup3` each instead of making and closing an eventfd.
    inert_fd: RawFd,
    conns: Mutex<HashMap<u64, Arc<Shared>>>,
    /// Sockets with a deadline (non-blocking MPA exchange, close linger).
    timed: Mutex<HashSet<u64>>,
    /// Sockets whose TCP fd is held lazily or that hold received data for a reader
    /// (`lazy_until` or `hold_until` set), and those released since the last walk: what
    /// [`release_lazy`] and [`flush_held`] walk (and prune). Smaller than `timed`, which
    /// keeps sockets until the progress thread's next deadline round: with 1,000 sockets in
    /// an epoll group, walking `timed` before every blocking `epoll_wait` cost the server
    /// 9–11 % of its CPU.
    held: Mutex<HashSet<u64>>,
    /// Epoll groups ([`group`]), by id.
    groups: Mutex<HashMap<u64, Arc<group::Group>>>,
    /// Groups whose laziness ends at a deadline.
    timed_groups: Mutex<HashSet<u64>>,
    /// When the progress thread plans to wake up next (engine time in ns; `u64::MAX`: only
    /// for an event; 0: it is awake, walking the deadlines).
    next_wake: AtomicU64,
    /// Receive buffers lent to `ConnState::pump_input` for one call (see `rx_buf_take`).
    rx_bufs: Mutex<Vec<Vec<u8>>>,
    /// One more such buffer (`conn::BIG_READ` bytes long and allocated; null: none), taken
    /// and given back with one atomic operation each instead of a lock and an unlock: the
    /// one a request-response loop takes and gives back with every message.
    rx_buf_hot: AtomicPtr<u8>,
    /// Sockets in `conns` (sizes each socket's share of the receive backlog budget).
    sockets: AtomicUsize,
    /// Bumped (and `flushed_cv` notified) when a closed socket has sent everything (or, while
    /// `draining`, any socket has nothing left to write).
    flushed: std::sync::Mutex<u64>,
    flushed_cv: Condvar,
    /// Threads waiting in [`close::flush_before_exec`] until every socket has written what
    /// it had.
    draining: AtomicU32,
    next_id: AtomicU64,
    next_pd: AtomicU32,
    thread: Once,
    /// `sys::monotonic_ns` at start: `now` counts from here.
    origin_ns: u64,
}

/// The epoll events of a TCP fd that call for a read: input, its end, an error.
const INPUT_EVENTS: u32 =
    (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;

/// How long a socket's TCP fd stays with the application after the last application thread
/// left the library on it (docs/engine.md "Handing the TCP fd back lazily"): a thread that
/// comes back within it (the next `recv`/`poll`/`send` of a request-response exchange) finds
/// the fd already its own, saving two `epoll_ctl`s and, above all, a progress-thread wakeup
/// racing it for the reply. Waits elsewhere in the library give such sockets back at once
/// ([`release_lazy`]); otherwise input waits at most this long for the progress thread.
pub(crate) const LAZY_REARM: Duration = Duration::from_micros(500);

/// While an application keeps coming back to a socket (a request-response loop pushing its
/// [`LAZY_REARM`] and hold deadlines on), every visit of the progress thread that finds them
/// pushed on doubles the wait before the next, up to `LAZY_REARM << LAZY_STRETCH` (8 ms):
/// each wake-up of an otherwise idle thread costs the latency path (one round trip in
/// about a hundred 30 µs longer on the test VM, one visit per millisecond; see
/// docs/performance.md, session 29). An application that then stays away has input wait
/// that long at most; the first visit that ends a hold starts over at `LAZY_REARM`.
const LAZY_STRETCH: u32 = 4;

/// How long the progress thread waits before it looks again at a socket whose deadlines
/// `visits` visits in a row found pushed on ([`LAZY_STRETCH`]).
fn stretched(visits: u32) -> Duration {
    LAZY_REARM * (1 << visits.min(LAZY_STRETCH))
}

/// Sockets whose TCP fd is held lazily (a hint for [`release_lazy`]'s fast path).
static LAZY: AtomicUsize = AtomicUsize::new(0);

/// Sockets whose received stream data is held in the backlog for an application thread
/// told it is readable (`ConnState::hold`; a hint for [`release_lazy`] and [`flush_held`]).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Whether any socket's TCP fd (or received stream data) may be held lazily
/// ([`release_lazy`] has work).
#[inline]
pub fn lazy_held() -> bool {
    LAZY.load(Ordering::Relaxed) != 0 || HELD.load(Ordering::Relaxed) != 0
}

/// Whether sockets other than `st`'s may be held lazily or hold data (see [`lazy_held`]):
/// the counts include `st`'s own, which [`release_lazy`] would leave alone anyway while a
/// thread is inside on it. Lets a thread about to block on its socket skip `release_lazy`.
pub(crate) fn lazy_held_elsewhere(st: &ConnState) -> bool {
    lazy_held_beyond(
        usize::from(st.lazy_until.is_some()),
        usize::from(st.hold_until.is_some()),
    )
}

/// How long held data waits for its reader after the last visit (`ConnState::hold_until`):
/// [`LAZY_REARM`]; an epoll group's reader works through a batch of events before it reads
/// again.
fn hold_keep(st: &ConnState) -> Duration {
    if st.group.is_some() {
        group::GROUP_LAZY
    } else {
        LAZY_REARM
    }
}

/// Whether more sockets are held lazily than `lazy` or hold data than `held`.
pub(crate) fn lazy_held_beyond(lazy: usize, held: usize) -> bool {
    LAZY.load(Ordering::Relaxed) > lazy || HELD.load(Ordering::Relaxed) > held
}

/// Moves stream data held in the engine for a reader (see `ConnState::hold`) into the
/// sockets' socketpairs now, whoever is inside the library: for calls that look at the
/// socketpair itself (`ioctl(FIONREAD)` on an app fd). One relaxed load when there is none.
pub fn flush_held() {
    if HELD.load(Ordering::Relaxed) == 0 {
        return;
    }
    for_held(|sh| {
        let mut st = sh.lock();
        if st.hold_until.is_some() {
            sh.end_hold(&mut st);
        }
        sh.unmark_held(&mut st);
    });
}

/// Calls `f` for each socket of this process's engine that is held lazily or holds data
/// (`Engine::held`), if there is an engine.
fn for_held(mut f: impl FnMut(&Arc<Shared>)) {
    let cur = ENGINE.load(Ordering::Acquire);
    // SAFETY: ENGINE only ever holds null or a leaked, never freed `Box<Engine>`.
    let Some(e) = (unsafe { cur.as_ref() }) else {
        return;
    };
    for id in e.held_ids().iter() {
        let sh = lock(&e.conns).get(&id).cloned();
        match sh {
            Some(sh) => f(&sh),
            // (a socket gone meanwhile)
            None => {
                lock(&e.held).remove(&id);
            }
        }
    }
}

/// Calls `f` for each group of this process's engine whose laziness has a deadline.
fn for_lazy_groups(mut f: impl FnMut(&group::Group)) {
    let cur = ENGINE.load(Ordering::Acquire);
    // SAFETY: ENGINE only ever holds null or a leaked, never freed `Box<Engine>`.
    let Some(e) = (unsafe { cur.as_ref() }) else {
        return;
    };
    let Ok(ids) = e
        .timed_groups
        .try_lock()
        .map(|t| t.iter().copied().collect::<Vec<_>>())
    else {
        return;
    };
    for id in ids {
        let g = lock(&e.groups).get(&id).cloned();
        if let Some(g) = g {
            f(&g);
        }
    }
}

/// Gives every socket whose TCP fd is held lazily (see [`LAZY_REARM`]) and that no
/// application thread is working on back to the progress thread. Called before a thread
/// blocks in the library (its wait would not serve those sockets). One relaxed load when
/// there are none.
pub fn release_lazy() {
    if !lazy_held() {
        return;
    }
    for_lazy_groups(|g| g.release());
    for_held(|sh| {
        // Never wait for a lock here: the holder is working on the socket anyway.
        let Ok(mut st) = sh.st.try_lock() else {
            return;
        };
        if st.inline == 0 {
            if st.hold_until.is_some() {
                sh.end_hold(&mut st);
            }
            if st.lazy_until.is_some() {
                sh.end_lazy(&mut st);
            }
        }
        sh.unmark_held(&mut st);
    });
}

/// Whether this process has started its engine (made a DDP socket since it started or
/// forked): one relaxed load, for callers that only have work to do when DDP sockets exist.
#[inline]
pub fn engine_started() -> bool {
    !ENGINE.load(Ordering::Relaxed).is_null()
}

/// The process id the engine was started in, while it is this process's (a forked child's
/// is reset by [`after_fork_in_child`]): saves a `getpid` system call on hot paths.
#[inline]
pub fn engine_pid() -> Option<i32> {
    let cur = ENGINE.load(Ordering::Acquire);
    // SAFETY: ENGINE only ever holds null or a leaked, never freed `Box<Engine>`.
    unsafe { cur.as_ref() }.map(|e| e.pid)
}

/// The engine of this process (a fresh one in a forked child).
pub(crate) fn engine() -> Result<&'static Engine, Errno> {
    let pid = sys::getpid();
    let cur = ENGINE.load(Ordering::Acquire);
    // SAFETY: ENGINE only ever holds null or a leaked, never freed `Box<Engine>`.
    if let Some(e) = unsafe { cur.as_ref() }
        && e.pid == pid
    {
        return Ok(e);
    }
    // What a routed call would otherwise set up lazily is set up now, before this process's
    // first DDP socket exists: `crc-fast` picks its CPU path in a `OnceLock` at the first
    // checksum, and a signal handler's call interrupting that initialisation would wait on
    // its own thread (ddp-fdtest `signal-io`).
    core::hint::black_box(ddp_proto::mpa::crc::crc32c(core::hint::black_box(
        b"exsock",
    )));
    let epfd = move_high(sys::epoll_create()?)?;
    let wake_fd = move_high(sys::eventfd()?)?;
    let inert_fd = match sys::eventfd().and_then(move_high) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = sys::close(epfd);
            let _ = sys::close(wake_fd);
            return Err(e);
        }
    };
    sys::epoll_ctl(
        epfd,
        libc::EPOLL_CTL_ADD,
        wake_fd,
        libc::EPOLLIN as u32,
        KIND_WAKE,
    )?;
    let e = Box::into_raw(Box::new(Engine {
        pid,
        registry: Registry::new(),
        epfd,
        wake_fd,
        inert_fd,
        conns: Mutex::new(HashMap::new()),
        timed: Mutex::new(HashSet::new()),
        held: Mutex::new(HashSet::new()),
        groups: Mutex::new(HashMap::new()),
        timed_groups: Mutex::new(HashSet::new()),
        next_wake: AtomicU64::new(0),
        rx_bufs: Mutex::new(Vec::new()),
        rx_buf_hot: AtomicPtr::new(core::ptr::null_mut()),
        sockets: AtomicUsize::new(0),
        flushed: std::sync::Mutex::new(0),
        flushed_cv: Condvar::new(),
        draining: AtomicU32::new(0),
        next_id: AtomicU64::new(1),
        next_pd: AtomicU32::new(OWN_PD_BASE),
        thread: Once::new(),
        origin_ns: sys::monotonic_ns(),
    }));
    match ENGINE.compare_exchange(cur, e, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            crate::sigdefer::engine_starting();
            // SAFETY: just leaked above; never freed.
            Ok(unsafe { &*e })
        }
        Err(other) => {
            // Another thread won: discard ours (never shared).
            // SAFETY: `e` came from Box::into_raw above and nobody else has seen it.
            let mine = unsafe { Box::from_raw(e) };
            let _ = sys::close(mine.epfd);
            let _ = sys::close(mine.wake_fd);
            let _ = sys::close(mine.inert_fd);
            // SAFETY: as above, the winner is leaked forever.
            Ok(unsafe { &*other })
        }
    }
}

/// Fork support, to be called in a forked child (e.g. from a `pthread_atfork` child
/// handler): the child gets no engine threads; inherited connected DDP sockets become plain
/// byte streams served by the parent (see [`socket::DdpSocket::after_fork_in_child`]); new
/// sockets get a fresh engine, started lazily. After an `exec` the same holds without any
/// call: the app fd is a socketpair end the parent's engine keeps serving (a byte stream
/// shared with the parent, like a TCP socket inherited across `exec`).
pub fn after_fork_in_child() {
    FORK_GEN.fetch_add(1, Ordering::AcqRel);
    ENGINE.store(core::ptr::null_mut(), Ordering::Release);
}

/// Fork support, to be called in the parent after a `fork` (e.g. from a `pthread_atfork`
/// parent handler): the child may now write on the app fds of the sockets that exist, so
/// they no longer use the socketpair for back-pressure (`ConnState::press`).
pub fn after_fork_in_parent() {
    PARENT_FORKS.fetch_add(1, Ordering::AcqRel);
}

/// Socket ids copied out of a lock (see [`Engine::timed_ids`]).
enum IdSnapshot {
    Inline([u64; IdSnapshot::INLINE], usize),
    Heap(Vec<u64>),
}

impl IdSnapshot {
    const INLINE: usize = 16;

    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        match self {
            IdSnapshot::Inline(a, n) => a[..*n].iter().copied(),
            IdSnapshot::Heap(v) => v.iter().copied(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> Guard<'_, T> {
    m.lock()
}

/// The exit flush's counter lock: a plain one (held for an increment or a read, and waited
/// on with a condition variable for up to the flush's 2 s, which must not hold signal
/// handlers back).
fn lock_std<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Engine {
    /// A snapshot of the sockets with deadlines (`timed`), taken without allocating when
    /// there are few.
    fn timed_ids(&self) -> IdSnapshot {
        Self::ids_of(&self.timed)
    }

    /// A snapshot of the sockets held lazily or holding data (`held`), taken without
    /// allocating when there are few (this runs on the latency path: `release_lazy` before
    /// every wait).
    fn held_ids(&self) -> IdSnapshot {
        Self::ids_of(&self.held)
    }

    fn ids_of(set: &Mutex<HashSet<u64>>) -> IdSnapshot {
        let t = lock(set);
        if t.len() <= IdSnapshot::INLINE {
            let mut ids = [0u64; IdSnapshot::INLINE];
            for (slot, id) in ids.iter_mut().zip(t.iter()) {
                *slot = *id;
            }
            IdSnapshot::Inline(ids, t.len())
        } else {
            IdSnapshot::Heap(t.iter().copied().collect())
        }
    }

    /// Time since the engine's origin (what `ddp_proto` calls `now`).
    pub(crate) fn now(&self) -> Duration {
        Duration::from_nanos(sys::monotonic_ns().saturating_sub(self.origin_ns))
    }

    /// A closed socket has sent everything (see [`close::flush_at_exit`]).
    fn note_flushed(&self) {
        *lock_std(&self.flushed) += 1;
        self.flushed_cv.notify_all();
    }

    pub(crate) fn own_pd(&self) -> u32 {
        self.next_pd.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds a socket: it is watched by the progress thread from now on.
    pub(crate) fn add(&'static self, sh: &Arc<Shared>) -> Result<(), Errno> {
        self.thread.call_once(|| {
            sys::spawn_quiet("exsock-progress", move || self.run())
                .expect("spawn the progress thread");
        });
        if lock(&self.conns).insert(sh.id, sh.clone()).is_none() {
            self.sockets.fetch_add(1, Ordering::Relaxed);
        }
        let ev = libc::EPOLLONESHOT as u32;
        sys::epoll_ctl(
            self.epfd,
            libc::EPOLL_CTL_ADD,
            sh.tcp_fd,
            ev,
            sh.id << 2 | KIND_TCP,
        )?;
        sys::epoll_ctl(
            self.epfd,
            libc::EPOLL_CTL_ADD,
            sh.eng_end,
            ev,
            sh.id << 2 | KIND_ENG,
        )?;
        Ok(())
    }

    /// A receive buffer for one `pump_input` (its bytes do not outlive the call). A few
    /// buffers shared by all sockets instead of one per socket: with 1000 connections the
    /// per-socket buffers were 64 MB per process that did not stay in cache
    /// (docs/performance.md). Never waits for the lock (a fork may have left it held): a busy
    /// or empty pool means a fresh buffer.
    pub(crate) fn rx_buf_take(&self) -> Vec<u8> {
        let p = self
            .rx_buf_hot
            .swap(core::ptr::null_mut(), Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: `rx_buf_put` stored it from a `Vec<u8>` of exactly `BIG_READ` length and
            // capacity that it forgot; the swap took it out, so it is ours alone.
            return unsafe { Vec::from_raw_parts(p, conn::BIG_READ, conn::BIG_READ) };
        }
        let b = self.rx_bufs.try_lock().ok().and_then(|mut p| p.pop());
        b.unwrap_or_else(|| vec![0; conn::BIG_READ])
    }

    /// How much received stream data one socket may hold in its backlog now
    /// ([`conn::rx_backlog_limit`] of the number of sockets).
    pub(crate) fn rx_backlog_limit(&self) -> usize {
        conn::rx_backlog_limit(self.sockets.load(Ordering::Relaxed))
    }

    /// Returns a buffer from [`rx_buf_take`](Self::rx_buf_take) (kept if the pool is small).
    pub(crate) fn rx_buf_put(&self, b: Vec<u8>) {
        let mut b = core::mem::ManuallyDrop::new(b);
        if b.len() == conn::BIG_READ
            && b.capacity() == conn::BIG_READ
            && self
                .rx_buf_hot
                .compare_exchange(
                    core::ptr::null_mut(),
                    b.as_mut_ptr(),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return; // (the slot owns it now: see `rx_buf_take`)
        }
        let b = core::mem::ManuallyDrop::into_inner(b);
        if let Ok(mut p) = self.rx_bufs.try_lock()
            && p.len() < RX_BUF_POOL
        {
            p.push(b);
        }
    }

    /// The socket has a deadline the progress thread must watch.
    pub(crate) fn watch_deadline(&self, id: u64) {
        self.watch_deadline_at(id, None);
    }

    /// The socket has a deadline the progress thread must watch, at engine time `at` if
    /// known: the progress thread is woken only if it would sleep past it (a hold or a lazy
    /// hand-back starts with every request of a request-response loop over many sockets: one
    /// eventfd write and one wake-up of the progress thread each, before).
    pub(crate) fn watch_deadline_at(&self, id: u64, at: Option<Duration>) {
        if lock(&self.timed).insert(id) && self.wakes_after(at) {
            let _ = sys::eventfd_signal(self.wake_fd);
        }
    }

    /// The group's laziness ends at `at`, a deadline the progress thread must watch.
    pub(crate) fn watch_group(&self, id: u64, at: Duration) {
        if lock(&self.timed_groups).insert(id) && self.wakes_after(Some(at)) {
            let _ = sys::eventfd_signal(self.wake_fd);
        }
    }

    /// Whether the progress thread's planned wake-up is later than `at` (or unknown): it must
    /// be woken to see a new deadline. The thread clears its plan before it walks the
    /// deadlines and sets it only after, so a deadline noted meanwhile always wakes it.
    fn wakes_after(&self, at: Option<Duration>) -> bool {
        let plan = self.next_wake.load(Ordering::SeqCst);
        // (0: walking; it may have taken its snapshot of the deadlines without this one, or
        // removed it, and would plan its sleep without it)
        plan == 0 || at.is_none_or(|a| (a.as_nanos() as u64) < plan)
    }

    /// Serves the groups' deadlines; returns the time until the next one.
    fn group_deadlines(&self) -> Option<Duration> {
        let ids: Vec<u64> = lock(&self.timed_groups).iter().copied().collect();
        let mut next: Option<Duration> = None;
        let now = self.now();
        for id in ids {
            let g = lock(&self.groups).get(&id).cloned();
            let left = match g {
                Some(g) => g.on_deadline(now, &self.timed_groups),
                None => {
                    lock(&self.timed_groups).remove(&id);
                    None
                }
            };
            if let Some(left) = left {
                next = Some(next.map_or(left, |n| n.min(left)));
            }
        }
        next
    }

    /// The progress thread's loop.
    fn run(&'static self) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        loop {
            // (0: awake; any deadline noted from now on wakes the next wait at once)
            self.next_wake.store(0, Ordering::SeqCst);
            let timeout = match (self.service_deadlines(), self.group_deadlines()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.next_wake.store(
                timeout.map_or(u64::MAX, |t| (self.now() + t).as_nanos() as u64),
                Ordering::SeqCst,
            );
            let n = sys::epoll_wait(self.epfd, &mut evs, timeout).unwrap_or(0);
            for ev in &evs[..n] {
                let (data, events) = (ev.u64, ev.events);
                let kind = data & 3;
                if kind == KIND_WAKE {
                    if data >> 2 == 0 {
                        let _ = sys::eventfd_drain(self.wake_fd);
                    } else {
                        let g = lock(&self.groups).get(&(data >> 2)).cloned();
                        if let Some(g) = g {
                            g.on_event();
                        }
                    }
                    continue;
                }
                let sh = lock(&self.conns).get(&(data >> 2)).cloned();
                if let Some(sh) = sh {
                    sh.on_event(kind, events, false);
                }
            }
        }
    }

    /// Serves passed deadlines; returns the time until the next one.
    fn service_deadlines(&self) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        for id in self.timed_ids().iter() {
            let Some(sh) = lock(&self.conns).get(&id).cloned() else {
                lock(&self.timed).remove(&id);
                continue;
            };
            // An application thread inside (the usual case of a lazy hold pushed on by a
            // request-response loop) keeps every deadline for now: look again within
            // LAZY_REARM rather than wait for the lock (a futex wait here and a wake-up on
            // its way out for the thread on the latency path).
            let mut st = match sh.st.try_lock() {
                Ok(g) => g,
                Err(crate::sync::WouldBlock) => {
                    // (only this thread writes `deadline_visits`)
                    let v = sh.deadline_visits.load(Ordering::Relaxed);
                    sh.deadline_visits
                        .store((v + 1).min(LAZY_STRETCH), Ordering::Relaxed);
                    let d = stretched(v);
                    next = Some(next.map_or(d, |n| n.min(d)));
                    continue;
                }
            };
            let visits = sh.deadline_visits.load(Ordering::Relaxed);
            let mut pushed = false;
            let now = self.now();
            let mut due = None;
            if let Some(d) = st.startup_deadline() {
                due = Some(d);
                if now >= d && st.inline == 0 {
                    sh.progress(&mut st, None, true);
                }
            }
            if st.close_deadline.is_some()
                && let Some(d) = sh.close_linger_left(&mut st)
            {
                due = Some(due.map_or(now + d, |x: Duration| x.min(now + d)));
            }
            if let Some(mut d) = st.lazy_until {
                if st.lazy_renewed && now >= d && !st.finalized {
                    // (renewed since the last visit: LAZY_REARM from now)
                    st.lazy_renewed = false;
                    d = now + LAZY_REARM;
                    st.lazy_until = Some(d);
                }
                if st.finalized || (now >= d && st.inline == 0) {
                    sh.end_lazy(&mut st);
                } else {
                    // (an application thread inside keeps it; it is pushed on when it leaves)
                    let d =
                        (if now >= d { now + LAZY_REARM } else { d }).max(now + stretched(visits));
                    due = Some(due.map_or(d, |x: Duration| x.min(d)));
                    pushed = true;
                }
            }
            if let Some(mut d) = st.hold_until {
                if st.hold_renewed && now >= d && !st.finalized {
                    // (renewed since the last visit: its keep from now)
                    st.hold_renewed = false;
                    d = now + hold_keep(&st);
                    st.hold_until = Some(d);
                }
                if (!st.hold && !sh.stale_signal()) || st.finalized || (now >= d && st.inline == 0)
                {
                    sh.end_hold(&mut st);
                } else {
                    let d =
                        (if now >= d { now + LAZY_REARM } else { d }).max(now + stretched(visits));
                    due = Some(due.map_or(d, |x: Duration| x.min(d)));
                    pushed = true;
                }
            }
            let visits = if pushed {
                (visits + 1).min(LAZY_STRETCH)
            } else {
                0
            };
            sh.deadline_visits.store(visits, Ordering::Relaxed);
            let keep = !st.finalized
                && (st.is_connecting()
                    || st.close_deadline.is_some()
                    || st.lazy_until.is_some()
                    || st.hold_until.is_some());
            if !keep {
                // Under the socket's lock: a deadline noted meanwhile (`watch_deadline`, also
                // under it) must find the id gone and wake this thread, not be removed here.
                lock(&self.timed).remove(&id);
                continue;
            }
            drop(st);
            if let Some(d) = due {
                let left = d.saturating_sub(self.now());
                next = Some(next.map_or(left, |n| n.min(left)));
            }
        }
        next
    }
}

/// What the threads of one DDP socket share.
pub(crate) struct Shared {
    pub(crate) id: u64,
    pub(crate) engine: &'static Engine,
    pub(crate) tcp_fd: RawFd,
    pub(crate) eng_end: RawFd,
    pub(crate) app_end: RawFd,
    /// The inodes of `tcp_fd`, `eng_end` and `app_end` (0: unknown), to recognise them in
    /// a forked child ([`Shared::close_in_child`]).
    pub(crate) inodes: [u64; 3],
    pub(crate) pd: u32,
    pub(crate) own_pd: bool,
    pub(crate) zero_based: bool,
    pub(crate) fork_gen: u64,
    /// [`PARENT_FORKS`] when the socket was made.
    pub(crate) parent_forks: u64,
    /// `after_fork_in_child` was called on this socket.
    pub(crate) forked: AtomicBool,
    pub(crate) user_closed: AtomicBool,
    /// Work requests posted with `DDP_MORE` wait in the send queue (see
    /// [`socket::DdpSocket::post_send`]): the next `poll_cq` puts them out.
    pub(crate) tx_deferred: AtomicBool,
    pub(crate) st: Mutex<ConnState>,
    pub(crate) cq: Mutex<CqSlot>,
    /// Visits of the progress thread in a row that found this socket's lazy or hold
    /// deadline pushed on, up to [`LAZY_STRETCH`] (written by that thread only; an atomic,
    /// read without the socket's lock).
    pub(crate) deadline_visits: AtomicU32,
    /// The socket's own epoll instance for a thread that waits on it alone in `poll`
    /// ([`waitset`]; claimed under the lock: `ConnState::wait_set_busy`).
    pub(crate) wait_set: waitset::WaitSet,
    /// `O_NONBLOCK` and the socket timeouts as last asked ([`settings`]).
    pub(crate) settings: settings::Settings,
}

/// A socket's completion queue and the state of its eventfd.
#[derive(Default)]
pub(crate) struct CqSlot {
    q: Cq,
    /// The completion eventfd, made when someone first needs it ([`Shared::export_event_fd`],
    /// [`Shared::cq_wait_begin`]): most sockets (plain `send`/`recv`) never do, and each
    /// connection's setup and close then make four system calls fewer.
    fd: Option<RawFd>,
    /// The eventfd is readable.
    signaled: bool,
    /// Library threads blocked on the eventfd (`wait_cq`).
    waiters: u32,
    /// The application has the eventfd (`ddp_event_fd`) and may wait on it.
    exported: bool,
}

impl CqSlot {
    /// The eventfd, made now if it was not.
    fn fd(&mut self) -> Result<RawFd, Errno> {
        match self.fd {
            Some(fd) => Ok(fd),
            None => {
                let fd = move_high(sys::eventfd()?)?;
                self.fd = Some(fd);
                Ok(fd)
            }
        }
    }

    /// Makes the eventfd readable (it exists: someone waits on it).
    fn signal(&mut self) {
        if let Some(fd) = self.fd {
            let _ = sys::eventfd_signal(fd);
            self.signaled = true;
        }
    }

    /// Makes the eventfd unreadable again.
    fn drain(&mut self) {
        if let Some(fd) = self.fd {
            let _ = sys::eventfd_drain(fd);
        }
        self.signaled = false;
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> Guard<'_, ConnState> {
        lock(&self.st)
    }

    /// Whether this process is a forked child of the socket's owner.
    pub(crate) fn in_child(&self) -> bool {
        self.forked.load(Ordering::Acquire) || FORK_GEN.load(Ordering::Acquire) != self.fork_gen
    }

    /// Whether this process alone can change the socket's settings ([`settings`]): not a
    /// forked child, and no child forked since the socket was made.
    pub(crate) fn settings_ours(&self) -> bool {
        self.parent_forks == PARENT_FORKS.load(Ordering::Acquire) && !self.in_child()
    }

    /// Appends a completion. The eventfd becomes readable with the first one if anyone can be
    /// waiting for it: the application was given the eventfd ([`Shared::export_event_fd`]), or
    /// a thread of the library blocks on it ([`Shared::cq_wait_begin`]); otherwise nobody can
    /// see the eventfd and the completion is simply found by the next `ddp_poll`/`ddp_wait`
    /// (no eventfd write and read per completion). With `defer`, the pushing thread takes
    /// completions itself right after (`wait_cq`) and [`Shared::poll_cq`] signals what it
    /// leaves: a completion another thread would have been woken for is taken by the pusher.
    pub(crate) fn push_wc(&self, wc: Wc, defer: bool) {
        let mut cq = lock(&self.cq);
        cq.q.push(wc);
        if !cq.signaled && !defer && (cq.exported || cq.waiters > 0) {
            cq.signal();
        }
    }

    /// Takes completions; afterwards, if the eventfd is the application's, it is readable iff
    /// completions are pending, except that with `keep_stale` a signal left on an emptied
    /// queue stays (drained with [`Shared::drain_stale_signal`] before the caller blocks, or
    /// by [`release_lazy`]/the progress thread's timer): a request-response loop then does
    /// not pay an eventfd read per completion and a write per next one. Readiness of the
    /// eventfd may thus be spurious (never missing) for raw waits, ≤ [`LAZY_REARM`].
    pub(crate) fn poll_cq(&self, out: &mut [Wc], keep_stale: bool) -> usize {
        self.poll_cq_noting(out, keep_stale).0
    }

    /// [`Shared::poll_cq`], and whether the eventfd's signal stays on the emptied queue
    /// after it ([`Shared::stale_signal`], under the same lock).
    pub(crate) fn poll_cq_noting(&self, out: &mut [Wc], keep_stale: bool) -> (usize, bool) {
        let mut cq = lock(&self.cq);
        let n = if out.is_empty() {
            0
        } else {
            cq.q.pop_into(out).0
        };
        if cq.q.is_empty() {
            if cq.signaled && (!keep_stale || !cq.exported) && cq.waiters == 0 {
                cq.drain();
            }
        } else if !cq.signaled && (cq.exported || cq.waiters > 0) {
            cq.signal();
        }
        (n, cq.signaled && cq.q.is_empty())
    }

    /// The application is given the eventfd (`ddp_event_fd`; made now if it was not): from
    /// now on it is readable exactly while completions are pending (up to the stale signal
    /// of [`Shared::poll_cq`]).
    pub(crate) fn export_event_fd(&self) -> Result<RawFd, Errno> {
        let mut cq = lock(&self.cq);
        let fd = cq.fd()?;
        cq.exported = true;
        if !cq.q.is_empty() && !cq.signaled {
            cq.signal();
        }
        Ok(fd)
    }

    /// A library thread is about to block on the eventfd (made now if it was not): from now
    /// on completions signal it. `None` (do not block) if completions are pending already.
    /// After `Some`, pair with [`Shared::cq_wait_end`].
    pub(crate) fn cq_wait_begin(&self) -> Result<Option<RawFd>, Errno> {
        let mut cq = lock(&self.cq);
        if !cq.q.is_empty() {
            return Ok(None);
        }
        let fd = cq.fd()?;
        if cq.signaled {
            // (stale: nothing pending)
            cq.drain();
        }
        cq.waiters += 1;
        Ok(Some(fd))
    }

    /// The blocking wait of [`Shared::cq_wait_begin`] is over.
    pub(crate) fn cq_wait_end(&self) {
        let mut cq = lock(&self.cq);
        cq.waiters -= 1;
        if cq.signaled && !cq.exported && cq.waiters == 0 {
            cq.drain();
        }
    }

    /// Whether the eventfd is readable with no completion pending (see [`Shared::poll_cq`]).
    pub(crate) fn stale_signal(&self) -> bool {
        let cq = lock(&self.cq);
        cq.signaled && cq.q.is_empty()
    }

    /// Resets the eventfd if it is readable with no completion pending.
    pub(crate) fn drain_stale_signal(&self) {
        let mut cq = lock(&self.cq);
        if cq.signaled && cq.q.is_empty() && cq.waiters == 0 {
            cq.drain();
        }
    }

    /// One round of all the work possible on this socket without blocking: the MPA
    /// exchange, or input (unless `read_input` is false), output, events and shutdowns;
    /// then the close check and the epoll interest.
    pub(crate) fn progress(
        &self,
        st: &mut ConnState,
        sink: Option<&mut UserSink<'_>>,
        read_input: bool,
    ) {
        self.progress_as(st, sink, read_input, true);
    }

    /// [`Shared::progress`]; without `rearm`, the caller brings the epoll interest in line
    /// itself before it lets go of the lock (`rearm` or `leave_inline`).
    fn progress_as(
        &self,
        st: &mut ConnState,
        sink: Option<&mut UserSink<'_>>,
        read_input: bool,
        rearm: bool,
    ) {
        if st.finalized {
            return;
        }
        if st.is_connecting()
            && let Some(ev) = st.step_startup(self)
        {
            st.startup_events = ev;
        }
        let mut mem = SessionMem::new(&self.engine.registry, sink);
        mem.overflow = st.backlog.take_spare();
        self.progress_in(st, mem, read_input, rearm);
    }

    /// A round for a thread waiting for completions ([`socket::DdpSocket::wait_cq`]):
    /// [`Shared::progress`], with receives into posted receives in one step where
    /// [`ConnState::posted_round`] applies (the general round then runs only for what it
    /// leaves).
    pub(crate) fn progress_posted(&self, st: &mut ConnState, read_input: bool) {
        if read_input && !st.finalized && !st.is_connecting() {
            let mut mem = SessionMem::new(&self.engine.registry, None);
            match st.posted_round(self, &mut mem) {
                SmallRound::Done => {}
                SmallRound::General { read } => self.progress_in(st, mem, read, true),
            }
            return;
        }
        self.progress(st, None, read_input);
    }

    /// The rest of [`Shared::progress_as`] in the session `mem` (input already fed into it
    /// stays there): the input, output, events, shutdowns, the close check and the epoll
    /// interest.
    fn progress_in(
        &self,
        st: &mut ConnState,
        mut mem: SessionMem<'_, '_, '_>,
        read_input: bool,
        rearm: bool,
    ) {
        mem.recycle_refs(core::mem::take(&mut st.spare_refs));
        if matches!(st.phase, Phase::Open) {
            // Bytes that came with the MPA exchange (the peer's first FPDUs, already out of
            // the socket) are processed now even when an application thread reads the input:
            // no TCP readiness would ever announce them.
            if read_input || st.has_pending_input() {
                st.pump_input(self, &mut mem);
            }
            st.close_when_drained(self);
            let _ = st.flush_tx(self, &mut mem);
        }
        st.settle(self, &mut mem);
        drop(mem);
        if st.press_over() {
            st.unpress(self);
        }
        if st.close_deadline.is_some() && st.close_done() {
            self.finalize(st);
        }
        if rearm {
            self.rearm(st);
        }
        if (self.user_closed.load(Ordering::Relaxed) && st.flushed())
            || (self.engine.draining.load(Ordering::Relaxed) != 0 && self.drained(st))
        {
            self.engine.note_flushed();
        }
    }

    /// One round of the socket's work for an application thread its TCP fd was reported
    /// ready to ([`socket::PollWait::service`], [`group::EpollGroup::service`]): with
    /// `may_hold`, stream data that finds the socketpair empty is held for the reader (true:
    /// the caller must report it readable; see `ConnState::hold`). Without `rearm`, the
    /// caller brings the epoll interest in line before it lets go of the lock.
    pub(crate) fn serve_round(&self, st: &mut ConnState, may_hold: bool, rearm: bool) -> bool {
        st.poll_reader = may_hold;
        // Held data is seen only by those who ask the library: a thread that already sleeps
        // in the kernel on this socket (another `poll`, a blocking `recv`) waits for the app
        // fd, and the input it was also woken for is gone. With another thread inside, the
        // data goes into the socketpair, whose readiness the kernel reports to every waiter
        // (ddp-fdtest poll-two-threads: held, the second poller slept out its timeout).
        let may_hold = may_hold && st.inline <= 1;
        // (a backlog already waiting is the front of the stream while the socketpair is
        // empty: it is held too, and read before what arrives now)
        if may_hold && st.is_open() && !st.rd_shut && !st.pair_maybe_readable() {
            st.hold = true;
            // Stream data waits in the kernel for the reader: leave it there for its own
            // `recv`, which places it straight into its buffer.
            if !st.has_pending_input() && st.stream_waiting(self) {
                st.announced = true;
                st.announces += 1;
                self.progress_as(st, None, false, rearm);
                if st.hold {
                    self.note_hold(st);
                }
                return st.hold;
            }
        }
        // (small messages: the commonest round in one step, see `ConnState::small_round`)
        let read = match st.small_round(self, false) {
            SmallRound::Done => {
                if rearm {
                    self.rearm(st);
                }
                self.note_hold(st);
                return true;
            }
            SmallRound::General { read } => read,
        };
        self.progress_as(st, None, read, rearm);
        // (flush_backlog ends the hold at once if nothing stream-like arrived)
        if st.hold {
            self.note_hold(st);
        }
        st.hold
    }

    /// A one-shot epoll event for this socket, on the progress thread (`shadow`: a TCP event
    /// from an epoll group's shadow, else from the progress thread's own set).
    fn on_event(&self, kind: u64, events: u32, shadow: bool) {
        let mut st = self.lock();
        if st.finalized {
            return;
        }
        if kind == KIND_TCP && st.group.is_some() != shadow {
            // Stale: the TCP fd moved into a group's shadow (or out of it) after the report,
            // and the set that has it now reports the input. Read here, the input would be
            // on its way to the socketpair while a thread waiting on the group looks for it
            // in neither place (it does not take the socket's lock): its `epoll_wait` would
            // answer `EPOLLOUT` alone where TCP answers `EPOLLIN|EPOLLOUT`.
            return;
        }
        let read_input = if kind == KIND_TCP {
            // (an epoll group's shadow reports input level-triggered: that interest is not
            // used up, and `rearm` must see it to take it back when the input is no longer
            // wanted, a full backlog say; else the shadow reports the socket on and on)
            let level = st.group.is_some() && st.tcp_armed == libc::EPOLLIN as u32;
            if !level {
                st.tcp_armed = 0;
            }
            // An application thread is working on this socket: it reads the input (and
            // re-arms when it leaves). Threads only waiting in poll/epoll_wait do not write a
            // tail left by another thread: that is done here.
            if st.inline > 0 || (level && st.announced && st.hold) {
                // (announced: the input is its reader's, taken by its `recv` or at the
                // hold's end; the shadow kept it armed, see `ConnState::tcp_interest`)
                if level {
                    self.disarm_tcp(&mut st);
                }
                if st.inline == st.pollers && st.has_tail() {
                    self.progress(&mut st, None, false);
                }
                return;
            }
            // (a report of output room alone: there was no input when it came, and the
            // re-arm below, level-triggered, reports any that came since; a read here
            // would say EAGAIN, one per stalled write of a sender that receives nothing)
            events & INPUT_EVENTS != 0
        } else {
            st.eng_armed = 0;
            st.pump_eng(self);
            self.close_if_released(&mut st);
            if st.finalized {
                return;
            }
            // (not while the TCP fd's input interest is armed: input is reported there)
            st.inline == 0 && st.tcp_armed & libc::EPOLLIN as u32 == 0
        };
        self.progress(&mut st, None, read_input);
    }

    /// Ends a loan of the caller's buffers to stream Sends (`ConnState::end_lent`).
    pub(crate) fn end_lent(&self, st: &mut ConnState) {
        let mem = SessionMem::new(&self.engine.registry, None);
        st.end_lent(&mem);
    }

    /// Brings the epoll interest in line with the state (one-shot, level-triggered).
    pub(crate) fn rearm(&self, st: &mut ConnState) {
        if !st.registered || st.finalized {
            return;
        }
        let ep = self.engine.epfd;
        let tcp_ep = self.tcp_ep(st);
        if st.lazy_until.is_some()
            && (st.close_deadline.is_some() || st.has_tail() || !st.is_open())
        {
            // Work only the progress thread can do (an unsent tail, a close): no laziness.
            st.lazy_until = None;
            LAZY.fetch_sub(1, Ordering::Relaxed);
        }
        let pollers_only = st.inline > 0 && st.inline == st.pollers;
        if (st.inline == 0 && st.lazy_until.is_none()) || pollers_only {
            let want = if pollers_only {
                // (pollers read the input themselves; see `ConnState::pollers`)
                if st.has_tail() {
                    libc::EPOLLOUT as u32
                } else {
                    0
                }
            } else {
                st.tcp_interest()
            };
            // (level-triggered in an epoll group's shadow while it only waits for input:
            // whoever serves the input leaves it armed, one `epoll_ctl` less per message; see
            // `group`. One-shot otherwise: a hang-up, always reported, must not fire forever.)
            let once = if st.group.is_some() && want == libc::EPOLLIN as u32 {
                0
            } else {
                libc::EPOLLONESHOT as u32
            };
            // (and `EPOLLRDHUP` with the input in a shadow: its report says when the peer's
            // FIN is in, `EpollGroup::ready_events`; a FIN keeps the fd readable anyway)
            let fin = if st.group.is_some() && want & libc::EPOLLIN as u32 != 0 {
                libc::EPOLLRDHUP as u32
            } else {
                0
            };
            if want != st.tcp_armed
                && sys::epoll_ctl(
                    tcp_ep,
                    libc::EPOLL_CTL_MOD,
                    self.tcp_fd,
                    want | once | fin,
                    self.id << 2 | KIND_TCP,
                )
                .is_ok()
            {
                st.tcp_armed = want;
            }
        }
        let want = st.eng_interest();
        if want != st.eng_armed
            && sys::epoll_ctl(
                ep,
                libc::EPOLL_CTL_MOD,
                self.eng_end,
                want | libc::EPOLLONESHOT as u32,
                self.id << 2 | KIND_ENG,
            )
            .is_ok()
        {
            st.eng_armed = want;
        }
    }

    /// The last application thread left the library on this socket: keep its TCP fd away
    /// from the progress thread for [`LAZY_REARM`] if it is disarmed (re-arming is
    /// [`Shared::end_lazy`], by the progress thread's timer or [`release_lazy`]); else
    /// [`Shared::rearm`].
    pub(crate) fn leave_inline(&self, st: &mut ConnState) {
        if st.hold {
            self.note_hold(st);
        }
        if st.registered
            && !st.finalized
            && st.group.is_none()
            && st.tcp_armed == 0
            && st.is_open()
            && !st.has_tail()
            && st.close_deadline.is_none()
        {
            if st.lazy_until.is_some() {
                // (no clock read: the progress thread's visit dates the renewal)
                st.lazy_renewed = true;
            } else {
                let at = self.engine.now() + LAZY_REARM;
                st.lazy_until = Some(at);
                st.lazy_renewed = false;
                LAZY.fetch_add(1, Ordering::Relaxed);
                self.mark_held(st);
                self.engine.watch_deadline_at(self.id, Some(at));
            }
        }
        self.rearm(st);
    }

    /// Ends a lazy hold: the progress thread gets the TCP fd back (level-triggered: input
    /// that arrived meanwhile fires at once).
    pub(crate) fn end_lazy(&self, st: &mut ConnState) {
        if st.lazy_until.take().is_some() {
            LAZY.fetch_sub(1, Ordering::Relaxed);
        }
        self.rearm(st);
    }

    /// The socket is held lazily or holds data: it enters `Engine::held` (once: it leaves
    /// only when a walk finds it neither, [`Shared::unmark_held`], so that a socket held
    /// and released with every message costs no set operation each time).
    fn mark_held(&self, st: &mut ConnState) {
        if !st.in_held {
            st.in_held = true;
            lock(&self.engine.held).insert(self.id);
        }
    }

    /// For the walks of `Engine::held`: a socket found neither held lazily nor holding data
    /// leaves the set.
    fn unmark_held(&self, st: &mut ConnState) {
        if st.in_held && st.lazy_until.is_none() && st.hold_until.is_none() {
            st.in_held = false;
            lock(&self.engine.held).remove(&self.id);
        }
    }

    /// Received stream data is held in the backlog for the reader that was told about it
    /// (`ConnState::hold`): it goes to the socketpair if that reader does not come back
    /// within [`hold_keep`] (from now; a hold already dated is renewed by a flag, see
    /// `ConnState::hold_renewed`), or when another thread is about to wait elsewhere
    /// ([`release_lazy`]) or looks at the socketpair ([`flush_held`]).
    pub(crate) fn note_hold(&self, st: &mut ConnState) {
        if st.finalized {
            return;
        }
        if st.hold_until.is_some() {
            // (no clock read: the progress thread's visit dates the renewal)
            st.hold_renewed = true;
            return;
        }
        let at = self.engine.now() + hold_keep(st);
        st.hold_until = Some(at);
        st.hold_renewed = false;
        HELD.fetch_add(1, Ordering::Relaxed);
        self.mark_held(st);
        self.engine.watch_deadline_at(self.id, Some(at));
    }

    /// Ends a hold of received stream data (`ConnState::hold`): the backlog goes into the
    /// socketpair (as far as it takes it; the rest on `eng_end`'s `POLLOUT`).
    pub(crate) fn end_hold(&self, st: &mut ConnState) {
        st.hold_renewed = false;
        if st.hold_until.take().is_some() {
            HELD.fetch_sub(1, Ordering::Relaxed);
        }
        self.drain_stale_signal();
        if st.hold {
            st.hold = false;
            if core::mem::take(&mut st.announced) {
                // (the input announced to the reader: read now, for the socketpair)
                self.progress(st, None, true);
            } else {
                st.flush_backlog(self);
            }
            self.rearm(st);
        }
    }

    /// Removes the TCP interest (an application thread waits on the socket itself; it
    /// re-arms when it leaves).
    pub(crate) fn disarm_tcp(&self, st: &mut ConnState) {
        if st.registered
            && !st.finalized
            && sys::epoll_ctl(
                self.tcp_ep(st),
                libc::EPOLL_CTL_MOD,
                self.tcp_fd,
                libc::EPOLLONESHOT as u32,
                self.id << 2 | KIND_TCP,
            )
            .is_ok()
        {
            st.tcp_armed = 0;
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        for fd in [self.tcp_fd, self.eng_end, self.app_end] {
            let _ = sys::close(fd);
        }
        // (`get_mut`, not a lock: in a forked child a parent thread may have held it)
        let cq = self.cq.get_mut();
        if let Some(fd) = cq.fd {
            let _ = sys::close(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the engine's wake eventfd has been signalled (drained if so).
    fn woken(e: &Engine) -> bool {
        let mut p = libc::pollfd {
            fd: e.wake_fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        if r == 1 {
            let _ = sys::eventfd_drain(e.wake_fd);
        }
        r == 1
    }

    /// The progress thread's loop (`Engine::run`) replayed step by step, with a socket's
    /// first deadline (a lazy hand-back or a hold, `watch_deadline_at`) noted by an
    /// application thread while the progress thread walks the deadlines, after it took its
    /// snapshot of `timed` (the socket was not in it, or the walk removed it under the
    /// socket's lock). The walk then plans its sleep without that deadline: unless the
    /// eventfd was signalled, the thread sleeps past it (with no other deadline and no
    /// event: for good), and the socket's TCP fd or held data stays with no one watching.
    #[test]
    fn a_deadline_noted_during_the_walk_wakes_the_progress_thread() {
        let e = engine().expect("engine");
        // (no test of this binary makes a socket: no progress thread drains the eventfd or
        // writes the plan behind this test's back)
        assert!(
            !e.thread.is_completed(),
            "the progress thread runs in this test binary"
        );
        let _ = woken(e);
        // progress thread: awake, walking (what `run` stores first)
        e.next_wake.store(0, Ordering::SeqCst);
        let snapshot = e.timed_ids();
        assert!(snapshot.iter().all(|id| id != 4242));
        // application thread: the socket's first lazy deadline, `LAZY_REARM` from now
        e.watch_deadline_at(4242, Some(e.now() + LAZY_REARM));
        // progress thread: its walk found no deadline; it will sleep until an event
        e.next_wake.store(u64::MAX, Ordering::SeqCst);
        assert!(
            woken(e),
            "a deadline noted during the walk did not wake the progress thread: it sleeps past it"
        );
        lock(&e.timed).remove(&4242);
    }
}
