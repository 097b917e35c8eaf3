//! Completions and connection information in the layouts of `sockopt_ext.h`.
//!
//! [`Wc`] is `struct ddp_wc` and [`ConnInfo`] is `struct ddp_conn_info`, field for field
//! (`#[repr(C)]`), so the preload copies them out as they are. [`wc_from_completion`] is the
//! one place where a `ddp_proto` completion status becomes a `DDP_WC_*` value:
//!
//! | `WcStatus` | `DDP_WC_*` | `vendor_err` |
//! |---|---|---|
//! | `Success` | `SUCCESS` | 0 |
//! | `Flushed` | `FLUSH_ERR` | the Terminate sent/received, if any |
//! | `LocalLength` | `LOC_LEN_ERR` | the Terminate we sent |
//! | `LocalProtection` | `LOC_PROT_ERR` | 0 (nothing reached the wire) |
//! | `RemoteInvalidate`, `Fatal(_)` | `FATAL_ERR` | the Terminate we sent |
//! | `RemoteTerminated` | `REM_ACCESS_ERR` for a remote-protection / tagged-buffer code, else `REM_OP_ERR` | the Terminate received |
//! | `Unsupported` | `FATAL_ERR` (our choice: the header has no closer value) | 0 |
//!
//! `vendor_err` is `layer << 16 | etype << 8 | ecode`.

use std::collections::VecDeque;

use ddp_proto::conn::{Completion, WcOpcode, WcStatus};
use ddp_proto::error::{TermCode, TermLayer, ddp_etype, rdmap_etype};

/// `DDP_WC_*` status values.
pub mod status {
    /// Done.
    pub const SUCCESS: u32 = 0;
    /// The connection ended before this request completed.
    pub const FLUSH_ERR: u32 = 1;
    /// Incoming message longer than the posted receive.
    pub const LOC_LEN_ERR: u32 = 2;
    /// A local buffer could not be accessed.
    pub const LOC_PROT_ERR: u32 = 3;
    /// The peer refused access.
    pub const REM_ACCESS_ERR: u32 = 4;
    /// The peer reported another error.
    pub const REM_OP_ERR: u32 = 5;
    /// Protocol error detected here.
    pub const FATAL_ERR: u32 = 6;
}

/// `DDP_WC_OP_*` values.
pub mod opcode {
    /// A Send we posted.
    pub const SEND: u32 = 1;
    /// An RDMA Write we posted.
    pub const WRITE: u32 = 2;
    /// An RDMA Read we posted.
    pub const READ: u32 = 3;
    /// A receive.
    pub const RECV: u32 = 4;
}

/// `DDP_WC_WITH_INV`.
pub const WC_WITH_INV: u32 = 0x1;
/// `DDP_WC_SOLICITED`.
pub const WC_SOLICITED: u32 = 0x2;

/// `struct ddp_wc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wc {
    /// The caller's work request id.
    pub wr_id: u64,
    /// `DDP_WC_*` status.
    pub status: u32,
    /// `DDP_WC_OP_*`.
    pub opcode: u32,
    /// Bytes received or transferred.
    pub byte_len: u32,
    /// `DDP_WC_WITH_INV`, `DDP_WC_SOLICITED`.
    pub flags: u32,
    /// With `DDP_WC_WITH_INV`: the STag the peer invalidated here.
    pub inv_stag: u32,
    /// With an error status: `layer << 16 | etype << 8 | ecode` of the Terminate.
    pub vendor_err: u32,
}

/// `layer << 16 | etype << 8 | ecode`.
pub fn vendor_err(code: TermCode) -> u32 {
    u32::from(code.layer.to_raw()) << 16 | u32::from(code.etype) << 8 | u32::from(code.ecode)
}

/// Whether a Terminate code reports a refused memory access (remote protection error).
pub fn is_access_error(code: TermCode) -> bool {
    matches!(
        (code.layer, code.etype),
        (TermLayer::Rdmap, rdmap_etype::REMOTE_PROTECTION)
            | (TermLayer::Ddp, ddp_etype::TAGGED_BUF)
    )
}

/// The last Terminate of a connection and who sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastTerminate {
    /// We sent it.
    Sent(TermCode),
    /// The peer sent it.
    Received(TermCode),
}

impl LastTerminate {
    /// The code.
    pub fn code(self) -> TermCode {
        match self {
            LastTerminate::Sent(c) | LastTerminate::Received(c) => c,
        }
    }
}

/// Maps a protocol completion (see the module docs).
pub fn wc_from_completion(c: &Completion, term: Option<LastTerminate>) -> Wc {
    let term_err = term.map_or(0, |t| vendor_err(t.code()));
    let (status, verr) = match c.status {
        WcStatus::Success => (status::SUCCESS, 0),
        WcStatus::Flushed => (status::FLUSH_ERR, term_err),
        WcStatus::LocalLength => (status::LOC_LEN_ERR, term_err),
        WcStatus::LocalProtection => (status::LOC_PROT_ERR, 0),
        WcStatus::RemoteInvalidate => (status::FATAL_ERR, term_err),
        WcStatus::Fatal(e) => (status::FATAL_ERR, vendor_err(e.term_code())),
        WcStatus::RemoteTerminated => match term {
            Some(LastTerminate::Received(code)) if is_access_error(code) => {
                (status::REM_ACCESS_ERR, vendor_err(code))
            }
            _ => (status::REM_OP_ERR, term_err),
        },
        WcStatus::Unsupported => (status::FATAL_ERR, 0),
    };
    let opcode = match c.opcode {
        WcOpcode::Send => opcode::SEND,
        WcOpcode::Write => opcode::WRITE,
        WcOpcode::Read => opcode::READ,
        WcOpcode::Recv => opcode::RECV,
    };
    let mut flags = 0;
    if c.inv_stag.is_some() {
        flags |= WC_WITH_INV;
    }
    if c.solicited {
        flags |= WC_SOLICITED;
    }
    Wc {
        wr_id: c.wr_id,
        status,
        opcode,
        byte_len: c.byte_len.min(u64::from(u32::MAX)) as u32,
        flags,
        inv_stag: c.inv_stag.map_or(0, |s| s.0),
        vendor_err: verr,
    }
}

/// A completion queue: the completions of one socket, in order.
#[derive(Debug, Default)]
pub struct Cq {
    queue: VecDeque<Wc>,
}

impl Cq {
    /// Appends; returns whether the queue was empty before (the driver then signals its
    /// eventfd).
    pub fn push(&mut self, wc: Wc) -> bool {
        let was_empty = self.queue.is_empty();
        self.queue.push_back(wc);
        was_empty
    }

    /// Moves up to `out.len()` completions into `out`; returns how many, and whether the
    /// queue is now empty.
    pub fn pop_into(&mut self, out: &mut [Wc]) -> (usize, bool) {
        let n = out.len().min(self.queue.len());
        for (slot, wc) in out.iter_mut().zip(self.queue.drain(..n)) {
            *slot = wc;
        }
        (n, self.queue.is_empty())
    }

    /// Completions pending.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether none is pending.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// `DDP_STATE_*` values.
pub mod state {
    /// MPA exchange under way.
    pub const CONNECTING: u8 = 1;
    /// Connected.
    pub const RTS: u8 = 2;
    /// Closing.
    pub const CLOSING: u8 = 3;
    /// A Terminate was sent or received, or the stream broke.
    pub const ERROR: u8 = 4;
    /// Closed.
    pub const CLOSED: u8 = 5;
}

/// `struct ddp_conn_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnInfo {
    /// Negotiated MPA revision.
    pub mpa_rev: u8,
    /// 1 if FPDUs carry CRC-32C.
    pub crc: u8,
    /// 1 if we send markers.
    pub markers_tx: u8,
    /// 1 if the peer sends markers.
    pub markers_rx: u8,
    /// 1 if peer-to-peer mode.
    pub p2p: u8,
    /// `DDP_RTR_*` kind used in P2P mode.
    pub rtr: u8,
    /// 1 if this side sent the MPA Request.
    pub initiator: u8,
    /// `DDP_STATE_*`.
    pub state: u8,
    /// Negotiated inbound read depth.
    pub ird: u32,
    /// Negotiated outbound read depth.
    pub ord: u32,
    /// Largest ULPDU we send.
    pub mulpdu: u32,
    /// Protection domain id.
    pub pd: u32,
    /// Last Terminate: layer.
    pub term_layer: u8,
    /// Last Terminate: error type.
    pub term_etype: u8,
    /// Last Terminate: error code.
    pub term_ecode: u8,
    /// 1 = we sent it, 2 = we received it, 0 = none.
    pub term_sent: u8,
    /// Zero (explicit padding, as in the header).
    pub reserved0: u32,
    /// Payload bytes sent: Sends (stream data included), RDMA Writes, and the Read Responses
    /// that served the peer's RDMA Reads.
    pub bytes_tx: u64,
    /// Payload bytes received: Sends (delivered to the stream or a posted receive), and the
    /// tagged payload placed here (the peer's RDMA Writes, the responses to our RDMA Reads).
    /// One side's `bytes_tx` equals the other's `bytes_rx` once everything has arrived.
    pub bytes_rx: u64,
    /// FPDUs sent.
    pub fpdus_tx: u64,
    /// FPDUs received.
    pub fpdus_rx: u64,
    /// Bytes read from TCP straight into their destination memory.
    pub placed_direct: u64,
    /// Zero.
    pub reserved: [u64; 4],
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddp_proto::ddp::STag;
    use ddp_proto::error::ProtoError;

    fn c(status: WcStatus) -> Completion {
        Completion {
            wr_id: 7,
            opcode: WcOpcode::Recv,
            status,
            byte_len: 5,
            inv_stag: Some(STag(0x1234)),
            solicited: true,
        }
    }

    #[test]
    fn layouts_match_the_header() {
        assert_eq!(core::mem::size_of::<Wc>(), 32);
        assert_eq!(core::mem::size_of::<ConnInfo>(), 104);
        assert_eq!(core::mem::offset_of!(ConnInfo, term_layer), 24);
        assert_eq!(core::mem::offset_of!(ConnInfo, reserved0), 28);
        assert_eq!(core::mem::offset_of!(ConnInfo, bytes_tx), 32);
        assert_eq!(core::mem::offset_of!(ConnInfo, placed_direct), 64);
    }

    #[test]
    fn status_mapping() {
        let w = wc_from_completion(&c(WcStatus::Success), None);
        assert_eq!((w.status, w.opcode, w.flags, w.inv_stag), (0, 4, 3, 0x1234));
        let e = ProtoError::DdpInvalidStag;
        let w = wc_from_completion(&c(WcStatus::Fatal(e)), None);
        assert_eq!((w.status, w.vendor_err), (status::FATAL_ERR, 0x01_01_00));
        let acc = LastTerminate::Received(ProtoError::RdmapAccessRights.term_code());
        let w = wc_from_completion(&c(WcStatus::RemoteTerminated), Some(acc));
        assert_eq!(
            (w.status, w.vendor_err),
            (status::REM_ACCESS_ERR, 0x00_01_02)
        );
        let op = LastTerminate::Received(ProtoError::DdpNoBuffer.term_code());
        let w = wc_from_completion(&c(WcStatus::RemoteTerminated), Some(op));
        assert_eq!(w.status, status::REM_OP_ERR);
        let w = wc_from_completion(&c(WcStatus::Flushed), None);
        assert_eq!((w.status, w.vendor_err), (status::FLUSH_ERR, 0));
    }

    #[test]
    fn cq_reports_empty_transitions() {
        let mut q = Cq::default();
        assert!(q.push(Wc::default()));
        assert!(!q.push(Wc::default()));
        let mut out = [Wc::default(); 1];
        assert_eq!(q.pop_into(&mut out), (1, false));
        assert_eq!(q.pop_into(&mut out), (1, true));
        assert_eq!(q.pop_into(&mut out), (0, true));
    }
}
