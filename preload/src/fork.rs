//! `fork`.
//!
//! Policy for this version: nothing to do but stay correct. The fd table is plain process
//! memory without locks, so the child's copy describes exactly the fds it inherits; the
//! real-function table is copied resolved. The hook exists so that the DDP issue has one place
//! to decide what a child does with inherited DDP sockets (their engine state lives in the
//! parent's helper thread, which the child does not have), and so that `EXSOCK_LOG` shows
//! forks. `vfork` and `posix_spawn` are not interposed: their children only `exec`, and the
//! exec'd image starts with an empty table. `clone` is not interposed either.

use libc::pid_t;

use crate::errno::ErrnoGuard;
use crate::log::{Outcome, debug};
use crate::real;

/// `fork(2)`.
///
/// # Safety
/// As for libc's `fork`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn fork() -> pid_t {
    // SAFETY: no arguments; libc's fork runs the atfork handlers.
    let pid = unsafe { real::fork() };
    if crate::log::enabled() && pid != 0 {
        let _errno = ErrnoGuard::new();
        debug!("fork() = {}", Outcome::of(pid.into()));
    }
    pid
}
