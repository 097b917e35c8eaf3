//! The one module whose `unsafe` code touches application memory: registered regions, the
//! buffers named by work requests, and the caller's receive buffers for stream data.
//!
//! [`SessionMem`] implements [`ddp_proto::ddp::Memory`] for one *session*: one stretch of
//! protocol work done under a connection's lock (a `handle_input`, a direct placement, a
//! `poll_transmit` and the writes of its bytes). Every region it touches is pinned in the
//! registry on first use and unpinned when the session ends, so
//! [`Registry::deregister`](crate::engine::registry::Registry::deregister) returns only when
//! no session can touch the region any more.
//!
//! Between sessions a connection may be in the middle of placing a segment into a region
//! (validated at the segment's header). If the region is deregistered meanwhile, the rest of
//! that segment is discarded here instead of being written to memory the application may
//! already have freed (`write` into a region that is gone, or re-registered under a new key,
//! is dropped; [`SessionMem::recv_direct`] refuses such a target and the driver reads the
//! bytes into its buffer instead).
//!
//! Local buffers (send sources, receive and Read sinks) are the application's: exactly as
//! with verbs, they must stay valid from the post until the work request's completion. The
//! engine cannot check that; it only refuses null pointers and ranges that wrap.

use core::cell::{Cell, RefCell};
use core::marker::PhantomData;
use std::io::IoSliceMut;
use std::os::fd::RawFd;

use ddp_proto::conn::DirectTarget;
use ddp_proto::ddp::{InvalidateError, Memory, RegionInfo, STag};

use crate::engine::registry::{Region, Registry};
use crate::sys::{self, Errno};

/// The caller's receive buffers during a stream `recv`: stream data goes there directly
/// while there is room.
pub(crate) struct UserSink<'a> {
    parts: SinkParts,
    filled: usize,
    cap: usize,
    _borrow: PhantomData<&'a mut [u8]>,
}

/// The sink's buffers: inline for up to [`SinkParts::INLINE`] (a `recv` has one; no
/// allocation per call), else on the heap.
enum SinkParts {
    Inline([(*mut u8, usize); SinkParts::INLINE], usize),
    Heap(Vec<(*mut u8, usize)>),
}

impl SinkParts {
    const INLINE: usize = 4;

    fn with_capacity(n: usize) -> SinkParts {
        if n <= Self::INLINE {
            SinkParts::Inline([(core::ptr::null_mut(), 0); Self::INLINE], 0)
        } else {
            SinkParts::Heap(Vec::with_capacity(n))
        }
    }

    fn push(&mut self, p: (*mut u8, usize)) {
        match self {
            SinkParts::Inline(a, n) if *n < Self::INLINE => {
                a[*n] = p;
                *n += 1;
            }
            SinkParts::Inline(a, n) => {
                let mut v = a[..*n].to_vec();
                v.push(p);
                *self = SinkParts::Heap(v);
            }
            SinkParts::Heap(v) => v.push(p),
        }
    }

    fn as_slice(&self) -> &[(*mut u8, usize)] {
        match self {
            SinkParts::Inline(a, n) => &a[..*n],
            SinkParts::Heap(v) => v,
        }
    }
}

impl<'a> UserSink<'a> {
    /// Borrows `bufs`, after their first `skip` bytes, for the life of the sink.
    pub(crate) fn new(bufs: &'a mut [IoSliceMut<'_>], mut skip: usize) -> UserSink<'a> {
        let mut parts = SinkParts::with_capacity(bufs.len());
        for b in bufs.iter_mut() {
            let len = b.len();
            if skip >= len {
                skip -= len;
                continue;
            }
            // `skip < len`: the pointer stays inside the caller's slice.
            parts.push((b[skip..].as_mut_ptr(), len - skip));
            skip = 0;
        }
        let cap = parts.as_slice().iter().map(|p| p.1).sum();
        UserSink {
            parts,
            filled: 0,
            cap,
            _borrow: PhantomData,
        }
    }

    /// Bytes delivered so far.
    pub(crate) fn filled(&self) -> usize {
        self.filled
    }

    /// Whether there is no room left.
    pub(crate) fn is_full(&self) -> bool {
        self.filled == self.cap
    }

    /// Room left after what was delivered.
    pub(crate) fn room(&self) -> usize {
        self.cap - self.filled
    }

    /// Calls `f` with the caller's memory for bytes `off..off + len` past what was
    /// delivered (clipped to the room), one contiguous piece at a time, in order.
    fn pieces(&self, off: usize, len: usize, mut f: impl FnMut(*mut u8, usize)) {
        let mut skip = self.filled + off;
        let mut left = len;
        for &(ptr, plen) in self.parts.as_slice() {
            if left == 0 {
                break;
            }
            if skip >= plen {
                skip -= plen;
                continue;
            }
            let n = (plen - skip).min(left);
            // `skip + n <= plen`: inside one of the caller's `IoSliceMut`s.
            f(ptr.wrapping_add(skip), n);
            left -= n;
            skip = 0;
        }
    }

    /// The contiguous memory at `off` bytes past what was delivered, and its length (0 if
    /// there is no room there).
    fn contiguous(&self, off: usize) -> (*mut u8, usize) {
        let mut first = (core::ptr::null_mut(), 0);
        self.pieces(off, usize::MAX, |p, n| {
            if first.1 == 0 {
                first = (p, n);
            }
        });
        first
    }

    /// Whether `ptr..ptr + len` lies inside one of the caller's buffers.
    fn holds(&self, ptr: *mut u8, len: usize) -> bool {
        let (a, e) = (ptr as usize, (ptr as usize).saturating_add(len));
        self.parts
            .as_slice()
            .iter()
            .any(|&(p, n)| a >= p as usize && e <= p as usize + n)
    }

    /// Copies `data` to `off` bytes past what was delivered (as much as fits); returns how
    /// much. Nothing is delivered by this ([`Self::put`] does).
    fn put_at(&mut self, off: usize, data: &[u8]) -> usize {
        let mut taken = 0;
        self.pieces(off, data.len(), |ptr, n| {
            // SAFETY: `ptr..ptr+n` lies in one of the caller's `IoSliceMut`s (`pieces`),
            // mutably borrowed for 'a (PhantomData); `data` is a different allocation (engine
            // buffers), so the ranges do not overlap.
            unsafe { core::ptr::copy_nonoverlapping(data.as_ptr().add(taken), ptr, n) };
            taken += n;
        });
        taken
    }

    /// Copies as much of `data` as fits and delivers it; returns how much.
    pub(crate) fn put(&mut self, data: &[u8]) -> usize {
        let taken = self.put_at(0, data);
        self.filled += taken;
        taken
    }
}

/// `Memory` over real memory for one session (see the module docs).
pub(crate) struct SessionMem<'r, 's, 'u> {
    reg: &'r Registry,
    /// Regions pinned in this session (each index once): the first one here (most sessions
    /// pin one region, for which a `Vec` would allocate), the others in `pins`.
    pin0: Cell<Option<Region>>,
    pins: RefCell<Vec<Region>>,
    sink: Option<&'s mut UserSink<'u>>,
    /// Stream data that did not fit into the sink, for the socketpair.
    pub(crate) overflow: Vec<u8>,
    /// The receive buffer being processed (`begin_input`): address and length, 0 if none.
    input: (usize, usize),
    /// Stream payloads past the sink that lie in the input buffer, left there (after every
    /// byte of `overflow`): the driver hands the buffer to the backlog ([`Self::end_input`]).
    refs: Vec<core::ops::Range<usize>>,
    /// Stream bytes delivered in this session (sink + overflow).
    pub(crate) stream_bytes: u64,
}

/// Whether `[addr, addr + len)` is a plausible range (non-null, no wrap).
pub(crate) fn plausible(addr: u64, len: usize) -> bool {
    len == 0 || (addr != 0 && addr.checked_add(len as u64).is_some())
}

impl<'r, 's, 'u> SessionMem<'r, 's, 'u> {
    /// A session over `reg`, with the caller's receive buffers if it is in a stream `recv`.
    pub(crate) fn new(reg: &'r Registry, sink: Option<&'s mut UserSink<'u>>) -> Self {
        SessionMem {
            reg,
            pin0: Cell::new(None),
            pins: RefCell::new(Vec::new()),
            sink,
            overflow: Vec::new(),
            input: (0, 0),
            refs: Vec::new(),
            stream_bytes: 0,
        }
    }

    /// The protocol is about to process `input` (a receive buffer the driver can give
    /// away): stream payloads in it past the sink are left in place, not copied.
    pub(crate) fn begin_input(&mut self, input: &[u8]) {
        self.input = (input.as_ptr() as usize, input.len());
    }

    /// After the input of [`Self::begin_input`] was processed: the ranges of it that hold
    /// stream data for the backlog, in order, after all of `overflow` (empty: the buffer
    /// may be reused).
    pub(crate) fn end_input(&mut self) -> Vec<core::ops::Range<usize>> {
        self.input = (0, 0);
        core::mem::take(&mut self.refs)
    }

    /// An emptied vector that [`Self::end_input`] returned, kept for the next input (of this
    /// session, or of the next one: [`Self::take_refs_spare`]): no allocation per message.
    pub(crate) fn recycle_refs(&mut self, mut v: Vec<core::ops::Range<usize>>) {
        v.clear();
        if self.refs.is_empty() && v.capacity() > self.refs.capacity() {
            self.refs = v;
        }
    }

    /// The vector for input ranges, to keep between sessions ([`Self::recycle_refs`]).
    pub(crate) fn take_refs_spare(&mut self) -> Vec<core::ops::Range<usize>> {
        debug_assert!(self.refs.is_empty(), "input ranges outside an input");
        core::mem::take(&mut self.refs)
    }

    /// Whether the session has the caller's buffers (a stream `recv`).
    pub(crate) fn has_sink(&self) -> bool {
        self.sink.is_some()
    }

    /// The caller's buffers, if stream data may be placed there: only while nothing waits
    /// for them in `overflow` or `refs` (the order of the stream).
    fn stream_sink(&self) -> Option<&UserSink<'u>> {
        self.sink
            .as_deref()
            .filter(|_| self.overflow.is_empty() && self.refs.is_empty())
    }

    /// Whether the caller's buffers (if any) are full.
    pub(crate) fn sink_full(&self) -> bool {
        self.sink.as_ref().is_some_and(|s| s.is_full())
    }

    /// The region under `index`, pinned for the rest of the session.
    fn pinned(&self, index: u32) -> Option<Region> {
        let first = self.pin0.get();
        if let Some(r) = first
            && r.stag.index() == index
        {
            return Some(r);
        }
        if let Some(r) = self.pins.borrow().iter().find(|r| r.stag.index() == index) {
            return Some(*r);
        }
        let r = self.reg.pin(index)?;
        if first.is_none() {
            self.pin0.set(Some(r));
        } else {
            self.pins.borrow_mut().push(r);
        }
        Some(r)
    }

    /// The pinned region of exactly `stag` (key included).
    fn pinned_exact(&self, stag: STag) -> Option<Region> {
        self.pinned(stag.index()).filter(|r| r.stag == stag)
    }

    /// Reads from `fd` (non-blocking) straight into the destination of a direct placement,
    /// at most `len` bytes, and any following bytes into `tail`. Returns `(placed, tail)`
    /// byte counts and whether the read got fewer bytes than it asked for (the input ended),
    /// or `Err(None)` if the target is gone (region deregistered: the driver reads into its
    /// buffer instead), `Err(Some(errno))` on a socket error.
    pub(crate) fn recv_direct(
        &self,
        fd: RawFd,
        target: DirectTarget,
        mut len: usize,
        tail: &mut [u8],
    ) -> Result<(usize, usize, bool), Option<Errno>> {
        let ptr = match target {
            DirectTarget::Region { stag, offset } => {
                let r = self.pinned_exact(stag).ok_or(None)?;
                assert!(
                    offset.checked_add(len as u64).is_some_and(|e| e <= r.len),
                    "direct placement outside a validated region"
                );
                (r.addr + offset) as *mut u8
            }
            DirectTarget::Local { addr } => {
                if !plausible(addr, len) {
                    return Err(None);
                }
                addr as *mut u8
            }
            DirectTarget::Stream { at, .. } => {
                let (ptr, room) = self.stream_sink().ok_or(None)?.contiguous(at);
                if room == 0 {
                    return Err(None);
                }
                len = len.min(room);
                ptr
            }
        };
        let mut iov = [
            sys::iovec(ptr, len),
            sys::iovec(tail.as_mut_ptr(), tail.len()),
        ];
        // The kernel writes into the region (pinned above, inside its bounds), into a posted
        // buffer the application lent us until the completion, or into the caller's receive
        // buffers (borrowed by the sink, within the room); `tail` is ours.
        let n = sys::recvmsg(fd, &mut iov, libc::MSG_DONTWAIT).map_err(Some)?;
        Ok((n.min(len), n.saturating_sub(len), n < len + tail.len()))
    }
}

/// Most payloads one chained stream read places ([`SessionMem::recv_stream_chain`]).
pub(crate) const STREAM_CHAIN_MAX: usize = 8;

/// Where a chained stream read put each payload: the caller's memory, as the sink gave it
/// when the read was planned. Valid for the session that made it (the sink's borrow).
pub(crate) struct StreamChain {
    parts: [(*mut u8, usize); STREAM_CHAIN_MAX],
    n: usize,
}

impl SessionMem<'_, '_, '_> {
    /// Contiguous room in the caller's buffers at `off` bytes past what was delivered (0
    /// without a sink, or while stream data waits outside it).
    pub(crate) fn stream_run(&self, off: usize) -> usize {
        self.stream_sink().map_or(0, |s| s.contiguous(off).1)
    }

    /// One `recvmsg` (non-blocking) for several stream FPDUs: payload `k` goes to
    /// `payloads[k] = (off, len)` (bytes past what the sink has delivered; each must lie in
    /// one contiguous piece of it), and the `tail_lens[k]` bytes after it into `tails`, one
    /// after the other. Returns the bytes read and where the payloads went.
    ///
    /// # Panics
    ///
    /// If there is no sink, or a payload does not fit where it is asked to go (a driver
    /// bug: the planner asks [`Self::stream_run`]).
    pub(crate) fn recv_stream_chain(
        &self,
        fd: RawFd,
        payloads: &[(usize, usize)],
        tails: &mut [u8],
        tail_lens: &[usize],
    ) -> Result<(usize, StreamChain), Errno> {
        assert!(payloads.len() == tail_lens.len() && payloads.len() <= STREAM_CHAIN_MAX);
        assert!(tail_lens.iter().sum::<usize>() <= tails.len());
        let sink = self
            .stream_sink()
            .expect("a chained read needs the stream sink");
        let mut chain = StreamChain {
            parts: [(core::ptr::null_mut(), 0); STREAM_CHAIN_MAX],
            n: payloads.len(),
        };
        let mut iov = [sys::iovec(core::ptr::null(), 0); 2 * STREAM_CHAIN_MAX];
        let mut t = tails.as_mut_ptr();
        for (k, (&(off, len), &tl)) in payloads.iter().zip(tail_lens).enumerate() {
            let (ptr, room) = sink.contiguous(off);
            assert!(room >= len, "chained payload outside the caller's buffer");
            chain.parts[k] = (ptr, len);
            iov[2 * k] = sys::iovec(ptr, len);
            iov[2 * k + 1] = sys::iovec(t, tl);
            // `tl` bytes of `tails` each, in all at most its length (asserted above).
            t = t.wrapping_add(tl);
        }
        // The kernel writes into the caller's receive buffers (borrowed by the sink, each
        // payload inside one contiguous piece of them) and into `tails` (ours).
        let n = sys::recvmsg(fd, &mut iov[..2 * payloads.len()], libc::MSG_DONTWAIT)?;
        Ok((n, chain))
    }

    /// Whether stream data would go next exactly where payload `k` of `chain` was read
    /// (everything before it was delivered as planned).
    pub(crate) fn stream_chain_at(&self, chain: &StreamChain, k: usize) -> bool {
        k < chain.n
            && self
                .stream_sink()
                .is_some_and(|s| s.contiguous(0).0 == chain.parts[k].0)
    }

    /// Appends the first `len` bytes read into payload `k`'s place to `out` (a guess that
    /// turned out wrong: those bytes go through the deframer instead).
    ///
    /// # Panics
    ///
    /// If `len` exceeds what was read there, or the place is not in the sink.
    pub(crate) fn stream_chain_copy(
        &self,
        chain: &StreamChain,
        k: usize,
        len: usize,
        out: &mut Vec<u8>,
    ) {
        let (ptr, plen) = chain.parts[..chain.n][k];
        assert!(len <= plen, "more than the chained payload");
        let sink = self
            .sink
            .as_deref()
            .expect("a chained read needs the stream sink");
        assert!(
            sink.holds(ptr, len),
            "chained payload outside the caller's buffer"
        );
        // SAFETY: `ptr..ptr+len` lies in one of the caller's buffers borrowed by the sink
        // for this session (checked just above), written by the chained `recvmsg`.
        out.extend_from_slice(unsafe { core::slice::from_raw_parts(ptr, len) });
    }
}

impl Drop for SessionMem<'_, '_, '_> {
    fn drop(&mut self) {
        for r in self
            .pin0
            .take()
            .into_iter()
            .chain(self.pins.get_mut().drain(..))
        {
            self.reg.unpin(r.stag.index());
        }
    }
}

impl Memory for SessionMem<'_, '_, '_> {
    fn region(&self, stag: STag) -> Option<RegionInfo> {
        self.pinned(stag.index()).map(|r| r.info())
    }

    fn write(&mut self, stag: STag, offset: u64, data: &[u8]) {
        // Deregistered (or re-registered) since the header was validated: discard.
        let Some(r) = self.pinned_exact(stag) else {
            return;
        };
        assert!(
            offset
                .checked_add(data.len() as u64)
                .is_some_and(|e| e <= r.len),
            "placement outside a validated region"
        );
        // SAFETY: the region is registered (the application guarantees its memory is valid
        // while registered) and pinned for this session, so deregistration cannot complete
        // while we write; the range is inside it (asserted); `data` is an engine buffer.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), (r.addr + offset) as *mut u8, data.len())
        };
    }

    fn read(&self, stag: STag, offset: u64, len: usize) -> &[u8] {
        if len == 0 {
            return &[];
        }
        let r = self
            .pinned_exact(stag)
            .expect("read of a region validated in this session");
        assert!(
            offset.checked_add(len as u64).is_some_and(|e| e <= r.len),
            "read outside a validated region"
        );
        // SAFETY: registered + pinned for the session (see `write`), range inside the region;
        // the slice does not outlive `&self`, i.e. the session and its pin.
        unsafe { core::slice::from_raw_parts((r.addr + offset) as *const u8, len) }
    }

    fn local(&self, addr: u64, len: usize) -> Option<&[u8]> {
        if len == 0 {
            return Some(&[]);
        }
        if !plausible(addr, len) {
            return None;
        }
        // SAFETY: a buffer named by a work request: the application lent it to us from the
        // post until the completion (verbs contract, documented on the posting functions).
        Some(unsafe { core::slice::from_raw_parts(addr as *const u8, len) })
    }

    fn local_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        if len == 0 {
            return Some(&mut []);
        }
        if !plausible(addr, len) {
            return None;
        }
        // SAFETY: as `local`; receive and Read sinks are lent for writing until completion.
        Some(unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len) })
    }

    fn invalidate(&mut self, stag: STag) -> Result<(), InvalidateError> {
        self.reg.invalidate(stag)?;
        for r in self
            .pin0
            .get_mut()
            .iter_mut()
            .chain(self.pins.get_mut().iter_mut())
        {
            if r.stag == stag {
                r.valid = false;
            }
        }
        Ok(())
    }

    fn deliver_stream(&mut self, data: &[u8]) {
        self.stream_bytes += data.len() as u64;
        let taken = match self.sink.as_deref_mut() {
            Some(s) if self.overflow.is_empty() && self.refs.is_empty() => s.put(data),
            _ => 0,
        };
        let rest = &data[taken..];
        if rest.is_empty() {
            return;
        }
        let (base, len) = self.input;
        let at = rest.as_ptr() as usize;
        if len > 0 && at >= base && at + rest.len() <= base + len {
            self.refs.push(at - base..at - base + rest.len());
            return;
        }
        // Bytes from elsewhere (the connection's stream buffer) after bytes left in the
        // input: the order is kept by copying those first.
        for r in self.refs.drain(..) {
            // SAFETY: `input` is the receive buffer `handle_input` is processing right now
            // (set by `begin_input`, alive and unchanged until `end_input`); `r` lies in it.
            let b = unsafe { core::slice::from_raw_parts((base + r.start) as *const u8, r.len()) };
            self.overflow.extend_from_slice(b);
        }
        self.overflow.extend_from_slice(rest);
    }

    fn stream_room(&self, at: usize) -> usize {
        self.stream_sink()
            .map_or(0, |s| s.room().saturating_sub(at))
    }

    fn stream_place(&mut self, at: usize, data: &[u8]) {
        let s = self.sink.as_deref_mut().expect("stream_room offered");
        let n = s.put_at(at, data);
        assert_eq!(n, data.len(), "stream_place beyond the room");
    }

    fn stream_unverified(&self, at: usize, len: usize, f: &mut dyn FnMut(&[u8])) {
        let s = self.sink.as_deref().expect("stream_room offered");
        s.pieces(at, len, |ptr, n| {
            // SAFETY: `ptr..ptr+n` lies in the caller's buffers (`pieces`), borrowed by the
            // sink for this session; bytes we placed there (written, so initialised).
            f(unsafe { core::slice::from_raw_parts(ptr, n) });
        });
    }

    fn stream_commit(&mut self, n: usize) {
        let s = self.sink.as_deref_mut().expect("stream_room offered");
        assert!(n <= s.room(), "stream_commit beyond the room");
        s.filled += n;
        self.stream_bytes += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddp_proto::ddp::Memory;

    /// Stream bytes past the sink that lie in the input stay there (as ranges); bytes from
    /// elsewhere after them turn those ranges into copies first, so the order holds.
    #[test]
    fn stream_past_the_sink_stays_in_the_input_in_order() {
        let reg = Registry::new();
        let input: Vec<u8> = (0..100u8).collect();
        let mut mem = SessionMem::new(&reg, None);
        mem.begin_input(&input);
        mem.deliver_stream(&input[10..20]);
        mem.deliver_stream(&input[30..40]);
        assert!(mem.overflow.is_empty());
        let refs = mem.end_input();
        assert_eq!(refs, vec![10..20, 30..40]);
        assert_eq!(mem.stream_bytes, 20);

        let mut mem = SessionMem::new(&reg, None);
        mem.begin_input(&input);
        mem.deliver_stream(&input[10..20]);
        mem.deliver_stream(b"elsewhere");
        mem.deliver_stream(&input[50..55]);
        let refs = mem.end_input();
        let mut want = input[10..20].to_vec();
        want.extend_from_slice(b"elsewhere");
        assert_eq!(
            mem.overflow, want,
            "the range before the outside bytes was copied"
        );
        assert_eq!(
            refs,
            vec![core::ops::Range { start: 50, end: 55 }],
            "later input bytes stay ranges, after the copies"
        );

        // with a sink: it is filled first, the rest stays in the input
        let mut out = [0u8; 4];
        let mut bufs = [std::io::IoSliceMut::new(&mut out)];
        let mut sink = UserSink::new(&mut bufs, 0);
        let mut mem = SessionMem::new(&reg, Some(&mut sink));
        mem.begin_input(&input);
        mem.deliver_stream(&input[0..10]);
        let refs = mem.end_input();
        assert_eq!(refs, vec![core::ops::Range { start: 4, end: 10 }]);
        drop(mem);
        assert_eq!(sink.filled(), 4);
        assert_eq!(out, [0, 1, 2, 3]);
    }
}
