//! Replays the checked-in fuzz corpus (`ddp-proto/fuzz/corpus/<target>/*`) through the fuzz
//! bodies in `ddp_proto::fuzz`, on stable and without libFuzzer: every input the fuzzer kept
//! (seeds from the real siw captures, then what bounded runs found interesting) stays a
//! regression test. Crash reproducers under `fuzz/artifacts-found/` are *not* replayed here
//! (they are bugs until their owners fix them).
//!
//! The seeds are built by the ignored test `write_seeds` from the captures in
//! `../shared/interop/siw-vm/captures/` (or `$EXSOCK_CAPTURES`):
//!
//! ```text
//! EXSOCK_WRITE_FUZZ_SEEDS=1 cargo test -p ddp-proto --test fuzz_corpus -- --ignored write_seeds
//! ```
//!
//! which writes `fuzz/corpus/<target>/seed-*` (selector bytes as documented on each body,
//! followed by real bytes); `scripts/fuzz` then grows and minimises the corpus.

mod common;

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use common::pcap::{capture_files, captures_dir, read_streams};
use ddp_proto::error::ProtoError;
use ddp_proto::mpa::framer::{Framer, TxConfig};
use ddp_proto::wire::ddp::STag;
use ddp_proto::wire::rdmap::{
    RdmapHeader, RdmapMessage, ReadRequestBody, TerminateHeader, TerminatedDdpHeader,
};

/// A fuzz body.
type Body = fn(&[u8]);

/// Every fuzz target and its body.
const TARGETS: [(&str, Body); 5] = [
    ("deframer", ddp_proto::fuzz::deframer),
    ("mpa_responder", ddp_proto::fuzz::mpa_responder),
    ("mpa_initiator", ddp_proto::fuzz::mpa_initiator),
    ("wire_headers", ddp_proto::fuzz::wire_headers),
    ("connection_ops", ddp_proto::fuzz::connection_ops),
];

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn corpus_files(target: &str) -> Vec<PathBuf> {
    let dir = corpus_dir(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every file of `target`'s corpus through `body`; returns the files that panicked.
fn replay(target: &str, body: Body) -> (usize, Vec<String>) {
    let files = corpus_files(target);
    let mut failed = Vec::new();
    for f in &files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
            failed.push(f.display().to_string());
        }
    }
    (files.len(), failed)
}

#[test]
fn corpus_replays_without_a_panic() {
    let mut failed = Vec::new();
    for (target, body) in TARGETS {
        let (n, f) = replay(target, body);
        // connection_ops may not have a corpus yet; every other target must have one.
        if target != "connection_ops" {
            assert!(
                n > 0,
                "no corpus for {target} in {}",
                corpus_dir(target).display()
            );
        }
        eprintln!("{target}: {n} inputs replayed");
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "fuzz corpus inputs that panic: {failed:#?}"
    );
}

/// Short and degenerate inputs every body must take (the fuzzer starts from these too).
#[test]
fn bodies_take_degenerate_inputs() {
    let inputs: [&[u8]; 6] = [
        &[],
        &[0],
        &[0xff; 3],
        &[0x13, 0x03, 0x01, 0x00, 0x10],
        &[0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00],
        b"\0\0\0\0MPA ID Req Frame\x40\x02\x00\x04\x00\x80\x00\x80",
    ];
    for (_, body) in TARGETS {
        for input in inputs {
            body(input);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seed generation (ignored test; writes files)

const KEY_REQ: &[u8; 16] = b"MPA ID Req Frame";
const KEY_REP: &[u8; 16] = b"MPA ID Rep Frame";

/// Length of the MPA frame at the start of `stream`, if it starts with `key`.
fn mpa_frame_len(stream: &[u8], key: &[u8; 16]) -> Option<usize> {
    (stream.len() >= 20 && stream.starts_with(key))
        .then(|| 20 + usize::from(u16::from_be_bytes([stream[18], stream[19]])))
        .filter(|&n| n <= stream.len())
}

/// The ULPDUs of an FPDU stream without markers (stops at the first incomplete FPDU).
fn ulpdus(fpdus: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 2 <= fpdus.len() {
        let len = usize::from(u16::from_be_bytes([fpdus[at], fpdus[at + 1]]));
        let end = at + 2 + len + (4 - (2 + len) % 4) % 4 + 4;
        if len == 0 || end > fpdus.len() {
            break;
        }
        out.push(&fpdus[at + 2..at + 2 + len]);
        at = end;
    }
    out
}

/// The prefix of an FPDU stream holding whole FPDUs only, at most about `max` bytes.
fn whole_fpdus(fpdus: &[u8], max: usize) -> &[u8] {
    let mut at = 0;
    for u in ulpdus(fpdus) {
        let next = at + 2 + u.len() + (4 - (2 + u.len()) % 4) % 4 + 4;
        if next > max && at > 0 {
            break;
        }
        at = next;
    }
    &fpdus[..at]
}

struct Seeds {
    seen: BTreeSet<(String, Vec<u8>)>,
}

impl Seeds {
    fn add(&mut self, target: &str, bytes: Vec<u8>) {
        self.seen.insert((target.to_string(), bytes));
    }

    fn write(&self) {
        for (target, bytes) in &self.seen {
            let dir = corpus_dir(target);
            std::fs::create_dir_all(&dir).expect("corpus dir");
            let name = format!("seed-{:016x}", fnv1a(bytes));
            std::fs::write(dir.join(name), bytes).expect("write seed");
        }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn prefixed(prefix: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut v = prefix.to_vec();
    v.extend_from_slice(rest);
    v
}

#[test]
#[ignore = "writes the fuzz seeds; run with EXSOCK_WRITE_FUZZ_SEEDS=1"]
fn write_seeds() {
    if std::env::var_os("EXSOCK_WRITE_FUZZ_SEEDS").is_none() {
        eprintln!("set EXSOCK_WRITE_FUZZ_SEEDS=1 to write the seeds");
        return;
    }
    let dir = captures_dir().expect("siw captures");
    let mut seeds = Seeds {
        seen: BTreeSet::new(),
    };
    let mut headers = BTreeSet::new();
    for path in capture_files(&dir) {
        for s in read_streams(&path) {
            let (Some(req_len), Some(rep_len)) = (
                mpa_frame_len(&s.to_server, KEY_REQ),
                mpa_frame_len(&s.to_client, KEY_REP),
            ) else {
                continue;
            };
            let (req, rep) = (&s.to_server[..req_len], &s.to_client[..rep_len]);
            let crc = (req[16] | rep[16]) & 0x40 != 0;

            // MPA: the frame and the first FPDU bytes after it, under a few configurations
            // (a: siw-like, CRC wanted, strict, revision 1; c: auto, accept, reject).
            let ini_stream = &s.to_server[..(req_len + 48).min(s.to_server.len())];
            let resp_stream = &s.to_client[..(rep_len + 48).min(s.to_client.len())];
            for (a, b, c, sel) in [
                (0x00, 0x03, 0x00, 0x00),
                (0x02, 0x0b, 0x01, 0x01),
                (0x04, 0x43, 0x02, 0x03),
                (0x01, 0x13, 0x00, 0x07),
                (0x38, 0xa7, 0x04, 0x0e),
            ] {
                seeds.add("mpa_responder", prefixed(&[a, b, c, sel], ini_stream));
                seeds.add("mpa_initiator", prefixed(&[a, b, c, sel], resp_stream));
            }
            seeds.add("wire_headers", req.to_vec());
            seeds.add("wire_headers", rep.to_vec());

            for fpdus in [&s.to_server[req_len..], &s.to_client[rep_len..]] {
                if fpdus.is_empty() {
                    continue;
                }
                // Raw FPDU streams as captured (no markers: siw never uses them).
                let cfg = u8::from(crc);
                for (sel, max) in [(0x00, 8192), (0x01, 600), (0x83, 4096)] {
                    seeds.add("deframer", prefixed(&[cfg, sel], whole_fpdus(fpdus, max)));
                }
                // A cut in the middle of an FPDU.
                let cut = &fpdus[..fpdus.len().min(77)];
                seeds.add("deframer", prefixed(&[cfg, 0x02], cut));
                // The same ULPDUs framed with markers (CRC on and off), as a raw stream.
                let us = ulpdus(whole_fpdus(fpdus, 6000));
                for tx_crc in [false, true] {
                    let mut framer = Framer::new(TxConfig {
                        crc: tx_crc,
                        markers: true,
                    });
                    let mut wire = Vec::new();
                    for u in &us {
                        wire.extend_from_slice(&framer.frame_to_vec(&[u]));
                    }
                    seeds.add(
                        "deframer",
                        prefixed(&[0x02 | u8::from(tx_crc), 0x47], &wire),
                    );
                }
                // Every kind of ULPDU header (opcode × T bit), and a Terminate, for the wire body.
                for u in ulpdus(fpdus) {
                    if u.len() >= 2 && headers.insert((u[0] & 0xc0, u[1] & 0x0f)) {
                        seeds.add("wire_headers", u[..u.len().min(96)].to_vec());
                    }
                }
            }
        }
    }
    // Framed mode: a few ULPDU records (length, fill) under each CRC/marker setting.
    for cfg in [0x10u8, 0x11, 0x12, 0x13, 0x17, 0x1b] {
        let records = [
            0x02, 0x40, 0x41, 0x00, 0x11, 0xc0, 0x01, 0xf3, 0x43, 0x00, 0x00, 0x07,
        ];
        seeds.add(
            "deframer",
            prefixed(&[cfg, 0x03, 0x00, 0x00, 0x00], &records),
        );
        seeds.add(
            "deframer",
            prefixed(&[cfg, 0x01, 0x05, 0x01, 0x23], &records),
        );
    }
    // A Terminate header for the wire body (the captures that fail do so during MPA).
    let term = RdmapHeader::new(
        RdmapMessage::Terminate {
            msn: 1,
            mo: 0,
            term: TerminateHeader {
                segment_length_valid: true,
                ddp_segment_length: 46,
                ddp_header: Some(
                    TerminatedDdpHeader::from_ulpdu(&[
                        0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0,
                    ])
                    .unwrap(),
                ),
                rdmap_header: Some(ReadRequestBody {
                    sink_stag: STag(0x0102_0304),
                    sink_to: 0x1000,
                    read_size: 64,
                    source_stag: STag(0x0a0b_0c0d),
                    source_to: 0x2000,
                }),
                ..TerminateHeader::new(ProtoError::RdmapInvalidStag.term_code())
            },
        },
        true,
    );
    let mut buf = vec![0u8; term.buffer_len()];
    term.emit(&mut buf).unwrap();
    seeds.add("wire_headers", buf.clone());
    // Connection scenarios (see `ddp_proto::fuzz::connection_ops` for the encoding): A
    // posts a receive on B, a Send, a Write and a Read, and both sides pump and feed;
    // under CRC off/on, markers, stream mode, RTR kinds and direct placement.
    const PUMP_FEED: [u8; 8] = [0x05, 0x04, 0x86, 0x00, 0x85, 0x04, 0x06, 0x00];
    let script: Vec<u8> = [
        &[0x80, 0xff, 0x80, 0x21][..],   // B: two receives (511 and 67 bytes)
        &[0x01, 0x10, 0x20, 0x01],       // A: signaled Send of 288 bytes
        &[0x02, 0x30, 0x05, 0x03],       // A: Send with Invalidate (B's region 0), SE
        &[0x03, 0x00, 0x10, 0x30, 0x01], // A: Write to B's region 0
        &[0x04, 0x02, 0x04, 0x40, 0x01], // A: Read from B's region 2
        &PUMP_FEED,
        &PUMP_FEED,
        &[0x81, 0x01, 0x08, 0x01, 0x00, 0x60], // B: Send to A, A posts a receive
        &PUMP_FEED,
        &[0x0a], // A: close
        &PUMP_FEED,
    ]
    .concat();
    for (c0, c1) in [
        (0x00, 0x0a),
        (0x01, 0x0a),
        (0x03, 0x29),
        (0x0d, 0x0e),
        (0xd1, 0x4b),
        (0x11, 0x0a),
        (0x21, 0x0a),
        (0x31, 0x1a),
    ] {
        seeds.add("connection_ops", prefixed(&[c0, c1], &script));
    }
    // A hostile peer: framed ULPDUs (tagged Write at A's region 0, a Read Request, a Terminate)
    // and raw bytes, fed to A.
    let mut hostile = vec![0x01, 0x0a, 0x00, 0x40];
    for ulpdu in [
        &[
            0xc1u8, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x90, 0x00, 1, 2, 3,
        ][..],
        &buf,
    ] {
        hostile.extend_from_slice(&[0x07, (ulpdu.len() - 1) as u8, 0x82]);
        hostile.extend_from_slice(ulpdu);
        hostile.extend_from_slice(&[0x06, 0x00]);
    }
    hostile.extend_from_slice(&[0x08, 0x03, 0x00, 0x10, 0x41, 0x41, 0x06, 0x01]);
    seeds.add("connection_ops", hostile);
    seeds.write();
    for (target, _) in TARGETS {
        eprintln!("{target}: {} files", corpus_files(target).len());
    }
}
