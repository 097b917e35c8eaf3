//! A socket's own epoll instance, for a thread that waits on the socket alone.
//!
//! What it is for: a thread that waits in the library on one socket watches two descriptors:
//! the TCP socket (whose input it processes itself) and either the application's end of the
//! socketpair (a `poll` of the fd asking for input, [`super::socket::PollWait`]; a blocking
//! `recv`) or the completion eventfd (`ddp_wait`). A `poll` of two descriptors costs the
//! kernel a wait-queue entry added and removed on each of them per call; the same wait on an
//! epoll instance in which both are registered once costs one. Measured in
//! C on this project's 2-vCPU VM (loopback TCP ping-pong, 64 B, both processes on one CPU,
//! 100,000 round trips, 5 alternating rounds): `poll` of the TCP fd alone 5.04 µs, of the TCP
//! fd and an idle socketpair end 5.33 µs, `epoll_wait` on an epoll instance holding both
//! 5.14 µs.
//!
//! The instance is made the first time a thread waits alone on the socket, and lives as long
//! as the socket. It holds at most one registration per [`Role`]:
//! - the engine's own descriptor of the socketpair's app end (`Shared::app_end`: the same open
//!   file as the application's fd, so the same readiness; the kernel drops the registration
//!   when that file is released after the application's last close), with the events the
//!   caller asked of its fd;
//! - the TCP fd, with the events the waiter serves;
//! - the completion eventfd.
//!
//! Registrations stay between waits (a request-response loop asks the same every time: no
//! `epoll_ctl` per wait); a wait that needs other ones swaps them (an `epoll_ctl` each).
//!
//! Registrations are **edge-triggered**. A level-triggered one that was reported goes back on
//! the instance's ready list, and the next wait polls it again before it can sleep (the
//! instance's mutex, its lock twice, the socket's poll function): measured as above, `epoll_wait`
//! with both registered level-triggered 5.78 µs (median of 7 alternating rounds), edge-triggered
//! 5.66 µs, `poll` of the TCP fd alone 5.65 µs. An edge-triggered wait answers what changed
//! since the last report, which is `ppoll`'s answer only if nothing the last report announced is
//! still there. So each role counts the waits that reported it ([`WaitSet::reports`]) and
//! remembers up to which report it is known to have been emptied since ([`WaitSet::checked`]);
//! a wait that finds a role not known empty asks the kernel again first (`EPOLL_CTL_MOD` with
//! the same events: the kernel polls the descriptor and puts it on the ready list if it is
//! ready; an `epoll_ctl` that only such a wait pays). What empties a role: the TCP fd, a read
//! of the socket's input that found nothing more ([`WaitSet::tcp_mark`],
//! [`WaitSet::tcp_drained`]: `EAGAIN`, or fewer bytes than asked, which TCP returns only when
//! its queue ran out), made by any thread under the socket's lock after the report; the app
//! end and the eventfd, nothing (their readers are the application's). A request-response
//! loop reads its input to the end after each report, so its waits make no `epoll_ctl`. One
//! thread at a time uses the instance: a wait claims it under the socket's lock
//! (`ConnState::wait_set_busy`) and gives it back under the lock, so the registrations are
//! written by the claimer only (relaxed atomics: the lock orders the claims).
//!
//! What it refuses to do: serve a forked child (the instance would be shared with the parent;
//! a child's waits take the general path), serve more than [`MAX_WAIT_SETS`] sockets at once
//! (each instance is one more descriptor of the process), or hide a failure: any error of
//! `epoll_create1`/`epoll_ctl`/the wait other than `EINTR` sends the wait back to a
//! `poll` of both descriptors, which stays correct.

use core::sync::atomic::{AtomicI32, AtomicU32, AtomicUsize, Ordering};
use core::time::Duration;
use std::os::fd::RawFd;

use crate::driver::move_high;
use crate::sys::{self, Errno};

/// Wait sets in this process at most: beyond it, waits take the two-descriptor `poll`.
pub(crate) const MAX_WAIT_SETS: usize = 256;

/// Wait sets made and not yet closed.
static WAIT_SETS: AtomicUsize = AtomicUsize::new(0);

/// A registered mask meaning "not registered".
const NONE: u32 = u32::MAX;

/// Every registration is edge-triggered (see the module docs).
const ET: u32 = libc::EPOLLET as u32;

/// Events of the TCP fd that a read does not take away, once they are there (the end of the
/// input, an error, a hang-up): a report with one of them is not emptied by a short read.
/// `EPOLLRDHUP` is registered with the TCP fd for this (a FIN makes it readable too, and a
/// short read may be the one that ends at the FIN).
const STICKY: u32 = (libc::EPOLLRDHUP | libc::EPOLLERR | libc::EPOLLHUP | libc::EPOLLPRI) as u32;

/// What a registration is for (its index in [`WaitSet::regs`], and its epoll data).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    /// The socketpair's app end (`Shared::app_end`).
    App = 0,
    /// The TCP fd.
    Tcp = 1,
    /// The completion eventfd (`ddp_wait`).
    Cq = 2,
}

/// A socket's wait set (see the module docs).
pub(crate) struct WaitSet {
    /// The epoll instance (-1: not made yet).
    ep: AtomicI32,
    /// For each [`Role`]: the descriptor registered and its events ([`NONE`]: not
    /// registered).
    regs: [(AtomicI32, AtomicU32); 3],
    /// For each [`Role`]: the waits that reported it (each took its edge). Written by the
    /// claimer only.
    reports: [AtomicU32; 3],
    /// For each [`Role`]: the value of [`WaitSet::reports`] up to which nothing a report
    /// announced is left (the registration was made or re-checked since, or the descriptor was
    /// found empty after that report). Equal: a wait needs no re-check.
    checked: [AtomicU32; 3],
    /// The last report of the TCP fd that had one of the [`STICKY`] events.
    tcp_sticky: AtomicU32,
}

impl WaitSet {
    pub(crate) const fn new() -> WaitSet {
        WaitSet {
            ep: AtomicI32::new(-1),
            regs: [const { (AtomicI32::new(-1), AtomicU32::new(NONE)) }; 3],
            reports: [const { AtomicU32::new(0) }; 3],
            checked: [const { AtomicU32::new(0) }; 3],
            tcp_sticky: AtomicU32::new(u32::MAX),
        }
    }

    /// Whether a waiter may use the set: it exists, or one more may be made.
    pub(crate) fn usable(&self) -> bool {
        self.ep.load(Ordering::Relaxed) >= 0 || WAIT_SETS.load(Ordering::Relaxed) < MAX_WAIT_SETS
    }

    /// Waits, as `ppoll` would on `fds`, for the claimer of the set: `roles` says what each
    /// entry's descriptor is (its `fd` and `events` are registered for that role, every other
    /// role's registration is removed). Writes each `revents` as the kernel's `poll` would
    /// and returns how many are not zero. `None`: the set could not be used (made, brought in
    /// line, or waited on); nothing was waited for.
    ///
    /// # Safety
    /// `mask` is null or points to a valid signal set.
    pub(crate) unsafe fn wait(
        &self,
        fds: &mut [libc::pollfd; 2],
        roles: [Role; 2],
        timeout: Option<Duration>,
        mask: *const libc::sigset_t,
    ) -> Option<Result<usize, Errno>> {
        let ep = self.instance()?;
        for (r, (reg_fd, reg_ev)) in self.regs.iter().enumerate() {
            let want = roles
                .iter()
                .position(|&x| x as usize == r)
                .map(|i| (fds[i].fd, u32::from(fds[i].events as u16)));
            let (fd, have) = (
                reg_fd.load(Ordering::Relaxed),
                reg_ev.load(Ordering::Relaxed),
            );
            let reports = self.reports[r].load(Ordering::Relaxed);
            let kernel = |ev: u32| {
                ev | ET
                    | if r == Role::Tcp as usize {
                        libc::EPOLLRDHUP as u32
                    } else {
                        0
                    }
            };
            let done = match want {
                None if have == NONE => continue,
                Some((f, ev)) if f == fd && ev == have => {
                    if self.checked[r].load(Ordering::Acquire) == reports {
                        continue;
                    }
                    // (reported, and maybe not emptied since: the kernel looks again)
                    sys::epoll_ctl(ep, libc::EPOLL_CTL_MOD, f, kernel(ev), r as u64)
                }
                None => {
                    // (a failure means it is gone already: its file was released, or the
                    // number now names another file)
                    let _ = sys::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, 0, 0);
                    Ok(())
                }
                Some((f, ev)) if f == fd && have != NONE => {
                    sys::epoll_ctl(ep, libc::EPOLL_CTL_MOD, f, kernel(ev), r as u64)
                }
                Some((f, ev)) => {
                    if have != NONE {
                        let _ = sys::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, 0, 0);
                    }
                    sys::epoll_ctl(ep, libc::EPOLL_CTL_ADD, f, kernel(ev), r as u64)
                }
            };
            match (done, want) {
                (Ok(()), Some((f, ev))) => {
                    reg_fd.store(f, Ordering::Relaxed);
                    reg_ev.store(ev, Ordering::Relaxed);
                    // (made or modified: the kernel polled it just now)
                    self.checked[r].store(reports, Ordering::Release);
                }
                (Ok(()), None) => reg_ev.store(NONE, Ordering::Relaxed),
                (Err(_), _) => {
                    // (left as the kernel has it: unknown, asked again by the next waiter)
                    if let Some((f, _)) = want {
                        let _ = sys::epoll_ctl(ep, libc::EPOLL_CTL_DEL, f, 0, 0);
                    }
                    reg_ev.store(NONE, Ordering::Relaxed);
                    return None;
                }
            }
        }
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 2];
        // SAFETY: `mask` as the caller promises.
        let n = match unsafe { sys::epoll_pwait_ts(ep, &mut evs, timeout, mask) } {
            Ok(n) => n,
            Err(Errno::EINTR) => return Some(Err(Errno::EINTR)),
            Err(_) => return None,
        };
        fds[0].revents = 0;
        fds[1].revents = 0;
        for e in &evs[..n] {
            if let Some(r) = self.reports.get(e.u64 as usize) {
                let k = r.load(Ordering::Relaxed).wrapping_add(1);
                if e.u64 == Role::Tcp as u64 && e.events & STICKY != 0 {
                    self.tcp_sticky.store(k, Ordering::Relaxed);
                }
                r.store(k, Ordering::Release);
            }
            if let Some(i) = roles.iter().position(|&x| x as u64 == e.u64) {
                // (epoll reports what was asked, plus EPOLLERR and EPOLLHUP, as poll does;
                // and the TCP fd's EPOLLRDHUP, which is ours: passed on, it tells the
                // caller's round that the peer's FIN is in, `PollWait::reported`)
                let ours = if roles[i] == Role::Tcp {
                    libc::POLLRDHUP
                } else {
                    0
                };
                let asked = fds[i].events | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL | ours;
                fds[i].revents = e.events as u16 as i16 & asked;
            }
        }
        Some(Ok(fds.iter().filter(|p| p.revents != 0).count()))
    }

    /// Before a read of the TCP fd's input (under the socket's lock): the mark to give
    /// [`WaitSet::tcp_drained`] if the read finds the input ended.
    pub(crate) fn tcp_mark(&self) -> u32 {
        self.reports[Role::Tcp as usize].load(Ordering::Acquire)
    }

    /// A read of the TCP fd that started at `mark` ([`WaitSet::tcp_mark`]) found no more input
    /// (`EAGAIN`, or fewer bytes than it asked for), under the socket's lock: whatever comes
    /// after it makes an edge of its own. Kept only for an input-only registration (the edge
    /// of a write readiness is not consumed by reads) and a report without [`STICKY`] events
    /// (the end of the input stays readable after the read that took the last bytes).
    pub(crate) fn tcp_drained(&self, mark: u32) {
        let (_, ev) = &self.regs[Role::Tcp as usize];
        if ev.load(Ordering::Relaxed) == libc::POLLIN as u32
            && self.tcp_sticky.load(Ordering::Relaxed) != mark
        {
            self.checked[Role::Tcp as usize].store(mark, Ordering::Release);
        }
    }

    /// The epoll instance, made now if it was not.
    fn instance(&self) -> Option<RawFd> {
        let ep = self.ep.load(Ordering::Relaxed);
        if ep >= 0 {
            return Some(ep);
        }
        if WAIT_SETS.fetch_add(1, Ordering::Relaxed) >= MAX_WAIT_SETS {
            WAIT_SETS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        match sys::epoll_create().and_then(move_high) {
            Ok(ep) => {
                self.ep.store(ep, Ordering::Relaxed);
                Some(ep)
            }
            Err(_) => {
                WAIT_SETS.fetch_sub(1, Ordering::Relaxed);
                None
            }
        }
    }
}

impl Drop for WaitSet {
    fn drop(&mut self) {
        let ep = *self.ep.get_mut();
        if ep >= 0 {
            let _ = sys::close(ep);
            WAIT_SETS.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The edge-triggered registrations answer as `ppoll` would: UNIX socketpairs stand in
    //! for the TCP fd and the app end.

    use super::*;

    /// A pair of connected stream sockets (closed at drop).
    struct Pair(RawFd, RawFd);

    impl Pair {
        fn new() -> Pair {
            let (a, b) = sys::socketpair(libc::SOCK_NONBLOCK).expect("socketpair");
            Pair(a, b)
        }
    }

    impl Drop for Pair {
        fn drop(&mut self) {
            let _ = sys::close(self.0);
            let _ = sys::close(self.1);
        }
    }

    const IN: i16 = libc::POLLIN;

    /// One wait on `tcp` (role Tcp) and `app` (role App) for input: the `revents` of each.
    fn wait(ws: &WaitSet, tcp: RawFd, app: RawFd, ms: u64) -> [i16; 2] {
        let mut fds = [tcp, app].map(|fd| libc::pollfd {
            fd,
            events: IN,
            revents: 0,
        });
        // SAFETY: no signal mask.
        let n = unsafe {
            ws.wait(
                &mut fds,
                [Role::Tcp, Role::App],
                Some(Duration::from_millis(ms)),
                core::ptr::null(),
            )
        }
        .expect("the wait set is usable")
        .expect("the wait");
        assert_eq!(n, fds.iter().filter(|p| p.revents != 0).count());
        [fds[0].revents, fds[1].revents]
    }

    /// Reads everything `fd` has (fewer bytes than asked: the queue ran out), as the driver
    /// does, telling the set when it started.
    fn read_all(ws: &WaitSet, fd: RawFd) -> usize {
        let mark = ws.tcp_mark();
        let mut buf = [0u8; 256];
        let n = sys::recv(fd, &mut buf, libc::MSG_DONTWAIT).expect("data to read");
        assert!(n < buf.len());
        ws.tcp_drained(mark);
        n
    }

    #[test]
    fn input_left_after_a_report_is_reported_again_until_read() {
        let ws = WaitSet::new();
        let (tcp, app) = (Pair::new(), Pair::new());
        sys::write(tcp.1, b"ping").unwrap();
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [IN, 0]);
        // Not read: its edge was taken, and it is still there.
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [IN, 0]);
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [IN, 0]);
        assert_eq!(read_all(&ws, tcp.0), 4);
        // Read to the end after the report: nothing to report.
        assert_eq!(wait(&ws, tcp.0, app.0, 30), [0, 0]);
        sys::write(tcp.1, b"pong").unwrap();
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [IN, 0]);
    }

    #[test]
    fn a_read_that_started_before_the_report_does_not_hide_it() {
        let ws = WaitSet::new();
        let (tcp, app) = (Pair::new(), Pair::new());
        assert_eq!(wait(&ws, tcp.0, app.0, 0), [0, 0]);
        let early = ws.tcp_mark();
        sys::write(tcp.1, b"late").unwrap();
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [IN, 0]);
        // (as if a read that began before the report ended after it, finding nothing)
        ws.tcp_drained(early);
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [IN, 0]);
    }

    #[test]
    fn the_end_of_the_input_stays_reported_after_the_read_that_took_the_last_bytes() {
        let ws = WaitSet::new();
        let (tcp, app) = (Pair::new(), Pair::new());
        sys::write(tcp.1, b"last").unwrap();
        sys::shutdown(tcp.1, libc::SHUT_WR).unwrap();
        // (the FIN's EPOLLRDHUP, which the set asks for itself, is passed on for the TCP fd:
        // the caller's round reads up to the FIN, `PollWait::reported`)
        const END: i16 = IN | libc::POLLRDHUP;
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [END, 0]);
        assert_eq!(read_all(&ws, tcp.0), 4);
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [END, 0]);
        let mut buf = [0u8; 8];
        assert_eq!(sys::recv(tcp.0, &mut buf, libc::MSG_DONTWAIT), Ok(0));
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [END, 0]);
    }

    #[test]
    fn the_app_end_is_reported_while_it_has_data() {
        let ws = WaitSet::new();
        let (tcp, app) = (Pair::new(), Pair::new());
        sys::write(app.1, b"for the application").unwrap();
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [0, IN]);
        let mut buf = [0u8; 4];
        assert_eq!(sys::read(app.0, &mut buf), Ok(4));
        // (part of it read: still readable)
        assert_eq!(wait(&ws, tcp.0, app.0, 5000), [0, IN]);
        let mut rest = [0u8; 64];
        assert_eq!(sys::read(app.0, &mut rest), Ok(15));
        assert_eq!(wait(&ws, tcp.0, app.0, 30), [0, 0]);
    }
}
