//! Closing a socket: the application's `close` (graceful, bounded by the close linger), a
//! close while other processes still have the app end, a forked child's close, the give-up
//! when the linger expires, the end of a socket's life in the engine, and the flush at
//! process exit.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use core::time::Duration;

use ddp_proto::conn::State;

use crate::driver::conn::{self, ConnState, Phase};
use crate::driver::mem::SessionMem;
use crate::driver::{ENGINE, Shared, lock, lock_std};
use crate::sys;

/// Process exit (call it from an exit handler): closes every socket of this process's engine
/// and waits, at most `timeout`, until each has written what it had queued and sent its FIN.
/// Without it, data a program wrote just before exiting dies with the progress thread (a TCP
/// socket's data would still be sent by the kernel). Does not wait for the peer's FIN.
/// Sockets this process closed while another process still had them (a forked child's)
/// are closed too: with this process's engine gone, no one would serve them.
pub fn flush_at_exit(timeout: Duration) {
    let cur = ENGINE.load(Ordering::Acquire);
    // SAFETY: ENGINE only ever holds null or a leaked, never freed `Box<Engine>`.
    let Some(e) = (unsafe { cur.as_ref() }) else {
        return;
    };
    if e.pid != sys::getpid() {
        return;
    }
    let socks: Vec<Arc<Shared>> = lock(&e.conns).values().cloned().collect();
    for sh in &socks {
        sh.close();
        // (one that others still had goes too: this process served it, and no one will)
        let mut st = sh.lock();
        if st.others_hold && !st.finalized {
            sh.close_now(&mut st);
        }
    }
    let deadline = Instant::now() + timeout;
    loop {
        let seen = *lock_std(&e.flushed);
        if socks.iter().all(|sh| sh.in_child() || sh.lock().flushed()) {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let g = lock_std(&e.flushed);
        if *g == seen {
            drop(e.flushed_cv.wait_timeout(g, left));
        }
    }
}

impl Shared {
    /// `close`: graceful close, bounded by [`conn::CLOSE_LINGER`].
    pub(crate) fn close(&self) {
        if self.in_child() {
            self.close_in_child();
            return;
        }
        if self.user_closed.swap(true, Ordering::AcqRel) {
            return;
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
            return;
        }
        // Held stream data goes to the socketpair (another process may still read it).
        self.end_hold(&mut st);
        if !sys::hung_up(self.eng_end) {
            // Someone else still has the app end (a forked child the socket was handed to,
            // an exec'd program, a raw `dup`): the connection stays theirs, served here,
            // until they close it too (`close_if_released`).
            st.others_hold = true;
            self.rearm(&mut st);
            return;
        }
        self.close_now(&mut st);
    }

    /// [`Shared::close`] once nobody has the app end any more: the graceful close.
    fn close_now(&self, st: &mut ConnState) {
        st.others_hold = false;
        st.close_deadline = Some(Instant::now() + conn::CLOSE_LINGER);
        st.want_shut_wr = true;
        match st.phase {
            Phase::Open => {
                if let Some(c) = st.conn.as_mut() {
                    c.close();
                }
                self.engine.watch_deadline(self.id);
                self.progress(st, None, true);
            }
            Phase::Startup(_) | Phase::Failed => self.finalize(st),
        }
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

    /// The close linger expired: flush everything as failed and close.
    pub(crate) fn force_close(&self, st: &mut ConnState) {
        if st.finalized {
            return;
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
        // Unread input would turn our close into a reset: read what is there.
        let mut buf = [0u8; 4096];
        for _ in 0..64 {
            match sys::recv(self.tcp_fd, &mut buf, libc::MSG_DONTWAIT) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        let _ = sys::shutdown(self.tcp_fd, libc::SHUT_RDWR);
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
