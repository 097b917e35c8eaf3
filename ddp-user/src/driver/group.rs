//! Epoll groups: the TCP input of many DDP sockets served by the application thread that
//! waits for them in one `epoll_wait` (docs/engine.md "Epoll groups").
//!
//! A socket's TCP fd is normally in the progress thread's epoll set, and an application
//! thread that waits on up to a handful of sockets takes their fds over for the wait
//! ([`crate::PollWait`]: two `epoll_ctl`s per socket and wait at most). For an epoll fd
//! watching hundreds of DDP sockets that costs more than it saves, so such a set gets a
//! group: a private epoll fd (the *shadow*) that holds its sockets' TCP fds instead of the
//! progress thread's set, level-triggered (whoever serves the input leaves the interest as
//! it is, unless it changes: one `epoll_ctl` less per message than the progress thread's
//! one-shot interest; a socket an application thread is inside on is disarmed until it
//! leaves). The
//! application's `epoll_wait` waits on its own epoll fd and the shadow together and serves
//! what the shadow reports ([`EpollGroup::ready`], [`EpollGroup::service`]); stream data that
//! finds the socketpair empty may be held for the reader as after an inline `poll`. The
//! shadow itself is in the progress thread's set (one-shot): when no application thread has
//! been waiting on the group for [`LAZY_REARM`], the progress thread serves the group's input
//! as it serves any socket's (so RDMA traffic and Read Responses never wait for the
//! application), and it leaves the group alone again as soon as a thread comes back.

use std::collections::HashSet;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::sync::Mutex;
use std::time::Duration;

use super::{
    ConnState, Engine, FORK_GEN, KIND_TCP, KIND_WAKE, LAZY, Shared, engine, lock, move_high,
};
use crate::driver::socket::{DdpSocket, read_to_fin};
use crate::sys::{self, Errno};

/// How long the progress thread leaves a group alone after the last application thread left
/// its `epoll_wait` (unless a thread blocks elsewhere in the library first: [`Group::release`]).
/// Longer than a socket's [`LAZY_REARM`]: an event loop over hundreds of sockets spends
/// milliseconds on one batch of events before it waits again, and input served by the
/// progress thread meanwhile would go through the socketpairs (two more copies) instead of
/// straight to the readers. Input waits in the kernel's TCP buffers meanwhile, as it would for
/// a plain TCP socket; RDMA Read Requests from the peer are answered at most this late.
pub(crate) const GROUP_LAZY: Duration = Duration::from_millis(20);

/// An epoll group (see the module documentation), shared by its handle and its sockets.
pub(crate) struct Group {
    pub(crate) id: u64,
    /// The shadow epoll fd: the member sockets' TCP fds.
    pub(crate) shadow: RawFd,
    engine: &'static Engine,
    fork_gen: u64,
    st: Mutex<GroupState>,
    /// Held by the progress thread while it serves the group's sockets ([`Group::on_event`]),
    /// taken and let go by a thread that starts waiting ([`EpollGroup::enter`]): once it
    /// has it, no input the progress thread read is on its way to a socketpair still.
    serving: Mutex<()>,
}

#[derive(Default)]
struct GroupState {
    /// Application threads waiting on the group now.
    inside: u32,
    /// The shadow is armed in the progress thread's set.
    armed: bool,
    /// The progress thread leaves the group alone until then (set when the last waiting
    /// thread left; see [`LAZY_REARM`]).
    lazy_until: Option<Duration>,
    /// The sockets that joined (some may have left or ended since).
    members: HashSet<u64>,
    /// The handle was dropped: the group is being taken apart.
    closed: bool,
}

impl Group {
    /// Arms the shadow in the progress thread's set unless an application thread waits on
    /// the group or will be back soon.
    fn rearm_if_idle(&self, gs: &mut GroupState) {
        if gs.closed || gs.armed || gs.inside > 0 || gs.lazy_until.is_some() {
            return;
        }
        if sys::epoll_ctl(
            self.engine.epfd,
            libc::EPOLL_CTL_MOD,
            self.shadow,
            (libc::EPOLLIN | libc::EPOLLONESHOT) as u32,
            self.id << 2 | KIND_WAKE,
        )
        .is_ok()
        {
            gs.armed = true;
        }
    }

    /// The progress thread's event for the shadow: serve its sockets unless an application
    /// thread is on it.
    pub(crate) fn on_event(&self) {
        // (before the check: see `serving`)
        let _serving = lock(&self.serving);
        {
            let mut gs = lock(&self.st);
            gs.armed = false;
            if gs.closed || gs.inside > 0 || gs.lazy_until.is_some() {
                return;
            }
        }
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        for _ in 0..16 {
            let n = sys::epoll_wait(self.shadow, &mut evs, Some(Duration::ZERO)).unwrap_or(0);
            for ev in &evs[..n] {
                let (data, events) = (ev.u64, ev.events);
                let sh = lock(&self.engine.conns).get(&(data >> 2)).cloned();
                if let Some(sh) = sh {
                    sh.on_event(KIND_TCP, events, true);
                }
            }
            if n < evs.len() {
                break;
            }
        }
        self.rearm_if_idle(&mut lock(&self.st));
    }

    /// The progress thread's deadline: ends the laziness once it has passed and nobody
    /// waits. Returns the time left (None: nothing more to watch, and the group has left
    /// `timed`, under its lock: see [`Engine::watch_group`]).
    pub(crate) fn on_deadline(
        &self,
        now: Duration,
        timed: &Mutex<HashSet<u64>>,
    ) -> Option<Duration> {
        let mut gs = lock(&self.st);
        let Some(d) = gs.lazy_until else {
            lock(timed).remove(&self.id);
            return None;
        };
        if gs.closed || (now >= d && gs.inside == 0) {
            gs.lazy_until = None;
            LAZY.fetch_sub(1, Ordering::Relaxed);
            self.rearm_if_idle(&mut gs);
            lock(timed).remove(&self.id);
            return None;
        }
        // (a thread inside keeps it; it is pushed on when the thread leaves)
        Some(if now >= d { GROUP_LAZY } else { d - now })
    }

    /// [`crate::release_lazy`]: the progress thread gets the group back at once if nobody
    /// waits on it.
    pub(crate) fn release(&self) {
        let Ok(mut gs) = self.st.try_lock() else {
            return;
        };
        if gs.inside == 0 && gs.lazy_until.take().is_some() {
            LAZY.fetch_sub(1, Ordering::Relaxed);
            self.rearm_if_idle(&mut gs);
        }
    }
}

/// The application's handle of an epoll group (one per epoll fd that watches many DDP
/// sockets). Dropping it gives the sockets back to the progress thread.
pub struct EpollGroup {
    g: Arc<Group>,
}

/// An application thread waiting on a group ([`EpollGroup::enter`]): the progress thread
/// leaves the group's input to it, and for [`LAZY_REARM`] after it leaves.
pub struct GroupVisit<'a> {
    g: &'a Group,
}

impl EpollGroup {
    /// A new, empty group of this process's engine.
    pub fn new() -> Result<EpollGroup, Errno> {
        let engine = engine()?;
        let shadow = move_high(sys::epoll_create()?)?;
        let id = engine.next_id();
        let g = Arc::new(Group {
            id,
            shadow,
            engine,
            fork_gen: FORK_GEN.load(Ordering::Acquire),
            st: Mutex::new(GroupState {
                armed: true,
                ..GroupState::default()
            }),
            serving: Mutex::new(()),
        });
        lock(&engine.groups).insert(id, g.clone());
        if let Err(e) = sys::epoll_ctl(
            engine.epfd,
            libc::EPOLL_CTL_ADD,
            shadow,
            (libc::EPOLLIN | libc::EPOLLONESHOT) as u32,
            id << 2 | KIND_WAKE,
        ) {
            lock(&engine.groups).remove(&id);
            let _ = sys::close(shadow);
            return Err(e);
        }
        Ok(EpollGroup { g })
    }

    /// Whether the group belongs to this process (not to the parent of a forked child).
    pub fn usable(&self) -> bool {
        FORK_GEN.load(Ordering::Acquire) == self.g.fork_gen
    }

    /// The shadow epoll fd, to wait on (for `POLLIN`) with the application's epoll fd.
    pub fn fd(&self) -> RawFd {
        self.g.shadow
    }

    /// Moves `sock`'s TCP input into the group (from wherever it is).
    pub fn add(&self, sock: &DdpSocket) {
        if !self.usable() {
            return;
        }
        let sh = sock.sh();
        if sh.in_child() {
            return;
        }
        lock(&self.g.st).members.insert(sh.id);
        let mut st = sh.lock();
        sh.set_group(&mut st, Some(self.g.clone()));
    }

    /// Gives `sock`'s TCP input back to the progress thread, if it is in this group.
    pub fn remove(&self, sock: &DdpSocket) {
        let sh = sock.sh();
        if sh.in_child() {
            return;
        }
        lock(&self.g.st).members.remove(&sh.id);
        let mut st = sh.lock();
        if st.group.as_ref().is_some_and(|g| Arc::ptr_eq(g, &self.g)) {
            sh.set_group(&mut st, None);
        }
    }

    /// An application thread starts waiting on the group (until the visit is dropped).
    ///
    /// If the progress thread is serving the group's sockets, this waits until it is done:
    /// input it has read from a TCP fd is in no TCP fd the caller looks at and in no
    /// socketpair yet, and a level-triggered wait that then asked the kernel would report an
    /// always-ready `EPOLLOUT` without the `EPOLLIN` a TCP socket shows with it. Once the
    /// count says a thread is inside, the progress thread starts no such round.
    pub fn enter(&self) -> GroupVisit<'_> {
        let g = &*self.g;
        {
            let mut gs = lock(&g.st);
            gs.inside += 1;
            if gs.armed
                && sys::epoll_ctl(
                    g.engine.epfd,
                    libc::EPOLL_CTL_MOD,
                    g.shadow,
                    libc::EPOLLONESHOT as u32,
                    g.id << 2 | KIND_WAKE,
                )
                .is_ok()
            {
                gs.armed = false;
            }
        }
        drop(lock(&g.serving));
        GroupVisit { g }
    }

    /// The sockets whose TCP fd the shadow reports ready now (ids, at most `out.len()`; their
    /// interest is used up: [`EpollGroup::service`] each).
    pub fn ready(&self, out: &mut [u64]) -> usize {
        let mut evs = [(0, 0); 64];
        let n = self.ready_events(&mut evs[..out.len().min(64)]);
        for (o, e) in out.iter_mut().zip(&evs[..n]) {
            *o = e.0;
        }
        n
    }

    /// [`EpollGroup::ready`], with the events of each report (epoll bits: `EPOLLRDHUP` when
    /// the peer's FIN is in; [`EpollGroup::service_report`] each).
    pub fn ready_events(&self, out: &mut [(u64, u32)]) -> usize {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let want = out.len().min(evs.len());
        let n = sys::epoll_wait(self.g.shadow, &mut evs[..want], Some(Duration::ZERO)).unwrap_or(0);
        for (o, ev) in out.iter_mut().zip(&evs[..n]) {
            *o = (ev.u64 >> 2, ev.events);
        }
        n
    }

    /// One round of the socket's work (input, unsent tails, Read Responses owed) in the
    /// calling thread, after [`EpollGroup::ready`] reported it: as
    /// [`crate::PollWait::service`] when `may_hold` (true: stream data is held for the
    /// reader, who must be told), else as [`crate::PollWait::service_plain`]. False also
    /// when the socket is gone or another application thread is inside on it (and reads the
    /// input itself).
    pub fn service(&self, id: u64, may_hold: bool) -> bool {
        self.service_report(id, may_hold, 0)
    }

    /// [`EpollGroup::service`] of a report with `events` ([`EpollGroup::ready_events`]): one
    /// that shows the peer's FIN reads on up to it, as [`crate::PollWait::reported`] says.
    pub fn service_report(&self, id: u64, may_hold: bool, events: u32) -> bool {
        let Some(sh) = lock(&self.g.engine.conns).get(&id).cloned() else {
            return false;
        };
        let mut st = sh.lock();
        if !st.group.as_ref().is_some_and(|g| Arc::ptr_eq(g, &self.g)) || st.finalized {
            return false; // (moved on since the shadow reported it)
        }
        if st.tcp_armed != libc::EPOLLIN as u32 {
            st.tcp_armed = 0; // (one-shot: used up)
        }
        if st.inline > 0 || (st.announced && st.hold) {
            // The thread inside reads the input and re-arms when it leaves; or the input
            // was announced to a reader that has not come for it yet (its `recv`, or the
            // hold's end, re-arms). Level-triggered, the shadow would report it until then.
            sh.disarm_tcp(&mut st);
            return false;
        }
        let held = sh.serve_round(&mut st, may_hold, true);
        if events & libc::EPOLLRDHUP as u32 != 0 {
            read_to_fin(&sh, &mut st);
        }
        held
    }
}

impl Drop for GroupVisit<'_> {
    fn drop(&mut self) {
        let g = self.g;
        let mut gs = lock(&g.st);
        gs.inside -= 1;
        if gs.inside == 0 && !gs.closed {
            if gs.lazy_until.is_none() {
                LAZY.fetch_add(1, Ordering::Relaxed);
            }
            let at = g.engine.now() + GROUP_LAZY;
            gs.lazy_until = Some(at);
            // (under the group's lock, as the progress thread removes it: never lost)
            g.engine.watch_group(g.id, at);
        }
    }
}

impl Drop for EpollGroup {
    fn drop(&mut self) {
        let g = &self.g;
        let members = {
            let mut gs = lock(&g.st);
            gs.closed = true;
            if gs.lazy_until.take().is_some() {
                LAZY.fetch_sub(1, Ordering::Relaxed);
            }
            core::mem::take(&mut gs.members)
        };
        if self.usable() {
            for id in members {
                let sh = lock(&g.engine.conns).get(&id).cloned();
                if let Some(sh) = sh {
                    let mut st = sh.lock();
                    if st.group.as_ref().is_some_and(|x| Arc::ptr_eq(x, g)) {
                        sh.set_group(&mut st, None);
                    }
                }
            }
            let _ = sys::epoll_ctl(g.engine.epfd, libc::EPOLL_CTL_DEL, g.shadow, 0, 0);
            lock(&g.engine.groups).remove(&g.id);
        }
        // (the shadow fd closes with the last reference: `Group`'s drop)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if FORK_GEN.load(Ordering::Acquire) == self.fork_gen {
            let _ = sys::close(self.shadow);
        }
    }
}

impl Shared {
    /// The epoll set that holds the socket's TCP fd: its group's shadow, or the progress
    /// thread's.
    pub(crate) fn tcp_ep(&self, st: &ConnState) -> RawFd {
        st.group.as_ref().map_or(self.engine.epfd, |g| g.shadow)
    }

    /// Moves the TCP fd into `g`'s shadow (None: back into the progress thread's set),
    /// disarmed, then arms it as the state wants.
    pub(crate) fn set_group(&self, st: &mut ConnState, g: Option<Arc<Group>>) {
        let old = self.tcp_ep(st);
        let new = g.as_ref().map_or(self.engine.epfd, |g| g.shadow);
        if old == new {
            return;
        }
        if !st.registered || st.finalized {
            st.group = g;
            return;
        }
        let data = self.id << 2 | KIND_TCP;
        let _ = sys::epoll_ctl(old, libc::EPOLL_CTL_DEL, self.tcp_fd, 0, 0);
        st.tcp_armed = 0;
        if sys::epoll_ctl(
            new,
            libc::EPOLL_CTL_ADD,
            self.tcp_fd,
            libc::EPOLLONESHOT as u32,
            data,
        )
        .is_ok()
        {
            st.group = g;
        } else {
            // (the progress thread's set, which had it a moment ago)
            st.group = None;
            let _ = sys::epoll_ctl(
                self.engine.epfd,
                libc::EPOLL_CTL_ADD,
                self.tcp_fd,
                libc::EPOLLONESHOT as u32,
                data,
            );
        }
        if st.lazy_until.take().is_some() {
            LAZY.fetch_sub(1, Ordering::Relaxed);
        }
        self.rearm(st);
    }
}
