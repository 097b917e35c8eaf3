//! Building the Terminate message for a [`ProtoError`] (RFC 5040 §4.8, §7.1; RFC 5041 §7.2;
//! RFC 5044 §8).
//!
//! The code (layer, error type, error code) comes only from [`ProtoError::term_code`]. This
//! module decides which copies of the offending segment travel with it (the M, D and R bits):
//!
//! | error | M + DDP Segment Length | D: DDP header | R: Read Request header |
//! |---|---|---|---|
//! | LLP (MPA) errors | no | no | no |
//! | DDP version errors | no | no (layout unknown) | no |
//! | any local catastrophic error (DDP or RDMAP, error type 0) | no | no | no |
//! | every other DDP or RDMAP error on a received segment | yes | yes | if the segment was a Read Request |
//!
//! This follows siw's `siw_send_terminate` with two deliberate differences: siw omits the
//! DDP header for RDMAP version and opcode errors ("layout unknown"), but the DDP header was
//! valid (its version was checked first), so we include it; and siw sets R for every remote
//! protection error, while RFC 5040 §4.8 defines the RDMA header copy as the Read Request
//! header, so we set R only when the offending message was a Read Request (then also for
//! remote operation errors such as IRD overflow).
//!
//! The DDP Segment Length we report is the length of the offending DDP segment, i.e. the MPA
//! ULPDU length (RFC 5041 defines the DDP segment as header plus payload; nes/irdma report
//! the same, siw reports the payload length).
//!
//! A Terminate goes on QN 2 with its own MSN (the first and only one we send is MSN 1), MO 0,
//! L set; it is the last message of the stream.

use crate::error::{ProtoError, TermLayer};
use crate::wire::rdmap::{
    RdmapHeader, RdmapMessage, ReadRequestBody, TerminateHeader, TerminatedDdpHeader,
};

/// What the receive side knew about the segment in error when it detected the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorContext {
    /// The ULPDU (DDP segment) length from the MPA header.
    pub ulpdu_len: u16,
    /// The segment's DDP header, byte for byte.
    pub ddp_header: TerminatedDdpHeader,
    /// The Read Request header, if the segment was a Read Request whose header was read.
    pub read_request: Option<ReadRequestBody>,
}

/// Whether a Terminate for `err` carries copies of the offending segment's headers.
pub fn carries_copies(err: ProtoError) -> bool {
    let code = err.term_code();
    match code.layer {
        TermLayer::Llp | TermLayer::Unknown(_) => false,
        // error type 0 is "local catastrophic" in both DDP and RDMAP.
        _ if code.etype == 0 => false,
        _ => !matches!(
            err,
            ProtoError::DdpVersionTagged | ProtoError::DdpVersionUntagged
        ),
    }
}

/// The Terminate header that reports `err` (see the module docs for the copies).
pub fn terminate_header(err: ProtoError, ctx: Option<&ErrorContext>) -> TerminateHeader {
    let mut t = TerminateHeader::new(err.term_code());
    if let Some(ctx) = ctx.filter(|_| carries_copies(err)) {
        t.segment_length_valid = true;
        t.ddp_segment_length = ctx.ulpdu_len;
        t.ddp_header = Some(ctx.ddp_header);
        t.rdmap_header = ctx.read_request;
    }
    t
}

/// The whole ULPDU header of a Terminate message with MSN `msn` on QN 2.
pub fn terminate_message(term: TerminateHeader, msn: u32) -> RdmapHeader {
    RdmapHeader::new(RdmapMessage::Terminate { msn, mo: 0, term }, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ddp::STag;

    fn ctx(ulpdu: &[u8], rr: Option<ReadRequestBody>) -> ErrorContext {
        ErrorContext {
            ulpdu_len: ulpdu.len() as u16,
            ddp_header: TerminatedDdpHeader::from_ulpdu(ulpdu).unwrap(),
            read_request: rr,
        }
    }

    #[test]
    fn copies_follow_the_table() {
        let write = {
            let h = RdmapHeader::new(
                RdmapMessage::Write {
                    sink_stag: STag(0x100),
                    sink_to: 8,
                },
                true,
            );
            let mut b = vec![0; h.buffer_len() + 4];
            h.emit(&mut b).unwrap();
            b
        };
        let c = ctx(&write, None);
        let t = terminate_header(ProtoError::DdpBaseBounds, Some(&c));
        assert!(t.segment_length_valid && t.ddp_header.is_some() && t.rdmap_header.is_none());
        assert_eq!(t.ddp_segment_length, 18);
        assert_eq!(t.ddp_header.unwrap().as_bytes(), &write[..14]);
        for e in [
            ProtoError::Crc,
            ProtoError::DdpVersionTagged,
            ProtoError::DdpLocalCatastrophic,
            ProtoError::RdmapLocalCatastrophic,
        ] {
            let t = terminate_header(e, Some(&c));
            assert!(!t.segment_length_valid && t.ddp_header.is_none(), "{e:?}");
        }
        let body = ReadRequestBody {
            sink_stag: STag(1),
            sink_to: 2,
            read_size: 3,
            source_stag: STag(4),
            source_to: 5,
        };
        let rr = {
            let h = RdmapHeader::new(
                RdmapMessage::ReadRequest {
                    msn: 1,
                    mo: 0,
                    body,
                },
                true,
            );
            let mut b = vec![0; h.buffer_len()];
            h.emit(&mut b).unwrap();
            b
        };
        let t = terminate_header(ProtoError::RdmapAccessRights, Some(&ctx(&rr, Some(body))));
        assert_eq!(t.rdmap_header, Some(body));
        assert_eq!(t.ddp_segment_length, 46);
        let m = terminate_message(t, 1);
        let mut b = vec![0; m.buffer_len()];
        m.emit(&mut b).unwrap();
        let (back, n) = RdmapHeader::parse(&b).unwrap();
        assert_eq!(n, b.len());
        assert_eq!(back, m);
    }
}
