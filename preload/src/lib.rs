//! # libexsock.so — the LD_PRELOAD library
//!
//! Preloaded into any process (`scripts/exsock-run CMD...`), it interposes the libc socket API
//! and passes every call on a socket that has not opted in to libc, unchanged and invisibly:
//! same results, same errno, no allocation, lock or system call added. Sockets that opt in to
//! DDP mode (`setsockopt(fd, SOL_DDP, DDP_MODE, 1)`) are routed into the user-level iWARP
//! engine of `ddp-user` ([`ddp`]), and the extension API of `sockopt_ext.h` is exported
//! (`ddp_reg_mr`, `ddp_post_*`, `ddp_poll`, `ddp_wait`, `ddp_event_fd`, `ddp_version`,
//! `ddp_abi_describe`: [`ddp::api`]).
//!
//! Interposed: `socket`, `socketpair`, `bind`, `listen`, `accept`, `accept4`, `connect`,
//! `shutdown` ([`socket`]); `close`, `close_range`, `closefrom`, `dup`, `dup2`, `dup3`
//! ([`close_dup`]); `fcntl`, `fcntl64`, `ioctl` ([`fcntl`], variadic, via `shim.c`); `read`,
//! `readv`, `write`, `writev`, `send`, `sendto`, `sendmsg`, `sendmmsg`, `recv`, `recvfrom`,
//! `recvmsg`, `recvmmsg`, `sendfile`, `sendfile64`, `__read_chk`, `__recv_chk`,
//! `__recvfrom_chk` ([`io`]); `poll`, `ppoll`, `select`, `pselect`, `epoll_create`,
//! `epoll_create1`, `epoll_ctl`, `epoll_wait`, `epoll_pwait`, `epoll_pwait2`, `__poll_chk`,
//! `__ppoll_chk` ([`poll`]); `setsockopt`, `getsockopt`, `getsockname`, `getpeername`
//! ([`sockopt`]); `fork` ([`fork`]); `execve`, `execveat`, `fexecve`, `execv`, `execvp`,
//! `execvpe`, `execl`, `execlp`, `execle` ([`exec`], the `execl` family via `shim.c`).
//! `exsock.map` exports exactly these and `ddp_*`.
//!
//! How a call goes: each exported function asks the fd table ([`fdtable`]) whether its fd is
//! routed — one relaxed atomic load while no fd is marked — and otherwise tail-calls the real
//! function from the one table of real functions ([`real`]), resolved by the ELF constructor
//! below. A routed call goes to a function returning `Result<_, Errno>` ([`errno`]): on a
//! connected DDP socket it goes to the engine (data calls), to the engine's TCP socket
//! (names, `SOL_SOCKET`/`IPPROTO_TCP` options) or to DDP bookkeeping (connect, accept, close,
//! dup); on a socket marked by the `EXSOCK_TRACK=all` test setting ([`config`]) or with pending
//! DDP options it forwards to libc. `SOL_DDP` options are answered on any TCP socket (the
//! check is a compare in `setsockopt`/`getsockopt`, before their fd-table test).
//!
//! Process lifecycle: the constructor registers a `pthread_atfork` child handler (the engine's
//! fork policy, [`ddp`]); the destructor (`exit`) lets DDP sockets write what they had queued
//! and send their FIN, at most 2 s ([`ddp_user::flush_at_exit`]), and so does an `exec`
//! before the real call, closing nothing ([`exec`]); what either had to cut is reported on
//! stderr. Once the process has a DDP socket, the
//! application's signal handlers run outside the library's critical sections ([`signals`]:
//! `sigaction`/`signal` interposed).
//!
//! What it refuses to do: Rust std I/O, `nix`, or anything else that would re-enter its own
//! hooks (internal I/O uses the saved real functions or raw system calls); allocation, locks or
//! blocking in a hook's ordinary path (hooks run in signal handlers, in forked children and
//! re-entrantly); swallowing a panic (`panic = "abort"`: never fall back to the real function
//! with a half-done routed call).
//!
//! Not seen by the hooks (and so not routed): calls libc makes internally (stdio on a socket via
//! `fdopen` uses libc's private `read`/`write`), raw `syscall(2)`, and the `__libc_*`/`__`-
//! prefixed aliases other than the fortify entry points above.

/// The body of a hook that routes on one fd:
/// `dispatch!(fd; (args with types) -> Ret; pass: <libc call>; routed: |h| <Result-returning call>)`.
///
/// The ordinary path is [`fdtable::any`] (one relaxed load) and a tail call of the real function;
/// the lookup and the routed call are in a cold, out-of-line function, so the hook needs no stack
/// frame of its own. Must be the whole body of an `unsafe` function whose arguments are listed.
/// (Defined before the modules: `macro_rules!` scope is textual.)
macro_rules! dispatch {
    ($fd:expr; ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
     pass: $pass:expr; routed: |$h:ident| $routed:expr $(;)?) => {{
        /// The fd table is in use: look the fd up, off the ordinary path.
        #[cold]
        #[inline(never)]
        #[allow(clippy::too_many_arguments, unused_unsafe)]
        unsafe fn in_table($($arg: $ty),*) -> $ret {
            match $crate::fdtable::lookup_marked($fd) {
                // SAFETY: the caller's arguments, passed on unchanged.
                None => unsafe { $pass },
                // SAFETY: the caller's arguments, through the routing point.
                Some($h) => $crate::errno::ret(unsafe { $routed }),
            }
        }
        if $crate::fdtable::any() {
            // SAFETY: the caller's arguments, passed on unchanged.
            return unsafe { in_table($($arg),*) };
        }
        // SAFETY: the caller's arguments, passed on unchanged.
        unsafe { $pass }
    }};
}

pub mod close_dup;
pub mod config;
pub mod ddp;
pub mod dual;
pub mod errno;
pub mod exec;
pub mod fcntl;
pub mod fdtable;
pub mod fork;
pub mod io;
pub mod log;
pub mod poll;
pub mod real;
pub mod route;
pub mod rules;
pub mod signals;
pub mod socket;
pub mod sockopt;
pub mod stats;

use libc::{c_char, c_int};

/// The ELF constructor: resolves every real function and reads `EXSOCK_*`, before `main` (and
/// before the constructors of the program's own libraries that come after us in load order).
#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = init;

/// The ELF destructor: at `exit`, DDP sockets still write what they had queued and send their
/// FIN, sockets still in their MPA exchange included (at most [`EXIT_FLUSH`] in all) — a TCP
/// socket's data outlives its process, and so must theirs. Sockets that could not are reset
/// and reported in one line on stderr. Not run by `_exit` or a fatal signal.
#[used]
#[unsafe(link_section = ".fini_array")]
static DESTRUCTOR: extern "C" fn() = fini;

/// The longest `exit` waits for DDP sockets to write what they have.
pub const EXIT_FLUSH: core::time::Duration = core::time::Duration::from_secs(2);

extern "C" fn fini() {
    let _errno = errno::ErrnoGuard::new();
    let cut = ddp_user::flush_at_exit(EXIT_FLUSH);
    if cut.sockets > 0 {
        log::warn(format_args!(
            "exit: {} DDP socket(s) still had {} bytes to send after {} s; their connections \
             were reset",
            cut.sockets,
            cut.bytes,
            EXIT_FLUSH.as_secs()
        ));
    }
    stats::at_exit();
}

extern "C" fn init(_argc: c_int, _argv: *const *const c_char, _envp: *const *const c_char) {
    let _errno = errno::ErrnoGuard::new();
    real::resolve_all();
    config::init();
    ddp::init();
}
