//! The stats surface: every DDP socket of the process in a shared-memory segment,
//! `/dev/shm/exsock-<pid>`, that `exsock-stat` reads from outside (layout and protocol:
//! the `exsock_stat` crate).
//!
//! - The segment is created (raw `openat`/`ftruncate`/`mmap`, mode 0600) with the process's
//!   first DDP socket and unlinked by the ELF destructor ([`at_exit`]). `EXSOCK_STATS=0`
//!   turns it off. A process ended by a signal or `_exit` leaves its file behind;
//!   `exsock-stat` shows it as exited and `exsock-stat --clean` removes it.
//! - Nothing on the data path: the counters are the engine's own (`DDP_CONN_INFO` and
//!   [`ddp_user::DdpSocket::counters`]); a stats thread (started with the first DDP socket)
//!   copies them into the slots when a socket appears, about once a second while there are
//!   sockets, and at once when a reader asks (a futex in the segment). With no DDP socket it
//!   sleeps until a reader asks.
//! - Sockets are held weakly ([`ddp_user::WeakDdpSocket`]): the stats never keep one open.
//!   A socket that is gone or `CLOSED` frees its slot at the next refresh.
//! - fork: the child starts with no segment and no thread (a child handler forgets the
//!   parent's state without touching its lock); its own DDP sockets get its own segment.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::Once;

use ddp_user::sync::{Guard, Mutex};

use ddp_user::{DdpSocket, WeakDdpSocket};
use exsock_stat::{QueueData, SEGMENT_SIZE, SLOTS, Segment, SlotData};

// The engine's queue flags go into the segment as they are: the same bits on both sides.
const _: () = assert!(
    ddp_user::QUEUE_HELD == exsock_stat::Q_HELD
        && ddp_user::QUEUE_ANNOUNCED == exsock_stat::Q_ANNOUNCED
        && ddp_user::QUEUE_LAZY == exsock_stat::Q_LAZY
        && ddp_user::QUEUE_ARMED_IN == exsock_stat::Q_ARMED_IN
        && ddp_user::QUEUE_ARMED_OUT == exsock_stat::Q_ARMED_OUT
        && ddp_user::QUEUE_SPILLED == exsock_stat::Q_SPILLED
        && ddp_user::QUEUE_RX_DONE == exsock_stat::Q_RX_DONE
        && ddp_user::QUEUE_OTHERS == exsock_stat::Q_OTHERS
);
use libc::c_int;

use crate::log::{Addr, debug};

/// One registered socket.
struct Tracked {
    sock: WeakDdpSocket,
    fd: c_int,
    slot: usize,
    base: SlotData,
}

/// The process's stats state.
struct Inner {
    seg: Option<&'static Segment>,
    pid: u32,
    tracked: Vec<Tracked>,
    thread: bool,
}

static STATE: AtomicPtr<Mutex<Inner>> = AtomicPtr::new(core::ptr::null_mut());
static DISABLED: AtomicBool = AtomicBool::new(false);
/// The pid whose segment should be unlinked at exit (0: none).
static OWNER: AtomicU32 = AtomicU32::new(0);
static ATFORK: Once = Once::new();

fn state() -> Guard<'static, Inner> {
    let mut p = STATE.load(Ordering::Acquire);
    if p.is_null() {
        let new = Box::into_raw(Box::new(Mutex::new(Inner {
            seg: None,
            pid: 0,
            tracked: Vec::new(),
            thread: false,
        })));
        match STATE.compare_exchange(
            core::ptr::null_mut(),
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => p = new,
            Err(winner) => {
                // SAFETY: `new` came from Box::into_raw above and was never published.
                drop(unsafe { Box::from_raw(new) });
                p = winner;
            }
        }
    }
    // SAFETY: published states are never freed (a forked child forgets, never frees, them).
    unsafe { &*p }.lock()
}

extern "C" fn atfork_child() {
    // The parent's state (and its lock, maybe held by its stats thread) stays behind,
    // unreferenced; the child's first DDP socket builds its own.
    STATE.store(core::ptr::null_mut(), Ordering::Release);
    OWNER.store(0, Ordering::Relaxed);
}

fn getpid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::syscall(libc::SYS_getpid) as u32 }
}

fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: our own timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// `/dev/shm/exsock-<pid>` as a NUL-terminated buffer.
fn path(pid: u32) -> Vec<u8> {
    let mut p = exsock_stat::segment_path(pid).into_bytes();
    p.push(0);
    p
}

/// Creates and maps the segment (raw system calls).
fn create(pid: u32) -> Option<&'static Segment> {
    let p = path(pid);
    // SAFETY: NUL-terminated path; raw openat, no hooks.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            p.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600,
        )
    } as c_int;
    if fd < 0 {
        debug!(
            "stats: cannot create /dev/shm/exsock-{pid}: errno {}",
            crate::errno::Errno::last().0
        );
        return None;
    }
    // SAFETY: our fd; raw ftruncate.
    let ok = unsafe { libc::syscall(libc::SYS_ftruncate, fd, SEGMENT_SIZE as libc::off_t) } == 0;
    let map = if ok {
        // SAFETY: a shared mapping of our own file, of the size just set.
        unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                SEGMENT_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        }
    } else {
        libc::MAP_FAILED
    };
    // SAFETY: closes the fd opened above (the mapping stays); raw close.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    if map == libc::MAP_FAILED {
        // SAFETY: NUL-terminated path; raw unlink.
        unsafe { libc::syscall(libc::SYS_unlinkat, libc::AT_FDCWD, p.as_ptr(), 0) };
        return None;
    }
    // SAFETY: a fresh, zero-filled, page-aligned mapping of SEGMENT_SIZE bytes, never
    // unmapped; Segment is all atomics, for which all-zero bits are valid.
    let seg: &'static Segment = unsafe { &*map.cast::<Segment>() };
    let h = &seg.header;
    h.version.store(exsock_stat::VERSION, Ordering::Relaxed);
    h.slot_count.store(SLOTS as u32, Ordering::Relaxed);
    h.pid.store(pid, Ordering::Relaxed);
    let prog = crate::rules::active()
        .map(|c| c.program.exe.clone())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            crate::ddp::read_file(c"/proc/self/comm")
                .map(|b| String::from_utf8_lossy(b.trim_ascii_end()).into_owned())
        })
        .unwrap_or_default();
    h.set_program(prog.as_bytes());
    h.magic.store(exsock_stat::MAGIC, Ordering::Release);
    OWNER.store(pid, Ordering::Relaxed);
    Some(seg)
}

fn sockname(fd: c_int, peer: bool) -> Option<std::net::SocketAddr> {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of_val(&ss) as libc::socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: our own buffer; the real functions.
    let rc = unsafe {
        if peer {
            crate::real::getpeername(fd, p, &mut len)
        } else {
            crate::real::getsockname(fd, p, &mut len)
        }
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: the kernel wrote at most the buffer's size.
    match unsafe { Addr::read(p, len.min(core::mem::size_of_val(&ss) as libc::socklen_t)) } {
        Addr::V4(a) => Some(a.into()),
        Addr::V6(a) => Some(a.into()),
        _ => None,
    }
}

/// Fills `d` from the socket's current counters; `false` if it is gone or closed.
fn snapshot(sock: &DdpSocket, d: &mut SlotData) -> bool {
    let Ok(i) = sock.info() else { return false };
    let c = sock.counters().unwrap_or_default();
    d.state = i.state;
    d.initiator = i.initiator;
    d.mpa_rev = i.mpa_rev;
    d.crc = i.crc;
    d.markers_tx = i.markers_tx;
    d.markers_rx = i.markers_rx;
    d.p2p = i.p2p;
    d.rtr = i.rtr;
    d.ird = i.ird;
    d.ord = i.ord;
    d.mulpdu = i.mulpdu;
    d.pd = i.pd;
    d.last_term = if i.term_sent != 0 {
        u32::from(i.term_sent) << 24
            | u32::from(i.term_layer) << 16
            | u32::from(i.term_etype) << 8
            | u32::from(i.term_ecode)
    } else {
        0
    };
    d.bytes_tx = i.bytes_tx;
    d.bytes_rx = i.bytes_rx;
    d.fpdus_tx = i.fpdus_tx;
    d.fpdus_rx = i.fpdus_rx;
    d.placed_direct = i.placed_direct;
    d.crc_errors = c.crc_errors;
    d.terms_sent = c.terminates_sent;
    d.terms_received = c.terminates_received;
    d.updated_ms = now_ms();
    d.queues = sock.queues().map_or(QueueData::default(), |q| QueueData {
        tcp_in: q.tcp_in,
        backlog: q.backlog,
        pair_in: q.pair_in,
        pair_out: q.pair_out,
        unsent: q.unsent,
        tcp_out: q.tcp_out,
        inside: q.inside,
        flags: q.flags | exsock_stat::Q_VALID,
    });
    i.state != ddp_user::engine::cq::state::CLOSED
}

/// Copies every tracked socket's counters into its slot; frees the slots of sockets that are
/// gone. Returns how many remain.
fn refresh(st: &mut Inner) -> usize {
    let Some(seg) = st.seg else { return 0 };
    st.tracked.retain_mut(|t| {
        // (a socket the application closed stays while the engine serves it for another
        // process, flagged `others`)
        let live = match t.sock.upgrade_served() {
            Some(s) => snapshot(&s, &mut t.base),
            None => false,
        };
        if live {
            seg.slots[t.slot].write(&t.base);
        } else {
            seg.slots[t.slot].write(&SlotData::default());
            debug!("stats: fd {} gone, slot {} free", t.fd, t.slot);
        }
        live
    });
    seg.header.updated_ms.store(now_ms(), Ordering::Relaxed);
    st.tracked.len()
}

/// The stats thread: refreshes on request (futex), about once a second while there are
/// sockets, and sleeps otherwise.
fn run(seg: &'static Segment) {
    let h = &seg.header;
    loop {
        let req = h.refresh_req.load(Ordering::Acquire);
        let n = refresh(&mut state());
        h.refresh_done.store(req, Ordering::Release);
        exsock_stat::futex_wake(&h.refresh_done);
        if h.refresh_req.load(Ordering::Acquire) == req {
            exsock_stat::futex_wait(&h.refresh_req, req, (n > 0).then_some(1000));
        }
    }
}

/// Registers a new DDP socket installed under `fd` (called once its MPA exchange started or
/// finished). Off the data path.
pub fn register(fd: c_int, sock: &DdpSocket) {
    if DISABLED.load(Ordering::Relaxed) {
        return;
    }
    ATFORK.call_once(|| {
        if crate::config::env(c"EXSOCK_STATS").is_some_and(|v| v.to_bytes() == b"0") {
            DISABLED.store(true, Ordering::Relaxed);
        }
        // SAFETY: registering a handler that only stores two atomics.
        unsafe { libc::pthread_atfork(None, None, Some(atfork_child)) };
    });
    if DISABLED.load(Ordering::Relaxed) {
        return;
    }
    let _errno = crate::errno::ErrnoGuard::new();
    let mut st = state();
    let pid = getpid();
    if st.seg.is_none() || st.pid != pid {
        st.seg = create(pid);
        st.pid = pid;
        st.tracked.clear();
        st.thread = false;
    }
    let Some(seg) = st.seg else { return };
    // One pass over the tracked sockets, not one per candidate slot (that was 256 × 256
    // comparisons per registration once the slots are full: 1000 connections, xs-conns).
    let mut used = [false; SLOTS];
    for t in &st.tracked {
        used[t.slot] = true;
    }
    let Some(slot) = used.iter().position(|u| !u) else {
        seg.header.overflow.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let tcp = sock.tcp_fd();
    let mut base = SlotData {
        fd,
        local: sockname(tcp, false),
        peer: sockname(tcp, true),
        opened_ms: now_ms(),
        ..SlotData::default()
    };
    snapshot(sock, &mut base);
    base.state = base.state.max(1);
    seg.slots[slot].write(&base);
    st.tracked.push(Tracked {
        sock: sock.downgrade(),
        fd,
        slot,
        base,
    });
    if !st.thread {
        st.thread = ddp_user::sys::spawn_quiet("exsock-stats", move || run(seg)).is_ok();
    }
}

/// Marks the socket in `fd`'s slot as accepted by a dual-mode listener (shown by exsock-stat).
pub fn mark_dual(fd: c_int) {
    let p = STATE.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    let mut st = state();
    let seg = st.seg;
    if let (Some(seg), Some(t)) = (seg, st.tracked.iter_mut().rev().find(|t| t.fd == fd)) {
        t.base.dual = 1;
        seg.slots[t.slot].write(&t.base);
    }
}

/// Unlinks this process's segment (from the ELF destructor).
pub fn at_exit() {
    let pid = OWNER.load(Ordering::Relaxed);
    if pid == 0 || pid != getpid() {
        return;
    }
    let p = path(pid);
    // SAFETY: NUL-terminated path; raw unlink.
    unsafe { libc::syscall(libc::SYS_unlinkat, libc::AT_FDCWD, p.as_ptr(), 0) };
}
