//! RDMAP (RFC 5040): operations, their completions, RDMA Read bookkeeping against ORD/IRD,
//! Send with Invalidate, header checks and the Terminate message.
//!
//! - [`check_header`]: the checks every received segment header passes before anything else
//!   (RFC 5041 §7.2 DDP version, RFC 5040 §4.2 RDMAP version, §4.3 opcode/buffer model, §5.2
//!   queue numbers), in siw's order (`siw_get_hdr`, `siw_send_check_ntoh`).
//! - [`reads`]: outstanding Read Requests (ORD) and owed Read Responses (IRD).
//! - [`invalidate`]: the remote invalidation of a Send with Invalidate (RFC 5040 §5.1, §6.4).
//! - [`terminate`]: which Terminate (and which header copies) reports an error.
//! - [`WcOpcode`], [`WcStatus`]: what a completion says (verbs vocabulary, as siw's
//!   `siw_wc_status`).
//!
//! What it refuses to do: place data, touch the wire directly, or decide the Terminate code of
//! an error (that is [`ProtoError::term_code`]).

pub mod reads;
pub mod terminate;

use crate::ddp::untagged::{QN_READ_REQUEST, QN_SEND, QN_TERMINATE};
use crate::ddp::{InvalidateError, Memory, STag};
use crate::error::ProtoError;
use crate::wire::ddp::{DDP_VERSION, DdpBuffer, DdpRepr};
use crate::wire::rdmap::{Opcode, RDMAP_VERSION, RdmapControl};

/// The operation a completion reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A Send (any variant) we posted.
    Send,
    /// An RDMA Write we posted.
    Write,
    /// An RDMA Read we posted (its Read Response arrived).
    Read,
    /// A Send the peer sent, received into a posted receive.
    Recv,
}

/// The status of a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Done.
    Success,
    /// The work request named local memory that is not accessible (nothing reached the wire).
    LocalProtection,
    /// A receive was too short for the message (the Terminate was sent).
    LocalLength,
    /// The peer's Send with Invalidate named an STag we could not invalidate.
    RemoteInvalidate,
    /// The work request failed with the protocol error that ended the stream.
    Fatal(ProtoError),
    /// The peer terminated the stream while the work request was in progress.
    RemoteTerminated,
    /// The stream ended before the work request was processed (flushed).
    Flushed,
    /// The work request cannot be executed by this connection (e.g. a read with ORD 0).
    Unsupported,
}

/// The first checks on a received segment header, given its DDP header and (for untagged
/// segments) the queue number: DDP version, RDMAP version, opcode against the buffer model,
/// queue number against the opcode.
///
/// Choices where the RFC is silent: an opcode on the wrong buffer model (a tagged Send, an
/// untagged Write) or an unknown opcode is *unexpected opcode* (siw does the same for
/// opcodes > 7). An untagged message on a queue other than its opcode's is *invalid QN*
/// (siw `siw_send_check_ntoh`), including QNs 3 and up.
pub fn check_header(ddp: &DdpRepr) -> Result<Opcode, ProtoError> {
    if ddp.ddp_version != DDP_VERSION {
        return Err(if ddp.is_tagged() {
            ProtoError::DdpVersionTagged
        } else {
            ProtoError::DdpVersionUntagged
        });
    }
    let ctrl = RdmapControl::from_byte(ddp.ulp_ctrl);
    if ctrl.version != RDMAP_VERSION {
        return Err(ProtoError::RdmapVersion);
    }
    let opcode = ctrl.opcode;
    if opcode.is_tagged() != Some(ddp.is_tagged()) {
        return Err(ProtoError::RdmapUnexpectedOpcode);
    }
    if let DdpBuffer::Untagged { qn, .. } = ddp.buffer {
        let want = match opcode {
            Opcode::ReadRequest => QN_READ_REQUEST,
            Opcode::Terminate => QN_TERMINATE,
            _ => QN_SEND,
        };
        if qn != want {
            return Err(ProtoError::DdpInvalidQn);
        }
    }
    Ok(opcode)
}

/// Invalidates `stag` on behalf of the peer's Send with Invalidate (RFC 5040 §6.4), checking
/// what siw's `siw_invalidate_stag` checks.
///
/// - no region under the index, or a wrong key → [`ProtoError::RdmapCannotInvalidate`]
///   (remote operation error; siw checks no key, we treat a wrong key like an unknown STag),
/// - a region of another protection domain → [`ProtoError::RdmapCannotInvalidateProtection`]
///   (remote protection error, siw: -EACCES),
/// - the registry refuses ([`InvalidateError`]) → [`ProtoError::RdmapCannotInvalidate`].
///
/// An STag already invalid is invalidated again without error (siw: "Per RDMA verbs
/// definition, an STag may already be in invalid state").
pub fn invalidate<M: Memory + ?Sized>(mem: &mut M, stag: STag, pd: u32) -> Result<(), ProtoError> {
    let region = mem.region(stag).ok_or(ProtoError::RdmapCannotInvalidate)?;
    if region.stag != stag {
        return Err(ProtoError::RdmapCannotInvalidate);
    }
    if region.pd != pd {
        return Err(ProtoError::RdmapCannotInvalidateProtection);
    }
    mem.invalidate(stag).map_err(|e| match e {
        InvalidateError::UnknownStag | InvalidateError::NotInvalidatable => {
            ProtoError::RdmapCannotInvalidate
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddp::Access;
    use crate::ddp::mem_vec::VecMemory;
    use crate::wire::rdmap::{RdmapHeader, RdmapMessage};

    fn hdr(m: RdmapMessage) -> DdpRepr {
        RdmapHeader::new(m, true).ddp
    }

    #[test]
    fn header_checks_in_order() {
        let send = hdr(RdmapMessage::Send { msn: 1, mo: 0 });
        assert_eq!(check_header(&send), Ok(Opcode::Send));
        let mut bad = send;
        bad.ddp_version = 2;
        bad.ulp_ctrl = 0; // also a bad RDMAP version: DDP's is reported first
        assert_eq!(check_header(&bad), Err(ProtoError::DdpVersionUntagged));
        let mut w = hdr(RdmapMessage::Write {
            sink_stag: STag(1),
            sink_to: 0,
        });
        w.ddp_version = 0;
        assert_eq!(check_header(&w), Err(ProtoError::DdpVersionTagged));
        let mut v = send;
        v.ulp_ctrl = RdmapControl {
            version: 2,
            ..RdmapControl::new(Opcode::Send)
        }
        .to_byte();
        assert_eq!(check_header(&v), Err(ProtoError::RdmapVersion));
        let mut op = send;
        op.ulp_ctrl = RdmapControl::new(Opcode::Unknown(9)).to_byte();
        assert_eq!(check_header(&op), Err(ProtoError::RdmapUnexpectedOpcode));
        let tagged_send = hdr(RdmapMessage::Unexpected {
            opcode: Opcode::Send,
            tagged: true,
        });
        assert_eq!(
            check_header(&tagged_send),
            Err(ProtoError::RdmapUnexpectedOpcode)
        );
        let mut qn = send;
        if let DdpBuffer::Untagged { qn: q, .. } = &mut qn.buffer {
            *q = 1;
        }
        assert_eq!(check_header(&qn), Err(ProtoError::DdpInvalidQn));
        if let DdpBuffer::Untagged { qn: q, .. } = &mut qn.buffer {
            *q = 7;
        }
        assert_eq!(check_header(&qn), Err(ProtoError::DdpInvalidQn));
    }

    #[test]
    fn invalidate_rules() {
        let mut m = VecMemory::new(0, 1024);
        let a = m.register(0, 16, Access::REMOTE_WRITE, 1);
        let b = m.register(16, 16, Access::REMOTE_WRITE, 2);
        let c = m.register_with(32, 16, Access::REMOTE_WRITE, 1, false);
        assert_eq!(
            invalidate(&mut m, STag::from_parts(0x777, 0), 1),
            Err(ProtoError::RdmapCannotInvalidate)
        );
        assert_eq!(
            invalidate(&mut m, STag::from_parts(a.index(), a.key() ^ 0xff), 1),
            Err(ProtoError::RdmapCannotInvalidate)
        );
        assert_eq!(
            invalidate(&mut m, b, 1),
            Err(ProtoError::RdmapCannotInvalidateProtection)
        );
        assert_eq!(
            invalidate(&mut m, c, 1),
            Err(ProtoError::RdmapCannotInvalidate)
        );
        assert_eq!(invalidate(&mut m, a, 1), Ok(()));
        assert!(!m.region(a).unwrap().valid);
        assert_eq!(invalidate(&mut m, a, 1), Ok(()));
    }
}
