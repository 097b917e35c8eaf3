//! MPA Request/Reply frames (RFC 5044 §7.1, RFC 6581): the view [`MpaFramePacket`], the
//! repr [`MpaFrameRepr`], and the RFC 6581 IRD/ORD words [`MpaV2Params`].
//!
//! What it does: reads and writes the 20-byte header (16-byte key, flags, revision, private data
//! length) and the private data that follows, and the two 16-bit words that revision 2 puts at
//! the start of the private data. Unknown flag bits and every bit of the IRD/ORD words are kept,
//! so parse → emit reproduces the bytes exactly.
//!
//! What it refuses to do: decide anything. Whether a revision, a flag combination or an IRD is
//! acceptable is the job of [`crate::mpa::startup`]; this module only rejects what cannot be
//! represented (short buffer, wrong key, a private data length over the RFC's 512 bytes).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Key: "MPA ID Req Frame" or "MPA ID Rep Frame" (16 bytes)     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |M|C|R|E| Res   |     Rev       |          PD_Length            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Private Data (PD_Length bytes, at most 512)                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! RFC 6581 revision 2, first 4 bytes of the private data when E is set:
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |P|S|           IRD             |W|R|           ORD             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! M (0x80): the sender wants markers on the data it *receives*. C (0x40): the sender wants CRC.
//! R (0x20): the Reply rejects the connection (not used in a Request). E (0x10): RFC 6581's
//! enhanced connection establishment — the IRD/ORD words are present; siw calls it
//! `MPA_RR_FLAG_ENHANCED`, cxgb4 `MPA_ENHANCED_RDMA_CONN`, and Wireshark 4.0 shows it as
//! "Reserved: 0x10". Res (0x0f): reserved (RFC 5044: sent as zero, not checked); kept as read.
//! siw uses 0x08 for its non-standard `MPA_RR_FLAG_GSO_EXP`.
//!
//! P: peer-to-peer mode. S: the initiator offers / the responder picked a zero-length *Send* as
//! the ready-to-receive (RTR) message (siw `MPA_V2_ZERO_LENGTH_RTR`, cxgb4
//! `MPA_V2_ZERO_LEN_FPDU_RTR`). W / R: zero-length RDMA Write / RDMA Read RTR. IRD and ORD are
//! 14 bits each. All multi-byte fields are big-endian. The bit layout is checked against siw
//! (`siw_cm.c`), cxgb4 (`iw_cxgb4.h`: `MPA_V2_PEER2PEER_MODEL` 0x8000, `MPA_V2_ZERO_LEN_FPDU_RTR`
//! 0x4000, `MPA_V2_RDMA_WRITE_RTR` 0x8000, `MPA_V2_RDMA_READ_RTR` 0x4000, mask 0x3FFF) and the
//! captures.

use core::fmt;

/// The key that opens an MPA Request frame (RFC 5044 §7.1.1).
pub const MPA_KEY_REQ: [u8; 16] = *b"MPA ID Req Frame";
/// The key that opens an MPA Reply frame (RFC 5044 §7.1.1).
pub const MPA_KEY_REP: [u8; 16] = *b"MPA ID Rep Frame";

/// Length of the fixed part of a Request/Reply frame (key, flags, revision, PD length).
pub const HEADER_LEN: usize = 20;
/// The most private data a frame may carry (RFC 5044 §7.1.1).
pub const MAX_PRIVATE_DATA: usize = 512;
/// The most private data siw accepts or sends (`MPA_MAX_PRIVDATA` = `RDMA_MAX_PRIVATE_DATA`
/// = 256, *including* the 4 bytes of IRD/ORD words); it drops the connection on more.
pub const SIW_MAX_PRIVATE_DATA: usize = 256;
/// Length of the RFC 6581 IRD/ORD words at the start of revision-2 private data.
pub const V2_PARAMS_LEN: usize = 4;

/// Flag M: the sender wants markers on the stream it receives.
pub const FLAG_MARKERS: u8 = 0x80;
/// Flag C: the sender wants CRC-32C on FPDUs (in both directions if either side sets it).
pub const FLAG_CRC: u8 = 0x40;
/// Flag R: the Reply rejects the connection.
pub const FLAG_REJECT: u8 = 0x20;
/// Flag E (RFC 6581): the private data starts with the IRD/ORD words.
pub const FLAG_ENHANCED: u8 = 0x10;
/// The bits RFC 5044/6581 leave reserved (siw's non-standard GSO bit 0x08 is one of them).
pub const FLAG_RESERVED_MASK: u8 = 0x0f;

/// Largest IRD or ORD value the 14-bit fields can hold.
pub const MAX_IRD_ORD: u16 = 0x3fff;

mod field {
    use core::ops::Range;

    pub const KEY: Range<usize> = 0..16;
    pub const FLAGS: usize = 16;
    pub const REV: usize = 17;
    pub const PD_LEN: Range<usize> = 18..20;
    pub const PRIVATE_DATA: usize = 20;

    pub const V2_IRD: Range<usize> = 0..2;
    pub const V2_ORD: Range<usize> = 2..4;
}

/// Why bytes could not be read as an MPA frame.
///
/// These are representation errors; the startup state machine turns them into the protocol
/// outcome (`InvalidRequestReply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpaWireError {
    /// The buffer is shorter than the header, or than header plus private data.
    Truncated,
    /// The first 16 bytes are neither [`MPA_KEY_REQ`] nor [`MPA_KEY_REP`].
    BadKey,
    /// PD_Length exceeds [`MAX_PRIVATE_DATA`].
    PrivateDataTooLong {
        /// The PD_Length field as received.
        len: u16,
    },
}

impl fmt::Display for MpaWireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MpaWireError::Truncated => write!(f, "MPA frame truncated"),
            MpaWireError::BadKey => write!(f, "MPA frame key is neither Request nor Reply"),
            MpaWireError::PrivateDataTooLong { len } => {
                write!(
                    f,
                    "MPA private data length {len} exceeds {MAX_PRIVATE_DATA}"
                )
            }
        }
    }
}

impl std::error::Error for MpaWireError {}

/// Request or Reply, as told by the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpaFrameKind {
    /// "MPA ID Req Frame", sent by the initiator.
    Request,
    /// "MPA ID Rep Frame", sent by the responder.
    Reply,
}

impl MpaFrameKind {
    /// The 16-byte key of this kind of frame.
    pub const fn key(self) -> &'static [u8; 16] {
        match self {
            MpaFrameKind::Request => &MPA_KEY_REQ,
            MpaFrameKind::Reply => &MPA_KEY_REP,
        }
    }

    /// The kind whose key `key` is, if any.
    pub fn from_key(key: &[u8]) -> Option<Self> {
        if key == MPA_KEY_REQ {
            Some(MpaFrameKind::Request)
        } else if key == MPA_KEY_REP {
            Some(MpaFrameKind::Reply)
        } else {
            None
        }
    }
}

/// A read/write view of an MPA Request or Reply frame in a buffer.
///
/// The buffer may hold more than the frame (the FPDU stream that follows); accessors stop at
/// `HEADER_LEN + pd_len`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaFramePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> MpaFramePacket<T> {
    /// Wraps a buffer without checking its length; accessors panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        MpaFramePacket { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Self, MpaWireError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the header and all of the private data it announces.
    pub fn check_len(&self) -> Result<(), MpaWireError> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.frame_len() {
            Err(MpaWireError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 16-byte key.
    pub fn key(&self) -> [u8; 16] {
        let mut key = [0u8; 16];
        key.copy_from_slice(&self.buffer.as_ref()[field::KEY]);
        key
    }

    /// The whole flags byte (M, C, R, E and the reserved bits).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Flag M: the sender wants markers on what it receives.
    pub fn markers(&self) -> bool {
        self.flags() & FLAG_MARKERS != 0
    }

    /// Flag C: the sender wants CRC.
    pub fn crc(&self) -> bool {
        self.flags() & FLAG_CRC != 0
    }

    /// Flag R: the connection is rejected (Reply only).
    pub fn reject(&self) -> bool {
        self.flags() & FLAG_REJECT != 0
    }

    /// Flag E (RFC 6581): the IRD/ORD words open the private data.
    pub fn enhanced(&self) -> bool {
        self.flags() & FLAG_ENHANCED != 0
    }

    /// The reserved flag bits (`flags & 0x0f`), as received.
    pub fn reserved(&self) -> u8 {
        self.flags() & FLAG_RESERVED_MASK
    }

    /// The revision byte.
    pub fn revision(&self) -> u8 {
        self.buffer.as_ref()[field::REV]
    }

    /// The PD_Length field.
    pub fn pd_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PD_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Length of the whole frame: header plus announced private data.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + usize::from(self.pd_len())
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> MpaFramePacket<&'a T> {
    /// The private data (exactly `pd_len` bytes).
    pub fn private_data(&self) -> &'a [u8] {
        let end = self.frame_len();
        &self.buffer.as_ref()[field::PRIVATE_DATA..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MpaFramePacket<T> {
    /// Writes the key.
    pub fn set_key(&mut self, key: &[u8; 16]) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(key);
    }

    /// Writes the whole flags byte.
    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[field::FLAGS] = flags;
    }

    fn set_flag(&mut self, bit: u8, on: bool) {
        let flags = self.flags();
        self.set_flags(if on { flags | bit } else { flags & !bit });
    }

    /// Sets or clears flag M.
    pub fn set_markers(&mut self, on: bool) {
        self.set_flag(FLAG_MARKERS, on);
    }

    /// Sets or clears flag C.
    pub fn set_crc(&mut self, on: bool) {
        self.set_flag(FLAG_CRC, on);
    }

    /// Sets or clears flag R.
    pub fn set_reject(&mut self, on: bool) {
        self.set_flag(FLAG_REJECT, on);
    }

    /// Sets or clears flag E.
    pub fn set_enhanced(&mut self, on: bool) {
        self.set_flag(FLAG_ENHANCED, on);
    }

    /// Writes the reserved bits (only the low 4 bits of `bits` are used).
    pub fn set_reserved(&mut self, bits: u8) {
        let flags = self.flags() & !FLAG_RESERVED_MASK;
        self.set_flags(flags | (bits & FLAG_RESERVED_MASK));
    }

    /// Writes the revision byte.
    pub fn set_revision(&mut self, rev: u8) {
        self.buffer.as_mut()[field::REV] = rev;
    }

    /// Writes PD_Length.
    pub fn set_pd_len(&mut self, len: u16) {
        self.buffer.as_mut()[field::PD_LEN].copy_from_slice(&len.to_be_bytes());
    }

    /// The private data, mutable (exactly `pd_len` bytes).
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let end = self.frame_len();
        &mut self.buffer.as_mut()[field::PRIVATE_DATA..end]
    }
}

/// A parsed MPA Request or Reply frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MpaFrameRepr<'a> {
    /// Request or Reply (the key).
    pub kind: MpaFrameKind,
    /// Flag M: the sender wants markers on what it receives.
    pub markers: bool,
    /// Flag C: the sender wants CRC.
    pub crc: bool,
    /// Flag R: reject (meaningful in a Reply only; kept as sent in a Request).
    pub reject: bool,
    /// Flag E (RFC 6581): the private data begins with [`MpaV2Params`].
    pub enhanced: bool,
    /// The reserved flag bits (`0x0f`), kept as received.
    pub reserved: u8,
    /// The revision byte (RFC 5044: 1; RFC 6581: 2), any value kept.
    pub revision: u8,
    /// All private data, including the IRD/ORD words when `enhanced`.
    pub private_data: &'a [u8],
}

impl<'a> MpaFrameRepr<'a> {
    /// Parses a frame. The buffer must hold the whole frame; bytes after it are ignored.
    ///
    /// Errors: [`MpaWireError::Truncated`] (short buffer), [`MpaWireError::BadKey`],
    /// [`MpaWireError::PrivateDataTooLong`] (PD_Length > 512, RFC 5044 §7.1.1).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &MpaFramePacket<&'a T>,
    ) -> Result<MpaFrameRepr<'a>, MpaWireError> {
        if packet.buffer.as_ref().len() < HEADER_LEN {
            return Err(MpaWireError::Truncated);
        }
        let kind = MpaFrameKind::from_key(&packet.key()).ok_or(MpaWireError::BadKey)?;
        let pd_len = packet.pd_len();
        if usize::from(pd_len) > MAX_PRIVATE_DATA {
            return Err(MpaWireError::PrivateDataTooLong { len: pd_len });
        }
        packet.check_len()?;
        Ok(MpaFrameRepr {
            kind,
            markers: packet.markers(),
            crc: packet.crc(),
            reject: packet.reject(),
            enhanced: packet.enhanced(),
            reserved: packet.reserved(),
            revision: packet.revision(),
            private_data: packet.private_data(),
        })
    }

    /// Parses a frame at the start of `bytes` (convenience over [`MpaFramePacket`]).
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<MpaFrameRepr<'a>, MpaWireError> {
        Self::parse(&MpaFramePacket::new_unchecked(bytes))
    }

    /// The flags byte this repr emits.
    pub fn flags(&self) -> u8 {
        let mut flags = self.reserved & FLAG_RESERVED_MASK;
        if self.markers {
            flags |= FLAG_MARKERS;
        }
        if self.crc {
            flags |= FLAG_CRC;
        }
        if self.reject {
            flags |= FLAG_REJECT;
        }
        if self.enhanced {
            flags |= FLAG_ENHANCED;
        }
        flags
    }

    /// The IRD/ORD words, if `enhanced` and the private data is long enough.
    pub fn v2_params(&self) -> Option<MpaV2Params> {
        if self.enhanced {
            MpaV2Params::parse(self.private_data).ok()
        } else {
            None
        }
    }

    /// The private data after the IRD/ORD words (all of it when not `enhanced`) — what the
    /// ULP sees (siw hides the words the same way in `siw_cm_upcall`).
    pub fn ulp_private_data(&self) -> &'a [u8] {
        if self.enhanced && self.private_data.len() >= V2_PARAMS_LEN {
            &self.private_data[V2_PARAMS_LEN..]
        } else {
            self.private_data
        }
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.private_data.len()
    }

    /// Writes the frame at the start of `packet`'s buffer, which must hold
    /// [`buffer_len`](Self::buffer_len) bytes.
    ///
    /// Panics if the private data is longer than a 16-bit length can say; callers keep it to
    /// [`MAX_PRIVATE_DATA`] (the startup machine checks this when it is configured).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut MpaFramePacket<T>) {
        let pd_len = u16::try_from(self.private_data.len())
            .expect("MPA private data longer than 65535 bytes");
        packet.set_key(self.kind.key());
        packet.set_flags(self.flags());
        packet.set_revision(self.revision);
        packet.set_pd_len(pd_len);
        packet.private_data_mut().copy_from_slice(self.private_data);
    }

    /// The frame as a new byte vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut buf = vec![0u8; self.buffer_len()];
        self.emit(&mut MpaFramePacket::new_unchecked(&mut buf[..]));
        buf
    }
}

/// The RFC 6581 IRD/ORD words that open revision-2 private data (when flag E is set).
///
/// IRD word: bit 15 P2P, bit 14 zero-length Send RTR, bits 13..0 IRD.
/// ORD word: bit 15 zero-length RDMA Write RTR, bit 14 zero-length RDMA Read RTR, bits 13..0 ORD.
/// In a Request the RTR bits are the kinds the initiator offers; in a Reply, the one the
/// responder picked. Every bit is represented, so parse → emit is exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct MpaV2Params {
    /// Inbound RDMA Read queue depth (14 bits).
    pub ird: u16,
    /// Outbound RDMA Read queue depth (14 bits).
    pub ord: u16,
    /// Peer-to-peer mode: an RTR message follows the Reply (IRD word bit 15).
    pub p2p: bool,
    /// Zero-length Send as RTR (IRD word bit 14; siw `MPA_V2_ZERO_LENGTH_RTR`, cxgb4
    /// `MPA_V2_ZERO_LEN_FPDU_RTR`).
    pub send_rtr: bool,
    /// Zero-length RDMA Write as RTR (ORD word bit 15).
    pub write_rtr: bool,
    /// Zero-length RDMA Read as RTR (ORD word bit 14).
    pub read_rtr: bool,
}

const V2_BIT15: u16 = 0x8000;
const V2_BIT14: u16 = 0x4000;

impl MpaV2Params {
    /// Parses the first 4 bytes of `private_data`; more bytes are ignored.
    pub fn parse(private_data: &[u8]) -> Result<MpaV2Params, MpaWireError> {
        if private_data.len() < V2_PARAMS_LEN {
            return Err(MpaWireError::Truncated);
        }
        let ird_word = u16::from_be_bytes([private_data[0], private_data[1]]);
        let ord_word = u16::from_be_bytes([private_data[2], private_data[3]]);
        Ok(MpaV2Params {
            ird: ird_word & MAX_IRD_ORD,
            ord: ord_word & MAX_IRD_ORD,
            p2p: ird_word & V2_BIT15 != 0,
            send_rtr: ird_word & V2_BIT14 != 0,
            write_rtr: ord_word & V2_BIT15 != 0,
            read_rtr: ord_word & V2_BIT14 != 0,
        })
    }

    /// The IRD word (IRD masked to 14 bits).
    pub fn ird_word(&self) -> u16 {
        let mut w = self.ird & MAX_IRD_ORD;
        if self.p2p {
            w |= V2_BIT15;
        }
        if self.send_rtr {
            w |= V2_BIT14;
        }
        w
    }

    /// The ORD word (ORD masked to 14 bits).
    pub fn ord_word(&self) -> u16 {
        let mut w = self.ord & MAX_IRD_ORD;
        if self.write_rtr {
            w |= V2_BIT15;
        }
        if self.read_rtr {
            w |= V2_BIT14;
        }
        w
    }

    /// Always [`V2_PARAMS_LEN`].
    pub const fn buffer_len(&self) -> usize {
        V2_PARAMS_LEN
    }

    /// Writes the two words into the first 4 bytes of `buf` (IRD and ORD masked to 14 bits).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[field::V2_IRD].copy_from_slice(&self.ird_word().to_be_bytes());
        buf[field::V2_ORD].copy_from_slice(&self.ord_word().to_be_bytes());
    }

    /// The two words as bytes.
    pub fn to_bytes(&self) -> [u8; V2_PARAMS_LEN] {
        let mut b = [0u8; V2_PARAMS_LEN];
        self.emit(&mut b);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// siw's default rev-2 Request (rping-default.decode.txt, frame 6, TCP payload).
    const SIW_REQ_DEFAULT: [u8; 24] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, 0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01,
    ];
    /// siw's reject (rping-crc-strict-mismatch.decode.txt, frame 8).
    const SIW_REP_REJECT: [u8; 24] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, 0x30, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parses_siw_default_request() {
        let repr = MpaFrameRepr::parse_bytes(&SIW_REQ_DEFAULT).unwrap();
        assert_eq!(repr.kind, MpaFrameKind::Request);
        assert!(!repr.markers && !repr.crc && !repr.reject && repr.enhanced);
        assert_eq!((repr.reserved, repr.revision), (0, 2));
        assert_eq!(repr.private_data, &[0, 1, 0, 1]);
        let v2 = repr.v2_params().unwrap();
        assert_eq!((v2.ird, v2.ord, v2.p2p), (1, 1, false));
        assert!(repr.ulp_private_data().is_empty());
        assert_eq!(repr.to_bytes(), SIW_REQ_DEFAULT);
    }

    #[test]
    fn parses_siw_reject() {
        let repr = MpaFrameRepr::parse_bytes(&SIW_REP_REJECT).unwrap();
        assert_eq!(repr.kind, MpaFrameKind::Reply);
        assert!(repr.reject && repr.enhanced && !repr.crc && !repr.markers);
        assert_eq!(repr.flags(), 0x30);
        assert_eq!(repr.to_bytes(), SIW_REP_REJECT);
    }

    #[test]
    fn view_accessors_and_setters() {
        let mut buf = [0u8; 26];
        let mut p = MpaFramePacket::new_unchecked(&mut buf[..]);
        p.set_key(&MPA_KEY_REP);
        p.set_markers(true);
        p.set_crc(true);
        p.set_reject(true);
        p.set_enhanced(true);
        p.set_reserved(0xfb);
        p.set_revision(7);
        p.set_pd_len(6);
        p.private_data_mut().copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        assert_eq!(p.flags(), 0xfb);
        p.set_crc(false);
        assert_eq!(p.flags(), 0xbb);
        assert_eq!(p.reserved(), 0x0b);
        assert_eq!(p.frame_len(), 26);
        let p = MpaFramePacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.key(), MPA_KEY_REP);
        assert!(p.markers() && !p.crc() && p.reject() && p.enhanced());
        assert_eq!(p.revision(), 7);
        assert_eq!(p.private_data(), &[1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn trailing_bytes_are_not_private_data() {
        let mut bytes = SIW_REQ_DEFAULT.to_vec();
        bytes.extend_from_slice(&[0xaa; 10]);
        let repr = MpaFrameRepr::parse_bytes(&bytes).unwrap();
        assert_eq!(repr.private_data.len(), 4);
        assert_eq!(repr.buffer_len(), 24);
    }

    #[test]
    fn truncated_bad_key_and_too_long() {
        for n in 0..SIW_REQ_DEFAULT.len() {
            assert_eq!(
                MpaFrameRepr::parse_bytes(&SIW_REQ_DEFAULT[..n]),
                Err(MpaWireError::Truncated),
                "{n} bytes"
            );
        }
        assert_eq!(
            MpaFramePacket::new_checked(&SIW_REQ_DEFAULT[..23]).unwrap_err(),
            MpaWireError::Truncated
        );
        let mut bad = SIW_REQ_DEFAULT;
        bad[4] = b'x';
        assert_eq!(MpaFrameRepr::parse_bytes(&bad), Err(MpaWireError::BadKey));
        let mut long = vec![0u8; HEADER_LEN + 513];
        long[..16].copy_from_slice(&MPA_KEY_REQ);
        long[18..20].copy_from_slice(&513u16.to_be_bytes());
        assert_eq!(
            MpaFrameRepr::parse_bytes(&long),
            Err(MpaWireError::PrivateDataTooLong { len: 513 })
        );
        // 512 is allowed
        long[18..20].copy_from_slice(&512u16.to_be_bytes());
        assert_eq!(
            MpaFrameRepr::parse_bytes(&long).unwrap().private_data.len(),
            512
        );
    }

    #[test]
    fn v2_words_match_the_siw_captures() {
        // rping-p2p request and reply
        let req = MpaV2Params::parse(&[0x80, 0x01, 0xc0, 0x01]).unwrap();
        assert_eq!(
            req,
            MpaV2Params {
                ird: 1,
                ord: 1,
                p2p: true,
                send_rtr: false,
                write_rtr: true,
                read_rtr: true,
            }
        );
        let rep = MpaV2Params::parse(&[0x80, 0x01, 0x80, 0x01]).unwrap();
        assert!(rep.p2p && rep.write_rtr && !rep.read_rtr && !rep.send_rtr);
        // read_bw: IRD = ORD = 128
        let rb = MpaV2Params::parse(&[0x00, 0x80, 0x00, 0x80]).unwrap();
        assert_eq!((rb.ird, rb.ord), (128, 128));
        assert_eq!(rb.to_bytes(), [0x00, 0x80, 0x00, 0x80]);
        assert_eq!(req.to_bytes(), [0x80, 0x01, 0xc0, 0x01]);
        let s = MpaV2Params::parse(&[0x7f, 0xff, 0x3f, 0xff]).unwrap();
        assert!(s.send_rtr && !s.p2p && s.ird == MAX_IRD_ORD && s.ord == MAX_IRD_ORD);
        assert_eq!(MpaV2Params::parse(&[1, 2, 3]), Err(MpaWireError::Truncated));
    }

    #[test]
    fn v2_emit_masks_oversized_values() {
        let p = MpaV2Params {
            ird: 0xffff,
            ord: 0x4001,
            ..MpaV2Params::default()
        };
        assert_eq!(p.to_bytes(), [0x3f, 0xff, 0x00, 0x01]);
    }

    #[test]
    fn enhanced_with_short_private_data_has_no_params() {
        let repr = MpaFrameRepr {
            kind: MpaFrameKind::Request,
            markers: false,
            crc: false,
            reject: false,
            enhanced: true,
            reserved: 0,
            revision: 2,
            private_data: &[1, 2],
        };
        assert_eq!(repr.v2_params(), None);
        assert_eq!(repr.ulp_private_data(), &[1, 2]);
    }
}
