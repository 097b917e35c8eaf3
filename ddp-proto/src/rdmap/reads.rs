//! RDMA Read bookkeeping (RFC 5040 §5.2, §6.3, RFC 6581 IRD/ORD): the outbound read queue
//! (reads we issued, limited by ORD) and the inbound read queue (Read Requests the peer
//! issued, limited by IRD, answered by Read Response streams in order).
//!
//! Outbound (siw: ORQ). A read waits in the send queue until fewer than ORD reads are
//! outstanding; exceeding ORD is never an error on our side. The data source answers Read
//! Requests in the order it received them (RFC 5040 §6, ordering rules), so each Read
//! Response stream belongs to the oldest outstanding read. Its segments are checked against that read before a byte is placed:
//! - no read outstanding → [`ProtoError::RdmapUnexpectedOpcode`] (RFC 5040 §7: an opcode not
//!   expected now; siw answers with a DDP catastrophic error, we prefer the specific code),
//! - sink STag other than the one we sent → [`ProtoError::DdpInvalidStag`] (siw),
//! - `to + len` wraps → [`ProtoError::DdpToWrap`],
//! - TO not continuing the stream, more bytes than requested, or the L bit with fewer bytes
//!   than requested → [`ProtoError::DdpBaseBounds`] (siw `siw_rresp_check_ntoh`: the RFCs
//!   have no better code).
//!
//! Inbound (siw: IRQ). A Read Request beyond IRD outstanding responses is
//! [`ProtoError::RdmapCatastrophicStream`]: a remote operation error (RFC 5040 §4.8 error
//! type 2), with the code siw's `siw_init_rresp` uses when its IRQ is full ("catastrophic
//! error, localized to RDMAP stream"; the RFC names no more specific code). The source is validated when the request
//! arrives (RDMAP remote protection errors, see [`crate::ddp::tagged`]) and again when each
//! response segment is produced (the region may have been invalidated meanwhile).

use std::collections::VecDeque;

use crate::ddp::{STag, Sge};
use crate::error::ProtoError;
use crate::wire::rdmap::ReadRequestBody;

/// A read we issued and whose Read Response has not fully arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutstandingRead {
    /// The caller's work request id.
    pub wr_id: u64,
    /// Local sink.
    pub sink: Vec<Sge>,
    /// The Data Sink STag we put in the Read Request (the peer echoes it).
    pub sink_stag: STag,
    /// The Data Sink TO we put in the Read Request.
    pub sink_to: u64,
    /// RDMA Read Message Size.
    pub len: u32,
    /// Bytes of the response received so far.
    pub received: u32,
    /// Whether the caller wants a completion on success.
    pub signaled: bool,
    /// An internal read (the MPA v2 read RTR): no completion at all.
    pub internal: bool,
}

/// Where one checked Read Response segment goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsePlacement {
    /// Byte offset in the sink SGE list.
    pub offset: u64,
}

/// The outbound read queue (ORD).
#[derive(Debug, Clone)]
pub struct OutboundReads {
    ord: u32,
    q: VecDeque<OutstandingRead>,
}

impl OutboundReads {
    /// An empty queue allowing `ord` outstanding reads.
    pub fn new(ord: u32) -> OutboundReads {
        OutboundReads {
            ord,
            q: VecDeque::new(),
        }
    }

    /// The ORD limit.
    pub fn ord(&self) -> u32 {
        self.ord
    }

    /// Reads outstanding.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether no read is outstanding.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Whether one more Read Request may go out now.
    pub fn can_issue(&self) -> bool {
        (self.q.len() as u64) < u64::from(self.ord)
    }

    /// Records a Read Request that is going out.
    pub fn issue(&mut self, read: OutstandingRead) {
        self.q.push_back(read);
    }

    /// The oldest outstanding read.
    pub fn front(&self) -> Option<&OutstandingRead> {
        self.q.front()
    }

    /// Checks a Read Response segment (sink STag/TO, `len` payload bytes, L bit) against the
    /// oldest outstanding read; nothing is changed.
    pub fn check_response(
        &self,
        sink_stag: STag,
        sink_to: u64,
        len: u32,
        last: bool,
    ) -> Result<ResponsePlacement, ProtoError> {
        let r = self.q.front().ok_or(ProtoError::RdmapUnexpectedOpcode)?;
        if sink_stag != r.sink_stag {
            return Err(ProtoError::DdpInvalidStag);
        }
        if sink_to.checked_add(u64::from(len)).is_none() {
            return Err(ProtoError::DdpToWrap);
        }
        if sink_to != r.sink_to.wrapping_add(u64::from(r.received)) {
            return Err(ProtoError::DdpBaseBounds);
        }
        let end = u64::from(r.received) + u64::from(len);
        if end > u64::from(r.len) || (last && end != u64::from(r.len)) {
            return Err(ProtoError::DdpBaseBounds);
        }
        Ok(ResponsePlacement {
            offset: u64::from(r.received),
        })
    }

    /// Accounts a placed Read Response segment; with `last` the oldest read is complete and
    /// returned.
    pub fn advance(&mut self, len: u32, last: bool) -> Option<OutstandingRead> {
        let r = self.q.front_mut()?;
        r.received += len;
        if last { self.q.pop_front() } else { None }
    }

    /// Takes every outstanding read (for flushing with an error status).
    pub fn drain(&mut self) -> Vec<OutstandingRead> {
        self.q.drain(..).collect()
    }
}

/// A Read Response we owe the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadResponseJob {
    /// The Read Request, as received (also copied into a Terminate if the source fails
    /// later).
    pub req: ReadRequestBody,
    /// Its MSN on QN 1.
    pub msn: u32,
    /// Bytes already sent.
    pub sent: u32,
}

/// The inbound read queue (IRD).
#[derive(Debug, Clone)]
pub struct InboundReads {
    ird: u32,
    q: VecDeque<ReadResponseJob>,
}

impl InboundReads {
    /// An empty queue accepting `ird` outstanding Read Requests.
    pub fn new(ird: u32) -> InboundReads {
        InboundReads {
            ird,
            q: VecDeque::new(),
        }
    }

    /// The IRD limit.
    pub fn ird(&self) -> u32 {
        self.ird
    }

    /// Read Requests not yet fully answered.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Queues a Read Response for a validated Read Request; refuses one beyond IRD.
    pub fn accept(&mut self, req: ReadRequestBody, msn: u32) -> Result<(), ProtoError> {
        if (self.q.len() as u64) >= u64::from(self.ird) {
            return Err(ProtoError::RdmapCatastrophicStream);
        }
        self.q.push_back(ReadResponseJob { req, msn, sent: 0 });
        Ok(())
    }

    /// The response being sent (the oldest).
    pub fn front(&self) -> Option<&ReadResponseJob> {
        self.q.front()
    }

    /// The responses owed, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &ReadResponseJob> {
        self.q.iter()
    }

    /// Accounts `len` bytes of the oldest response as sent; returns it when it is done.
    pub fn advance(&mut self, len: u32, last: bool) -> Option<ReadResponseJob> {
        let j = self.q.front_mut()?;
        j.sent += len;
        if last { self.q.pop_front() } else { None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(len: u32) -> OutstandingRead {
        OutstandingRead {
            wr_id: 1,
            sink: vec![Sge::new(0x100, len)],
            sink_stag: STag(0x1234),
            sink_to: 0x100,
            len,
            received: 0,
            signaled: true,
            internal: false,
        }
    }

    #[test]
    fn ord_limit_and_order() {
        let mut o = OutboundReads::new(1);
        assert!(o.can_issue());
        assert_eq!(
            o.check_response(STag(0x1234), 0x100, 0, true),
            Err(ProtoError::RdmapUnexpectedOpcode)
        );
        o.issue(read(10));
        assert!(!o.can_issue());
        assert_eq!(
            o.check_response(STag(0x1235), 0x100, 4, false),
            Err(ProtoError::DdpInvalidStag)
        );
        assert_eq!(
            o.check_response(STag(0x1234), 0x101, 4, false),
            Err(ProtoError::DdpBaseBounds)
        );
        assert_eq!(
            o.check_response(STag(0x1234), 0x100, 11, false),
            Err(ProtoError::DdpBaseBounds)
        );
        assert_eq!(
            o.check_response(STag(0x1234), 0x100, 4, true),
            Err(ProtoError::DdpBaseBounds)
        );
        assert_eq!(
            o.check_response(STag(0x1234), u64::MAX, 4, false),
            Err(ProtoError::DdpToWrap)
        );
        assert_eq!(
            o.check_response(STag(0x1234), 0x100, 4, false),
            Ok(ResponsePlacement { offset: 0 })
        );
        assert_eq!(o.advance(4, false), None);
        assert_eq!(
            o.check_response(STag(0x1234), 0x104, 6, true),
            Ok(ResponsePlacement { offset: 4 })
        );
        assert_eq!(o.advance(6, true).unwrap().received, 10);
        assert!(o.is_empty());
        assert!(o.can_issue());
        assert!(!OutboundReads::new(0).can_issue());
    }

    #[test]
    fn ird_limit() {
        let body = ReadRequestBody {
            sink_stag: STag(1),
            sink_to: 0,
            read_size: 8,
            source_stag: STag(2),
            source_to: 0,
        };
        let mut i = InboundReads::new(2);
        i.accept(body, 1).unwrap();
        i.accept(body, 2).unwrap();
        assert_eq!(i.accept(body, 3), Err(ProtoError::RdmapCatastrophicStream));
        assert_eq!(i.advance(8, true).unwrap().msn, 1);
        i.accept(body, 3).unwrap();
        assert_eq!(i.len(), 2);
        assert_eq!(
            InboundReads::new(0).accept(body, 1),
            Err(ProtoError::RdmapCatastrophicStream)
        );
    }
}
