//! What a blocking call needs to know of the application's settings, kept between calls.
//!
//! A `recv` or `send` that finds nothing to do asks whether it may wait (`O_NONBLOCK` of the
//! app fd's open file: `fcntl(F_GETFL)`) and for how long (`SO_RCVTIMEO`/`SO_SNDTIMEO` of the
//! TCP socket: `getsockopt`). Measured on this project's 2-vCPU VM: 90 and 157 ns a call, two
//! of the five system calls a DDP socket's blocking `recv` made where TCP's makes one
//! (`sockperf ping-pong`, whose server and client both block in `recvfrom`). A non-blocking
//! socket's `recv` that says `EAGAIN` paid the `fcntl` on every call.
//!
//! The answers are kept here once asked, only for a socket whose caller reports every change
//! ([`Settings::track`]: the preload does, as it sees every `fcntl(F_SETFL)`, `ioctl(FIONBIO)`
//! and `setsockopt` on the socket's fds and calls [`Settings::changed`] after each), and only
//! while no other process can change them: not in a forked child, and not in the parent of a
//! child forked since the socket was made (the open file and the TCP socket are shared then;
//! the kernel is asked, as before). What escapes the preload is not seen: a raw `fcntl` system
//! call, or a process that received the fd over `SCM_RIGHTS` and changes its `O_NONBLOCK`
//! (docs/rules.md, LIMITATIONS).
//!
//! Each answer is one word: a version in the top 16 bits and the value in the rest (0: not
//! known). [`Settings::changed`] bumps the versions and forgets the values after the change is
//! made; an answer asked of the kernel is stored only if the version did not move since the
//! word was read before asking, so an answer older than a change is never kept.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;

/// The value bits of a word.
const VALUE: u64 = (1 << 48) - 1;
/// One version step.
const VERSION: u64 = 1 << 48;

/// A socket's kept settings (see the module docs).
pub(crate) struct Settings {
    tracked: AtomicBool,
    /// `O_NONBLOCK`: 1 blocking, 2 non-blocking.
    nonblock: AtomicU64,
    /// `SO_RCVTIMEO`, `SO_SNDTIMEO`: 1 none, else microseconds + 2.
    timeouts: [AtomicU64; 2],
}

/// Which timeout.
#[derive(Clone, Copy)]
pub(crate) enum Timeout {
    Recv = 0,
    Send = 1,
}

impl Settings {
    pub(crate) const fn new() -> Settings {
        Settings {
            tracked: AtomicBool::new(false),
            nonblock: AtomicU64::new(0),
            timeouts: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// From now on every change of the settings is reported with [`Settings::changed`].
    pub(crate) fn track(&self) {
        self.tracked.store(true, Ordering::Release);
    }

    /// The settings may have changed (called after the change is made): forget them.
    pub(crate) fn changed(&self) {
        for w in core::iter::once(&self.nonblock).chain(&self.timeouts) {
            let _ = w.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
                Some(v.wrapping_add(VERSION) & !VALUE)
            });
        }
    }

    /// `O_NONBLOCK`, kept or from `ask` (`keep`: the socket's settings may be kept now).
    pub(crate) fn nonblocking(&self, keep: bool, ask: impl FnOnce() -> Option<bool>) -> bool {
        let v = self.get(&self.nonblock, keep, || ask().map(|nb| 1 + u64::from(nb)));
        v == Some(2)
    }

    /// A timeout (`None`: not set), kept or from `ask`.
    pub(crate) fn timeout(
        &self,
        which: Timeout,
        keep: bool,
        ask: impl FnOnce() -> Option<Duration>,
    ) -> Option<Duration> {
        let mut asked = None;
        let v = self.get(&self.timeouts[which as usize], keep, || {
            let d = ask();
            asked = Some(d);
            match d {
                None => Some(1),
                // (a timeout beyond the value bits is asked again each time: years)
                Some(d) => u64::try_from(d.as_micros())
                    .ok()
                    .filter(|&us| us < VALUE - 2)
                    .map(|us| us + 2),
            }
        });
        if let Some(d) = asked {
            return d;
        }
        match v {
            Some(us) if us >= 2 => Some(Duration::from_micros(us - 2)),
            _ => None,
        }
    }

    /// The value kept in `w`, or `ask`'s (kept when it may be and nothing changed since).
    fn get(&self, w: &AtomicU64, keep: bool, ask: impl FnOnce() -> Option<u64>) -> Option<u64> {
        let keep = keep && self.tracked.load(Ordering::Acquire);
        let seen = w.load(Ordering::Acquire);
        if keep && seen & VALUE != 0 {
            return Some(seen & VALUE);
        }
        let v = ask()?;
        if keep {
            let _ = w.compare_exchange(
                seen,
                (seen & !VALUE) | v,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    #[test]
    fn untracked_settings_are_always_asked() {
        let s = Settings::new();
        let asked = Cell::new(0);
        for nb in [true, false, true] {
            let got = s.nonblocking(true, || {
                asked.set(asked.get() + 1);
                Some(nb)
            });
            assert_eq!(got, nb);
        }
        assert_eq!(asked.get(), 3);
    }

    #[test]
    fn tracked_settings_are_asked_once_until_changed() {
        let s = Settings::new();
        s.track();
        let asked = Cell::new(0);
        let ask = |v: bool| {
            asked.set(asked.get() + 1);
            Some(v)
        };
        assert!(s.nonblocking(true, || ask(true)));
        assert!(s.nonblocking(true, || ask(false)), "kept, not asked");
        assert_eq!(asked.get(), 1);
        s.changed();
        assert!(!s.nonblocking(true, || ask(false)));
        assert!(!s.nonblocking(true, || ask(true)));
        assert_eq!(asked.get(), 2);
        // Not to be kept now (a fork since): asked, and what was kept is not used.
        assert!(s.nonblocking(false, || ask(true)));
        assert_eq!(asked.get(), 3);
        // A failed question is not kept.
        s.changed();
        assert!(!s.nonblocking(true, || None));
        assert!(s.nonblocking(true, || ask(true)));
        assert_eq!(asked.get(), 4);
    }

    #[test]
    fn timeouts_are_kept_apart_and_exactly() {
        let s = Settings::new();
        s.track();
        let ms = Duration::from_millis(1500);
        assert_eq!(s.timeout(Timeout::Recv, true, || Some(ms)), Some(ms));
        assert_eq!(s.timeout(Timeout::Send, true, || None), None);
        assert_eq!(s.timeout(Timeout::Recv, true, || panic!("kept")), Some(ms));
        assert_eq!(s.timeout(Timeout::Send, true, || panic!("kept")), None);
        let us = Duration::from_micros(7);
        s.changed();
        assert_eq!(s.timeout(Timeout::Recv, true, || Some(us)), Some(us));
        assert_eq!(s.timeout(Timeout::Recv, true, || panic!("kept")), Some(us));
        // Too long to keep: asked every time, answered right.
        let long = Duration::from_secs(u64::MAX / 4);
        s.changed();
        for _ in 0..2 {
            assert_eq!(s.timeout(Timeout::Send, true, || Some(long)), Some(long));
        }
    }

    #[test]
    fn an_answer_older_than_a_change_is_not_kept() {
        let s = Settings::new();
        s.track();
        // The change lands while the old answer is being asked.
        assert!(s.nonblocking(true, || {
            s.changed();
            Some(true)
        }));
        assert!(!s.nonblocking(true, || Some(false)), "asked again");
        assert!(!s.nonblocking(true, || panic!("kept")));
    }
}
