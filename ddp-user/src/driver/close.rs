//! Closing a socket, as TCP closes one: `close` returns at once and the engine finishes in
//! the background — the MPA exchange if it is still under way, then everything the
//! application wrote (queued before the exchange completed, left in the socketpair, framed
//! and not written) and posted, then the FIN — giving up only when the peer takes no byte for
//! [`conn::CLOSE_LINGER`]. `SO_LINGER` is honoured as TCP honours it: 0 aborts (a reset,
//! posted work flushed), a linger time makes `close` wait that long at most until
//! everything is written and the FIN sent. Also here: a close while other processes still
//! have the app end, a forked child's close, the end of a socket's life in the engine, and
//! the bounded flushes at process exit and before `exec`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use core::time::Duration;

use ddp_proto::conn::State;

use crate::driver::conn::{self, ConnState};
use crate::driver::mem::SessionMem;
use crate::driver::{ENGINE, Engine, Shared, lock, lock_std, release_lazy};
use crate::sys::{self, Errno};

/// What a bounded flush ([`flush_at_exit`], [`flush_before_exec`]) left undone when its time
/// was up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unflushed {
    /// Sockets that had not written everything (and sent their FIN, at exit).
    pub sockets: usize,
    /// The bytes they still had to write: queued in the engine (MPA frames and FPDUs
    /// included) or left in the socketpair.
    pub bytes: u64,
}

/// This process's engine, if it has one and is not a forked child's copy.
fn own_engine() -> Option<&'static Engine> {
    let cur = ENGINE.load(Ordering::Acquire);
    // SAFETY: ENGINE only ever holds null or a leaked, never freed `Box<Engine>`.
    let e = unsafe { cur.as_ref() }?;
    (e.pid == sys::getpid()).then_some(e)
}

/// Process exit (call it from an exit handler): closes every socket of this process's engine
/// and waits, at most `timeout`, until each has written what it had queued and sent its FIN
/// (sockets still in their MPA exchange finish it first). Without it, data a program wrote
/// just before exiting dies with the progress thread (a TCP socket's data would still be
/// sent by the kernel). Does not wait for the peer's FIN, nor for `SO_LINGER` (as Linux does
/// not at exit; `SO_LINGER` 0 still aborts). Sockets this process closed while another
/// process still had them (a forked child's) are closed too: with this process's engine
/// gone, no one would serve them. When the time is up, sockets that still had bytes to send
/// are reset (the peer must not take what it got for the whole stream) and reported in the
/// answer, for the caller to say so.
pub fn flush_at_exit(timeout: Duration) -> Unflushed {
    let Some(e) = own_engine() else {
        return Unflushed::default();
    };
    let socks: Vec<Arc<Shared>> = lock(&e.conns).values().cloned().collect();
    for sh in &socks {
        sh.begin_close();
        // (one that others still had goes too: this process served it, and no one will)
        let mut st = sh.lock();
        if st.others_hold && !st.finalized {
            sh.close_now(&mut st);
        }
    }
    let deadline = Instant::now() + timeout;
    if e.wait_flushed(deadline, || {
        socks.iter().all(|sh| sh.in_child() || sh.lock().flushed())
    }) {
        return Unflushed::default();
    }
    let mut cut = Unflushed::default();
    for sh in &socks {
        let mut st = sh.lock();
        if sh.in_child() || st.flushed() {
            continue;
        }
        cut.sockets += 1;
        cut.bytes += sh.unsent_with_pair(&st);
        sh.force_close(&mut st);
    }
    cut
}

/// Before `exec` (call it from an `execve` hook): the new program image has no engine, so
/// every socket of this process's engine writes what it has queued now — the MPA exchange
/// finished first, the socketpair's bytes taken, `DDP_MORE` batches put out — and this waits
/// at most `timeout` until none has anything left to write. Nothing is closed (the `exec`
/// may fail): the kernel closes the engine's descriptors at the `exec`, with a FIN after
/// what was written. Returns what was still unsent when the time was up.
pub fn flush_before_exec(timeout: Duration) -> Unflushed {
    let Some(e) = own_engine() else {
        return Unflushed::default();
    };
    // (sockets held lazily for an application thread go back to the progress thread)
    release_lazy();
    let socks: Vec<Arc<Shared>> = lock(&e.conns).values().cloned().collect();
    e.draining.fetch_add(1, Ordering::AcqRel);
    for sh in &socks {
        let mut st = sh.lock();
        if !st.finalized {
            st.pump_eng(sh);
            sh.progress(&mut st, None, false);
        }
    }
    let deadline = Instant::now() + timeout;
    let done = e.wait_flushed(deadline, || {
        socks
            .iter()
            .all(|sh| sh.in_child() || sh.drained(&sh.lock()))
    });
    e.draining.fetch_sub(1, Ordering::AcqRel);
    let mut cut = Unflushed::default();
    if !done {
        for sh in &socks {
            let st = sh.lock();
            if !sh.in_child() && !sh.drained(&st) {
                cut.sockets += 1;
                cut.bytes += sh.unsent_with_pair(&st);
            }
        }
    }
    cut
}

impl Engine {
    /// Waits until `done()` holds or `deadline` passes, woken by each
    /// [`Engine::note_flushed`]; returns whether `done()` held. `done` takes socket locks:
    /// the caller holds none.
    pub(crate) fn wait_flushed(&self, deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
        loop {
            let seen = *lock_std(&self.flushed);
            if done() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let g = lock_std(&self.flushed);
            if *g == seen {
                drop(self.flushed_cv.wait_timeout(g, left));
            }
        }
    }
}

impl Shared {
    /// `close` of the application's last fd (or of a [`super::socket::DdpSocket`]'s last
    /// handle): the graceful close in the background ([`Shared::close_now`]). With
    /// `SO_LINGER` on and a linger time, the caller waits at most that long until everything
    /// is written and the FIN sent, as `close` of a TCP socket does (a nonblocking one
    /// included, as on Linux).
    pub(crate) fn close(&self) {
        if let Some(linger) = self.begin_close()
            && !linger.is_zero()
        {
            let deadline = Instant::now() + linger;
            self.engine.wait_flushed(deadline, || self.lock().flushed());
        }
    }

    /// [`Shared::close`] without the linger wait; returns `SO_LINGER`'s time if the close
    /// began here and it is on.
    fn begin_close(&self) -> Option<Duration> {
        if self.in_child() {
            self.close_in_child();
            return None;
        }
        if self.user_closed.swap(true, Ordering::AcqRel) {
            return None;
        }
        // The application's last fd is gone: so goes our own reference to the socketpair's
        // app end, so that the kernel releases that file, and with it the epoll
        // registrations of the application's fd, as it does for a closed TCP socket (unless
        // another process still has it open: a forked child). Kept, it let the close's
        // EOF reach `epoll_wait` as an event for the closed fd, even once its number was
        // reused (ddp-fdtest epoll-held, 2 runs in 30).
        let _ = sys::retire(self.app_end, self.engine.inert_fd);
        let mut st = self.lock();
        if st.finalized {
            return None;
        }
        // Held stream data goes to the socketpair (another process may still read it).
        self.end_hold(&mut st);
        if !sys::hung_up(self.eng_end) {
            // Someone else still has the app end (a forked child the socket was handed to,
            // an exec'd program, a raw `dup`): the connection stays theirs, served here,
            // until they close it too (`close_if_released`).
            st.others_hold = true;
            self.rearm(&mut st);
            return None;
        }
        self.close_now(&mut st);
        st.linger
    }

    /// [`Shared::close`] once nobody has the app end any more. `SO_LINGER` 0: an abort.
    /// Otherwise the graceful close, in the background: the application writes no more
    /// ([`Shared::end_writing`]); the MPA exchange, if under way, goes on (bounded by its
    /// own timeout); what was queued before it and what is left in the socketpair is sent
    /// once it completes; then the connection closes
    /// ([`ConnState::close_when_drained`]) and the FIN follows the last byte. Given up when
    /// no byte is written for [`conn::CLOSE_LINGER`] ([`Shared::close_linger_left`]).
    fn close_now(&self, st: &mut ConnState) {
        st.others_hold = false;
        st.linger = sys::linger(self.tcp_fd);
        if st.linger == Some(Duration::ZERO) {
            self.abort(st);
            return;
        }
        st.close_deadline = Some(Instant::now() + conn::CLOSE_LINGER);
        st.close_mark = st.tx_written;
        self.end_writing(st);
        self.engine.watch_deadline(self.id);
        self.progress(st, None, true);
    }

    /// The application writes no more (`shutdown(SHUT_WR)`, `close`): what it wrote so far
    /// still goes out, the bytes it left in the socketpair (spilled sends, raw writes)
    /// included, then the FIN ([`ConnState::settle`] waits for
    /// [`ConnState::pair_drained`]). No back-pressure token is needed any more.
    pub(crate) fn end_writing(&self, st: &mut ConnState) {
        st.want_shut_wr = true;
        if st.pressed {
            st.unpress(self);
        }
        st.pump_eng(self);
    }

    /// `SO_LINGER` 0 at close: nothing more is sent, posted work completes with `FLUSH_ERR`,
    /// the connection is reset (an MPA exchange under way ends there too).
    fn abort(&self, st: &mut ConnState) {
        st.reset = true;
        if st.is_connecting() {
            st.fail_startup(Errno::ECONNRESET);
        }
        self.force_close(st);
    }

    /// A socket the application closed while others had its app end
    /// (`ConnState::others_hold`): closed now if they all let go of it, i.e. `eng_end`
    /// reports the hang-up and everything they wrote was read (or can no longer be sent).
    pub(crate) fn close_if_released(&self, st: &mut ConnState) {
        if st.others_hold
            && !st.finalized
            && (!st.eng_open() || st.stream_over())
            && sys::hung_up(self.eng_end)
        {
            self.close_now(st);
        }
    }

    /// `close` in a forked child, of the socket's last fd there: the child's copies of the
    /// engine's descriptors go too (replaced by inert ones: the numbers stay taken), so
    /// that the parent's engine hears the hang-up of the app end when every process that
    /// had the socket closed it, and the TCP socket is released with the parent's. Only
    /// those numbers that still are what they were: a child may have closed the inherited
    /// numbers and reused them.
    fn close_in_child(&self) {
        if self.user_closed.swap(true, Ordering::AcqRel) {
            return;
        }
        for (fd, ino) in [self.tcp_fd, self.eng_end, self.app_end]
            .into_iter()
            .zip(self.inodes)
        {
            if ino != 0 && sys::inode(fd) == Ok(ino) {
                // (a fresh inert descriptor: the engine's may have been closed here)
                let _ = sys::retire(fd, -1);
            }
        }
    }

    /// The time left of a closing socket's linger ([`conn::CLOSE_LINGER`]), for the progress
    /// thread's deadline walk. At the deadline: if bytes were written since the last one (or
    /// the MPA exchange is still under way: its own timeout bounds it), another linger from
    /// now; if not, the close gives up ([`Shared::force_close`]) and `None`.
    pub(crate) fn close_linger_left(&self, st: &mut ConnState) -> Option<Duration> {
        let d = st.close_deadline?;
        let now = Instant::now();
        if now < d {
            return Some(d - now);
        }
        if st.is_connecting() || st.tx_written != st.close_mark {
            st.close_mark = st.tx_written;
            st.close_deadline = Some(now + conn::CLOSE_LINGER);
            return Some(conn::CLOSE_LINGER);
        }
        self.force_close(st);
        None
    }

    /// The close gives up (its linger passed without progress, an abort, the exit flush's
    /// time is up): every work request still pending completes with `FLUSH_ERR`, and the
    /// connection ends, with a reset if bytes were left unsent (a FIN would pass the cut
    /// stream off as a whole one to the peer).
    pub(crate) fn force_close(&self, st: &mut ConnState) {
        if st.finalized {
            return;
        }
        if st.unsent_bytes() > 0 || !st.pair_drained(self) || st.is_connecting() {
            st.reset = true;
        }
        // Our own close gave up: flush (FLUSH_ERR, as documented), not a lost stream.
        if let Some(c) = st.conn.as_mut()
            && c.state() != State::Closed
        {
            c.abort();
        }
        st.rx_eof = true;
        let mut mem = SessionMem::new(&self.engine.registry, None);
        st.settle(self, &mut mem);
        drop(mem);
        self.finalize(st);
    }

    /// Bytes this socket still has to write, the application's bytes left in the socketpair
    /// included (for [`Unflushed`]).
    fn unsent_with_pair(&self, st: &ConnState) -> u64 {
        let pair = sys::inq(self.eng_end)
            .unwrap_or(0)
            .saturating_sub(st.token_bytes());
        st.unsent_bytes() + pair as u64
    }

    /// Whether the socket has nothing left to write for the application (what
    /// [`flush_before_exec`] waits for): its exchange done, its queues and the socketpair
    /// empty, or it can write no more.
    pub(crate) fn drained(&self, st: &ConnState) -> bool {
        st.flushed()
            || st.stream_over()
            || (!st.is_connecting() && st.unsent_bytes() == 0 && st.pair_drained(self))
    }

    /// Nothing more happens on this socket: leave the epoll set, drop it from the engine.
    /// The descriptors are closed when the last reference goes ([`Drop`]).
    pub(crate) fn finalize(&self, st: &mut ConnState) {
        if st.finalized {
            return;
        }
        st.finalized = true;
        if st.registered {
            let ep = self.engine.epfd;
            let _ = sys::epoll_ctl(self.tcp_ep(st), libc::EPOLL_CTL_DEL, self.tcp_fd, 0, 0);
            let _ = sys::epoll_ctl(ep, libc::EPOLL_CTL_DEL, self.eng_end, 0, 0);
            st.registered = false;
        }
        if st.reset {
            // An abort: the kernel resets the connection now (RST, not FIN), whatever is
            // queued in it.
            let _ = sys::disconnect(self.tcp_fd);
        } else {
            // Unread input would turn our close into a reset: read what is there.
            let mut buf = [0u8; 4096];
            for _ in 0..64 {
                match sys::recv(self.tcp_fd, &mut buf, libc::MSG_DONTWAIT) {
                    Ok(n) if n > 0 => {}
                    _ => break,
                }
            }
            let _ = sys::shutdown(self.tcp_fd, libc::SHUT_RDWR);
            if st.linger.is_some() {
                // The application's close did the lingering: the descriptor's own close
                // (when the socket is freed, maybe on the progress thread) must not wait.
                let _ = sys::linger_off(self.tcp_fd);
            }
        }
        if !st.eng_shut {
            let _ = sys::shutdown(self.eng_end, libc::SHUT_WR);
            st.eng_shut = true;
        }
        if self.own_pd {
            self.engine.registry.deregister_pd(self.pd);
        }
        if lock(&self.engine.conns).remove(&self.id).is_some() {
            self.engine.sockets.fetch_sub(1, Ordering::Relaxed);
        }
        self.engine.note_flushed();
    }
}
