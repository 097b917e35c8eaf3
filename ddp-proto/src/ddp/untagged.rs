//! Untagged buffers (RFC 5041 §3.2, §5.2, §5.3, §7.2): queue numbers, MSN, MO, the L bit and
//! the posted receive queue.
//!
//! RDMAP uses three queues (RFC 5040 §5): [`QN_SEND`] for every Send variant,
//! [`QN_READ_REQUEST`] for RDMA Read Requests and [`QN_TERMINATE`] for Terminate. Each has its
//! own Message Sequence Number, starting at 1 (RFC 5041 §5.3) and counting messages, wrapping
//! modulo 2^32. Inside a message the Message Offset of each segment must continue exactly
//! where the previous segment ended; the L bit ends the message.
//!
//! What it refuses, each with its own error:
//! - a QN RDMAP does not use → [`ProtoError::DdpInvalidQn`] (checked by the caller against the
//!   opcode, see `rdmap`),
//! - an MSN other than the one expected → [`ProtoError::DdpMsnRange`]. RFC 5041 allows a window
//!   of MSNs as wide as the posted buffers because DDP segments may be placed out of order;
//!   over MPA/TCP segments arrive in order, so the window is exactly the one expected MSN (our
//!   choice; siw does the same),
//! - an MO that does not continue the message → [`ProtoError::DdpInvalidMo`],
//! - a Send with no posted receive (posted mode) → [`ProtoError::DdpNoBuffer`],
//! - a Send longer than the posted receive → [`ProtoError::DdpMessageTooLong`] (siw reports
//!   "no buffer" here; RFC 5041 §7.2 has the dedicated code and we use it).
//!
//! Checks run in the order MSN, MO, buffer, length, before a byte is placed.

use std::collections::VecDeque;

use super::{Sge, SgeList, sge_total};
use crate::error::ProtoError;

/// Queue number of Send, Send with Invalidate, Send with SE, Send with SE and Invalidate.
pub const QN_SEND: u32 = 0;
/// Queue number of RDMA Read Request.
pub const QN_READ_REQUEST: u32 = 1;
/// Queue number of Terminate.
pub const QN_TERMINATE: u32 = 2;

/// The first MSN of every queue (RFC 5041 §5.3).
pub const FIRST_MSN: u32 = 1;

/// Receive-side sequencing state of one untagged queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueRx {
    expected_msn: u32,
    mo: u32,
    in_message: bool,
}

impl Default for QueueRx {
    fn default() -> Self {
        QueueRx {
            expected_msn: FIRST_MSN,
            mo: 0,
            in_message: false,
        }
    }
}

impl QueueRx {
    /// The MSN the next segment must carry.
    pub fn expected_msn(&self) -> u32 {
        self.expected_msn
    }

    /// Bytes received so far of the message in progress (the MO the next segment must carry).
    pub fn mo(&self) -> u32 {
        self.mo
    }

    /// Whether a message has started and not yet ended with the L bit.
    pub fn in_message(&self) -> bool {
        self.in_message
    }

    /// Checks MSN and MO of a segment (before anything is placed).
    pub fn check(&self, msn: u32, mo: u32) -> Result<(), ProtoError> {
        if msn != self.expected_msn {
            return Err(ProtoError::DdpMsnRange);
        }
        if mo != self.mo {
            return Err(ProtoError::DdpInvalidMo);
        }
        Ok(())
    }

    /// Checks that a segment of `len` bytes does not push the MO past 2^32 - 1.
    pub fn check_len(&self, len: u32) -> Result<(), ProtoError> {
        self.mo
            .checked_add(len)
            .map(|_| ())
            .ok_or(ProtoError::DdpMessageTooLong)
    }

    /// Accounts a received segment of `len` payload bytes; `last` ends the message. Returns
    /// the total message length when the message ended.
    pub fn advance(&mut self, len: u32, last: bool) -> Option<u32> {
        self.mo += len;
        if last {
            let total = self.mo;
            self.mo = 0;
            self.in_message = false;
            self.expected_msn = self.expected_msn.wrapping_add(1);
            Some(total)
        } else {
            self.in_message = true;
            None
        }
    }
}

/// Send-side MSN counter of one untagged queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueTx {
    next_msn: u32,
}

impl Default for QueueTx {
    fn default() -> Self {
        QueueTx {
            next_msn: FIRST_MSN,
        }
    }
}

impl QueueTx {
    /// Takes the MSN for a new message.
    pub fn take(&mut self) -> u32 {
        let m = self.next_msn;
        self.next_msn = self.next_msn.wrapping_add(1);
        m
    }

    /// The MSN the next message will get.
    pub fn peek(&self) -> u32 {
        self.next_msn
    }
}

/// How Sends without a posted receive are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvMode {
    /// Message semantics: every Send consumes a posted receive; none posted is an error
    /// ([`ProtoError::DdpNoBuffer`]).
    Posted,
    /// Byte-stream semantics (plain read/write on a DDP socket): Sends that find no posted
    /// receive are handed to `Memory::deliver_stream`, in order.
    Stream,
}

/// A receive work request posted by the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostedRecv {
    /// The caller's work request id.
    pub wr_id: u64,
    /// Where the message goes.
    pub sges: SgeList,
    /// Total capacity.
    pub len: u64,
}

/// Where the Send message in progress is placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendSink {
    /// Into a posted receive.
    Posted(PostedRecv),
    /// Into the byte stream (`Memory::deliver_stream`).
    Stream,
}

/// Where one Send segment's payload goes, after its header passed every check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPlacement {
    /// Into the posted receive in progress, at this byte offset of its SGE list.
    Posted {
        /// Byte offset in the receive's SGE list (= the segment's MO).
        offset: u64,
    },
    /// Into the byte stream.
    Stream,
}

/// The receive side of queue 0 (all Send variants): sequencing plus the posted receives.
#[derive(Debug, Clone)]
pub struct SendRx {
    queue: QueueRx,
    mode: RecvMode,
    posted: VecDeque<PostedRecv>,
    current: Option<SendSink>,
}

impl SendRx {
    /// An empty receive queue in `mode`.
    pub fn new(mode: RecvMode) -> SendRx {
        SendRx {
            queue: QueueRx::default(),
            mode,
            posted: VecDeque::new(),
            current: None,
        }
    }

    /// Posts a receive.
    pub fn post(&mut self, wr_id: u64, sges: &[Sge]) {
        self.post_list(wr_id, SgeList::from_slice(sges));
    }

    /// [`SendRx::post`] of a list the caller built (no copy of it).
    pub fn post_list(&mut self, wr_id: u64, sges: SgeList) {
        let len = sge_total(&sges);
        self.posted.push_back(PostedRecv { wr_id, sges, len });
    }

    /// What a Send that finds no posted receive does.
    pub fn mode(&self) -> RecvMode {
        self.mode
    }

    /// Changes what a Send that finds no posted receive does, from the next message on (a
    /// message already being received keeps its destination).
    pub fn set_mode(&mut self, mode: RecvMode) {
        self.mode = mode;
    }

    /// Number of posted receives not yet matched to a message.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// The sequencing state.
    pub fn queue(&self) -> &QueueRx {
        &self.queue
    }

    /// Whether the next segment, if it starts a message at MO 0, goes to the stream: stream
    /// mode, no receive posted, no message under way.
    pub fn takes_stream(&self) -> bool {
        self.mode == RecvMode::Stream
            && self.current.is_none()
            && self.posted.is_empty()
            && !self.queue.in_message
            && self.queue.mo == 0
    }

    /// The posted receive a whole message of `len` bytes, starting now at MO 0 in one
    /// segment, would take: the one at the head of the queue, if it is long enough and no
    /// message is under way. `None` leaves the general steps ([`SendRx::begin_segment`]) to
    /// take it or to find the error.
    pub fn posted_for(&self, len: usize) -> Option<&PostedRecv> {
        if self.current.is_some() || self.queue.in_message || self.queue.mo != 0 {
            return None;
        }
        self.posted.front().filter(|r| len as u64 <= r.len)
    }

    /// Takes the receive [`SendRx::posted_for`] named for a whole message of `len` bytes,
    /// already placed, and uses up its MSN: what `begin_segment` and `end_segment` do for it.
    pub fn take_whole(&mut self, len: u32) -> Option<PostedRecv> {
        let r = self.posted.pop_front()?;
        self.queue.advance(len, true);
        Some(r)
    }

    /// The sink of the message in progress, if any.
    pub fn current(&self) -> Option<&SendSink> {
        self.current.as_ref()
    }

    /// Checks a Send segment header (MSN, MO, buffer, length) and, for the first segment of a
    /// message, takes its sink. Nothing is placed here.
    pub fn begin_segment(
        &mut self,
        msn: u32,
        mo: u32,
        len: u32,
    ) -> Result<SendPlacement, ProtoError> {
        self.queue.check(msn, mo)?;
        self.queue.check_len(len)?;
        if self.current.is_none() {
            let sink = match self.posted.pop_front() {
                Some(r) => SendSink::Posted(r),
                None if self.mode == RecvMode::Stream => SendSink::Stream,
                None => return Err(ProtoError::DdpNoBuffer),
            };
            self.current = Some(sink);
        }
        match self.current.as_ref() {
            Some(SendSink::Posted(r)) => {
                if u64::from(mo) + u64::from(len) > r.len {
                    return Err(ProtoError::DdpMessageTooLong);
                }
                Ok(SendPlacement::Posted {
                    offset: u64::from(mo),
                })
            }
            _ => Ok(SendPlacement::Stream),
        }
    }

    /// Accounts the segment after its payload was placed. When `last`, the message is done:
    /// returns its sink and total length.
    pub fn end_segment(&mut self, len: u32, last: bool) -> Option<(SendSink, u32)> {
        let total = self.queue.advance(len, last)?;
        let sink = self.current.take().unwrap_or(SendSink::Stream);
        Some((sink, total))
    }

    /// Consumes one zero-length message that needs no receive (the MPA v2 Send RTR): its MSN
    /// is used up, no posted receive is taken.
    pub fn skip_message(&mut self) {
        self.queue.advance(0, true);
    }

    /// Takes everything still pending (the message in progress first, then the posted
    /// receives), for flushing with an error status.
    pub fn drain(&mut self) -> Vec<PostedRecv> {
        let mut out = Vec::new();
        if let Some(SendSink::Posted(r)) = self.current.take() {
            out.push(r);
        }
        out.extend(self.posted.drain(..));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msn_mo_and_last() {
        let mut q = QueueRx::default();
        assert_eq!(q.check(1, 0), Ok(()));
        assert_eq!(q.check(2, 0), Err(ProtoError::DdpMsnRange));
        assert_eq!(q.check(1, 4), Err(ProtoError::DdpInvalidMo));
        assert_eq!(q.advance(10, false), None);
        assert!(q.in_message());
        assert_eq!(q.check(1, 10), Ok(()));
        assert_eq!(q.check(1, 9), Err(ProtoError::DdpInvalidMo));
        assert_eq!(q.advance(5, true), Some(15));
        assert_eq!(q.expected_msn(), 2);
        assert_eq!(q.check(2, 0), Ok(()));
        let mut t = QueueTx::default();
        assert_eq!((t.take(), t.take(), t.peek()), (1, 2, 3));
    }

    #[test]
    fn msn_wraps() {
        let mut q = QueueRx {
            expected_msn: u32::MAX,
            mo: 0,
            in_message: false,
        };
        q.advance(0, true);
        assert_eq!(q.expected_msn(), 0);
    }

    #[test]
    fn posted_mode_buffers() {
        let mut r = SendRx::new(RecvMode::Posted);
        assert_eq!(r.begin_segment(1, 0, 1), Err(ProtoError::DdpNoBuffer));
        r.post(7, &[Sge::new(0, 4), Sge::new(100, 4)]);
        assert_eq!(
            r.begin_segment(1, 0, 6),
            Ok(SendPlacement::Posted { offset: 0 })
        );
        assert_eq!(r.end_segment(6, false), None);
        assert_eq!(r.begin_segment(1, 6, 3), Err(ProtoError::DdpMessageTooLong));
        assert_eq!(
            r.begin_segment(1, 6, 2),
            Ok(SendPlacement::Posted { offset: 6 })
        );
        let (sink, total) = r.end_segment(2, true).unwrap();
        assert_eq!(total, 8);
        assert!(matches!(
            sink,
            SendSink::Posted(PostedRecv {
                wr_id: 7,
                len: 8,
                ..
            })
        ));
    }

    #[test]
    fn stream_mode_falls_back() {
        let mut r = SendRx::new(RecvMode::Stream);
        assert_eq!(r.begin_segment(1, 0, 1), Ok(SendPlacement::Stream));
        assert_eq!(r.end_segment(1, true), Some((SendSink::Stream, 1)));
        r.post(1, &[Sge::new(0, 8)]);
        assert_eq!(
            r.begin_segment(2, 0, 1),
            Ok(SendPlacement::Posted { offset: 0 })
        );
        assert_eq!(r.drain().len(), 1);
    }
}
