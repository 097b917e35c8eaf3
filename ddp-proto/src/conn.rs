//! The connection: one RDMAP stream over MPA over a reliable byte stream, as a sans-I/O state
//! machine (quinn-proto style).
//!
//! Commands go in (`post_recv`, `post_send`, `post_send_inv`, `post_write`, `post_read`,
//! `close`), received bytes go in ([`Connection::handle_input`], or direct placement via
//! [`Connection::rx_plan`] / [`Connection::placed_direct`]), and out come the bytes to write
//! ([`Connection::poll_transmit`], as pieces for `writev`) and events
//! ([`Connection::poll_event`]: completions, peer Terminate, errors, close). Memory is reached
//! only through [`Memory`]. There is no timer: nothing in RDMAP/DDP/MPA full operation needs
//! one ([`Connection::poll_timeout`] is always `None`; startup timeouts live in
//! [`crate::mpa::startup`]).
//!
//! # Receive side (RFC 5041 §7, RFC 5040 §5–§7)
//!
//! Every segment's header is checked before a byte of its payload is placed:
//! DDP version, RDMAP version, opcode vs. buffer model, QN ([`rdmap::check_header`]); then
//! per message type: tagged STag/key/PD/rights/wrap/bounds for RDMA Write
//! ([`crate::ddp::tagged`], DDP-layer codes); the oldest outstanding read for a Read Response
//! ([`crate::rdmap::reads`]); MSN/MO/buffer/length for Sends ([`crate::ddp::untagged`]); MSN,
//! MO and size for Read Requests, whose source is then checked with RDMAP remote-protection
//! codes. A header that fails is not reported at once: the rest of the FPDU is discarded and
//! the error is raised at the end of the FPDU, *after* the CRC check, so that a corrupted
//! header is reported as a CRC error (LLP) and not as a bogus protection error. Payload is
//! placed as it arrives (before the CRC is known, which is what makes direct placement
//! possible: a corrupted payload can only land inside a validated target); nothing completes
//! before the FPDU's CRC has been verified. Stream-mode data is handed to
//! [`Memory::deliver_stream`] only after its FPDU's CRC was verified; when the memory offers
//! room in the reader's buffer ([`Memory::stream_room`]), it may be placed there before
//! (directly, [`DirectTarget::Stream`], or from buffered input) and is delivered by
//! [`Memory::stream_commit`] at the same point.
//!
//! First error wins: a Terminate is queued (its code from [`ProtoError::term_code`], header
//! copies per [`crate::rdmap::terminate`]), every work request completes with an error status,
//! further input is ignored, and once the Terminate has been handed out by `poll_transmit`
//! the connection is [`Event::Closed`] (the driver closes TCP). A Terminate from the peer
//! ends the stream the same way, without sending one back.
//!
//! # Transmit side
//!
//! Posted work requests go out in order. A Read waits while ORD reads are outstanding (this
//! also holds back what was posted after it, as in siw: the send queue is ordered). Read
//! Responses owed to the peer are served in order, alternating *message by message* with our
//! own send queue (our choice for fairness: interleaving at segment level would be legal for a
//! tagged and an untagged message, but siw rejects two interleaved messages of the same
//! kind, e.g. a Write and a Read Response). Each message is cut into segments ≤ MULPDU
//! ([`crate::ddp::segment`]). Payload is never copied: a [`Transmit`] references local memory
//! and registered regions by address, and the framer computes the CRC over the real bytes
//! obtained through [`Memory::local`] / [`Memory::read`].
//!
//! A send-side completion (Send, Write) is released when the driver reports, with
//! [`Connection::on_written`], that the stream bytes up to the message's last byte were
//! written (until then the driver may still read the source buffer). Send-queue completions
//! are released in posting order (a Read completes when its Read Response has arrived).
//!
//! # Peer-to-peer (RFC 6581 §4)
//!
//! An initiator with `initiator_sends_rtr` sends the RTR first: a zero-length RDMA Write to
//! STag 1, TO 0 (what siw sends), or a zero-length Read Request (it occupies an ORD slot
//! outside the ORD check; its zero-length Read Response completes it silently), or a
//! zero-length Send. A responder with `responder_expects_rtr` sends nothing until the first
//! FPDU from the peer has arrived; a zero-length Send in that position is swallowed (it is
//! the RTR, not an application message).

use core::fmt;
use core::ops::Range;
use core::time::Duration;
use std::collections::VecDeque;

use crate::ddp::segment::Segmenter;
use crate::ddp::tagged::{self, CheckLayer};
use crate::ddp::untagged::{QueueRx, QueueTx, SendPlacement, SendRx, SendSink};
use crate::ddp::{Access, Memory, STag, Sge, SgeList, sge_pieces, sge_total};
use crate::error::{ProtoError, TermCode, TermLayer};
use crate::mpa::deframer::{
    Deframer, Event as DfEvent, RxConfig, UNTAGGED_HEADER_LEN, UlpduHeader,
};
use crate::mpa::framer::{Framer, Piece, TxConfig};
use crate::mpa::markers::{MAX_ULPDU_LEN, ULPDU_LENGTH_LEN, fpdu_len_without_markers};
use crate::mpa::startup::{Negotiated, RtrKind};
use crate::rdmap;
use crate::rdmap::reads::{InboundReads, OutboundReads, OutstandingRead};
use crate::rdmap::terminate::{ErrorContext, terminate_header, terminate_message};
use crate::wire::ddp::{DdpBuffer, DdpRepr, header_len_for};
use crate::wire::rdmap::{
    Opcode, READ_REQUEST_LEN, RdmapHeader, RdmapMessage, ReadRequestBody, TerminateHeader,
    TerminatedDdpHeader,
};

pub use crate::ddp::untagged::RecvMode;
pub use crate::rdmap::{WcOpcode, WcStatus};

/// Which side of the MPA exchange this connection was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sent the MPA Request (the active side).
    Initiator,
    /// Sent the MPA Reply (the passive side).
    Responder,
}

/// The smallest MULPDU a connection accepts: every header (a Terminate with both copies is
/// 70 bytes) must fit, with room for payload.
pub const MIN_MULPDU: usize = 128;

/// The STag of the zero-length RDMA Write RTR (RFC 6581 leaves it open; siw uses 1 because
/// "some HW may treat STag 0 special").
pub const RTR_STAG: STag = STag(1);

/// The largest payload [`Connection::send_now_small`] frames (copied into the transmit's
/// scratch). Up to 16 KiB the copy costs less than the general path that would write from
/// the caller's bytes (a work request, a round of the socket's work); measured in session 39:
/// 4 KiB ping-pong 12.9 → 11.8 µs, 8 KiB 14.3 → 13.2 µs, 8 KiB window bandwidth +15 %, 16 KiB
/// bandwidth unchanged (docs/performance.md).
pub const SMALL_SEND_MAX: usize = 16 * 1024;

/// Segments of the general transmit path whose payload is at most this many octets are
/// framed as one contiguous copy ([`Connection::frame_segment`]).
const COPY_FRAME_MAX: usize = 1024;

/// How far small messages may take a `Transmit` past its bound
/// ([`Connection::small_behind`]).
const SMALL_BEHIND_MAX: usize = 4096;

/// Per-connection settings that do not come from the MPA negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnConfig {
    /// The largest ULPDU we send to this peer (`mpa::markers::mulpdu(emss, markers_tx)`).
    pub mulpdu: usize,
    /// The largest ULPDU we accept (a larger ULPDU_LENGTH is an LLP error). Default 65535.
    pub max_rx_ulpdu: usize,
    /// What a Send that finds no posted receive does.
    pub recv_mode: RecvMode,
    /// Our protection domain: tagged accesses to regions of other PDs are refused.
    pub pd: u32,
    /// How many wire bytes one [`Transmit`] may batch (at least one FPDU is always included).
    pub max_transmit: usize,
    /// The same bound while a Read Response is being framed (a driver may want Read
    /// Responses, which no local work request waits for, in larger pieces than posted work).
    pub max_transmit_read_response: usize,
}

impl ConnConfig {
    /// A configuration with the defaults for everything but MULPDU, receive mode and PD.
    pub fn new(mulpdu: usize, recv_mode: RecvMode, pd: u32) -> ConnConfig {
        ConnConfig {
            mulpdu,
            max_rx_ulpdu: MAX_ULPDU_LEN,
            recv_mode,
            pd,
            max_transmit: 256 * 1024,
            max_transmit_read_response: 256 * 1024,
        }
    }
}

/// Why a connection could not be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// MULPDU below [`MIN_MULPDU`] or above 65535.
    Mulpdu(usize),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Mulpdu(m) => write!(f, "MULPDU {m} outside {MIN_MULPDU}..=65535"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why a command was refused at once (nothing was queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The connection is closing, closed or in error.
    NotOpen,
    /// The message is longer than 2^32 - 1 bytes.
    TooLong,
    /// A read whose sink SGEs are shorter than the read.
    SinkTooSmall,
    /// A read on a connection with ORD 0.
    NoReads,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            PostError::NotOpen => "connection not open",
            PostError::TooLong => "message longer than 2^32 - 1 bytes",
            PostError::SinkTooSmall => "read sink shorter than the read",
            PostError::NoReads => "ORD is 0: no RDMA Read possible",
        };
        f.write_str(s)
    }
}

impl std::error::Error for PostError {}

/// Flags of a Send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendFlags {
    /// Report a completion on success (errors are always reported).
    pub signaled: bool,
    /// Send with Solicited Event (RFC 5040 §5.1).
    pub solicited: bool,
}

/// A finished work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The caller's work request id.
    pub wr_id: u64,
    /// What it was.
    pub opcode: WcOpcode,
    /// How it ended.
    pub status: WcStatus,
    /// Bytes transferred (for a receive: the message length).
    pub byte_len: u64,
    /// Receive of a Send with Invalidate: the STag that was invalidated.
    pub inv_stag: Option<STag>,
    /// Receive of a Send with Solicited Event.
    pub solicited: bool,
}

/// What the connection reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A send-queue work request (Send, Write, Read) finished.
    Completion(Completion),
    /// A posted receive finished.
    RecvCompletion(Completion),
    /// The peer sent a Terminate (the stream is dead).
    PeerTerminated(TerminateHeader),
    /// We detected this error (a Terminate reporting it is queued, except for
    /// [`ProtoError::StreamLost`]).
    Error(ProtoError),
    /// Nothing more will be sent or received: the driver may close the TCP connection.
    Closed,
}

/// Where directly placed bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectTarget {
    /// Into a registered region (an RDMA Write), at this byte offset of it.
    Region {
        /// The validated STag.
        stag: STag,
        /// Byte offset in the region.
        offset: u64,
    },
    /// Into local memory named by a work request (posted receive, Read Response sink).
    Local {
        /// Address.
        addr: u64,
    },
    /// Stream data, into the reader's buffer ([`Memory::stream_room`]), unverified until
    /// its FPDU's CRC checks. Place it only if [`Memory::stream_room`]`(at)` is at least
    /// `left`, so that the FPDU can end there.
    Stream {
        /// Unverified bytes of this FPDU already in the reader's buffer: the place is
        /// right after them.
        at: usize,
        /// Payload bytes of this FPDU still to come (`len` of the plan is the next run).
        left: usize,
    },
}

/// What the driver should do with the next received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxPlan {
    /// Read up to `len` bytes straight into `target`, then call
    /// [`Connection::placed_direct`].
    Direct {
        /// Where.
        target: DirectTarget,
        /// At most this many bytes.
        len: usize,
    },
    /// Read into a buffer and call [`Connection::handle_input`].
    Buffered,
}

/// One run of bytes of a [`Transmit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxPiece {
    /// Bytes of [`Transmit::scratch`].
    Scratch(Range<usize>),
    /// Local memory named by a work request.
    Local {
        /// Address.
        addr: u64,
        /// Length.
        len: usize,
    },
    /// Bytes of a registered region (a Read Response source, validated).
    Region {
        /// The STag.
        stag: STag,
        /// Byte offset in the region.
        offset: u64,
        /// Length.
        len: usize,
    },
}

impl TxPiece {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            TxPiece::Scratch(r) => r.len(),
            TxPiece::Local { len, .. } | TxPiece::Region { len, .. } => *len,
        }
    }

    /// Whether the piece is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Bytes to write to the TCP connection, in order, as pieces (for `writev`). Every piece must
/// be written; report progress with [`Connection::on_written`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transmit {
    /// Owned small bytes (MPA length, headers, markers, pad, CRC).
    pub scratch: Vec<u8>,
    /// The pieces in wire order.
    pub pieces: Vec<TxPiece>,
    /// How many FPDUs the pieces hold.
    pub fpdus: usize,
}

impl Transmit {
    /// Total bytes.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(TxPiece::len).sum()
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of one piece.
    ///
    /// # Panics
    ///
    /// If a `Local` piece is not accessible in `mem` (the application freed a buffer it had
    /// posted: a bug outside the protocol).
    pub fn piece_bytes<'a, M: Memory + ?Sized>(&'a self, piece: &TxPiece, mem: &'a M) -> &'a [u8] {
        match piece {
            TxPiece::Scratch(r) => &self.scratch[r.clone()],
            TxPiece::Local { addr, len } => mem.local(*addr, *len).expect("posted buffer vanished"),
            TxPiece::Region { stag, offset, len } => mem.read(*stag, *offset, *len),
        }
    }

    /// Gathers all bytes into one vector (for tests and simple drivers; the data path writes
    /// the pieces with `writev`).
    pub fn gather<M: Memory + ?Sized>(&self, mem: &M) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for p in &self.pieces {
            v.extend_from_slice(self.piece_bytes(p, mem));
        }
        v
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// FPDUs received (headers seen).
    pub fpdus_in: u64,
    /// FPDUs framed for sending.
    pub fpdus_out: u64,
    /// Payload bytes placed by the driver directly ([`Connection::placed_direct`]).
    pub bytes_placed_direct: u64,
    /// Payload bytes placed from buffered input.
    pub bytes_placed_buffered: u64,
    /// Unverified stream bytes taken back out of a reader's buffer
    /// ([`Connection::unplace_stream`]).
    pub bytes_unplaced: u64,
    /// Payload bytes of tagged messages received and placed (RDMA Writes, Read Responses).
    pub bytes_tagged_in: u64,
    /// Payload bytes of the Read Responses we sent (the peer's RDMA Reads served).
    pub bytes_read_response_out: u64,
    /// CRC errors detected.
    pub crc_errors: u64,
    /// Terminates sent.
    pub terminates_sent: u64,
    /// Terminates received.
    pub terminates_received: u64,
}

/// Coarse state of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Running.
    Open,
    /// `close()` was called: queued work still goes out, nothing new is accepted.
    Closing,
    /// An error was detected or a Terminate received; at most a Terminate goes out.
    Error,
    /// Finished.
    Closed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum WrKind {
    Send {
        solicited: bool,
        inv_stag: Option<STag>,
    },
    Write {
        stag: STag,
        to: u64,
    },
    Read {
        sink_stag: STag,
        sink_to: u64,
        source_stag: STag,
        source_to: u64,
        len: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SendWr {
    wr_id: u64,
    kind: WrKind,
    /// Send/Write source, or Read sink.
    sges: SgeList,
    len: u64,
    signaled: bool,
    internal: bool,
}

impl SendWr {
    fn opcode(&self) -> WcOpcode {
        match self.kind {
            WrKind::Send { .. } => WcOpcode::Send,
            WrKind::Write { .. } => WcOpcode::Write,
            WrKind::Read { .. } => WcOpcode::Read,
        }
    }
}

/// A message being transmitted.
#[derive(Debug, Clone)]
enum TxActive {
    Sq {
        wr: SendWr,
        seg: Segmenter,
        msn: u32,
    },
    ReadResponse {
        seg: Segmenter,
    },
}

/// A send-queue completion waiting for its turn.
#[derive(Debug, Clone)]
struct PendingCompletion {
    c: Completion,
    /// Stream position that must be written first.
    written_pos: u64,
    /// Whether the operation is finished (a Read waits for its response).
    done: bool,
    signaled: bool,
}

/// Where the payload of the segment being received goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    None,
    Region { stag: STag, offset: u64 },
    RecvSges { offset: u64 },
    ReadSges { offset: u64 },
    Stream,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Collecting {
    ReadRequest { msn: u32 },
    Terminate,
}

/// Receive state of the current FPDU.
#[derive(Debug, Clone)]
enum RxSeg {
    Idle,
    /// Payload goes to `target`; `done` bytes so far of `len`.
    Place {
        opcode: Opcode,
        last: bool,
        target: Target,
        len: usize,
        done: usize,
        inv_stag: Option<STag>,
        rtr: bool,
    },
    /// A Read Request or Terminate body is being gathered.
    Collect {
        what: Collecting,
        ctx: ErrorContext,
        buf: Vec<u8>,
    },
    /// The header failed a check: discard the rest, report at the end of the FPDU.
    Reject {
        err: ProtoError,
        ctx: Option<ErrorContext>,
    },
}

/// Longest Terminate header we keep (control 4 + length 2 + DDP header 18 + Read Request 28).
const MAX_TERMINATE_BODY: usize = 52;

/// One RDMAP stream (see the module docs).
#[derive(Debug)]
pub struct Connection {
    role: Role,
    cfg: ConnConfig,
    state: State,
    framer: Framer,
    /// The framer's output for one FPDU (kept: no allocation per FPDU).
    frame_pieces: Vec<Piece>,
    deframer: Deframer,
    // ---- transmit ----
    sq: VecDeque<SendWr>,
    active: Option<TxActive>,
    prefer_rr: bool,
    tx_qn: [QueueTx; 3],
    rtr_to_send: Option<RtrKind>,
    /// Responder: hold all output until the first FPDU (the RTR) has arrived.
    hold_for_rtr: bool,
    rtr_kind: Option<RtrKind>,
    terminate: Option<TerminateHeader>,
    tx_pos: u64,
    written_pos: u64,
    pending: VecDeque<PendingCompletion>,
    read_serial: u32,
    // ---- receive ----
    rx: RxSeg,
    send_rx: SendRx,
    rr_rx: QueueRx,
    term_rx: QueueRx,
    orq: OutboundReads,
    irq: InboundReads,
    stream_buf: Vec<u8>,
    /// Payload bytes of the current stream FPDU in the reader's buffer, unverified
    /// ([`Memory::stream_place`]); `stream_buf` holds the ones after them.
    stream_placed: usize,
    /// The shape of the stream's Send messages, for a driver that reads several FPDUs
    /// ahead ([`Connection::rx_stream_shape`]): the current stream segment's MO, the payload
    /// of the last segment that did not end its message (a full one: the peer's MULPDU
    /// less the header), and the length of the last message that ended.
    stream_mo: u32,
    stream_full: usize,
    stream_msg: usize,
    // ---- out ----
    events: VecDeque<Event>,
    error: Option<ProtoError>,
    stats: Stats,
    closed_reported: bool,
}

/// The header of a plain Send that ends its message (`RdmapHeader::new(RdmapMessage::Send
/// { msn, mo }, true)` emitted, built in place: DDP control `0x41`, RDMAP control `0x43`,
/// queue 0), the mirror of what [`Connection::stream_send`] accepts.
fn plain_send_header(msn: u32, mo: u32) -> [u8; UNTAGGED_HEADER_LEN] {
    let mut b = [0u8; UNTAGGED_HEADER_LEN];
    b[0] = 0x41;
    b[1] = 0x43;
    b[10..14].copy_from_slice(&msn.to_be_bytes());
    b[14..18].copy_from_slice(&mo.to_be_bytes());
    b
}

impl Connection {
    /// A connection in full operation after the MPA exchange `neg`, on the side `role`.
    pub fn new(role: Role, neg: &Negotiated, cfg: ConnConfig) -> Result<Connection, ConfigError> {
        if !(MIN_MULPDU..=MAX_ULPDU_LEN).contains(&cfg.mulpdu) {
            return Err(ConfigError::Mulpdu(cfg.mulpdu));
        }
        let sends_rtr = role == Role::Initiator && neg.initiator_sends_rtr;
        let hold = role == Role::Responder && neg.responder_expects_rtr;
        Ok(Connection {
            role,
            cfg,
            state: State::Open,
            framer: Framer::new(TxConfig {
                crc: neg.crc,
                markers: neg.markers_tx,
            }),
            frame_pieces: Vec::new(),
            deframer: Deframer::new(RxConfig {
                crc: neg.crc,
                markers: neg.markers_rx,
                max_ulpdu: cfg.max_rx_ulpdu,
            }),
            sq: VecDeque::new(),
            active: None,
            prefer_rr: false,
            tx_qn: [QueueTx::default(); 3],
            rtr_to_send: if sends_rtr {
                Some(neg.rtr.unwrap_or(RtrKind::Write))
            } else {
                None
            },
            hold_for_rtr: hold,
            rtr_kind: neg.rtr,
            terminate: None,
            tx_pos: 0,
            written_pos: 0,
            pending: VecDeque::new(),
            read_serial: 0,
            rx: RxSeg::Idle,
            send_rx: SendRx::new(cfg.recv_mode),
            rr_rx: QueueRx::default(),
            term_rx: QueueRx::default(),
            orq: OutboundReads::new(u32::from(neg.ord)),
            irq: InboundReads::new(u32::from(neg.ird)),
            stream_buf: Vec::new(),
            stream_placed: 0,
            stream_mo: 0,
            stream_full: 0,
            stream_msg: 0,
            events: VecDeque::new(),
            error: None,
            stats: Stats::default(),
            closed_reported: false,
        })
    }

    /// The side of the MPA exchange.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The coarse state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The error that ended the stream, if any.
    pub fn error(&self) -> Option<ProtoError> {
        self.error
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Reads outstanding (ORD in use).
    pub fn reads_outstanding(&self) -> usize {
        self.orq.len()
    }

    /// Read Responses owed to the peer (IRD in use).
    pub fn reads_owed(&self) -> usize {
        self.irq.len()
    }

    /// A new MULPDU (the EMSS changed: RFC 5044 §4.1 derives the MULPDU from the current
    /// EMSS): messages not yet begun are cut with it; a message being sent keeps its own.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Mulpdu`] outside [`MIN_MULPDU`]`..=65535` (nothing changes).
    pub fn set_mulpdu(&mut self, mulpdu: usize) -> Result<(), ConfigError> {
        if !(MIN_MULPDU..=MAX_ULPDU_LEN).contains(&mulpdu) {
            return Err(ConfigError::Mulpdu(mulpdu));
        }
        self.cfg.mulpdu = mulpdu;
        Ok(())
    }

    /// The MULPDU messages are cut with now.
    pub fn mulpdu(&self) -> usize {
        self.cfg.mulpdu
    }

    /// Posted receives not yet matched.
    pub fn recvs_posted(&self) -> usize {
        self.send_rx.posted_len()
    }

    /// Whether the receive side is between messages: at an FPDU boundary, no Send message and
    /// no Read Response half received. A TCP end of stream here is a clean end; anywhere else it
    /// is [`ProtoError::StreamLost`] (see [`Connection::handle_eof`]).
    pub fn is_idle(&self) -> bool {
        self.deframer.is_idle()
            && !self.send_rx.queue().in_message()
            && self.orq.front().is_none_or(|r| r.received == 0)
    }

    /// Bytes this connection still has to write to the stream: the FPDU bytes framed by
    /// [`Connection::poll_transmit`] and not yet reported written ([`Connection::on_written`];
    /// exact), plus the FPDUs of everything queued and not framed yet (the rest of the message
    /// being segmented, posted Sends, Writes and Read Requests, Read Responses owed, an RTR, a
    /// pending Terminate), each counted as length field + header + payload + pad + CRC field.
    /// Markers of FPDUs not framed yet are not counted (with markers on, a lower bound). 0
    /// exactly when nothing is left to send; the driver adds its own unsent bytes and the
    /// socket's (what `SIOCOUTQ` reports for a DDP socket).
    pub fn unsent_len(&self) -> u64 {
        let mulpdu = self.cfg.mulpdu;
        let mut n = self.tx_pos - self.written_pos;
        if let Some(term) = self.terminate {
            n += fpdu_bytes(0, terminate_message(term, 0).buffer_len(), mulpdu);
        }
        if !matches!(self.state, State::Open | State::Closing) {
            return n;
        }
        n += match self.rtr_to_send {
            Some(RtrKind::Write) => fpdu_bytes(0, 14, mulpdu),
            Some(RtrKind::Send) => fpdu_bytes(0, 18, mulpdu),
            Some(RtrKind::Read) => fpdu_bytes(0, 18 + READ_REQUEST_LEN, mulpdu),
            None => 0,
        };
        if let Some(TxActive::Sq { wr, seg, .. }) = &self.active
            && !seg.is_done()
        {
            n += fpdu_bytes(seg.remaining(), sq_header_len(&wr.kind), mulpdu);
        }
        for wr in &self.sq {
            let payload = if matches!(wr.kind, WrKind::Read { .. }) {
                0
            } else {
                wr.len
            };
            n += fpdu_bytes(payload, sq_header_len(&wr.kind), mulpdu);
        }
        // The response being sent stays at the front until its last segment is framed, its
        // `sent` counting what was framed (the active segmenter's position).
        for job in self.irq.iter() {
            n += fpdu_bytes(u64::from(job.req.read_size - job.sent), 14, mulpdu);
        }
        n
    }

    /// What a Send that finds no posted receive does. A driver that offers both plain stream
    /// I/O and posted receives starts in [`RecvMode::Stream`] and switches to
    /// [`RecvMode::Posted`] when the application posts its first receive; the change applies
    /// from the next incoming message on.
    pub fn set_recv_mode(&mut self, mode: RecvMode) {
        self.send_rx.set_mode(mode);
    }

    /// The current receive mode (see [`Connection::set_recv_mode`]).
    pub fn recv_mode(&self) -> RecvMode {
        self.send_rx.mode()
    }

    /// No timer is needed in full operation: always `None`.
    pub fn poll_timeout(&self) -> Option<Duration> {
        None
    }

    fn accepting(&self) -> Result<(), PostError> {
        if self.state == State::Open {
            Ok(())
        } else {
            Err(PostError::NotOpen)
        }
    }

    // ------------------------------------------------------------------ commands

    /// Posts a receive buffer (message mode; in stream mode it takes precedence over the
    /// stream for the next Send).
    pub fn post_recv(&mut self, wr_id: u64, sges: &[Sge]) -> Result<(), PostError> {
        self.post_recv_list(wr_id, SgeList::from_slice(sges))
    }

    /// [`Connection::post_recv`] of an SGE list the caller built (kept as it is).
    pub fn post_recv_list(&mut self, wr_id: u64, sges: SgeList) -> Result<(), PostError> {
        if matches!(self.state, State::Error | State::Closed) {
            return Err(PostError::NotOpen);
        }
        self.send_rx.post_list(wr_id, sges);
        Ok(())
    }

    fn push_sq(
        &mut self,
        wr_id: u64,
        kind: WrKind,
        sges: &[Sge],
        signaled: bool,
    ) -> Result<(), PostError> {
        self.accepting()?;
        let len = sge_total(sges);
        if len > u64::from(u32::MAX) {
            return Err(PostError::TooLong);
        }
        self.sq.push_back(SendWr {
            wr_id,
            kind,
            sges: SgeList::from_slice(sges),
            len,
            signaled,
            internal: false,
        });
        Ok(())
    }

    /// Posts a Send (with Solicited Event if `flags.solicited`).
    pub fn post_send(
        &mut self,
        wr_id: u64,
        sges: &[Sge],
        flags: SendFlags,
    ) -> Result<(), PostError> {
        self.push_sq(
            wr_id,
            WrKind::Send {
                solicited: flags.solicited,
                inv_stag: None,
            },
            sges,
            flags.signaled,
        )
    }

    /// Posts a Send with Invalidate of the peer's `inv_stag` (and SE if `flags.solicited`).
    pub fn post_send_inv(
        &mut self,
        wr_id: u64,
        sges: &[Sge],
        inv_stag: STag,
        flags: SendFlags,
    ) -> Result<(), PostError> {
        let kind = WrKind::Send {
            solicited: flags.solicited,
            inv_stag: Some(inv_stag),
        };
        self.push_sq(wr_id, kind, sges, flags.signaled)
    }

    /// Posts an RDMA Write of `sges` to the peer's `stag` at `to`.
    pub fn post_write(
        &mut self,
        wr_id: u64,
        sges: &[Sge],
        stag: STag,
        to: u64,
        signaled: bool,
    ) -> Result<(), PostError> {
        self.push_sq(wr_id, WrKind::Write { stag, to }, sges, signaled)
    }

    /// Posts an RDMA Read of `len` bytes from the peer's `source_stag` at `source_to` into
    /// the local `sink`. It waits in the send queue while ORD reads are outstanding.
    ///
    /// The Data Sink STag/TO in the Read Request are ours to choose (the peer only echoes
    /// them): the TO is the first sink address, the STag a per-connection serial number (so
    /// that a Read Response for another read is detected).
    pub fn post_read(
        &mut self,
        wr_id: u64,
        sink: &[Sge],
        source_stag: STag,
        source_to: u64,
        len: u32,
        signaled: bool,
    ) -> Result<(), PostError> {
        self.accepting()?;
        if self.orq.ord() == 0 {
            return Err(PostError::NoReads);
        }
        if sge_total(sink) < u64::from(len) {
            return Err(PostError::SinkTooSmall);
        }
        self.read_serial = self.read_serial.wrapping_add(1);
        let sink_stag = STag::from_parts(self.read_serial, 0);
        let sink_to = sink.first().map_or(0, |s| s.addr);
        let kind = WrKind::Read {
            sink_stag,
            sink_to,
            source_stag,
            source_to,
            len,
        };
        self.sq.push_back(SendWr {
            wr_id,
            kind,
            sges: SgeList::from_slice(sink),
            len: u64::from(len),
            signaled,
            internal: false,
        });
        Ok(())
    }

    /// Graceful close: nothing new is accepted; queued work and owed Read Responses still go
    /// out, outstanding reads are still awaited; then [`Event::Closed`].
    pub fn close(&mut self) {
        if self.state == State::Open {
            self.state = State::Closing;
            self.check_closing();
        }
    }

    /// The peer closed its side of the TCP connection. In the middle of an FPDU or a message
    /// that is [`ProtoError::StreamLost`] (reported locally, no Terminate); otherwise a clean
    /// end. Either way every pending work request is flushed and the connection is closed.
    pub fn handle_eof(&mut self) {
        if matches!(self.state, State::Closed) {
            return;
        }
        if self.state != State::Error && !self.is_idle() {
            self.fail(ProtoError::StreamLost, None);
        }
        self.flush_all(None);
        self.finish();
    }

    /// The local side gave up on the connection (e.g. a close whose linger expired): every
    /// pending work request is flushed (`Flushed`, also a Read whose response was arriving)
    /// and the connection is closed. Not an error of the stream: no error event, no
    /// Terminate (unlike [`Connection::handle_eof`] in the middle of a message, which is
    /// [`ProtoError::StreamLost`]).
    pub fn abort(&mut self) {
        if matches!(self.state, State::Closed) {
            return;
        }
        self.flush_all(None);
        self.finish();
    }

    // ------------------------------------------------------------------ events

    /// Whether an event waits for [`Connection::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next event if `take` says so of it (else it stays next): for a driver that
    /// handles the common kinds in a short path and leaves the rest, in order, to its
    /// general one.
    pub fn poll_event_if(&mut self, take: impl FnOnce(&Event) -> bool) -> Option<Event> {
        if take(self.events.front()?) {
            self.events.pop_front()
        } else {
            None
        }
    }

    /// The driver wrote `bytes` more bytes of the transmit stream to the socket.
    pub fn on_written(&mut self, bytes: u64) {
        self.written_pos = (self.written_pos + bytes).min(self.tx_pos);
        self.release_completions();
        self.check_closing();
    }

    fn release_completions(&mut self) {
        while let Some(p) = self.pending.front() {
            if !(p.done && p.written_pos <= self.written_pos) {
                break;
            }
            let p = self.pending.pop_front().expect("front exists");
            if p.signaled || p.c.status != WcStatus::Success {
                self.events.push_back(Event::Completion(p.c));
            }
        }
    }

    fn finish(&mut self) {
        self.state = State::Closed;
        if !self.closed_reported {
            self.closed_reported = true;
            self.events.push_back(Event::Closed);
        }
    }

    fn check_closing(&mut self) {
        if self.state == State::Closing
            && self.sq.is_empty()
            && self.active.is_none()
            && self.irq.is_empty()
            && self.orq.is_empty()
            && self.pending.is_empty()
            && self.written_pos == self.tx_pos
        {
            let recvs = self.send_rx.drain();
            for r in recvs {
                self.events.push_back(Event::RecvCompletion(flushed_recv(
                    r.wr_id,
                    WcStatus::Flushed,
                )));
            }
            self.finish();
        }
    }

    // ------------------------------------------------------------------ errors

    /// First error wins: queue the Terminate, flush everything, stop.
    fn fail(&mut self, err: ProtoError, ctx: Option<&ErrorContext>) {
        if self.error.is_some() || matches!(self.state, State::Error | State::Closed) {
            return;
        }
        self.error = Some(err);
        if err == ProtoError::Crc {
            self.stats.crc_errors += 1;
        }
        self.events.push_back(Event::Error(err));
        if err != ProtoError::StreamLost {
            self.terminate = Some(terminate_header(err, ctx));
        }
        let status = match err {
            ProtoError::DdpMessageTooLong => WcStatus::LocalLength,
            ProtoError::RdmapCannotInvalidate | ProtoError::RdmapCannotInvalidateProtection => {
                WcStatus::RemoteInvalidate
            }
            e => WcStatus::Fatal(e),
        };
        self.flush_all(Some(status));
        self.state = State::Error;
        if self.terminate.is_none() {
            self.finish();
        }
    }

    /// Completes everything in flight: the receive in progress and the read whose response is
    /// arriving with `current` (if given), everything else as flushed.
    fn flush_all(&mut self, current: Option<WcStatus>) {
        let cur = current.unwrap_or(WcStatus::Flushed);
        // receive side
        let recv_in_progress = matches!(self.send_rx.current(), Some(SendSink::Posted(_)));
        for (i, r) in self.send_rx.drain().into_iter().enumerate() {
            let st = if i == 0 && recv_in_progress {
                cur
            } else {
                WcStatus::Flushed
            };
            self.events
                .push_back(Event::RecvCompletion(flushed_recv(r.wr_id, st)));
        }
        // send side, in posting order. Completions whose bytes the driver has not confirmed
        // as written are flushed; the read whose response was arriving gets `cur`.
        let mut first_read = true;
        for p in self.pending.iter_mut() {
            let confirmed = p.done && p.written_pos <= self.written_pos;
            if !confirmed {
                let reading = !p.done && p.c.opcode == WcOpcode::Read;
                p.c.status = if reading && first_read {
                    cur
                } else {
                    WcStatus::Flushed
                };
                first_read &= !reading;
                p.c.byte_len = 0;
                p.done = true;
            }
            p.written_pos = 0;
        }
        let _ = self.orq.drain();
        self.release_completions();
        if let Some(TxActive::Sq { wr, .. }) = self.active.take()
            && !wr.internal
        {
            self.events.push_back(Event::Completion(flush_wr(&wr, cur)));
        }
        self.active = None;
        for wr in self.sq.drain(..) {
            if !wr.internal {
                self.events
                    .push_back(Event::Completion(flush_wr(&wr, WcStatus::Flushed)));
            }
        }
        while self.irq.advance(u32::MAX, true).is_some() {}
        self.stream_buf.clear();
        self.stream_placed = 0;
    }

    // ------------------------------------------------------------------ receive

    /// Feeds received bytes. Returns how many were consumed (always all of them), or the
    /// error this input caused (it is also reported as [`Event::Error`] and a Terminate is
    /// queued). Input after an error is ignored.
    pub fn handle_input<M: Memory + ?Sized>(
        &mut self,
        data: &[u8],
        mem: &mut M,
    ) -> Result<usize, ProtoError> {
        if matches!(self.state, State::Error | State::Closed) {
            return Ok(data.len());
        }
        let mut at = 0;
        loop {
            // (a whole FPDU that ends the input: `next` would only say `NeedMore` after it)
            let mut boundary = false;
            let r = if let Some(w) = self.deframer.whole(data, &mut at) {
                // A whole FPDU in the input, its CRC good: the same steps as below, in one
                // step for the commonest kind (see `stream_send`).
                if self.stream_send(&w.header) {
                    self.stats.fpdus_in += 1;
                    self.stats.bytes_placed_buffered += w.payload.len() as u64;
                    self.stream_mo = 0;
                    self.stream_msg = w.payload.len();
                    self.send_rx.end_segment(w.payload.len() as u32, true);
                    mem.deliver_stream(&data[w.payload]);
                    if at == data.len() {
                        break; // (at an FPDU boundary: `next` would say `NeedMore`)
                    }
                    continue;
                }
                if self.posted_send(&w.header, &data[w.payload.clone()], mem)
                    || self.whole_write(&w.header, &data[w.payload.clone()], mem)
                {
                    if at == data.len() {
                        break;
                    }
                    continue;
                }
                boundary = at == data.len();
                self.on_header(&w.header, mem);
                let verified = self.stream_buf.is_empty() && self.stream_placed == 0;
                if !w.payload.is_empty() {
                    self.payload_piece(data, w.payload, verified, mem)?;
                }
                self.on_end(mem)
            } else {
                let ev = match self.deframer.next(data, &mut at) {
                    Ok(ev) => ev,
                    Err(e) => {
                        self.fail(e, None);
                        return Err(e);
                    }
                };
                match ev {
                    DfEvent::NeedMore => break,
                    DfEvent::Header(h) => {
                        self.on_header(&h, mem);
                        Ok(())
                    }
                    DfEvent::Payload { range, .. } => {
                        let verified = self.stream_ahead(data, range.len(), range.end);
                        self.payload_piece(data, range, verified, mem)
                    }
                    DfEvent::End => self.on_end(mem),
                }
            };
            r?;
            if matches!(self.state, State::Closed | State::Error) {
                // a Terminate from the peer, or an error raised at the end of an FPDU
                return match self.error {
                    Some(e) => Err(e),
                    None => Ok(data.len()),
                };
            }
            if boundary {
                break;
            }
        }
        Ok(data.len())
    }

    /// Takes whole FPDUs from `data[*at..]` for as long as each is a plain Send that a
    /// stream-mode reader takes as it is ([`Connection::stream_send`]) and its CRC is good,
    /// exactly as [`Connection::handle_input`] takes them (its one-step path), appending
    /// their payloads to `out` and advancing `*at` past them. Stops at the first octet that
    /// begins anything else, or an FPDU not all in `data`: those octets are then the
    /// caller's to feed to `handle_input`, which finds every error in them as always.
    /// Returns how many FPDUs it took. For a driver's receive round of small messages that
    /// need nothing but their payloads moved: no [`Memory`], and no event can come of it.
    pub fn take_stream_sends(&mut self, data: &[u8], at: &mut usize, out: &mut Vec<u8>) -> usize {
        let mut taken = 0;
        while self.state == State::Open {
            // (the header as `Deframer::whole` would give it, checked before anything is
            // consumed: ULPDU_LENGTH, then the untagged DDP/RDMAP header)
            let Some(b) = data.get(*at..*at + ULPDU_LENGTH_LEN + UNTAGGED_HEADER_LEN) else {
                break;
            };
            let ulen = usize::from(u16::from_be_bytes([b[0], b[1]]));
            if ulen <= UNTAGGED_HEADER_LEN
                || !self.whole_plain_send(&b[ULPDU_LENGTH_LEN..])
                || !self.send_rx.takes_stream()
            {
                break;
            }
            let Some(w) = self.deframer.whole(data, at) else {
                break; // (not all here, or its CRC is bad: `handle_input` says which)
            };
            debug_assert!(self.stream_send(&w.header));
            let len = w.payload.len();
            self.stats.fpdus_in += 1;
            self.stats.bytes_placed_buffered += len as u64;
            self.stream_mo = 0;
            self.stream_msg = len;
            self.send_rx.end_segment(len as u32, true);
            out.extend_from_slice(&data[w.payload]);
            taken += 1;
        }
        taken
    }

    /// Whether the header of a whole FPDU is a plain Send that starts and ends its message in
    /// this one segment and is next in order: one untagged segment that ends its message (DDP
    /// control octet `0x41`, RDMAP `0x43`: versions 1, no reserved bits), queue 0, the
    /// expected MSN, MO 0, on a connection with nothing of another FPDU under way and no RTR
    /// awaited. What the general steps do for such a segment is then known without running
    /// them; each one-step path ([`Connection::stream_send`], [`Connection::posted_send`])
    /// adds where it goes. Anything else takes the general steps, which also find every error
    /// (so the shortcuts can only be stricter than they are).
    #[inline]
    fn whole_plain_send(&self, b: &[u8]) -> bool {
        b.len() == UNTAGGED_HEADER_LEN
            && b[0] == 0x41
            && b[1] == 0x43
            && b[6..10] == [0; 4]
            && b[14..18] == [0; 4]
            && u32::from_be_bytes([b[10], b[11], b[12], b[13]])
                == self.send_rx.queue().expected_msn()
            && !self.hold_for_rtr
            && matches!(self.rx, RxSeg::Idle)
            && self.stream_buf.is_empty()
            && self.stream_placed == 0
    }

    /// Whether a whole FPDU with this header is a plain Send ([`Connection::whole_plain_send`])
    /// with a payload that a stream-mode reader takes as it is: no receive posted. Its payload
    /// goes to the stream, its MSN is used up, and nothing else changes but the counters.
    fn stream_send(&self, h: &UlpduHeader) -> bool {
        h.payload_len() > 0 && self.whole_plain_send(h.bytes()) && self.send_rx.takes_stream()
    }

    /// Takes a whole FPDU in one step if it is a plain Send that the posted receive at the
    /// head of the queue takes whole ([`Connection::whole_plain_send`], any payload length up
    /// to the receive's, no message under way): its payload placed in the receive's SGEs,
    /// its MSN used up, the receive completed. This is what `on_header`, `payload_piece` and
    /// `on_end` do for it. False, with no state changed, for anything else, and when the
    /// placement fails: the general steps then place the same bytes at the same addresses
    /// (those it placed before failing) and fail the same way.
    fn posted_send<M: Memory + ?Sized>(
        &mut self,
        h: &UlpduHeader,
        payload: &[u8],
        mem: &mut M,
    ) -> bool {
        if !self.whole_plain_send(h.bytes()) {
            return false;
        }
        let Some(r) = self.send_rx.posted_for(payload.len()) else {
            return false;
        };
        if !payload.is_empty() && place_sges(&r.sges, 0, payload, mem).is_err() {
            return false;
        }
        let len = payload.len() as u32;
        let Some(r) = self.send_rx.take_whole(len) else {
            return false;
        };
        self.stats.fpdus_in += 1;
        self.stats.bytes_placed_buffered += u64::from(len);
        self.events.push_back(Event::RecvCompletion(Completion {
            wr_id: r.wr_id,
            opcode: WcOpcode::Recv,
            status: WcStatus::Success,
            byte_len: u64::from(len),
            inv_stag: None,
            solicited: false,
        }));
        true
    }

    /// Takes a whole FPDU in one step if it is a tagged RDMA Write whose payload (not empty)
    /// the region takes (`tagged::validate`: STag, key, PD, remote write right, bounds), with
    /// no segment under way and the first FPDU's RTR check done: the payload written into the
    /// region and counted, as `on_header`, `payload_piece` and `on_end` write and count it.
    /// False, with no state changed, for anything else: the general steps then find the same
    /// and report what is wrong.
    fn whole_write<M: Memory + ?Sized>(
        &mut self,
        h: &UlpduHeader,
        payload: &[u8],
        mem: &mut M,
    ) -> bool {
        let bytes = h.bytes();
        if payload.is_empty()
            || self.hold_for_rtr
            || !matches!(self.rx, RxSeg::Idle)
            || bytes.len() < header_len_for(bytes[0])
        {
            return false;
        }
        let Ok(ddp) = DdpRepr::parse_bytes(bytes) else {
            return false;
        };
        let (Ok(Opcode::Write), DdpBuffer::Tagged { stag, to }) =
            (rdmap::check_header(&ddp), ddp.buffer)
        else {
            return false;
        };
        let len = payload.len() as u64;
        let Ok(t) = tagged::validate(
            mem,
            stag,
            to,
            len,
            self.cfg.pd,
            Access::REMOTE_WRITE,
            CheckLayer::Ddp,
        ) else {
            return false;
        };
        mem.write(stag, t.offset, payload);
        self.stats.fpdus_in += 1;
        self.stats.bytes_placed_buffered += len;
        self.stats.bytes_tagged_in += len;
        true
    }

    /// A payload piece `data[range]`; `verified`: it is a stream FPDU's whole payload whose
    /// CRC is already known good (or off), with nothing of the FPDU kept or placed before.
    fn payload_piece<M: Memory + ?Sized>(
        &mut self,
        data: &[u8],
        range: Range<usize>,
        verified: bool,
        mem: &mut M,
    ) -> Result<(), ProtoError> {
        if verified
            && let RxSeg::Place {
                target: Target::Stream,
                done,
                ..
            } = &mut self.rx
        {
            // Straight to the stream, not through `stream_buf` until the FPDU's end.
            *done += range.len();
            self.stats.bytes_placed_buffered += range.len() as u64;
            mem.deliver_stream(&data[range]);
            return Ok(());
        }
        self.on_payload(&data[range], mem)
    }

    /// Whether a payload piece of `n` octets ending at `data[end]` is stream data that may
    /// be delivered at once: nothing of its FPDU is in `stream_buf` and the deframer can vouch
    /// for the FPDU's CRC already ([`Deframer::verified_ahead`]: the whole payload is this
    /// piece and its CRC follows in `data`, or CRC is off).
    fn stream_ahead(&self, data: &[u8], n: usize, end: usize) -> bool {
        let RxSeg::Place {
            target: Target::Stream,
            done,
            len,
            ..
        } = self.rx
        else {
            return false;
        };
        self.stream_buf.is_empty()
            && self.stream_placed == 0
            && (!self.deframer.config().crc || (done == 0 && n == len))
            && self.deframer.verified_ahead(data, end)
    }

    fn reject(&mut self, err: ProtoError, ctx: Option<ErrorContext>) {
        self.rx = RxSeg::Reject { err, ctx };
    }

    fn on_header<M: Memory + ?Sized>(&mut self, h: &UlpduHeader, mem: &mut M) {
        self.stats.fpdus_in += 1;
        let bytes = h.bytes();
        let ulpdu_len = h.ulpdu_len();
        // A ULPDU shorter than its own DDP header: an implausible ULPDU length, i.e. lost
        // framing (the error taxonomy's MarkerMismatch; RFC 5044 has no closer code).
        if bytes.len() < header_len_for(bytes[0]) {
            return self.reject(ProtoError::MarkerMismatch, None);
        }
        let ddp = DdpRepr::parse_bytes(bytes).expect("length checked");
        // The offending segment's headers for a Terminate: copied only where a segment is
        // rejected or collected (not for every accepted one).
        let ctx = || ErrorContext {
            ulpdu_len: ulpdu_len as u16,
            ddp_header: TerminatedDdpHeader::from_ulpdu(bytes).expect("length checked"),
            read_request: None,
        };
        let opcode = match rdmap::check_header(&ddp) {
            Ok(op) => op,
            Err(e) => return self.reject(e, Some(ctx())),
        };
        let len = h.payload_len();
        let last = ddp.last;
        match (opcode, ddp.buffer) {
            (Opcode::Write, DdpBuffer::Tagged { stag, to }) => {
                // zero-length Writes are not validated (siw; the RTR uses STag 1)
                let target = if len == 0 {
                    Target::None
                } else {
                    match tagged::validate(
                        mem,
                        stag,
                        to,
                        len as u64,
                        self.cfg.pd,
                        Access::REMOTE_WRITE,
                        CheckLayer::Ddp,
                    ) {
                        Ok(t) => Target::Region {
                            stag,
                            offset: t.offset,
                        },
                        Err(e) => return self.reject(e, Some(ctx())),
                    }
                };
                self.rx = RxSeg::Place {
                    opcode,
                    last,
                    target,
                    len,
                    done: 0,
                    inv_stag: None,
                    rtr: false,
                };
            }
            (Opcode::ReadResponse, DdpBuffer::Tagged { stag, to }) => {
                match self.orq.check_response(stag, to, len as u32, last) {
                    Ok(p) => {
                        let target = if len == 0 {
                            Target::None
                        } else {
                            Target::ReadSges { offset: p.offset }
                        };
                        self.rx = RxSeg::Place {
                            opcode,
                            last,
                            target,
                            len,
                            done: 0,
                            inv_stag: None,
                            rtr: false,
                        };
                    }
                    Err(e) => self.reject(e, Some(ctx())),
                }
            }
            (Opcode::ReadRequest, DdpBuffer::Untagged { msn, mo, .. }) => {
                if let Err(e) = self.rr_rx.check(msn, mo) {
                    return self.reject(e, Some(ctx()));
                }
                // A Read Request is exactly its 28-byte header in one segment. Longer is a
                // message too long for the Read Request queue's element; shorter or split
                // (L clear) is malformed, which RFC 5040 leaves to us (unspecified).
                let body_len = ulpdu_len - bytes.len();
                if body_len > READ_REQUEST_LEN {
                    return self.reject(ProtoError::DdpMessageTooLong, Some(ctx()));
                }
                if body_len < READ_REQUEST_LEN || !last {
                    return self.reject(ProtoError::RdmapUnspecified, Some(ctx()));
                }
                self.rx = RxSeg::Collect {
                    what: Collecting::ReadRequest { msn },
                    ctx: ctx(),
                    buf: Vec::with_capacity(READ_REQUEST_LEN),
                };
            }
            (Opcode::Terminate, DdpBuffer::Untagged { .. }) => {
                // Whatever its MSN/MO: the peer is gone either way (siw does not check either).
                self.rx = RxSeg::Collect {
                    what: Collecting::Terminate,
                    ctx: ctx(),
                    buf: Vec::new(),
                };
            }
            (
                _,
                DdpBuffer::Untagged {
                    msn, mo, ulp_rsvd, ..
                },
            ) => {
                let inv_stag = opcode.has_inval_stag().then_some(STag(ulp_rsvd));
                // The Send RTR: a zero-length Send before anything else, swallowed.
                if self.hold_for_rtr
                    && self.rtr_kind == Some(RtrKind::Send)
                    && len == 0
                    && mo == 0
                    && last
                {
                    if let Err(e) = self.send_rx.queue().check(msn, mo) {
                        return self.reject(e, Some(ctx()));
                    }
                    self.rx = RxSeg::Place {
                        opcode,
                        last,
                        target: Target::None,
                        len,
                        done: 0,
                        inv_stag: None,
                        rtr: true,
                    };
                    return;
                }
                match self.send_rx.begin_segment(msn, mo, len as u32) {
                    Ok(SendPlacement::Posted { offset }) => {
                        let target = if len == 0 {
                            Target::None
                        } else {
                            Target::RecvSges { offset }
                        };
                        self.rx = RxSeg::Place {
                            opcode,
                            last,
                            target,
                            len,
                            done: 0,
                            inv_stag,
                            rtr: false,
                        };
                    }
                    Ok(SendPlacement::Stream) => {
                        self.stream_mo = mo;
                        if last {
                            self.stream_msg = mo as usize + len;
                        } else {
                            self.stream_full = len;
                        }
                        self.rx = RxSeg::Place {
                            opcode,
                            last,
                            target: Target::Stream,
                            len,
                            done: 0,
                            inv_stag,
                            rtr: false,
                        };
                    }
                    Err(e) => self.reject(e, Some(ctx())),
                }
            }
            // check_header guarantees the buffer model matches the opcode
            _ => self.reject(ProtoError::RdmapUnexpectedOpcode, Some(ctx())),
        }
    }

    fn on_payload<M: Memory + ?Sized>(
        &mut self,
        data: &[u8],
        mem: &mut M,
    ) -> Result<(), ProtoError> {
        match &mut self.rx {
            RxSeg::Place {
                target, done, len, ..
            } => {
                let at = *done as u64;
                debug_assert!(*done + data.len() <= *len);
                let left = *len - *done;
                *done += data.len();
                let target = *target;
                if target == Target::Stream {
                    self.stream_piece(data, left, mem);
                    self.stats.bytes_placed_buffered += data.len() as u64;
                    return Ok(());
                }
                if let Err(e) = self.place(target, at, data, mem) {
                    self.fail(e, None);
                    return Err(e);
                }
                self.stats.bytes_placed_buffered += data.len() as u64;
                Ok(())
            }
            RxSeg::Collect { buf, what, .. } => {
                let cap = match what {
                    Collecting::ReadRequest { .. } => READ_REQUEST_LEN,
                    Collecting::Terminate => MAX_TERMINATE_BODY,
                };
                let room = cap.saturating_sub(buf.len());
                buf.extend_from_slice(&data[..data.len().min(room)]);
                Ok(())
            }
            RxSeg::Reject { .. } | RxSeg::Idle => Ok(()),
        }
    }

    fn place<M: Memory + ?Sized>(
        &mut self,
        target: Target,
        at: u64,
        data: &[u8],
        mem: &mut M,
    ) -> Result<(), ProtoError> {
        match target {
            Target::None => Ok(()),
            Target::Region { stag, offset } => {
                mem.write(stag, offset + at, data);
                Ok(())
            }
            Target::Stream => {
                self.stream_buf.extend_from_slice(data);
                Ok(())
            }
            Target::RecvSges { offset } => {
                let sges = match self.send_rx.current() {
                    Some(SendSink::Posted(r)) => &r.sges,
                    _ => return Err(ProtoError::DdpLocalCatastrophic),
                };
                place_sges(sges, offset + at, data, mem)
            }
            Target::ReadSges { offset } => {
                let sges = match self.orq.front() {
                    Some(r) => &r.sink,
                    None => return Err(ProtoError::DdpLocalCatastrophic),
                };
                place_sges(sges, offset + at, data, mem)
            }
        }
    }

    /// A piece of stream payload from buffered input, `left` bytes of its FPDU still to
    /// come (this piece included): into the reader's buffer if the rest of the FPDU fits
    /// there, else kept until the FPDU's CRC checks.
    fn stream_piece<M: Memory + ?Sized>(&mut self, data: &[u8], left: usize, mem: &mut M) {
        if self.stream_buf.is_empty() && mem.stream_room(self.stream_placed) >= left {
            mem.stream_place(self.stream_placed, data);
            self.stream_placed += data.len();
        } else {
            self.stream_buf.extend_from_slice(data);
        }
    }

    /// The reader's buffer goes away ([`Memory::stream_room`]): the unverified stream bytes
    /// placed there come back into the connection, to be delivered when their FPDU's CRC
    /// checks. A driver calls this before every session whose memory offered stream room
    /// ends.
    pub fn unplace_stream<M: Memory + ?Sized>(&mut self, mem: &M) {
        let n = core::mem::take(&mut self.stream_placed);
        if n == 0 {
            return;
        }
        let mut v = Vec::with_capacity(n + self.stream_buf.len());
        mem.stream_unverified(0, n, &mut |b| v.extend_from_slice(b));
        v.extend_from_slice(&self.stream_buf);
        self.stream_buf = v;
        self.stats.bytes_unplaced += n as u64;
    }

    fn on_end<M: Memory + ?Sized>(&mut self, mem: &mut M) -> Result<(), ProtoError> {
        let rx = core::mem::replace(&mut self.rx, RxSeg::Idle);
        let first_fpdu = self.hold_for_rtr;
        let r = match rx {
            RxSeg::Idle => Ok(()),
            RxSeg::Reject { err, ctx } => {
                self.fail(err, ctx.as_ref());
                Err(err)
            }
            RxSeg::Collect {
                what: Collecting::Terminate,
                buf,
                ..
            } => {
                self.peer_terminated(&buf);
                Ok(())
            }
            RxSeg::Collect {
                what: Collecting::ReadRequest { msn },
                mut ctx,
                buf,
            } => self.read_request(msn, &buf, &mut ctx, mem),
            RxSeg::Place {
                opcode,
                last,
                target,
                len,
                inv_stag,
                rtr,
                ..
            } => self.end_placed(opcode, last, target, len as u32, inv_stag, rtr, mem),
        };
        if first_fpdu && r.is_ok() {
            self.hold_for_rtr = false;
        }
        r
    }

    fn read_request<M: Memory + ?Sized>(
        &mut self,
        msn: u32,
        buf: &[u8],
        ctx: &mut ErrorContext,
        mem: &mut M,
    ) -> Result<(), ProtoError> {
        let body = match ReadRequestBody::parse(buf) {
            Ok(b) => b,
            Err(_) => {
                self.fail(ProtoError::RdmapUnspecified, Some(ctx));
                return Err(ProtoError::RdmapUnspecified);
            }
        };
        ctx.read_request = Some(body);
        self.rr_rx.advance(0, true);
        let check = tagged::validate(
            mem,
            body.source_stag,
            body.source_to,
            u64::from(body.read_size),
            self.cfg.pd,
            Access::REMOTE_READ,
            CheckLayer::Rdmap,
        )
        .map(|_| ())
        .and_then(|()| self.irq.accept(body, msn));
        if let Err(e) = check {
            self.fail(e, Some(ctx));
            return Err(e);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn end_placed<M: Memory + ?Sized>(
        &mut self,
        opcode: Opcode,
        last: bool,
        target: Target,
        len: u32,
        inv_stag: Option<STag>,
        rtr: bool,
        mem: &mut M,
    ) -> Result<(), ProtoError> {
        if matches!(opcode, Opcode::Write | Opcode::ReadResponse) {
            self.stats.bytes_tagged_in += u64::from(len);
        }
        match opcode {
            Opcode::Write => Ok(()),
            Opcode::ReadResponse => {
                if let Some(done) = self.orq.advance(len, last)
                    && !done.internal
                {
                    self.complete_read(&done);
                }
                Ok(())
            }
            _ if rtr => {
                self.send_rx.skip_message();
                Ok(())
            }
            _ => {
                if target == Target::Stream && self.stream_placed > 0 {
                    mem.stream_commit(core::mem::take(&mut self.stream_placed));
                }
                if target == Target::Stream && !self.stream_buf.is_empty() {
                    mem.deliver_stream(&self.stream_buf);
                    self.stream_buf.clear();
                }
                let Some((sink, total)) = self.send_rx.end_segment(len, last) else {
                    return Ok(());
                };
                let mut status = WcStatus::Success;
                let mut err = None;
                if let Some(stag) = inv_stag
                    && let Err(e) = rdmap::invalidate(mem, stag, self.cfg.pd)
                {
                    status = WcStatus::RemoteInvalidate;
                    err = Some(e);
                }
                if let SendSink::Posted(r) = sink {
                    self.events.push_back(Event::RecvCompletion(Completion {
                        wr_id: r.wr_id,
                        opcode: WcOpcode::Recv,
                        status,
                        byte_len: u64::from(total),
                        inv_stag: if err.is_none() { inv_stag } else { None },
                        solicited: opcode.is_solicited(),
                    }));
                }
                match err {
                    // The Terminate for a failed invalidation carries the Send's DDP header;
                    // the segment has been consumed, so it is rebuilt from what we know.
                    Some(e) => {
                        let ctx = self.rebuilt_send_ctx(opcode, inv_stag, total, len);
                        self.fail(e, Some(&ctx));
                        Err(e)
                    }
                    None => Ok(()),
                }
            }
        }
    }

    fn rebuilt_send_ctx(
        &self,
        opcode: Opcode,
        inv_stag: Option<STag>,
        total: u32,
        len: u32,
    ) -> ErrorContext {
        let msn = self.send_rx.queue().expected_msn().wrapping_sub(1);
        let mo = total - len;
        let msg = match (opcode, inv_stag) {
            (Opcode::SendSeInvalidate, Some(s)) => RdmapMessage::SendSeInvalidate {
                msn,
                mo,
                inval_stag: s,
            },
            (_, Some(s)) => RdmapMessage::SendInvalidate {
                msn,
                mo,
                inval_stag: s,
            },
            _ => RdmapMessage::Send { msn, mo },
        };
        let h = RdmapHeader::new(msg, true);
        let mut b = [0u8; 18];
        h.emit(&mut b).expect("18-byte untagged header");
        ErrorContext {
            ulpdu_len: (18 + len) as u16,
            ddp_header: TerminatedDdpHeader::from_ulpdu(&b).expect("18 bytes"),
            read_request: None,
        }
    }

    fn complete_read(&mut self, done: &OutstandingRead) {
        if let Some(p) = self
            .pending
            .iter_mut()
            .find(|p| !p.done && p.c.opcode == WcOpcode::Read && p.c.wr_id == done.wr_id)
        {
            p.done = true;
            p.c.byte_len = u64::from(done.len);
        }
        self.release_completions();
        self.check_closing();
    }

    fn peer_terminated(&mut self, body: &[u8]) {
        self.stats.terminates_received += 1;
        let term = match TerminateHeader::parse(body) {
            Ok((t, _)) => t,
            Err(_) => {
                // The body is shorter than its control word, or than the copies its M/D/R
                // flags announce: report the code from what there is, without copies (a
                // hostile peer must not be able to make this fail).
                let mut w = [0u8; 4];
                w[..body.len().min(4)].copy_from_slice(&body[..body.len().min(4)]);
                let w = u32::from_be_bytes(w);
                TerminateHeader::new(TermCode::new(
                    TermLayer::from_raw((w >> 28) as u8),
                    ((w >> 24) & 0x0f) as u8,
                    ((w >> 16) & 0xff) as u8,
                ))
            }
        };
        let _ = self.term_rx.advance(0, true);
        self.events.push_back(Event::PeerTerminated(term));
        self.flush_all(Some(WcStatus::RemoteTerminated));
        self.state = State::Error;
        self.terminate = None;
        self.finish();
    }

    // ------------------------------------------------------------------ direct placement

    /// What to do with the next received bytes: place them directly into their validated
    /// destination, or buffer them and call [`Connection::handle_input`].
    pub fn rx_plan(&self) -> RxPlan {
        if !matches!(self.state, State::Open | State::Closing) {
            return RxPlan::Buffered;
        }
        let RxSeg::Place {
            target, done, len, ..
        } = &self.rx
        else {
            return RxPlan::Buffered;
        };
        let run = self.deframer.payload_run();
        if run == 0 {
            return RxPlan::Buffered;
        }
        let at = *done as u64;
        let sge_target = |sges: &[Sge], offset: u64| {
            let mut first = None;
            sge_pieces(sges, offset, run as u64, |addr, l| {
                if first.is_none() {
                    first = Some((addr, l));
                }
            });
            match first {
                Some((addr, l)) => RxPlan::Direct {
                    target: DirectTarget::Local { addr },
                    len: l,
                },
                None => RxPlan::Buffered,
            }
        };
        match *target {
            Target::Region { stag, offset } => RxPlan::Direct {
                target: DirectTarget::Region {
                    stag,
                    offset: offset + at,
                },
                len: run,
            },
            Target::RecvSges { offset } => match self.send_rx.current() {
                Some(SendSink::Posted(r)) => sge_target(&r.sges, offset + at),
                _ => RxPlan::Buffered,
            },
            Target::ReadSges { offset } => match self.orq.front() {
                Some(r) => sge_target(&r.sink, offset + at),
                None => RxPlan::Buffered,
            },
            Target::Stream if self.stream_buf.is_empty() => RxPlan::Direct {
                target: DirectTarget::Stream {
                    at: self.stream_placed,
                    left: *len - *done,
                },
                len: run,
            },
            Target::None | Target::Stream => RxPlan::Buffered,
        }
    }

    /// Octets of the next FPDU to arrive (on the wire) if its payload is data for the
    /// reader's stream, told from `peek`, the next octets of the TCP stream (at least its
    /// ULPDU_LENGTH and DDP/RDMAP header): the receive side is between FPDUs, no markers,
    /// and the FPDU is a Send segment on QN 0 that finds no posted receive. `None` whenever
    /// it cannot tell. A driver may then leave those octets in the kernel for the reader's
    /// own receive (where they go straight into its buffer) once that many are waiting.
    pub fn next_stream_fpdu_len(&self, peek: &[u8]) -> Option<usize> {
        if !self.at_stream_boundary() || peek.len() < 2 + UNTAGGED_HEADER_LEN {
            return None;
        }
        let ulpdu_len = usize::from(u16::from_be_bytes([peek[0], peek[1]]));
        let u = &peek[2..];
        // DDP: T clear, DV 1; RDMAP: version 1, a Send opcode; QN 0.
        let (ddp_ctrl, rdmap_ctrl) = (u[0], u[1]);
        let send = matches!(rdmap_ctrl & 0x0f, 0x3..=0x6);
        let qn = u32::from_be_bytes([u[6], u[7], u[8], u[9]]);
        let plausible =
            ulpdu_len > UNTAGGED_HEADER_LEN && ulpdu_len <= self.deframer.config().max_ulpdu;
        (ddp_ctrl & 0x80 == 0
            && ddp_ctrl & 0x03 == 1
            && rdmap_ctrl >> 6 == 1
            && send
            && qn == 0
            && plausible)
            .then(|| fpdu_len_without_markers(ulpdu_len))
    }

    /// Whether the receive side is between FPDUs (no markers) and the next Send on QN 0
    /// would be data for the reader's stream: [`Connection::next_stream_fpdu_len`] can then
    /// tell the next FPDU from its first octets.
    pub fn at_stream_boundary(&self) -> bool {
        self.deframer.is_idle() && self.stream_rx_idle()
    }

    /// Octets to read for the header of the next FPDU while the next Send on QN 0 would be
    /// data for the reader's stream (no markers): its ULPDU_LENGTH and untagged DDP/RDMAP
    /// header between FPDUs ([`Connection::at_stream_boundary`]), or the rest of them
    /// when the last read ended inside them ([`Deframer::header_left`]). Once they are
    /// in, [`Connection::stream_fpdu_left`] tells whether the payload is stream data.
    pub fn stream_header_left(&self) -> Option<usize> {
        if !self.stream_rx_idle() {
            return None;
        }
        if self.deframer.is_idle() {
            return Some(ULPDU_LENGTH_LEN + UNTAGGED_HEADER_LEN);
        }
        self.deframer.header_left()
    }

    /// No segment in progress, nothing of the stream kept or placed, no markers, and the
    /// next Send on QN 0 would be stream data.
    fn stream_rx_idle(&self) -> bool {
        let idle = self.state == State::Open
            && matches!(self.rx, RxSeg::Idle)
            && !self.deframer.config().markers
            && self.stream_buf.is_empty()
            && self.stream_placed == 0;
        let stream_sink = match self.send_rx.current() {
            Some(s) => matches!(s, SendSink::Stream),
            None => self.send_rx.posted_len() == 0 && self.send_rx.mode() == RecvMode::Stream,
        };
        idle && stream_sink
    }

    /// Octets of the stream up to the end of the FPDU whose payload is being received (no
    /// markers); `None` otherwise.
    pub fn rx_octets_to_end(&self) -> Option<usize> {
        self.deframer.octets_to_end()
    }

    /// While the payload of a stream-data FPDU is being received (none of it in a reader's
    /// buffer yet, no markers): the octets still to come up to the end of the FPDU.
    pub fn stream_fpdu_left(&self) -> Option<usize> {
        match self.rx {
            RxSeg::Place {
                target: Target::Stream,
                ..
            } if self.state == State::Open && self.stream_placed == 0 => {
                self.deframer.octets_to_end()
            }
            _ => None,
        }
    }

    /// A reader's buffer has come ([`Memory::stream_room`]) while the connection keeps the
    /// start of a stream-data FPDU: if the whole FPDU fits there, what was kept goes there
    /// now (copied, as its delivery would), so that the rest can be placed there directly.
    pub fn adopt_stream_sink<M: Memory + ?Sized>(&mut self, mem: &mut M) {
        let RxSeg::Place {
            target: Target::Stream,
            len,
            done,
            ..
        } = self.rx
        else {
            return;
        };
        let kept = self.stream_buf.len();
        if self.stream_placed == 0 && kept > 0 && mem.stream_room(0) >= kept + (len - done) {
            mem.stream_place(0, &self.stream_buf);
            self.stream_placed = kept;
            self.stream_buf.clear();
        }
    }

    /// While the payload of a stream-data Send segment is being received: its message
    /// offset, payload length and whether it ends its message.
    pub fn rx_stream_segment(&self) -> Option<(usize, usize, bool)> {
        match self.rx {
            RxSeg::Place {
                target: Target::Stream,
                len,
                last,
                ..
            } => Some((self.stream_mo as usize, len, last)),
            _ => None,
        }
    }

    /// What the stream's Send messages looked like so far: the payload of a segment that
    /// did not end its message (the largest the peer sends), and the length of the last
    /// message that ended (0 for either: none seen yet). A peer that writes the same size
    /// again and again (a stream of equal `write`s) sends FPDUs a driver can predict.
    pub fn rx_stream_shape(&self) -> (usize, usize) {
        (self.stream_full, self.stream_msg)
    }

    /// The ULPDU length (DDP/RDMAP header + payload) of the FPDU whose payload is being
    /// received, if any: lets a driver tell small messages (cheaper copied out of large
    /// buffered reads) from large ones (placed directly), whatever the markers cut.
    pub fn rx_ulpdu_len(&self) -> Option<usize> {
        self.deframer.current_ulpdu_len()
    }

    /// The driver read `len` bytes straight into the target [`Connection::rx_plan`] gave.
    /// They are read back through `mem` for the CRC and accounted.
    ///
    /// # Panics
    ///
    /// If the current plan is not `Direct` or `len` exceeds it (a driver bug).
    pub fn placed_direct<M: Memory + ?Sized>(&mut self, len: usize, mem: &mut M) {
        let RxPlan::Direct { target, len: max } = self.rx_plan() else {
            panic!("placed_direct without a direct plan");
        };
        assert!(len <= max, "placed_direct: {len} bytes, plan allows {max}");
        match target {
            DirectTarget::Region { stag, offset } => {
                self.deframer.consume_placed(mem.read(stag, offset, len));
            }
            DirectTarget::Local { addr } => {
                let bytes = mem.local(addr, len).expect("direct target vanished");
                self.deframer.consume_placed(bytes);
            }
            DirectTarget::Stream { at, .. } => {
                let d = &mut self.deframer;
                mem.stream_unverified(at, len, &mut |b| d.consume_placed(b));
                self.stream_placed += len;
            }
        }
        self.stats.bytes_placed_direct += len as u64;
        if let RxSeg::Place { done, .. } = &mut self.rx {
            *done += len;
        }
    }

    // ------------------------------------------------------------------ transmit

    /// Whether a Send or Write work request still to be framed (queued, or partly framed)
    /// takes source bytes from `[addr, addr + len)`.
    pub fn sources_in(&self, addr: u64, len: u64) -> bool {
        self.unframed_sources()
            .any(|s| s.addr < addr.saturating_add(len) && addr < s.addr + u64::from(s.len))
    }

    /// Moves the source of every Send or Write still to be framed that lies inside
    /// `[from, from + len)` to the same offset from `to`: a driver that posted a work request
    /// straight from a caller's buffer copies the buffer and moves the request onto the copy
    /// before the buffer goes back to the caller. Bytes already framed are not affected.
    pub fn relocate_sources(&mut self, from: u64, len: u64, to: u64) {
        let end = from.saturating_add(len);
        let fix = |sges: &mut SgeList| {
            for s in sges.iter_mut() {
                if s.addr >= from && s.addr + u64::from(s.len) <= end {
                    s.addr = to + (s.addr - from);
                }
            }
        };
        if let Some(TxActive::Sq { wr, .. }) = self.active.as_mut()
            && !matches!(wr.kind, WrKind::Read { .. })
        {
            fix(&mut wr.sges);
        }
        for wr in self.sq.iter_mut() {
            if !matches!(wr.kind, WrKind::Read { .. }) {
                fix(&mut wr.sges);
            }
        }
    }

    /// The source SGEs of the Sends and Writes not wholly framed yet.
    fn unframed_sources(&self) -> impl Iterator<Item = &Sge> {
        let active = match &self.active {
            Some(TxActive::Sq { wr, .. }) if !matches!(wr.kind, WrKind::Read { .. }) => {
                Some(wr.sges.iter())
            }
            _ => None,
        };
        active.into_iter().flatten().chain(
            self.sq
                .iter()
                .filter(|wr| !matches!(wr.kind, WrKind::Read { .. }))
                .flat_map(|wr| wr.sges.iter()),
        )
    }

    /// The next bytes to write, or `None` if there is nothing to send now.
    pub fn poll_transmit<M: Memory + ?Sized>(&mut self, mem: &M) -> Option<Transmit> {
        let mut t = Transmit::default();
        self.poll_transmit_into(mem, &mut t).then_some(t)
    }

    /// As [`Connection::poll_transmit`], into `t` (cleared first, its allocations reused: a
    /// driver that recycles one `Transmit` allocates nothing per message). Returns whether
    /// `t` holds anything to write. Every FPDU that is ready goes into one `Transmit`, up to
    /// [`ConnConfig::max_transmit`] bytes (several FPDUs per `writev`;
    /// [`ConnConfig::max_transmit_read_response`] while a Read Response is framed).
    pub fn poll_transmit_into<M: Memory + ?Sized>(&mut self, mem: &M, t: &mut Transmit) -> bool {
        t.scratch.clear();
        t.pieces.clear();
        t.fpdus = 0;
        // Bytes framed into `t` so far (every piece advances `tx_pos`).
        let start = self.tx_pos;
        loop {
            let limit = if matches!(self.active, Some(TxActive::ReadResponse { .. })) {
                self.cfg.max_transmit_read_response
            } else {
                self.cfg.max_transmit
            };
            let framed = (self.tx_pos - start) as usize;
            if t.fpdus > 0 && framed >= limit && !self.small_behind(framed - limit) {
                break;
            }
            if let Some(term) = self.terminate.take() {
                let msn = self.tx_qn[2].take();
                let h = terminate_message(term, msn);
                self.frame_segment(t, &h, &[], mem);
                self.stats.terminates_sent += 1;
                self.finish();
                break;
            }
            if !matches!(self.state, State::Open | State::Closing) || self.hold_for_rtr {
                break;
            }
            if let Some(kind) = self.rtr_to_send.take() {
                self.send_rtr(t, kind, mem);
                continue;
            }
            if self.active.is_none() && !self.start_message(mem) {
                break;
            }
            if !self.next_segment(t, mem) {
                break;
            }
        }
        self.check_closing();
        t.fpdus > 0
    }

    /// Whether the next message to frame, past a full `Transmit` (`over` bytes past its
    /// bound), is a small one that goes along in it: a work request of at most
    /// [`COPY_FRAME_MAX`] octets (a Send that announces the Write before it) or a Read
    /// Request, with no Read Response owed, up to [`SMALL_BEHIND_MAX`] octets past the bound.
    /// The peer then gets it with the large message before it, and is woken once.
    fn small_behind(&self, over: usize) -> bool {
        over < SMALL_BEHIND_MAX
            && self.active.is_none()
            && self.terminate.is_none()
            && self.rtr_to_send.is_none()
            && self.irq.is_empty()
            && self.sq.front().is_some_and(|wr| {
                matches!(wr.kind, WrKind::Read { .. }) || wr.len <= COPY_FRAME_MAX as u64
            })
    }

    /// Whether [`Connection::poll_transmit_into`] has certainly nothing to frame now (no
    /// Terminate, RTR, message half sent, work request or Read Response waiting), so that a
    /// driver may skip it. Does the bookkeeping that call would do when idle (a close whose
    /// last bytes went out completes). False means there may be something: call it.
    pub fn transmit_idle(&mut self) -> bool {
        let idle = self.terminate.is_none()
            && self.rtr_to_send.is_none()
            && self.active.is_none()
            && self.sq.is_empty()
            && self.irq.is_empty();
        if idle {
            self.check_closing();
        }
        idle
    }

    /// The small-Send fast path: when nothing else waits to be framed (no work request, no
    /// message half sent, no Read Response, Terminate or RTR due), frames one unsolicited Send
    /// of `payload` (a gather list of 1 ..= [`SMALL_SEND_MAX`] octets in all, one FPDU) into
    /// `t` (cleared first), the payload copied into its scratch, and returns true. The Send
    /// takes the next MSN like any other, but there is no work request and no completion: for
    /// a driver whose bytes need none (stream data, its own copy). False, and nothing
    /// changed, when the fast path does not apply: post the Send as usual then.
    pub fn send_now_small(&mut self, payload: &[&[u8]], t: &mut Transmit) -> bool {
        let m = RdmapMessage::Send {
            msn: self.tx_qn[0].peek(),
            mo: 0,
        };
        self.frame_small_now(m, payload, t).is_some()
    }

    /// [`Connection::send_now_small`] for a posted Send (`post_send` with `flags`) whose
    /// payload is `payload` (the work request's SGEs): framed now (SE if `flags.solicited`),
    /// and completed like a posted Send: its completion comes (in order behind any still
    /// owed) once the driver reported its bytes written ([`Connection::on_written`]). The
    /// caller's buffers are free at once (the payload was copied). False, and nothing
    /// changed, when the fast path does not apply: post the Send as usual then.
    pub fn send_now_small_wr(
        &mut self,
        wr_id: u64,
        payload: &[&[u8]],
        flags: SendFlags,
        t: &mut Transmit,
    ) -> bool {
        let msn = self.tx_qn[0].peek();
        let m = if flags.solicited {
            RdmapMessage::SendSe { msn, mo: 0 }
        } else {
            RdmapMessage::Send { msn, mo: 0 }
        };
        let Some(len) = self.frame_small_now(m, payload, t) else {
            return false;
        };
        self.pending.push_back(PendingCompletion {
            c: Completion {
                wr_id,
                opcode: WcOpcode::Send,
                status: WcStatus::Success,
                byte_len: len as u64,
                inv_stag: None,
                solicited: false,
            },
            written_pos: self.tx_pos,
            done: true,
            signaled: flags.signaled,
        });
        true
    }

    /// Frames `m` (a Send carrying the next MSN, peeked by the caller and taken here) with
    /// `payload` whole, for the small-Send fast paths: the payload's length in all; None,
    /// nothing changed, if they do not apply.
    fn frame_small_now(
        &mut self,
        m: RdmapMessage,
        payload: &[&[u8]],
        t: &mut Transmit,
    ) -> Option<usize> {
        let len: usize = payload.iter().map(|p| p.len()).sum();
        if len == 0
            || len > SMALL_SEND_MAX
            || len + 18 > self.cfg.mulpdu
            || self.state != State::Open
            || self.hold_for_rtr
            || self.terminate.is_some()
            || self.rtr_to_send.is_some()
            || self.active.is_some()
            || !self.sq.is_empty()
            || !self.irq.is_empty()
        {
            return None;
        }
        t.scratch.clear();
        t.pieces.clear();
        self.tx_qn[0].take();
        let mut hb = [0u8; 80];
        let n = if let RdmapMessage::Send { msn, mo } = m {
            hb[..UNTAGGED_HEADER_LEN].copy_from_slice(&plain_send_header(msn, mo));
            UNTAGGED_HEADER_LEN
        } else {
            let h = RdmapHeader::new(m, true);
            h.emit(&mut hb).expect("our headers are consistent and fit")
        };
        if self
            .framer
            .frame_contiguous(&hb[..n], payload, &mut t.scratch)
        {
            self.tx_pos += t.scratch.len() as u64;
            t.pieces.push(TxPiece::Scratch(0..t.scratch.len()));
            t.fpdus = 1;
            self.stats.fpdus_out += 1;
            return Some(len);
        }
        let mut pieces = core::mem::take(&mut self.frame_pieces);
        pieces.clear();
        self.framer
            .frame_with_head(&hb[..n], payload, &mut t.scratch, &mut pieces);
        for p in pieces.drain(..) {
            let r = match p {
                Piece::Scratch(r) => r,
                Piece::Ulpdu { part, range } => {
                    let at = t.scratch.len();
                    t.scratch.extend_from_slice(&payload[part][range.clone()]);
                    at..at + range.len()
                }
            };
            self.tx_pos += r.len() as u64;
            if let Some(TxPiece::Scratch(last)) = t.pieces.last_mut()
                && last.end == r.start
            {
                last.end = r.end;
                continue;
            }
            t.pieces.push(TxPiece::Scratch(r));
        }
        self.frame_pieces = pieces;
        t.fpdus = 1;
        self.stats.fpdus_out += 1;
        Some(len)
    }

    fn send_rtr<M: Memory + ?Sized>(&mut self, t: &mut Transmit, kind: RtrKind, mem: &M) {
        let h = match kind {
            RtrKind::Write => RdmapHeader::new(
                RdmapMessage::Write {
                    sink_stag: RTR_STAG,
                    sink_to: 0,
                },
                true,
            ),
            RtrKind::Send => RdmapHeader::new(
                RdmapMessage::Send {
                    msn: self.tx_qn[0].take(),
                    mo: 0,
                },
                true,
            ),
            RtrKind::Read => {
                let body = ReadRequestBody {
                    sink_stag: RTR_STAG,
                    sink_to: 0,
                    read_size: 0,
                    source_stag: RTR_STAG,
                    source_to: 0,
                };
                self.orq.issue(OutstandingRead {
                    wr_id: 0,
                    sink: Vec::new(),
                    sink_stag: RTR_STAG,
                    sink_to: 0,
                    len: 0,
                    received: 0,
                    signaled: false,
                    internal: true,
                });
                RdmapHeader::new(
                    RdmapMessage::ReadRequest {
                        msn: self.tx_qn[1].take(),
                        mo: 0,
                        body,
                    },
                    true,
                )
            }
        };
        self.frame_segment(t, &h, &[], mem);
    }

    /// Picks the next message (send queue or owed Read Response). Returns false if none can
    /// start now.
    fn start_message<M: Memory + ?Sized>(&mut self, mem: &M) -> bool {
        loop {
            let sq_ok = match self.sq.front() {
                Some(SendWr {
                    kind: WrKind::Read { .. },
                    ..
                }) => self.orq.can_issue(),
                Some(_) => true,
                None => false,
            };
            let rr_ok = !self.irq.is_empty();
            let take_rr = rr_ok && (!sq_ok || self.prefer_rr);
            if take_rr {
                let job = *self.irq.front().expect("non-empty");
                self.active = Some(TxActive::ReadResponse {
                    seg: Segmenter::new(u64::from(job.req.read_size), self.cfg.mulpdu, 14),
                });
                self.prefer_rr = false;
                return true;
            }
            if !sq_ok {
                return false;
            }
            let wr = self.sq.pop_front().expect("front exists");
            self.prefer_rr = true;
            // Check the local source before anything reaches the wire: a bad SGE fails only
            // this work request (our choice: unlike verbs, the stream stays usable, since the
            // peer has seen nothing of it).
            if !matches!(wr.kind, WrKind::Read { .. })
                && wr
                    .sges
                    .iter()
                    .any(|s| mem.local(s.addr, s.len as usize).is_none())
            {
                let c = flush_wr(&wr, WcStatus::LocalProtection);
                self.pending.push_back(PendingCompletion {
                    c,
                    written_pos: self.tx_pos,
                    done: true,
                    signaled: true,
                });
                self.release_completions();
                continue;
            }
            let (msn, hdr) = match wr.kind {
                WrKind::Send { .. } => (self.tx_qn[0].take(), 18),
                WrKind::Write { .. } => (0, 14),
                WrKind::Read { .. } => (self.tx_qn[1].take(), 18 + READ_REQUEST_LEN),
            };
            let total = if matches!(wr.kind, WrKind::Read { .. }) {
                0
            } else {
                wr.len
            };
            let seg = Segmenter::new(total, self.cfg.mulpdu, hdr);
            self.active = Some(TxActive::Sq { wr, seg, msn });
            return true;
        }
    }

    /// Emits the next segment of the active message. Returns false if the connection failed.
    fn next_segment<M: Memory + ?Sized>(&mut self, t: &mut Transmit, mem: &M) -> bool {
        let s = match self.active.as_mut() {
            Some(TxActive::ReadResponse { seg }) | Some(TxActive::Sq { seg, .. }) => {
                seg.next().expect("an active message has a segment left")
            }
            None => return false,
        };
        if matches!(self.active, Some(TxActive::ReadResponse { .. })) {
            return self.next_response_segment(t, s, mem);
        }
        let Some(TxActive::Sq { wr, msn, .. }) = self.active.as_ref() else {
            unreachable!("checked above")
        };
        let msn = *msn;
        let is_read = matches!(wr.kind, WrKind::Read { .. });
        let h = match wr.kind {
            WrKind::Send {
                solicited,
                inv_stag,
            } => {
                let mo = s.offset as u32;
                let m = match (solicited, inv_stag) {
                    (false, None) => RdmapMessage::Send { msn, mo },
                    (true, None) => RdmapMessage::SendSe { msn, mo },
                    (false, Some(st)) => RdmapMessage::SendInvalidate {
                        msn,
                        mo,
                        inval_stag: st,
                    },
                    (true, Some(st)) => RdmapMessage::SendSeInvalidate {
                        msn,
                        mo,
                        inval_stag: st,
                    },
                };
                RdmapHeader::new(m, s.last)
            }
            WrKind::Write { stag, to } => RdmapHeader::new(
                RdmapMessage::Write {
                    sink_stag: stag,
                    sink_to: to.wrapping_add(s.offset),
                },
                s.last,
            ),
            WrKind::Read {
                sink_stag,
                sink_to,
                source_stag,
                source_to,
                len,
            } => {
                let body = ReadRequestBody {
                    sink_stag,
                    sink_to,
                    read_size: len,
                    source_stag,
                    source_to,
                };
                RdmapHeader::new(RdmapMessage::ReadRequest { msn, mo: 0, body }, true)
            }
        };
        let mut parts = SrcList::default();
        let mut ok = true;
        if !is_read && s.len > 0 {
            ok = sge_pieces(&wr.sges, s.offset, s.len as u64, |addr, l| {
                parts.push(Src::Local(addr, l))
            });
            ok &= parts
                .as_slice()
                .iter()
                .all(|p| matches!(p, Src::Local(a, l) if mem.local(*a, *l).is_some()));
        }
        if !ok {
            // The source vanished in the middle of a message: the stream is broken.
            self.fail(ProtoError::RdmapLocalCatastrophic, None);
            return false;
        }
        self.frame_segment(t, &h, parts.as_slice(), mem);
        if !s.last {
            return true;
        }
        let Some(TxActive::Sq { wr, .. }) = self.active.take() else {
            unreachable!("checked above")
        };
        if let WrKind::Read {
            sink_stag,
            sink_to,
            len,
            ..
        } = wr.kind
        {
            self.orq.issue(OutstandingRead {
                wr_id: wr.wr_id,
                sink: wr.sges.to_vec(),
                sink_stag,
                sink_to,
                len,
                received: 0,
                signaled: wr.signaled,
                internal: wr.internal,
            });
        }
        if !wr.internal {
            let c = Completion {
                wr_id: wr.wr_id,
                opcode: wr.opcode(),
                status: WcStatus::Success,
                byte_len: wr.len,
                inv_stag: None,
                solicited: false,
            };
            self.pending.push_back(PendingCompletion {
                c,
                written_pos: self.tx_pos,
                done: !is_read,
                signaled: wr.signaled,
            });
            self.release_completions();
        }
        true
    }

    fn next_response_segment<M: Memory + ?Sized>(
        &mut self,
        t: &mut Transmit,
        s: crate::ddp::segment::Segment,
        mem: &M,
    ) -> bool {
        let job = *self.irq.front().expect("an active Read Response is owed");
        let req = job.req;
        // Re-check the source: it may have been invalidated since the request came.
        let check = tagged::validate(
            mem,
            req.source_stag,
            req.source_to.wrapping_add(s.offset),
            s.len as u64,
            self.cfg.pd,
            Access::REMOTE_READ,
            CheckLayer::Rdmap,
        );
        let tgt = match check {
            Ok(tg) => tg,
            Err(e) => {
                let ctx = read_request_ctx(req, job.msn);
                self.active = None;
                self.fail(e, Some(&ctx));
                return false;
            }
        };
        let h = RdmapHeader::new(
            RdmapMessage::ReadResponse {
                sink_stag: req.sink_stag,
                sink_to: req.sink_to.wrapping_add(s.offset),
            },
            s.last,
        );
        let part = [Src::Region(req.source_stag, tgt.offset, s.len)];
        let parts: &[Src] = if s.len == 0 { &[] } else { &part };
        self.frame_segment(t, &h, parts, mem);
        self.stats.bytes_read_response_out += s.len as u64;
        self.irq.advance(s.len as u32, s.last);
        if s.last {
            self.active = None;
        }
        true
    }

    /// Frames one ULPDU (header + payload sources) into `t`. The header is copied into the
    /// scratch next to ULPDU_LENGTH, and scratch runs that touch (one FPDU's pad and CRC and
    /// the next one's length and header) share one piece: about two `iovec`s per FPDU plus
    /// one per payload part, and no allocation once `t` and `frame_pieces` have grown. A
    /// payload of at most [`COPY_FRAME_MAX`] octets is copied into the scratch instead.
    fn frame_segment<M: Memory + ?Sized>(
        &mut self,
        t: &mut Transmit,
        h: &RdmapHeader,
        parts: &[Src],
        mem: &M,
    ) {
        let mut hb = [0u8; 80];
        let n = h.emit(&mut hb).expect("our headers are consistent and fit");
        let bytes = |p: &Src| match *p {
            Src::Local(addr, l) => mem.local(addr, l).expect("checked before"),
            Src::Region(stag, off, l) => mem.read(stag, off, l),
        };
        // A small segment is copied whole into the scratch, next to the FPDUs before it: one
        // CRC pass over contiguous octets and one piece (a small Write and the Send that
        // announces it go out as one iovec run), where pieces referring to the payload would
        // cost more than the copy (not with markers: `frame_contiguous` declines).
        if parts.len() <= 2 && parts.iter().map(Src::len).sum::<usize>() <= COPY_FRAME_MAX {
            let slices = [
                parts.first().map_or(&[][..], bytes),
                parts.get(1).map_or(&[][..], bytes),
            ];
            let start = t.scratch.len();
            if self
                .framer
                .frame_contiguous(&hb[..n], &slices[..parts.len()], &mut t.scratch)
            {
                let r = start..t.scratch.len();
                self.tx_pos += r.len() as u64;
                match t.pieces.last_mut() {
                    Some(TxPiece::Scratch(last)) if last.end == r.start => last.end = r.end,
                    _ => t.pieces.push(TxPiece::Scratch(r)),
                }
                t.fpdus += 1;
                self.stats.fpdus_out += 1;
                return;
            }
        }
        let mut pieces = core::mem::take(&mut self.frame_pieces);
        pieces.clear();
        match parts {
            [] => self
                .framer
                .frame_with_head(&hb[..n], &[], &mut t.scratch, &mut pieces),
            [a] => self
                .framer
                .frame_with_head(&hb[..n], &[bytes(a)], &mut t.scratch, &mut pieces),
            [a, b] => self.framer.frame_with_head(
                &hb[..n],
                &[bytes(a), bytes(b)],
                &mut t.scratch,
                &mut pieces,
            ),
            _ => {
                let slices: Vec<&[u8]> = parts.iter().map(bytes).collect();
                self.framer
                    .frame_with_head(&hb[..n], &slices, &mut t.scratch, &mut pieces);
            }
        }
        for p in pieces.drain(..) {
            let tp = match p {
                Piece::Scratch(r) => TxPiece::Scratch(r),
                Piece::Ulpdu { part, range } => match parts[part] {
                    Src::Local(addr, _) => TxPiece::Local {
                        addr: addr + range.start as u64,
                        len: range.len(),
                    },
                    Src::Region(stag, off, _) => TxPiece::Region {
                        stag,
                        offset: off + range.start as u64,
                        len: range.len(),
                    },
                },
            };
            self.tx_pos += tp.len() as u64;
            if let (TxPiece::Scratch(r), Some(TxPiece::Scratch(last))) = (&tp, t.pieces.last_mut())
                && last.end == r.start
            {
                last.end = r.end;
                continue;
            }
            t.pieces.push(tp);
        }
        self.frame_pieces = pieces;
        t.fpdus += 1;
        self.stats.fpdus_out += 1;
    }
}

/// A payload source of an outgoing segment.
#[derive(Debug, Clone, Copy)]
enum Src {
    Local(u64, usize),
    Region(STag, u64, usize),
}

impl Src {
    fn len(&self) -> usize {
        match *self {
            Src::Local(_, l) | Src::Region(_, _, l) => l,
        }
    }
}

/// The payload sources of one segment: two inline (one SGE, or a segment straddling two),
/// more on the heap.
struct SrcList {
    n: usize,
    inline: [Src; 2],
    heap: Vec<Src>,
}

impl Default for SrcList {
    fn default() -> SrcList {
        SrcList {
            n: 0,
            inline: [Src::Local(0, 0); 2],
            heap: Vec::new(),
        }
    }
}

impl SrcList {
    fn push(&mut self, s: Src) {
        if self.heap.is_empty() && self.n < self.inline.len() {
            self.inline[self.n] = s;
            self.n += 1;
            return;
        }
        if self.heap.is_empty() {
            self.heap.extend_from_slice(&self.inline[..self.n]);
        }
        self.heap.push(s);
    }

    fn as_slice(&self) -> &[Src] {
        if self.heap.is_empty() {
            &self.inline[..self.n]
        } else {
            &self.heap
        }
    }
}

fn place_sges<M: Memory + ?Sized>(
    sges: &[Sge],
    offset: u64,
    data: &[u8],
    mem: &mut M,
) -> Result<(), ProtoError> {
    // The whole range must fit before anything is written (two walks: no allocation).
    if !sge_pieces(sges, offset, data.len() as u64, |_, _| {}) {
        return Err(ProtoError::DdpLocalCatastrophic);
    }
    let mut at = 0;
    let mut ok = true;
    sge_pieces(sges, offset, data.len() as u64, |addr, l| {
        if !ok {
            return;
        }
        match mem.local_mut(addr, l) {
            Some(dst) => {
                dst.copy_from_slice(&data[at..at + l]);
                at += l;
            }
            None => ok = false,
        }
    });
    if ok {
        Ok(())
    } else {
        Err(ProtoError::DdpLocalCatastrophic)
    }
}

/// The DDP + RDMAP header length of a send-queue message's segments.
fn sq_header_len(kind: &WrKind) -> usize {
    match kind {
        WrKind::Send { .. } => 18,
        WrKind::Write { .. } => 14,
        WrKind::Read { .. } => 18 + READ_REQUEST_LEN,
    }
}

/// Stream bytes of a message of `payload` bytes cut into segments of at most `mulpdu`
/// (header `header_len` included) as [`Segmenter`] does (a zero-length message is one
/// segment), each FPDU being ULPDU_LENGTH (2) + ULPDU + pad to 4 + CRC field (4), markers not
/// counted.
fn fpdu_bytes(payload: u64, header_len: usize, mulpdu: usize) -> u64 {
    let fpdu = |len: u64| (2 + header_len as u64 + len).next_multiple_of(4) + 4;
    let max = (mulpdu - header_len) as u64;
    let (full, rest) = (payload / max, payload % max);
    let mut n = full * fpdu(max);
    if rest > 0 || payload == 0 {
        n += fpdu(rest);
    }
    n
}

fn flushed_recv(wr_id: u64, status: WcStatus) -> Completion {
    Completion {
        wr_id,
        opcode: WcOpcode::Recv,
        status,
        byte_len: 0,
        inv_stag: None,
        solicited: false,
    }
}

fn flush_wr(wr: &SendWr, status: WcStatus) -> Completion {
    Completion {
        wr_id: wr.wr_id,
        opcode: wr.opcode(),
        status,
        byte_len: 0,
        inv_stag: None,
        solicited: false,
    }
}

/// The error context of a Read Request we accepted earlier (for a Terminate raised while its
/// Read Response is produced).
fn read_request_ctx(req: ReadRequestBody, msn: u32) -> ErrorContext {
    let h = RdmapHeader::new(
        RdmapMessage::ReadRequest {
            msn,
            mo: 0,
            body: req,
        },
        true,
    );
    let mut b = [0u8; 18 + READ_REQUEST_LEN];
    h.emit(&mut b).expect("46-byte header");
    ErrorContext {
        ulpdu_len: b.len() as u16,
        ddp_header: TerminatedDdpHeader::from_ulpdu(&b).expect("46 bytes"),
        read_request: Some(req),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain Send header built in place is the one the wire module emits.
    #[test]
    fn plain_send_header_is_the_emitted_one() {
        for (msn, mo) in [(1, 0), (2, 0), (0x0102_0304, 7), (u32::MAX, u32::MAX)] {
            let mut b = [0u8; 80];
            let n = RdmapHeader::new(RdmapMessage::Send { msn, mo }, true)
                .emit(&mut b)
                .unwrap();
            assert_eq!(
                &b[..n],
                &plain_send_header(msn, mo)[..],
                "msn {msn} mo {mo}"
            );
        }
    }
}
