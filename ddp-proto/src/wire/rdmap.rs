//! RDMAP headers (RFC 5040 §4): the opcode, the RDMAP control byte, the Read Request body,
//! the Terminate header, and [`RdmapHeader`], the whole ULPDU header of any RDMAP message.
//!
//! # What is on the wire
//!
//! RDMAP lives inside DDP's ULP-reserved bits (RFC 5040 §4.1–§4.3): byte 1 of every DDP
//! header is the RDMAP control byte (RV(2) | rsvd(2) | opcode(4)); bytes 2..6 of an untagged
//! header carry the Invalidate STag of a Send with Invalidate (reserved for other untagged
//! messages). Two messages add a header after the DDP header:
//!
//! ```text
//!  Read Request (RFC 5040 §4.4), 28 bytes after the 18-byte untagged header, QN 1:
//!    0..4 Data Sink STag | 4..12 Data Sink TO | 12..16 RDMA Read Message Size
//!    16..20 Data Source STag | 20..28 Data Source TO
//!
//!  Terminate (RFC 5040 §4.8), after the 18-byte untagged header, QN 2:
//!    0..4  Layer(4) EType(4) Error Code(8) M D R Reserved(13)
//!    4..6  DDP Segment Length                (present if M or D is set, see below)
//!    ...   Terminated DDP Header, 14 or 18   (present if D is set)
//!    ...   Terminated RDMA Header, 28        (present if R is set: a Read Request header)
//! ```
//!
//! | opcode | message | DDP model | QN |
//! |---|---|---|---|
//! | 0 | RDMA Write | tagged | – |
//! | 1 | RDMA Read Request | untagged | 1 |
//! | 2 | RDMA Read Response | tagged | – |
//! | 3 | Send | untagged | 0 |
//! | 4 | Send with Invalidate | untagged | 0 |
//! | 5 | Send with Solicited Event | untagged | 0 |
//! | 6 | Send with SE and Invalidate | untagged | 0 |
//! | 7 | Terminate | untagged | 2 |
//!
//! MSNs start at 1 on each queue ([`FIRST_MSN`]).
//!
//! # Choices where the RFC is loose
//!
//! * **Where the Terminate's optional fields sit.** RFC 5040 §4.8 names the M bit "DDP
//!   Segment Length valid", D "DDP header included", R "RDMAP header included". Hardware
//!   (nes, i40iw, irdma) and siw always set M together with D and copy
//!   `segment length | DDP header | Read Request header` contiguously; Wireshark reads the
//!   length field whenever D is set. We read and write the 2-byte length field when M *or* D
//!   is set, which agrees with all of them. The length of the copied DDP header follows the T
//!   bit *of the copy* (14 or 18 bytes), not the error type (Wireshark guesses from EType).
//!   What the length field holds differs between peers (nes/irdma: the MPA ULPDU length; siw:
//!   the ULPDU length minus the header), so it is kept as a raw `u16`.
//! * **Reserved bits** (DDP control, RDMAP control, the Terminate word, the 32 ULP bits of a
//!   plain Send) are "not checked on receive" (RFC 5041 §5.1, RFC 5040 §4.2): they are kept,
//!   never judged, and re-emitted as they came.
//!
//! # What this module refuses to do
//!
//! It never decides that a header is an error. Unknown opcodes, an opcode on the wrong buffer
//! model (a tagged Send), versions other than 1, unexpected queue numbers, Read Requests with
//! L clear: all parse into an [`RdmapHeader`] that keeps every bit, and
//! [`RdmapHeader::message`] says [`RdmapMessage::Unexpected`] where the opcode and the buffer
//! model do not fit. The `ddp`/`rdmap` state machines check versions, queue numbers, MSN/MO
//! and STags and choose the Terminate (through [`crate::error::ProtoError`]). The only parse
//! error is [`WireError::Truncated`]: the prefix is shorter than the header its own fields
//! announce (for the deframer that means "wait for more bytes").

use core::fmt;

use crate::error::{TermCode, TermLayer};
pub use crate::wire::ddp::WireError;
use crate::wire::ddp::{
    DdpBuffer, DdpPacket, DdpRepr, STag, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN, header_len_for,
};

/// The RDMAP version this implementation speaks (RFC 5040 §4.2: RV = 01b).
pub const RDMAP_VERSION: u8 = 1;
/// Untagged queue of Send, Send with Invalidate, Send with SE (and Invalidate) (RFC 5040 §5.2).
pub const QN_SEND: u32 = 0;
/// Untagged queue of RDMA Read Requests (RFC 5040 §5.2).
pub const QN_READ_REQUEST: u32 = 1;
/// Untagged queue of Terminate messages (RFC 5040 §5.2).
pub const QN_TERMINATE: u32 = 2;
/// The MSN of the first message on each untagged queue (RFC 5041 §5.3).
pub const FIRST_MSN: u32 = 1;
/// Length of the Read Request header that follows the untagged DDP header (RFC 5040 §4.4).
pub const READ_REQUEST_LEN: usize = 28;
/// Length of the Terminate Control word plus reserved bits (RFC 5040 §4.8).
pub const TERMINATE_CONTROL_LEN: usize = 4;
/// Length of the optional DDP Segment Length field of a Terminate (RFC 5040 §4.8).
pub const TERMINATE_SEGMENT_LENGTH_LEN: usize = 2;

/// RDMAP opcode (RFC 5040 §4.2, 4 bits). Unknown values are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// RDMA Write (tagged).
    Write,
    /// RDMA Read Request (untagged, QN 1).
    ReadRequest,
    /// RDMA Read Response (tagged).
    ReadResponse,
    /// Send (untagged, QN 0).
    Send,
    /// Send with Invalidate (untagged, QN 0).
    SendInvalidate,
    /// Send with Solicited Event (untagged, QN 0).
    SendSe,
    /// Send with Solicited Event and Invalidate (untagged, QN 0).
    SendSeInvalidate,
    /// Terminate (untagged, QN 2).
    Terminate,
    /// Any other 4-bit value (8..=15; RFC 7306 atomics among them), kept as is.
    Unknown(u8),
}

impl Opcode {
    /// From the 4-bit wire value (higher bits ignored).
    pub const fn from_raw(v: u8) -> Opcode {
        match v & 0x0f {
            0 => Opcode::Write,
            1 => Opcode::ReadRequest,
            2 => Opcode::ReadResponse,
            3 => Opcode::Send,
            4 => Opcode::SendInvalidate,
            5 => Opcode::SendSe,
            6 => Opcode::SendSeInvalidate,
            7 => Opcode::Terminate,
            v => Opcode::Unknown(v),
        }
    }

    /// The 4-bit wire value.
    pub const fn to_raw(self) -> u8 {
        match self {
            Opcode::Write => 0,
            Opcode::ReadRequest => 1,
            Opcode::ReadResponse => 2,
            Opcode::Send => 3,
            Opcode::SendInvalidate => 4,
            Opcode::SendSe => 5,
            Opcode::SendSeInvalidate => 6,
            Opcode::Terminate => 7,
            Opcode::Unknown(v) => v & 0x0f,
        }
    }

    /// Whether the message uses the tagged buffer model; `None` for an unknown opcode.
    pub const fn is_tagged(self) -> Option<bool> {
        match self {
            Opcode::Write | Opcode::ReadResponse => Some(true),
            Opcode::Unknown(_) => None,
            _ => Some(false),
        }
    }

    /// The untagged queue the message travels on; `None` for tagged or unknown opcodes.
    pub const fn queue_number(self) -> Option<u32> {
        match self {
            Opcode::Send | Opcode::SendInvalidate | Opcode::SendSe | Opcode::SendSeInvalidate => {
                Some(QN_SEND)
            }
            Opcode::ReadRequest => Some(QN_READ_REQUEST),
            Opcode::Terminate => Some(QN_TERMINATE),
            Opcode::Write | Opcode::ReadResponse | Opcode::Unknown(_) => None,
        }
    }

    /// One of the four Send variants.
    pub const fn is_send(self) -> bool {
        matches!(
            self,
            Opcode::Send | Opcode::SendInvalidate | Opcode::SendSe | Opcode::SendSeInvalidate
        )
    }

    /// A Send that carries an Invalidate STag.
    pub const fn has_inval_stag(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate)
    }

    /// A Send with Solicited Event.
    pub const fn is_solicited(self) -> bool {
        matches!(self, Opcode::SendSe | Opcode::SendSeInvalidate)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Opcode::Write => f.write_str("RDMA Write"),
            Opcode::ReadRequest => f.write_str("RDMA Read Request"),
            Opcode::ReadResponse => f.write_str("RDMA Read Response"),
            Opcode::Send => f.write_str("Send"),
            Opcode::SendInvalidate => f.write_str("Send with Invalidate"),
            Opcode::SendSe => f.write_str("Send with SE"),
            Opcode::SendSeInvalidate => f.write_str("Send with SE and Invalidate"),
            Opcode::Terminate => f.write_str("Terminate"),
            Opcode::Unknown(v) => write!(f, "unknown opcode {v:#x}"),
        }
    }
}

/// The RDMAP control byte (RFC 5040 §4.2), the reserved bits kept.
///
/// ```text
///  7 6   5 4    3 2 1 0
///  RV    Rsvd   OpCode
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdmapControl {
    /// RV: RDMAP version (2 bits, 1 for RFC 5040).
    pub version: u8,
    /// The 2 reserved bits (zero on transmit, not checked on receive).
    pub reserved: u8,
    /// The opcode.
    pub opcode: Opcode,
}

impl RdmapControl {
    /// Version 1, no reserved bits.
    pub const fn new(opcode: Opcode) -> RdmapControl {
        RdmapControl {
            version: RDMAP_VERSION,
            reserved: 0,
            opcode,
        }
    }

    /// Decodes the byte.
    pub const fn from_byte(b: u8) -> RdmapControl {
        RdmapControl {
            version: b >> 6,
            reserved: (b >> 4) & 0x03,
            opcode: Opcode::from_raw(b & 0x0f),
        }
    }

    /// Encodes the byte; out-of-range bits are masked off.
    pub const fn to_byte(self) -> u8 {
        ((self.version & 0x03) << 6) | ((self.reserved & 0x03) << 4) | self.opcode.to_raw()
    }
}

fn be16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

fn be64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// Byte offsets inside the RDMAP headers that follow the DDP header.
mod field {
    /// Read Request: Data Sink STag.
    pub const RR_SINK_STAG: usize = 0;
    /// Read Request: Data Sink Tagged Offset.
    pub const RR_SINK_TO: usize = 4;
    /// Read Request: RDMA Read Message Size.
    pub const RR_READ_SIZE: usize = 12;
    /// Read Request: Data Source STag.
    pub const RR_SOURCE_STAG: usize = 16;
    /// Read Request: Data Source Tagged Offset.
    pub const RR_SOURCE_TO: usize = 20;

    /// Terminate: the Terminate Control word (layer, etype, ecode, M/D/R, reserved).
    pub const TERM_CTRL: usize = 0;
    /// Terminate: the optional DDP Segment Length.
    pub const TERM_SEGMENT_LENGTH: usize = 4;
}

/// The Read Request header (RFC 5040 §4.4): the 28 bytes after the untagged DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadRequestBody {
    /// Data Sink STag: where the Read Responses are placed (the requester's buffer).
    pub sink_stag: STag,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size in bytes.
    pub read_size: u32,
    /// Data Source STag: what is read (the responder's buffer).
    pub source_stag: STag,
    /// Data Source Tagged Offset.
    pub source_to: u64,
}

impl ReadRequestBody {
    /// Reads the 28 bytes at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<ReadRequestBody, WireError> {
        if b.len() < READ_REQUEST_LEN {
            return Err(WireError::Truncated);
        }
        Ok(ReadRequestBody {
            sink_stag: STag(be32_at(b, field::RR_SINK_STAG)),
            sink_to: be64_at(b, field::RR_SINK_TO),
            read_size: be32_at(b, field::RR_READ_SIZE),
            source_stag: STag(be32_at(b, field::RR_SOURCE_STAG)),
            source_to: be64_at(b, field::RR_SOURCE_TO),
        })
    }

    /// Always 28.
    pub const fn buffer_len(&self) -> usize {
        READ_REQUEST_LEN
    }

    /// Writes the 28 bytes at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize, WireError> {
        if b.len() < READ_REQUEST_LEN {
            return Err(WireError::BufferTooSmall);
        }
        let at = |o: usize, n: usize| o..o + n;
        b[at(field::RR_SINK_STAG, 4)].copy_from_slice(&self.sink_stag.0.to_be_bytes());
        b[at(field::RR_SINK_TO, 8)].copy_from_slice(&self.sink_to.to_be_bytes());
        b[at(field::RR_READ_SIZE, 4)].copy_from_slice(&self.read_size.to_be_bytes());
        b[at(field::RR_SOURCE_STAG, 4)].copy_from_slice(&self.source_stag.0.to_be_bytes());
        b[at(field::RR_SOURCE_TO, 8)].copy_from_slice(&self.source_to.to_be_bytes());
        Ok(READ_REQUEST_LEN)
    }
}

/// The DDP header of the segment a Terminate reports (RFC 5040 §4.8 "Terminated DDP
/// Header"), byte for byte; its length follows its own T bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminatedDdpHeader {
    /// A tagged header (T set), 14 bytes.
    Tagged([u8; TAGGED_HEADER_LEN]),
    /// An untagged header (T clear), 18 bytes.
    Untagged([u8; UNTAGGED_HEADER_LEN]),
}

impl TerminatedDdpHeader {
    /// Copies the DDP header at the start of `ulpdu` (14 or 18 bytes, by its T bit) — both
    /// for parsing a Terminate and for building one from the offending segment.
    pub fn from_ulpdu(ulpdu: &[u8]) -> Result<TerminatedDdpHeader, WireError> {
        let first = *ulpdu.first().ok_or(WireError::Truncated)?;
        let len = header_len_for(first);
        let b = ulpdu.get(..len).ok_or(WireError::Truncated)?;
        let mut out = if len == TAGGED_HEADER_LEN {
            TerminatedDdpHeader::Tagged([0; TAGGED_HEADER_LEN])
        } else {
            TerminatedDdpHeader::Untagged([0; UNTAGGED_HEADER_LEN])
        };
        out.as_bytes_mut().copy_from_slice(b);
        Ok(out)
    }

    /// The copied bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            TerminatedDdpHeader::Tagged(b) => b,
            TerminatedDdpHeader::Untagged(b) => b,
        }
    }

    fn as_bytes_mut(&mut self) -> &mut [u8] {
        match self {
            TerminatedDdpHeader::Tagged(b) => b,
            TerminatedDdpHeader::Untagged(b) => b,
        }
    }

    /// The copied header, decoded (the buffer model follows the variant).
    pub fn repr(&self) -> DdpRepr {
        let p = DdpPacket::new_unchecked(self.as_bytes());
        let c = p.control();
        let buffer = match self {
            TerminatedDdpHeader::Tagged(_) => DdpBuffer::Tagged {
                stag: p.stag(),
                to: p.to(),
            },
            TerminatedDdpHeader::Untagged(_) => DdpBuffer::Untagged {
                qn: p.qn(),
                msn: p.msn(),
                mo: p.mo(),
                ulp_rsvd: p.ulp_rsvd(),
            },
        };
        DdpRepr {
            last: c.last,
            ddp_version: c.version,
            reserved: c.reserved,
            ulp_ctrl: p.ulp_ctrl(),
            buffer,
        }
    }

    /// Whether the T bit of the copy agrees with the variant (always true for a value from
    /// [`TerminatedDdpHeader::from_ulpdu`]; a hand-built value might not, and would not parse
    /// back, so `emit` refuses it).
    pub fn is_consistent(&self) -> bool {
        header_len_for(self.as_bytes()[0]) == self.buffer_len()
    }

    /// The length of the copy: 14 or 18.
    pub fn buffer_len(&self) -> usize {
        self.as_bytes().len()
    }
}

/// The Terminate header (RFC 5040 §4.8): the bytes after the untagged DDP header of a
/// Terminate message.
///
/// The header control bits are derived from the fields: D is `ddp_header.is_some()`, R is
/// `rdmap_header.is_some()`, and M is `segment_length_valid`. The DDP Segment Length field is
/// on the wire iff M or D is set (see the module docs); when it is absent, `parse` gives 0 and
/// `emit` ignores `ddp_segment_length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminateHeader {
    /// Layer, error type, error code (see [`crate::error::ProtoError::term_code`]).
    pub code: TermCode,
    /// M: the DDP Segment Length field is valid.
    pub segment_length_valid: bool,
    /// DDP Segment Length of the segment that caused the error, as the peer wrote it.
    pub ddp_segment_length: u16,
    /// D: the DDP header of the segment that caused the error.
    pub ddp_header: Option<TerminatedDdpHeader>,
    /// R: the RDMAP header of the segment that caused the error (a Read Request header; RFC
    /// 5040 §4.8 copies it only for errors in a Read Request).
    pub rdmap_header: Option<ReadRequestBody>,
    /// The 13 reserved bits of the Terminate Control word, kept.
    pub reserved: u16,
}

impl TerminateHeader {
    const M: u32 = 0x8000;
    const D: u32 = 0x4000;
    const R: u32 = 0x2000;
    const RSVD_MASK: u32 = 0x1fff;

    /// A Terminate carrying only its code (no copies: what an LLP error or a catastrophic
    /// error sends).
    pub const fn new(code: TermCode) -> TerminateHeader {
        TerminateHeader {
            code,
            segment_length_valid: false,
            ddp_segment_length: 0,
            ddp_header: None,
            rdmap_header: None,
            reserved: 0,
        }
    }

    /// Whether the DDP Segment Length field is on the wire (M or D).
    pub const fn has_segment_length_field(&self) -> bool {
        self.segment_length_valid || self.ddp_header.is_some()
    }

    /// Reads a Terminate header at the start of `b` (the bytes after the untagged DDP
    /// header); returns it and its length.
    pub fn parse(b: &[u8]) -> Result<(TerminateHeader, usize), WireError> {
        if b.len() < TERMINATE_CONTROL_LEN {
            return Err(WireError::Truncated);
        }
        let w = be32_at(b, field::TERM_CTRL);
        let code = TermCode::new(
            TermLayer::from_raw((w >> 28) as u8),
            ((w >> 24) & 0x0f) as u8,
            ((w >> 16) & 0xff) as u8,
        );
        let (m, d, r) = (w & Self::M != 0, w & Self::D != 0, w & Self::R != 0);
        let mut at = TERMINATE_CONTROL_LEN;
        let mut ddp_segment_length = 0;
        if m || d {
            if b.len() < at + TERMINATE_SEGMENT_LENGTH_LEN {
                return Err(WireError::Truncated);
            }
            ddp_segment_length = be16_at(b, field::TERM_SEGMENT_LENGTH);
            at += TERMINATE_SEGMENT_LENGTH_LEN;
        }
        let ddp_header = if d {
            let h = TerminatedDdpHeader::from_ulpdu(&b[at..])?;
            at += h.buffer_len();
            Some(h)
        } else {
            None
        };
        let rdmap_header = if r {
            let h = ReadRequestBody::parse(&b[at..])?;
            at += READ_REQUEST_LEN;
            Some(h)
        } else {
            None
        };
        Ok((
            TerminateHeader {
                code,
                segment_length_valid: m,
                ddp_segment_length,
                ddp_header,
                rdmap_header,
                reserved: (w & Self::RSVD_MASK) as u16,
            },
            at,
        ))
    }

    /// How many bytes `parse` needs, judged from a prefix of the Terminate header; `Truncated`
    /// if the prefix is too short to tell.
    pub fn required_len(b: &[u8]) -> Result<usize, WireError> {
        if b.len() < TERMINATE_CONTROL_LEN {
            return Err(WireError::Truncated);
        }
        let w = be32_at(b, field::TERM_CTRL);
        let mut len = TERMINATE_CONTROL_LEN;
        if w & (Self::M | Self::D) != 0 {
            len += TERMINATE_SEGMENT_LENGTH_LEN;
        }
        if w & Self::D != 0 {
            let first = *b.get(len).ok_or(WireError::Truncated)?;
            len += header_len_for(first);
        }
        if w & Self::R != 0 {
            len += READ_REQUEST_LEN;
        }
        Ok(len)
    }

    /// The Terminate Control word this header emits.
    pub fn control_word(&self) -> u32 {
        (u32::from(self.code.layer.to_raw() & 0x0f) << 28)
            | (u32::from(self.code.etype & 0x0f) << 24)
            | (u32::from(self.code.ecode) << 16)
            | if self.segment_length_valid {
                Self::M
            } else {
                0
            }
            | if self.ddp_header.is_some() {
                Self::D
            } else {
                0
            }
            | if self.rdmap_header.is_some() {
                Self::R
            } else {
                0
            }
            | (u32::from(self.reserved) & Self::RSVD_MASK)
    }

    /// The emitted length.
    pub fn buffer_len(&self) -> usize {
        TERMINATE_CONTROL_LEN
            + if self.has_segment_length_field() {
                TERMINATE_SEGMENT_LENGTH_LEN
            } else {
                0
            }
            + self.ddp_header.map_or(0, |h| h.buffer_len())
            + if self.rdmap_header.is_some() {
                READ_REQUEST_LEN
            } else {
                0
            }
    }

    /// Writes the header at the start of `b`; returns its length. A DDP header copy whose T
    /// bit disagrees with its variant is refused with [`WireError::Inconsistent`].
    pub fn emit(&self, b: &mut [u8]) -> Result<usize, WireError> {
        if self.ddp_header.is_some_and(|h| !h.is_consistent()) {
            return Err(WireError::Inconsistent);
        }
        let len = self.buffer_len();
        if b.len() < len {
            return Err(WireError::BufferTooSmall);
        }
        b[..TERMINATE_CONTROL_LEN].copy_from_slice(&self.control_word().to_be_bytes());
        let mut at = TERMINATE_CONTROL_LEN;
        if self.has_segment_length_field() {
            b[at..at + 2].copy_from_slice(&self.ddp_segment_length.to_be_bytes());
            at += TERMINATE_SEGMENT_LENGTH_LEN;
        }
        if let Some(h) = &self.ddp_header {
            b[at..at + h.buffer_len()].copy_from_slice(h.as_bytes());
            at += h.buffer_len();
        }
        if let Some(h) = &self.rdmap_header {
            at += h.emit(&mut b[at..])?;
        }
        debug_assert_eq!(at, len);
        Ok(len)
    }
}

/// What follows the DDP header, as far as it belongs to the RDMAP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmapBody {
    /// Nothing: the ULP payload (if any) starts right after the DDP header.
    None,
    /// The 28-byte Read Request header (untagged, opcode 1).
    ReadRequest(ReadRequestBody),
    /// The Terminate header (untagged, opcode 7).
    Terminate(TerminateHeader),
}

impl RdmapBody {
    fn buffer_len(&self) -> usize {
        match self {
            RdmapBody::None => 0,
            RdmapBody::ReadRequest(b) => b.buffer_len(),
            RdmapBody::Terminate(t) => t.buffer_len(),
        }
    }
}

/// Which body a segment with this T bit and opcode carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    None,
    ReadRequest,
    Terminate,
}

fn body_kind(tagged: bool, opcode: Opcode) -> BodyKind {
    match (tagged, opcode) {
        (false, Opcode::ReadRequest) => BodyKind::ReadRequest,
        (false, Opcode::Terminate) => BodyKind::Terminate,
        _ => BodyKind::None,
    }
}

/// The whole ULPDU header of an RDMAP message: the DDP header (whose `ulp_ctrl` byte is the
/// RDMAP control byte) and, for a Read Request or Terminate, the RDMAP header after it.
///
/// Every bit of the wire header is kept, so `parse` then `emit` gives back the same bytes for
/// any input, valid or not. [`RdmapHeader::message`] is the typed view the state machine
/// matches on; [`RdmapHeader::new`] builds the canonical header of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdmapHeader {
    /// The DDP header; `ddp.ulp_ctrl` is the RDMAP control byte (see [`RdmapHeader::control`]).
    pub ddp: DdpRepr,
    /// The RDMAP header after the DDP header. Must be `ReadRequest` exactly for an untagged
    /// opcode-1 segment and `Terminate` exactly for an untagged opcode-7 segment, `None`
    /// otherwise (`emit` refuses anything else with [`WireError::Inconsistent`]).
    pub body: RdmapBody,
}

/// The meaning of an [`RdmapHeader`]: one variant per RDMAP message (RFC 5040 §4.3–§4.8).
///
/// Only the fields that carry meaning for the message are here; versions, reserved bits and
/// the queue number stay in the header (`RdmapHeader::ddp`) for the state machine to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmapMessage {
    /// RDMA Write: tagged, placed at `sink_to` in `sink_stag`.
    Write {
        /// Data Sink STag.
        sink_stag: STag,
        /// Data Sink Tagged Offset of this segment's first payload byte.
        sink_to: u64,
    },
    /// RDMA Read Request: untagged on QN 1 (single segment).
    ReadRequest {
        /// MSN on QN 1.
        msn: u32,
        /// Message offset (0 for a valid Read Request).
        mo: u32,
        /// What to read, and where to.
        body: ReadRequestBody,
    },
    /// RDMA Read Response: tagged, placed at `sink_to` in `sink_stag`.
    ReadResponse {
        /// Data Sink STag (from the Read Request).
        sink_stag: STag,
        /// Data Sink Tagged Offset of this segment's first payload byte.
        sink_to: u64,
    },
    /// Send: untagged on QN 0.
    Send {
        /// MSN on QN 0.
        msn: u32,
        /// Message offset of this segment's first payload byte.
        mo: u32,
    },
    /// Send with Invalidate: untagged on QN 0.
    SendInvalidate {
        /// MSN on QN 0.
        msn: u32,
        /// Message offset of this segment's first payload byte.
        mo: u32,
        /// The STag the receiver invalidates.
        inval_stag: STag,
    },
    /// Send with Solicited Event: untagged on QN 0.
    SendSe {
        /// MSN on QN 0.
        msn: u32,
        /// Message offset of this segment's first payload byte.
        mo: u32,
    },
    /// Send with Solicited Event and Invalidate: untagged on QN 0.
    SendSeInvalidate {
        /// MSN on QN 0.
        msn: u32,
        /// Message offset of this segment's first payload byte.
        mo: u32,
        /// The STag the receiver invalidates.
        inval_stag: STag,
    },
    /// Terminate: untagged on QN 2 (single segment).
    Terminate {
        /// MSN on QN 2.
        msn: u32,
        /// Message offset (0 for a valid Terminate).
        mo: u32,
        /// Error code and copies of the offending headers.
        term: TerminateHeader,
    },
    /// An unknown opcode, or a known one on the wrong buffer model (e.g. a tagged Send).
    /// The raw bits are in the header; RFC 5040 §7 answers with an RDMAP "unexpected opcode"
    /// Terminate, but that is the state machine's call.
    Unexpected {
        /// The opcode as received.
        opcode: Opcode,
        /// The T bit as received.
        tagged: bool,
    },
}

impl RdmapMessage {
    /// The opcode of the message.
    pub const fn opcode(&self) -> Opcode {
        match self {
            RdmapMessage::Write { .. } => Opcode::Write,
            RdmapMessage::ReadRequest { .. } => Opcode::ReadRequest,
            RdmapMessage::ReadResponse { .. } => Opcode::ReadResponse,
            RdmapMessage::Send { .. } => Opcode::Send,
            RdmapMessage::SendInvalidate { .. } => Opcode::SendInvalidate,
            RdmapMessage::SendSe { .. } => Opcode::SendSe,
            RdmapMessage::SendSeInvalidate { .. } => Opcode::SendSeInvalidate,
            RdmapMessage::Terminate { .. } => Opcode::Terminate,
            RdmapMessage::Unexpected { opcode, .. } => *opcode,
        }
    }
}

impl RdmapHeader {
    /// The canonical header of `message` (DDP and RDMAP version 1, reserved bits zero, the
    /// queue number of the opcode, the Invalidate STag in the ULP-reserved word).
    ///
    /// `last` is the DDP L bit; Read Request and Terminate are single-segment messages and
    /// should be built with `last = true`. For `Unexpected`, the header is all zeros apart
    /// from T, L and the opcode (useful for tests of the receive side).
    pub fn new(message: RdmapMessage, last: bool) -> RdmapHeader {
        let ctrl = RdmapControl::new(message.opcode()).to_byte();
        let untagged = |msn: u32, mo: u32, ulp_rsvd: u32| {
            let qn = message.opcode().queue_number().unwrap_or(0);
            DdpRepr::untagged(qn, msn, mo, last, ctrl, ulp_rsvd)
        };
        let (ddp, body) = match message {
            RdmapMessage::Write { sink_stag, sink_to }
            | RdmapMessage::ReadResponse { sink_stag, sink_to } => (
                DdpRepr::tagged(sink_stag, sink_to, last, ctrl),
                RdmapBody::None,
            ),
            RdmapMessage::ReadRequest { msn, mo, body } => {
                (untagged(msn, mo, 0), RdmapBody::ReadRequest(body))
            }
            RdmapMessage::Send { msn, mo } | RdmapMessage::SendSe { msn, mo } => {
                (untagged(msn, mo, 0), RdmapBody::None)
            }
            RdmapMessage::SendInvalidate {
                msn,
                mo,
                inval_stag,
            }
            | RdmapMessage::SendSeInvalidate {
                msn,
                mo,
                inval_stag,
            } => (untagged(msn, mo, inval_stag.0), RdmapBody::None),
            RdmapMessage::Terminate { msn, mo, term } => {
                (untagged(msn, mo, 0), RdmapBody::Terminate(term))
            }
            RdmapMessage::Unexpected { tagged, .. } => {
                let ddp = if tagged {
                    DdpRepr::tagged(STag(0), 0, last, ctrl)
                } else {
                    DdpRepr::untagged(0, 0, 0, last, ctrl, 0)
                };
                (ddp, RdmapBody::None)
            }
        };
        RdmapHeader { ddp, body }
    }

    /// Reads the ULPDU header at the start of `ulpdu_prefix` (the ULPDU, or at least its
    /// first [`RdmapHeader::required_len`] bytes); returns it and its length, after which
    /// the ULP payload starts.
    pub fn parse(ulpdu_prefix: &[u8]) -> Result<(RdmapHeader, usize), WireError> {
        let ddp = DdpRepr::parse(&DdpPacket::new_unchecked(ulpdu_prefix))?;
        let at = ddp.buffer_len();
        let opcode = RdmapControl::from_byte(ddp.ulp_ctrl).opcode;
        let (body, len) = match body_kind(ddp.is_tagged(), opcode) {
            BodyKind::None => (RdmapBody::None, 0),
            BodyKind::ReadRequest => (
                RdmapBody::ReadRequest(ReadRequestBody::parse(&ulpdu_prefix[at..])?),
                READ_REQUEST_LEN,
            ),
            BodyKind::Terminate => {
                let (t, len) = TerminateHeader::parse(&ulpdu_prefix[at..])?;
                (RdmapBody::Terminate(t), len)
            }
        };
        Ok((RdmapHeader { ddp, body }, at + len))
    }

    /// How many ULPDU bytes the whole header takes, judged from a prefix: 14 (tagged), 18
    /// (untagged), 46 (Read Request), 22 or more (Terminate). `Truncated` if the prefix is too
    /// short to tell (fewer than 2 bytes, or a Terminate cut before the field that decides).
    pub fn required_len(ulpdu_prefix: &[u8]) -> Result<usize, WireError> {
        if ulpdu_prefix.len() < 2 {
            return Err(WireError::Truncated);
        }
        let hl = header_len_for(ulpdu_prefix[0]);
        let opcode = RdmapControl::from_byte(ulpdu_prefix[1]).opcode;
        match body_kind(hl == TAGGED_HEADER_LEN, opcode) {
            BodyKind::None => Ok(hl),
            BodyKind::ReadRequest => Ok(hl + READ_REQUEST_LEN),
            BodyKind::Terminate => {
                let rest = ulpdu_prefix.get(hl..).ok_or(WireError::Truncated)?;
                Ok(hl + TerminateHeader::required_len(rest)?)
            }
        }
    }

    /// The emitted length (the payload offset).
    pub fn buffer_len(&self) -> usize {
        self.ddp.buffer_len() + self.body.buffer_len()
    }

    /// Writes the header at the start of `buf`; returns its length. The payload is not
    /// touched.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let expect = body_kind(self.ddp.is_tagged(), self.opcode());
        let have = match self.body {
            RdmapBody::None => BodyKind::None,
            RdmapBody::ReadRequest(_) => BodyKind::ReadRequest,
            RdmapBody::Terminate(_) => BodyKind::Terminate,
        };
        if expect != have {
            return Err(WireError::Inconsistent);
        }
        if buf.len() < self.buffer_len() {
            return Err(WireError::BufferTooSmall);
        }
        let at = self.ddp.emit_bytes(buf)?;
        let n = match &self.body {
            RdmapBody::None => 0,
            RdmapBody::ReadRequest(b) => b.emit(&mut buf[at..])?,
            RdmapBody::Terminate(t) => t.emit(&mut buf[at..])?,
        };
        Ok(at + n)
    }

    /// The RDMAP control byte, decoded.
    pub const fn control(&self) -> RdmapControl {
        RdmapControl::from_byte(self.ddp.ulp_ctrl)
    }

    /// The opcode.
    pub const fn opcode(&self) -> Opcode {
        self.control().opcode
    }

    /// Whether the DDP T bit is set.
    pub const fn is_tagged(&self) -> bool {
        self.ddp.is_tagged()
    }

    /// The DDP L bit.
    pub const fn last(&self) -> bool {
        self.ddp.last
    }

    /// The typed meaning of the header (see [`RdmapMessage`]).
    pub fn message(&self) -> RdmapMessage {
        let opcode = self.opcode();
        let unexpected = RdmapMessage::Unexpected {
            opcode,
            tagged: self.is_tagged(),
        };
        match (self.ddp.buffer, &self.body) {
            (DdpBuffer::Tagged { stag, to }, RdmapBody::None) => match opcode {
                Opcode::Write => RdmapMessage::Write {
                    sink_stag: stag,
                    sink_to: to,
                },
                Opcode::ReadResponse => RdmapMessage::ReadResponse {
                    sink_stag: stag,
                    sink_to: to,
                },
                _ => unexpected,
            },
            (
                DdpBuffer::Untagged {
                    msn, mo, ulp_rsvd, ..
                },
                body,
            ) => match (opcode, body) {
                (Opcode::ReadRequest, RdmapBody::ReadRequest(b)) => {
                    RdmapMessage::ReadRequest { msn, mo, body: *b }
                }
                (Opcode::Terminate, RdmapBody::Terminate(t)) => {
                    RdmapMessage::Terminate { msn, mo, term: *t }
                }
                (Opcode::Send, RdmapBody::None) => RdmapMessage::Send { msn, mo },
                (Opcode::SendSe, RdmapBody::None) => RdmapMessage::SendSe { msn, mo },
                (Opcode::SendInvalidate, RdmapBody::None) => RdmapMessage::SendInvalidate {
                    msn,
                    mo,
                    inval_stag: STag(ulp_rsvd),
                },
                (Opcode::SendSeInvalidate, RdmapBody::None) => RdmapMessage::SendSeInvalidate {
                    msn,
                    mo,
                    inval_stag: STag(ulp_rsvd),
                },
                _ => unexpected,
            },
            _ => unexpected,
        }
    }
}

impl fmt::Display for RdmapHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.opcode(), self.ddp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ProtoError;

    #[test]
    fn opcodes_roundtrip_and_keep_unknown_values() {
        for v in 0..16u8 {
            assert_eq!(Opcode::from_raw(v).to_raw(), v);
        }
        assert_eq!(Opcode::from_raw(0xa), Opcode::Unknown(0xa));
        assert_eq!(Opcode::Send.queue_number(), Some(QN_SEND));
        assert_eq!(Opcode::SendSeInvalidate.queue_number(), Some(0));
        assert_eq!(Opcode::ReadRequest.queue_number(), Some(1));
        assert_eq!(Opcode::Terminate.queue_number(), Some(2));
        assert_eq!(Opcode::Write.queue_number(), None);
        assert_eq!(Opcode::ReadResponse.is_tagged(), Some(true));
        assert_eq!(Opcode::Send.is_tagged(), Some(false));
        assert_eq!(Opcode::Unknown(9).is_tagged(), None);
        assert!(Opcode::SendSeInvalidate.is_solicited() && Opcode::SendSeInvalidate.is_send());
        assert!(Opcode::SendInvalidate.has_inval_stag() && !Opcode::SendSe.has_inval_stag());
    }

    #[test]
    fn control_byte_layout() {
        assert_eq!(
            RdmapControl::from_byte(0x43),
            RdmapControl {
                version: 1,
                reserved: 0,
                opcode: Opcode::Send
            }
        );
        assert_eq!(RdmapControl::new(Opcode::Terminate).to_byte(), 0x47);
        for b in 0..=255u8 {
            assert_eq!(RdmapControl::from_byte(b).to_byte(), b);
        }
    }

    #[test]
    fn terminate_without_copies_is_22_bytes() {
        // What siw sends for a catastrophic error: untagged header on QN 2, MSN 1, MO 0, and
        // the control word only.
        let term = TerminateHeader::new(ProtoError::RdmapUnspecified.term_code());
        let h = RdmapHeader::new(
            RdmapMessage::Terminate {
                msn: FIRST_MSN,
                mo: 0,
                term,
            },
            true,
        );
        let mut b = [0u8; 64];
        assert_eq!(h.emit(&mut b), Ok(22));
        assert_eq!(
            b[..22],
            [
                0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, // DDP
                0x02, 0xff, 0x00, 0x00 // layer 0, etype 2, ecode 0xff, no M/D/R
            ]
        );
        assert_eq!(RdmapHeader::required_len(&b[..22]), Ok(22));
        assert_eq!(RdmapHeader::parse(&b[..22]), Ok((h, 22)));
    }

    #[test]
    fn terminate_with_ddp_and_read_request_copies() {
        // A Read Request that failed with "access rights": M, D and R set (what siw does for
        // a remote protection error), segment length 46.
        let rr = ReadRequestBody {
            sink_stag: STag(0xa5a0_6c00),
            sink_to: 0x0000_55a3_3952_0ab0,
            read_size: 64,
            source_stag: STag(0xd151_1600),
            source_to: 0x0000_5573_db36_de60,
        };
        let offending = RdmapHeader::new(
            RdmapMessage::ReadRequest {
                msn: 1,
                mo: 0,
                body: rr,
            },
            true,
        );
        let mut seg = [0u8; 46];
        offending.emit(&mut seg).unwrap();
        let term = TerminateHeader {
            code: ProtoError::RdmapAccessRights.term_code(),
            segment_length_valid: true,
            ddp_segment_length: 46,
            ddp_header: Some(TerminatedDdpHeader::from_ulpdu(&seg).unwrap()),
            rdmap_header: Some(rr),
            reserved: 0,
        };
        assert_eq!(term.buffer_len(), 4 + 2 + 18 + 28);
        let h = RdmapHeader::new(
            RdmapMessage::Terminate {
                msn: 1,
                mo: 0,
                term,
            },
            true,
        );
        let mut b = [0u8; 100];
        let n = h.emit(&mut b).unwrap();
        assert_eq!(n, 18 + 52);
        // Terminate Control: layer 0 | etype 1, ecode 2, M|D|R = 0xe0.
        assert_eq!(b[18..24], [0x01, 0x02, 0xe0, 0x00, 0x00, 46]);
        assert_eq!(b[24..42], seg[..18]);
        assert_eq!(b[42..70], seg[18..46]);
        assert_eq!(RdmapHeader::required_len(&b[..25]), Ok(70));
        assert_eq!(
            RdmapHeader::required_len(&b[..24]),
            Err(WireError::Truncated)
        );
        assert_eq!(RdmapHeader::parse(&b[..69]), Err(WireError::Truncated));
        let (back, len) = RdmapHeader::parse(&b[..n]).unwrap();
        assert_eq!((back, len), (h, n));
        let RdmapMessage::Terminate { term: t, .. } = back.message() else {
            panic!("not a terminate");
        };
        assert_eq!(t.ddp_header.unwrap().repr(), offending.ddp);
    }

    #[test]
    fn terminate_with_tagged_copy_and_d_without_m() {
        // D without M: the length field is present (Wireshark's reading) but not valid.
        let write = [0xc1, 0x40, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0x10, 0];
        let term = TerminateHeader {
            code: ProtoError::DdpBaseBounds.term_code(),
            segment_length_valid: false,
            ddp_segment_length: 0xbeef,
            ddp_header: Some(TerminatedDdpHeader::from_ulpdu(&write).unwrap()),
            rdmap_header: None,
            reserved: 0x1abc,
        };
        let mut b = [0u8; 20];
        assert_eq!(term.emit(&mut b), Ok(20));
        assert_eq!(b[..6], [0x11, 0x01, 0x5a, 0xbc, 0xbe, 0xef]);
        assert_eq!(b[6..20], write);
        assert_eq!(TerminateHeader::parse(&b), Ok((term, 20)));
        assert_eq!(TerminateHeader::required_len(&b), Ok(20));
    }

    #[test]
    fn p2p_write_rtr() {
        // rping-p2p.server.pcap frame 10: the zero-length RDMA Write RTR, STag 1, TO 0.
        let ulpdu = [0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let (h, len) = RdmapHeader::parse(&ulpdu).unwrap();
        assert_eq!(len, 14);
        assert_eq!(
            h.message(),
            RdmapMessage::Write {
                sink_stag: STag(1),
                sink_to: 0
            }
        );
        assert_eq!(
            h,
            RdmapHeader::new(
                RdmapMessage::Write {
                    sink_stag: STag(1),
                    sink_to: 0
                },
                true
            )
        );
    }

    #[test]
    fn unexpected_combinations_are_kept() {
        // A tagged Send, an untagged Write, an unknown opcode, a tagged Read Request (which
        // has no body in the tagged layout).
        for (ddp_ctrl, rdmap_ctrl) in [(0xc1, 0x43), (0x41, 0x40), (0x41, 0x4c), (0xc1, 0x41)] {
            let mut b = [0x5au8; 18];
            b[0] = ddp_ctrl;
            b[1] = rdmap_ctrl;
            let (h, len) = RdmapHeader::parse(&b).unwrap();
            assert_eq!(len, header_len_for(ddp_ctrl));
            assert!(
                matches!(h.message(), RdmapMessage::Unexpected { .. }),
                "{h:?}"
            );
            let mut out = [0u8; 18];
            assert_eq!(h.emit(&mut out), Ok(len));
            assert_eq!(out[..len], b[..len]);
        }
    }

    #[test]
    fn inconsistent_reprs_are_refused() {
        let mut h = RdmapHeader::new(RdmapMessage::Send { msn: 1, mo: 0 }, true);
        h.body = RdmapBody::Terminate(TerminateHeader::new(ProtoError::DdpInvalidQn.term_code()));
        assert_eq!(h.emit(&mut [0u8; 64]), Err(WireError::Inconsistent));
        let rr = RdmapHeader::new(
            RdmapMessage::ReadRequest {
                msn: 1,
                mo: 0,
                body: ReadRequestBody::parse(&[0; 28]).unwrap(),
            },
            true,
        );
        assert_eq!(rr.emit(&mut [0u8; 45]), Err(WireError::BufferTooSmall));
        let mut rr2 = rr;
        rr2.body = RdmapBody::None;
        assert_eq!(rr2.emit(&mut [0u8; 64]), Err(WireError::Inconsistent));
    }

    #[test]
    fn send_invalidate_carries_the_stag_in_ulp_rsvd() {
        let h = RdmapHeader::new(
            RdmapMessage::SendSeInvalidate {
                msn: 3,
                mo: 0x100,
                inval_stag: STag(0x0102_0304),
            },
            false,
        );
        let mut b = [0u8; 18];
        h.emit(&mut b).unwrap();
        assert_eq!(
            b,
            [0x01, 0x46, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 1, 0]
        );
        assert_eq!(RdmapHeader::parse(&b).unwrap().0.message(), {
            RdmapMessage::SendSeInvalidate {
                msn: 3,
                mo: 0x100,
                inval_stag: STag(0x0102_0304),
            }
        });
    }
}
