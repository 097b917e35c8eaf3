//! Where MPA markers go, what they say, how FPDUs are padded, and the largest ULPDU that fits
//! one TCP segment (RFC 5044 §4.1 FPDU format, §4.2 pad, §4.3 marker format, the marker
//! placement rule of the "MPA Markers" transmit rules, and the MULPDU formula).
//!
//! What it is: pure arithmetic over *stream positions* shared by the framer and the deframer.
//! A stream position counts the octets of one direction of the connection from the first
//! octet after the MPA Request/Reply (position 0), markers included. It is a `u64` and never
//! wraps; RFC 5044's "SeqNum can wrap" concerns TCP sequence numbers, which we never see.
//!
//! What it refuses to do: choose *whether* markers are used (MPA startup decides that per
//! direction, from the peer's M flag) or look at any bytes.
//!
//! # The anchoring rule (pinned)
//!
//! RFC 5044 (MPA Markers, transmit rules) says, in substance: the MPA Markers MUST be inserted
//! *immediately preceding the first FPDU of Full Operation Phase*, and at every 512th octet of
//! the TCP octet stream thereafter; as a result the first marker has an FPDUPTR of 0. With
//! SeqStart the sequence number of the first marker, a marker starts at every SeqNum with
//! (SeqNum − SeqStart) mod 512 = 0. So, in stream positions:
//!
//! * a marker occupies `[512·k, 512·k + 4)` for every k ≥ 0 — the first one at position 0,
//!   in front of the first FPDU's ULPDU_LENGTH field (which therefore sits at position 4);
//! * §4.3: FPDUPTR is "the number of octets in the TCP stream from the beginning of the
//!   ULPDU_LENGTH field to the first octet of the entire MPA Marker" of the FPDU the marker is
//!   in: a marker at position `p` inside an FPDU whose ULPDU_LENGTH field starts at `l` carries
//!   `p − l`; RESERVED is zero on transmit and ignored on receive (except by the CRC); the two
//!   low bits of FPDUPTR are ignored on receive;
//! * a marker that falls exactly where an FPDU begins (between the previous CRC and the next
//!   ULPDU_LENGTH, like the very first marker) precedes that FPDU and carries FPDUPTR 0. This
//!   value cannot occur otherwise (`p − l` ≥ 4 for markers after ULPDU_LENGTH), so a receiver
//!   can always tell the two cases apart;
//! * every marker belongs to exactly one FPDU and is covered by that FPDU's CRC: the markers
//!   inside it and the one immediately in front of its ULPDU_LENGTH field (§4.4: the CRC covers
//!   the FPDU "including any markers").
//!
//! Because every FPDU is a multiple of 4 octets (ULPDU_LENGTH + ULPDU + pad is padded to 4,
//! the CRC is 4) and markers are 4 octets at multiples of 512, every FPDU starts at a position
//! that is a multiple of 4. Hence a marker never splits ULPDU_LENGTH, the pad or the CRC: it is
//! in front of ULPDU_LENGTH, inside the ULPDU (at ULPDU offsets ≡ 2 mod 4, so it may split a
//! DDP header), or between the ULPDU/pad and the CRC. The framer and deframer nevertheless
//! split at any octet.
//!
//! Cross-check: Wireshark's `packet-iwarp-mpa.c` records the TCP sequence number of the first
//! FPDU of each direction and expects markers at `(seq − first_seq) mod 512 == 0`, i.e. a
//! marker as the first octets of the first FPDU; it strips them, reads ULPDU_LENGTH after a
//! marker found at the start of a segment, and computes the CRC from the first octet of the
//! segment, so a leading marker is CRC-covered. The OSC user-level iWARP (a pre-RFC draft
//! implementation) places and covers markers the same way, but measures FPDUPTR from the
//! leading marker instead of from ULPDU_LENGTH; we follow the RFC's definition. Neither siw
//! nor any capture here has markers (siw refuses M=1), so no real peer confirms the FPDUPTR
//! values inside an FPDU.

/// Octets in a marker: 16 bits RESERVED, 16 bits FPDUPTR.
pub const MARKER_LEN: usize = 4;

/// Markers start at every multiple of this many stream octets.
pub const MARKER_INTERVAL: u64 = 512;

/// Octets of the ULPDU_LENGTH field in front of every ULPDU.
pub const ULPDU_LENGTH_LEN: usize = 2;

/// The largest ULPDU the 16-bit ULPDU_LENGTH field can describe.
pub const MAX_ULPDU_LEN: usize = u16::MAX as usize;

/// Octets of the CRC field (same as [`super::crc::CRC_LEN`]).
pub const CRC_LEN: usize = super::crc::CRC_LEN;

/// Whether a marker starts at stream position `pos`.
// `u64::is_multiple_of` needs Rust 1.87; the workspace declares rust-version 1.85.
#[allow(clippy::manual_is_multiple_of)]
pub fn is_marker_start(pos: u64) -> bool {
    pos % MARKER_INTERVAL == 0
}

/// Whether the octet at stream position `pos` belongs to a marker.
pub fn in_marker(pos: u64) -> bool {
    pos % MARKER_INTERVAL < MARKER_LEN as u64
}

/// Octets from `pos` up to the start of the next marker (at most 512; 512 when a marker
/// starts exactly at `pos`, i.e. the distance to the one after it).
pub fn octets_to_next_marker(pos: u64) -> u64 {
    MARKER_INTERVAL - pos % MARKER_INTERVAL
}

/// Pad octets after a ULPDU of `ulpdu_len` octets: ULPDU_LENGTH + ULPDU + pad is a multiple
/// of 4 (RFC 5044 §4.2). Pad octets are zero on transmit and not checked on receive (they are
/// covered by the CRC).
pub fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (ULPDU_LENGTH_LEN + ulpdu_len) % 4) % 4
}

/// Octets of an FPDU without markers: ULPDU_LENGTH, ULPDU, pad, CRC.
pub fn fpdu_len_without_markers(ulpdu_len: usize) -> usize {
    ULPDU_LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// Octets an FPDU for a ULPDU of `ulpdu_len` octets occupies on the wire when it starts at
/// stream position `start`, markers included (a marker at `start` is in front of the FPDU and
/// counts; a marker right after its CRC belongs to the next FPDU and does not).
pub fn fpdu_wire_len(start: u64, ulpdu_len: usize, markers: bool) -> usize {
    let body = fpdu_len_without_markers(ulpdu_len);
    if !markers {
        return body;
    }
    let mut pos = start;
    let mut left = body as u64;
    while left > 0 {
        if is_marker_start(pos) {
            pos += MARKER_LEN as u64;
        }
        let n = octets_to_next_marker(pos).min(left);
        pos += n;
        left -= n;
    }
    (pos - start) as usize
}

/// The marker octets for a given FPDUPTR (RESERVED is zero).
pub fn encode_marker(fpduptr: u16) -> [u8; MARKER_LEN] {
    let p = fpduptr.to_be_bytes();
    [0, 0, p[0], p[1]]
}

/// The FPDUPTR of received marker octets, its two low bits cleared as RFC 5044 §4.3 asks
/// of receivers; RESERVED is ignored.
pub fn decode_fpduptr(marker: [u8; MARKER_LEN]) -> u16 {
    u16::from_be_bytes([marker[2], marker[3]]) & !0x3
}

/// The FPDUPTR a marker at stream position `marker_at` must carry, given where the
/// ULPDU_LENGTH field of its FPDU starts (`None` when the marker precedes the FPDU's
/// ULPDU_LENGTH field). Returns `None` if the distance does not fit in 16 bits, which only an
/// FPDU far larger than any MULPDU could cause.
pub fn expected_fpduptr(marker_at: u64, ulpdu_length_at: Option<u64>) -> Option<u16> {
    match ulpdu_length_at {
        None => Some(0),
        Some(l) => u16::try_from(marker_at.checked_sub(l)?).ok(),
    }
}

/// The largest ULPDU that keeps one FPDU within `emss` octets (the effective MSS of the TCP
/// connection), RFC 5044's MULPDU formula:
///
/// * with markers: `MULPDU = EMSS − (6 + 4·⌈EMSS / 512⌉ + EMSS mod 4)`
/// * without markers: `MULPDU = EMSS − (6 + EMSS mod 4)`
///
/// (6 = ULPDU_LENGTH + CRC; the result + 2 is a multiple of 4, so such an FPDU needs no pad.)
/// Saturates to 0 for an EMSS too small to carry any ULPDU.
pub fn mulpdu(emss: usize, markers: bool) -> usize {
    let marker_room = if markers {
        MARKER_LEN * emss.div_ceil(MARKER_INTERVAL as usize)
    } else {
        0
    };
    emss.saturating_sub(6 + marker_room + emss % 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_makes_length_field_plus_ulpdu_a_multiple_of_four() {
        assert_eq!(pad_len(34), 0); // siw's 16-byte Send: 2 + 34 = 36
        assert_eq!(pad_len(46), 0); // Read Request
        assert_eq!(pad_len(1), 1);
        assert_eq!(pad_len(2), 0);
        assert_eq!(pad_len(3), 3);
        assert_eq!(pad_len(4), 2);
        for n in 1..100 {
            assert_eq!((ULPDU_LENGTH_LEN + n + pad_len(n)) % 4, 0);
            assert!(pad_len(n) < 4);
        }
    }

    #[test]
    fn marker_positions() {
        assert!(is_marker_start(0));
        assert!(is_marker_start(512));
        assert!(!is_marker_start(4));
        assert!(in_marker(3) && in_marker(515) && !in_marker(4) && !in_marker(511));
        assert_eq!(octets_to_next_marker(0), 512);
        assert_eq!(octets_to_next_marker(4), 508);
        assert_eq!(octets_to_next_marker(511), 1);
    }

    #[test]
    fn marker_encoding() {
        assert_eq!(encode_marker(0), [0, 0, 0, 0]);
        assert_eq!(encode_marker(0x01fc), [0, 0, 0x01, 0xfc]);
        assert_eq!(decode_fpduptr([0xff, 0xff, 0x01, 0xff]), 0x01fc);
        assert_eq!(expected_fpduptr(512, None), Some(0));
        assert_eq!(expected_fpduptr(512, Some(4)), Some(508));
        assert_eq!(expected_fpduptr(70_000, Some(0)), None);
    }

    #[test]
    fn wire_len_counts_markers_that_belong_to_the_fpdu() {
        // The first FPDU starts with a marker.
        assert_eq!(fpdu_wire_len(0, 34, true), 4 + 40);
        assert_eq!(fpdu_wire_len(0, 34, false), 40);
        // 4 + 2 + 502 + 0 + 4 = 512: ends exactly at the next marker, which is not ours.
        assert_eq!(fpdu_wire_len(0, 502, true), 512);
        // One more ULPDU octet: 2 + 503 + 3 pad = 508 > 506 room, so the marker at 512 falls
        // between pad and CRC: 4 + 508 + 4 + 4.
        assert_eq!(fpdu_wire_len(0, 503, true), 520);
        // Starting mid-interval, no marker inside.
        assert_eq!(fpdu_wire_len(100, 34, true), 40);
        // A 1500-octet ULPDU from 8 meets the markers at 512 and 1024 and ends at 1524.
        assert_eq!(fpdu_wire_len(8, 1500, true), 2 + 1500 + 2 + 4 + 8);
        // From 24 it also meets the one at 1536.
        assert_eq!(fpdu_wire_len(24, 1500, true), 2 + 1500 + 2 + 4 + 12);
    }

    #[test]
    fn mulpdu_formula() {
        // siw with MSS 1460 sends 1454-octet ULPDUs in 1460-octet FPDUs.
        assert_eq!(mulpdu(1460, false), 1454);
        assert_eq!(mulpdu(1460, true), 1460 - 6 - 12);
        assert_eq!(mulpdu(1461, false), 1454);
        assert_eq!(mulpdu(512, true), 512 - 6 - 4);
        assert_eq!(mulpdu(513, true), 513 - 6 - 8 - 1);
        assert_eq!(mulpdu(5, true), 0);
        // Whatever the alignment, an FPDU of MULPDU octets fits the EMSS.
        for emss in 64..4000 {
            for markers in [false, true] {
                let m = mulpdu(emss, markers);
                assert_eq!(pad_len(m), 0, "emss {emss}");
                for start in (0..512u64).step_by(4) {
                    assert!(
                        fpdu_wire_len(start, m, markers) <= emss,
                        "emss {emss} at {start}"
                    );
                }
            }
        }
    }
}
