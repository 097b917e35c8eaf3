//! The DDP socket options of `sockopt_ext.h` (`DDP_CRC`, `DDP_MARKERS`, `DDP_MARKERS_ALLOW`,
//! `DDP_MPA_REV`,
//! `DDP_PRIVATE_DATA`, `DDP_IRD`, `DDP_ORD`, `DDP_P2P`, `DDP_PD`, `DDP_ZERO_BASED_TO`,
//! `DDP_MPA_TIMEOUT_MS`) and their translation into a `ddp_proto` [`MpaConfig`].
//!
//! Choices: we can always insert markers, so a peer's M flag is honoured by default
//! (`allow_markers_tx`); `DDP_MARKERS_ALLOW = 0` refuses it (the responder rejects the
//! Request, the initiator fails: what siw does, as it cannot send markers); CRC is not strict (on if either side asks, RFC 5044); private data
//! may use the full 512 bytes RFC 5044 allows (siw accepts 256: keep it shorter towards siw).
//! `DDP_P2P = 0` means off on both sides: an initiator does not ask for peer-to-peer mode and
//! a responder refuses it; otherwise the bits are the RTR kinds offered (initiator) or
//! accepted (responder).

use core::time::Duration;

use ddp_proto::mpa::startup::{MpaConfig, RtrKinds};
use ddp_proto::wire::mpa::MAX_PRIVATE_DATA;

/// `DDP_RTR_WRITE`.
pub const RTR_WRITE: u32 = 0x1;
/// `DDP_RTR_READ`.
pub const RTR_READ: u32 = 0x2;
/// `DDP_RTR_SEND`.
pub const RTR_SEND: u32 = 0x4;

/// Largest IRD/ORD (`sockopt_ext.h`: 16383).
pub const MAX_IRD_ORD: u16 = 16383;

/// The options of one DDP socket (defaults as in `sockopt_ext.h`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `DDP_CRC` (default on).
    pub crc: bool,
    /// `DDP_MARKERS`: ask for markers on what we receive (default off).
    pub markers: bool,
    /// `DDP_MARKERS_ALLOW`: honour a peer's request for markers on what we send (default on).
    pub allow_markers: bool,
    /// `DDP_MPA_REV` (1 or 2, default 2).
    pub mpa_rev: u8,
    /// `DDP_PRIVATE_DATA` (≤ 512 bytes, ≤ 508 with revision 2).
    pub private_data: Vec<u8>,
    /// `DDP_IRD` (default 16).
    pub ird: u16,
    /// `DDP_ORD` (default 16).
    pub ord: u16,
    /// `DDP_P2P`: RTR kinds offered/accepted; empty = peer-to-peer off.
    pub p2p: RtrKinds,
    /// `DDP_PD`: 0 = a protection domain of the socket's own; else shared by id.
    pub pd: u32,
    /// `DDP_ZERO_BASED_TO`: tagged offsets of our regions are offsets into the region.
    pub zero_based_to: bool,
    /// `DDP_MPA_TIMEOUT_MS` (default 10 s).
    pub mpa_timeout: Duration,
    /// Leave the TCP socket's `TCP_NODELAY` as the application set it (Nagle's algorithm on
    /// unless it asked otherwise, as for a TCP socket) while the socket carries only the plain
    /// byte stream; the first extension call, or a Read Response owed, sets `TCP_NODELAY` for
    /// good (a posted request goes out at once). The preload sets it: an unmodified program
    /// that streams small writes gets TCP's coalescing of them. Off (the default): the
    /// engine sets `TCP_NODELAY` when the socket is made.
    pub tcp_nagle: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            crc: true,
            markers: false,
            allow_markers: true,
            mpa_rev: 2,
            private_data: Vec::new(),
            ird: 16,
            ord: 16,
            p2p: RtrKinds::NONE,
            pd: 0,
            zero_based_to: false,
            mpa_timeout: Duration::from_secs(10),
            tcp_nagle: false,
        }
    }
}

/// `DDP_RTR_*` bits → [`RtrKinds`].
pub fn rtr_from_bits(bits: u32) -> RtrKinds {
    RtrKinds {
        write: bits & RTR_WRITE != 0,
        read: bits & RTR_READ != 0,
        send: bits & RTR_SEND != 0,
    }
}

/// [`RtrKinds`] → `DDP_RTR_*` bits.
pub fn rtr_to_bits(k: RtrKinds) -> u32 {
    (if k.write { RTR_WRITE } else { 0 })
        | (if k.read { RTR_READ } else { 0 })
        | (if k.send { RTR_SEND } else { 0 })
}

impl Options {
    /// The MPA configuration for the initiator (`initiator`) or the responder; `None` if the
    /// options cannot be carried (bad revision, P2P with revision 1, IRD/ORD or private data
    /// too large): the caller reports `EINVAL`.
    pub fn mpa_config(&self, initiator: bool) -> Option<MpaConfig> {
        if self.ird > MAX_IRD_ORD || self.ord > MAX_IRD_ORD {
            return None;
        }
        let cfg = MpaConfig {
            revision: self.mpa_rev,
            want_crc: self.crc,
            crc_strict: false,
            markers_rx: self.markers,
            allow_markers_tx: self.allow_markers,
            ird: self.ird,
            ord: self.ord,
            p2p: initiator && !self.p2p.is_empty(),
            rtr: self.p2p,
            private_data: self.private_data.clone(),
            max_tx_private_data: MAX_PRIVATE_DATA,
            request_timeout: self.mpa_timeout,
            reply_timeout: self.mpa_timeout,
        };
        cfg.validate().ok()?;
        Some(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let o = Options::default();
        let c = o.mpa_config(true).unwrap();
        assert!(c.want_crc && !c.markers_rx && !c.p2p && c.revision == 2);
        assert!(c.allow_markers_tx);
        let refuse = Options {
            allow_markers: false,
            ..Options::default()
        };
        assert!(!refuse.mpa_config(false).unwrap().allow_markers_tx);
        let p2p = Options {
            p2p: rtr_from_bits(RTR_WRITE | RTR_READ),
            ..Options::default()
        };
        assert!(p2p.mpa_config(true).unwrap().p2p);
        assert!(!p2p.mpa_config(false).unwrap().p2p);
        let bad = Options { mpa_rev: 1, ..p2p };
        assert!(bad.mpa_config(true).is_none());
        assert_eq!(rtr_to_bits(rtr_from_bits(7)), 7);
        let long = Options {
            private_data: vec![0; 509],
            ..Options::default()
        };
        assert!(long.mpa_config(true).is_none());
    }
}
