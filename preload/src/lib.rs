//! # libexsock.so — the LD_PRELOAD library
//!
//! Preloaded into any process (`scripts/exsock-run CMD...`), it interposes the libc socket API
//! and passes every call on a socket that has not opted in to libc, unchanged and invisibly:
//! same results, same errno, no allocation, lock or system call added. Sockets that opt in to
//! DDP mode (a later issue) are routed into the user-level iWARP engine of `ddp-user`.
//!
//! Interposed: `socket`, `socketpair`, `bind`, `listen`, `accept`, `accept4`, `connect`,
//! `shutdown` ([`socket`]); `close`, `close_range`, `closefrom`, `dup`, `dup2`, `dup3`
//! ([`close_dup`]); `fcntl`, `fcntl64`, `ioctl` ([`fcntl`], variadic, via `shim.c`); `read`,
//! `readv`, `write`, `writev`, `send`, `sendto`, `sendmsg`, `sendmmsg`, `recv`, `recvfrom`,
//! `recvmsg`, `recvmmsg`, `sendfile`, `sendfile64`, `__read_chk`, `__recv_chk`,
//! `__recvfrom_chk` ([`io`]); `poll`, `ppoll`, `select`, `pselect`, `epoll_create`,
//! `epoll_create1`, `epoll_ctl`, `epoll_wait`, `epoll_pwait`, `epoll_pwait2`, `__poll_chk`,
//! `__ppoll_chk` ([`poll`]); `setsockopt`, `getsockopt`, `getsockname`, `getpeername`
//! ([`sockopt`]); `fork` ([`fork`]). `exsock.map` exports exactly these and `ddp_*`.
//!
//! How a call goes: each exported function asks the fd table ([`fdtable`]) whether its fd is
//! routed — one relaxed atomic load while no fd is marked — and otherwise tail-calls the real
//! function from the one table of real functions ([`real`]), resolved by the ELF constructor
//! below. A routed call goes to a function returning `Result<_, Errno>` ([`errno`]), where the
//! DDP mode will plug in; in this version routed calls (only sockets marked by the
//! `EXSOCK_TRACK=all` test setting, see [`config`]) forward to libc too.
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
pub mod errno;
pub mod fcntl;
pub mod fdtable;
pub mod fork;
pub mod io;
pub mod log;
pub mod poll;
pub mod real;
pub mod route;
pub mod socket;
pub mod sockopt;

use libc::{c_char, c_int};

/// The ELF constructor: resolves every real function and reads `EXSOCK_*`, before `main` (and
/// before the constructors of the program's own libraries that come after us in load order).
#[used]
#[unsafe(link_section = ".init_array")]
static CONSTRUCTOR: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = init;

extern "C" fn init(_argc: c_int, _argv: *const *const c_char, _envp: *const *const c_char) {
    let _errno = errno::ErrnoGuard::new();
    real::resolve_all();
    config::init();
}
