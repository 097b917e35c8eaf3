//! MPA framing end to end: framer → deframer identity under any chunking (property tests),
//! an independent oracle for marker placement and CRC coverage, marker edge cases, fault
//! injection (every single-bit flip, every truncation), and every FPDU of the real siw
//! captures deframed, CRC-checked and re-framed byte for byte.
// `is_multiple_of` needs Rust 1.87; the workspace declares rust-version 1.85.
#![allow(clippy::manual_is_multiple_of)]

mod common;

use ddp_proto::error::ProtoError;
use ddp_proto::mpa::crc;
use ddp_proto::mpa::deframer::{Deframer, Event, RxConfig};
use ddp_proto::mpa::framer::{Framer, Piece, TxConfig};
use ddp_proto::mpa::markers::{self, MARKER_INTERVAL, pad_len};
use proptest::collection::vec;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Helpers

/// One ULPDU as the DDP layer hands it over: header part and payload part.
#[derive(Debug, Clone)]
struct Ulpdu {
    header: Vec<u8>,
    payload: Vec<u8>,
    /// Where the payload is cut into two framer parts (exercises multi-part ULPDUs).
    cut: usize,
}

impl Ulpdu {
    fn new(header: &[u8], payload: &[u8]) -> Ulpdu {
        Ulpdu {
            header: header.to_vec(),
            payload: payload.to_vec(),
            cut: payload.len() / 2,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        [&self.header[..], &self.payload[..]].concat()
    }

    fn parts(&self) -> [&[u8]; 3] {
        let cut = self.cut.min(self.payload.len());
        [&self.header, &self.payload[..cut], &self.payload[cut..]]
    }
}

fn tx(crc: bool, markers: bool) -> TxConfig {
    TxConfig { crc, markers }
}

fn rx(crc: bool, markers: bool) -> RxConfig {
    RxConfig {
        crc,
        markers,
        max_ulpdu: 65535,
    }
}

/// Frames `ulpdus` through the piece interface, checking the pieces, and returns the wire.
fn frame_all(cfg: TxConfig, ulpdus: &[Ulpdu]) -> Vec<u8> {
    let mut framer = Framer::new(cfg);
    let mut wire = Vec::new();
    for u in ulpdus {
        let parts = u.parts();
        let predicted = framer.next_fpdu_len(u.bytes().len());
        let before = framer.position();
        let (mut scratch, mut pieces) = (Vec::new(), Vec::new());
        framer.frame(&parts, &mut scratch, &mut pieces);
        let mut fpdu = Vec::new();
        for p in &pieces {
            assert!(!p.is_empty());
            if let Piece::Ulpdu { part, range } = p {
                assert!(range.end <= parts[*part].len());
            }
            fpdu.extend_from_slice(p.bytes(&scratch, &parts));
        }
        // Only framing octets live in scratch: length, markers, pad, CRC.
        let n_markers = (fpdu.len() - markers::fpdu_len_without_markers(u.bytes().len())) / 4;
        assert_eq!(
            scratch.len(),
            2 + pad_len(u.bytes().len()) + 4 + 4 * n_markers
        );
        assert_eq!(fpdu.len(), predicted);
        assert_eq!(framer.position() - before, fpdu.len() as u64);
        wire.extend_from_slice(&fpdu);
    }
    wire
}

/// What the deframer delivered.
#[derive(Debug, Default)]
struct Deframed {
    /// Completed FPDUs' ULPDUs (header + payload, reassembled from events).
    ulpdus: Vec<Vec<u8>>,
    /// The ULPDU in progress, if any.
    partial: Option<Vec<u8>>,
    idle: bool,
    position: u64,
}

/// Feeds `wire` to a fresh deframer in chunks of the given sizes (cycled), optionally using
/// direct placement whenever it is offered. Checks the event contract along the way.
fn deframe(
    cfg: RxConfig,
    wire: &[u8],
    chunks: &[usize],
    place: bool,
) -> (Deframed, Option<ProtoError>) {
    let mut d = Deframer::new(cfg);
    let mut out = Deframed::default();
    let mut expected_len = 0;
    let mut start = 0;
    let mut sizes = chunks.iter().cycle();
    let mut err = None;
    'chunks: while start < wire.len() {
        let size = (*sizes.next().unwrap()).max(1);
        let chunk = &wire[start..(start + size).min(wire.len())];
        start += chunk.len();
        let mut at = 0;
        loop {
            if place {
                let run = d.payload_run().min(chunk.len() - at);
                if run > 0 {
                    let cur = out.partial.as_mut().expect("payload run outside an FPDU");
                    assert_eq!(d.ulpdu_offset(), cur.len());
                    cur.extend_from_slice(&chunk[at..at + run]);
                    d.consume_placed(&chunk[at..at + run]);
                    at += run;
                    continue;
                }
            }
            match d.next(chunk, &mut at) {
                Err(e) => {
                    assert_eq!(d.next(chunk, &mut 0), Err(e), "errors must stick");
                    assert_eq!(d.payload_run(), 0);
                    err = Some(e);
                    break 'chunks;
                }
                Ok(Event::NeedMore) => {
                    assert_eq!(at, chunk.len(), "NeedMore with unconsumed input");
                    break;
                }
                Ok(Event::Header(h)) => {
                    assert!(out.partial.is_none(), "Header inside an FPDU");
                    let b = h.bytes();
                    let want = if b[0] & 0x80 != 0 { 14 } else { 18 };
                    assert_eq!(b.len(), want.min(h.ulpdu_len()));
                    assert_eq!(h.is_tagged(), b[0] & 0x80 != 0);
                    expected_len = h.ulpdu_len();
                    out.partial = Some(b.to_vec());
                }
                Ok(Event::Payload { range, offset }) => {
                    assert!(!range.is_empty());
                    let cur = out.partial.as_mut().expect("Payload outside an FPDU");
                    assert_eq!(offset, cur.len());
                    cur.extend_from_slice(&chunk[range]);
                    assert!(cur.len() <= expected_len);
                }
                Ok(Event::End) => {
                    let cur = out.partial.take().expect("End without Header");
                    assert_eq!(cur.len(), expected_len);
                    out.ulpdus.push(cur);
                }
            }
        }
    }
    out.idle = d.is_idle();
    out.position = d.position();
    (out, err)
}

/// An independent reading of the wire, octet by octet, written straight from the rule in
/// `markers`' documentation (not sharing code with the framer or deframer): markers at every
/// multiple of 512, FPDUPTR 0 for a marker in front of ULPDU_LENGTH, else the distance from
/// ULPDU_LENGTH; the CRC covers every octet of the FPDU from its leading marker (if any) up to
/// the CRC field. Returns the ULPDUs.
fn oracle(cfg: TxConfig, wire: &[u8]) -> Vec<Vec<u8>> {
    let mut pos = 0usize;
    let mut ulpdus = Vec::new();
    let is_marker = |p: usize| cfg.markers && p % 512 == 0;
    while pos < wire.len() {
        let fpdu_start = pos;
        if is_marker(pos) {
            assert_eq!(&wire[pos + 2..pos + 4], &[0, 0], "leading marker at {pos}");
            pos += 4;
        }
        let length_at = pos;
        assert_eq!(length_at % 4, 0, "ULPDU_LENGTH must be 4-aligned");
        // Collect ULPDU_LENGTH + ULPDU + pad, skipping (and checking) markers.
        let mut body = Vec::new();
        let mut need = 2;
        while body.len() < need {
            if is_marker(pos) {
                let ptr = u16::from_be_bytes([wire[pos + 2], wire[pos + 3]]) as usize;
                assert_eq!(&wire[pos..pos + 2], &[0, 0]);
                assert_eq!(ptr, pos - length_at, "FPDUPTR of the marker at {pos}");
                pos += 4;
                continue;
            }
            body.push(wire[pos]);
            pos += 1;
            if body.len() == 2 {
                let len = u16::from_be_bytes([body[0], body[1]]) as usize;
                need = 2 + len + (4 - (2 + len) % 4) % 4;
            }
        }
        if is_marker(pos) {
            // Between pad and CRC.
            let ptr = u16::from_be_bytes([wire[pos + 2], wire[pos + 3]]) as usize;
            assert_eq!(ptr, pos - length_at);
            pos += 4;
        }
        let crc_field: [u8; 4] = wire[pos..pos + 4].try_into().unwrap();
        if cfg.crc {
            let value = crc::crc32c(&wire[fpdu_start..pos]);
            assert_eq!(
                crc_field,
                value.to_le_bytes(),
                "CRC of the FPDU at {fpdu_start}"
            );
        } else {
            assert_eq!(crc_field, [0; 4]);
        }
        pos += 4;
        let len = u16::from_be_bytes([body[0], body[1]]) as usize;
        assert!(body[2 + len..].iter().all(|&b| b == 0), "pad must be zero");
        ulpdus.push(body[2..2 + len].to_vec());
    }
    ulpdus
}

// ---------------------------------------------------------------------------------------------
// Property tests

fn ulpdu_strategy() -> impl Strategy<Value = Ulpdu> {
    let payload = || vec(any::<u8>(), 0..3000);
    prop_oneof![
        // Tagged (Write, Read Response): 14-octet header, T bit set.
        (any::<[u8; 14]>(), payload(), any::<prop::sample::Index>()).prop_map(|(mut h, p, i)| {
            h[0] |= 0x80;
            let cut = i.index(p.len() + 1);
            Ulpdu {
                header: h.to_vec(),
                payload: p,
                cut,
            }
        }),
        // Untagged (Send, Read Request, Terminate): 18-octet header, T bit clear.
        (any::<[u8; 18]>(), payload(), any::<prop::sample::Index>()).prop_map(|(mut h, p, i)| {
            h[0] &= 0x7f;
            let cut = i.index(p.len() + 1);
            Ulpdu {
                header: h.to_vec(),
                payload: p,
                cut,
            }
        }),
        // Short ULPDUs of any content (shorter than a DDP header included).
        vec(any::<u8>(), 1..40).prop_map(|u| Ulpdu {
            header: u,
            payload: Vec::new(),
            cut: 0
        }),
    ]
}

fn chunking() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        Just(vec![1]),
        vec(1usize..8, 1..6),
        vec(1usize..1500, 1..6),
        Just(vec![usize::MAX]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn framer_then_deframer_is_the_identity(
        ulpdus in vec(ulpdu_strategy(), 1..8),
        crc in any::<bool>(),
        markers in any::<bool>(),
        chunks in chunking(),
        place in any::<bool>(),
    ) {
        let wire = frame_all(tx(crc, markers), &ulpdus);
        let originals: Vec<Vec<u8>> = ulpdus.iter().map(Ulpdu::bytes).collect();
        prop_assert_eq!(&oracle(tx(crc, markers), &wire), &originals);
        let (got, err) = deframe(rx(crc, markers), &wire, &chunks, place);
        prop_assert_eq!(err, None);
        prop_assert_eq!(&got.ulpdus, &originals);
        prop_assert!(got.partial.is_none());
        prop_assert!(got.idle);
        prop_assert_eq!(got.position, wire.len() as u64);
    }

    #[test]
    fn truncation_never_yields_a_bogus_fpdu(
        ulpdus in vec(ulpdu_strategy(), 1..4),
        markers in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let wire = frame_all(tx(true, markers), &ulpdus);
        let cut = cut.index(wire.len());
        let (got, err) = deframe(rx(true, markers), &wire[..cut], &[1 + cut % 7], false);
        prop_assert_eq!(err, None);
        // Exactly the FPDUs that are complete in the prefix were delivered.
        let mut complete = 0;
        let mut framer = Framer::new(tx(true, markers));
        for u in &ulpdus {
            if framer.position() + framer.next_fpdu_len(u.bytes().len()) as u64 > cut as u64 {
                break;
            }
            framer.frame_to_vec(&u.parts());
            complete += 1;
        }
        prop_assert_eq!(got.ulpdus.len(), complete);
        prop_assert_eq!(got.idle, framer.position() == cut as u64);
    }
}

// ---------------------------------------------------------------------------------------------
// Marker edge cases

/// A ULPDU that, framed first (at position 0, so after the leading marker), leaves the next
/// FPDU at stream position `next` (a multiple of 4 in 16..=512, without a marker inside).
fn filler_to(next: usize) -> Ulpdu {
    // 4 (marker) + 2 + len + pad + 4 = next, with len + 2 a multiple of 4.
    Ulpdu::new(&vec![0x5a; next - 10], &[])
}

fn untagged_header(msn: u32) -> Vec<u8> {
    let mut h = vec![0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0];
    h.extend_from_slice(&msn.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0]);
    h
}

fn roundtrip_all_ways(ulpdus: &[Ulpdu]) -> Vec<u8> {
    let wire = frame_all(tx(true, true), ulpdus);
    let originals: Vec<Vec<u8>> = ulpdus.iter().map(Ulpdu::bytes).collect();
    assert_eq!(oracle(tx(true, true), &wire), originals);
    for chunks in [&[1][..], &[3, 5], &[usize::MAX]] {
        for place in [false, true] {
            let (got, err) = deframe(rx(true, true), &wire, chunks, place);
            assert_eq!(err, None);
            assert_eq!(got.ulpdus, originals);
            assert!(got.idle);
        }
    }
    wire
}

#[test]
fn marker_at_the_very_first_position() {
    let wire = roundtrip_all_ways(&[Ulpdu::new(&untagged_header(1), &[7; 16])]);
    assert_eq!(&wire[..6], &[0, 0, 0, 0, 0, 34]);
    assert_eq!(wire.len(), 44);
    // The leading marker is CRC-covered.
    assert_eq!(wire[40..], crc::crc32c(&wire[..40]).to_le_bytes());
}

#[test]
fn ddp_header_straddles_a_marker() {
    // The second FPDU's ULPDU_LENGTH is at 508..510, ULPDU octets 0..2 at 510..512, the marker
    // at 512 (FPDUPTR 4), the rest of the 18-octet header after it.
    let second = Ulpdu::new(&untagged_header(2), &[9; 40]);
    let wire = roundtrip_all_ways(&[filler_to(508), second.clone()]);
    assert_eq!(&wire[508..512], &[0, 58, 0x41, 0x43]);
    assert_eq!(&wire[512..516], &[0, 0, 0, 4]);
    assert_eq!(&wire[516..532], &second.header[2..]);
    // The same with a tagged header split after 10 octets.
    let tagged = Ulpdu::new(&[0xc1; 14], &[1; 3]);
    let wire = roundtrip_all_ways(&[filler_to(500), tagged]);
    assert_eq!(&wire[512..516], &[0, 0, 0, 12]);
}

#[test]
fn fpdu_starting_on_a_boundary_gets_a_leading_marker() {
    // The length field can never straddle a marker (FPDUs start at multiples of 4); the
    // closest case is a marker immediately in front of ULPDU_LENGTH, which belongs to the new
    // FPDU with FPDUPTR 0 and is covered by its CRC, not by the previous one's.
    let wire = roundtrip_all_ways(&[filler_to(512), Ulpdu::new(&untagged_header(2), &[3; 6])]);
    assert_eq!(&wire[508..512], &crc::crc32c(&wire[..508]).to_le_bytes());
    assert_eq!(&wire[512..518], &[0, 0, 0, 0, 0, 24]);
    let end = wire.len();
    assert_eq!(
        wire[end - 4..],
        crc::crc32c(&wire[512..end - 4]).to_le_bytes()
    );
}

#[test]
fn ulpdu_ending_exactly_on_a_512_boundary() {
    // 4 + 2 + 506 = 512: no pad, the marker falls between the ULPDU and the CRC.
    let u = Ulpdu::new(&untagged_header(1), &[0xee; 488]);
    let wire = roundtrip_all_ways(std::slice::from_ref(&u));
    assert_eq!(&wire[512..516], &[0, 0, 0x01, 0xfc]); // 512 - 4 = 508
    assert_eq!(wire.len(), 520);
    assert_eq!(wire[516..], crc::crc32c(&wire[..516]).to_le_bytes());
}

#[test]
fn marker_between_pad_and_crc() {
    // 4 + 2 + 503 + 3 pad = 512.
    let u = Ulpdu::new(&[0xc0; 14], &[0x11; 489]);
    let wire = roundtrip_all_ways(std::slice::from_ref(&u));
    assert_eq!(&wire[509..512], &[0, 0, 0]);
    assert_eq!(&wire[512..516], &[0, 0, 0x01, 0xfc]);
    assert_eq!(wire.len(), 520);
}

#[test]
fn fpdu_spanning_many_markers() {
    let payload: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let u = Ulpdu::new(&[0xc1; 14], &payload);
    let wire = roundtrip_all_ways(&[filler_to(256), u.clone(), u]);
    let n = (wire.len() as u64).div_ceil(MARKER_INTERVAL) as usize;
    for k in 1..n {
        let at = 512 * k;
        let ptr = u16::from_be_bytes([wire[at + 2], wire[at + 3]]);
        assert!(ptr == 0 || ptr as usize <= at, "marker at {at}");
    }
}

#[test]
fn markers_off_means_none_anywhere() {
    let u = Ulpdu::new(&[0xc1; 14], &[0; 1000]);
    let wire = frame_all(tx(false, false), &[u.clone(), u]);
    assert_eq!(wire.len(), 2 * (2 + 1014 + 4));
    assert_eq!(&wire[..2], &[0x03, 0xf6]);
}

// ---------------------------------------------------------------------------------------------
// Fault injection

/// Flips every bit of a CRC-protected stream, one at a time: each flip must be reported as a
/// CRC or marker error, except that a flip in a ULPDU_LENGTH field that makes the FPDU longer
/// than what follows may leave the deframer waiting for octets that never come. Never may a
/// corrupted FPDU be delivered.
fn every_bit_flip_is_caught(markers: bool) {
    let ulpdus = [
        Ulpdu::new(&untagged_header(1), &[0x33; 300]),
        Ulpdu::new(
            &[0xc1; 14],
            &(0..700u32).map(|i| i as u8).collect::<Vec<_>>(),
        ),
        Ulpdu::new(&untagged_header(2), &[0x44; 5]),
    ];
    let wire = frame_all(tx(true, markers), &ulpdus);
    let originals: Vec<Vec<u8>> = ulpdus.iter().map(Ulpdu::bytes).collect();
    // Stream positions of the ULPDU_LENGTH fields.
    let mut length_fields = Vec::new();
    let mut framer = Framer::new(tx(true, markers));
    for u in &ulpdus {
        let skip = if markers && framer.position() % 512 == 0 {
            4
        } else {
            0
        };
        length_fields.push(framer.position() as usize + skip);
        framer.frame_to_vec(&u.parts());
    }
    let mut stalls = 0;
    for bit in 0..wire.len() * 8 {
        let mut bad = wire.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let (got, err) = deframe(rx(true, markers), &bad, &[97], bit % 2 == 0);
        // What was delivered is an unmodified prefix.
        assert!(
            got.ulpdus.len() < originals.len(),
            "bit {bit}: all FPDUs accepted"
        );
        assert_eq!(got.ulpdus[..], originals[..got.ulpdus.len()], "bit {bit}");
        match err {
            Some(ProtoError::Crc | ProtoError::MarkerMismatch) => {}
            None => {
                let octet = bit / 8;
                assert!(
                    length_fields.iter().any(|&l| octet == l || octet == l + 1),
                    "bit {bit}: silently waiting after a flip outside a length field"
                );
                assert!(!got.idle);
                stalls += 1;
            }
            Some(e) => panic!("bit {bit}: unexpected {e:?}"),
        }
    }
    // Only upward length flips can stall: at most 16 bits per length field.
    assert!(stalls <= 16 * ulpdus.len());
}

#[test]
fn every_bit_flip_is_caught_without_markers() {
    every_bit_flip_is_caught(false);
}

#[test]
fn every_bit_flip_is_caught_with_markers() {
    every_bit_flip_is_caught(true);
}

#[test]
fn without_crc_markers_still_catch_lost_framing() {
    // CRC off: a corrupted length that stays plausible is caught by the first marker that
    // belongs to the next FPDU (its FPDUPTR is relative to the real ULPDU_LENGTH).
    let u = Ulpdu::new(&[0xc1; 14], &[0; 2000]);
    let mut wire = frame_all(tx(false, true), &[u.clone(), u]);
    assert_eq!(&wire[4..6], &[0x07, 0xde]);
    wire[5] ^= 0x20; // ULPDU_LENGTH 2014 -> 2046: the FPDU seems to run past 2048
    let (_, err) = deframe(rx(false, true), &wire, &[usize::MAX], false);
    assert_eq!(err, Some(ProtoError::MarkerMismatch));
}

#[test]
fn zero_length_and_oversized_ulpdus_are_rejected() {
    let (_, err) = deframe(rx(true, false), &[0, 0, 0, 0, 0, 0], &[1], false);
    assert_eq!(err, Some(ProtoError::MarkerMismatch));
    let wire = frame_all(tx(true, false), &[Ulpdu::new(&[0x41; 18], &[0; 1436])]);
    let cfg = RxConfig {
        crc: true,
        markers: false,
        max_ulpdu: 1454,
    };
    assert_eq!(deframe(cfg, &wire, &[1], false).1, None);
    let wire = frame_all(tx(true, false), &[Ulpdu::new(&[0x41; 18], &[0; 1437])]);
    assert_eq!(
        deframe(cfg, &wire, &[1], false).1,
        Some(ProtoError::MarkerMismatch)
    );
}

// ---------------------------------------------------------------------------------------------
// Real captures

/// MPA Request/Reply at the start of a direction: (flags, total length), if present.
fn mpa_req_rep(stream: &[u8], key: &[u8; 16]) -> Option<(u8, usize)> {
    if stream.len() < 20 || &stream[..16] != key {
        return None;
    }
    let pd_len = u16::from_be_bytes([stream[18], stream[19]]) as usize;
    Some((stream[16], 20 + pd_len))
}

#[test]
fn every_fpdu_of_every_siw_capture() {
    let Some(dir) = common::pcap::captures_dir() else {
        eprintln!("no captures directory; skipping");
        return;
    };
    let files = common::pcap::capture_files(&dir);
    assert!(!files.is_empty());
    let (mut fpdus, mut with_crc, mut directions, mut dirty_pads) = (0usize, 0, 0, 0);
    for file in &files {
        for conn in common::pcap::read_streams(file) {
            let Some((req_flags, req_len)) = mpa_req_rep(&conn.to_server, b"MPA ID Req Frame")
            else {
                continue;
            };
            let Some((rep_flags, rep_len)) = mpa_req_rep(&conn.to_client, b"MPA ID Rep Frame")
            else {
                continue;
            };
            if rep_flags & 0x20 != 0 {
                // Rejected: no FPDUs may follow.
                assert_eq!(conn.to_client.len(), rep_len, "{}", file.display());
                continue;
            }
            // The Responder's C decides (siw echoes a C=1 request and ignores its own wish
            // when the request has C=0); M asks the *other* side for markers.
            let crc = rep_flags & 0x40 != 0;
            assert!(
                req_flags & 0x40 == 0 || crc,
                "{}: C=1 request, C=0 reply",
                file.display()
            );
            let dirs = [
                (
                    &conn.to_server[req_len..],
                    rep_flags & 0x80 != 0,
                    "to server",
                ),
                (
                    &conn.to_client[rep_len..],
                    req_flags & 0x80 != 0,
                    "to client",
                ),
            ];
            for (stream, markers, name) in dirs {
                let what = format!("{} {} ({name})", file.display(), conn.client);
                let cfg = rx(crc, markers);
                let (got, err) = deframe(cfg, stream, &[usize::MAX], false);
                assert_eq!(err, None, "{what}");
                assert!(got.idle, "{what}: stream ends inside an FPDU");
                // Any chunking gives the same FPDUs.
                let (again, err) = deframe(cfg, stream, &[1, 1460, 3], true);
                assert_eq!(err, None, "{what}");
                assert_eq!(again.ulpdus, got.ulpdus, "{what}");
                // Re-framing reproduces the stream byte for byte, except that siw does not zero
                // the pad (RFC 5044 §4.2 says the sender MUST; receivers ignore it, the CRC
                // covers it): where the wire's pad differs from our zeros, take its pad octets
                // and recompute the CRC over them, which must then give the wire's CRC.
                let mut framer = Framer::new(tx(crc, markers));
                let mut reframed = Vec::with_capacity(stream.len());
                for u in &got.ulpdus {
                    let mut fpdu = framer.frame_to_vec(&[u.as_slice()]);
                    let at = reframed.len();
                    let wire_fpdu = &stream[at..(at + fpdu.len()).min(stream.len())];
                    let pad = 2 + u.len()..2 + u.len() + pad_len(u.len());
                    if !markers
                        && wire_fpdu.len() == fpdu.len()
                        && fpdu[pad.clone()] != wire_fpdu[pad.clone()]
                    {
                        fpdu[pad.clone()].copy_from_slice(&wire_fpdu[pad]);
                        let end = fpdu.len() - 4;
                        if crc {
                            let value = crc::crc32c(&fpdu[..end]);
                            fpdu[end..].copy_from_slice(&crc::to_wire(value));
                        }
                        dirty_pads += 1;
                    }
                    reframed.extend_from_slice(&fpdu);
                }
                if let Some(i) = (0..stream.len()).find(|&i| reframed.get(i) != stream.get(i)) {
                    let lo = i.saturating_sub(24);
                    panic!(
                        "{what}: re-framing differs at {i} of {}:\n ours {:02x?}\n wire {:02x?}",
                        stream.len(),
                        &reframed[lo..(i + 8).min(reframed.len())],
                        &stream[lo..(i + 8).min(stream.len())]
                    );
                }
                assert_eq!(reframed.len(), stream.len(), "{what}");
                fpdus += got.ulpdus.len();
                with_crc += if crc { got.ulpdus.len() } else { 0 };
                directions += 1;
            }
        }
    }
    eprintln!(
        "{fpdus} FPDUs ({with_crc} with CRC, {dirty_pads} with non-zero pad) in {directions} \
         directions of {} files",
        files.len()
    );
    assert!(
        fpdus > 100 && with_crc > 50,
        "{fpdus} FPDUs, {with_crc} with CRC"
    );
}
