//! What a DDP fd's slot in the fd table points to: an [`Entry`], reference-counted without a
//! lock, so the data path of a DDP socket takes no lock of ours.
//!
//! An entry holds a [`Payload`]: the pending DDP state of a TCP socket before its MPA exchange
//! ([`Pending`]: options, DDP_MODE, listening, known role), or a connected DDP socket
//! ([`Conn`]). It carries two counts:
//! - `fds`: how many fd-table slots refer to it (dups counted). When the last one goes, a
//!   connected socket is closed ([`DdpSocket::close`]) even if a call on another thread still
//!   uses it (that call then sees the end of the stream: close from another thread is bounded);
//! - `refs`: slots plus calls in flight. The payload is dropped when it reaches zero.
//!
//! The slot value ([`Handle`]) is the entry's address with a 16-bit generation in the top
//! bits. Entries are never freed, only recycled (a free list), so a thread that loaded a slot
//! just before another thread closed the fd can still touch the entry safely: it increments
//! `refs` only if it is not zero, then checks the generation; a recycled entry fails the check
//! and the call reports `EBADF` (it raced with the close of its own fd).
//!
//! A call on a connected socket takes its reference from this thread's cache when it can
//! ([`CallRef`]): a thread that keeps calling on one socket (a request-response loop, an
//! event loop reading until `EAGAIN`) then pays no atomic read-modify-write for it, where a
//! counted reference costs two (an increment and a decrement, about 5 ns each here; four calls
//! per 64 B round trip on each side). The cache holds a counted reference of its own, so its
//! entry cannot be recycled under it. The thread that closes a socket's last fd takes it out
//! of its own cache ([`release`]); another thread's cache lets go of a closed socket when it
//! moves on to another socket, or at thread exit.

use core::cell::{Cell, UnsafeCell};
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use core::num::NonZeroU64;
use core::ops::Deref;
use core::sync::atomic::{AtomicU32, Ordering, compiler_fence};
use ddp_user::sync::{Guard, Mutex};

use ddp_user::{DdpSocket, Options};
use libc::c_int;

use crate::fdtable::{self, Handle};

/// The role a plain socket had in setting up its TCP connection (who initiates MPA when it is
/// switched to DDP mode in place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It called `connect`.
    Initiator,
    /// It came from `accept`.
    Responder,
}

/// A TCP socket with DDP options, before its MPA exchange (or a listener).
#[derive(Debug, Clone)]
pub struct Pending {
    /// The options (`DDP_CRC`, `DDP_MARKERS`, ...).
    pub opts: Options,
    /// `DDP_MODE`.
    pub mode: bool,
    /// `listen` was called: accepted sockets inherit `opts` and `mode`.
    pub listening: bool,
    /// How its TCP connection was set up, when we saw it.
    pub role: Option<Role>,
    /// A dual-mode listener: accepted connections that do not send an MPA Request stay plain
    /// TCP ([`crate::dual`]).
    pub dual: bool,
    /// A DDP listener served in the background: its TCP listener and acceptor
    /// ([`super::listen`]).
    pub standin: Option<super::listen::Standin>,
    /// A thread is setting up its DDP connection (`connect`, or the switch in place): data
    /// calls wait for it ([`super::wait_setup`]).
    pub setting_up: bool,
    /// Data calls forwarded to the unconnected TCP socket and not returned yet (a `connect`
    /// starts only once they did: none of them may find the connection's first bytes).
    pub forwarded: u32,
}

impl Pending {
    /// A TCP socket with default options, DDP mode off.
    pub fn new(role: Option<Role>) -> Pending {
        Pending {
            opts: Options::default(),
            mode: false,
            listening: false,
            role,
            dual: false,
            standin: None,
            setting_up: false,
            forwarded: 0,
        }
    }
}

/// A connected (or connecting, for non-blocking sockets) DDP socket.
#[derive(Debug)]
pub struct Conn {
    /// The engine's socket.
    pub sock: DdpSocket,
    /// The options it was set up with (what `getsockopt(SOL_DDP, ...)` reports).
    pub opts: Options,
}

/// What an entry holds.
#[derive(Debug)]
pub enum Payload {
    /// Before the MPA exchange.
    Pending(Mutex<Pending>),
    /// After it.
    Socket(Conn),
}

/// One entry (see the module docs).
#[repr(align(16))]
pub struct Entry {
    refs: AtomicU32,
    fds: AtomicU32,
    generation: AtomicU32,
    payload: UnsafeCell<Option<Payload>>,
}

// SAFETY: `payload` is written only while `refs` is 0 (the entry is private to the thread that
// allocates or frees it); while `refs` > 0 it is only read, and `Payload` is Sync.
unsafe impl Sync for Entry {}

static FREE: Mutex<Vec<&'static Entry>> = Mutex::new(Vec::new());

const GEN_SHIFT: u32 = 48;
const ADDR_MASK: u64 = (1 << GEN_SHIFT) - 1;

fn free_list() -> Guard<'static, Vec<&'static Entry>> {
    FREE.lock()
}

/// A counted reference to a live entry.
pub struct Ref {
    e: &'static Entry,
}

impl Ref {
    /// Allocates an entry holding `p` (one reference, no slot yet). `None` only if the entry's
    /// address does not fit a handle (never on x86-64 / aarch64 user space).
    pub fn new(p: Payload) -> Option<Ref> {
        let e = free_list()
            .pop()
            .unwrap_or_else(|| Box::leak(Box::new(Entry::empty())));
        if (e as *const Entry as u64) & !ADDR_MASK != 0 {
            return None;
        }
        // SAFETY: refs is 0: nobody else reads or writes the payload.
        unsafe { *e.payload.get() = Some(p) };
        e.fds.store(0, Ordering::Relaxed);
        e.refs.store(1, Ordering::Release);
        Some(Ref { e })
    }

    /// The payload (present while a reference is held).
    pub fn payload(&self) -> &Payload {
        // SAFETY: refs > 0 while `self` lives, so the payload is set and not written.
        unsafe { (*self.e.payload.get()).as_ref() }.expect("a referenced entry has a payload")
    }

    /// The connected socket, if this is one.
    pub fn conn(&self) -> Option<&Conn> {
        match self.payload() {
            Payload::Socket(c) => Some(c),
            Payload::Pending(_) => None,
        }
    }

    /// The pending state, if this is a socket before its MPA exchange.
    pub fn pending(&self) -> Option<Guard<'_, Pending>> {
        match self.payload() {
            Payload::Pending(m) => Some(m.lock()),
            Payload::Socket(_) => None,
        }
    }

    fn handle(&self) -> Handle {
        let generation = u64::from(self.e.generation.load(Ordering::Acquire) & 0xffff);
        let addr = self.e as *const Entry as u64;
        Handle(NonZeroU64::new(generation << GEN_SHIFT | addr).expect("entry address"))
    }

    /// The entry a slot refers to, with a new reference; `None` if the handle is not an entry
    /// (the tracked mark) or the entry was closed and recycled meanwhile.
    pub fn from_handle(h: Handle) -> Option<Ref> {
        let v = h.0.get();
        if v & 0xf != 0 {
            return None;
        }
        let p = (v & ADDR_MASK) as *const Entry;
        // SAFETY: handles with a zero low nibble are only ever made from entry addresses, and
        // entries are never freed (only recycled), so `p` points to an `Entry`.
        let e = unsafe { &*p };
        let mut cur = e.refs.load(Ordering::Relaxed);
        loop {
            if cur == 0 {
                return None;
            }
            match e
                .refs
                .compare_exchange_weak(cur, cur + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        let r = Ref { e };
        if u64::from(e.generation.load(Ordering::Acquire) & 0xffff) != v >> GEN_SHIFT {
            return None; // recycled: `r` is dropped, giving the reference back
        }
        Some(r)
    }

    /// The entry `fd` refers to (a new reference), if any.
    pub fn of_fd(fd: c_int) -> Option<Ref> {
        fdtable::lookup(fd).and_then(Ref::from_handle)
    }

    /// Makes slot `fd` refer to this entry (one more fd and one more reference); whatever the
    /// slot held before is released ([`release`]).
    pub fn attach(&self, fd: c_int) {
        self.e.fds.fetch_add(1, Ordering::AcqRel);
        core::mem::forget(self.clone());
        match fdtable::replace(fd, self.handle()) {
            Some(prev) if prev == self.handle() => {
                // The slot already referred to us: undo the double count.
                self.e.fds.fetch_sub(1, Ordering::AcqRel);
                drop(Ref { e: self.e });
            }
            Some(prev) => release(prev),
            None => {}
        }
    }
}

impl Clone for Ref {
    fn clone(&self) -> Ref {
        self.e.refs.fetch_add(1, Ordering::Relaxed);
        Ref { e: self.e }
    }
}

impl Drop for Ref {
    fn drop(&mut self) {
        if self.e.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // SAFETY: refs reached 0: no reference is left and none can be taken (increments
        // only happen from non-zero), so this thread owns the payload.
        let p = unsafe { (*self.e.payload.get()).take() };
        self.e.generation.fetch_add(1, Ordering::AcqRel);
        free_list().push(self.e);
        drop(p); // may close a socket: outside of the free-list lock
    }
}

/// This thread's cache of one connected socket's entry (see the module docs).
struct CallCache {
    /// A [`CallRef`] from the cache is out: a call on this thread is using it. A signal
    /// handler's call meanwhile (the only way this thread can call again before it ends)
    /// takes a counted reference and leaves the cache alone. The handler runs to its end
    /// before the interrupted code goes on, so the flag needs only compiler fences.
    busy: Cell<bool>,
    /// The handle `r` was taken from (0: none).
    handle: Cell<u64>,
    /// The cache's own counted reference.
    r: Cell<Option<Ref>>,
}

thread_local! {
    static CACHE: CallCache = const {
        CallCache {
            busy: Cell::new(false),
            handle: Cell::new(0),
            r: Cell::new(None),
        }
    };
}

/// A reference for one call on this thread: from the thread's cache (no atomic
/// read-modify-write) or counted. Not `Send`: a cached one ends on the thread that took it.
pub struct CallRef {
    r: ManuallyDrop<Ref>,
    /// The thread's cache, if the reference is its (the cache outlives every call on its
    /// thread).
    cache: *const CallCache,
    _thread: PhantomData<*const ()>,
}

impl CallRef {
    /// The entry a slot refers to, for one call; `None` as [`Ref::from_handle`].
    #[inline]
    pub fn from_handle(h: Handle) -> Option<CallRef> {
        let v = h.0.get();
        // (`None` while the thread's locals are being destroyed: counted references then)
        let cache = CACHE.try_with(|c| c as *const CallCache).ok();
        // SAFETY: this thread's cache, alive while the thread runs.
        let Some(c) = cache.map(|p| unsafe { &*p }) else {
            return Ref::from_handle(h).map(CallRef::counted);
        };
        if c.busy.get() {
            return Ref::from_handle(h).map(CallRef::counted);
        }
        c.busy.set(true);
        compiler_fence(Ordering::SeqCst);
        if c.handle.get() != v {
            // A miss: the reference taken for this call becomes the cache's if it is a
            // connected socket's (the old one given back instead of this one: the same two
            // atomic operations as a counted call).
            let Some(r) = Ref::from_handle(h) else {
                compiler_fence(Ordering::SeqCst);
                c.busy.set(false);
                return None;
            };
            if r.conn().is_none() {
                compiler_fence(Ordering::SeqCst);
                c.busy.set(false);
                return Some(CallRef::counted(r));
            }
            let old = c.r.replace(Some(r));
            c.handle.set(v);
            drop(old); // may drop a closed socket's payload: no hook runs from there
        }
        // The cache holds a counted reference to this entry, taken from this handle: the
        // entry is live and of this generation.
        // SAFETY: as in `Ref::from_handle`; kept live by the cache's reference.
        let e = unsafe { &*((v & ADDR_MASK) as *const Entry) };
        Some(CallRef {
            r: ManuallyDrop::new(Ref { e }),
            cache: c,
            _thread: PhantomData,
        })
    }

    fn counted(r: Ref) -> CallRef {
        CallRef {
            r: ManuallyDrop::new(r),
            cache: core::ptr::null(),
            _thread: PhantomData,
        }
    }
}

impl Deref for CallRef {
    type Target = Ref;
    fn deref(&self) -> &Ref {
        &self.r
    }
}

impl Drop for CallRef {
    fn drop(&mut self) {
        if self.cache.is_null() {
            // SAFETY: dropped once, here.
            unsafe { ManuallyDrop::drop(&mut self.r) };
        } else {
            compiler_fence(Ordering::SeqCst);
            // SAFETY: this thread's cache (`CallRef` is not `Send`), alive while it runs.
            unsafe { (*self.cache).busy.set(false) };
        }
    }
}

impl Entry {
    const fn empty() -> Entry {
        Entry {
            refs: AtomicU32::new(0),
            fds: AtomicU32::new(0),
            generation: AtomicU32::new(0),
            payload: UnsafeCell::new(None),
        }
    }
}

/// Releases the slot reference `h` held (after the slot was cleared or overwritten): one fd
/// fewer; the last fd of a connected socket closes it.
pub fn release(h: Handle) {
    let v = h.0.get();
    if v & 0xf != 0 {
        return; // the tracked mark: nothing counted
    }
    // SAFETY: as in `from_handle`; and the slot we took `h` from owned one reference, so the
    // entry is live and of this generation.
    let e: &'static Entry = unsafe { &*((v & ADDR_MASK) as *const Entry) };
    let r = Ref { e }; // adopts the slot's reference
    if e.fds.fetch_sub(1, Ordering::AcqRel) == 1 {
        if let Some(c) = r.conn() {
            crate::log::debug!("ddp: last fd of {:?} closed", c.sock);
            c.sock.close();
            forget_cached(v);
        } else if let Some(s) = r.pending().and_then(|p| p.standin.clone()) {
            crate::log::debug!(
                "ddp: last fd of a listener closed (TCP listener fd {})",
                s.tcp
            );
            super::listen::closed(&s);
        }
    }
}

/// The closing thread's cache lets go of the closed entry `v` (not the last reference: the
/// caller holds one), so that the payload is dropped here, with the close, and not later by
/// whatever call of this thread next misses the cache (a signal handler's, say).
fn forget_cached(v: u64) {
    let _ = CACHE.try_with(|c| {
        if c.busy.get() || c.handle.get() != v {
            return; // (a call interrupted by this close holds it: its next miss lets go)
        }
        c.busy.set(true);
        compiler_fence(Ordering::SeqCst);
        let old = c.r.take();
        c.handle.set(0);
        compiler_fence(Ordering::SeqCst);
        c.busy.set(false);
        drop(old);
    });
}

/// The number of fds referring to the entry (for the log).
pub fn fd_count(r: &Ref) -> u32 {
    r.e.fds.load(Ordering::Acquire)
}
