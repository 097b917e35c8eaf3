//! `exec`: `execve`, `execveat`, `fexecve`, `execv`, `execvp`, `execvpe`, and through
//! `shim.c` the variadic `execl`, `execlp`, `execle`.
//!
//! The engine of a process does not survive its `exec` (its threads go with the old image),
//! while a TCP socket's queued data would still be sent by the kernel. So before the real
//! call, if this process has DDP sockets (its own engine: not a forked or `vfork` child's
//! borrowed table), each of them writes what it has queued — the MPA exchange finished,
//! bytes left in the socketpair taken, `DDP_MORE` batches put out — waiting at most
//! [`EXEC_FLUSH`] in all ([`ddp_user::flush_before_exec`]). Nothing is closed: if the `exec`
//! fails, every socket works on. If it succeeds, the kernel closes the engine's descriptors
//! (close-on-exec): the peer gets what was written, then a FIN. A DDP fd the application
//! kept across the `exec` (not close-on-exec) reads EOF in the new program
//! (docs/rules.md, LIMITATIONS). Bytes still unsent when the time is up are reported on
//! stderr (one line, [`crate::log::warn`]). The `exec`s libc makes internally (`system`,
//! `posix_spawn`, `popen`) run in a child, whose sockets are its parent's: nothing to do.

use libc::{c_char, c_int};

use crate::errno::ErrnoGuard;
use crate::log::{Outcome, debug};
use crate::real;

core::arch::global_asm!(
    ".globl exsock_execv",
    ".hidden exsock_execv",
    ".set exsock_execv, {execv}",
    ".globl exsock_execvp",
    ".hidden exsock_execvp",
    ".set exsock_execvp, {execvp}",
    ".globl exsock_execve",
    ".hidden exsock_execve",
    ".set exsock_execve, {execve}",
    execv = sym execv,
    execvp = sym execvp,
    execve = sym execve,
);

/// The longest an `exec` waits for DDP sockets to write what they have (as the exit flush).
pub const EXEC_FLUSH: core::time::Duration = core::time::Duration::from_secs(2);

/// Before the real `exec`: DDP sockets write what they have queued (see the module docs).
fn before_exec(what: &str) {
    if !ddp_user::engine_started() {
        return;
    }
    let _errno = ErrnoGuard::new();
    let cut = ddp_user::flush_before_exec(EXEC_FLUSH);
    if cut.sockets > 0 {
        crate::log::warn(format_args!(
            "{what}: {} DDP socket(s) still had {} bytes to send after {} s; an exec that \
             succeeds cuts them",
            cut.sockets,
            cut.bytes,
            EXEC_FLUSH.as_secs()
        ));
    }
}

/// Logs a failed `exec` (one that succeeds returns nowhere).
fn log_failed(what: &str, rc: c_int) -> c_int {
    if crate::log::enabled() {
        let _errno = ErrnoGuard::new();
        debug!("{what} = {}", Outcome::of(rc.into()));
    }
    rc
}

/// `execve(2)`.
///
/// # Safety
/// As for libc's `execve`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    before_exec("execve");
    // SAFETY: the caller's arguments, passed on unchanged.
    log_failed("execve", unsafe { real::execve(path, argv, envp) })
}

/// `execveat(2)`.
///
/// # Safety
/// As for libc's `execveat`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    before_exec("execveat");
    // SAFETY: the caller's arguments, passed on unchanged.
    log_failed("execveat", unsafe {
        real::execveat(dirfd, path, argv, envp, flags)
    })
}

/// `fexecve(3)`.
///
/// # Safety
/// As for libc's `fexecve`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    before_exec("fexecve");
    // SAFETY: the caller's arguments, passed on unchanged.
    log_failed("fexecve", unsafe { real::fexecve(fd, argv, envp) })
}

/// `execv(3)` (and `execl` through the shim).
///
/// # Safety
/// As for libc's `execv`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    before_exec("execv");
    // SAFETY: the caller's arguments, passed on unchanged.
    log_failed("execv", unsafe { real::execv(path, argv) })
}

/// `execvp(3)` (and `execlp` through the shim).
///
/// # Safety
/// As for libc's `execvp`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    before_exec("execvp");
    // SAFETY: the caller's arguments, passed on unchanged.
    log_failed("execvp", unsafe { real::execvp(file, argv) })
}

/// `execvpe(3)`.
///
/// # Safety
/// As for libc's `execvpe`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    before_exec("execvpe");
    // SAFETY: the caller's arguments, passed on unchanged.
    log_failed("execvpe", unsafe { real::execvpe(file, argv, envp) })
}
