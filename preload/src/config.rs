//! `EXSOCK_*` settings, read once by the ELF constructor from the environment.
//!
//! - `EXSOCK_LOG`: see [`crate::log`].
//! - `EXSOCK_TRACK=all`: a test setting. Every AF_INET/AF_INET6 stream socket is marked in the
//!   fd table as [`crate::route::TRACKED`], so all of its calls take the routed path — the code
//!   the DDP mode will extend — which in this version forwards them to libc. It shows that the
//!   routing points and the table's bookkeeping (close, dup, accept, fork) are transparent,
//!   under real programs, before any protocol is behind them.
//! - `EXSOCK_EPOLL_INLINE=N` (0..=8, default 8): an epoll fd that watches more DDP sockets than
//!   this is served through an epoll group ([`crate::poll`]); a test setting (0 puts every
//!   epoll set that watches a DDP socket into a group).
//!
//! Rules that switch sockets into DDP mode (`EXSOCK_RULES`, `EXSOCK_CONFIG`, option defaults)
//! are read by [`crate::rules::setup`], the dual-mode listener settings by
//! [`crate::dual::setup`]; with `EXSOCK_LOG` a startup banner lists the settings in force
//! ([`crate::rules::banner`]). `docs/rules.md` describes them all.

use core::ffi::CStr;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static TRACK: AtomicBool = AtomicBool::new(false);
static OBSERVE: AtomicBool = AtomicBool::new(false);
static EPOLL_INLINE: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Reads the environment. Called once, from the constructor.
pub fn init() {
    if let Some(v) = env(c"EXSOCK_LOG") {
        crate::log::init(v);
    }
    if env(c"EXSOCK_TRACK").is_some_and(|v| v.to_bytes() == b"all") {
        TRACK.store(true, Ordering::Relaxed);
    }
    if let Some(n) = env(c"EXSOCK_EPOLL_INLINE")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        EPOLL_INLINE.store(n, Ordering::Relaxed);
    }
    let observe = crate::log::enabled() || TRACK.load(Ordering::Relaxed);
    OBSERVE.store(observe, Ordering::Relaxed);
    crate::rules::setup();
    crate::dual::setup();
    crate::rules::banner();
}

pub(crate) fn env(name: &CStr) -> Option<&'static CStr> {
    // SAFETY: getenv with a NUL-terminated name; it neither allocates nor calls our hooks, and
    // the constructor runs before the program can change the environment.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string that lives in the environment.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// Whether a newly created socket needs a look (logging or tracking is on): one relaxed load.
#[inline(always)]
pub fn observe() -> bool {
    OBSERVE.load(Ordering::Relaxed)
}

/// Whether `EXSOCK_TRACK=all` is in force.
pub fn track() -> bool {
    TRACK.load(Ordering::Relaxed)
}

/// `EXSOCK_EPOLL_INLINE`, if set (the most DDP sockets an epoll fd serves inline).
pub fn epoll_inline() -> Option<usize> {
    let n = EPOLL_INLINE.load(Ordering::Relaxed);
    (n != usize::MAX).then_some(n)
}
