//! Every FPDU of every real siw capture through `wire::rdmap`: each ULPDU header parses,
//! re-emits byte for byte, is the canonical header of its message, and the messages of each
//! direction follow the DDP sequencing rules (MSN per queue from 1, MO and TO continuous
//! across the segments of a message). Opcodes are counted per capture and must fit what the
//! scenario ran (rping: Send, Read Request, Read Response, Write; perftest: its operation).
//!
//! The captures are `../shared/interop/siw-vm/captures/*.pcap` (or `$EXSOCK_CAPTURES`;
//! `EXSOCK_NO_CAPTURES=1` skips). No markers: siw never negotiates them.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::pcap::{capture_files, captures_dir, read_streams};
use ddp_proto::wire::ddp::{DdpBuffer, STag};
use ddp_proto::wire::rdmap::{FIRST_MSN, Opcode, RdmapHeader, RdmapMessage};

const MPA_REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
const MPA_REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";

fn real_captures() -> Vec<PathBuf> {
    match captures_dir() {
        Some(dir) => {
            let files = capture_files(&dir);
            assert!(!files.is_empty(), "no captures in {}", dir.display());
            files
        }
        None if std::env::var_os("EXSOCK_NO_CAPTURES").is_some() => Vec::new(),
        None => panic!(
            "siw captures not found: set EXSOCK_CAPTURES=DIR (or EXSOCK_NO_CAPTURES=1 to skip)"
        ),
    }
}

/// Per-direction DDP sequencing state, to check what the headers say across FPDUs.
#[derive(Default)]
struct Sequencing {
    /// Untagged: QN → (next MSN, MO expected for the next segment of the open message).
    queues: BTreeMap<u32, (u32, u32)>,
    /// Tagged: (STag, next TO) of a message whose last segment has not come yet.
    open_tagged: Option<(STag, u64)>,
}

impl Sequencing {
    fn segment(&mut self, h: &RdmapHeader, payload_len: usize, label: &str) {
        let len = u32::try_from(payload_len).unwrap();
        match h.ddp.buffer {
            DdpBuffer::Untagged { qn, msn, mo, .. } => {
                let (next_msn, next_mo) = self.queues.entry(qn).or_insert((FIRST_MSN, 0));
                assert_eq!(msn, *next_msn, "{label}: MSN on QN {qn}");
                assert_eq!(mo, *next_mo, "{label}: MO on QN {qn} MSN {msn}");
                if h.last() {
                    *next_msn = next_msn.wrapping_add(1);
                    *next_mo = 0;
                } else {
                    *next_mo += len;
                }
            }
            DdpBuffer::Tagged { stag, to } => {
                if let Some((open_stag, next_to)) = self.open_tagged {
                    assert_eq!(
                        (stag, to),
                        (open_stag, next_to),
                        "{label}: tagged continuation"
                    );
                }
                self.open_tagged = (!h.last()).then_some((stag, to + u64::from(len)));
            }
        }
    }
}

#[derive(Default, Debug)]
struct Counts {
    fpdus: usize,
    by_opcode: BTreeMap<String, usize>,
    zero_length_writes: usize,
}

impl Counts {
    fn get(&self, op: Opcode) -> usize {
        self.by_opcode.get(&format!("{op:?}")).copied().unwrap_or(0)
    }
}

/// Walks one direction of a connection: skips the MPA Request/Reply, then checks every FPDU.
fn walk_direction(stream: &[u8], key: &[u8; 16], counts: &mut Counts, label: &str) {
    if stream.is_empty() {
        return;
    }
    assert!(
        stream.len() >= 20 && &stream[..16] == key,
        "{label}: does not start with {:?}",
        std::str::from_utf8(key).unwrap()
    );
    let mut pos = 20 + usize::from(u16::from_be_bytes([stream[18], stream[19]]));
    let mut seq = Sequencing::default();
    let mut index = 0;
    while pos < stream.len() {
        assert!(pos + 2 <= stream.len(), "{label}: cut inside an MPA length");
        let ulpdu_len = usize::from(u16::from_be_bytes([stream[pos], stream[pos + 1]]));
        let fpdu_len = (2 + ulpdu_len).next_multiple_of(4) + 4;
        assert!(
            pos + fpdu_len <= stream.len(),
            "{label}: cut inside an FPDU"
        );
        let ulpdu = &stream[pos + 2..pos + 2 + ulpdu_len];
        let label = format!("{label} FPDU #{index} at {pos}");

        let (h, hlen) = RdmapHeader::parse(ulpdu).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(RdmapHeader::required_len(ulpdu), Ok(hlen), "{label}");
        let mut out = vec![0u8; hlen];
        assert_eq!(h.emit(&mut out), Ok(hlen), "{label}");
        assert_eq!(out, ulpdu[..hlen], "{label}: re-emitted header differs");

        let msg = h.message();
        assert!(
            !matches!(msg, RdmapMessage::Unexpected { .. }),
            "{label}: {h:?}"
        );
        assert_eq!(
            RdmapHeader::new(msg, h.last()),
            h,
            "{label}: siw header not canonical"
        );
        if let RdmapMessage::ReadRequest { body, .. } = msg {
            assert_eq!(ulpdu_len, 46, "{label}: Read Request carries no payload");
            assert!(h.last(), "{label}");
            assert!(body.read_size > 0, "{label}");
        }
        if matches!(msg, RdmapMessage::Write { .. }) && hlen == ulpdu_len {
            counts.zero_length_writes += 1;
        }
        seq.segment(&h, ulpdu_len - hlen, &label);

        *counts
            .by_opcode
            .entry(format!("{:?}", h.opcode()))
            .or_default() += 1;
        counts.fpdus += 1;
        index += 1;
        pos += fpdu_len;
    }
    assert_eq!(seq.open_tagged, None, "{label}: tagged message left open");
    for (qn, (_, mo)) in &seq.queues {
        assert_eq!(*mo, 0, "{label}: untagged message on QN {qn} left open");
    }
}

fn walk_capture(path: &Path) -> Counts {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let mut counts = Counts::default();
    for (i, s) in read_streams(path).iter().enumerate() {
        let label = format!("{name} conn #{i} {}->{}", s.client, s.server);
        walk_direction(
            &s.to_server,
            MPA_REQ_KEY,
            &mut counts,
            &format!("{label} to server"),
        );
        walk_direction(
            &s.to_client,
            MPA_REP_KEY,
            &mut counts,
            &format!("{label} to client"),
        );
    }
    counts
}

#[test]
fn every_fpdu_of_every_capture_reemits_byte_identically() {
    let mut total = Counts::default();
    let mut scenarios_seen = 0;
    for path in real_captures() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let c = walk_capture(&path);
        eprintln!("{name}: {} FPDUs {:?}", c.fpdus, c.by_opcode);
        for (k, v) in &c.by_opcode {
            *total.by_opcode.entry(k.clone()).or_default() += v;
        }
        total.fpdus += c.fpdus;
        total.zero_length_writes += c.zero_length_writes;

        // No capture has a Terminate: rping and perftest end with a plain TCP close.
        assert_eq!(c.get(Opcode::Terminate), 0, "{name}");
        let scenario = name.split('.').next().unwrap();
        let failed = matches!(scenario, "rping-crc-strict-mismatch" | "rping-mpav1");
        if scenario.starts_with("smoke-") || failed {
            // MPA exchange only (smoke, reject) or an rping that stopped before its Read.
            assert_eq!(c.get(Opcode::ReadRequest), 0, "{name}");
            continue;
        }
        scenarios_seen += 1;
        assert!(c.get(Opcode::Send) > 0, "{name}: {c:?}");
        if scenario.starts_with("rping") {
            // rping per iteration: Send, Read Request, Read Response, Send, Send, Write, Send.
            let rr = c.get(Opcode::ReadRequest);
            assert!(rr > 0, "{name}: {c:?}");
            assert!(c.get(Opcode::ReadResponse) >= rr, "{name}: {c:?}");
            assert!(c.get(Opcode::Write) >= rr, "{name}: {c:?}");
            assert!(c.get(Opcode::Send) >= 4 * rr, "{name}: {c:?}");
        } else if scenario.starts_with("read_bw") {
            assert!(c.get(Opcode::ReadRequest) >= 5, "{name}: {c:?}");
            assert!(c.get(Opcode::ReadResponse) >= 5, "{name}: {c:?}");
        } else if scenario.starts_with("write_bw") {
            assert!(c.get(Opcode::Write) >= 5, "{name}: {c:?}");
            assert_eq!(c.get(Opcode::ReadRequest), 0, "{name}: {c:?}");
        } else if scenario.starts_with("send_bw") {
            // (perftest's setup also issues a couple of small RDMA Writes.)
            assert!(c.get(Opcode::Send) >= 5, "{name}: {c:?}");
            assert!(c.get(Opcode::Send) > c.get(Opcode::Write), "{name}: {c:?}");
            assert_eq!(c.get(Opcode::ReadRequest), 0, "{name}: {c:?}");
        } else {
            panic!("{name}: unknown scenario, extend this test");
        }
        if scenario == "rping-p2p" {
            // The initiator's zero-length RDMA Write RTR, once per leg.
            assert_eq!(c.zero_length_writes, 1, "{name}");
        } else {
            assert_eq!(c.zero_length_writes, 0, "{name}");
        }
    }
    if total.fpdus > 0 {
        eprintln!("all captures: {} FPDUs {:?}", total.fpdus, total.by_opcode);
        assert!(scenarios_seen >= 10, "only {scenarios_seen} scenarios");
        for op in [
            Opcode::Send,
            Opcode::ReadRequest,
            Opcode::ReadResponse,
            Opcode::Write,
        ] {
            assert!(total.get(op) > 0, "no {op:?} in any capture");
        }
    }
}

/// The first FPDU from the initiator in the P2P capture is the RTR: STag 1, TO 0, no payload.
#[test]
fn p2p_capture_starts_with_write_rtr() {
    let Some(path) = real_captures()
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "rping-p2p.lo.pcap"))
    else {
        return;
    };
    let streams = read_streams(&path);
    let s = &streams[0];
    let pos = 20 + usize::from(u16::from_be_bytes([s.to_server[18], s.to_server[19]]));
    let ulpdu_len = usize::from(u16::from_be_bytes([s.to_server[pos], s.to_server[pos + 1]]));
    assert_eq!(ulpdu_len, 14);
    let (h, len) = RdmapHeader::parse(&s.to_server[pos + 2..pos + 2 + ulpdu_len]).unwrap();
    assert_eq!(len, 14);
    assert_eq!(
        h.message(),
        RdmapMessage::Write {
            sink_stag: STag(1),
            sink_to: 0
        }
    );
}
