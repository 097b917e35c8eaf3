//! One DDP socket's state and the protocol work on it: the non-blocking steps that both the
//! inline paths (application threads inside the library) and the progress thread run, always
//! under the connection's lock.
//!
//! # Sharing a connection between application threads and the progress thread
//!
//! All protocol state of a socket ([`ConnState`]: the `Connection`, the unsent tail, the
//! stream backlog, the MPA exchange) sits behind one mutex, and every system call made under
//! it is non-blocking, so the lock is only ever held for a bounded burst of work. Nobody
//! sleeps holding it: a thread that must wait (blocking `recv`, `send` on a full socket,
//! `wait_cq`, a blocking MPA exchange) releases it and `poll`s the TCP socket (and the
//! socketpair or the CQ eventfd), then takes it again and does the work itself.
//!
//! The progress thread watches the TCP socket and `eng_end` with `EPOLLONESHOT`. While an
//! application thread is inside the library on a socket (`inline > 0`), the progress thread
//! leaves that socket's TCP input to it: when a one-shot event fires it only notes that the
//! socket is disarmed. The last application thread to leave re-arms it (level-triggered
//! interest, so anything that arrived meanwhile fires at once): no lost wakeups, and no
//! spinning. Each waiting application thread does everything the progress thread would do
//! for that socket (reads input, flushes the tail, serves Read Requests), so nothing
//! stalls while the progress thread stands aside.
//!
//! # Where received stream data goes
//!
//! Payload of Sends that found no posted receive is the byte stream of plain read/write. It
//! goes straight into the buffers of an application thread inside `recv` when the socketpair
//! and the backlog are empty (checked under the lock, so the order holds), else to the
//! `backlog`, which is flushed into `eng_end` as far as the socketpair takes it. EOF (or the
//! end of the connection) becomes `shutdown(eng_end, SHUT_WR)` after the last byte.

use core::ops::Range;
use core::time::Duration;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::Instant;

use libc::c_int;

use ddp_proto::conn::{
    ConnConfig, Connection, DirectTarget, Event, MIN_MULPDU, RecvMode, Role, RxPlan,
    SMALL_SEND_MAX, SendFlags, State, Transmit, TxPiece, WcOpcode, WcStatus,
};
use ddp_proto::ddp::{Memory, Sge};
use ddp_proto::error::ProtoError;
use ddp_proto::mpa::deframer::UNTAGGED_HEADER_LEN;
use ddp_proto::mpa::markers::{MAX_ULPDU_LEN, fpdu_len_without_markers, mulpdu};
use ddp_proto::mpa::startup::Negotiated;

use crate::driver::mem::{STREAM_CHAIN_MAX, SessionMem, StreamChain};
use crate::driver::startup::{Startup, Step};
use crate::engine::cq::{LastTerminate, wc_from_completion};
use crate::sys::{self, Errno};

use super::Shared;

/// Stream data accepted for sending but not yet written, per socket, before a blocking
/// `send` waits (and a non-blocking one says `EAGAIN`).
pub(crate) const TX_STREAM_LIMIT: usize = 4 << 20;
/// `TCP_NOTSENT_LOWAT` of a socket's TCP connection while it carries only the byte stream of
/// plain `send`/`recv` ([`ConnState::lowat`]): at most this much framed data waits unsent in
/// the kernel before a writer waits for room. Without it a writer that outruns its reader
/// fills the send buffer (megabytes per socket), and on loopback with BBR the data then goes
/// out from the reader's CPU (its window updates and the pacing timers) and is read back
/// long after it was written: session 25 measured stream 64 KiB at 1,431–1,759 MB/s without
/// it and 2,501–3,891 with it (docs/performance.md). A posted work request (RDMA Writes in
/// particular, whose large writes it would cut into many; not a small Send, which takes its
/// own short path) and a Read Response owed end it.
pub(crate) const STREAM_NOTSENT_LOWAT: c_int = 64 * 1024;

/// Plain writes up to this size go out under Nagle's algorithm when the application wants it
/// ([`ConnState::nagle_for`]). iperf3 over DDP on loopback, Gbit/s with Nagle's algorithm
/// against without, by write size: 256 B 1.3/1.1, 2 KiB 8.3/6.7, 4 KiB 12.1/11.0, 8 KiB
/// 15.6/18.3, 16 KiB 17.5/25.2, 128 KiB 16.4/49.0.
pub(crate) const NAGLE_WRITE_MAX: usize = 4096;

/// The engine follows the application's Nagle's algorithm by default only on paths with an MSS
/// of at least this (loopback: 32 KiB at first, then 65,483), where TCP coalesces a stream of
/// small writes into large segments and the acknowledgements come at once. Across a veth pair
/// at MTU 1500 Nagle's algorithm and delayed acknowledgements stall TCP and DDP alike (iperf3
/// 256 B writes: TCP 0.40–2.11 Gbit/s, DDP with Nagle 0.36–0.38, without 1.15–1.24; 4 KiB:
/// TCP 1.74, DDP 0.97–1.03 against 8.68–8.98): there the engine sets `TCP_NODELAY` unless the
/// application asks for Nagle's algorithm after connecting.
pub(crate) const NAGLE_MIN_MSS: usize = 16 * 1024;
/// Bytes of the back-pressure token ([`ConnState::press`]): with the socketpair's send
/// buffer at the minimum (4,608 bytes), 512 are enough to make the app end unwritable.
const TOKEN_LEN: usize = 1024;

/// This process's back-pressure token: random, so that it is found again among other
/// bytes ([`ConnState::take_token`]).
fn token() -> &'static [u8; TOKEN_LEN] {
    static TOKEN: std::sync::OnceLock<[u8; TOKEN_LEN]> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        let mut b = [0u8; TOKEN_LEN];
        if sys::getrandom(&mut b).is_err() {
            // (no getrandom: a sequence from the clock; only its uniqueness matters)
            let mut x = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
                | 1;
            for c in b.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
            }
        }
        b
    })
}
/// Received stream data held by the engine beyond what the socketpair took, before it stops
/// reading the TCP socket (back-pressure to the peer): a process-wide budget shared by the
/// sockets ([`rx_backlog_limit`]), at most 4 MiB and at least 256 KiB per socket. With 4 MiB
/// each, 1000 streaming connections into one slower single-threaded reader grew the process to
/// 1.9 GB (the progress thread out-reads the application into 1000 backlogs) and stretched a
/// 2 s transfer to 5-9 s; 256 KiB for everyone cost one fast stream 10-15 % (more progress-thread
/// round trips to refill the socketpair), and 640 KiB each for 100 streams cost 8 % more CPU per
/// byte than 256 KiB (colder copies). The kernel's TCP receive buffer holds the rest.
const RX_BACKLOG_BUDGET: usize = 16 << 20;
const RX_BACKLOG_MAX: usize = 4 << 20;
const RX_BACKLOG_MIN: usize = 256 << 10;

/// One socket's backlog limit when the process has `sockets` DDP sockets (docs/performance.md).
pub(crate) fn rx_backlog_limit(sockets: usize) -> usize {
    (RX_BACKLOG_BUDGET / sockets.max(1)).clamp(RX_BACKLOG_MIN, RX_BACKLOG_MAX)
}

/// Wire bytes one `Transmit` of posted work may frame (the proto default is 256 KiB): with
/// full-size FPDUs one or two per `sendmsg`, each CRC computed just before the kernel copies
/// the same bytes. A 1 MiB RDMA Write sent whole was paced by BBR (one pacing timer per
/// 64 KiB in the sender's `tcp_write_xmit`, and a receiver woken more often): alternating
/// `xs-bw -m write -S 1M` runs gave 3,300-3,530 MB/s with 1 MiB per `Transmit`, 4,135-5,118
/// (median 4,890) with 64 KiB, TCP 4,790-5,500; with cubic the two were alike (docs/performance.md,
/// "Session 26"). Batches of small posts stay bounded by [`MORE_BATCH_WRS`] /
/// [`MORE_BATCH_BYTES`].
const MAX_TRANSMIT: usize = 64 << 10;
/// The same bound for Read Responses, which go out as a whole 1 MiB per `Transmit`: framed
/// in 64 KiB pieces, `ddp-readbw -S 1M` fell from a median of 3,640 MB/s (3,060-3,890) to
/// 2,700 (2,210-4,340), and 256 KiB or 512 KiB pieces were no better than 1 MiB. Why Read
/// Responses and Writes differ here is not pinned down.
const MAX_TRANSMIT_READ_RESPONSE: usize = 1 << 20;
/// A batch of `DDP_MORE` posts goes out when it has this many work requests (about what one
/// `sendmsg` of [`MAX_IOV`] iovecs carries for small messages) ...
const MORE_BATCH_WRS: u32 = 96;
/// ... or this many payload bytes.
const MORE_BATCH_BYTES: u64 = 64 << 10;
/// Completed stream Send buffers kept for reuse.
const STREAM_POOL: usize = 16;
/// Largest stream Send message the engine builds from one `send` call.
const STREAM_MSG_MAX: usize = 1 << 20;
/// Stream sends of at least this many bytes, with nothing queued ahead, are posted from the
/// caller's buffers and copied only if the kernel does not take them at once
/// ([`ConnState::accept_stream_lent`]); smaller ones are copied (cheaper than the checks).
const LEND_MIN: usize = 16 << 10;
/// Payloads of FPDUs whose ULPDU is shorter than this are not placed directly (a `recvmsg`
/// for the header, one for the payload) but copied out of large buffered reads, which carry
/// many of them: a system call costs about what copying 8–16 KiB does here. So on a
/// 1500-byte-MTU network, where the peer's FPDUs are MSS-sized (1,448 bytes), RDMA Writes and
/// posted Sends are copied out of 64 KiB reads (measured across a veth pair: RDMA Write 1 MiB
/// 0.26× TCP with a `recvmsg` per FPDU, 0.8–1.0× buffered), and so are jumbo frames' (8,948
/// bytes; session 39, 2 runs: RDMA Write 1 MiB 0.97× TCP either way, posted Sends 64 KiB
/// 0.97× placed, 1.02× copied). On loopback (FPDUs of 32–64 KiB) they are placed directly.
/// Session 39 raised it from 8 KiB: a 12 KiB ping-pong into posted receives went from 1.50×
/// TCP to 1.33× (docs/performance.md).
const DIRECT_MIN: usize = 16 << 10;
/// Buffered reads when direct placement is likely: a header and a little more.
const SMALL_READ: usize = 256;
/// Stream FPDUs with ULPDUs at least this large are placed straight into a reader's buffer
/// (one `recvmsg` each, with the next header); smaller ones are copied out of large buffered
/// reads, which carry many of them. Session 39 raised it from 16 KiB, with [`DIRECT_MIN`]:
/// a 16–24 KiB ping-pong with plain calls went from 1.39–1.85× TCP to 1.29–1.42×, stream
/// bandwidth with 16–64 KiB writes unchanged. (64 octets under 32 KiB: the FPDUs of a
/// connection's first 32 KiB segments, whose ULPDU is 32,762 octets on loopback, where TCP
/// starts with an MSS of half the first window, count as large: session 47.)
const STREAM_DIRECT_MIN: usize = (32 << 10) - 64;
/// Bytes sent before the EMSS is asked again the first time ([`ConnState::recheck_mss`]);
/// then at twice as much, [`MSS_CHECKS`] times in all (the last at 8 GiB).
const MSS_CHECK_FIRST: u64 = 128 << 10;
const MSS_CHECKS: u32 = 17;
/// An untagged FPDU's ULPDU_LENGTH and DDP/RDMAP header: what a read takes of the next FPDU
/// when the payload of that one may go straight into a reader's buffer.
const NEXT_HEADER: usize = 2 + 18;
/// Small FPDUs in a row that end a large stream (`ConnState::large_stream`).
const SMALL_RUN_END: u32 = 4;
/// The largest FPDU (on the wire) that a direct stream placement reads along with the tail
/// of the one it places, when one that size followed last time (`ConnState::follow`). A
/// wrong guess reads that much of a large FPDU's payload into our buffer instead (copied
/// once, the rest still placed directly).
const SMALL_FOLLOW_MAX: usize = 2048;

/// Whether at least `need` bytes wait in the receive queue of `fd`; `floor` is what is known
/// to wait (asked with `FIONREAD` only when it is not enough).
fn kernel_has(floor: &mut usize, fd: RawFd, need: usize) -> bool {
    if *floor < need {
        *floor = sys::inq(fd).unwrap_or(0);
    }
    *floor >= need
}
/// Buffered reads in stream mode.
pub(crate) const BIG_READ: usize = 64 * 1024;
/// Bytes read per session at most (then the thread comes back, fairness).
const READ_BUDGET: usize = 8 << 20;
/// Backlog ranges written into the socketpair per `sendmsg` at most.
const BACKLOG_IOV: usize = 16;
/// A receive buffer goes into the backlog as it is (no copy) when it carries at least this
/// many bytes of stream data for it; fewer are copied (a full buffer is not held for them).
const KEEP_READ_MIN: usize = 16 << 10;
/// Bytes read per session at most into a backlog held for a reader (`ConnState::hold`).
const HOLD_READ_BUDGET: usize = 256 << 10;
/// How long a closed socket may go without writing a byte to its TCP socket before the close
/// gives up: what is still queued completes with `FLUSH_ERR` and the connection is reset
/// (with bytes unsent, a FIN would pass a cut stream off as a whole one). A close that keeps
/// writing keeps going, however long the whole takes (a 1 MiB write to a slow reader); one
/// whose peer stops reading, or never answers an RDMA Read, ends after 2 to 4 s (the
/// deadline is looked at every `CLOSE_LINGER`). Our choice: TCP keeps such an orphaned
/// connection for minutes, but here each one holds up to [`TX_STREAM_LIMIT`] of queued
/// data in the process, and a close waiting for the peer's Read Responses would hold a
/// thread's `ddp_wait` as long (docs/engine.md, `close`). The MPA exchange of a socket
/// closed during it is bounded by its own timeout instead.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// Most iovecs per `sendmsg` (on the stack: 4 KiB; IOV_MAX is 1024). A `Transmit` holds
/// about two iovecs per small FPDU plus one per payload part, so one `sendmsg` carries up to
/// about 80 small messages; longer `Transmit`s take several.
const MAX_IOV: usize = 256;

/// What one entry of the send queue is, in posting order (every send-queue work request is
/// posted signaled, so each produces exactly one completion, in order).
#[derive(Debug, Clone, Copy)]
enum SqMeta {
    /// Stream data (plain `send`): the engine-owned buffer with this key.
    Stream { key: u64, len: usize },
    /// An application work request.
    App { wr_id: u64, signaled: bool },
}

/// Unsent bytes of a `Transmit`, from piece `piece`, byte `off` of it.
struct Tail {
    t: Transmit,
    piece: usize,
    off: usize,
}

thread_local! {
    /// The iovecs of [`write_tail`], one array per thread, reused (no allocation per call).
    static IOV: RefCell<Vec<libc::iovec>> = const { RefCell::new(Vec::new()) };
}

/// One `sendmsg` of (up to [`MAX_IOV`] pieces of) the tail. Returns its result and the bytes
/// asked for.
fn write_tail(
    fd: RawFd,
    tail: &Tail,
    mem: &SessionMem<'_, '_, '_>,
) -> (Result<usize, Errno>, usize) {
    let go = |iov: &mut Vec<libc::iovec>| {
        iov.clear();
        let mut asked = 0;
        for (i, p) in tail.t.pieces[tail.piece..].iter().take(MAX_IOV).enumerate() {
            let bytes = tail.t.piece_bytes(p, mem);
            let bytes = if i == 0 { &bytes[tail.off..] } else { bytes };
            iov.push(sys::iovec(bytes.as_ptr(), bytes.len()));
            asked += bytes.len();
        }
        let r = sys::sendmsg(fd, iov, libc::MSG_DONTWAIT);
        iov.clear(); // no pointers kept beyond the call
        (r, asked)
    };
    // (A signal handler re-entering the library while this thread's array is in use, or a
    // thread whose thread-locals are gone: a fresh array.)
    IOV.try_with(|cell| match cell.try_borrow_mut() {
        Ok(mut iov) => go(&mut iov),
        Err(_) => go(&mut Vec::new()),
    })
    .unwrap_or_else(|_| go(&mut Vec::new()))
}

/// Received stream data not yet in the socketpair.
#[derive(Default)]
pub(crate) struct Backlog {
    chunks: VecDeque<Chunk>,
    len: usize,
    /// One emptied chunk kept for the next session's overflow (`SessionMem::overflow`):
    /// a small message that is held for its reader (or goes to the socketpair) costs no
    /// allocation. Only chunks up to [`Backlog::SPARE_MAX`] bytes of capacity are kept.
    spare: Vec<u8>,
    /// Receive buffers whose data has all been taken ([`Backlog::push_read`]), for the
    /// engine's pool ([`Backlog::take_freed`]).
    freed: Vec<Vec<u8>>,
}

/// Bytes of the backlog: `first`, then `rest`, ranges of `buf`, in order. A chunk is either a
/// copy (one range, all of `buf`: no allocation besides `buf`) or a receive buffer itself
/// with the stream payloads it carried (no copy).
struct Chunk {
    buf: Vec<u8>,
    first: Range<usize>,
    rest: VecDeque<Range<usize>>,
    /// `buf` is a receive buffer (goes back to the engine's pool when emptied).
    read_buf: bool,
}

impl Backlog {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    const SPARE_MAX: usize = 64 << 10;

    fn push(&mut self, v: Vec<u8>) {
        if !v.is_empty() {
            self.len += v.len();
            let all = 0..v.len();
            self.chunks.push_back(Chunk {
                buf: v,
                first: all,
                rest: VecDeque::new(),
                read_buf: false,
            });
        } else {
            self.recycle(v);
        }
    }

    /// Appends the stream payloads `ranges` of the receive buffer `buf` (taking the buffer:
    /// the bytes are not copied).
    pub(crate) fn push_read(&mut self, buf: Vec<u8>, mut ranges: Vec<Range<usize>>) {
        ranges.retain(|r| !r.is_empty());
        let n: usize = ranges.iter().map(|r| r.len()).sum();
        if n == 0 {
            self.freed.push(buf);
            return;
        }
        self.len += n;
        let mut rest = VecDeque::from(ranges);
        let first = rest.pop_front().expect("n > 0");
        self.chunks.push_back(Chunk {
            buf,
            first,
            rest,
            read_buf: true,
        });
    }

    /// Receive buffers emptied since the last call (for `Engine::rx_buf_put`).
    pub(crate) fn take_freed(&mut self) -> Option<Vec<u8>> {
        self.freed.pop()
    }

    /// Keeps an emptied chunk's allocation for [`Backlog::take_spare`].
    fn recycle(&mut self, mut v: Vec<u8>) {
        if v.capacity() > self.spare.capacity() && v.capacity() <= Self::SPARE_MAX {
            v.clear();
            self.spare = v;
        }
    }

    /// An empty buffer for stream data (the kept allocation, if any).
    pub(crate) fn take_spare(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.spare)
    }

    fn front(&self) -> &[u8] {
        self.chunks
            .front()
            .map_or(&[][..], |c| &c.buf[c.first.clone()])
    }

    fn consume(&mut self, mut n: usize) {
        self.len -= n;
        while n > 0 {
            let c = self.chunks.front_mut().expect("consume within len");
            if n < c.first.len() {
                c.first.start += n;
                return;
            }
            n -= c.first.len();
            if let Some(r) = c.rest.pop_front() {
                c.first = r;
            } else if let Some(c) = self.chunks.pop_front() {
                if c.read_buf {
                    self.freed.push(c.buf);
                } else {
                    self.recycle(c.buf);
                }
            }
        }
    }

    /// The first bytes of the backlog as up to `out.len()` iovecs (one per range, in order);
    /// returns how many were filled.
    fn front_iov(&self, out: &mut [libc::iovec]) -> usize {
        let mut k = 0;
        for c in &self.chunks {
            for r in core::iter::once(&c.first).chain(&c.rest) {
                if k == out.len() {
                    return k;
                }
                out[k] = sys::iovec(c.buf[r.clone()].as_ptr(), r.len());
                k += 1;
            }
        }
        k
    }

    /// Copies as much as fits into `dst` and consumes it; returns how much (one buffer: the
    /// plain `recv`/`read`, with no sink to build).
    pub(crate) fn drain_to(&mut self, dst: &mut [u8]) -> usize {
        let mut total = 0;
        while total < dst.len() && !self.is_empty() {
            let f = self.front();
            let n = f.len().min(dst.len() - total);
            dst[total..total + n].copy_from_slice(&f[..n]);
            total += n;
            self.consume(n);
        }
        total
    }

    /// Copies up to `out`'s capacity into the caller's buffers (via `put`) and consumes it.
    pub(crate) fn drain_into(&mut self, mut put: impl FnMut(&[u8]) -> usize) -> usize {
        let mut total = 0;
        while !self.is_empty() {
            let n = put(self.front());
            if n == 0 {
                break;
            }
            total += n;
            self.consume(n);
        }
        total
    }
}

/// Runs `conn.handle_input` over `rx_buf[..n]`. Stream payloads it delivers past the
/// caller's buffers stay where they are (`SessionMem::begin_input`): the buffer then goes
/// into the backlog with their ranges (after the copies made before them) and a fresh one
/// takes its place. No copy of stream data on a held or socketpair-bound receive.
#[allow(clippy::too_many_arguments)]
fn input_from(
    conn: &mut Connection,
    backlog: &mut Backlog,
    rx_buf: &mut Vec<u8>,
    n: usize,
    mem: &mut SessionMem<'_, '_, '_>,
    sh: &Shared,
) {
    mem.begin_input(&rx_buf[..n]);
    let _ = conn.handle_input(&rx_buf[..n], mem);
    let refs = mem.end_input();
    let held: usize = refs.iter().map(|r| r.len()).sum();
    if held >= KEEP_READ_MIN {
        backlog.push(core::mem::take(&mut mem.overflow));
        let buf = core::mem::replace(rx_buf, sh.engine.rx_buf_take());
        backlog.push_read(buf, refs);
    } else {
        // A few bytes would pin a whole receive buffer: copy them (small messages).
        for r in &refs {
            mem.overflow.extend_from_slice(&rx_buf[r.clone()]);
        }
        mem.recycle_refs(refs);
    }
}

/// A read [`ConnState::small_round`] did not take all of: its receive buffer, with the
/// `len` octets it left at the front; the FPDUs it took and the read's length.
pub(crate) struct SmallRest {
    buf: Vec<u8>,
    len: usize,
    taken: usize,
    read: usize,
}

/// What [`ConnState::small_round`] did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SmallRound {
    /// The whole round: only the hold and the epoll interest are left to bring in line.
    Done,
    /// The general round must run (`read`: and read the TCP socket).
    General { read: bool },
}

/// What a buffered read of `r` octets that completed `headers` FPDUs says of the stream:
/// large FPDUs (placed directly from now on) or small ones ([`SMALL_RUN_END`] of them in a
/// row end a large stream).
fn read_shape(large_stream: &mut bool, small_run: &mut u32, headers: usize, r: usize) {
    if headers >= 1 && r / headers >= STREAM_DIRECT_MIN {
        (*large_stream, *small_run) = (true, 0);
    } else if headers >= 1 {
        *small_run += headers as u32;
        if *small_run >= SMALL_RUN_END {
            *large_stream = false;
        }
    }
}

/// A read of the TCP socket found its end (`closing`: we shut down our side, or a close is
/// under way).
fn input_ended(rx_eof: &mut bool, stream_mode: bool, closing: bool, conn: &mut Connection) {
    *rx_eof = true;
    let pure_stream = stream_mode
        && conn.is_idle()
        && conn.recvs_posted() == 0
        && conn.reads_outstanding() == 0
        && conn.reads_owed() == 0;
    // A clean EOF (between messages) on a pure byte stream is a half-close: we may still
    // send (our choice; see the crate docs). Otherwise the stream is over (mid-message: lost).
    if !pure_stream || closing {
        conn.handle_eof();
    }
}

/// A read of the TCP socket failed: the input ends there, with the error for `SO_ERROR`.
fn input_failed(rx_eof: &mut bool, so_error: &mut i32, conn: &mut Connection, e: Errno) {
    *rx_eof = true;
    if *so_error == 0 {
        *so_error = e.0;
    }
    conn.handle_eof();
}

/// Small FPDUs a chained read takes between two payloads at most ...
const GAP_SMALL_MAX: usize = 4;
/// ... and their octets at most (so that what one gap delivers stays far below
/// [`KEEP_READ_MIN`]: feeding a gap never hands the receive buffer to the backlog).
const GAP_SMALL_OCTETS: usize = SMALL_FOLLOW_MAX;
const _: () = assert!(GAP_SMALL_OCTETS + 64 < KEEP_READ_MIN);
const _: () = assert!(STREAM_CHAIN_MAX * (GAP_SMALL_OCTETS + 8 + NEXT_HEADER) <= BIG_READ);

/// The octets a chained read takes between two payloads into our buffer: the first one's
/// pad and CRC, whole small FPDUs, the next one's header.
#[derive(Clone, Copy, Default)]
struct Gap {
    len: usize,
    /// Pad and CRC of the payload before.
    trail: usize,
    /// The ULPDU_LENGTHs expected: of the small FPDUs, then of the next header (if any).
    ulens: [u16; GAP_SMALL_MAX + 1],
    count: usize,
}

impl Gap {
    /// Whether `b` (the whole gap) holds the FPDUs expected: then feeding it delivers at
    /// most the small FPDUs' payloads, and no byte of the next payload.
    fn as_planned(&self, b: &[u8]) -> bool {
        let mut at = self.trail;
        for &u in &self.ulens[..self.count] {
            // ULPDU_LENGTH, then the DDP control octet: T clear (untagged).
            if b.len() < at + 3
                || u16::from_be_bytes([b[at], b[at + 1]]) != u
                || b[at + 2] & 0x80 != 0
            {
                return false;
            }
            at += fpdu_len_without_markers(usize::from(u));
        }
        true
    }
}

/// A chained read: the payloads of several large stream FPDUs in one `recvmsg`, each at its
/// place in the reader's buffer, the gaps between them into ours ([`read_chain`]).
struct ChainPlan {
    n: usize,
    /// Where each payload goes (bytes past what the reader's buffer has) and its length.
    payloads: [(usize, usize); STREAM_CHAIN_MAX],
    /// The gap after each payload.
    gaps: [Gap; STREAM_CHAIN_MAX],
}

impl ChainPlan {
    fn asked(&self) -> usize {
        (0..self.n)
            .map(|k| self.payloads[k].1 + self.gaps[k].len)
            .sum()
    }
}

/// The stream FPDUs' payloads to expect next, if every message is as long as the last one
/// that ended and is cut like the ones before (full segments, then the rest).
struct Predict {
    /// Octets of the current message so far, and its length.
    pos: usize,
    len: usize,
    full: usize,
    msg: usize,
}

impl Predict {
    fn next(&mut self) -> usize {
        if self.pos == self.len {
            (self.pos, self.len) = (0, self.msg);
        }
        let p = self.full.min(self.len - self.pos);
        self.pos += p;
        p
    }
}

/// Plans a chained read from the stream FPDU whose payload is next (`left` octets of it to
/// place at `at` in the reader's buffer, `to_end` to the end of the FPDU), when the messages
/// so far let the next FPDUs be predicted (see [`Predict`]): as many large ones as the
/// reader's buffer has room for (each payload in one contiguous piece, the small FPDUs'
/// payloads between them too) and the kernel already holds whole. `None` for fewer than two.
fn plan_chain(
    conn: &Connection,
    mem: &SessionMem<'_, '_, '_>,
    (at, left, to_end): (usize, usize, usize),
    floor: &mut usize,
    fresh: bool,
    fd: RawFd,
) -> Option<ChainPlan> {
    let (mo, seg, last) = conn.rx_stream_segment()?;
    let (full, msg) = conn.rx_stream_shape();
    // (each payload goes to one contiguous piece of the reader's buffers)
    if full < STREAM_DIRECT_MIN || msg == 0 || left == 0 || mem.stream_run(at) < left {
        return None;
    }
    let end = mo + seg;
    let len = if last {
        end
    } else if msg > end {
        msg // (the message is as long as the last one: a guess, checked as it goes)
    } else {
        return None;
    };
    let mut pr = Predict {
        pos: end,
        len,
        full,
        msg,
    };
    let room = mem.stream_room(0);
    let mut c = ChainPlan {
        n: 1,
        payloads: [(0, 0); STREAM_CHAIN_MAX],
        gaps: [Gap::default(); STREAM_CHAIN_MAX],
    };
    c.payloads[0] = (at, left);
    let mut trail = to_end - left;
    let mut off = at + left; // (in the reader's buffer, after the last payload planned)
    let mut wire = left; // (octets from here through the last payload planned)
    // (octets from here through the small FPDUs after payload k)
    let mut need = [0usize; STREAM_CHAIN_MAX];
    loop {
        let k = c.n - 1;
        let mut g = Gap {
            len: trail,
            trail,
            ..Gap::default()
        };
        let big = loop {
            let p = pr.next();
            if p >= STREAM_DIRECT_MIN {
                break Some(p);
            }
            let w = fpdu_len_without_markers(p + UNTAGGED_HEADER_LEN);
            if g.count == GAP_SMALL_MAX || g.len - trail + w > GAP_SMALL_OCTETS {
                break None;
            }
            g.ulens[g.count] = (p + UNTAGGED_HEADER_LEN) as u16;
            g.count += 1;
            g.len += w;
            off += p;
        };
        need[k] = wire + g.len;
        if let Some(p) = big {
            g.ulens[g.count] = (p + UNTAGGED_HEADER_LEN) as u16;
            g.count += 1;
            g.len += NEXT_HEADER;
        }
        c.gaps[k] = g;
        let Some(p) = big else { break };
        if c.n == STREAM_CHAIN_MAX || off + p > room || mem.stream_run(off) < p {
            break;
        }
        c.payloads[c.n] = (off, p);
        c.n += 1;
        wire = need[k] + NEXT_HEADER + p;
        off += p;
        let ulen = p + UNTAGGED_HEADER_LEN;
        trail = fpdu_len_without_markers(ulen) - 2 - ulen;
    }
    // (no `FIONREAD` when the reader's buffer has room for one payload only)
    if c.n < 2 {
        return None;
    }
    // (`fresh`: the kernel said how much waits a moment ago; not asked again)
    if !fresh {
        kernel_has(floor, fd, need[c.n - 1]);
    }
    while c.n >= 2 && need[c.n - 1] > *floor {
        c.n -= 1;
    }
    (c.n >= 2).then_some(c)
}

/// Reads what `c` planned with one `recvmsg` and feeds it to the connection in order: each
/// payload as placed where it went, each gap as input. A payload counts as placed only if
/// the connection is at its start and would put it exactly there; a gap is fed only if it
/// holds the FPDUs expected, so that what it delivers cannot reach into the next payload's
/// place. Otherwise everything from there on is copied back out of the reader's buffer and
/// fed as input (the deframer does with it what it does with any input: places it, or
/// finds the stream broken and ends it with a Terminate). Returns the octets read.
#[allow(clippy::too_many_arguments)]
fn read_chain(
    conn: &mut Connection,
    backlog: &mut Backlog,
    rx_buf: &mut Vec<u8>,
    mem: &mut SessionMem<'_, '_, '_>,
    c: &ChainPlan,
    counts: &mut RxCounts,
    sh: &Shared,
) -> Result<usize, Errno> {
    let gaps: usize = c.gaps[..c.n].iter().map(|g| g.len).sum();
    let mut lens = [0usize; STREAM_CHAIN_MAX];
    for (l, g) in lens.iter_mut().zip(&c.gaps[..c.n]) {
        *l = g.len;
    }
    let (n, chain) = mem.recv_stream_chain(
        sh.tcp_fd,
        &c.payloads[..c.n],
        &mut rx_buf[..gaps],
        &lens[..c.n],
    )?;
    let mut rest = n;
    let mut gap_at = 0;
    for k in 0..c.n {
        if rest == 0 {
            break;
        }
        let len = c.payloads[k].1;
        let at_start = || {
            matches!(conn.rx_plan(), RxPlan::Direct {
                target: DirectTarget::Stream { at: 0, left },
                len: run,
            } if left == len && run == len)
        };
        if k > 0 && !(at_start() && mem.stream_chain_at(&chain, k)) {
            let back = chain_back(mem, &chain, c, rx_buf, 2 * k, rest);
            counts.chain_misses += 1;
            feed(conn, backlog, rx_buf, mem, &back, sh);
            return Ok(n);
        }
        let placed = rest.min(len);
        conn.placed_direct(placed, mem);
        if k > 0 {
            counts.chained += 1;
        }
        rest -= placed;
        let g = rest.min(c.gaps[k].len);
        rest -= g;
        if rest > 0 && !c.gaps[k].as_planned(&rx_buf[gap_at..gap_at + g]) {
            // (the gap is whole: bytes came after it)
            let back = chain_back(mem, &chain, c, rx_buf, 2 * k + 1, g + rest);
            counts.chain_misses += 1;
            feed(conn, backlog, rx_buf, mem, &back, sh);
            return Ok(n);
        }
        if g > 0 {
            rx_buf.copy_within(gap_at..gap_at + g, 0);
            input_from(conn, backlog, rx_buf, g, mem, sh);
        }
        gap_at += c.gaps[k].len;
    }
    Ok(n)
}

/// The first `len` octets a chained read put into its pieces from piece `from` on (piece
/// `2k` is payload `k`, `2k + 1` the gap after it), in stream order.
fn chain_back(
    mem: &SessionMem<'_, '_, '_>,
    chain: &StreamChain,
    c: &ChainPlan,
    rx_buf: &[u8],
    from: usize,
    mut len: usize,
) -> Vec<u8> {
    let mut back = Vec::with_capacity(len);
    let mut gap_at: usize = c.gaps[..from / 2].iter().map(|g| g.len).sum();
    for piece in from..2 * c.n {
        let j = piece / 2;
        if piece % 2 == 0 {
            let p = len.min(c.payloads[j].1);
            mem.stream_chain_copy(chain, j, p, &mut back);
            len -= p;
        } else {
            let g = len.min(c.gaps[j].len);
            back.extend_from_slice(&rx_buf[gap_at..gap_at + g]);
            len -= g;
            gap_at += c.gaps[j].len;
        }
    }
    back
}

/// Feeds `bytes` to the connection through `rx_buf`, as if read there.
fn feed(
    conn: &mut Connection,
    backlog: &mut Backlog,
    rx_buf: &mut Vec<u8>,
    mem: &mut SessionMem<'_, '_, '_>,
    bytes: &[u8],
    sh: &Shared,
) {
    for part in bytes.chunks(BIG_READ) {
        rx_buf[..part.len()].copy_from_slice(part);
        input_from(conn, backlog, rx_buf, part.len(), mem, sh);
    }
}

/// How a socket's input was read ([`super::socket::DdpSocket::counters`]; not in the
/// exsock-stat surface).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RxCounts {
    /// Reads of the TCP socket.
    pub(crate) reads: u64,
    /// Stream payloads placed by chained reads besides the first of each ([`read_chain`]).
    pub(crate) chained: u64,
    /// Chained reads whose guess was wrong somewhere (what followed was copied back out).
    pub(crate) chain_misses: u64,
    /// Rounds done whole by [`ConnState::small_round`] and [`ConnState::posted_round`].
    pub(crate) small_rounds: u64,
}

/// The phase of a socket.
pub(crate) enum Phase {
    /// MPA exchange under way (non-blocking sockets: served by the progress thread).
    Startup(Box<Startup>),
    /// Full operation (or closing, or ended: see `conn.state()`).
    Open,
    /// The MPA exchange failed (`so_error` says why).
    Failed,
}

/// The state of one DDP socket (see the module docs).
pub(crate) struct ConnState {
    pub(crate) phase: Phase,
    pub(crate) conn: Option<Connection>,
    pub(crate) neg: Option<Negotiated>,
    pub(crate) role: Role,
    pub(crate) mulpdu: usize,
    /// `bytes_tx` at which the EMSS is asked again ([`ConnState::recheck_mss`]).
    mss_check_at: u64,
    tail: Option<Tail>,
    /// Work requests (and their payload bytes) left queued by `DDP_MORE` posts.
    deferred_wrs: u32,
    deferred_bytes: u64,
    /// A written `Transmit` kept for the next one (its buffers reused: no allocation per
    /// message on the send path).
    spare_tx: Transmit,
    /// FPDU bytes read during the MPA exchange, not yet fed.
    pending_in: Vec<u8>,
    /// What [`ConnState::small_round`] read and did not take, for `pump_input`.
    small_rest: Option<SmallRest>,
    /// No receive was ever posted: Sends without one are the plain byte stream.
    pub(crate) stream_mode: bool,
    /// The TCP socket has [`STREAM_NOTSENT_LOWAT`] (set when the connection opens; taken
    /// back, once, by [`ConnState::end_lowat`]).
    lowat: bool,
    /// The TCP socket has `TCP_NODELAY` from the engine (set when the socket was made, or by
    /// [`ConnState::set_nodelay`]); until then Nagle's algorithm is the application's choice
    /// (`Options::tcp_nagle`).
    pub(crate) nodelay: bool,
    /// The application wants Nagle's algorithm (it did not set `TCP_NODELAY`) and the engine
    /// follows it write by write ([`ConnState::nagle_for`]).
    pub(crate) app_nagle: bool,
    /// While [`ConnState::app_nagle`]: the TCP socket has Nagle's algorithm on now.
    nagle_on: bool,
    /// `TCP_NODELAY` as the application has it (what `getsockopt` reports until
    /// [`ConnState::nodelay`]).
    app_nodelay: bool,
    /// The application set no `TCP_NODELAY` before the socket was made: whether to follow its
    /// Nagle's algorithm is decided when the connection opens, by the MSS then
    /// ([`ConnState::follow_app_nagle`]).
    nagle_pending: bool,
    /// An RDMA Write was placed since the last stream data: prefer small reads.
    tagged_seen: bool,
    /// The last FPDU whose payload could have been placed directly was small ([`DIRECT_MIN`]):
    /// messages are small, read in large buffered bites.
    small_rx: bool,
    pub(crate) backlog: Backlog,
    /// This socket's backlog limit, as of its last `pump_input` ([`rx_backlog_limit`]).
    rx_limit: usize,
    /// Stream bytes written into `eng_end` so far, and read back from `app_end` by intercepted
    /// receives ([`ConnState::pair_maybe_readable`]).
    pub(crate) pair_sent: u64,
    pub(crate) pair_read: u64,
    /// The backlog is held back from the socketpair for an application thread that was told
    /// (by an inline `poll`) that the app fd is readable: its next `recv` copies the bytes
    /// straight from the backlog (no `sendmsg(eng_end)` + `recvmsg(app_end)`). Only set while
    /// the socketpair is empty, so the order holds; ended by [`super::Shared::end_hold`].
    pub(crate) hold: bool,
    /// With `hold`: the reader was told the socket is readable while the stream data it
    /// will read still waits in the kernel, a whole FPDU's worth at least
    /// ([`ConnState::stream_waiting`]): its own `recv` places it straight into its buffer.
    /// The progress thread leaves the input alone meanwhile; [`super::Shared::end_hold`]
    /// reads it if the reader does not come.
    pub(crate) announced: bool,
    /// How many times the socket was announced readable so (`announced`; with `bytes_rx`,
    /// what an edge-triggered epoll registration sees change).
    pub(crate) announces: u64,
    /// Bytes known to wait in the TCP socket's receive queue (a lower bound: the last
    /// `FIONREAD` less what was read since).
    inq_floor: usize,
    /// `inq_floor` is what the kernel said with the last read (`TCP_CM_INQ`), made just
    /// before a reader was told of stream data (`stream_waiting`): the reader's first read
    /// plans with it instead of asking again (what arrived in between is read next time).
    inq_fresh: bool,
    /// The stream's FPDUs were large lately (see [`STREAM_DIRECT_MIN`]): a reader's
    /// receive reads a header first, so that the payload can go straight into its buffer.
    /// A stream starts so ([`SMALL_RUN_END`] small FPDUs end it, so a short exchange
    /// before bulk data does not). Starting small, each socket's first input was a 64 KiB
    /// buffered read that a poll or an epoll group's service kept for the reader; 1,000
    /// connections starting at once thus held 64 MB of fresh buffers (page faults, copies)
    /// while their peers' windows closed (about 2,000 zero windows and 3,000 spurious loss
    /// probes in the first half second of `xs-conns -n 1000`, and BBR left its start-up on
    /// half of the senders' connections for good). Starting large, the first read is the
    /// reader's own; a small-message stream pays a header read on each of its first
    /// messages, until the mode ends (docs/performance.md, "Session 47").
    large_stream: bool,
    /// In `Engine::held` (see `Shared::mark_held`).
    pub(crate) in_held: bool,
    /// The input-range vector kept between sessions (`SessionMem::recycle_refs`).
    pub(crate) spare_refs: Vec<Range<usize>>,
    /// Small FPDUs read in a row since the last large one: [`SMALL_RUN_END`] of them end
    /// `large_stream` (a large message ends with at most one small FPDU).
    small_run: u32,
    /// Octets of the small FPDU that followed the last stream FPDU placed straight into a
    /// reader's buffer (its wire length, [`SMALL_FOLLOW_MAX`] at most; 0: a large one
    /// followed). A write that is not a multiple of the FPDU payload ends in one (64 KiB:
    /// 65,456 + 80 at the loopback MULPDU), so the next such placement reads it, and the
    /// next header, in the same `recvmsg`: one read per message instead of two.
    follow: usize,
    /// How the input was read.
    pub(crate) rx_counts: RxCounts,
    /// When a hold with no application thread inside ends ([`super::LAZY_REARM`] after the
    /// last one left; `Some` while the socket counts in the process's held sockets).
    pub(crate) hold_until: Option<Duration>,
    /// Completions pushed now need no eventfd signal: the thread in this session takes them
    /// itself right after (`wait_cq`; see `Shared::push_wc`).
    pub(crate) defer_wc: bool,
    sq_meta: VecDeque<SqMeta>,
    /// The buffers of posted stream Sends, in posting order (their completions come in
    /// that order).
    stream_bufs: VecDeque<(u64, Vec<u8>)>,
    /// Stream Sends posted straight from the caller's buffers in the `send` running now
    /// (`(addr, len, key)`; see [`ConnState::accept_stream_lent`]): each is copied, or known
    /// written, before that `send` returns ([`ConnState::end_lent`]).
    lent: Vec<(u64, usize, u64)>,
    /// Buffers of completed stream Sends, for reuse (no allocation per `write`).
    stream_pool: Vec<Vec<u8>>,
    next_stream_key: u64,
    /// Stream bytes posted and not yet completed (written).
    pub(crate) stream_queued: usize,
    /// Stream bytes written by the application before the MPA exchange completed.
    pre_open_tx: Vec<u8>,
    /// A nonblocking send found the engine's send queue full and wrote into the socketpair
    /// instead (so the app fd's POLLOUT shows the back-pressure): later sends go the same
    /// way, behind those bytes, until `eng_end` has been drained.
    pub(crate) spilled: bool,
    /// A back-pressure token sits in the socketpair ([`ConnState::press`]): the app fd
    /// reports no `POLLOUT` until what the kernel refused has been written.
    pub(crate) pressed: bool,
    /// The app end's `SO_SNDBUF` as the kernel reports it (doubled), read at the first
    /// [`ConnState::press`]; 0 before.
    app_sndbuf: c_int,
    /// The TCP fd stays with the application threads (disarmed in the progress thread's
    /// epoll) until this time although none is inside the library ([`super::LAZY_REARM`]).
    pub(crate) lazy_until: Option<Duration>,
    /// An application thread left the library on this socket again while it was held
    /// lazily: the hold goes on, and the progress thread's next visit at or after
    /// `lazy_until` moves it to [`super::LAZY_REARM`] from then. Renewing by a flag instead of
    /// a new `lazy_until` saves a clock read on every visit of a request-response loop; the
    /// hold then ends at most one visit interval after the last visit, as before.
    pub(crate) lazy_renewed: bool,
    /// A reader was told of held data again while `hold_until` was set: as `lazy_renewed`
    /// for `hold_until` (the progress thread's next visit at or after it moves it on from
    /// then), which saves a clock read each time a request-response loop's `poll` finds or
    /// makes a hold.
    pub(crate) hold_renewed: bool,
    /// Registered interest of the TCP fd in the progress thread's epoll (0 = disarmed).
    pub(crate) tcp_armed: u32,
    pub(crate) eng_armed: u32,
    /// What a running MPA exchange waits for (`POLLIN`/`POLLOUT`).
    pub(crate) startup_events: i16,
    pub(crate) registered: bool,
    /// The epoll group whose shadow holds the TCP fd instead of the progress thread's set
    /// ([`crate::driver::group`]).
    pub(crate) group: Option<std::sync::Arc<crate::driver::group::Group>>,
    /// Application threads inside the library on this socket.
    pub(crate) inline: u32,
    /// Of those, threads waiting in `poll`/`epoll_wait` ([`super::socket::PollWait`]): they
    /// read the input when the TCP fd fires, but a tail another thread leaves unsent is not
    /// theirs to watch, so the progress thread keeps `EPOLLOUT` interest for it
    /// ([`super::Shared::rearm`]).
    pub(crate) pollers: u32,
    /// A thread waiting in `poll` uses the socket's wait set (`Shared::wait_set`): the
    /// others wait with their own `poll` meanwhile.
    pub(crate) wait_set_busy: bool,
    /// The application asks this socket's readiness with `poll`/`select` (which report data
    /// held for the reader themselves: `DdpSocket::poll_held`), not with `epoll` (whose
    /// readiness is the kernel's, of the socketpair): only then may a `recv` hold what it
    /// does not take for the next one. Set by the poll paths, cleared by the epoll paths.
    pub(crate) poll_reader: bool,
    /// TCP input ended (EOF or error).
    pub(crate) rx_eof: bool,
    /// `eng_end` reported EOF (the application shut down its side with a raw syscall, or
    /// every process closed the app end).
    eng_rd_eof: bool,
    /// The application closed its last fd of the socket while another process still had the
    /// socketpair's app end (a forked child, an exec'd program, a raw `dup`, an fd passed in
    /// `SCM_RIGHTS`): the connection carries on as a byte stream served here, as a TCP
    /// socket does while any process has it, until `eng_end` reports the hang-up
    /// ([`super::Shared::close_if_released`]).
    pub(crate) others_hold: bool,
    /// `shutdown(eng_end, SHUT_WR)` done.
    pub(crate) eng_shut: bool,
    /// `Event::Closed` seen: the protocol stream is over.
    pub(crate) conn_done: bool,
    /// The application shut down writing: flush, then TCP `SHUT_WR`.
    pub(crate) want_shut_wr: bool,
    pub(crate) tcp_shut_wr: bool,
    /// The application asked for `SHUT_RD`.
    pub(crate) rd_shut: bool,
    /// Pending socket error (`SO_ERROR`).
    pub(crate) so_error: i32,
    pub(crate) last_term: Option<LastTerminate>,
    pub(crate) bytes_tx: u64,
    pub(crate) bytes_rx: u64,
    /// The application closed the socket ([`super::Shared::close_now`]): what it wrote is
    /// still sent, the MPA exchange finished first if it was under way, then the graceful
    /// close; given up at this deadline if no byte was written since the last one
    /// (`close_mark`; see [`CLOSE_LINGER`]).
    pub(crate) close_deadline: Option<Instant>,
    /// `tx_written` when the close deadline was last set.
    pub(crate) close_mark: u64,
    /// Bytes written to the TCP socket by [`ConnState::flush_tx`]: a closing socket's
    /// progress.
    pub(crate) tx_written: u64,
    /// `SO_LINGER` of the TCP socket when the application closed it (`None`: off).
    pub(crate) linger: Option<Duration>,
    /// The connection ends with a reset, not a FIN ([`super::Shared::finalize`]): the close
    /// was an abort (`SO_LINGER` 0) or gave up with bytes unsent.
    pub(crate) reset: bool,
    /// Epoll registrations removed; nothing more happens on this socket.
    pub(crate) finalized: bool,
}

/// What an operation on an ended connection says (`sockopt_ext.h`: `EPIPE`; why it ended
/// is in `SO_ERROR` / `DDP_CONN_INFO`).
pub(crate) fn ended_errno(_st: &ConnState) -> Errno {
    Errno::EPIPE
}

impl ConnState {
    pub(crate) fn new(phase: Phase, role: Role) -> ConnState {
        ConnState {
            phase,
            conn: None,
            neg: None,
            role,
            mulpdu: 0,
            mss_check_at: MSS_CHECK_FIRST,
            tail: None,
            deferred_wrs: 0,
            deferred_bytes: 0,
            spare_tx: Transmit::default(),
            pending_in: Vec::new(),
            small_rest: None,
            stream_mode: true,
            lowat: false,
            nodelay: true,
            app_nagle: false,
            nagle_on: false,
            app_nodelay: true,
            nagle_pending: false,
            tagged_seen: false,
            small_rx: false,
            backlog: Backlog::default(),
            rx_limit: RX_BACKLOG_MIN,
            pair_sent: 0,
            pair_read: 0,
            hold: false,
            announced: false,
            announces: 0,
            large_stream: true,
            spare_refs: Vec::new(),
            in_held: false,
            small_run: 0,
            follow: 0,
            rx_counts: RxCounts::default(),
            inq_floor: 0,
            inq_fresh: false,
            poll_reader: false,
            hold_until: None,
            hold_renewed: false,
            defer_wc: false,
            sq_meta: VecDeque::new(),
            stream_bufs: VecDeque::new(),
            lent: Vec::new(),
            stream_pool: Vec::new(),
            next_stream_key: 0,
            stream_queued: 0,
            pre_open_tx: Vec::new(),
            spilled: false,
            pressed: false,
            app_sndbuf: 0,
            lazy_until: None,
            lazy_renewed: false,
            tcp_armed: 0,
            eng_armed: 0,
            startup_events: libc::POLLOUT,
            registered: false,
            group: None,
            inline: 0,
            pollers: 0,
            wait_set_busy: false,
            rx_eof: false,
            eng_rd_eof: false,
            others_hold: false,
            eng_shut: false,
            conn_done: false,
            want_shut_wr: false,
            tcp_shut_wr: false,
            rd_shut: false,
            so_error: 0,
            last_term: None,
            bytes_tx: 0,
            bytes_rx: 0,
            close_deadline: None,
            close_mark: 0,
            tx_written: 0,
            linger: None,
            reset: false,
            finalized: false,
        }
    }

    /// Whether the connection is in full operation and accepts new work.
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open)
            && self.conn.as_ref().is_some_and(|c| c.state() == State::Open)
    }

    /// Whether the connection can carry no more of the application's bytes: the MPA exchange
    /// failed, or the protocol stream is over or no longer open.
    pub(crate) fn stream_over(&self) -> bool {
        match self.phase {
            Phase::Startup(_) => false,
            Phase::Failed => true,
            Phase::Open => self.conn_done || !self.is_open(),
        }
    }

    /// Whether the application's end of the socketpair is as the engine left it: not shut
    /// down by a raw syscall (`eng_end` saw no EOF).
    pub(crate) fn eng_open(&self) -> bool {
        !self.eng_rd_eof
    }

    /// Whether the MPA exchange is still running.
    pub(crate) fn is_connecting(&self) -> bool {
        matches!(self.phase, Phase::Startup(_))
    }

    /// Whether unsent bytes are held.
    pub(crate) fn has_tail(&self) -> bool {
        self.tail.is_some()
    }

    /// Whether `app_end` may have something to read (data, or EOF): false only when every
    /// byte written into the socketpair was read back by intercepted receives of this process
    /// and it was not shut down, i.e. a `recvmsg(app_end)` could only say `EAGAIN`. Reads by
    /// others (raw syscalls, a forked child, an exec'd program) make it stay true, which only
    /// costs that system call.
    pub(crate) fn pair_maybe_readable(&self) -> bool {
        self.pair_sent != self.pair_read
            || self.eng_shut
            || self.rd_shut
            || !matches!(self.phase, Phase::Open)
    }

    /// Bytes this socket still has to write to its TCP socket (the engine's part of
    /// `SIOCOUTQ`): what the MPA exchange has not written, stream data queued before it
    /// completed, and the connection's framed-but-unwritten and queued FPDU bytes
    /// ([`Connection::unsent_len`], which includes the unsent tail). 0 once the TCP socket is
    /// shut down for writing or broken: nothing more will be written.
    pub(crate) fn unsent_bytes(&self) -> u64 {
        if self.tcp_shut_wr {
            return 0;
        }
        let startup = match &self.phase {
            Phase::Startup(s) => s.unsent() as u64,
            _ => 0,
        };
        startup + self.pre_open_tx.len() as u64 + self.conn.as_ref().map_or(0, |c| c.unsent_len())
    }

    /// Whether received stream data is waiting in the engine (backlog).
    pub(crate) fn rx_done(&self) -> bool {
        self.rx_eof || self.conn_done || matches!(self.phase, Phase::Failed)
    }

    /// The MPA exchange finished: build the connection.
    pub(crate) fn open(&mut self, sh: &Shared, neg: Negotiated, leftover: Vec<u8>) {
        let emss = sys::tcp_maxseg(sh.tcp_fd).unwrap_or(1460);
        if core::mem::take(&mut self.nagle_pending) && emss >= NAGLE_MIN_MSS {
            // (`TCP_NODELAY` is set underneath: the first small write turns Nagle's algorithm on)
            self.app_nagle = true;
        }
        let m = mulpdu(emss, neg.markers_tx).clamp(MIN_MULPDU, MAX_ULPDU_LEN);
        let mut cfg = ConnConfig::new(m, RecvMode::Stream, sh.pd);
        cfg.max_transmit = MAX_TRANSMIT;
        cfg.max_transmit_read_response = MAX_TRANSMIT_READ_RESPONSE;
        let conn = Connection::new(self.role, &neg, cfg).expect("MULPDU clamped into range");
        self.mulpdu = m;
        self.conn = Some(conn);
        self.neg = Some(neg);
        self.phase = Phase::Open;
        self.lowat = sys::setsockopt(
            sh.tcp_fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            STREAM_NOTSENT_LOWAT,
        )
        .is_ok();
        self.pending_in = leftover;
        let pre = core::mem::take(&mut self.pre_open_tx);
        if !pre.is_empty() {
            let _ = self.post_stream(pre);
        }
    }

    /// The socket carries more than the plain byte stream (a work request was posted, or a
    /// Read Response is owed): its TCP connection gets the system's `TCP_NOTSENT_LOWAT` back
    /// (0 selects it), so that large writes go out whole.
    pub(crate) fn end_lowat(&mut self, sh: &Shared) {
        if !self.nodelay {
            self.set_nodelay(sh);
        }
        if core::mem::take(&mut self.lowat) {
            let _ = sys::setsockopt(
                sh.tcp_fd,
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
                0 as c_int,
            );
        }
    }

    /// The socket carries more than the plain byte stream (an extension call was made, or a
    /// Read Response is owed): `TCP_NODELAY` from now on, so that each posted request goes out
    /// at once instead of waiting for the acknowledgement of a small segment before it (the
    /// application chose Nagle's algorithm for its byte stream, not for RDMA operations).
    #[cold]
    pub(crate) fn set_nodelay(&mut self, sh: &Shared) {
        self.nodelay = true;
        self.app_nagle = false;
        self.nagle_pending = false;
        let _ = sys::setsockopt(sh.tcp_fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1 as c_int);
    }

    /// The engine leaves Nagle's algorithm to the application (`Options::tcp_nagle`): whether
    /// it is on (`TCP_NODELAY` not set) as the socket is made. Until the connection opens the
    /// engine sets `TCP_NODELAY` underneath (`getsockopt` still reads the application's 0);
    /// then it follows the application's choice if the MSS is at least [`NAGLE_MIN_MSS`]
    /// (loopback; [`ConnState::open`]), and on other paths only once the application sets
    /// `TCP_NODELAY` itself ([`ConnState::app_set_nodelay`]). (The MSS of a connect still in
    /// progress is not known yet.)
    pub(crate) fn follow_app_nagle(&mut self, tcp_fd: RawFd) {
        let on = sys::getsockopt(tcp_fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 0 as c_int)
            .is_ok_and(|v| v == 0);
        self.app_nodelay = !on;
        self.app_nagle = false;
        self.nagle_on = false;
        self.nagle_pending = on;
        if on {
            let _ = sys::setsockopt(tcp_fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1 as c_int);
        }
    }

    /// The application set `TCP_NODELAY` (already on the TCP socket): followed from now on,
    /// whatever the path. After an extension call the engine's `TCP_NODELAY` stays what the
    /// application makes it, without following.
    pub(crate) fn app_set_nodelay(&mut self, nodelay: bool) {
        if !self.nodelay {
            self.app_nodelay = nodelay;
            self.app_nagle = !nodelay;
            self.nagle_on = !nodelay;
            self.nagle_pending = false;
        }
    }

    /// `TCP_NODELAY` as `getsockopt` reports it while the engine may set it underneath
    /// (`None`: the TCP socket's own value is the answer).
    pub(crate) fn app_nodelay(&self) -> Option<bool> {
        (!self.nodelay).then_some(self.app_nodelay)
    }

    /// Nagle's algorithm for a plain write of `len` bytes while the application wants it
    /// ([`ConnState::app_nagle`]): on for writes of at most [`NAGLE_WRITE_MAX`] (TCP coalesces
    /// a stream of them into full segments, as it would for a TCP socket: 64 B writes 5.6×
    /// the messages per second of one segment each), off for larger ones (their FPDUs go out
    /// whole, one write's segments ending where its FPDUs end, which the receiving engine
    /// places straight into the reader's buffer: iperf3's 128 KiB writes
    /// 16 Gbit/s with Nagle, 46 without). One `setsockopt` where the size class changes.
    pub(crate) fn nagle_for(&mut self, sh: &Shared, len: usize) {
        let want = len <= NAGLE_WRITE_MAX;
        if want != self.nagle_on {
            self.nagle_on = want;
            let _ = sys::setsockopt(
                sh.tcp_fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                c_int::from(!want),
            );
        }
    }

    /// TCP's MSS grows once data flows (on loopback from half the first window, 32 KiB, to
    /// 65,483 bytes): the MULPDU follows it (RFC 5044 §4.1 derives it from the current EMSS),
    /// so that large messages take fewer, larger FPDUs. Asked at doubling amounts of data
    /// sent, [`MSS_CHECKS`] times at most.
    fn recheck_mss(&mut self, sh: &Shared) {
        self.mss_check_at = if self.mss_check_at >= MSS_CHECK_FIRST << (MSS_CHECKS - 1) {
            u64::MAX
        } else {
            self.mss_check_at * 2
        };
        let (Some(conn), Some(neg)) = (self.conn.as_mut(), self.neg.as_ref()) else {
            return;
        };
        let Ok(emss) = sys::tcp_maxseg(sh.tcp_fd) else {
            return;
        };
        let m = mulpdu(emss, neg.markers_tx).clamp(MIN_MULPDU, MAX_ULPDU_LEN);
        if m != self.mulpdu && conn.set_mulpdu(m).is_ok() {
            self.mulpdu = m;
        }
    }

    /// Whether bytes read with the MPA exchange that follow it (the peer's first FPDUs) wait.
    pub(crate) fn has_pending_input(&self) -> bool {
        !self.pending_in.is_empty() || self.small_rest.is_some()
    }

    /// The MPA exchange failed.
    pub(crate) fn fail_startup(&mut self, e: Errno) {
        self.phase = Phase::Failed;
        self.so_error = e.0;
        self.rx_eof = true;
        self.pre_open_tx.clear();
    }

    /// Advances a running MPA exchange (non-blocking). Returns the events to wait for if it
    /// is still running.
    pub(crate) fn step_startup(&mut self, sh: &Shared) -> Option<i16> {
        let Phase::Startup(s) = &mut self.phase else {
            return None;
        };
        match s.step(sh.tcp_fd, sh.engine.now()) {
            Step::Pending { events } => Some(events),
            Step::Done(neg, leftover) => {
                self.open(sh, neg, leftover);
                None
            }
            Step::Failed(e) => {
                let _ = sys::shutdown(sh.tcp_fd, libc::SHUT_RDWR);
                self.fail_startup(e);
                None
            }
        }
    }

    /// The MPA deadline, if an exchange is running.
    pub(crate) fn startup_deadline(&self) -> Option<Duration> {
        match &self.phase {
            Phase::Startup(s) => s.deadline(),
            _ => None,
        }
    }

    // ---------------------------------------------------------------- posting

    /// Posts stream data (an engine-owned copy) as one Send.
    pub(crate) fn post_stream(&mut self, data: Vec<u8>) -> Result<(), Errno> {
        self.post_stream_at(data.as_ptr() as u64, data.len(), data)
    }

    /// Posts a stream Send of `len` bytes at `addr`: `data` itself, or (empty) a stand-in
    /// for bytes lent by the caller ([`ConnState::accept_stream_lent`]).
    fn post_stream_at(&mut self, addr: u64, len: usize, data: Vec<u8>) -> Result<(), Errno> {
        let conn = self.conn.as_mut().ok_or(Errno::ENOTCONN)?;
        let key = self.next_stream_key;
        self.next_stream_key += 1;
        let sge = [Sge::new(addr, len as u32)];
        let flags = SendFlags {
            signaled: true,
            solicited: false,
        };
        conn.post_send(key, &sge, flags).map_err(|_| Errno::EPIPE)?;
        self.stream_bufs.push_back((key, data));
        self.sq_meta.push_back(SqMeta::Stream { key, len });
        self.stream_queued += len;
        self.bytes_tx += len as u64;
        Ok(())
    }

    /// Accepts stream bytes from `bufs` (copied) up to the stream limit; returns how many.
    pub(crate) fn accept_stream(&mut self, bufs: &[&[u8]]) -> Result<usize, Errno> {
        let mut accepted = 0;
        let mut cur = self.stream_buf();
        for b in bufs {
            let mut b = *b;
            while !b.is_empty() {
                let room = TX_STREAM_LIMIT.saturating_sub(self.stream_queued + cur.len());
                if room == 0 {
                    break;
                }
                let take = b.len().min(room).min(STREAM_MSG_MAX - cur.len());
                cur.extend_from_slice(&b[..take]);
                b = &b[take..];
                accepted += take;
                if cur.len() == STREAM_MSG_MAX {
                    let full = core::mem::replace(&mut cur, self.stream_buf());
                    self.post_stream(full)?;
                }
            }
        }
        if !cur.is_empty() {
            self.post_stream(cur)?;
        } else {
            self.stream_pool.push(cur);
        }
        Ok(accepted)
    }

    /// `send`'s fast path for a small write ([`Connection::send_now_small`]) on an open
    /// socket with nothing queued: one FPDU framed whole (the bytes copied) and written at
    /// once, with no queue entry, no completion to settle and no round of the socket's other
    /// work. None when it does not apply (the caller takes the general path); else the bytes
    /// taken, all of them: what the kernel does not take now waits as the tail.
    pub(crate) fn send_small_now(
        &mut self,
        sh: &Shared,
        bufs: &[&[u8]],
        total: usize,
    ) -> Option<usize> {
        if !(1..=SMALL_SEND_MAX).contains(&total)
            || !self.sq_meta.is_empty()
            || !self.small_now_ok()
        {
            return None;
        }
        let conn = self.conn.as_mut()?;
        let mut t = core::mem::take(&mut self.spare_tx);
        if !conn.send_now_small(bufs, &mut t) {
            self.spare_tx = t;
            return None;
        }
        self.bytes_tx += total as u64;
        self.write_small_now(sh, t, false);
        Some(total)
    }

    /// `post_send`'s fast path ([`Connection::send_now_small_wr`]; `flags` as the application
    /// asked, a completion only if `signaled`): a posted Send of at most
    /// [`SMALL_SEND_MAX`] bytes in all (`payload`, the work request's SGEs), on an open socket
    /// with nothing waiting to be framed or written is framed whole and written at once, and
    /// its completion goes into the CQ as soon as its bytes are in the kernel. Completions
    /// still owed (a Read waiting for its response) come first, as for any post. False when
    /// it does not apply (post as usual).
    pub(crate) fn post_send_small_now(
        &mut self,
        sh: &Shared,
        wr_id: u64,
        payload: &[&[u8]],
        len: usize,
        flags: SendFlags,
    ) -> bool {
        if len > SMALL_SEND_MAX || !self.small_now_ok() {
            return false;
        }
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        let mut t = core::mem::take(&mut self.spare_tx);
        // (every work request's completion comes from the connection, to keep `sq_meta` in
        // step; `settle` drops the unsignaled ones' as for the general path)
        let all = SendFlags {
            signaled: true,
            ..flags
        };
        if !conn.send_now_small_wr(wr_id, payload, all, &mut t) {
            self.spare_tx = t;
            return false;
        }
        self.note_app_wr(wr_id, flags.signaled, len as u64);
        self.write_small_now(sh, t, true);
        true
    }

    /// Whether the small-write fast paths may frame and write a message now: open, and
    /// nothing queued or due ahead of it (work request, half-framed message, unsent tail,
    /// `DDP_MORE` batch, stream bytes, bytes spilled into the socketpair, shutdown).
    fn small_now_ok(&self) -> bool {
        !(self.spilled
            || self.want_shut_wr
            || self.tcp_shut_wr
            || self.tail.is_some()
            || self.stream_queued != 0
            || !self.pre_open_tx.is_empty()
            || self.deferred_wrs != 0
            || !self.is_open())
    }

    /// Writes the fast paths' framed message `t`; what the kernel does not take waits as the
    /// tail. With `completes`, completions it released go into the CQ.
    fn write_small_now(&mut self, sh: &Shared, t: Transmit, completes: bool) {
        let mut off = 0;
        // The usual case first: the frame is one buffer and the kernel takes all of it. One
        // `sendto` here, none of `flush_tx`'s general round (its checks before writing are
        // the conditions below; what else it would do, nothing is queued for).
        if let [TxPiece::Scratch(r)] = t.pieces.as_slice()
            && self.bytes_tx < self.mss_check_at
            && !self.tcp_shut_wr
            && let Some(conn) = self.conn.as_mut()
            && !(self.lowat && conn.reads_owed() > 0)
        {
            match sys::send(sh.tcp_fd, &t.scratch[r.clone()], libc::MSG_DONTWAIT) {
                Ok(n) => {
                    conn.on_written(n as u64);
                    if n == r.len() && conn.transmit_idle() {
                        self.spare_tx = t;
                        if completes {
                            self.settle_sent(sh);
                        }
                        return;
                    }
                    off = n;
                }
                Err(Errno::EAGAIN) => {}
                Err(e) => {
                    // (this error, not the next write's: after a reset the first write
                    // says ECONNRESET, later ones EPIPE)
                    self.spare_tx = t;
                    let mut mem = SessionMem::new(&sh.engine.registry, None);
                    self.tx_broke(sh, &mut mem, e);
                    return sh.progress(self, None, false);
                }
            }
        }
        // (the rest, or a whole frame written with more to frame after it: the general
        // round goes on from there)
        let mut mem = SessionMem::new(&sh.engine.registry, None);
        if off < t.len() {
            self.tail = Some(Tail { t, piece: 0, off });
        } else {
            self.spare_tx = t;
        }
        match self.flush_tx(sh, &mut mem) {
            Ok(true) => {}
            // (the rest waits as the tail: the progress thread writes it when the kernel
            // has room)
            Ok(false) => sh.rearm(self),
            // (the connection broke: the general round reports it as for any write)
            Err(_) => return sh.progress(self, None, false),
        }
        if completes {
            self.settle(sh, &mut mem);
        }
    }

    /// `settle` after a fast path wrote a small message whole with nothing else under way:
    /// the completions of application work requests at the front of the events go into the
    /// CQ as `settle` puts them there. Anything more (another event, a stream buffer's
    /// completion, a backlog or a hold to bring in line, a shutdown due) takes the whole
    /// `settle`, which finds the rest of the events in order.
    fn settle_sent(&mut self, sh: &Shared) {
        if let Some(conn) = self.conn.as_mut()
            && conn.state() == State::Open
        {
            while let Some(&SqMeta::App { wr_id, signaled }) = self.sq_meta.front()
                && let Some(Event::Completion(c)) =
                    conn.poll_event_if(|e| matches!(e, Event::Completion(_)))
            {
                self.sq_meta.pop_front();
                debug_assert_eq!(wr_id, c.wr_id);
                if signaled || c.status != WcStatus::Success {
                    sh.push_wc(wc_from_completion(&c, self.last_term), self.defer_wc);
                }
            }
            if !conn.has_events()
                && self.backlog.is_empty()
                && !self.hold
                && !self.conn_done
                && !self.want_shut_wr
            {
                return;
            }
        }
        let mut mem = SessionMem::new(&sh.engine.registry, None);
        self.settle(sh, &mut mem);
    }

    /// Whether a `send` of `total` bytes may post them straight from the caller's buffers
    /// ([`ConnState::accept_stream_lent`]): large enough to be worth it, and nothing queued
    /// ahead, so that the round of work right after frames and writes them at once.
    pub(crate) fn may_lend(&self, total: usize) -> bool {
        total >= LEND_MIN
            && self.is_open()
            && self.tail.is_none()
            && self.stream_queued == 0
            && self.sq_meta.is_empty()
            && self.pre_open_tx.is_empty()
            && self.deferred_wrs == 0
    }

    /// As [`ConnState::accept_stream`], but the Sends name the caller's buffers themselves
    /// (no copy): the caller must call [`ConnState::end_lent`] before its buffers go back to
    /// the application (before `send` returns or releases the lock).
    pub(crate) fn accept_stream_lent(&mut self, bufs: &[&[u8]]) -> Result<usize, Errno> {
        let mut accepted = 0;
        for b in bufs {
            let mut b = *b;
            while !b.is_empty() {
                let room = TX_STREAM_LIMIT.saturating_sub(self.stream_queued);
                if room == 0 {
                    return Ok(accepted);
                }
                let take = b.len().min(room).min(STREAM_MSG_MAX);
                let key = self.next_stream_key;
                self.post_stream_at(b.as_ptr() as u64, take, Vec::new())?;
                self.lent.push((b.as_ptr() as u64, take, key));
                b = &b[take..];
                accepted += take;
            }
        }
        Ok(accepted)
    }

    /// Ends the loan of [`ConnState::accept_stream_lent`]: Sends not yet wholly framed move
    /// onto copies of their bytes, and an unsent tail that holds lent bytes copies them.
    pub(crate) fn end_lent(&mut self, mem: &SessionMem<'_, '_, '_>) {
        if self.lent.is_empty() {
            return;
        }
        let lent = core::mem::take(&mut self.lent);
        if let Some(conn) = self.conn.as_mut() {
            for &(addr, len, key) in &lent {
                if !conn.sources_in(addr, len as u64) {
                    continue;
                }
                let Some(bytes) = mem.local(addr, len) else {
                    continue;
                };
                let copy = bytes.to_vec();
                conn.relocate_sources(addr, len as u64, copy.as_ptr() as u64);
                if let Some(slot) = self.stream_bufs.iter_mut().find(|(k, _)| *k == key) {
                    slot.1 = copy;
                }
            }
        }
        if let Some(tail) = self.tail.as_mut() {
            let lent_piece = |p: &TxPiece| match *p {
                TxPiece::Local { addr, len } => lent
                    .iter()
                    .any(|&(a, l, _)| addr < a + l as u64 && a < addr + len as u64),
                _ => false,
            };
            if tail.t.pieces[tail.piece..].iter().any(lent_piece) {
                Self::own_tail(tail, mem, true);
            }
        }
        self.lent = lent;
        self.lent.clear();
    }

    /// An empty buffer for stream data (from the pool when there is one).
    fn stream_buf(&mut self) -> Vec<u8> {
        self.stream_pool.pop().unwrap_or_default()
    }

    /// Stream bytes written before the MPA exchange completed (queued, sent at open).
    pub(crate) fn queue_pre_open(&mut self, bufs: &[&[u8]]) -> usize {
        let mut n = 0;
        for b in bufs {
            let room = TX_STREAM_LIMIT.saturating_sub(self.pre_open_tx.len());
            let take = b.len().min(room);
            self.pre_open_tx.extend_from_slice(&b[..take]);
            n += take;
        }
        n
    }

    /// A work request posted with `DDP_MORE` (`payload` bytes): whether it may stay queued
    /// (the batch was not full before it, and no unsent tail waits for room in the socket).
    /// A request of [`MORE_BATCH_BYTES`] or more on its own stays queued too: a 64 KiB RDMA
    /// Write and the Send that announces it leave together, and the peer is woken once.
    pub(crate) fn defer_tx(&mut self, payload: u64) -> bool {
        let room = self.deferred_bytes < MORE_BATCH_BYTES;
        self.deferred_wrs += 1;
        self.deferred_bytes += payload;
        let keep = self.deferred_wrs < MORE_BATCH_WRS && room && self.tail.is_none();
        if !keep {
            self.end_deferral();
        }
        keep
    }

    /// The queued work requests are going out now.
    pub(crate) fn end_deferral(&mut self) {
        self.deferred_wrs = 0;
        self.deferred_bytes = 0;
    }

    /// Records an application work request posted to the send queue.
    pub(crate) fn note_app_wr(&mut self, wr_id: u64, signaled: bool, payload: u64) {
        self.sq_meta.push_back(SqMeta::App { wr_id, signaled });
        self.bytes_tx += payload;
    }

    // ---------------------------------------------------------------- receiving

    /// Reads and processes TCP input, non-blocking, until the socket is drained, the caller's
    /// buffers are full, the backlog is over its limit, or the budget is spent.
    pub(crate) fn pump_input(&mut self, sh: &Shared, mem: &mut SessionMem<'_, '_, '_>) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        self.announced = false; // (whoever reads the input now takes what was announced)
        if !self.pending_in.is_empty() {
            let data = core::mem::take(&mut self.pending_in);
            let _ = conn.handle_input(&data, mem);
        }
        if mem.has_sink() {
            conn.adopt_stream_sink(mem);
        }
        self.rx_limit = sh.engine.rx_backlog_limit();
        while let Some(b) = self.backlog.take_freed() {
            sh.engine.rx_buf_put(b);
        }
        let mut rx_buf = match self.small_rest.take() {
            // The rest of a read `small_round` took the small Sends from (at the front of
            // its buffer): fed as if read now, and the read's shape told as below.
            Some(rest) => {
                let mut b = rest.buf;
                let fpdus = conn.stats().fpdus_in;
                input_from(conn, &mut self.backlog, &mut b, rest.len, mem, sh);
                let headers = rest.taken + (conn.stats().fpdus_in - fpdus) as usize;
                read_shape(
                    &mut self.large_stream,
                    &mut self.small_run,
                    headers,
                    rest.read,
                );
                if conn.rx_ulpdu_len().is_some_and(|l| l >= STREAM_DIRECT_MIN) {
                    (self.large_stream, self.small_run) = (true, 0);
                }
                b
            }
            None => sh.engine.rx_buf_take(),
        };
        let mut inq_floor = self.inq_floor;
        let mut inq_fresh = core::mem::take(&mut self.inq_fresh);
        // (with markers in the FPDUs, the follower's length is not where a tail read looks)
        let markers_rx = self.neg.as_ref().is_some_and(|n| n.markers_rx);
        // Held for a reader (no caller's buffer here): what a reader takes next, not more, so
        // that it is still in the cache when the reader copies it out; the rest waits in
        // the kernel, and the reader's own receive takes it straight into its buffer.
        let mut budget = if self.hold && !mem.has_sink() {
            HOLD_READ_BUDGET
        } else {
            READ_BUDGET
        };
        while !self.rx_eof && budget > 0 {
            if self.backlog.len() + mem.overflow.len() >= self.rx_limit || mem.sink_full() {
                break;
            }
            // Pure byte stream: large buffered reads. Otherwise direct placement is likely
            // next: read headers in small bites, and only a small tail after a placement.
            let mut plan = conn.rx_plan();
            if matches!(
                plan,
                RxPlan::Direct {
                    target: DirectTarget::Region { .. },
                    ..
                }
            ) {
                self.tagged_seen = true; // RDMA Writes arrive here: read in small bites
            }
            // Small messages: a recvmsg per payload (plus one per header) would cost far more
            // than copying them out of one large buffered read, which carries many at once.
            if let RxPlan::Direct { .. } = plan {
                self.small_rx = conn.rx_ulpdu_len().is_some_and(|l| l < DIRECT_MIN);
                if self.small_rx {
                    plan = RxPlan::Buffered;
                }
            }
            // Stream data goes straight into the caller's buffers only if its FPDU can end
            // there (else it would come back out at the end of the session), and is read
            // with a small tail: the CRC and the next header, so that the next payload can
            // go straight there too.
            let mut tail_len = None;
            // (where the next FPDU starts in the tail read, after a direct stream placement)
            let mut follow_at = None;
            // (several large FPDUs in one read, when they can be predicted)
            let mut chain = None;
            if let RxPlan::Direct {
                target: DirectTarget::Stream { at, left },
                len: run,
            } = plan
            {
                let large = conn.rx_ulpdu_len().is_some_and(|l| l >= STREAM_DIRECT_MIN);
                let to_end = conn.rx_octets_to_end();
                if large && mem.stream_bytes > 0 && at == 0 && mem.stream_room(at) < left {
                    // A large FPDU that does not fit after what the reader has: it stays
                    // in the kernel for the reader's next call.
                    break;
                }
                if !large || mem.stream_room(at) < left {
                    plan = RxPlan::Buffered;
                } else {
                    // The rest of the FPDU not here yet: a reader that has data stops here
                    // (bytes of an FPDU that does not end would have to come back out of
                    // its buffer); else this read places what is here.
                    if mem.stream_bytes > 0
                        && to_end.is_some_and(|n| !kernel_has(&mut inq_floor, sh.tcp_fd, n))
                    {
                        break;
                    }
                    // (pad, CRC and the next header: the next payload starts a read too;
                    // and the small FPDU that followed last time, with the header after it)
                    tail_len = Some(to_end.map_or(SMALL_READ, |n| {
                        n - left
                            + NEXT_HEADER
                            + if markers_rx || run != left {
                                0
                            } else {
                                self.follow
                            }
                    }));
                    follow_at = to_end.filter(|_| run == left).map(|n| n - left);
                    if !markers_rx
                        && run == left
                        && let Some(te) = to_end
                    {
                        chain = plan_chain(
                            conn,
                            mem,
                            (at, left, te),
                            &mut inq_floor,
                            core::mem::take(&mut inq_fresh),
                            sh.tcp_fd,
                        );
                    }
                }
            }
            // (input after the stream broke is read only to be dropped: in large bites)
            let ended = matches!(conn.state(), State::Error | State::Closed);
            let big = self.small_rx
                || ended
                || (self.stream_mode
                    && !self.tagged_seen
                    && conn.recvs_posted() == 0
                    && conn.reads_outstanding() == 0);
            let mut asked;
            // (a read that finds the input ended says so to the socket's wait set)
            let mark = sh.wait_set.tcp_mark();
            let mut ended_here = false;
            self.rx_counts.reads += 1;
            let got = if let Some(c) = &chain {
                asked = c.asked();
                let r = read_chain(
                    conn,
                    &mut self.backlog,
                    &mut rx_buf,
                    mem,
                    c,
                    &mut self.rx_counts,
                    sh,
                );
                // (the pieces' lengths are what the read asked for: no room capped them)
                ended_here = r.as_ref().is_ok_and(|&n| n > 0 && n < asked);
                r
            } else {
                match plan {
                    RxPlan::Direct { target, len } => {
                        let tail_len = tail_len.unwrap_or(if big { BIG_READ } else { SMALL_READ });
                        asked = len + tail_len;
                        match mem.recv_direct(sh.tcp_fd, target, len, &mut rx_buf[..tail_len]) {
                            Ok((0, 0, _)) => Ok(0),
                            Ok((placed, tail, short)) => {
                                ended_here = short;
                                if placed > 0 {
                                    conn.placed_direct(placed, mem);
                                }
                                // (the next FPDU's ULPDU_LENGTH, read now: small, or not)
                                if let Some(at) = follow_at
                                    && !markers_rx
                                    && tail >= at + 2
                                {
                                    let ulen = u16::from_be_bytes([rx_buf[at], rx_buf[at + 1]]);
                                    let wire = fpdu_len_without_markers(ulen as usize);
                                    self.follow = if wire <= SMALL_FOLLOW_MAX { wire } else { 0 };
                                }
                                if tail > 0 {
                                    input_from(conn, &mut self.backlog, &mut rx_buf, tail, mem, sh);
                                }
                                Ok(placed + tail)
                            }
                            // The region went away: read the bytes into our buffer, where
                            // placement drops them.
                            Err(None) => {
                                asked = len.min(BIG_READ);
                                let r =
                                    sys::recv(sh.tcp_fd, &mut rx_buf[..asked], libc::MSG_DONTWAIT);
                                if let Ok(n) = r
                                    && n > 0
                                {
                                    input_from(conn, &mut self.backlog, &mut rx_buf, n, mem, sh);
                                }
                                r
                            }
                            Err(Some(e)) => Err(e),
                        }
                    }
                    RxPlan::Buffered => {
                        // (a reader's buffer with room for large FPDUs: up to the next header)
                        let to_end = conn.rx_octets_to_end();
                        let header_first = self.large_stream
                            && !ended
                            && mem.has_sink()
                            && (to_end.is_some() || mem.stream_room(0) >= STREAM_DIRECT_MIN);
                        asked = if header_first {
                            to_end.map_or(NEXT_HEADER, |n| (n + NEXT_HEADER).min(BIG_READ))
                        } else if big {
                            BIG_READ
                        } else {
                            SMALL_READ
                        };
                        let fpdus = conn.stats().fpdus_in;
                        let r = sys::recv(sh.tcp_fd, &mut rx_buf[..asked], libc::MSG_DONTWAIT);
                        if let Ok(n) = r
                            && n > 0
                        {
                            // (TCP returns less than asked only when its queue ran out)
                            ended_here = n < asked;
                            input_from(conn, &mut self.backlog, &mut rx_buf, n, mem, sh);
                        }
                        // (large FPDUs in this read, or small ones)
                        let headers = (conn.stats().fpdus_in - fpdus) as usize;
                        read_shape(
                            &mut self.large_stream,
                            &mut self.small_run,
                            headers,
                            r.unwrap_or(0),
                        );
                        r
                    }
                }
            };
            if mem.stream_bytes > 0 {
                self.tagged_seen = false; // the stream is busy again: large reads
            }
            if let Ok(n) = got {
                inq_floor = inq_floor.saturating_sub(n);
            }
            // (the read ended in a large FPDU's payload; the next round and session see it)
            if conn.rx_ulpdu_len().is_some_and(|l| l >= STREAM_DIRECT_MIN) {
                (self.large_stream, self.small_run) = (true, 0);
            }
            match got {
                Ok(0) => {
                    // (a closing socket still sending keeps sending: the peer's FIN is a
                    // half-close, as before the close)
                    let closing = self.tcp_shut_wr
                        || (self.close_deadline.is_some()
                            && conn.state() != State::Open
                            && conn.unsent_len() == 0);
                    input_ended(&mut self.rx_eof, self.stream_mode, closing, conn);
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    if ended_here {
                        sh.wait_set.tcp_drained(mark);
                    }
                    if n < asked {
                        break; // the socket is (very likely) drained: save an EAGAIN
                    }
                }
                Err(Errno::EAGAIN) => {
                    sh.wait_set.tcp_drained(mark);
                    break;
                }
                Err(e) => input_failed(&mut self.rx_eof, &mut self.so_error, conn, e),
            }
            if matches!(conn.state(), State::Error | State::Closed) {
                // Input is ignored now; the Terminate still has to go out.
                if self.conn_done || conn.state() == State::Closed {
                    break;
                }
            }
        }
        self.inq_floor = inq_floor;
        sh.engine.rx_buf_put(rx_buf);
    }

    // ---------------------------------------------------------------- transmitting

    /// Writes the unsent tail and everything the connection has to send, non-blocking.
    /// Returns `Ok(true)` if everything went out.
    pub(crate) fn flush_tx(
        &mut self,
        sh: &Shared,
        mem: &mut SessionMem<'_, '_, '_>,
    ) -> Result<bool, Errno> {
        if self.bytes_tx >= self.mss_check_at {
            self.recheck_mss(sh);
        }
        if self.lowat && self.conn.as_ref().is_some_and(|c| c.reads_owed() > 0) {
            self.end_lowat(sh);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Ok(true);
        };
        if self.tcp_shut_wr {
            return Ok(self.tail.is_none());
        }
        // everything queued goes out now
        self.deferred_wrs = 0;
        self.deferred_bytes = 0;
        loop {
            if self.tail.is_none() {
                if conn.transmit_idle() {
                    return Ok(true); // (nothing to frame: spare the round below)
                }
                let mut t = core::mem::take(&mut self.spare_tx);
                if !conn.poll_transmit_into(mem, &mut t) {
                    self.spare_tx = t;
                    return Ok(true);
                }
                self.tail = Some(Tail {
                    t,
                    piece: 0,
                    off: 0,
                });
            }
            let tail = self.tail.as_mut().expect("set above");
            let (sent, asked) = write_tail(sh.tcp_fd, tail, mem);
            match sent {
                Ok(n) => {
                    conn.on_written(n as u64);
                    self.tx_written += n as u64;
                    let mut left = n;
                    while left > 0 {
                        let plen = tail.t.pieces[tail.piece].len() - tail.off;
                        if left >= plen {
                            left -= plen;
                            tail.piece += 1;
                            tail.off = 0;
                        } else {
                            tail.off += left;
                            left = 0;
                        }
                    }
                    if tail.piece == tail.t.pieces.len() {
                        if let Some(done) = self.tail.take() {
                            self.spare_tx = done.t;
                        }
                    } else if n < asked {
                        self.keep_tail(mem);
                        return Ok(false);
                    }
                }
                Err(Errno::EAGAIN) => {
                    self.keep_tail(mem);
                    return Ok(false);
                }
                Err(e) => return Err(self.tx_broke(sh, mem, e)),
            }
        }
    }

    /// The TCP connection broke under a write (`e`, not `EAGAIN`): the stream is lost. The
    /// peer may have said why before it closed: a Terminate already in our receive queue is
    /// reported as such, not masked as a lost stream (the kernel still delivers queued data
    /// after a reset). Bounded, non-blocking. Returns `e`.
    fn tx_broke(&mut self, sh: &Shared, mem: &mut SessionMem<'_, '_, '_>, e: Errno) -> Errno {
        self.tail = None;
        if self.so_error == 0 {
            self.so_error = e.0;
        }
        self.tcp_shut_wr = true;
        let Some(conn) = self.conn.as_mut() else {
            return e;
        };
        let mut buf = [0u8; 4096];
        for _ in 0..64 {
            if matches!(conn.state(), State::Error | State::Closed) {
                break;
            }
            match sys::recv(sh.tcp_fd, &mut buf, libc::MSG_DONTWAIT) {
                Ok(n) if n > 0 => {
                    let _ = conn.handle_input(&buf[..n], mem);
                }
                _ => break,
            }
        }
        conn.handle_eof();
        e
    }

    /// The tail outlives this session: copy the bytes of registered regions it references
    /// (Read Response sources may be deregistered before the next session). Local pieces
    /// stay valid until their completion, which needs them written first.
    fn keep_tail(&mut self, mem: &SessionMem<'_, '_, '_>) {
        let Some(tail) = self.tail.as_mut() else {
            return;
        };
        if !tail.t.pieces[tail.piece..]
            .iter()
            .any(|p| matches!(p, TxPiece::Region { .. }))
        {
            return;
        }
        Self::own_tail(tail, mem, false);
    }

    /// Copies the remaining bytes of the tail into its scratch (regions only, or all).
    fn own_tail(tail: &mut Tail, mem: &SessionMem<'_, '_, '_>, all: bool) {
        let mut scratch = core::mem::take(&mut tail.t.scratch);
        let mut pieces = Vec::with_capacity(tail.t.pieces.len() - tail.piece);
        for (i, p) in tail.t.pieces[tail.piece..].iter().enumerate() {
            let off = if i == 0 { tail.off } else { 0 };
            let keep =
                matches!(p, TxPiece::Scratch(_)) || (!all && matches!(p, TxPiece::Local { .. }));
            if keep {
                pieces.push(match p {
                    TxPiece::Scratch(r) => TxPiece::Scratch(r.start + off..r.end),
                    TxPiece::Local { addr, len } => TxPiece::Local {
                        addr: addr + off as u64,
                        len: len - off,
                    },
                    TxPiece::Region { .. } => unreachable!("not kept"),
                });
            } else {
                let tmp = Transmit::default();
                let bytes = tmp.piece_bytes(p, mem);
                let at = scratch.len();
                scratch.extend_from_slice(&bytes[off..]);
                pieces.push(TxPiece::Scratch(at..scratch.len()));
            }
        }
        tail.t.scratch = scratch;
        tail.t.pieces = pieces;
        tail.piece = 0;
        tail.off = 0;
    }

    // ---------------------------------------------------------------- after each session

    /// Completes a session: keeps an unsent tail safe if work requests are about to be
    /// flushed, moves events into the CQ, stream data into the socketpair, and performs the
    /// shutdowns that are due.
    pub(crate) fn settle(&mut self, sh: &Shared, mem: &mut SessionMem<'_, '_, '_>) {
        self.spare_refs = mem.take_refs_spare();
        if let Some(conn) = self.conn.as_mut() {
            // (before the caller's buffers go away: bytes of an FPDU not yet verified)
            conn.unplace_stream(mem);
        }
        self.backlog.push(core::mem::take(&mut mem.overflow));
        self.bytes_rx += core::mem::take(&mut mem.stream_bytes);
        if let Some(conn) = self.conn.as_mut() {
            // Error/Closed flush work requests whose buffers an unsent tail may reference.
            if matches!(conn.state(), State::Error | State::Closed)
                && let Some(tail) = self.tail.as_mut()
            {
                Self::own_tail(tail, mem, true);
            }
            while let Some(ev) = conn.poll_event() {
                match ev {
                    Event::Completion(c) => {
                        let meta = self.sq_meta.pop_front();
                        match meta {
                            Some(SqMeta::Stream { key, len }) => {
                                debug_assert_eq!(key, c.wr_id);
                                let (k, mut b) = self.stream_bufs.pop_front().expect("posted");
                                debug_assert_eq!(k, key);
                                // (empty: lent bytes, written before the loan ended)
                                debug_assert!(b.is_empty() || b.len() == len);
                                // Keep a few small buffers (a `write` of a few bytes each).
                                if self.stream_pool.len() < STREAM_POOL
                                    && b.capacity() > 0
                                    && b.capacity() <= 64 << 10
                                {
                                    b.clear();
                                    self.stream_pool.push(b);
                                }
                                self.stream_queued -= len;
                            }
                            Some(SqMeta::App { wr_id, signaled }) => {
                                debug_assert_eq!(wr_id, c.wr_id);
                                if signaled || c.status != WcStatus::Success {
                                    sh.push_wc(
                                        wc_from_completion(&c, self.last_term),
                                        self.defer_wc,
                                    );
                                }
                            }
                            None => debug_assert!(false, "completion without a work request"),
                        }
                    }
                    Event::RecvCompletion(c) => {
                        if c.status == WcStatus::Success {
                            self.bytes_rx += c.byte_len;
                        }
                        debug_assert_eq!(c.opcode, WcOpcode::Recv);
                        sh.push_wc(wc_from_completion(&c, self.last_term), self.defer_wc);
                    }
                    Event::PeerTerminated(t) => {
                        self.last_term = Some(LastTerminate::Received(t.code));
                        if self.so_error == 0 {
                            self.so_error = libc::ECONNRESET;
                        }
                    }
                    Event::Error(e) => {
                        if e != ProtoError::StreamLost {
                            self.last_term = Some(LastTerminate::Sent(e.term_code()));
                        }
                        if self.so_error == 0 {
                            self.so_error = libc::ECONNRESET;
                        }
                    }
                    Event::Closed => self.conn_done = true,
                }
            }
        }
        self.flush_backlog(sh);
        // The protocol stream is over and its last bytes (a Terminate) are out, or the
        // application shut down writing and everything it wrote is out: FIN.
        if self.tail.is_none()
            && !self.tcp_shut_wr
            && matches!(self.phase, Phase::Open)
            && (self.conn_done
                || (self.want_shut_wr
                    && self.stream_queued == 0
                    && self.sq_meta.is_empty()
                    && self.pair_drained(sh)))
        {
            let _ = sys::shutdown(sh.tcp_fd, libc::SHUT_WR);
            self.tcp_shut_wr = true;
            if self.rx_eof
                && let Some(conn) = self.conn.as_mut()
                && conn.state() != State::Closed
            {
                conn.handle_eof();
            }
        }
    }

    /// Moves backlog bytes into `eng_end` as far as the socketpair takes them; after the
    /// last byte of an ended stream, `shutdown(eng_end, SHUT_WR)`.
    pub(crate) fn flush_backlog(&mut self, sh: &Shared) {
        if self.hold {
            if (!self.backlog.is_empty() || self.announced) && !self.rd_shut {
                return; // an application thread takes it from the backlog (or the kernel)
            }
            self.hold = false;
        }
        while !self.backlog.is_empty() {
            if self.rd_shut {
                let n = self.backlog.len();
                self.backlog.consume(n);
                break;
            }
            let mut iov = [sys::iovec(core::ptr::null(), 0); BACKLOG_IOV];
            let k = self.backlog.front_iov(&mut iov);
            match sys::sendmsg(sh.eng_end, &iov[..k], libc::MSG_DONTWAIT) {
                Ok(n) => {
                    self.backlog.consume(n);
                    self.pair_sent += n as u64;
                }
                Err(Errno::EAGAIN) => break,
                Err(_) => {
                    // The application end is gone: nobody will read this.
                    let n = self.backlog.len();
                    self.backlog.consume(n);
                }
            }
        }
        if self.backlog.is_empty() && self.rx_done() && !self.eng_shut {
            let _ = sys::shutdown(sh.eng_end, libc::SHUT_WR);
            self.eng_shut = true;
        }
    }

    /// Makes the app fd unwritable until the bytes the kernel refused are written, as a TCP
    /// socket's is while its send buffer is full (called by a non-blocking `send` that left
    /// such bytes; see [`ConnState::unpress`]). The app fd is the socketpair's app end, which
    /// the kernel reports writable while what it sent and `eng_end` has not read takes at
    /// most a quarter of its send buffer: with that buffer at the minimum, one token of
    /// [`TOKEN_LEN`] bytes written on the app end is enough. `poll`, `select` and `epoll`
    /// (level- or edge-triggered, one-shot) then all see what the kernel sees, and the
    /// token's read wakes them. Pressed only while nothing else waits in the socketpair and
    /// the process has not forked since the socket was made (a child may write on the app
    /// end: see [`super::after_fork_in_parent`]); if anyone else's bytes arrived while the
    /// token was written, it is taken back at once. A token at the front of `eng_end` is
    /// never read as stream data: [`ConnState::pump_eng`] waits until it is gone.
    pub(crate) fn press(&mut self, sh: &Shared) {
        if self.pressed
            || self.spilled
            || !self.is_open()
            || sh.parent_forks != super::PARENT_FORKS.load(std::sync::atomic::Ordering::Acquire)
            || sys::inq(sh.eng_end) != Ok(0)
        {
            return;
        }
        if self.app_sndbuf == 0 {
            match sys::getsockopt(sh.app_end, libc::SOL_SOCKET, libc::SO_SNDBUF, 0 as c_int) {
                Ok(v) if v > 0 => self.app_sndbuf = v,
                _ => return,
            }
        }
        if sys::setsockopt(sh.app_end, libc::SOL_SOCKET, libc::SO_SNDBUF, 1 as c_int).is_err() {
            return;
        }
        self.pressed = true;
        let tok = token();
        match sys::send(sh.app_end, tok, libc::MSG_DONTWAIT) {
            Ok(n) if n == TOKEN_LEN => {}
            Ok(n) => {
                // (cannot happen with an empty socketpair; take back what went)
                self.take_token(sh, n);
                return;
            }
            Err(_) => {
                self.restore_sndbuf(sh);
                self.pressed = false;
                return;
            }
        }
        if sys::inq(sh.eng_end) != Ok(TOKEN_LEN) {
            // Someone else wrote on the app end meanwhile (a raw write, an exec'd child):
            // the token may not be first. Read it all back, the token taken out.
            self.take_token(sh, TOKEN_LEN);
        }
    }

    /// Ends [`ConnState::press`]: the app fd's buffer back to its size, the token read.
    pub(crate) fn unpress(&mut self, sh: &Shared) {
        if !self.pressed {
            return;
        }
        let mut buf = [0u8; TOKEN_LEN];
        let mut got = 0;
        // (the token is at the front: nothing else was in the socketpair when it went in,
        // and `pump_eng` reads nothing while it is there)
        while got < TOKEN_LEN {
            match sys::recv(sh.eng_end, &mut buf[got..], libc::MSG_DONTWAIT) {
                Ok(n) if n > 0 => got += n,
                _ => break,
            }
        }
        debug_assert!(
            got == TOKEN_LEN && buf == *token(),
            "token not at the front"
        );
        self.restore_sndbuf(sh);
        self.pressed = false;
        // Raw writes made meanwhile (stdio on the socket) go before any later `send`.
        if sys::inq(sh.eng_end).is_ok_and(|n| n > 0) {
            self.pump_eng(sh);
        }
    }

    /// Reads everything waiting in `eng_end` (what others wrote around a token of `n`
    /// bytes), takes the token out and sends the rest as stream data in order.
    fn take_token(&mut self, sh: &Shared, n: usize) {
        let tok = &token()[..n];
        let have = sys::inq(sh.eng_end).unwrap_or(0);
        let mut buf = vec![0u8; have];
        let mut got = 0;
        while got < have {
            match sys::recv(sh.eng_end, &mut buf[got..], libc::MSG_DONTWAIT) {
                Ok(k) if k > 0 => got += k,
                _ => break,
            }
        }
        buf.truncate(got);
        if let Some(at) = buf.windows(n.max(1)).position(|w| w == tok) {
            buf.drain(at..at + n);
        }
        self.restore_sndbuf(sh);
        self.pressed = false;
        if !buf.is_empty() && self.is_open() && !self.tcp_shut_wr {
            let _ = self.post_stream(buf);
        }
    }

    fn restore_sndbuf(&self, sh: &Shared) {
        // (the kernel reports twice what was set)
        let _ = sys::setsockopt(
            sh.app_end,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            self.app_sndbuf / 2,
        );
    }

    /// Bytes of a back-pressure token in the socketpair.
    pub(crate) fn token_bytes(&self) -> usize {
        if self.pressed { TOKEN_LEN } else { 0 }
    }

    /// Whether a [`ConnState::press`] is over: everything sent was written, or the stream
    /// can take no more (the connection ended or failed; the next `send` reports it).
    pub(crate) fn press_over(&self) -> bool {
        self.pressed && (!self.is_open() || self.tcp_shut_wr || self.unsent_bytes() == 0)
    }

    /// Bytes the application wrote to its fd with raw syscalls (or spilled sends) arrive at
    /// `eng_end`: send them as stream data (or keep them for after the MPA exchange).
    pub(crate) fn pump_eng(&mut self, sh: &Shared) {
        if self.eng_rd_eof || self.pressed {
            return;
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let room = TX_STREAM_LIMIT.saturating_sub(self.stream_queued + self.pre_open_tx.len());
            if room == 0 {
                return;
            }
            let want = room.min(buf.len());
            match sys::recv(sh.eng_end, &mut buf[..want], libc::MSG_DONTWAIT) {
                Ok(0) => {
                    self.eng_rd_eof = true;
                    self.want_shut_wr = true;
                    return;
                }
                Ok(n) => {
                    if self.is_connecting() {
                        self.queue_pre_open(&[&buf[..n]]);
                    } else if self.is_open() && !self.tcp_shut_wr {
                        // (also after `shutdown(SHUT_WR)` or `close`: these bytes were written
                        // before it, and go out before the FIN)
                        let mut b = self.stream_buf();
                        b.extend_from_slice(&buf[..n]);
                        let _ = self.post_stream(b);
                    }
                    if n < want {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// The commonest round of a reader's `poll` whose TCP fd was reported readable
    /// ([`Shared::serve_round`], the input held for that reader): small plain Sends of the
    /// byte stream, whole in one read, and nothing else for the round to do. It reads as
    /// `pump_input` would (one buffered read of [`BIG_READ`]), takes the FPDUs with
    /// [`Connection::take_stream_sends`] into the backlog, and skips the rest of the general
    /// round ([`Shared::progress`]): with nothing queued to send, no event, no tail, no
    /// close, no shutdown and no press (the conditions below), `flush_tx` and `settle`
    /// would find nothing to do but keep the hold. Whatever else the read brings is left to
    /// the general round: octets that are not such FPDUs stay at the front of the read's
    /// buffer ([`SmallRest`]), which `pump_input` feeds first as if it had just read them;
    /// the end of the input and errors are recorded as `pump_input` records them.
    ///
    /// With `reader`, for a thread inside a stream `recv` on the socket (the socketpair and the
    /// backlog empty): it takes what lands in the backlog at once, so no hold is needed.
    pub(crate) fn small_round(&mut self, sh: &Shared, reader: bool) -> SmallRound {
        if !(self.hold || reader) || !self.stream_mode || !self.quiet_but_input(sh) {
            return SmallRound::General { read: true };
        }
        let Some(conn) = self.conn.as_mut() else {
            return SmallRound::General { read: true };
        };
        if !conn.at_stream_boundary() || conn.recvs_posted() != 0 || !conn.transmit_idle() {
            return SmallRound::General { read: true };
        }
        let (mut rx_buf, n) = match self.one_step_read(sh, BIG_READ) {
            Ok(r) => r,
            Err(round) => return round,
        };
        let conn = self.conn.as_mut().expect("checked above");
        // (TCP returns less than asked only when its queue ran out)
        let drained = n < BIG_READ;
        let mut at = 0;
        let mut out = self.backlog.take_spare();
        let taken = conn.take_stream_sends(&rx_buf[..n], &mut at, &mut out);
        self.bytes_rx += out.len() as u64;
        self.backlog.push(out);
        if at < n {
            // (fed by the general round, with the read's shape: `pump_input`)
            if at > 0 {
                rx_buf.copy_within(at..n, 0);
            }
            self.small_rest = Some(SmallRest {
                buf: rx_buf,
                len: n - at,
                taken,
                read: n,
            });
        } else {
            read_shape(&mut self.large_stream, &mut self.small_run, taken, n);
            sh.engine.rx_buf_put(rx_buf);
        }
        if at == n && drained {
            self.rx_counts.small_rounds += 1;
            SmallRound::Done
        } else {
            SmallRound::General { read: !drained }
        }
    }

    /// The commonest round of a thread waiting for completions ([`DdpSocket::wait_cq`]) on
    /// a socket in posted mode: Sends into posted receives, whole in one read, and nothing
    /// else for the round to do. It reads as `pump_input` would between messages (one
    /// buffered read, of [`SMALL_READ`] or, after small messages, [`BIG_READ`]), feeds the
    /// read to the connection into `mem`, and puts the receive completions at the front of
    /// the events into the CQ as `settle` would. `Done` when the read drained the socket and
    /// that was all: no other event, nothing to send, no stream bytes (with the conditions
    /// of [`ConnState::quiet_but_input`], `flush_tx` and `settle` would find nothing more
    /// to do). Otherwise the general round runs on with `mem` ([`Shared::progress_in`]),
    /// which sees the rest of the events in order; the end of the input and errors are
    /// recorded as `pump_input` records them.
    ///
    /// [`DdpSocket::wait_cq`]: crate::driver::socket::DdpSocket::wait_cq
    pub(crate) fn posted_round(
        &mut self,
        sh: &Shared,
        mem: &mut SessionMem<'_, '_, '_>,
    ) -> SmallRound {
        // (a hold for a stream reader is `settle`'s to end: not here)
        if self.stream_mode || self.hold || !self.quiet_but_input(sh) || mem.has_sink() {
            return SmallRound::General { read: true };
        }
        let Some(conn) = self.conn.as_mut() else {
            return SmallRound::General { read: true };
        };
        // (between messages, where `pump_input` makes a buffered read too: inside one it
        // may place the payload straight into the receive's buffer)
        if conn.recvs_posted() == 0 || !conn.is_idle() || !conn.transmit_idle() {
            return SmallRound::General { read: true };
        }
        let asked = if self.small_rx { BIG_READ } else { SMALL_READ };
        let (mut rx_buf, n) = match self.one_step_read(sh, asked) {
            Ok(r) => r,
            Err(round) => return round,
        };
        let conn = self.conn.as_mut().expect("checked above");
        let fpdus = conn.stats().fpdus_in;
        input_from(conn, &mut self.backlog, &mut rx_buf, n, mem, sh);
        sh.engine.rx_buf_put(rx_buf);
        // (what `pump_input` learns from a buffered read)
        let headers = (conn.stats().fpdus_in - fpdus) as usize;
        read_shape(&mut self.large_stream, &mut self.small_run, headers, n);
        if conn.rx_ulpdu_len().is_some_and(|l| l >= STREAM_DIRECT_MIN) {
            (self.large_stream, self.small_run) = (true, 0);
        }
        if mem.stream_bytes > 0 {
            self.tagged_seen = false;
        }
        // `settle`'s steps for receive completions, in the order of the events
        while let Some(Event::RecvCompletion(c)) =
            conn.poll_event_if(|e| matches!(e, Event::RecvCompletion(_)))
        {
            if c.status == WcStatus::Success {
                self.bytes_rx += c.byte_len;
            }
            sh.push_wc(wc_from_completion(&c, self.last_term), self.defer_wc);
        }
        let drained = n < asked;
        if drained
            && !conn.has_events()
            && conn.state() == State::Open
            && conn.transmit_idle()
            && mem.overflow.is_empty()
            && mem.stream_bytes == 0
        {
            self.rx_counts.small_rounds += 1;
            SmallRound::Done
        } else {
            SmallRound::General { read: !drained }
        }
    }

    /// Whether, of all a round of progress does, only the input may find work: open, no
    /// input kept back, no stream backlog, nothing of ours to send or close, no event, no
    /// RDMA Read under way (the one-step rounds' common conditions; each adds its own).
    fn quiet_but_input(&self, sh: &Shared) -> bool {
        !(self.announced
            || self.large_stream
            || self.tagged_seen
            || self.rx_eof
            || self.rd_shut
            || self.conn_done
            || self.finalized
            || self.pressed
            || self.want_shut_wr
            || self.tail.is_some()
            || self.close_deadline.is_some()
            || self.deferred_wrs != 0
            || self.bytes_tx >= self.mss_check_at
            || self.has_pending_input()
            || !self.backlog.is_empty()
            || !matches!(self.phase, Phase::Open)
            || sh.user_closed.load(std::sync::atomic::Ordering::Relaxed))
            && self.conn.as_ref().is_some_and(|c| {
                c.reads_outstanding() == 0 && c.reads_owed() == 0 && !c.has_events()
            })
    }

    /// The read of a one-step round: up to `asked` octets into a receive buffer. `Ok` with
    /// the buffer and the octets read; `Err` with the general round to run when the read
    /// found nothing, the end of the input or an error (recorded as `pump_input` records
    /// them).
    fn one_step_read(&mut self, sh: &Shared, asked: usize) -> Result<(Vec<u8>, usize), SmallRound> {
        self.rx_limit = sh.engine.rx_backlog_limit();
        while let Some(b) = self.backlog.take_freed() {
            sh.engine.rx_buf_put(b);
        }
        let mut rx_buf = sh.engine.rx_buf_take();
        self.inq_fresh = false;
        let mark = sh.wait_set.tcp_mark();
        self.rx_counts.reads += 1;
        let Some(conn) = self.conn.as_mut() else {
            sh.engine.rx_buf_put(rx_buf);
            return Err(SmallRound::General { read: true });
        };
        let round = match sys::recv(sh.tcp_fd, &mut rx_buf[..asked], libc::MSG_DONTWAIT) {
            Ok(0) => {
                input_ended(&mut self.rx_eof, self.stream_mode, self.tcp_shut_wr, conn);
                SmallRound::General { read: false }
            }
            Ok(n) => {
                // (TCP returns less than asked only when its queue ran out)
                if n < asked {
                    sh.wait_set.tcp_drained(mark);
                }
                self.inq_floor = self.inq_floor.saturating_sub(n);
                return Ok((rx_buf, n));
            }
            Err(Errno::EAGAIN) => {
                sh.wait_set.tcp_drained(mark);
                SmallRound::General { read: false }
            }
            Err(e) => {
                input_failed(&mut self.rx_eof, &mut self.so_error, conn, e);
                SmallRound::General { read: false }
            }
        };
        sh.engine.rx_buf_put(rx_buf);
        Err(round)
    }

    /// Whether stream data for the reader waits in the TCP socket, a whole FPDU's worth at
    /// least (the reader's `recv` can then place it straight into its buffer), with nothing
    /// of the stream in the engine before it. Between FPDUs it reads the next header (or its
    /// rest, where the last read ended inside it), so the reader's `recv` starts at the
    /// payload; that read also says what is left in the kernel (`TCP_INQ`). Otherwise, or
    /// on a kernel without `TCP_INQ`, it costs a `FIONREAD` where what is known falls short.
    pub(crate) fn stream_waiting(&mut self, sh: &Shared) -> bool {
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        if !self.large_stream
            || self.rx_eof
            || self.rd_shut
            || !self.backlog.is_empty()
            || !self.pending_in.is_empty()
            || self.small_rest.is_some()
            || !matches!(self.phase, Phase::Open)
        {
            return false;
        }
        let need = match conn.stream_fpdu_left() {
            Some(n) => n,
            None => {
                // (between FPDUs, or inside a header where the last TCP segment ended)
                let boundary = conn.at_stream_boundary();
                let Some(h) = conn.stream_header_left().filter(|&h| h <= NEXT_HEADER) else {
                    return false;
                };
                // (no `FIONREAD` first: a read that ends inside the header feeds what it got,
                // and the next round reads the rest; the kernel says what is left after it)
                let mut head = [0u8; NEXT_HEADER];
                let mut iov = [sys::iovec(head.as_mut_ptr(), h)];
                let mark = sh.wait_set.tcp_mark();
                let n = match sys::recvmsg_inq(sh.tcp_fd, &mut iov, libc::MSG_DONTWAIT) {
                    Ok((n, inq)) => {
                        if n > 0 && inq == Some(0) {
                            sh.wait_set.tcp_drained(mark);
                        }
                        self.inq_floor = inq.unwrap_or(self.inq_floor.saturating_sub(n));
                        self.inq_fresh = inq.is_some();
                        n
                    }
                    Err(Errno::EAGAIN) => {
                        sh.wait_set.tcp_drained(mark);
                        return false;
                    }
                    Err(e) => {
                        // (reported once: handled here as `pump_input` would have)
                        input_failed(&mut self.rx_eof, &mut self.so_error, conn, e);
                        return false;
                    }
                };
                if n == 0 {
                    return false; // (EOF: `pump_input` reads it again)
                }
                // (a whole header read between FPDUs is checked as such first)
                let plain = !boundary || conn.next_stream_fpdu_len(&head[..n]).is_some();
                // The octets are input now, whatever they start: the connection takes them
                // (a header alone delivers no stream data; anything it does deliver, or an
                // event of a tiny FPDU, is handled as after any read).
                let mut mem = SessionMem::new(&sh.engine.registry, None);
                mem.overflow = self.backlog.take_spare();
                let _ = conn.handle_input(&head[..n], &mut mem);
                self.backlog.push(core::mem::take(&mut mem.overflow));
                self.bytes_rx += mem.stream_bytes;
                self.rx_counts.reads += 1;
                // (the header says what its FPDU is: a small one counts toward the end of
                // the large mode as a buffered read of it would, `read_shape`; the reader's
                // read of the rest finds no header of it to count)
                match conn.rx_ulpdu_len() {
                    Some(l) if l >= STREAM_DIRECT_MIN => self.small_run = 0,
                    Some(_) => {
                        self.small_run += 1;
                        if self.small_run >= SMALL_RUN_END {
                            self.large_stream = false;
                        }
                    }
                    None => {}
                }
                match conn.stream_fpdu_left() {
                    // (the kernel has just said what it has: not asked again)
                    Some(left) if plain && self.inq_fresh => return self.inq_floor >= left,
                    Some(left) if plain => left,
                    _ => return false,
                }
            }
        };
        kernel_has(&mut self.inq_floor, sh.tcp_fd, need)
    }

    pub(crate) fn wants_input(&self) -> bool {
        !self.announced && self.input_open()
    }

    /// Whether the connection takes TCP input now, announced to a reader or not.
    fn input_open(&self) -> bool {
        matches!(self.phase, Phase::Open)
            && !self.rx_eof
            && !self.conn_done
            && self.backlog.len() < self.rx_limit
    }

    /// The TCP interest the progress thread should have for this socket.
    pub(crate) fn tcp_interest(&self) -> u32 {
        if self.finalized {
            return 0;
        }
        match &self.phase {
            Phase::Startup(_) => self.startup_events as u32,
            Phase::Failed => 0,
            Phase::Open => {
                let mut ev = 0;
                // (an epoll group's shadow stays armed, level-triggered, while the input is
                // announced to its reader: the reader's `recv` takes it, and neither side
                // spends an `epoll_ctl` on it; a report meanwhile disarms it, see
                // `EpollGroup::service`)
                let input = if self.group.is_some() {
                    self.input_open()
                } else {
                    self.wants_input()
                };
                if input {
                    ev |= libc::EPOLLIN as u32;
                }
                if self.tail.is_some() {
                    ev |= libc::EPOLLOUT as u32;
                }
                ev
            }
        }
    }

    /// The `eng_end` interest the progress thread should have.
    pub(crate) fn eng_interest(&self) -> u32 {
        if self.finalized {
            return 0;
        }
        let mut ev = 0;
        let sending = !self.eng_rd_eof
            && !self.pressed
            && !self.tcp_shut_wr
            && !matches!(self.phase, Phase::Failed)
            && !self.conn_done
            && self.stream_queued + self.pre_open_tx.len() < TX_STREAM_LIMIT;
        if sending {
            ev |= libc::EPOLLIN as u32;
        }
        if !self.backlog.is_empty() && !self.hold {
            ev |= libc::EPOLLOUT as u32;
        }
        if self.others_hold && (self.eng_rd_eof || self.stream_over()) {
            // (its input ended, or could not be sent: the hang-up, when the last holder
            // closes, is all that is left to hear of it; `Shared::close_if_released`)
            ev |= libc::EPOLLHUP as u32;
        }
        ev
    }

    /// Whether nothing of ours is left to write: the MPA exchange failed, the socket is
    /// finalized, or everything was written and the FIN sent.
    pub(crate) fn flushed(&self) -> bool {
        self.finalized
            || matches!(self.phase, Phase::Failed)
            || (self.tcp_shut_wr && self.tail.is_none())
    }

    /// Whether the socketpair holds nothing more of what the application wrote (after its
    /// `shutdown(SHUT_WR)` or `close`: what remains there was written before, and goes out
    /// before the FIN): `eng_end` read to its EOF, or nothing in it but a back-pressure
    /// token. One `FIONREAD` unless EOF was seen.
    pub(crate) fn pair_drained(&self, sh: &Shared) -> bool {
        self.eng_rd_eof
            || self.stream_over()
            || sys::inq(sh.eng_end).is_ok_and(|n| n <= self.token_bytes())
    }

    /// A closed socket ([`ConnState::close_deadline`]) whose connection is open and whose
    /// socketpair holds nothing more of the application's: the graceful close (queued work
    /// and owed Read Responses still go out, outstanding Reads are awaited, then the FIN).
    pub(crate) fn close_when_drained(&mut self, sh: &Shared) {
        if self.close_deadline.is_some()
            && self.is_open()
            && self.pair_drained(sh)
            && let Some(c) = self.conn.as_mut()
        {
            c.close();
        }
    }

    /// Whether a closing socket is done: the stream is over, or there is nothing left to
    /// send and nothing the peer still owes.
    pub(crate) fn close_done(&self) -> bool {
        match &self.phase {
            Phase::Startup(_) => false,
            Phase::Failed => true,
            Phase::Open => self.conn_done && self.tail.is_none() && self.tcp_shut_wr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything left in the backlog, drained through `drain_into` in pieces of `step`.
    fn drain(b: &mut Backlog, step: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let mut piece = Vec::new();
            let n = b.drain_into(|d| {
                let take = d.len().min(step - piece.len());
                piece.extend_from_slice(&d[..take]);
                take
            });
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&piece);
        }
    }

    /// Copies and receive buffers kept by reference come out in the order they went in,
    /// whatever the pieces a reader takes; emptied receive buffers come back for the pool.
    #[test]
    fn backlog_keeps_order_across_copies_and_read_buffers() {
        let mut b = Backlog::default();
        let read1: Vec<u8> = (0..200u8).collect();
        let read2: Vec<u8> = (0..200u8).rev().collect();
        b.push(b"abc".to_vec());
        b.push_read(read1.clone(), vec![10..50, 60..60, 70..100]);
        b.push(b"defg".to_vec());
        b.push_read(read2.clone(), vec![0..5, 150..200]);
        let mut want = b"abc".to_vec();
        want.extend_from_slice(&read1[10..50]);
        want.extend_from_slice(&read1[70..100]);
        want.extend_from_slice(b"defg");
        want.extend_from_slice(&read2[0..5]);
        want.extend_from_slice(&read2[150..200]);
        assert_eq!(b.len(), want.len());
        // the socketpair's view: the first ranges as iovecs, in order
        let mut iov = [sys::iovec(core::ptr::null(), 0); 3];
        assert_eq!(b.front_iov(&mut iov), 3);
        assert_eq!(iov[1].iov_len, 40);
        assert_eq!(iov[2].iov_len, 30);
        for step in [1, 7, 64, 1000] {
            let mut c = Backlog::default();
            c.push(b"abc".to_vec());
            c.push_read(read1.clone(), vec![10..50, 60..60, 70..100]);
            c.push(b"defg".to_vec());
            c.push_read(read2.clone(), vec![0..5, 150..200]);
            assert_eq!(drain(&mut c, step), want, "pieces of {step}");
            assert!(c.is_empty());
            let mut freed = 0;
            while c.take_freed().is_some() {
                freed += 1;
            }
            assert_eq!(freed, 2, "both receive buffers back (pieces of {step})");
        }
        // a receive buffer with no stream bytes in it is not kept
        let mut c = Backlog::default();
        c.push_read(read1, vec![Range { start: 5, end: 5 }]);
        assert!(c.is_empty() && c.take_freed().is_some());
    }
}
