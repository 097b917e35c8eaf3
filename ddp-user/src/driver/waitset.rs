//! A socket's own epoll instance, for a thread that waits on the socket alone.
//!
//! What it is for: a thread that waits in the library on one socket watches two descriptors:
//! the TCP socket (whose input it processes itself) and either the application's end of the
//! socketpair (a `poll` of the fd asking for input, [`super::socket::PollWait`]; a blocking
//! `recv`) or the completion eventfd (`ddp_wait`). A `poll` of two descriptors costs the
//! kernel a wait-queue entry added and removed on each of them per call; the same wait on an
//! epoll instance in which both are registered once, level-triggered, costs one. Measured in
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
//! `epoll_ctl` per wait); a wait that needs other ones swaps them (an `epoll_ctl` each). One
//! thread at a time uses the instance: a wait claims it under the socket's lock
//! (`ConnState::wait_set_busy`) and gives it back under the lock, so the registrations are
//! written by the claimer only (relaxed atomics: the lock orders the claims).
//!
//! What it refuses to do: serve a forked child (the instance would be shared with the parent;
//! a child's waits take the general path), serve more than [`MAX_WAIT_SETS`] sockets at once
//! (each instance is one more descriptor of the process), or hide a failure: any error of
//! `epoll_create1`/`epoll_ctl`/`epoll_pwait2` other than `EINTR` sends the wait back to a
//! `poll` of both descriptors, which stays correct.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use core::time::Duration;
use std::os::fd::RawFd;

use crate::driver::move_high;
use crate::sys::{self, Errno};

/// Wait sets in this process at most: beyond it, waits take the two-descriptor `poll`.
pub(crate) const MAX_WAIT_SETS: usize = 256;

/// Wait sets made and not yet closed.
static WAIT_SETS: AtomicUsize = AtomicUsize::new(0);

/// `epoll_pwait2` answered `ENOSYS` once (Linux before 5.11): no more tries.
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

/// A registered mask meaning "not registered".
const NONE: u32 = u32::MAX;

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
}

impl WaitSet {
    pub(crate) const fn new() -> WaitSet {
        WaitSet {
            ep: AtomicI32::new(-1),
            regs: [const { (AtomicI32::new(-1), AtomicU32::new(NONE)) }; 3],
        }
    }

    /// Whether a waiter may use the set: it exists, or one more may be made.
    pub(crate) fn usable(&self) -> bool {
        !NO_PWAIT2.load(Ordering::Relaxed)
            && (self.ep.load(Ordering::Relaxed) >= 0
                || WAIT_SETS.load(Ordering::Relaxed) < MAX_WAIT_SETS)
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
            let done = match want {
                None if have == NONE => continue,
                Some((f, ev)) if f == fd && ev == have => continue,
                None => {
                    // (a failure means it is gone already: its file was released, or the
                    // number now names another file)
                    let _ = sys::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, 0, 0);
                    Ok(())
                }
                Some((f, ev)) if f == fd && have != NONE => {
                    sys::epoll_ctl(ep, libc::EPOLL_CTL_MOD, f, ev, r as u64)
                }
                Some((f, ev)) => {
                    if have != NONE {
                        let _ = sys::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, 0, 0);
                    }
                    sys::epoll_ctl(ep, libc::EPOLL_CTL_ADD, f, ev, r as u64)
                }
            };
            match (done, want) {
                (Ok(()), Some((f, ev))) => {
                    reg_fd.store(f, Ordering::Relaxed);
                    reg_ev.store(ev, Ordering::Relaxed);
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
        let n = match unsafe { sys::epoll_pwait2(ep, &mut evs, timeout, mask) } {
            Ok(n) => n,
            Err(Errno::EINTR) => return Some(Err(Errno::EINTR)),
            Err(e) => {
                if e == Errno(libc::ENOSYS) {
                    NO_PWAIT2.store(true, Ordering::Relaxed);
                }
                return None;
            }
        };
        fds[0].revents = 0;
        fds[1].revents = 0;
        for e in &evs[..n] {
            if let Some(i) = roles.iter().position(|&x| x as u64 == e.u64) {
                // (epoll reports what was asked, plus EPOLLERR and EPOLLHUP, as poll does)
                fds[i].revents = e.events as u16 as i16;
            }
        }
        Some(Ok(fds.iter().filter(|p| p.revents != 0).count()))
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
