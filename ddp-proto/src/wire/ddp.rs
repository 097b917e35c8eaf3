//! DDP segment headers (RFC 5041 §5): the view [`DdpPacket`] and the repr [`DdpRepr`], the
//! Steering Tag [`STag`], the DDP control byte [`DdpControl`], and the wire error
//! [`WireError`] shared by every module under `wire`.
//!
//! # What is on the wire
//!
//! A DDP segment is the ULPDU that MPA frames (RFC 5044 §4): its first byte follows MPA's
//! 2-byte ULPDU length field. The header is one of two layouts, chosen by the T bit of the
//! first byte (RFC 5041 §5.1–§5.3):
//!
//! ```text
//!  tagged (14 bytes)                       untagged (18 bytes)
//!  0      DDP control  T L rsvd(4) DV(2)   0      DDP control  T L rsvd(4) DV(2)
//!  1      RsvdULP (8 bits)                 1      RsvdULP bits 0..8
//!  2..6   STag                             2..6   RsvdULP bits 8..40
//!  6..14  TO (64 bits)                     6..10  QN
//!                                          10..14 MSN
//!                                          14..18 MO
//! ```
//!
//! RDMAP (RFC 5040 §4.1–§4.3) owns the ULP-reserved bits: the first 8 are the RDMAP control
//! byte (called `ulp_ctrl` here), the next 32 of an untagged header carry the Invalidate STag
//! of a Send with Invalidate and are reserved otherwise (called `ulp_rsvd` here). DDP itself
//! treats both as opaque; [`crate::wire::rdmap`] interprets them.
//!
//! # What this module refuses to do
//!
//! It decides nothing about validity. A version other than 1, set reserved bits, any QN, MSN
//! or MO: all parse and re-emit unchanged (RFC 5041 §5.1 says reserved bits are "not checked
//! on receive"; versions and queue numbers are checked by the `ddp` module, which maps them to
//! the right Terminate through [`crate::error::ProtoError`]). The only parse error is a buffer
//! too short for the layout its T bit announces ([`WireError::Truncated`]).
//!
//! # The shared error type
//!
//! [`WireError`] is defined here because `wire/mod.rs` is owned elsewhere; the other wire
//! modules (`wire::rdmap`, `wire::mpa`) use `crate::wire::ddp::WireError` until the module
//! root re-exports it as `crate::wire::WireError`.

use core::fmt;
use core::ops::Range;

/// Why a wire view or repr could not be read or written. This is not a protocol error by
/// itself: the caller decides what a short or odd buffer means (usually "need more bytes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireError {
    /// The buffer is shorter than the header (or header part) its own fields announce.
    Truncated,
    /// `emit` was given an output buffer shorter than `buffer_len()`.
    BufferTooSmall,
    /// `emit` was given a repr whose parts contradict each other, so that parsing the
    /// emitted bytes could not give it back (e.g. an RDMAP Read Request without its body).
    Inconsistent,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => f.write_str("buffer shorter than the header it announces"),
            WireError::BufferTooSmall => f.write_str("output buffer too small for the header"),
            WireError::Inconsistent => f.write_str("header repr contradicts itself"),
        }
    }
}

impl std::error::Error for WireError {}

/// The DDP protocol version this implementation speaks (RFC 5041 §5.1: DV = 01b).
pub const DDP_VERSION: u8 = 1;
/// Length of a tagged DDP header, including the ULP control byte (RFC 5041 §5.2).
pub const TAGGED_HEADER_LEN: usize = 14;
/// Length of an untagged DDP header, including the 40 ULP-reserved bits (RFC 5041 §5.3).
pub const UNTAGGED_HEADER_LEN: usize = 18;

/// A Steering Tag (RFC 5041 §5.2): names a tagged buffer at the data sink.
///
/// Following siw (and the verbs convention), the upper 24 bits are the *index* of the
/// registration and the low 8 bits its *key*, chosen by the owner so that a stale STag is
/// refused. RFC 5041 treats the 32 bits as opaque; the split is our (and siw's) choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct STag(pub u32);

impl STag {
    /// Builds an STag from a 24-bit index (higher bits are dropped) and an 8-bit key.
    pub const fn from_parts(index: u32, key: u8) -> STag {
        STag(((index & 0x00ff_ffff) << 8) | key as u32)
    }

    /// The registration index: the upper 24 bits.
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }

    /// The key: the low 8 bits.
    pub const fn key(self) -> u8 {
        (self.0 & 0xff) as u8
    }
}

impl fmt::Display for STag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

impl From<u32> for STag {
    fn from(v: u32) -> STag {
        STag(v)
    }
}

impl From<STag> for u32 {
    fn from(s: STag) -> u32 {
        s.0
    }
}

/// The DDP control byte (RFC 5041 §5.1), bit by bit, with the reserved bits kept.
///
/// ```text
///  7   6   5 4 3 2   1 0
///  T   L   Rsvd      DV
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpControl {
    /// T: the segment uses the tagged buffer model.
    pub tagged: bool,
    /// L: the last segment of a DDP message.
    pub last: bool,
    /// The 4 reserved bits (zero on transmit, not checked on receive), kept as they were.
    pub reserved: u8,
    /// DV: the DDP version (2 bits, 1 for RFC 5041).
    pub version: u8,
}

impl DdpControl {
    const T: u8 = 0x80;
    const L: u8 = 0x40;
    const RSVD_SHIFT: u8 = 2;
    const RSVD_MASK: u8 = 0x0f;
    const DV_MASK: u8 = 0x03;

    /// Decodes the byte.
    pub const fn from_byte(b: u8) -> DdpControl {
        DdpControl {
            tagged: b & Self::T != 0,
            last: b & Self::L != 0,
            reserved: (b >> Self::RSVD_SHIFT) & Self::RSVD_MASK,
            version: b & Self::DV_MASK,
        }
    }

    /// Encodes the byte; out-of-range `reserved`/`version` bits are masked off.
    pub const fn to_byte(self) -> u8 {
        (if self.tagged { Self::T } else { 0 })
            | (if self.last { Self::L } else { 0 })
            | ((self.reserved & Self::RSVD_MASK) << Self::RSVD_SHIFT)
            | (self.version & Self::DV_MASK)
    }
}

/// Byte ranges of the DDP header inside the ULPDU.
mod field {
    use core::ops::Range;

    /// DDP control byte (both layouts).
    pub const DDP_CTRL: usize = 0;
    /// First 8 ULP-reserved bits: the RDMAP control byte (both layouts).
    pub const ULP_CTRL: usize = 1;

    /// Tagged: Steering Tag.
    pub const STAG: Range<usize> = 2..6;
    /// Tagged: Tagged Offset.
    pub const TO: Range<usize> = 6..14;

    /// Untagged: ULP-reserved bits 8..40 (RDMAP: Invalidate STag or reserved).
    pub const ULP_RSVD: Range<usize> = 2..6;
    /// Untagged: Queue Number.
    pub const QN: Range<usize> = 6..10;
    /// Untagged: Message Sequence Number.
    pub const MSN: Range<usize> = 10..14;
    /// Untagged: Message Offset.
    pub const MO: Range<usize> = 14..18;
}

fn be32(b: &[u8], r: Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_be_bytes(a)
}

fn be64(b: &[u8], r: Range<usize>) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[r]);
    u64::from_be_bytes(a)
}

/// A view of a DDP segment (a whole ULPDU, or at least its header) in a byte buffer.
///
/// Getters for the tagged fields (`stag`, `to`) and for the untagged fields (`ulp_rsvd`, `qn`,
/// `msn`, `mo`) read their bytes whatever the T bit says; [`DdpPacket::new_checked`] only
/// guarantees that the layout announced by the T bit fits. Use [`DdpRepr`] for a typed view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DdpPacket<T> {
    /// Wraps a buffer without checking its length; getters may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> DdpPacket<T> {
        DdpPacket { buffer }
    }

    /// Wraps a buffer, checking that it holds the header its T bit announces.
    pub fn new_checked(buffer: T) -> Result<DdpPacket<T>, WireError> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the whole header (14 bytes if T is set, else 18).
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.is_empty() || b.len() < self.header_len() {
            Err(WireError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The header length announced by the T bit (the buffer must not be empty).
    pub fn header_len(&self) -> usize {
        header_len_for(self.buffer.as_ref()[field::DDP_CTRL])
    }

    /// The raw DDP control byte.
    pub fn ddp_ctrl_byte(&self) -> u8 {
        self.buffer.as_ref()[field::DDP_CTRL]
    }

    /// The decoded DDP control byte.
    pub fn control(&self) -> DdpControl {
        DdpControl::from_byte(self.ddp_ctrl_byte())
    }

    /// T: tagged buffer model.
    pub fn tagged(&self) -> bool {
        self.control().tagged
    }

    /// L: last segment of the message.
    pub fn last(&self) -> bool {
        self.control().last
    }

    /// DV: DDP version.
    pub fn version(&self) -> u8 {
        self.control().version
    }

    /// The first 8 ULP-reserved bits (RDMAP's control byte).
    pub fn ulp_ctrl(&self) -> u8 {
        self.buffer.as_ref()[field::ULP_CTRL]
    }

    /// Tagged: the Steering Tag.
    pub fn stag(&self) -> STag {
        STag(be32(self.buffer.as_ref(), field::STAG))
    }

    /// Tagged: the Tagged Offset.
    pub fn to(&self) -> u64 {
        be64(self.buffer.as_ref(), field::TO)
    }

    /// Untagged: ULP-reserved bits 8..40 (RDMAP: Invalidate STag, or reserved).
    pub fn ulp_rsvd(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ULP_RSVD)
    }

    /// Untagged: the Queue Number.
    pub fn qn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::QN)
    }

    /// Untagged: the Message Sequence Number.
    pub fn msn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::MSN)
    }

    /// Untagged: the Message Offset.
    pub fn mo(&self) -> u32 {
        be32(self.buffer.as_ref(), field::MO)
    }

    /// The bytes after the DDP header (for RDMAP: a Read Request or Terminate header, or
    /// the ULP payload).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DdpPacket<T> {
    /// Sets the raw DDP control byte.
    pub fn set_ddp_ctrl_byte(&mut self, b: u8) {
        self.buffer.as_mut()[field::DDP_CTRL] = b;
    }

    /// Sets the whole DDP control byte.
    pub fn set_control(&mut self, c: DdpControl) {
        self.set_ddp_ctrl_byte(c.to_byte());
    }

    /// Sets T (this changes the header layout).
    pub fn set_tagged(&mut self, v: bool) {
        let mut c = self.control();
        c.tagged = v;
        self.set_control(c);
    }

    /// Sets L.
    pub fn set_last(&mut self, v: bool) {
        let mut c = self.control();
        c.last = v;
        self.set_control(c);
    }

    /// Sets DV (2 bits).
    pub fn set_version(&mut self, v: u8) {
        let mut c = self.control();
        c.version = v;
        self.set_control(c);
    }

    /// Sets the RDMAP control byte.
    pub fn set_ulp_ctrl(&mut self, b: u8) {
        self.buffer.as_mut()[field::ULP_CTRL] = b;
    }

    /// Tagged: sets the Steering Tag.
    pub fn set_stag(&mut self, s: STag) {
        self.buffer.as_mut()[field::STAG].copy_from_slice(&s.0.to_be_bytes());
    }

    /// Tagged: sets the Tagged Offset.
    pub fn set_to(&mut self, to: u64) {
        self.buffer.as_mut()[field::TO].copy_from_slice(&to.to_be_bytes());
    }

    /// Untagged: sets ULP-reserved bits 8..40.
    pub fn set_ulp_rsvd(&mut self, v: u32) {
        self.buffer.as_mut()[field::ULP_RSVD].copy_from_slice(&v.to_be_bytes());
    }

    /// Untagged: sets the Queue Number.
    pub fn set_qn(&mut self, v: u32) {
        self.buffer.as_mut()[field::QN].copy_from_slice(&v.to_be_bytes());
    }

    /// Untagged: sets the Message Sequence Number.
    pub fn set_msn(&mut self, v: u32) {
        self.buffer.as_mut()[field::MSN].copy_from_slice(&v.to_be_bytes());
    }

    /// Untagged: sets the Message Offset.
    pub fn set_mo(&mut self, v: u32) {
        self.buffer.as_mut()[field::MO].copy_from_slice(&v.to_be_bytes());
    }

    /// The bytes after the DDP header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

/// The header length announced by a DDP control byte: 14 if T is set, else 18.
pub const fn header_len_for(ddp_ctrl: u8) -> usize {
    if ddp_ctrl & DdpControl::T != 0 {
        TAGGED_HEADER_LEN
    } else {
        UNTAGGED_HEADER_LEN
    }
}

/// The buffer-model part of a DDP header (RFC 5041 §5.2 and §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DdpBuffer {
    /// Tagged buffer model: placement at `to` inside the buffer named by `stag`.
    Tagged {
        /// The data sink's Steering Tag.
        stag: STag,
        /// The Tagged Offset of the first payload byte.
        to: u64,
    },
    /// Untagged buffer model: placement into the `msn`-th buffer posted on queue `qn`, at
    /// offset `mo`.
    Untagged {
        /// Queue Number (RDMAP: 0 Send, 1 Read Request, 2 Terminate).
        qn: u32,
        /// Message Sequence Number (per queue, starts at 1, wraps modulo 2^32).
        msn: u32,
        /// Message Offset of the first payload byte.
        mo: u32,
        /// ULP-reserved bits 8..40; RDMAP carries the Invalidate STag here.
        ulp_rsvd: u32,
    },
}

/// A parsed DDP header, every bit kept (so `parse` then `emit` is byte-identical).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpRepr {
    /// L: last segment of the DDP message.
    pub last: bool,
    /// DV: DDP version (1 for RFC 5041; others are kept for the receiver to refuse).
    pub ddp_version: u8,
    /// The 4 reserved bits of the DDP control byte (0 on transmit, ignored on receive).
    pub reserved: u8,
    /// The first 8 ULP-reserved bits: the RDMAP control byte, opaque to DDP.
    pub ulp_ctrl: u8,
    /// Tagged or untagged fields. The T bit is `matches!(buffer, DdpBuffer::Tagged { .. })`.
    pub buffer: DdpBuffer,
}

impl DdpRepr {
    /// A tagged header with version 1 and zero reserved bits.
    pub const fn tagged(stag: STag, to: u64, last: bool, ulp_ctrl: u8) -> DdpRepr {
        DdpRepr {
            last,
            ddp_version: DDP_VERSION,
            reserved: 0,
            ulp_ctrl,
            buffer: DdpBuffer::Tagged { stag, to },
        }
    }

    /// An untagged header with version 1 and zero reserved bits.
    pub const fn untagged(
        qn: u32,
        msn: u32,
        mo: u32,
        last: bool,
        ulp_ctrl: u8,
        ulp_rsvd: u32,
    ) -> DdpRepr {
        DdpRepr {
            last,
            ddp_version: DDP_VERSION,
            reserved: 0,
            ulp_ctrl,
            buffer: DdpBuffer::Untagged {
                qn,
                msn,
                mo,
                ulp_rsvd,
            },
        }
    }

    /// Reads the header of a checked or unchecked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &DdpPacket<&T>) -> Result<DdpRepr, WireError> {
        packet.check_len()?;
        let c = packet.control();
        let buffer = if c.tagged {
            DdpBuffer::Tagged {
                stag: packet.stag(),
                to: packet.to(),
            }
        } else {
            DdpBuffer::Untagged {
                qn: packet.qn(),
                msn: packet.msn(),
                mo: packet.mo(),
                ulp_rsvd: packet.ulp_rsvd(),
            }
        };
        Ok(DdpRepr {
            last: c.last,
            ddp_version: c.version,
            reserved: c.reserved,
            ulp_ctrl: packet.ulp_ctrl(),
            buffer,
        })
    }

    /// Reads the header at the start of `ulpdu`.
    pub fn parse_bytes(ulpdu: &[u8]) -> Result<DdpRepr, WireError> {
        Self::parse(&DdpPacket::new_unchecked(ulpdu))
    }

    /// Whether the T bit is set.
    pub const fn is_tagged(&self) -> bool {
        matches!(self.buffer, DdpBuffer::Tagged { .. })
    }

    /// The DDP control byte this repr emits.
    pub const fn control(&self) -> DdpControl {
        DdpControl {
            tagged: self.is_tagged(),
            last: self.last,
            reserved: self.reserved,
            version: self.ddp_version,
        }
    }

    /// The header length: 14 (tagged) or 18 (untagged).
    pub const fn buffer_len(&self) -> usize {
        if self.is_tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    /// Writes the header into the first `buffer_len()` bytes of the view's buffer; the payload
    /// is left alone.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut DdpPacket<&mut T>,
    ) -> Result<(), WireError> {
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(WireError::BufferTooSmall);
        }
        packet.set_control(self.control());
        packet.set_ulp_ctrl(self.ulp_ctrl);
        match self.buffer {
            DdpBuffer::Tagged { stag, to } => {
                packet.set_stag(stag);
                packet.set_to(to);
            }
            DdpBuffer::Untagged {
                qn,
                msn,
                mo,
                ulp_rsvd,
            } => {
                packet.set_ulp_rsvd(ulp_rsvd);
                packet.set_qn(qn);
                packet.set_msn(msn);
                packet.set_mo(mo);
            }
        }
        Ok(())
    }

    /// Writes the header at the start of `buf`; returns the number of bytes written.
    pub fn emit_bytes(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        self.emit(&mut DdpPacket::new_unchecked(buf))?;
        Ok(self.buffer_len())
    }
}

impl fmt::Display for DdpRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.buffer {
            DdpBuffer::Tagged { stag, to } => {
                write!(f, "DDP tagged stag={stag} to={to:#x}")?;
            }
            DdpBuffer::Untagged { qn, msn, mo, .. } => {
                write!(f, "DDP untagged qn={qn} msn={msn} mo={mo}")?;
            }
        }
        if self.last {
            f.write_str(" last")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RDMA Write from rping-default.server.pcap frame 16 (ULPDU, header + 4 payload bytes).
    const WRITE: [u8; 18] = [
        0xc1, 0x40, 0x53, 0xf5, 0x9a, 0x00, 0x00, 0x00, 0x55, 0x73, 0xdb, 0x36, 0x9a, 0xb0, b'r',
        b'd', b'm', b'a',
    ];
    /// Send from rping-default.server.pcap frame 15 (ULPDU header only).
    const SEND: [u8; 18] = [
        0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00,
        0x00, 0x00, 0x00,
    ];

    #[test]
    fn stag_parts() {
        let s = STag(0xa5a0_6c00);
        assert_eq!(s.index(), 0xa5a06c);
        assert_eq!(s.key(), 0x00);
        assert_eq!(STag::from_parts(0xa5a06c, 0), s);
        assert_eq!(STag::from_parts(0x1ff_ffff, 0x7f), STag(0xffff_ff7f));
        assert_eq!(s.to_string(), "0xa5a06c00");
        assert_eq!(STag(1).to_string(), "0x00000001");
    }

    #[test]
    fn control_bits_follow_rfc5041_figure() {
        // T=1 L=1 rsvd=0 DV=1
        assert_eq!(
            DdpControl::from_byte(0xc1),
            DdpControl {
                tagged: true,
                last: true,
                reserved: 0,
                version: 1
            }
        );
        // T=0 L=0 rsvd=1010b DV=2
        let c = DdpControl::from_byte(0b0010_1010);
        assert_eq!(
            (c.tagged, c.last, c.reserved, c.version),
            (false, false, 0b1010, 2)
        );
        for b in 0..=255u8 {
            assert_eq!(DdpControl::from_byte(b).to_byte(), b);
        }
    }

    #[test]
    fn tagged_view_and_repr() {
        let p = DdpPacket::new_checked(&WRITE[..]).unwrap();
        assert!(p.tagged() && p.last());
        assert_eq!(p.version(), 1);
        assert_eq!(p.ulp_ctrl(), 0x40);
        assert_eq!(p.stag(), STag(0x53f5_9a00));
        assert_eq!(p.to(), 0x0000_5573_db36_9ab0);
        assert_eq!(p.payload(), b"rdma");
        let r = DdpRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            DdpRepr::tagged(STag(0x53f5_9a00), 0x5573_db36_9ab0, true, 0x40)
        );
        let mut out = [0u8; 14];
        assert_eq!(r.emit_bytes(&mut out), Ok(14));
        assert_eq!(out, WRITE[..14]);
    }

    #[test]
    fn untagged_view_and_repr() {
        let p = DdpPacket::new_checked(&SEND[..]).unwrap();
        assert!(!p.tagged() && p.last());
        assert_eq!((p.qn(), p.msn(), p.mo(), p.ulp_rsvd()), (0, 2, 0, 0));
        assert!(p.payload().is_empty());
        let r = DdpRepr::parse(&p).unwrap();
        assert_eq!(r, DdpRepr::untagged(0, 2, 0, true, 0x43, 0));
        let mut out = [0xffu8; 18];
        r.emit_bytes(&mut out).unwrap();
        assert_eq!(out, SEND);
    }

    #[test]
    fn setters_write_the_right_bytes() {
        let mut b = [0u8; 18];
        let mut p = DdpPacket::new_unchecked(&mut b[..]);
        p.set_last(true);
        p.set_version(1);
        p.set_ulp_ctrl(0x44);
        p.set_ulp_rsvd(0x0102_0304);
        p.set_qn(0);
        p.set_msn(7);
        p.set_mo(0x10);
        assert_eq!(
            b,
            [
                0x41, 0x44, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0x10
            ]
        );
        let mut p = DdpPacket::new_unchecked(&mut b[..]);
        p.set_tagged(true);
        assert_eq!(p.header_len(), 14);
        p.set_stag(STag(0xdead_beef));
        p.set_to(0x0102_0304_0506_0708);
        assert_eq!(
            &b[..14],
            &[0xc1, 0x44, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8]
        );
    }

    #[test]
    fn short_buffers_are_truncated_not_panics() {
        assert_eq!(
            DdpPacket::new_checked(&[][..]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            DdpPacket::new_checked(&WRITE[..13]).unwrap_err(),
            WireError::Truncated
        );
        assert!(DdpPacket::new_checked(&WRITE[..14]).is_ok());
        assert_eq!(
            DdpPacket::new_checked(&SEND[..17]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(DdpRepr::parse_bytes(&SEND[..3]), Err(WireError::Truncated));
        let r = DdpRepr::parse_bytes(&SEND).unwrap();
        assert_eq!(r.emit_bytes(&mut [0u8; 17]), Err(WireError::BufferTooSmall));
    }

    #[test]
    fn odd_values_are_kept() {
        // Version 2, reserved bits set, L clear, non-standard QN and a reserved ULP word.
        let mut b = SEND;
        b[0] = 0b0011_0110;
        b[2..6].copy_from_slice(&[9, 9, 9, 9]);
        b[9] = 5;
        let r = DdpRepr::parse_bytes(&b).unwrap();
        assert_eq!((r.ddp_version, r.reserved, r.last), (2, 0b1101, false));
        let mut out = [0u8; 18];
        r.emit_bytes(&mut out).unwrap();
        assert_eq!(out, b);
    }
}
