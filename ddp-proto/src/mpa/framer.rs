//! The FPDU framer: one ULPDU in, the exact FPDU octets out as a list of pieces for `writev`
//! (RFC 5044 §4.1 FPDU format, §4.2 pad, §4.3/§4.4 markers and CRC; placement rule in
//! [`super::markers`]).
//!
//! What it is: a per-direction transmit state that knows the stream position, so it can put
//! markers (when the peer asked for them) at every 512th octet counted from the first octet
//! of the first FPDU, and compute the CRC-32C over everything the FPDU covers (ULPDU_LENGTH,
//! ULPDU, pad and its markers). The payload is never copied: the caller's ULPDU parts are
//! referenced by range; only the small owned octets (ULPDU_LENGTH, markers, pad, CRC) are
//! appended to a scratch buffer.
//!
//! What it refuses to do: segment messages (ULPDUs ≤ MULPDU are the DDP layer's job, see
//! [`super::markers::mulpdu`]), keep unsent output (the bytes it emits are final; the driver
//! writes all of them in order and keeps any unsent tail itself), or frame an empty ULPDU or
//! one longer than 65535 octets (a caller bug: it panics).
//!
//! ```
//! use ddp_proto::mpa::framer::{Framer, Piece, TxConfig};
//! let mut framer = Framer::new(TxConfig { crc: true, markers: false });
//! let (header, payload) = ([0x41u8, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0], [7u8; 16]);
//! let (mut scratch, mut pieces) = (Vec::new(), Vec::new());
//! framer.frame(&[&header, &payload], &mut scratch, &mut pieces);
//! assert_eq!(pieces[0], Piece::Scratch(0..2)); // ULPDU_LENGTH = 34
//! assert_eq!(pieces[1], Piece::Ulpdu { part: 0, range: 0..18 });
//! assert_eq!(framer.position(), 40);
//! ```

use core::ops::Range;

use super::crc::{self, Crc32c};
use super::markers::{
    self, MAX_ULPDU_LEN, encode_marker, expected_fpduptr, is_marker_start, octets_to_next_marker,
    pad_len,
};

/// Heads up to this long (every DDP/RDMAP header) are framed with ULPDU_LENGTH in one step.
const HEAD_INLINE: usize = 62;

/// What the framer does to each FPDU of this direction (negotiated at MPA startup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxConfig {
    /// Compute the CRC-32C (else the CRC field is four zero octets).
    pub crc: bool,
    /// Insert markers (the peer set M in its Request/Reply).
    pub markers: bool,
}

/// One contiguous run of FPDU octets, in wire order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Piece {
    /// Octets the framer appended to the scratch buffer (ULPDU_LENGTH, markers, pad, CRC).
    Scratch(Range<usize>),
    /// Octets `range` of ULPDU part number `part` (as passed to [`Framer::frame`]).
    Ulpdu {
        /// Index of the part in the `ulpdu` slice.
        part: usize,
        /// Octet range inside that part.
        range: Range<usize>,
    },
}

impl Piece {
    /// The octets this piece stands for.
    pub fn bytes<'a>(&self, scratch: &'a [u8], ulpdu: &[&'a [u8]]) -> &'a [u8] {
        match self {
            Piece::Scratch(r) => &scratch[r.clone()],
            Piece::Ulpdu { part, range } => &ulpdu[*part][range.clone()],
        }
    }

    /// Number of octets in the piece.
    pub fn len(&self) -> usize {
        match self {
            Piece::Scratch(r) | Piece::Ulpdu { range: r, .. } => r.len(),
        }
    }

    /// Whether the piece is empty (the framer never emits empty pieces).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The transmit side of one MPA direction in Full Operation Phase.
#[derive(Debug, Clone)]
pub struct Framer {
    cfg: TxConfig,
    /// Octets framed since the first octet of the first FPDU, markers included.
    position: u64,
}

impl Framer {
    /// A framer whose next FPDU is the first of the direction (stream position 0).
    pub fn new(cfg: TxConfig) -> Framer {
        Framer { cfg, position: 0 }
    }

    /// The configuration this framer was made with.
    pub fn config(&self) -> TxConfig {
        self.cfg
    }

    /// Octets framed since the first FPDU (the stream position of the next FPDU).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Octets the next FPDU will take on the wire for a ULPDU of `ulpdu_len` octets.
    pub fn next_fpdu_len(&self, ulpdu_len: usize) -> usize {
        markers::fpdu_wire_len(self.position, ulpdu_len, self.cfg.markers)
    }

    /// Frames one ULPDU given as its parts (header, payload slices) in order.
    ///
    /// Small owned octets (ULPDU_LENGTH, markers, pad, CRC) are appended to `scratch`; `out`
    /// gets the pieces in wire order (appended; earlier contents of both are left alone).
    /// The caller must write all of them, in order. Adjacent scratch octets share one piece.
    ///
    /// # Panics
    ///
    /// If the ULPDU (the sum of the parts) is empty or longer than 65535 octets, or, with
    /// markers, so long (over about 65000 octets) that a marker's FPDUPTR would not fit in 16
    /// bits. Real ULPDUs are at most the MULPDU, far below either limit.
    pub fn frame(&mut self, ulpdu: &[&[u8]], scratch: &mut Vec<u8>, out: &mut Vec<Piece>) {
        self.frame_with_head(&[], ulpdu, scratch, out);
    }

    /// As [`Framer::frame`] for the ULPDU `head` followed by `parts`, where the (small) head
    /// is copied into `scratch` next to ULPDU_LENGTH, so that ULPDU_LENGTH and the head share
    /// one piece (one `iovec` less per FPDU on the data path); [`Piece::Ulpdu`] part numbers
    /// index `parts`.
    ///
    /// # Panics
    ///
    /// As [`Framer::frame`].
    pub fn frame_with_head(
        &mut self,
        head: &[u8],
        parts: &[&[u8]],
        scratch: &mut Vec<u8>,
        out: &mut Vec<Piece>,
    ) {
        let ulpdu = parts;
        let ulpdu_len: usize = head.len() + ulpdu.iter().map(|p| p.len()).sum::<usize>();
        assert!(
            (1..=MAX_ULPDU_LEN).contains(&ulpdu_len),
            "ULPDU length {ulpdu_len} outside 1..=65535"
        );
        let mut w = Emitter {
            markers: self.cfg.markers,
            pos: self.position,
            crc: Crc32c::new(),
            hash: self.cfg.crc,
            ulpdu_length_at: None,
            scratch,
            out,
            first_piece: 0,
        };
        w.first_piece = w.out.len();
        let len = (ulpdu_len as u16).to_be_bytes();
        let mut lh = [0u8; 2 + HEAD_INLINE];
        if head.len() <= HEAD_INLINE {
            // ULPDU_LENGTH and the head in one go (one CRC update instead of two).
            lh[..2].copy_from_slice(&len);
            lh[2..2 + head.len()].copy_from_slice(head);
            w.scratch_bytes(&lh[..2 + head.len()]);
        } else {
            w.scratch_bytes(&len);
            w.scratch_bytes(head);
        }
        for (part, bytes) in ulpdu.iter().enumerate() {
            w.part_bytes(part, bytes);
        }
        w.scratch_bytes(&[0u8; 3][..pad_len(ulpdu_len)]);
        // A marker due right after the pad sits between pad and CRC and is covered by it.
        w.marker_if_due();
        // Everything the CRC covers has been emitted: no marker can fall inside the CRC field
        // (it starts at a multiple of 4), so the value is final here.
        let crc = if self.cfg.crc {
            w.crc.to_wire()
        } else {
            [0; 4]
        };
        w.hash = false;
        debug_assert!(!self.cfg.markers || octets_to_next_marker(w.pos) >= 4);
        w.scratch_bytes(&crc);
        self.position = w.pos;
    }

    /// As [`Framer::frame_with_head`] for a small ULPDU `head` + `parts` framed whole into
    /// `out` (appended): ULPDU_LENGTH, head, the parts, pad and CRC in one contiguous run, one
    /// CRC pass over it. False, and nothing framed, with markers (a marker may fall inside:
    /// use [`Framer::frame_with_head`]).
    ///
    /// # Panics
    ///
    /// As [`Framer::frame`].
    pub fn frame_contiguous(&mut self, head: &[u8], parts: &[&[u8]], out: &mut Vec<u8>) -> bool {
        if self.cfg.markers {
            return false;
        }
        let ulpdu_len = head.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        assert!(
            (1..=MAX_ULPDU_LEN).contains(&ulpdu_len),
            "ULPDU length {ulpdu_len} outside 1..=65535"
        );
        let start = out.len();
        out.reserve(2 + ulpdu_len + 3 + 4);
        out.extend_from_slice(&(ulpdu_len as u16).to_be_bytes());
        out.extend_from_slice(head);
        for p in parts {
            out.extend_from_slice(p);
        }
        out.extend_from_slice(&[0u8; 3][..pad_len(ulpdu_len)]);
        let crc = if self.cfg.crc {
            crc::to_wire(crc::crc32c(&out[start..]))
        } else {
            [0; 4]
        };
        out.extend_from_slice(&crc);
        self.position += (out.len() - start) as u64;
        true
    }

    /// Frames one ULPDU into a fresh vector of wire octets (for tests and tools; the data path
    /// uses [`Framer::frame`] and writes the pieces without copying the payload).
    pub fn frame_to_vec(&mut self, ulpdu: &[&[u8]]) -> Vec<u8> {
        let mut scratch = Vec::new();
        let mut pieces = Vec::new();
        self.frame(ulpdu, &mut scratch, &mut pieces);
        let mut wire = Vec::with_capacity(pieces.iter().map(Piece::len).sum());
        for piece in &pieces {
            wire.extend_from_slice(piece.bytes(&scratch, ulpdu));
        }
        wire
    }
}

/// Emits the octets of one FPDU, inserting markers at their stream positions.
struct Emitter<'s> {
    markers: bool,
    pos: u64,
    crc: Crc32c,
    /// Whether emitted octets are fed to the CRC (everything before the CRC field).
    hash: bool,
    /// Stream position of this FPDU's ULPDU_LENGTH field, once emitted.
    ulpdu_length_at: Option<u64>,
    scratch: &'s mut Vec<u8>,
    out: &'s mut Vec<Piece>,
    /// Pieces before this index belong to earlier calls and are never merged into.
    first_piece: usize,
}

impl Emitter<'_> {
    /// If a marker is due at the current position, emits it. Returns how many octets may
    /// follow before the next marker.
    fn marker_if_due(&mut self) -> u64 {
        if !self.markers {
            return u64::MAX;
        }
        if is_marker_start(self.pos) {
            let fpduptr = expected_fpduptr(self.pos, self.ulpdu_length_at)
                .expect("FPDU too long for a 16-bit FPDUPTR");
            let m = encode_marker(fpduptr);
            self.push_scratch(&m);
        }
        octets_to_next_marker(self.pos)
    }

    fn scratch_bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = self.marker_if_due();
            self.note_ulpdu_length_start();
            let n = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
            self.push_scratch(&bytes[..n]);
            bytes = &bytes[n..];
        }
    }

    fn part_bytes(&mut self, part: usize, bytes: &[u8]) {
        let mut at = 0;
        while at < bytes.len() {
            let room = self.marker_if_due();
            let n = (bytes.len() - at).min(usize::try_from(room).unwrap_or(usize::MAX));
            let chunk = &bytes[at..at + n];
            if self.hash {
                self.crc.update(chunk);
            }
            self.pos += n as u64;
            self.push_piece(Piece::Ulpdu {
                part,
                range: at..at + n,
            });
            at += n;
        }
    }

    /// The first octet after any leading marker is the start of ULPDU_LENGTH.
    fn note_ulpdu_length_start(&mut self) {
        if self.ulpdu_length_at.is_none() {
            self.ulpdu_length_at = Some(self.pos);
        }
    }

    fn push_scratch(&mut self, bytes: &[u8]) {
        if self.hash {
            self.crc.update(bytes);
        }
        let start = self.scratch.len();
        self.scratch.extend_from_slice(bytes);
        self.pos += bytes.len() as u64;
        self.push_piece(Piece::Scratch(start..start + bytes.len()));
    }

    fn push_piece(&mut self, piece: Piece) {
        if piece.is_empty() {
            return;
        }
        let mergeable = self.out.len() > self.first_piece;
        if let (true, Some(last)) = (mergeable, self.out.last_mut()) {
            match (last, &piece) {
                (Piece::Scratch(a), Piece::Scratch(b)) if a.end == b.start => {
                    a.end = b.end;
                    return;
                }
                (Piece::Ulpdu { part: pa, range: a }, Piece::Ulpdu { part: pb, range: b })
                    if pa == pb && a.end == b.start =>
                {
                    a.end = b.end;
                    return;
                }
                _ => {}
            }
        }
        self.out.push(piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpa::crc;

    /// rping-crc.decode.txt frame 13: the Read Response FPDU (tagged, 64-octet payload).
    const READ_RESPONSE_FPDU: &str = "004ec142bf5e3e000000564d1f82fab0\
        72646d612d70696e672d303a20414243\
        4445464748494a4b4c4d4e4f50515253\
        5455565758595a5b5c5d5e5f60616263\
        6465666768696a6b6c6d6e6f70717200\
        ff82fc80";

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// `frame_contiguous` puts the same octets on the wire as `frame` with the head as the
    /// first part (CRC on and off; the payload whole, split in two or in three parts, or
    /// none), appended to what the buffer holds; with markers it frames nothing.
    #[test]
    fn frame_contiguous_matches_frame() {
        for crc in [true, false] {
            let cfg = TxConfig {
                crc,
                markers: false,
            };
            let (mut a, mut b) = (Framer::new(cfg), Framer::new(cfg));
            let mut out = vec![0xEE; 3];
            for i in 0..200usize {
                let head = [i as u8; 18];
                let payload: Vec<u8> = (0..(i * 7) % 97).map(|x| (x * i) as u8).collect();
                let want = a.frame_to_vec(&[&head, &payload]);
                let at = out.len();
                let (x, y) = (i % 5 * payload.len() / 4, i % 3 * payload.len() / 2);
                let (x, y) = (x.min(y), x.max(y));
                let parts: &[&[u8]] = match i % 3 {
                    0 => &[&payload],
                    1 => &[&payload[..x], &payload[x..]],
                    _ => &[&payload[..x], &payload[x..y], &payload[y..]],
                };
                let parts = if payload.is_empty() && i % 2 == 0 {
                    &[][..]
                } else {
                    parts
                };
                assert!(b.frame_contiguous(&head, parts, &mut out));
                assert_eq!(&out[at..], &want[..], "FPDU {i}, crc {crc}");
                assert_eq!(a.position(), b.position());
            }
            assert_eq!(&out[..3], &[0xEE; 3], "appended, earlier octets left alone");
        }
        let mut m = Framer::new(TxConfig {
            crc: true,
            markers: true,
        });
        let mut out = Vec::new();
        assert!(!m.frame_contiguous(&[1; 18], &[b"x"], &mut out));
        assert!(
            out.is_empty() && m.position() == 0,
            "markers: nothing framed"
        );
    }

    /// `frame_with_head` puts the same octets on the wire as `frame` with the head as the first
    /// part (CRC and markers included, markers falling inside the head too), with ULPDU_LENGTH
    /// and the head in one scratch piece when no marker separates them.
    #[test]
    fn frame_with_head_matches_frame() {
        for markers in [false, true] {
            let cfg = TxConfig { crc: true, markers };
            let (mut a, mut b) = (Framer::new(cfg), Framer::new(cfg));
            for i in 0..200usize {
                let head = [i as u8; 18];
                let payload: Vec<u8> = (0..(i * 7) % 97 + 1).map(|x| x as u8).collect();
                let want = a.frame_to_vec(&[&head, &payload]);
                let (mut scratch, mut pieces) = (Vec::new(), Vec::new());
                b.frame_with_head(&head, &[&payload], &mut scratch, &mut pieces);
                let parts: [&[u8]; 1] = [&payload];
                let got: Vec<u8> = pieces
                    .iter()
                    .flat_map(|p| p.bytes(&scratch, &parts).to_vec())
                    .collect();
                assert_eq!(got, want, "FPDU {i}, markers {markers}");
                if !markers {
                    assert_eq!(pieces[0], Piece::Scratch(0..20));
                }
            }
            assert_eq!(a.position(), b.position());
        }
    }

    #[test]
    fn reproduces_a_siw_fpdu_byte_for_byte() {
        let wire = hex(READ_RESPONSE_FPDU);
        assert_eq!(wire.len(), 84);
        let ulpdu = &wire[2..80];
        let mut framer = Framer::new(TxConfig {
            crc: true,
            markers: false,
        });
        // Header and payload as separate parts, the way the DDP layer hands them over.
        let out = framer.frame_to_vec(&[&ulpdu[..14], &ulpdu[14..]]);
        assert_eq!(out, wire);
        assert_eq!(framer.position(), 84);
    }

    #[test]
    fn crc_off_writes_four_zero_octets() {
        let mut framer = Framer::new(TxConfig {
            crc: false,
            markers: false,
        });
        let out = framer.frame_to_vec(&[b"abc"]);
        assert_eq!(out, [0, 3, b'a', b'b', b'c', 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn payload_is_referenced_not_copied() {
        let header = [0xc1u8; 14];
        let payload = [0x55u8; 100];
        let mut framer = Framer::new(TxConfig {
            crc: true,
            markers: false,
        });
        let (mut scratch, mut pieces) = (vec![9u8; 3], vec![Piece::Scratch(0..3)]);
        framer.frame(&[&header, &payload], &mut scratch, &mut pieces);
        assert_eq!(
            pieces,
            vec![
                Piece::Scratch(0..3),
                Piece::Scratch(3..5),
                Piece::Ulpdu {
                    part: 0,
                    range: 0..14
                },
                Piece::Ulpdu {
                    part: 1,
                    range: 0..100
                },
                Piece::Scratch(5..9),
            ]
        );
        assert_eq!(scratch.len(), 9); // 2 length + 0 pad + 4 CRC
        assert_eq!(framer.position(), 2 + 114 + 4);
    }

    #[test]
    fn first_fpdu_starts_with_a_zero_marker_covered_by_the_crc() {
        let mut framer = Framer::new(TxConfig {
            crc: true,
            markers: true,
        });
        let out = framer.frame_to_vec(&[&[0x41; 18], b"0123456789abcdef"]);
        assert_eq!(&out[..4], &[0, 0, 0, 0]);
        assert_eq!(&out[4..6], &[0, 34]);
        assert_eq!(out.len(), 4 + 40);
        assert_eq!(crc::to_wire(crc::crc32c(&out[..40])), out[40..]);
        assert_eq!(framer.position(), 44);
    }

    #[test]
    fn marker_inside_the_payload_splits_the_part_and_points_at_ulpdu_length() {
        let mut framer = Framer::new(TxConfig {
            crc: true,
            markers: true,
        });
        let payload: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
        let (mut scratch, mut pieces) = (Vec::new(), Vec::new());
        framer.frame(&[&[0xc1; 14], &payload], &mut scratch, &mut pieces);
        // marker(0) len(4..6) header(6..20) payload(20..512) marker(512..516)
        // payload(516..624), no pad (2 + 614 = 616), CRC(624..628).
        assert_eq!(
            pieces,
            vec![
                Piece::Scratch(0..6),
                Piece::Ulpdu {
                    part: 0,
                    range: 0..14
                },
                Piece::Ulpdu {
                    part: 1,
                    range: 0..492
                },
                Piece::Scratch(6..10),
                Piece::Ulpdu {
                    part: 1,
                    range: 492..600
                },
                Piece::Scratch(10..14),
            ]
        );
        assert_eq!(&scratch[6..10], &[0, 0, 0x01, 0xfc]); // 512 - 4 = 508
    }

    #[test]
    #[should_panic(expected = "outside 1..=65535")]
    fn empty_ulpdu_is_a_caller_bug() {
        let mut framer = Framer::new(TxConfig {
            crc: true,
            markers: false,
        });
        framer.frame_to_vec(&[&[], &[]]);
    }
}
