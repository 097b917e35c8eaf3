//! `sigaction`, `signal`, `bsd_signal`: the application's handlers run outside the library's
//! critical sections.
//!
//! Once this process has a DDP socket (its engine started), every handler the application
//! catches an asynchronous signal with is installed under [`ddp_user::sigdefer::trampoline`],
//! which runs it at once or, if the thread holds one of the library's locks, as soon as the
//! thread lets go (`ddp_user::sigdefer` explains the why and the how). Handlers installed
//! before the first DDP socket are put under the trampoline when the engine starts
//! ([`adopt`]); a process that never makes a DDP socket keeps its actions untouched. A query
//! (`oldact`, `signal`'s return value) reports the application's own handler and flags, never
//! the trampoline.
//!
//! Not managed (installed as given): `SIG_DFL`, `SIG_IGN`, `SA_RESETHAND` actions (one-shot:
//! deferring would let the kernel reset the action before the handler ran), the fault signals
//! and `SIGABRT` ([`ddp_user::sigdefer::managed`]). Not interposed: `sigset`, `sysv_signal`
//! (one-shot anyway), a raw `rt_sigaction` system call. `signal` installs with `SA_RESTART`,
//! glibc's default: a `siginterrupt(sig, 1)` made before it is not seen (one made after it
//! works: glibc's `siginterrupt` rewrites the installed action's flags).

use libc::{c_int, sighandler_t};

use ddp_user::sigdefer;

use crate::real;

/// The trampoline's address, as an action's handler.
fn trampoline() -> sighandler_t {
    sigdefer::trampoline as *const () as sighandler_t
}

/// Whether an action of the application's is put under the trampoline.
fn wanted(sig: c_int, act: &libc::sigaction) -> bool {
    sigdefer::managed(sig)
        && act.sa_sigaction != libc::SIG_DFL
        && act.sa_sigaction != libc::SIG_IGN
        && act.sa_sigaction != trampoline()
        && act.sa_flags & libc::SA_RESETHAND == 0
}

/// `act` with the trampoline in place of the application's handler.
fn under_trampoline(act: &libc::sigaction) -> libc::sigaction {
    let mut t = *act;
    t.sa_sigaction = trampoline();
    t.sa_flags |= libc::SA_SIGINFO;
    t
}

/// Rewrites a queried action that is the trampoline into the application's (`app`).
fn report(old: *mut libc::sigaction, app: Option<(usize, usize)>) {
    // SAFETY: the caller passes null or the action the kernel just wrote.
    let Some(old) = (unsafe { old.as_mut() }) else {
        return;
    };
    if old.sa_sigaction == trampoline()
        && let Some((h, flags)) = app
    {
        old.sa_sigaction = h;
        old.sa_flags = flags as c_int;
    }
}

/// `sigaction(2)`.
///
/// # Safety
/// As for libc's `sigaction`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let before = sigdefer::app_action(sig);
    // SAFETY: the caller's pointer: null or a valid action.
    let new = unsafe { act.as_ref() };
    let Some(new) = new.filter(|a| ddp_user::engine_started() && wanted(sig, a)) else {
        // SAFETY: the caller's arguments, passed on.
        let r = unsafe { real::sigaction(sig, act, old) };
        if r == 0 {
            report(old, before);
        }
        return r;
    };
    // The application's action is recorded first: a signal arriving just after the install
    // finds it.
    sigdefer::set_app_action(sig, new.sa_sigaction, new.sa_flags as usize);
    let t = under_trampoline(new);
    // SAFETY: `t` is a valid action; `old` is the caller's.
    let r = unsafe { real::sigaction(sig, &t, old) };
    if r == 0 {
        report(old, before);
    } else if let Some((h, f)) = before {
        sigdefer::set_app_action(sig, h, f);
    }
    r
}

/// `signal(3)` (glibc's BSD semantics: `SA_RESTART`, the signal blocked in its handler). Its
/// own `signal` calls libc's internal `sigaction`, which this library does not see.
///
/// # Safety
/// As for libc's `signal`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    if !ddp_user::engine_started() || !sigdefer::managed(sig) {
        let before = sigdefer::app_action(sig);
        // SAFETY: the caller's arguments, passed on.
        let r = unsafe { real::signal(sig, handler) };
        return match before {
            Some((h, _)) if r == trampoline() => h,
            _ => r,
        };
    }
    // SAFETY: a zeroed sigaction is valid; the set functions take valid pointers.
    let mut act: libc::sigaction = unsafe { core::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: as above.
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaddset(&mut act.sa_mask, sig);
    }
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: valid actions.
    if unsafe { sigaction(sig, &act, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// `bsd_signal(3)`: glibc's other name for `signal`.
///
/// # Safety
/// As for libc's `bsd_signal`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    // SAFETY: the caller's arguments.
    unsafe { signal(sig, handler) }
}

/// Puts the trampoline under every handler the application installed before this process's
/// engine started (called by the engine as it starts; see the module documentation).
pub fn adopt() {
    let _errno = crate::errno::ErrnoGuard::new();
    for sig in 1..=64 {
        if !sigdefer::managed(sig) {
            continue;
        }
        // SAFETY: a zeroed sigaction is valid to be written.
        let mut cur: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: a query (null act) into `cur`.
        if unsafe { real::sigaction(sig, core::ptr::null(), &mut cur) } != 0 || !wanted(sig, &cur) {
            continue;
        }
        sigdefer::set_app_action(sig, cur.sa_sigaction, cur.sa_flags as usize);
        let t = under_trampoline(&cur);
        // SAFETY: a valid action.
        unsafe { real::sigaction(sig, &t, core::ptr::null_mut()) };
    }
}
