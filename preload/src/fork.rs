//! `fork`.
//!
//! The fd table is plain process memory without locks, so the child's copy describes exactly
//! the fds it inherits; the real-function table is copied resolved. What a child does with
//! inherited DDP sockets (their engine lives in the parent's progress thread, which the child
//! does not have) is decided by the `pthread_atfork` child handler registered in the
//! constructor ([`crate::ddp::init`]): `ddp_user::after_fork_in_child()` — inherited connected
//! DDP sockets become byte streams served by the parent, extension calls on them say
//! `EOPNOTSUPP`, listeners keep their options and new connections get the child's own engine.
//! A handler (not this hook) because libc's `fork` runs it in every path, `system()` and
//! programs calling `__libc_fork` included. This hook only makes `EXSOCK_LOG` show forks.
//! `vfork` and `posix_spawn` are not interposed: their children only `exec`, and the exec'd
//! image starts with an empty table (an inherited DDP fd is then a plain socketpair end: the
//! byte stream still served by the creating process's engine, as an inherited TCP socket is
//! shared — docs/engine.md). `clone` is not interposed either. Such a child runs in its
//! parent's memory until it execs, and may call hooks meanwhile (Python's `subprocess` does
//! `dup2` and `close_range`): the calls that change the fd table leave it alone there
//! ([`crate::fdtable::borrowed`]), so the parent keeps its sockets.

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
