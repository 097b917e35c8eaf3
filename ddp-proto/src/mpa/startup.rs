//! MPA connection startup (RFC 5044 §7.1, RFC 6581): the Request/Reply exchange as two sans-I/O
//! state machines, [`Initiator`] and [`Responder`].
//!
//! What it does: builds our Request or Reply from an [`MpaConfig`], reads the peer's frame from
//! the byte stream in any chunking, applies the negotiation rules below, and ends in a
//! [`Negotiated`] (everything the framer, deframer and RDMAP need) or a [`StartupError`].
//!
//! What it refuses to do: I/O, clocks, and the RTR message itself. Bytes come in through
//! `handle_input` (which says how many it took: everything after the MPA frame belongs to the
//! FPDU stream and stays with the caller), bytes to send come out of `poll_transmit`, time comes
//! in as `now` (a `Duration` since an origin the driver picks) and the deadline goes out through
//! `poll_timeout`. The RTR (a zero-length RDMA Write/Read/Send) is an FPDU, built by the
//! connection from [`Negotiated::rtr`]; a Terminate after a bad Reply is also the caller's
//! (see [`StartupError::proto_error`] and [`Initiator::reply_framing`]).
//!
//! # Negotiation rules (each with its source; "we chose" where the RFC leaves it open)
//!
//! * **Key**: a Request must open with "MPA ID Req Frame", a Reply with "MPA ID Rep Frame"
//!   (RFC 5044 §7.1.1, §7.1.2 rule 5). Checked byte by byte as bytes arrive, so garbage fails
//!   at its first wrong byte → [`StartupError::BadKey`], mapped to
//!   [`ProtoError::InvalidRequestReply`]. No Reply is sent for a bad Request (rule 2: "close the
//!   TCP connection").
//! * **Private data** over 512 bytes → [`StartupError::InvalidFrame`] (RFC 5044 §7.1.1),
//!   detected from the header before the data arrives. siw accepts at most 256 bytes including
//!   the IRD/ORD words ([`SIW_MAX_PRIVATE_DATA`]); [`MpaConfig::max_tx_private_data`] keeps what
//!   we send within that.
//! * **CRC** is on if either frame has C (RFC 5044 §7.1.1, the C flag: set in either the
//!   Request or the Reply, CRCs are generated and checked by both endpoints). Our Request
//!   has C = `want_crc`; our Reply has C = request C or `want_crc` (echoing C is what siw
//!   does, `siw_proc_mpareq`). siw as responder never *adds* C when the
//!   request lacks it (README pitfall 9); we do when `want_crc` (the RFC allows it and siw as
//!   initiator follows a C=1 reply). `crc_strict` (siw's `mpa_crc_strict`) refuses a peer that
//!   sets C while we do not want CRC: the responder rejects (Reply R=1 with C=0, as siw), the
//!   initiator fails; both → [`StartupError::CrcRequiredButRefused`]. siw's initiator with
//!   `mpa_crc_required` also refuses a C=0 reply; we do not, because CRC is on anyway by the
//!   rule above.
//! * **Markers** are per direction: M in a frame = its sender wants markers on what it
//!   *receives* (RFC 5044 §7.1.1). So `markers_tx` = the peer's M, `markers_rx` = our M
//!   (`markers_rx` in the config). A peer M we cannot honour (`allow_markers_tx = false`) →
//!   [`StartupError::MarkersUnsupported`]; the responder answers it with a reject (siw does the
//!   same: "MPA Markers: currently not supported").
//! * **Revision**: we speak 1 (RFC 5044) and 2 (RFC 6581). The responder answers with
//!   `min(request revision, our revision)` — siw echoes the request's revision, which is the
//!   same for the revisions both support. A request with revision 0 (pre-RFC drafts, whose
//!   marker rules differ) or above 2 is rejected with a Reply (R=1) carrying *our* revision and
//!   no private data, so the initiator learns what we speak → [`StartupError::UnsupportedRevision`]
//!   (RFC 5044 says only "MUST close"; siw closes without a reply for > 2 and accepts 0 — we
//!   chose to say why, and not to guess at revision 0). The initiator accepts a Reply with a
//!   revision from 1 up to the one it sent; a revision-1 Reply to our revision-2 Request is a
//!   fallback to RFC 5044 without the IRD/ORD exchange, allowed unless we asked for P2P (then
//!   → [`StartupError::NoMatchingRtr`]). siw's initiator refuses that fallback; we chose the
//!   RFC 5044 reading that a responder may answer with the revision it has.
//! * **Enhanced (RFC 6581)**: revision 2 and flag E mean the first 4 bytes of private data are
//!   [`MpaV2Params`]. We always set E on a revision-2 frame. A revision-2 Request *without* E is
//!   answered without IRD/ORD words (siw echoes the flags the same way). E with fewer than 4
//!   bytes of private data: the responder rejects (siw `reject_conn`), the initiator fails;
//!   both → [`StartupError::InvalidFrame`]. A revision-2 Reply to our enhanced Request must
//!   carry E and the words (siw: "The responder MUST reply with MPA version 2 and MUST set
//!   MPA_RR_FLAG_ENHANCED"), else [`StartupError::InvalidFrame`].
//! * **IRD/ORD** (RFC 6581: the ORD of one side must not exceed the IRD of the other): the
//!   responder answers `ird = min(request ORD, our ird)` and `ord = min(request IRD, our ord)`,
//!   i.e. it grants what the initiator asks, up to its own limits (siw computes the same from
//!   the request, capped at its 128, then lets the ULP lower it; `siw_compat` with 128/128
//!   reproduces every captured Reply). The initiator then uses `ord = min(our ord, reply IRD)`
//!   and `ird = reply ORD`; a reply ORD above the IRD we offered is
//!   [`StartupError::InsufficientIrd`] → Terminate "Insufficient IRD resources" (as siw's
//!   initiator does beyond its device limit). Without the exchange (revision 1, or no E) the
//!   values are our configured ones and [`Negotiated::enhanced`] is false: the ULP must agree
//!   them by other means (siw reports 0/0 here — README pitfall 8).
//! * **P2P and RTR** (RFC 6581): the initiator sets P2P and offers the RTR kinds in
//!   `rtr`; the responder picks one from `offered ∩ its rtr`, preferring zero-length RDMA Write,
//!   then Read, then Send (siw's order; siw never accepts Send: it would need a posted receive).
//!   Nothing in common → the responder rejects → [`StartupError::NoMatchingRtr`] (RFC 6581
//!   error code 0x07). The initiator requires the Reply to have P2P and at least one RTR bit it
//!   offered (else [`StartupError::NoMatchingRtr`] → Terminate, as siw); if several are set it
//!   takes its own preference among them. P2P/RTR bits in a Reply to a non-P2P Request are
//!   ignored (siw does the same). In P2P mode with ORD 0 the initiator advertises ORD 1, as siw
//!   does, so a Read RTR is possible. After the exchange the initiator sends the RTR before any
//!   other FPDU ([`Negotiated::initiator_sends_rtr`]) and the responder consumes it before it
//!   sends anything ([`Negotiated::responder_expects_rtr`]). Independently of P2P, RFC 5044
//!   §7.1.2 rule 4 has the responder receive a first FPDU before it sends one; the RTR is that
//!   FPDU in P2P mode.
//! * **Reject**: the responder's ULP may reject after seeing the request ([`Responder::reject`]);
//!   the Reply has R=1, C echoed, M=0, the negotiated revision, and — when the request was
//!   enhanced — IRD/ORD words of zero (what siw sends, capture `rping-crc-strict-mismatch`),
//!   followed by the ULP's private data. The initiator reports
//!   [`StartupError::Rejected`] with the private data (words stripped). Per RFC 5044 §7.1.2 no
//!   Terminate follows a reject; the caller closes.
//! * **Timeouts**: the responder waits [`MpaConfig::request_timeout`] (5 s, siw's
//!   `MPAREP_TIMEOUT` used in state `AWAIT_MPAREQ`) for the whole Request; the initiator waits
//!   [`MpaConfig::reply_timeout`] (10 s, siw's `MPAREQ_TIMEOUT` in `AWAIT_MPAREP`) for the whole
//!   Reply, counted from construction. No timer runs while the responder's ULP decides (siw
//!   neither). A deadline that has passed wins over input given at or after it.
//! * **Bytes after the frame**: left unconsumed. The initiator must not send FPDUs before the
//!   Reply (RFC 5044 §7.1.2); siw drops a connection whose request is followed by more bytes,
//!   but with coalescing TCP we cannot tell when they were sent, so we leave them to the
//!   deframer.

use core::fmt;
use core::time::Duration;

use crate::error::ProtoError;
use crate::wire::mpa::{
    HEADER_LEN, MAX_IRD_ORD, MAX_PRIVATE_DATA, MpaFrameKind, MpaFrameRepr, MpaV2Params,
    SIW_MAX_PRIVATE_DATA, V2_PARAMS_LEN,
};

/// How long a responder waits for the Request (siw: 5 s).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an initiator waits for the Reply (siw: 10 s).
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// siw's per-QP limit on IRD and ORD (`SIW_MAX_IRD_QP`, `SIW_MAX_ORD_QP`).
pub const SIW_MAX_IRD_ORD: u16 = 128;

/// A kind of ready-to-receive (RTR) message for peer-to-peer mode (RFC 6581).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtrKind {
    /// Zero-length RDMA Write (siw's choice, preferred).
    Write,
    /// Zero-length RDMA Read (Read Request with size 0; needs ORD ≥ 1).
    Read,
    /// Zero-length Send (needs a posted receive at the responder; siw never accepts it).
    Send,
}

/// Our order of preference when several RTR kinds are possible.
const RTR_PREFERENCE: [RtrKind; 3] = [RtrKind::Write, RtrKind::Read, RtrKind::Send];

/// A set of RTR kinds: offered (initiator) or accepted (responder).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RtrKinds {
    /// Zero-length RDMA Write.
    pub write: bool,
    /// Zero-length RDMA Read.
    pub read: bool,
    /// Zero-length Send.
    pub send: bool,
}

impl RtrKinds {
    /// No RTR kind: as a responder, peer-to-peer requests are refused.
    pub const NONE: RtrKinds = RtrKinds {
        write: false,
        read: false,
        send: false,
    };
    /// Write and Read: what siw offers and accepts (`rtr_type` in siw_cm.c).
    pub const WRITE_READ: RtrKinds = RtrKinds {
        write: true,
        read: true,
        send: false,
    };
    /// Every kind RFC 6581 defines.
    pub const ALL: RtrKinds = RtrKinds {
        write: true,
        read: true,
        send: true,
    };

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: RtrKind) -> bool {
        match kind {
            RtrKind::Write => self.write,
            RtrKind::Read => self.read,
            RtrKind::Send => self.send,
        }
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        !(self.write || self.read || self.send)
    }

    /// The kinds in both sets.
    pub fn intersect(self, other: RtrKinds) -> RtrKinds {
        RtrKinds {
            write: self.write && other.write,
            read: self.read && other.read,
            send: self.send && other.send,
        }
    }

    /// The most preferred kind in the set (Write, then Read, then Send).
    pub fn preferred(self) -> Option<RtrKind> {
        RTR_PREFERENCE.into_iter().find(|&k| self.contains(k))
    }

    /// The RTR bits of IRD/ORD words.
    pub fn from_params(p: &MpaV2Params) -> RtrKinds {
        RtrKinds {
            write: p.write_rtr,
            read: p.read_rtr,
            send: p.send_rtr,
        }
    }

    fn only(kind: RtrKind) -> RtrKinds {
        RtrKinds {
            write: kind == RtrKind::Write,
            read: kind == RtrKind::Read,
            send: kind == RtrKind::Send,
        }
    }
}

/// What one side wants from the MPA exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaConfig {
    /// The MPA revision we send (initiator) or at most answer with (responder): 1 or 2.
    pub revision: u8,
    /// Set C: we want CRC-32C (CRC is then on in both directions).
    pub want_crc: bool,
    /// Refuse a peer that sets C while `want_crc` is false (siw's `mpa_crc_strict`).
    pub crc_strict: bool,
    /// Set M: we want markers on the stream we *receive*.
    pub markers_rx: bool,
    /// Whether we can insert markers into what we send, if the peer's M asks for them.
    pub allow_markers_tx: bool,
    /// Our IRD: how many incoming RDMA Read Requests we can hold (≤ 0x3fff).
    pub ird: u16,
    /// Our ORD: how many RDMA Read Requests we want outstanding (≤ 0x3fff).
    pub ord: u16,
    /// Initiator: ask for peer-to-peer mode (needs revision 2). Ignored by the responder,
    /// which accepts P2P whenever `rtr` is not empty.
    pub p2p: bool,
    /// RTR kinds we offer (initiator, with `p2p`) or accept (responder).
    pub rtr: RtrKinds,
    /// ULP private data: the initiator's Request, or the Reply of an auto-accepting responder.
    pub private_data: Vec<u8>,
    /// Upper bound on the private data we send, IRD/ORD words included (≤ 512; siw takes 256).
    pub max_tx_private_data: usize,
    /// Responder: how long to wait for the whole Request.
    pub request_timeout: Duration,
    /// Initiator: how long to wait for the whole Reply.
    pub reply_timeout: Duration,
}

impl MpaConfig {
    /// What siw does by default: revision 2 with IRD/ORD words, CRC only if the peer asks (not
    /// strict), never markers, no P2P request but Write/Read RTR accepted, IRD/ORD up to siw's
    /// per-QP limit of 128, private data within siw's 256 bytes, timeouts 5 s / 10 s.
    ///
    /// siw takes IRD/ORD from the ULP (rping asks 1/1); as a responder, 128/128 grants the
    /// initiator what it asks, which reproduces siw's captured Replies byte for byte.
    pub fn siw_compat() -> MpaConfig {
        MpaConfig {
            revision: 2,
            want_crc: false,
            crc_strict: false,
            markers_rx: false,
            allow_markers_tx: false,
            ird: SIW_MAX_IRD_ORD,
            ord: SIW_MAX_IRD_ORD,
            p2p: false,
            rtr: RtrKinds::WRITE_READ,
            private_data: Vec::new(),
            max_tx_private_data: SIW_MAX_PRIVATE_DATA,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            reply_timeout: DEFAULT_REPLY_TIMEOUT,
        }
    }

    /// Checks the values a frame could not carry.
    pub fn validate(&self) -> Result<(), UsageError> {
        if !(1..=2).contains(&self.revision) {
            return Err(UsageError::Revision(self.revision));
        }
        if self.p2p && self.revision < 2 {
            return Err(UsageError::P2pNeedsRevision2);
        }
        if self.p2p && self.rtr.is_empty() {
            return Err(UsageError::P2pWithoutRtr);
        }
        for value in [self.ird, self.ord] {
            if value > MAX_IRD_ORD {
                return Err(UsageError::IrdOrdTooLarge(value));
            }
        }
        if self.max_tx_private_data > MAX_PRIVATE_DATA {
            return Err(UsageError::PrivateDataTooLong {
                len: self.max_tx_private_data,
                max: MAX_PRIVATE_DATA,
            });
        }
        let max = self.ulp_private_data_limit(self.revision == 2);
        if self.private_data.len() > max {
            return Err(UsageError::PrivateDataTooLong {
                len: self.private_data.len(),
                max,
            });
        }
        Ok(())
    }

    /// How much ULP private data fits, with or without the IRD/ORD words.
    fn ulp_private_data_limit(&self, enhanced: bool) -> usize {
        let max = self.max_tx_private_data.min(MAX_PRIVATE_DATA);
        if enhanced {
            max.saturating_sub(V2_PARAMS_LEN)
        } else {
            max
        }
    }
}

impl Default for MpaConfig {
    /// [`MpaConfig::siw_compat`].
    fn default() -> Self {
        MpaConfig::siw_compat()
    }
}

/// A misuse of the API (bad configuration, a decision at the wrong time); nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UsageError {
    /// Revision other than 1 or 2.
    Revision(u8),
    /// Peer-to-peer mode is a revision-2 feature.
    P2pNeedsRevision2,
    /// Peer-to-peer mode needs at least one RTR kind to offer.
    P2pWithoutRtr,
    /// IRD or ORD above the 14-bit maximum.
    IrdOrdTooLarge(u16),
    /// Private data longer than the frame (or `max_tx_private_data`) allows.
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes allowed.
        max: usize,
    },
    /// `accept`/`reject` called when no Request is waiting for a decision.
    NotAwaitingDecision,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageError::Revision(r) => write!(f, "MPA revision {r} (only 1 and 2)"),
            UsageError::P2pNeedsRevision2 => write!(f, "peer-to-peer mode needs MPA revision 2"),
            UsageError::P2pWithoutRtr => write!(f, "peer-to-peer mode needs an RTR kind"),
            UsageError::IrdOrdTooLarge(v) => write!(f, "IRD/ORD {v} exceeds {MAX_IRD_ORD}"),
            UsageError::PrivateDataTooLong { len, max } => {
                write!(f, "private data of {len} bytes, at most {max}")
            }
            UsageError::NotAwaitingDecision => write!(f, "no MPA Request awaits a decision"),
        }
    }
}

impl std::error::Error for UsageError {}

/// Why the startup failed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StartupError {
    /// The responder rejected us (Reply with R=1); its private data, IRD/ORD words stripped.
    Rejected {
        /// The responder's ULP private data.
        private_data: Vec<u8>,
    },
    /// We (the responder) rejected the request through [`Responder::reject`].
    LocallyRejected,
    /// The peer's frame did not arrive in time.
    Timeout,
    /// The stream ended before the frame was complete.
    StreamLost,
    /// The frame does not start with the key it must have.
    BadKey,
    /// The frame is malformed: private data over 512 bytes, or IRD/ORD words missing.
    InvalidFrame,
    /// The peer's revision is one we do not speak (0, above ours, or above what we sent).
    UnsupportedRevision {
        /// The revision byte received.
        revision: u8,
    },
    /// The peer set C and we refuse CRC (`crc_strict`).
    CrcRequiredButRefused,
    /// The peer wants markers on what it receives and we cannot send them.
    MarkersUnsupported,
    /// Peer-to-peer mode without an RTR kind both sides support.
    NoMatchingRtr,
    /// The responder's ORD exceeds the IRD we offered.
    InsufficientIrd {
        /// The ORD in the Reply.
        peer_ord: u16,
        /// The IRD in our Request.
        our_ird: u16,
    },
}

impl StartupError {
    /// The LLP error a Terminate must report, where RFC 5044/6581 send one; `None` where the
    /// connection is just closed (timeouts, a lost stream, rejects either way, refusals that
    /// siw answers with a reject or a silent close).
    ///
    /// Only the initiator can send a Terminate here (it follows a Reply, framed as
    /// [`Initiator::reply_framing`] says); a responder answers a bad Request by closing, and a
    /// refused one with a reject Reply.
    pub fn proto_error(&self) -> Option<ProtoError> {
        match self {
            StartupError::BadKey
            | StartupError::InvalidFrame
            | StartupError::UnsupportedRevision { .. } => Some(ProtoError::InvalidRequestReply),
            StartupError::NoMatchingRtr => Some(ProtoError::NoMatchingRtr),
            StartupError::InsufficientIrd { .. } => Some(ProtoError::InsufficientIrd),
            StartupError::Rejected { .. }
            | StartupError::LocallyRejected
            | StartupError::Timeout
            | StartupError::StreamLost
            | StartupError::CrcRequiredButRefused
            | StartupError::MarkersUnsupported => None,
        }
    }
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartupError::Rejected { private_data } => write!(
                f,
                "MPA connection rejected by the peer ({} bytes of private data)",
                private_data.len()
            ),
            StartupError::LocallyRejected => write!(f, "MPA connection rejected locally"),
            StartupError::Timeout => write!(f, "MPA Request/Reply timed out"),
            StartupError::StreamLost => write!(f, "stream ended during MPA startup"),
            StartupError::BadKey => write!(f, "MPA frame with a wrong key"),
            StartupError::InvalidFrame => write!(f, "invalid MPA Request/Reply frame"),
            StartupError::UnsupportedRevision { revision } => {
                write!(f, "unsupported MPA revision {revision}")
            }
            StartupError::CrcRequiredButRefused => write!(f, "peer requires CRC, refused"),
            StartupError::MarkersUnsupported => write!(f, "peer requires markers, unsupported"),
            StartupError::NoMatchingRtr => write!(f, "no matching RTR option"),
            StartupError::InsufficientIrd { peer_ord, our_ird } => {
                write!(
                    f,
                    "insufficient IRD: peer ORD {peer_ord} > our IRD {our_ird}"
                )
            }
        }
    }
}

impl std::error::Error for StartupError {}

/// The result of a successful exchange: everything later layers need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The revision in the Reply.
    pub revision: u8,
    /// CRC-32C in both directions (either side set C).
    pub crc: bool,
    /// We insert markers into what we send (the peer's M).
    pub markers_tx: bool,
    /// The peer inserts markers into what we receive (our M).
    pub markers_rx: bool,
    /// The RFC 6581 IRD/ORD words were exchanged (else `ird`/`ord` are just our configuration).
    pub enhanced: bool,
    /// Incoming RDMA Read Requests we must be able to hold.
    pub ird: u16,
    /// RDMA Read Requests we may have outstanding.
    pub ord: u16,
    /// Peer-to-peer mode: an RTR follows the Reply.
    pub p2p: bool,
    /// The RTR kind, in peer-to-peer mode.
    pub rtr: Option<RtrKind>,
    /// The peer's IRD/ORD words as received, if any.
    pub peer_params: Option<MpaV2Params>,
    /// The peer's ULP private data (IRD/ORD words stripped).
    pub peer_private_data: Vec<u8>,
    /// The initiator sends the RTR as its first FPDU.
    pub initiator_sends_rtr: bool,
    /// The responder receives the RTR as its first FPDU before it sends anything.
    pub responder_expects_rtr: bool,
}

/// CRC and markers for FPDUs we send (for a Terminate after a bad Reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxFraming {
    /// CRC-32C on.
    pub crc: bool,
    /// Markers in what we send.
    pub markers: bool,
}

// ---------------------------------------------------------------------------------------------
// Incremental frame reader

/// Outcome of feeding bytes to the frame reader.
enum ReadStatus {
    NeedMore,
    Complete,
    Failed(StartupError),
}

/// Gathers one Request or Reply from a byte stream in any chunking, checking the key as it
/// arrives and the length as soon as the header is complete.
#[derive(Debug, Clone)]
struct FrameReader {
    key: &'static [u8; 16],
    buf: Vec<u8>,
}

impl FrameReader {
    fn new(kind: MpaFrameKind) -> FrameReader {
        FrameReader {
            key: kind.key(),
            buf: Vec::with_capacity(HEADER_LEN),
        }
    }

    /// Bytes the frame still needs (header first, then the announced private data).
    fn wanted(&self) -> usize {
        if self.buf.len() < HEADER_LEN {
            HEADER_LEN - self.buf.len()
        } else {
            let pd_len = usize::from(u16::from_be_bytes([self.buf[18], self.buf[19]]));
            HEADER_LEN + pd_len - self.buf.len()
        }
    }

    /// Takes bytes from `data` up to the end of the frame; returns how many it took.
    fn push(&mut self, data: &[u8]) -> (usize, ReadStatus) {
        let mut used = 0;
        // Key and header, byte by byte, so garbage fails at its first wrong byte.
        while self.buf.len() < HEADER_LEN {
            let Some(&b) = data.get(used) else {
                return (used, ReadStatus::NeedMore);
            };
            used += 1;
            let at = self.buf.len();
            if at < self.key.len() && b != self.key[at] {
                return (used, ReadStatus::Failed(StartupError::BadKey));
            }
            self.buf.push(b);
            if self.buf.len() == HEADER_LEN {
                let pd_len = u16::from_be_bytes([self.buf[18], self.buf[19]]);
                if usize::from(pd_len) > MAX_PRIVATE_DATA {
                    return (used, ReadStatus::Failed(StartupError::InvalidFrame));
                }
            }
        }
        let take = self.wanted().min(data.len() - used);
        self.buf.extend_from_slice(&data[used..used + take]);
        used += take;
        if self.wanted() == 0 {
            (used, ReadStatus::Complete)
        } else {
            (used, ReadStatus::NeedMore)
        }
    }

    fn frame(&self) -> Result<MpaFrameRepr<'_>, StartupError> {
        MpaFrameRepr::parse_bytes(&self.buf).map_err(|_| StartupError::InvalidFrame)
    }
}

fn build_frame(
    kind: MpaFrameKind,
    flags: (bool, bool, bool), // markers, crc, reject
    revision: u8,
    v2: Option<MpaV2Params>,
    ulp_private_data: &[u8],
) -> Vec<u8> {
    let mut private_data = Vec::with_capacity(V2_PARAMS_LEN + ulp_private_data.len());
    if let Some(p) = v2 {
        private_data.extend_from_slice(&p.to_bytes());
    }
    private_data.extend_from_slice(ulp_private_data);
    MpaFrameRepr {
        kind,
        markers: flags.0,
        crc: flags.1,
        reject: flags.2,
        enhanced: v2.is_some(),
        reserved: 0,
        revision,
        private_data: &private_data,
    }
    .to_bytes()
}

fn deadline_passed(deadline: Option<Duration>, now: Duration) -> bool {
    deadline.is_some_and(|d| now >= d)
}

// ---------------------------------------------------------------------------------------------
// Initiator

#[derive(Debug, Clone, PartialEq, Eq)]
enum InitiatorState {
    AwaitingReply,
    Done,
}

/// The active side: sends the MPA Request, reads the Reply.
///
/// ```
/// use core::time::Duration;
/// use ddp_proto::mpa::startup::{Initiator, MpaConfig, Responder};
///
/// let now = Duration::ZERO;
/// let mut ini = Initiator::new(MpaConfig::siw_compat(), now).unwrap();
/// let mut resp = Responder::new_auto_accept(MpaConfig::siw_compat(), now).unwrap();
/// let request = ini.poll_transmit().unwrap();
/// assert_eq!(resp.handle_input(&request, now), request.len());
/// let reply = resp.poll_transmit().unwrap();
/// assert_eq!(ini.handle_input(&reply, now), reply.len());
/// let ours = ini.poll_outcome().unwrap().unwrap();
/// let theirs = resp.poll_outcome().unwrap().unwrap();
/// assert_eq!((ours.revision, ours.crc, theirs.crc), (2, false, false));
/// ```
#[derive(Debug, Clone)]
pub struct Initiator {
    config: MpaConfig,
    /// The IRD/ORD words we sent (revision 2).
    sent_params: Option<MpaV2Params>,
    transmit: Option<Vec<u8>>,
    reader: FrameReader,
    deadline: Option<Duration>,
    state: InitiatorState,
    outcome: Option<Result<Negotiated, StartupError>>,
    framing: Option<TxFraming>,
}

impl Initiator {
    /// Prepares the Request; the Reply timer starts at `now`.
    pub fn new(config: MpaConfig, now: Duration) -> Result<Initiator, UsageError> {
        config.validate()?;
        let sent_params = (config.revision == 2).then(|| {
            let offer = if config.p2p {
                config.rtr
            } else {
                RtrKinds::NONE
            };
            MpaV2Params {
                ird: config.ird,
                // siw_connect: "if (p2p_mode && cep->ord == 0) cep->ord = 1"
                ord: if config.p2p {
                    config.ord.max(1)
                } else {
                    config.ord
                },
                p2p: config.p2p,
                send_rtr: offer.send,
                write_rtr: offer.write,
                read_rtr: offer.read,
            }
        });
        let request = build_frame(
            MpaFrameKind::Request,
            (config.markers_rx, config.want_crc, false),
            config.revision,
            sent_params,
            &config.private_data,
        );
        Ok(Initiator {
            deadline: Some(now + config.reply_timeout),
            config,
            sent_params,
            transmit: Some(request),
            reader: FrameReader::new(MpaFrameKind::Reply),
            state: InitiatorState::AwaitingReply,
            outcome: None,
            framing: None,
        })
    }

    /// The Request, once. The driver writes all of it before anything else.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.take()
    }

    /// Feeds bytes received from the peer; returns how many belong to the Reply. Bytes after
    /// the Reply (the peer's first FPDUs) are not taken; after the outcome, nothing is.
    pub fn handle_input(&mut self, data: &[u8], now: Duration) -> usize {
        if self.state != InitiatorState::AwaitingReply {
            return 0;
        }
        if deadline_passed(self.deadline, now) {
            self.finish(Err(StartupError::Timeout));
            return 0;
        }
        let (used, status) = self.reader.push(data);
        match status {
            ReadStatus::NeedMore => {}
            ReadStatus::Failed(e) => self.finish(Err(e)),
            ReadStatus::Complete => {
                let result = self.process_reply();
                self.finish(result);
            }
        }
        used
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called, while waiting.
    pub fn poll_timeout(&self) -> Option<Duration> {
        match self.state {
            InitiatorState::AwaitingReply => self.deadline,
            InitiatorState::Done => None,
        }
    }

    /// Fails with [`StartupError::Timeout`] if the deadline has passed.
    pub fn handle_timeout(&mut self, now: Duration) {
        if self.state == InitiatorState::AwaitingReply && deadline_passed(self.deadline, now) {
            self.finish(Err(StartupError::Timeout));
        }
    }

    /// The stream ended (FIN or error) before the outcome: [`StartupError::StreamLost`].
    pub fn handle_eof(&mut self) {
        if self.state == InitiatorState::AwaitingReply {
            self.finish(Err(StartupError::StreamLost));
        }
    }

    /// The outcome, once.
    pub fn poll_outcome(&mut self) -> Option<Result<Negotiated, StartupError>> {
        self.outcome.take()
    }

    /// Whether the exchange is over (the outcome may already have been taken).
    pub fn is_finished(&self) -> bool {
        self.state == InitiatorState::Done
    }

    /// CRC and markers for FPDUs we send, known once a well-formed Reply arrived: how to frame
    /// the Terminate that [`StartupError::proto_error`] asks for.
    pub fn reply_framing(&self) -> Option<TxFraming> {
        self.framing
    }

    fn finish(&mut self, result: Result<Negotiated, StartupError>) {
        self.state = InitiatorState::Done;
        self.deadline = None;
        self.outcome = Some(result);
    }

    fn process_reply(&mut self) -> Result<Negotiated, StartupError> {
        let cfg = &self.config;
        let reply = self.reader.frame()?;
        // Revision: 1 up to what we sent (0 is a pre-RFC draft, with other marker rules).
        if reply.revision == 0 || reply.revision > cfg.revision {
            return Err(StartupError::UnsupportedRevision {
                revision: reply.revision,
            });
        }
        let enhanced = self.sent_params.is_some() && reply.revision == 2;
        if reply.reject {
            let private_data = if enhanced {
                reply.ulp_private_data().to_vec()
            } else {
                reply.private_data.to_vec()
            };
            return Err(StartupError::Rejected { private_data });
        }
        let crc = cfg.want_crc || reply.crc;
        self.framing = Some(TxFraming {
            crc,
            markers: reply.markers,
        });
        if reply.markers && !cfg.allow_markers_tx {
            return Err(StartupError::MarkersUnsupported);
        }
        if crc && !cfg.want_crc && cfg.crc_strict {
            return Err(StartupError::CrcRequiredButRefused);
        }
        let mut negotiated = Negotiated {
            revision: reply.revision,
            crc,
            markers_tx: reply.markers,
            markers_rx: cfg.markers_rx,
            enhanced,
            ird: cfg.ird,
            ord: cfg.ord,
            p2p: false,
            rtr: None,
            peer_params: None,
            peer_private_data: reply.private_data.to_vec(),
            initiator_sends_rtr: false,
            responder_expects_rtr: false,
        };
        let Some(sent) = self.sent_params.filter(|_| enhanced) else {
            // Revision 1 (sent, or the responder's fallback): no IRD/ORD, no P2P.
            if cfg.p2p {
                return Err(StartupError::NoMatchingRtr);
            }
            return Ok(negotiated);
        };
        let peer = reply.v2_params().ok_or(StartupError::InvalidFrame)?;
        if peer.ord > sent.ird {
            return Err(StartupError::InsufficientIrd {
                peer_ord: peer.ord,
                our_ird: sent.ird,
            });
        }
        negotiated.ird = peer.ord;
        negotiated.ord = sent.ord.min(peer.ird);
        negotiated.peer_params = Some(peer);
        negotiated.peer_private_data = reply.ulp_private_data().to_vec();
        if sent.p2p {
            let offered = RtrKinds::from_params(&sent);
            let rtr = if peer.p2p {
                RtrKinds::from_params(&peer).intersect(offered).preferred()
            } else {
                None
            };
            let rtr = rtr.ok_or(StartupError::NoMatchingRtr)?;
            negotiated.p2p = true;
            negotiated.rtr = Some(rtr);
            negotiated.initiator_sends_rtr = true;
            negotiated.responder_expects_rtr = true;
        }
        Ok(negotiated)
    }
}

// ---------------------------------------------------------------------------------------------
// Responder

/// The peer's Request, as the responder's ULP sees it before deciding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRequest {
    /// The revision byte of the Request.
    pub revision: u8,
    /// Flag M: the initiator wants markers on what it receives.
    pub markers: bool,
    /// Flag C: the initiator wants CRC.
    pub crc: bool,
    /// Flag E: IRD/ORD words present.
    pub enhanced: bool,
    /// The reserved flag bits as received (siw's GSO bit is 0x08).
    pub reserved: u8,
    /// The IRD/ORD words, if the Request carried them (and we speak revision 2).
    pub params: Option<MpaV2Params>,
    /// The initiator's ULP private data (IRD/ORD words stripped).
    pub private_data: Vec<u8>,
}

/// What the Reply will say if the ULP accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReplyPlan {
    revision: u8,
    crc: bool,
    markers_tx: bool,
    /// The IRD/ORD words of an accepting Reply (revision 2 with E).
    v2: Option<MpaV2Params>,
    rtr: Option<RtrKind>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ResponderState {
    AwaitingRequest,
    AwaitingDecision(ReplyPlan),
    Done,
}

/// The passive side: reads the MPA Request, lets the ULP accept or reject, sends the Reply.
///
/// With [`Responder::new`] the ULP decides: once [`request`](Self::request) is `Some` and
/// [`awaiting_decision`](Self::awaiting_decision) is true, call [`accept`](Self::accept) or
/// [`reject`](Self::reject). [`Responder::new_auto_accept`] accepts with the configured private
/// data as soon as a valid Request is in. A Request that negotiation refuses (markers, CRC,
/// RTR, revision) is rejected without asking the ULP; a malformed one is not answered at all.
#[derive(Debug, Clone)]
pub struct Responder {
    config: MpaConfig,
    auto_accept: bool,
    reader: FrameReader,
    deadline: Option<Duration>,
    state: ResponderState,
    request: Option<PeerRequest>,
    transmit: Option<Vec<u8>>,
    outcome: Option<Result<Negotiated, StartupError>>,
}

impl Responder {
    /// A responder whose ULP decides; the Request timer starts at `now`.
    pub fn new(config: MpaConfig, now: Duration) -> Result<Responder, UsageError> {
        config.validate()?;
        Ok(Responder {
            deadline: Some(now + config.request_timeout),
            config,
            auto_accept: false,
            reader: FrameReader::new(MpaFrameKind::Request),
            state: ResponderState::AwaitingRequest,
            request: None,
            transmit: None,
            outcome: None,
        })
    }

    /// A responder that accepts every acceptable Request with `config.private_data`.
    pub fn new_auto_accept(config: MpaConfig, now: Duration) -> Result<Responder, UsageError> {
        let mut r = Responder::new(config, now)?;
        r.auto_accept = true;
        Ok(r)
    }

    /// Feeds bytes received from the initiator; returns how many belong to the Request. Bytes
    /// after it are not taken (they are FPDUs, for after the Reply).
    pub fn handle_input(&mut self, data: &[u8], now: Duration) -> usize {
        if self.state != ResponderState::AwaitingRequest {
            return 0;
        }
        if deadline_passed(self.deadline, now) {
            self.finish(Err(StartupError::Timeout));
            return 0;
        }
        let (used, status) = self.reader.push(data);
        match status {
            ReadStatus::NeedMore => {}
            ReadStatus::Failed(e) => self.finish(Err(e)),
            ReadStatus::Complete => self.process_request(),
        }
        used
    }

    /// The Reply (accept or reject), once it is decided. The driver writes all of it; after a
    /// reject it then closes the connection.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.take()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called, while waiting for the
    /// Request (no timer runs while the ULP decides).
    pub fn poll_timeout(&self) -> Option<Duration> {
        match self.state {
            ResponderState::AwaitingRequest => self.deadline,
            _ => None,
        }
    }

    /// Fails with [`StartupError::Timeout`] if the Request is not in by the deadline.
    pub fn handle_timeout(&mut self, now: Duration) {
        if self.state == ResponderState::AwaitingRequest && deadline_passed(self.deadline, now) {
            self.finish(Err(StartupError::Timeout));
        }
    }

    /// The stream ended before the outcome: [`StartupError::StreamLost`].
    pub fn handle_eof(&mut self) {
        if matches!(
            self.state,
            ResponderState::AwaitingRequest | ResponderState::AwaitingDecision(_)
        ) {
            self.finish(Err(StartupError::StreamLost));
        }
    }

    /// The parsed Request, once it is in (kept after the decision).
    pub fn request(&self) -> Option<&PeerRequest> {
        self.request.as_ref()
    }

    /// Whether the ULP must now call [`accept`](Self::accept) or [`reject`](Self::reject).
    pub fn awaiting_decision(&self) -> bool {
        matches!(self.state, ResponderState::AwaitingDecision(_))
    }

    /// Accepts: queues the Reply with `private_data` after any IRD/ORD words; the outcome is
    /// then [`Negotiated`].
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), UsageError> {
        let ResponderState::AwaitingDecision(plan) = self.state else {
            return Err(UsageError::NotAwaitingDecision);
        };
        let max = self.config.ulp_private_data_limit(plan.v2.is_some());
        if private_data.len() > max {
            return Err(UsageError::PrivateDataTooLong {
                len: private_data.len(),
                max,
            });
        }
        self.transmit = Some(build_frame(
            MpaFrameKind::Reply,
            (self.config.markers_rx, plan.crc, false),
            plan.revision,
            plan.v2,
            private_data,
        ));
        let request = self
            .request
            .as_ref()
            .expect("request parsed before decision");
        let (ird, ord) = match plan.v2 {
            Some(p) => (p.ird, p.ord),
            None => (self.config.ird, self.config.ord),
        };
        let negotiated = Negotiated {
            revision: plan.revision,
            crc: plan.crc,
            markers_tx: plan.markers_tx,
            markers_rx: self.config.markers_rx,
            enhanced: plan.v2.is_some(),
            ird,
            ord,
            p2p: plan.rtr.is_some(),
            rtr: plan.rtr,
            peer_params: request.params,
            peer_private_data: request.private_data.clone(),
            initiator_sends_rtr: plan.rtr.is_some(),
            responder_expects_rtr: plan.rtr.is_some(),
        };
        self.finish(Ok(negotiated));
        Ok(())
    }

    /// Rejects: queues a Reply with R=1 and `private_data`; the outcome is then
    /// [`StartupError::LocallyRejected`]. The driver sends the Reply and closes.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), UsageError> {
        let ResponderState::AwaitingDecision(plan) = self.state else {
            return Err(UsageError::NotAwaitingDecision);
        };
        let max = self.config.ulp_private_data_limit(plan.v2.is_some());
        if private_data.len() > max {
            return Err(UsageError::PrivateDataTooLong {
                len: private_data.len(),
                max,
            });
        }
        let request_crc = self.request.as_ref().is_some_and(|r| r.crc);
        self.send_reject(plan.revision, request_crc, plan.v2.is_some(), private_data);
        self.finish(Err(StartupError::LocallyRejected));
        Ok(())
    }

    /// The outcome, once: [`Negotiated`] after accept (the Reply is then ready to send), or
    /// why not (a reject Reply may be ready to send first).
    pub fn poll_outcome(&mut self) -> Option<Result<Negotiated, StartupError>> {
        self.outcome.take()
    }

    /// Whether the exchange is over (the outcome may already have been taken).
    pub fn is_finished(&self) -> bool {
        self.state == ResponderState::Done
    }

    fn finish(&mut self, result: Result<Negotiated, StartupError>) {
        self.state = ResponderState::Done;
        self.deadline = None;
        self.outcome = Some(result);
    }

    /// A Reply with R=1: M=0, C as given, IRD/ORD words of zero when `enhanced` (siw).
    fn send_reject(&mut self, revision: u8, crc: bool, enhanced: bool, private_data: &[u8]) {
        let v2 = enhanced.then(MpaV2Params::default);
        self.transmit = Some(build_frame(
            MpaFrameKind::Reply,
            (false, crc, true),
            revision,
            v2,
            private_data,
        ));
    }

    /// Rejects on a negotiation failure, without asking the ULP.
    fn refuse(&mut self, revision: u8, crc: bool, enhanced: bool, error: StartupError) {
        self.send_reject(revision, crc, enhanced, &[]);
        self.finish(Err(error));
    }

    fn process_request(&mut self) {
        let req = match self.reader.frame() {
            Ok(req) => req,
            Err(e) => return self.finish(Err(e)),
        };
        let cfg = &self.config;
        if req.revision == 0 || req.revision > 2 {
            let (ours, revision) = (cfg.revision, req.revision);
            self.send_reject(ours, false, false, &[]);
            return self.finish(Err(StartupError::UnsupportedRevision { revision }));
        }
        let revision = req.revision.min(cfg.revision);
        let enhanced = revision == 2 && req.enhanced;
        let params = if enhanced { req.v2_params() } else { None };
        let request = PeerRequest {
            revision: req.revision,
            markers: req.markers,
            crc: req.crc,
            enhanced: req.enhanced,
            reserved: req.reserved,
            params,
            private_data: if enhanced {
                req.ulp_private_data().to_vec()
            } else {
                req.private_data.to_vec()
            },
        };
        let markers = req.markers;
        let crc_asked = req.crc;
        self.request = Some(request);

        // Same order as siw_proc_mpareq: IRD/ORD words, markers, CRC; then RTR.
        let (want_crc, crc_strict) = (cfg.want_crc, cfg.crc_strict);
        if enhanced && params.is_none() {
            return self.refuse(revision, crc_asked, true, StartupError::InvalidFrame);
        }
        if markers && !cfg.allow_markers_tx {
            return self.refuse(
                revision,
                crc_asked,
                enhanced,
                StartupError::MarkersUnsupported,
            );
        }
        if crc_asked && !want_crc && crc_strict {
            // siw clears C in this reject.
            return self.refuse(
                revision,
                false,
                enhanced,
                StartupError::CrcRequiredButRefused,
            );
        }
        let mut rtr = None;
        let v2 = match params {
            Some(p) => {
                let mut reply = MpaV2Params {
                    ird: p.ord.min(cfg.ird),
                    ord: p.ird.min(cfg.ord),
                    ..MpaV2Params::default()
                };
                if p.p2p {
                    let Some(kind) = RtrKinds::from_params(&p).intersect(cfg.rtr).preferred()
                    else {
                        return self.refuse(revision, crc_asked, true, StartupError::NoMatchingRtr);
                    };
                    let bits = RtrKinds::only(kind);
                    reply.p2p = true;
                    reply.write_rtr = bits.write;
                    reply.read_rtr = bits.read;
                    reply.send_rtr = bits.send;
                    rtr = Some(kind);
                }
                Some(reply)
            }
            None => None,
        };
        self.state = ResponderState::AwaitingDecision(ReplyPlan {
            revision,
            crc: crc_asked || want_crc,
            markers_tx: markers,
            v2,
            rtr,
        });
        if self.auto_accept {
            let private_data = self.config.private_data.clone();
            self.accept(&private_data)
                .expect("configured private data was validated");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::mpa::{MPA_KEY_REP, MPA_KEY_REQ};

    const T0: Duration = Duration::ZERO;

    fn pair(
        ini_cfg: MpaConfig,
        resp_cfg: MpaConfig,
    ) -> (
        Result<Negotiated, StartupError>,
        Result<Negotiated, StartupError>,
    ) {
        let mut ini = Initiator::new(ini_cfg, T0).unwrap();
        let mut resp = Responder::new_auto_accept(resp_cfg, T0).unwrap();
        let req = ini.poll_transmit().unwrap();
        assert_eq!(resp.handle_input(&req, T0), req.len());
        let r = resp.poll_outcome().unwrap();
        let rep = resp.poll_transmit().unwrap();
        assert_eq!(ini.handle_input(&rep, T0), rep.len());
        (ini.poll_outcome().unwrap(), r)
    }

    #[test]
    fn reader_fails_at_first_wrong_key_byte() {
        let mut r = FrameReader::new(MpaFrameKind::Request);
        let (used, status) = r.push(b"MPA IX");
        assert_eq!(used, 6);
        assert!(matches!(status, ReadStatus::Failed(StartupError::BadKey)));
    }

    #[test]
    fn reader_stops_at_frame_end() {
        let mut frame = MPA_KEY_REQ.to_vec();
        frame.extend_from_slice(&[0x10, 2, 0, 4, 0, 1, 0, 1, 9, 9, 9]);
        let mut r = FrameReader::new(MpaFrameKind::Request);
        let (used, status) = r.push(&frame);
        assert_eq!(used, 24);
        assert!(matches!(status, ReadStatus::Complete));
    }

    #[test]
    fn reader_rejects_long_private_data_from_the_header() {
        let mut frame = MPA_KEY_REP.to_vec();
        frame.extend_from_slice(&[0, 1, 0x02, 0x01]); // 513
        let mut r = FrameReader::new(MpaFrameKind::Reply);
        let (used, status) = r.push(&frame);
        assert_eq!(used, 20);
        assert!(matches!(
            status,
            ReadStatus::Failed(StartupError::InvalidFrame)
        ));
    }

    #[test]
    fn default_pair_negotiates_siw_defaults() {
        let (i, r) = pair(MpaConfig::siw_compat(), MpaConfig::siw_compat());
        let (i, r) = (i.unwrap(), r.unwrap());
        assert_eq!((i.revision, i.crc, i.enhanced), (2, false, true));
        assert_eq!((i.ird, i.ord, r.ird, r.ord), (128, 128, 128, 128));
        assert_eq!(i.rtr, None);
        assert!(!r.responder_expects_rtr);
    }

    #[test]
    fn usage_errors() {
        let mut c = MpaConfig::siw_compat();
        c.revision = 3;
        assert_eq!(c.validate(), Err(UsageError::Revision(3)));
        let mut c = MpaConfig::siw_compat();
        c.revision = 1;
        c.p2p = true;
        assert_eq!(c.validate(), Err(UsageError::P2pNeedsRevision2));
        let mut c = MpaConfig::siw_compat();
        c.p2p = true;
        c.rtr = RtrKinds::NONE;
        assert_eq!(c.validate(), Err(UsageError::P2pWithoutRtr));
        let mut c = MpaConfig::siw_compat();
        c.ird = 0x4000;
        assert_eq!(c.validate(), Err(UsageError::IrdOrdTooLarge(0x4000)));
        let mut c = MpaConfig::siw_compat();
        c.private_data = vec![0; 253];
        assert_eq!(
            c.validate(),
            Err(UsageError::PrivateDataTooLong { len: 253, max: 252 })
        );
        c.max_tx_private_data = 512;
        assert_eq!(c.validate(), Ok(()));
        c.max_tx_private_data = 513;
        assert!(c.validate().is_err());
        let mut resp = Responder::new(MpaConfig::siw_compat(), T0).unwrap();
        assert_eq!(resp.accept(&[]), Err(UsageError::NotAwaitingDecision));
        assert_eq!(resp.reject(&[]), Err(UsageError::NotAwaitingDecision));
    }

    #[test]
    fn proto_error_mapping() {
        assert_eq!(
            StartupError::BadKey.proto_error(),
            Some(ProtoError::InvalidRequestReply)
        );
        assert_eq!(
            StartupError::InvalidFrame.proto_error(),
            Some(ProtoError::InvalidRequestReply)
        );
        assert_eq!(
            StartupError::NoMatchingRtr.proto_error(),
            Some(ProtoError::NoMatchingRtr)
        );
        assert_eq!(
            StartupError::InsufficientIrd {
                peer_ord: 2,
                our_ird: 1
            }
            .proto_error(),
            Some(ProtoError::InsufficientIrd)
        );
        assert_eq!(StartupError::Timeout.proto_error(), None);
        assert_eq!(
            StartupError::Rejected {
                private_data: vec![]
            }
            .proto_error(),
            None
        );
    }

    #[test]
    fn rtr_preference() {
        assert_eq!(RtrKinds::ALL.preferred(), Some(RtrKind::Write));
        let rs = RtrKinds {
            write: false,
            read: true,
            send: true,
        };
        assert_eq!(rs.preferred(), Some(RtrKind::Read));
        assert_eq!(RtrKinds::NONE.preferred(), None);
        assert!(
            RtrKinds::WRITE_READ
                .intersect(RtrKinds::only(RtrKind::Send))
                .is_empty()
        );
    }
}
