//! The error taxonomy: every protocol error the receive side can detect, and the one place
//! where each is mapped to the Terminate message the peer sees.
//!
//! RFC 5040 §4.8 (Terminate header: Layer, EType, Error Code) and §7 (RDMAP errors),
//! RFC 5041 §7 (DDP errors), RFC 5044 §8 and RFC 6581 §5 (LLP/MPA errors).
//!
//! Rule of the house (after rustls' alerts): protocol code returns a [`ProtoError`]; only
//! [`ProtoError::term_code`] decides layer, error type and code. "First error wins" is the
//! connection's job: once a Terminate has been queued, later errors are not reported.

use core::fmt;

/// The layer that detected an error (Terminate Control, "Layer" nibble).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TermLayer {
    /// RDMAP (RFC 5040).
    Rdmap,
    /// DDP (RFC 5041).
    Ddp,
    /// The lower-layer protocol, here MPA (RFC 5044).
    Llp,
    /// A value this implementation does not know (kept, not lost).
    Unknown(u8),
}

impl TermLayer {
    /// The 4-bit wire value.
    pub fn to_raw(self) -> u8 {
        match self {
            TermLayer::Rdmap => 0,
            TermLayer::Ddp => 1,
            TermLayer::Llp => 2,
            TermLayer::Unknown(v) => v & 0xf,
        }
    }

    /// From the 4-bit wire value.
    pub fn from_raw(v: u8) -> Self {
        match v & 0xf {
            0 => TermLayer::Rdmap,
            1 => TermLayer::Ddp,
            2 => TermLayer::Llp,
            v => TermLayer::Unknown(v),
        }
    }
}

/// Layer, error type and error code, exactly as they travel in a Terminate message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TermCode {
    /// Which layer detected the error.
    pub layer: TermLayer,
    /// Error type (4 bits), meaning depends on `layer`.
    pub etype: u8,
    /// Error code (8 bits), meaning depends on `layer` and `etype`.
    pub ecode: u8,
}

impl TermCode {
    /// Builds a code from its three raw parts.
    pub const fn new(layer: TermLayer, etype: u8, ecode: u8) -> Self {
        TermCode {
            layer,
            etype,
            ecode,
        }
    }
}

/// RDMAP error types (RFC 5040 §4.8).
pub mod rdmap_etype {
    /// Local catastrophic error.
    pub const CATASTROPHIC: u8 = 0x0;
    /// Remote protection error.
    pub const REMOTE_PROTECTION: u8 = 0x1;
    /// Remote operation error.
    pub const REMOTE_OPERATION: u8 = 0x2;
}

/// RDMAP error codes (RFC 5040 §4.8).
pub mod rdmap_ecode {
    /// Invalid STag.
    pub const INVALID_STAG: u8 = 0x00;
    /// Base or bounds violation.
    pub const BASE_BOUNDS: u8 = 0x01;
    /// Access rights violation.
    pub const ACCESS_RIGHTS: u8 = 0x02;
    /// STag not associated with RDMAP Stream.
    pub const STAG_NOT_ASSOC: u8 = 0x03;
    /// TO wrap.
    pub const TO_WRAP: u8 = 0x04;
    /// Invalid RDMAP version.
    pub const VERSION: u8 = 0x05;
    /// Unexpected OpCode.
    pub const OPCODE: u8 = 0x06;
    /// Catastrophic error, localized to RDMAP Stream.
    pub const CATASTROPHIC_STREAM: u8 = 0x07;
    /// Catastrophic error, global.
    pub const CATASTROPHIC_GLOBAL: u8 = 0x08;
    /// STag cannot be invalidated.
    pub const CANNOT_INVALIDATE: u8 = 0x09;
    /// Unspecified error.
    pub const UNSPECIFIED: u8 = 0xff;
}

/// DDP error types (RFC 5041 §7.2).
pub mod ddp_etype {
    /// Local catastrophic error.
    pub const CATASTROPHIC: u8 = 0x0;
    /// Tagged buffer error.
    pub const TAGGED_BUF: u8 = 0x1;
    /// Untagged buffer error.
    pub const UNTAGGED_BUF: u8 = 0x2;
}

/// DDP error codes (RFC 5041 §7.2).
pub mod ddp_ecode {
    /// Tagged: invalid STag.
    pub const T_INVALID_STAG: u8 = 0x00;
    /// Tagged: base or bounds violation.
    pub const T_BASE_BOUNDS: u8 = 0x01;
    /// Tagged: STag not associated with DDP Stream.
    pub const T_STAG_NOT_ASSOC: u8 = 0x02;
    /// Tagged: TO wrap.
    pub const T_TO_WRAP: u8 = 0x03;
    /// Tagged: invalid DDP version.
    pub const T_VERSION: u8 = 0x04;
    /// Untagged: invalid QN.
    pub const UT_INVALID_QN: u8 = 0x01;
    /// Untagged: invalid MSN, no buffer available.
    pub const UT_INVALID_MSN_NOBUF: u8 = 0x02;
    /// Untagged: invalid MSN, MSN range is not valid.
    pub const UT_INVALID_MSN_RANGE: u8 = 0x03;
    /// Untagged: invalid MO.
    pub const UT_INVALID_MO: u8 = 0x04;
    /// Untagged: DDP message too long for available buffer.
    pub const UT_MSG_TOO_LONG: u8 = 0x05;
    /// Untagged: invalid DDP version.
    pub const UT_VERSION: u8 = 0x06;
}

/// MPA (LLP) error codes, error type 0 (RFC 5044 §8, RFC 6581 §5).
pub mod llp_ecode {
    /// TCP connection closed, terminated or lost (local reporting only).
    pub const TCP_STREAM_LOST: u8 = 0x01;
    /// MPA CRC error.
    pub const CRC: u8 = 0x02;
    /// MPA Marker and ULPDU Length field mismatch.
    pub const MARKER_MISMATCH: u8 = 0x03;
    /// Invalid MPA Request or Reply frame.
    pub const INVALID_REQ_REP: u8 = 0x04;
    /// Enhanced connection establishment: local catastrophic error.
    pub const LOCAL_CATASTROPHIC: u8 = 0x05;
    /// Enhanced connection establishment: insufficient IRD resources.
    pub const INSUFFICIENT_IRD: u8 = 0x06;
    /// Enhanced connection establishment: no matching RTR option.
    pub const NO_MATCHING_RTR: u8 = 0x07;
}

/// Every receive-side protocol error this crate detects.
///
/// Each variant names what went wrong in the vocabulary of the RFCs; [`ProtoError::term_code`]
/// is the only mapping to wire codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtoError {
    // ---- MPA (LLP) ----
    /// The TCP stream ended or broke in the middle of the protocol.
    StreamLost,
    /// An FPDU's CRC-32C did not match.
    Crc,
    /// A marker did not point at the start of its FPDU, or the ULPDU length is not plausible
    /// (zero, over the MULPDU).
    MarkerMismatch,
    /// An MPA Request or Reply frame was malformed (key, revision, length, flags).
    InvalidRequestReply,
    /// RFC 6581: we cannot provide the IRD the peer asks for.
    InsufficientIrd,
    /// RFC 6581: no RTR type both sides support.
    NoMatchingRtr,

    // ---- DDP ----
    /// A DDP header has an unsupported version (tagged).
    DdpVersionTagged,
    /// A DDP header has an unsupported version (untagged).
    DdpVersionUntagged,
    /// Tagged buffer: the STag is not valid (unknown index, wrong key, invalidated).
    DdpInvalidStag,
    /// Tagged buffer: the segment lies outside the region.
    DdpBaseBounds,
    /// Tagged buffer: the STag belongs to another stream (protection domain mismatch).
    DdpStagNotAssociated,
    /// Tagged buffer: TO + length wraps past 2^64.
    DdpToWrap,
    /// Untagged buffer: the queue number is not one RDMAP uses.
    DdpInvalidQn,
    /// Untagged buffer: no receive buffer is posted for this MSN.
    DdpNoBuffer,
    /// Untagged buffer: the MSN is outside the valid window.
    DdpMsnRange,
    /// Untagged buffer: the message offset does not continue the message.
    DdpInvalidMo,
    /// Untagged buffer: the message is larger than the posted buffer.
    DdpMessageTooLong,

    // ---- RDMAP ----
    /// RDMAP version is not 1.
    RdmapVersion,
    /// An opcode that is unknown, or not allowed here (e.g. Read Response with no
    /// outstanding Read Request, a Read Request beyond IRD).
    RdmapUnexpectedOpcode,
    /// Remote access to an invalid STag.
    RdmapInvalidStag,
    /// Remote access outside the region's bounds.
    RdmapBaseBounds,
    /// Remote access without the needed right (e.g. Read without remote read).
    RdmapAccessRights,
    /// Remote access to an STag of another stream.
    RdmapStagNotAssociated,
    /// Remote access whose TO + length wraps.
    RdmapToWrap,
    /// Send with Invalidate named an STag that cannot be invalidated.
    RdmapCannotInvalidate,
    /// A fatal error inside this stream that has no more specific code.
    RdmapCatastrophicStream,
    /// The peer sent an operation the RFC leaves to us to refuse, no more specific code.
    RdmapUnspecified,
    /// Send with Invalidate named an STag of another protection domain (siw:
    /// `siw_invalidate_stag` returns -EACCES → remote *protection* error, code 0x09).
    RdmapCannotInvalidateProtection,
    /// DDP could not place into a local buffer named by a work request (receive or Read
    /// Response sink not accessible); siw reports DDP local catastrophic error.
    DdpLocalCatastrophic,
    /// RDMAP could not continue a message it had started sending (its local source became
    /// inaccessible midway); RDMAP local catastrophic error.
    RdmapLocalCatastrophic,
}

impl ProtoError {
    /// The Terminate layer, error type and code the peer must see for this error.
    pub fn term_code(self) -> TermCode {
        use ProtoError::*;
        use TermLayer::{Ddp, Llp, Rdmap};
        let (layer, etype, ecode) = match self {
            StreamLost => (Llp, 0, llp_ecode::TCP_STREAM_LOST),
            Crc => (Llp, 0, llp_ecode::CRC),
            MarkerMismatch => (Llp, 0, llp_ecode::MARKER_MISMATCH),
            InvalidRequestReply => (Llp, 0, llp_ecode::INVALID_REQ_REP),
            InsufficientIrd => (Llp, 0, llp_ecode::INSUFFICIENT_IRD),
            NoMatchingRtr => (Llp, 0, llp_ecode::NO_MATCHING_RTR),

            DdpVersionTagged => (Ddp, ddp_etype::TAGGED_BUF, ddp_ecode::T_VERSION),
            DdpVersionUntagged => (Ddp, ddp_etype::UNTAGGED_BUF, ddp_ecode::UT_VERSION),
            DdpInvalidStag => (Ddp, ddp_etype::TAGGED_BUF, ddp_ecode::T_INVALID_STAG),
            DdpBaseBounds => (Ddp, ddp_etype::TAGGED_BUF, ddp_ecode::T_BASE_BOUNDS),
            DdpStagNotAssociated => (Ddp, ddp_etype::TAGGED_BUF, ddp_ecode::T_STAG_NOT_ASSOC),
            DdpToWrap => (Ddp, ddp_etype::TAGGED_BUF, ddp_ecode::T_TO_WRAP),
            DdpInvalidQn => (Ddp, ddp_etype::UNTAGGED_BUF, ddp_ecode::UT_INVALID_QN),
            DdpNoBuffer => (
                Ddp,
                ddp_etype::UNTAGGED_BUF,
                ddp_ecode::UT_INVALID_MSN_NOBUF,
            ),
            DdpMsnRange => (
                Ddp,
                ddp_etype::UNTAGGED_BUF,
                ddp_ecode::UT_INVALID_MSN_RANGE,
            ),
            DdpInvalidMo => (Ddp, ddp_etype::UNTAGGED_BUF, ddp_ecode::UT_INVALID_MO),
            DdpMessageTooLong => (Ddp, ddp_etype::UNTAGGED_BUF, ddp_ecode::UT_MSG_TOO_LONG),

            RdmapVersion => (Rdmap, rdmap_etype::REMOTE_OPERATION, rdmap_ecode::VERSION),
            RdmapUnexpectedOpcode => (Rdmap, rdmap_etype::REMOTE_OPERATION, rdmap_ecode::OPCODE),
            RdmapInvalidStag => (
                Rdmap,
                rdmap_etype::REMOTE_PROTECTION,
                rdmap_ecode::INVALID_STAG,
            ),
            RdmapBaseBounds => (
                Rdmap,
                rdmap_etype::REMOTE_PROTECTION,
                rdmap_ecode::BASE_BOUNDS,
            ),
            RdmapAccessRights => (
                Rdmap,
                rdmap_etype::REMOTE_PROTECTION,
                rdmap_ecode::ACCESS_RIGHTS,
            ),
            RdmapStagNotAssociated => (
                Rdmap,
                rdmap_etype::REMOTE_PROTECTION,
                rdmap_ecode::STAG_NOT_ASSOC,
            ),
            RdmapToWrap => (Rdmap, rdmap_etype::REMOTE_PROTECTION, rdmap_ecode::TO_WRAP),
            RdmapCannotInvalidate => (
                Rdmap,
                rdmap_etype::REMOTE_OPERATION,
                rdmap_ecode::CANNOT_INVALIDATE,
            ),
            RdmapCatastrophicStream => (
                Rdmap,
                rdmap_etype::REMOTE_OPERATION,
                rdmap_ecode::CATASTROPHIC_STREAM,
            ),
            RdmapUnspecified => (
                Rdmap,
                rdmap_etype::REMOTE_OPERATION,
                rdmap_ecode::UNSPECIFIED,
            ),
            RdmapCannotInvalidateProtection => (
                Rdmap,
                rdmap_etype::REMOTE_PROTECTION,
                rdmap_ecode::CANNOT_INVALIDATE,
            ),
            DdpLocalCatastrophic => (Ddp, ddp_etype::CATASTROPHIC, 0),
            RdmapLocalCatastrophic => (Rdmap, rdmap_etype::CATASTROPHIC, rdmap_ecode::UNSPECIFIED),
        };
        TermCode::new(layer, etype, ecode)
    }

    /// Whether the error was detected by MPA (the LLP); such errors are reported in a
    /// Terminate without a trustworthy DDP/RDMAP header copy (RFC 5040 §4.8).
    pub fn is_llp(self) -> bool {
        self.term_code().layer == TermLayer::Llp
    }
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.term_code();
        write!(
            f,
            "{self:?} (terminate layer {}, etype {:#x}, ecode {:#04x})",
            c.layer.to_raw(),
            c.etype,
            c.ecode
        )
    }
}

impl std::error::Error for ProtoError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_roundtrip_keeps_unknown_values() {
        for v in 0..16u8 {
            assert_eq!(TermLayer::from_raw(v).to_raw(), v);
        }
        assert_eq!(TermLayer::from_raw(7), TermLayer::Unknown(7));
    }

    #[test]
    fn codes_match_the_rfc_tables() {
        let c = ProtoError::RdmapAccessRights.term_code();
        assert_eq!((c.layer.to_raw(), c.etype, c.ecode), (0, 1, 2));
        let c = ProtoError::DdpMessageTooLong.term_code();
        assert_eq!((c.layer.to_raw(), c.etype, c.ecode), (1, 2, 5));
        let c = ProtoError::Crc.term_code();
        assert_eq!((c.layer.to_raw(), c.etype, c.ecode), (2, 0, 2));
        assert!(ProtoError::Crc.is_llp());
        assert!(!ProtoError::DdpInvalidQn.is_llp());
    }
}
