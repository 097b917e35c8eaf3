//! Deferred signal handlers: an application's handler never runs on a thread while that
//! thread holds one of the library's locks.
//!
//! Why: `send`, `recv`, `poll`, `ioctl` and the rest are async-signal-safe on a kernel
//! socket, so a program may call them from a signal handler. Here a call on a DDP socket
//! takes the socket's lock (and sometimes an engine-wide one); a handler that ran while the
//! code it interrupted held that lock would wait for its own thread for ever (found by
//! ddp-fdtest `signal-same`: a handler's `FIONREAD`, `poll` or `getsockopt` on the socket the
//! thread was using hung within a second).
//!
//! How: every lock of the library ([`crate::sync::Mutex`]) counts itself in a per-thread
//! depth ([`Critical`]) before it is taken and after it is released (from the first handler
//! the preload puts under the trampoline on; before that a lock's count is one relaxed load). The preload installs
//! [`trampoline`] as the kernel's action for each signal the application catches (the
//! asynchronous ones, see [`managed`]), with the application's flags and mask, and records the
//! application's own action here ([`set_app_action`]). At depth 0 the trampoline calls the
//! application's handler at once, on the same frame; otherwise it notes the signal and its
//! `siginfo_t` and returns. The release that brings the depth back to 0 sends the noted
//! signals to its own thread again (`rt_tgsigqueueinfo`, the same `siginfo_t`), and the kernel
//! delivers them as for any signal (the action's mask, `SA_RESTART`, alternate stack) as that
//! system call returns. The library never blocks while it holds a lock (a blocking wait is a
//! `poll` or `epoll_wait` with every lock released, checked by a debug assertion in
//! [`crate::sys`]), so a handler is late by one critical section at most (microseconds) and
//! a blocking call is still interrupted by it (`EINTR` or a restart, as the kernel decides).
//!
//! Limits: a standard signal noted twice before the release is delivered once (as the
//! kernel merges a pending standard signal); real-time signals keep their order and data up
//! to [`SLOTS`] per critical section; beyond that, each kind noted is delivered once more with
//! `tgkill` (no data). From a
//! thread other than the main one, a signal whose `si_code` the kernel does not let a
//! process forge (`SI_USER` from `kill`, `SI_KERNEL` from `setitimer`) is delivered again
//! with `tgkill` (`si_code` `SI_TKILL`, `si_pid` this process). A handler that ran at once
//! sees the kernel's `ucontext_t`; a deferred one sees the one of the release's system call.

use core::cell::{Cell, UnsafeCell};
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering, compiler_fence};

use libc::{c_int, c_void, siginfo_t};

/// Signals are numbered 1..=64 on Linux.
const NSIG: usize = 65;

/// Real-time signals noted with their data per critical section.
pub const SLOTS: usize = 4;

/// The application's handler of each managed signal (0: none recorded).
static APP_HANDLER: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
/// The application's `sa_flags` of each managed signal (as it set them).
static APP_FLAGS: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];

/// This thread's state. Const-initialised and without `Drop`, so it is plain thread-local
/// memory (no lazy set-up, no destructor): usable from a signal handler at any moment.
struct Local {
    /// Locks of the library this thread holds (or is about to take).
    depth: Cell<u32>,
    /// Signals noted while `depth` > 0 (bit `sig - 1`).
    pending: Cell<u64>,
    /// Signals noted when the slots were full (delivered once each, without data).
    extra: Cell<u64>,
    /// How many of `slots` are in use.
    used: Cell<usize>,
    /// The noted signals with their data, in arrival order.
    slots: UnsafeCell<[(c_int, MaybeUninit<siginfo_t>); SLOTS]>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            depth: Cell::new(0),
            pending: Cell::new(0),
            extra: Cell::new(0),
            used: Cell::new(0),
            slots: UnsafeCell::new([(0, MaybeUninit::uninit()); SLOTS]),
        }
    };
}

/// Whether the library manages `sig` when the application catches it: the asynchronous
/// signals. Not the faults (`SIGSEGV`, `SIGBUS`, `SIGFPE`, `SIGILL`, `SIGTRAP`, `SIGSYS`:
/// their handler must run on the faulting instruction), not `SIGABRT` (`abort` raises it on
/// its own thread and expects the handler at once), not `SIGKILL`/`SIGSTOP`, and not the two
/// signals glibc keeps for itself (32, 33).
pub fn managed(sig: c_int) -> bool {
    (1..NSIG as c_int).contains(&sig)
        && !crate::sys::FAULT_SIGNALS.contains(&sig)
        && ![libc::SIGKILL, libc::SIGSTOP, libc::SIGABRT, 32, 33].contains(&sig)
}

/// Records the application's action for `sig` (`handler` is its `sa_handler`/`sa_sigaction`
/// address, `flags` its `sa_flags`), which [`trampoline`] calls.
pub fn set_app_action(sig: c_int, handler: usize, flags: usize) {
    if let Some(s) = slot(sig) {
        APP_FLAGS[s].store(flags, Ordering::Relaxed);
        APP_HANDLER[s].store(handler, Ordering::Release);
        // (before the caller installs the trampoline: a lock taken from now on is counted)
        ACTIVE.store(true, Ordering::SeqCst);
    }
}

/// The application's action for `sig` as recorded (handler address, flags), if any.
pub fn app_action(sig: c_int) -> Option<(usize, usize)> {
    let s = slot(sig)?;
    let h = APP_HANDLER[s].load(Ordering::Acquire);
    (h != 0).then(|| (h, APP_FLAGS[s].load(Ordering::Relaxed)))
}

/// Called once when this process's engine starts (its first DDP socket): the preload puts
/// the trampoline under the handlers the application installed before.
static ON_ENGINE_START: AtomicUsize = AtomicUsize::new(0);

/// Sets the function [`engine_starting`] calls.
pub fn on_engine_start(f: fn()) {
    ON_ENGINE_START.store(f as usize, Ordering::Release);
}

/// The engine of this process is starting (see [`on_engine_start`]).
pub(crate) fn engine_starting() {
    let f = ON_ENGINE_START.load(Ordering::Acquire);
    if f != 0 {
        // SAFETY: only `on_engine_start` stores here, a `fn()`.
        let f: fn() = unsafe { core::mem::transmute(f) };
        f();
    }
}

fn slot(sig: c_int) -> Option<usize> {
    (1..NSIG as c_int).contains(&sig).then_some(sig as usize)
}

/// The kernel's handler of every managed signal the application catches (installed with
/// `SA_SIGINFO`): calls the application's handler, or notes the signal for later if this
/// thread holds one of the library's locks.
///
/// # Safety
/// Called by the kernel as a `SA_SIGINFO` handler (`info` and `ctx` valid for the call).
pub unsafe extern "C" fn trampoline(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let deferred = LOCAL.with(|l| {
        if l.depth.get() == 0 {
            return false;
        }
        note(l, sig, info);
        true
    });
    if deferred {
        return;
    }
    let Some((h, flags)) = app_action(sig) else {
        return;
    };
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        return;
    }
    if flags & libc::SA_SIGINFO as usize != 0 {
        // SAFETY: the application installed this address as an SA_SIGINFO handler.
        let f: unsafe extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
            unsafe { core::mem::transmute(h) };
        // SAFETY: the kernel's own arguments, passed on.
        unsafe { f(sig, info, ctx) };
    } else {
        // SAFETY: the application installed this address as a plain handler.
        let f: unsafe extern "C" fn(c_int) = unsafe { core::mem::transmute(h) };
        // SAFETY: a plain handler takes the signal number.
        unsafe { f(sig) };
    }
}

/// Notes `sig` (in a signal handler, `depth` > 0).
fn note(l: &Local, sig: c_int, info: *const siginfo_t) {
    let bit = 1u64 << (sig - 1);
    let rt = sig >= libc::SIGRTMIN();
    if l.pending.get() & bit != 0 && !rt {
        return; // a standard signal already pending: merged, as the kernel does
    }
    l.pending.set(l.pending.get() | bit);
    let n = l.used.get();
    if n < SLOTS && !info.is_null() {
        // SAFETY: this thread's own slots; nothing else on this thread touches them while
        // this handler runs (the reader blocks signals while it copies them).
        unsafe {
            let slots = &mut *l.slots.get();
            slots[n].0 = sig;
            slots[n].1.write(info.read());
        }
        l.used.set(n + 1);
    } else {
        l.extra.set(l.extra.get() | bit);
    }
}

/// Whether any application handler is under the trampoline (set with the first one, never
/// cleared). Until then nothing can run a handler inside a critical section, and [`enter`] is
/// one relaxed load: programs without handlers pay nothing more per lock.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// A hold on this thread's depth: while one exists, managed signals wait (see the module
/// documentation). Taken by [`enter`]; its drop delivers what waited once the depth is 0.
/// Zero-sized, so that a lock's guard is no larger than std's: whether it counted is
/// [`ACTIVE`] at its drop (see [`leave`] for the one moment that can differ).
pub struct Critical {
    _thread: core::marker::PhantomData<*const ()>,
}

/// Counts locks from now on (as the first [`set_app_action`] does).
#[cfg(test)]
pub(crate) fn activate() {
    ACTIVE.store(true, Ordering::SeqCst);
}

/// Raises this thread's depth (before a lock is taken). Inline: a relaxed load and a branch;
/// the counting is out of line (only programs with handlers get there).
#[inline(always)]
pub fn enter() -> Critical {
    if ACTIVE.load(Ordering::Relaxed) {
        enter_counted();
    }
    Critical {
        _thread: core::marker::PhantomData,
    }
}

#[inline(never)]
fn enter_counted() {
    LOCAL.with(|l| l.depth.set(l.depth.get() + 1));
    compiler_fence(Ordering::SeqCst);
}

impl Drop for Critical {
    #[inline(always)]
    fn drop(&mut self) {
        if ACTIVE.load(Ordering::Relaxed) {
            leave();
        }
    }
}

/// Lowers this thread's depth (after a lock was released); at 0, delivers what waited. A
/// guard taken before the first handler was installed and released after it did not count:
/// the depth does not go below 0 (for the rest of such a thread's critical sections at that
/// moment, a handler is not held back, as before handlers were managed).
#[inline(never)]
fn leave() {
    compiler_fence(Ordering::SeqCst);
    LOCAL.with(|l| {
        let d = l.depth.get().saturating_sub(1);
        l.depth.set(d);
        if d == 0 && l.pending.get() != 0 {
            deliver();
        }
    });
}

/// This thread's depth (for the debug check before a blocking wait).
#[inline]
pub fn depth() -> u32 {
    LOCAL.with(|l| l.depth.get())
}

/// Sends the signals noted on this thread to it again (depth 0).
#[cold]
#[inline(never)]
fn deliver() {
    let errno = crate::sys::errno();
    // Take the notes with signals blocked (a handler could add to them meanwhile).
    let mut all: libc::sigset_t = unsafe { core::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: valid sets.
    unsafe { libc::sigfillset(&mut all) };
    let masked = crate::sys::sigprocmask(libc::SIG_BLOCK, &all, Some(&mut old)).is_ok();
    let (extra, used, slots) = LOCAL.with(|l| {
        // SAFETY: this thread's slots, signals blocked: nothing writes them meanwhile.
        let slots = unsafe { *l.slots.get() };
        let r = (l.extra.get(), l.used.get(), slots);
        l.pending.set(0);
        l.extra.set(0);
        l.used.set(0);
        r
    });
    if masked {
        let _ = crate::sys::sigprocmask(libc::SIG_SETMASK, &old, None);
    }
    let (pid, tid) = (crate::sys::getpid(), crate::sys::gettid());
    for (sig, info) in slots.iter().take(used) {
        // SAFETY: slots below `used` were written by `note`.
        let info = unsafe { info.assume_init_ref() };
        if crate::sys::tgsigqueueinfo(pid, tid, *sig, info).is_err() {
            let _ = crate::sys::tgkill(pid, tid, *sig);
        }
    }
    let mut rest = extra;
    while rest != 0 {
        let sig = rest.trailing_zeros() as c_int + 1;
        rest &= rest - 1;
        let _ = crate::sys::tgkill(pid, tid, sig);
    }
    crate::sys::set_errno(errno);
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;

    static RAN: AtomicU32 = AtomicU32::new(0);
    static RAN_AT_DEPTH: AtomicU32 = AtomicU32::new(u32::MAX);
    static LAST_VALUE: AtomicUsize = AtomicUsize::new(0);

    extern "C" fn app_handler(_sig: c_int, info: *mut siginfo_t, _ctx: *mut c_void) {
        RAN.fetch_add(1, Ordering::SeqCst);
        RAN_AT_DEPTH.store(depth(), Ordering::SeqCst);
        // SAFETY: the kernel's siginfo for an SA_SIGINFO handler.
        let v = unsafe { (*info).si_value().sival_ptr } as usize;
        LAST_VALUE.store(v, Ordering::SeqCst);
    }

    /// Installs the trampoline for `sig` with the test's handler, by raw `rt_sigaction`.
    fn install(sig: c_int) {
        set_app_action(
            sig,
            app_handler as *const () as usize,
            libc::SA_SIGINFO as usize,
        );
        // SAFETY: a valid sigaction; libc's sigaction (no preload in unit tests).
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = trampoline as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(sig, &sa, core::ptr::null_mut()), 0);
        }
    }

    fn queue_to_self(sig: c_int, value: usize) {
        // SAFETY: sigqueue to this process with a pointer-sized value; the thread is the
        // test's own and `raise` equivalents are thread-directed below.
        let (pid, tid) = (crate::sys::getpid(), crate::sys::gettid());
        let mut info: siginfo_t = unsafe { core::mem::zeroed() };
        // siginfo_t for SI_QUEUE: si_signo, si_code, then pid, uid, value (the kernel's
        // _rt layout: pid at 16, uid at 20, value at 24 on 64-bit Linux).
        // SAFETY: writing the fields of the zeroed struct at the kernel's offsets.
        unsafe {
            let p = &mut info as *mut siginfo_t as *mut u8;
            *(p as *mut c_int) = sig;
            *(p.add(8) as *mut c_int) = libc::SI_QUEUE;
            *(p.add(16) as *mut c_int) = pid;
            *(p.add(24) as *mut usize) = value;
        }
        crate::sys::tgsigqueueinfo(pid, tid, sig, &info).unwrap();
    }

    /// Waits (bounded, 5 s) until the handler has run `n` times in all: on Linux a signal a
    /// thread sends itself is delivered as that system call returns, under valgrind at its
    /// scheduler's next look.
    fn ran(n: u32) -> u32 {
        let t0 = std::time::Instant::now();
        while RAN.load(Ordering::SeqCst) < n && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::yield_now();
        }
        RAN.load(Ordering::SeqCst)
    }

    /// At depth 0 the handler runs at once; inside a critical section it waits until the
    /// section ends and then runs once, at depth 0, with the signal's data.
    #[test]
    fn a_handler_waits_for_the_critical_section() {
        // Run on a fresh thread: the test harness's other threads may take the signal
        // otherwise (it is thread-directed here, so only this one does).
        std::thread::spawn(|| {
            let sig = libc::SIGRTMIN() + 3;
            install(sig);
            RAN.store(0, Ordering::SeqCst);
            queue_to_self(sig, 11);
            // Linux delivers a signal a thread sends itself as the system call returns;
            // valgrind at its scheduler's next look, which makes the counts below (what ran
            // inside and after a critical section) meaningless there.
            let synchronous = RAN.load(Ordering::SeqCst) == 1
                && !std::env::var("LD_PRELOAD").is_ok_and(|v| v.contains("vgpreload"));
            assert_eq!(ran(1), 1, "not run at depth 0");
            assert_eq!(LAST_VALUE.load(Ordering::SeqCst), 11);
            if !synchronous {
                eprintln!("signals are delivered late here (valgrind?): deferral not checked");
                return;
            }
            {
                let _c = enter();
                let _c2 = enter();
                queue_to_self(sig, 22);
                queue_to_self(sig, 33);
                assert_eq!(
                    RAN.load(Ordering::SeqCst),
                    1,
                    "ran inside a critical section"
                );
                drop(_c2);
                assert_eq!(RAN.load(Ordering::SeqCst), 1, "ran at depth 1");
            }
            assert_eq!(ran(3), 3, "not delivered at the end");
            assert_eq!(RAN_AT_DEPTH.load(Ordering::SeqCst), 0);
            assert_eq!(LAST_VALUE.load(Ordering::SeqCst), 33, "data or order lost");
            // More real-time signals than slots: the slots' four with their data, in order,
            // then the kind once more (its data lost).
            RAN.store(0, Ordering::SeqCst);
            {
                let _c = enter();
                for v in 1..=6 {
                    queue_to_self(sig, 100 + v);
                }
                assert_eq!(RAN.load(Ordering::SeqCst), 0);
            }
            assert_eq!(ran(5), 5, "slots and the extra one");
            let _ = crate::sys::getpid();
            assert_eq!(RAN.load(Ordering::SeqCst), 5);
            // A standard signal noted twice is delivered once.
            let std_sig = libc::SIGUSR2;
            install(std_sig);
            RAN.store(0, Ordering::SeqCst);
            {
                let _c = enter();
                let tid = crate::sys::gettid();
                crate::sys::tgkill(crate::sys::getpid(), tid, std_sig).unwrap();
                crate::sys::tgkill(crate::sys::getpid(), tid, std_sig).unwrap();
                assert_eq!(RAN.load(Ordering::SeqCst), 0);
            }
            assert_eq!(ran(1), 1);
            let _ = crate::sys::getpid(); // (a system call: a second delivery would come here)
            assert_eq!(
                RAN.load(Ordering::SeqCst),
                1,
                "a merged standard signal ran twice"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn faults_and_glibc_signals_are_not_managed() {
        for s in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGKILL,
            libc::SIGABRT,
            32,
            33,
            0,
            65,
        ] {
            assert!(!managed(s), "{s}");
        }
        for s in [
            libc::SIGALRM,
            libc::SIGINT,
            libc::SIGIO,
            libc::SIGUSR1,
            34,
            64,
        ] {
            assert!(managed(s), "{s}");
        }
    }
}
