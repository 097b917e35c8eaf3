//! The generated-capture acceptance test: the real MPA startup and the real [`Framer`] produce
//! both directions of an iWARP conversation (MPA Request/Reply, then FPDUs of every RDMAP
//! opcode, CRC on, markers on or off per direction), written as a pcap through
//! [`PcapWriter`]; the capture is then read back, deframed with the real [`Deframer`] and every
//! header, payload, marker and CRC is checked against what was sent. `scripts/tests/
//! generated-capture.sh` runs this test and hands the pcaps to `scripts/wirecheck` (tshark).
//!
//! Output: `gen-<scenario>.pcap` and `gen-<scenario>.expect` (what tshark must report: FPDU
//! and opcode counts, and the FPDUPTR of every marker per direction) in `$EXSOCK_GEN_CAPTURES`,
//! default `target/generated-captures/` of the workspace.
//!
//! Conversation (initiator = TCP client "C", responder = server "S"): MPA revision 2 with
//! IRD/ORD words, C asks for CRC and peer-to-peer mode with a zero-length RDMA Write RTR; then
//! Sends of all four kinds (0..100 octets), small RDMA Writes both ways, a 5000-octet and a
//! 2500-octet RDMA Write (several tagged segments, TO advancing, L only on the last), a Read
//! Request each way
//! (QN 1, MSN 1) answered by its Read Response (4000 octets, multi-segment, and 200 octets), a
//! 3000-octet Send (MO advancing), and a Terminate (QN 2) from S carrying a copy of the DDP
//! header of one of C's Write segments. MSNs count per queue from 1. Where a direction carries
//! markers, small "filler" Sends steer the stream so that markers land in front of an FPDU
//! mid-stream, inside DDP/RDMAP headers (Write, Read Request, Terminate), inside payloads, and
//! between pad and CRC; the test fails unless every one of those placements occurred.
//!
//! Segments are cut at the MULPDU of an EMSS of 1460 (RFC 5044's formula), so every FPDU fits
//! a 1460-octet TCP segment. The tiny-MSS scenarios keep those FPDU sizes but let TCP carry
//! them in 61-octet segments: every FPDU then spans many segments (a stream reassembly test,
//! not a realistic sender).
// `is_multiple_of` needs Rust 1.87; the workspace declares rust-version 1.85.
#![allow(clippy::manual_is_multiple_of)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::pcap::{Direction, PcapWriter, read_streams};
use ddp_proto::error::{TermCode, TermLayer, ddp_ecode, ddp_etype};
use ddp_proto::mpa::crc;
use ddp_proto::mpa::deframer::{Deframer, Event, RxConfig};
use ddp_proto::mpa::framer::{Framer, TxConfig};
use ddp_proto::mpa::markers::{self, MARKER_INTERVAL, MARKER_LEN, pad_len};
use ddp_proto::mpa::startup::{Initiator, MpaConfig, Negotiated, Responder, RtrKind, RtrKinds};
use ddp_proto::wire::ddp::{DdpBuffer, STag, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use ddp_proto::wire::rdmap::{
    Opcode, QN_READ_REQUEST, QN_SEND, QN_TERMINATE, READ_REQUEST_LEN, RdmapBody, RdmapHeader,
    RdmapMessage, ReadRequestBody, TerminateHeader, TerminatedDdpHeader,
};

/// The EMSS the sender segments for (MULPDU formula).
const EMSS: usize = 1460;
/// The tiny MSS of the reassembly scenarios (odd, so cuts fall anywhere).
const TINY_MSS: usize = 61;

const INI: usize = 0;
const RESP: usize = 1;

/// The initiator's buffer (target of S's Writes and of its own Read Responses' source).
const C_BUF: STag = STag::from_parts(0x001a2b, 0x5c);
const C_BUF_TO: u64 = 0x0000_7f3a_1c00_0000;
/// The responder's buffer.
const S_BUF: STag = STag::from_parts(0x000777, 0xe1);
const S_BUF_TO: u64 = 0x0000_5612_8000_4000;
/// STags the peers ask each other to invalidate.
const C_INVAL: STag = STag::from_parts(0x000042, 0x17);
const S_INVAL: STag = STag::from_parts(0x000099, 0xa4);

#[derive(Debug, Clone, Copy)]
struct Scenario {
    name: &'static str,
    /// The initiator sets M: the responder inserts markers into what it sends.
    initiator_m: bool,
    /// The responder sets M: the initiator inserts markers into what it sends.
    responder_m: bool,
    /// TCP MSS of the capture.
    mss: usize,
    /// Consecutive FPDUs of one direction share TCP writes (else one write per FPDU).
    coalesce: bool,
    client_port: u16,
    server_port: u16,
}

const CRC: Scenario = Scenario {
    name: "crc",
    initiator_m: false,
    responder_m: false,
    mss: EMSS,
    coalesce: true,
    client_port: 40001,
    server_port: 7301,
};

const CRC_TINY_MSS: Scenario = Scenario {
    name: "crc-mss61",
    initiator_m: false,
    responder_m: false,
    mss: TINY_MSS,
    coalesce: false,
    client_port: 40002,
    server_port: 7302,
};

const CRC_MARKERS: Scenario = Scenario {
    name: "crc-markers",
    initiator_m: true,
    responder_m: true,
    mss: EMSS,
    coalesce: false,
    client_port: 40003,
    server_port: 7303,
};

const CRC_MARKERS_TO_INITIATOR: Scenario = Scenario {
    name: "crc-markers-to-initiator",
    initiator_m: true,
    responder_m: false,
    mss: EMSS,
    coalesce: false,
    client_port: 40004,
    server_port: 7304,
};

const CRC_MARKERS_TINY_MSS: Scenario = Scenario {
    name: "crc-markers-mss61",
    initiator_m: true,
    responder_m: true,
    mss: TINY_MSS,
    coalesce: false,
    client_port: 40005,
    server_port: 7305,
};

#[test]
fn crc_no_markers() {
    run(CRC);
}

#[test]
fn crc_no_markers_tiny_mss() {
    run(CRC_TINY_MSS);
}

#[test]
fn crc_markers_both_directions() {
    run(CRC_MARKERS);
}

#[test]
fn crc_markers_toward_the_initiator_only() {
    run(CRC_MARKERS_TO_INITIATOR);
}

#[test]
fn crc_markers_tiny_mss() {
    run(CRC_MARKERS_TINY_MSS);
}

/// tshark 4.0 cannot dissect two of the captures completely (see the script); these show that
/// the FPDU octets it skips there are octet for octet the ones it checks in other captures.
#[test]
fn partially_dissected_streams_equal_fully_dissected_ones() {
    let stream = |sc: Scenario, from: usize| generate(sc).peers[from].stream.clone();
    // The initiator's unmarked direction of `crc-markers-to-initiator` is that of `crc`.
    assert_eq!(stream(CRC_MARKERS_TO_INITIATOR, INI), stream(CRC, INI));
    // `crc-markers-mss61` carries the FPDU streams of `crc-markers` in smaller segments.
    for from in [INI, RESP] {
        assert_eq!(
            stream(CRC_MARKERS_TINY_MSS, from),
            stream(CRC_MARKERS, from)
        );
    }
    // Markers change the octets (the comparisons above are not vacuous).
    assert_ne!(stream(CRC_MARKERS, INI), stream(CRC, INI));
}

fn run(sc: Scenario) {
    let conv = generate(sc);
    let dir = output_dir();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let pcap = dir.join(format!("gen-{}.pcap", sc.name));
    std::fs::write(&pcap, &conv.pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    verify(&pcap, &conv);
    let expect = dir.join(format!("gen-{}.expect", sc.name));
    std::fs::write(&expect, expectations(&conv))
        .unwrap_or_else(|e| panic!("{}: {e}", expect.display()));
    println!("{}: {}", pcap.display(), summary(&conv));
}

fn output_dir() -> PathBuf {
    match std::env::var_os("EXSOCK_GEN_CAPTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/generated-captures"),
    }
}

// ---------------------------------------------------------------------------------------------
// An independent oracle for marker placement (RFC 5044: a marker at every stream position
// 512·k, the first one in front of the first FPDU; FPDUPTR = marker − ULPDU_LENGTH, 0 for a
// marker in front of ULPDU_LENGTH).

/// Where in an FPDU a marker fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Spot {
    /// In front of ULPDU_LENGTH (FPDUPTR 0).
    BeforeLength,
    /// Inside the ULPDU header (DDP header, Read Request or Terminate header), at this ULPDU
    /// offset.
    InHeader(usize),
    /// Inside the payload, at this ULPDU offset.
    InPayload(usize),
    /// After the ULPDU and its pad, in front of the CRC, with this many pad octets.
    BeforeCrc { pad: usize },
}

/// The layout of one FPDU on the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    start: u64,
    ulpdu_length_at: u64,
    end: u64,
    markers: Vec<(u64, Spot)>,
}

impl Layout {
    /// The FPDUPTR the marker at `pos` must carry.
    fn fpduptr(&self, pos: u64, spot: Spot) -> u16 {
        match spot {
            Spot::BeforeLength => 0,
            _ => u16::try_from(pos - self.ulpdu_length_at).expect("FPDUPTR fits"),
        }
    }
}

fn layout(start: u64, header_len: usize, payload_len: usize, markers: bool) -> Layout {
    let ulpdu_len = header_len + payload_len;
    let pad = pad_len(ulpdu_len);
    #[derive(Clone, Copy, PartialEq)]
    enum Field {
        Length,
        Header,
        Payload,
        Pad,
        Crc,
    }
    let fields = [
        (Field::Length, 2),
        (Field::Header, header_len),
        (Field::Payload, payload_len),
        (Field::Pad, pad),
        (Field::Crc, 4),
    ];
    let mut pos = start;
    let mut out = Vec::new();
    let mut ulpdu_length_at = None;
    for (field, len) in fields {
        for k in 0..len {
            if markers && pos % MARKER_INTERVAL == 0 {
                let spot = match (field, k) {
                    (Field::Length, 0) => Spot::BeforeLength,
                    (Field::Header, k) => Spot::InHeader(k),
                    (Field::Payload, k) => Spot::InPayload(header_len + k),
                    (Field::Crc, 0) => Spot::BeforeCrc { pad },
                    _ => panic!("a marker may not split ULPDU_LENGTH, the pad or the CRC"),
                };
                out.push((pos, spot));
                pos += MARKER_LEN as u64;
            }
            if field == Field::Length && k == 0 {
                ulpdu_length_at = Some(pos);
            }
            pos += 1;
        }
    }
    Layout {
        start,
        ulpdu_length_at: ulpdu_length_at.expect("ULPDU_LENGTH"),
        end: pos,
        markers: out,
    }
}

// ---------------------------------------------------------------------------------------------
// Generation

/// One FPDU as sent.
#[derive(Debug, Clone)]
struct SentFpdu {
    header: RdmapHeader,
    ulpdu: Vec<u8>,
    header_len: usize,
    layout: Layout,
}

/// One RDMAP message as sent: its opcode, the header of its first segment, its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Message {
    first: RdmapHeader,
    payload: Vec<u8>,
    segments: usize,
}

/// The transmit side of one peer.
struct Peer {
    framer: Framer,
    mulpdu: usize,
    /// Next MSN on QN 0, 1, 2.
    msn: [u32; 3],
    fpdus: Vec<SentFpdu>,
    messages: Vec<Message>,
    /// The FPDU stream (everything after the MPA Request/Reply).
    stream: Vec<u8>,
}

impl Peer {
    fn new(negotiated: &Negotiated) -> Peer {
        assert!(negotiated.crc, "CRC must be on");
        Peer {
            framer: Framer::new(TxConfig {
                crc: negotiated.crc,
                markers: negotiated.markers_tx,
            }),
            mulpdu: markers::mulpdu(EMSS, negotiated.markers_tx),
            msn: [1; 3],
            fpdus: Vec::new(),
            messages: Vec::new(),
            stream: Vec::new(),
        }
    }

    fn markers(&self) -> bool {
        self.framer.config().markers
    }

    fn next_msn(&mut self, qn: u32) -> u32 {
        let slot = &mut self.msn[qn as usize];
        let msn = *slot;
        *slot += 1;
        msn
    }

    /// Where the next FPDU with this header and payload length would put its markers.
    fn layout_next(&self, header_len: usize, payload_len: usize) -> Layout {
        layout(
            self.framer.position(),
            header_len,
            payload_len,
            self.markers(),
        )
    }
}

/// A generated conversation and everything needed to check it.
struct Conversation {
    sc: Scenario,
    ini_config: MpaConfig,
    resp_config: MpaConfig,
    request: Vec<u8>,
    reply: Vec<u8>,
    negotiated: [Negotiated; 2],
    peers: [Peer; 2],
    pcap: Vec<u8>,
}

struct Generator {
    writer: PcapWriter,
    coalesce: bool,
    pending: Option<(Direction, Vec<u8>)>,
    peers: [Peer; 2],
}

fn direction(from: usize) -> Direction {
    if from == INI {
        Direction::ToServer
    } else {
        Direction::ToClient
    }
}

/// A deterministic payload.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

impl Generator {
    fn flush(&mut self) {
        if let Some((dir, bytes)) = self.pending.take() {
            self.writer.write(dir, &bytes);
        }
    }

    /// Frames one ULPDU with the real framer and puts it on the wire.
    fn fpdu(&mut self, from: usize, header: RdmapHeader, payload: &[u8]) {
        let mut hdr = vec![0u8; header.buffer_len()];
        let n = header.emit(&mut hdr).expect("header emits");
        assert_eq!(n, hdr.len());
        let peer = &mut self.peers[from];
        let expected = peer.layout_next(hdr.len(), payload.len());
        assert!(
            hdr.len() + payload.len() <= peer.mulpdu,
            "ULPDU of {} octets above MULPDU {}",
            hdr.len() + payload.len(),
            peer.mulpdu
        );
        let (mut scratch, mut pieces) = (Vec::new(), Vec::new());
        let parts: [&[u8]; 2] = [&hdr, payload];
        peer.framer.frame(&parts, &mut scratch, &mut pieces);
        let mut wire = Vec::new();
        for piece in &pieces {
            wire.extend_from_slice(piece.bytes(&scratch, &parts));
        }
        assert_eq!(
            peer.framer.position(),
            expected.end,
            "framer and oracle disagree on the FPDU length"
        );
        assert_eq!(wire.len() as u64, expected.end - expected.start);
        assert!(
            wire.len() <= EMSS,
            "FPDU of {} octets exceeds the EMSS",
            wire.len()
        );
        peer.stream.extend_from_slice(&wire);
        peer.fpdus.push(SentFpdu {
            header,
            ulpdu: [&hdr[..], payload].concat(),
            header_len: hdr.len(),
            layout: expected,
        });
        let dir = direction(from);
        if self.coalesce {
            match &mut self.pending {
                Some((d, bytes)) if *d == dir => bytes.extend_from_slice(&wire),
                _ => {
                    self.flush();
                    self.pending = Some((dir, wire));
                }
            }
        } else {
            self.writer.write(dir, &wire);
        }
    }

    fn record(&mut self, from: usize, first: RdmapHeader, payload: &[u8], segments: usize) {
        self.peers[from].messages.push(Message {
            first,
            payload: payload.to_vec(),
            segments,
        });
    }

    /// A Send of any of the four kinds, segmented at MULPDU with MO advancing.
    fn send(&mut self, from: usize, opcode: Opcode, payload: &[u8]) {
        let inval_stag = if from == INI { S_INVAL } else { C_INVAL };
        let msn = self.peers[from].next_msn(QN_SEND);
        let room = self.peers[from].mulpdu - UNTAGGED_HEADER_LEN;
        let chunks: Vec<&[u8]> = if payload.is_empty() {
            vec![&[][..]]
        } else {
            payload.chunks(room).collect()
        };
        let mut first = None;
        for (i, chunk) in chunks.iter().enumerate() {
            let mo = u32::try_from(i * room).expect("MO");
            let message = match opcode {
                Opcode::Send => RdmapMessage::Send { msn, mo },
                Opcode::SendSe => RdmapMessage::SendSe { msn, mo },
                Opcode::SendInvalidate => RdmapMessage::SendInvalidate {
                    msn,
                    mo,
                    inval_stag,
                },
                Opcode::SendSeInvalidate => RdmapMessage::SendSeInvalidate {
                    msn,
                    mo,
                    inval_stag,
                },
                other => panic!("{other:?} is not a Send"),
            };
            let header = RdmapHeader::new(message, i + 1 == chunks.len());
            first.get_or_insert(header);
            self.fpdu(from, header, chunk);
        }
        self.record(from, first.expect("one segment"), payload, chunks.len());
    }

    /// An RDMA Write or Read Response, segmented at MULPDU with TO advancing.
    fn tagged(&mut self, from: usize, opcode: Opcode, stag: STag, to: u64, payload: &[u8]) {
        let room = self.peers[from].mulpdu - TAGGED_HEADER_LEN;
        let chunks: Vec<&[u8]> = if payload.is_empty() {
            vec![&[][..]]
        } else {
            payload.chunks(room).collect()
        };
        let mut first = None;
        for (i, chunk) in chunks.iter().enumerate() {
            let sink_to = to + (i * room) as u64;
            let message = match opcode {
                Opcode::Write => RdmapMessage::Write {
                    sink_stag: stag,
                    sink_to,
                },
                Opcode::ReadResponse => RdmapMessage::ReadResponse {
                    sink_stag: stag,
                    sink_to,
                },
                other => panic!("{other:?} is not tagged"),
            };
            let header = RdmapHeader::new(message, i + 1 == chunks.len());
            first.get_or_insert(header);
            self.fpdu(from, header, chunk);
        }
        self.record(from, first.expect("one segment"), payload, chunks.len());
    }

    fn read_request(&mut self, from: usize, body: ReadRequestBody) {
        let msn = self.peers[from].next_msn(QN_READ_REQUEST);
        let header = RdmapHeader::new(RdmapMessage::ReadRequest { msn, mo: 0, body }, true);
        self.fpdu(from, header, &[]);
        self.record(from, header, &[], 1);
    }

    fn terminate(&mut self, from: usize, term: TerminateHeader) {
        let msn = self.peers[from].next_msn(QN_TERMINATE);
        let header = RdmapHeader::new(RdmapMessage::Terminate { msn, mo: 0, term }, true);
        self.fpdu(from, header, &[]);
        self.record(from, header, &[], 1);
    }

    /// With markers on, sends a filler Send whose size makes `wanted` true of the layout of
    /// an FPDU with `header_len` + `payload_len` octets that follows it. Panics when no
    /// filler size does (then the steering logic is wrong).
    fn steer(
        &mut self,
        from: usize,
        header_len: usize,
        payload_len: usize,
        wanted: impl Fn(&Layout) -> bool,
    ) {
        let peer = &self.peers[from];
        if !peer.markers() {
            return;
        }
        let max = peer.mulpdu - UNTAGGED_HEADER_LEN;
        let size = (0..=max)
            .find(|&p| {
                let filler = peer.layout_next(UNTAGGED_HEADER_LEN, p);
                wanted(&layout(filler.end, header_len, payload_len, true))
            })
            .expect("some filler size steers the next FPDU");
        self.send(from, Opcode::Send, &pattern(size, 0xf1));
    }

    /// With markers on, a Send whose own layout makes `wanted` true (smallest such size).
    fn shaped_send(&mut self, from: usize, wanted: impl Fn(&Layout, usize) -> bool) {
        let peer = &self.peers[from];
        if !peer.markers() {
            return;
        }
        let max = peer.mulpdu - UNTAGGED_HEADER_LEN;
        let size = (0..=max)
            .find(|&p| wanted(&peer.layout_next(UNTAGGED_HEADER_LEN, p), p))
            .expect("some Send size has the wanted layout");
        self.send(from, Opcode::Send, &pattern(size, 0x3c));
    }
}

fn has_spot(l: &Layout, f: impl Fn(Spot) -> bool) -> bool {
    l.markers.iter().any(|&(_, s)| f(s))
}

fn generate(sc: Scenario) -> Conversation {
    let now = Duration::ZERO;
    let ini_config = MpaConfig {
        want_crc: true,
        markers_rx: sc.initiator_m,
        allow_markers_tx: true,
        ird: 4,
        ord: 4,
        p2p: true,
        rtr: RtrKinds {
            write: true,
            read: false,
            send: false,
        },
        ..MpaConfig::siw_compat()
    };
    let resp_config = MpaConfig {
        markers_rx: sc.responder_m,
        allow_markers_tx: true,
        ..MpaConfig::siw_compat()
    };

    // MPA startup with the real state machines; each frame is its own TCP write.
    let mut writer = PcapWriter::new(sc.client_port, sc.server_port, sc.mss);
    let mut ini = Initiator::new(ini_config.clone(), now).expect("initiator config");
    let mut resp = Responder::new_auto_accept(resp_config.clone(), now).expect("responder config");
    let request = ini.poll_transmit().expect("MPA Request");
    writer.write(Direction::ToServer, &request);
    assert_eq!(resp.handle_input(&request, now), request.len());
    let reply = resp.poll_transmit().expect("MPA Reply");
    writer.write(Direction::ToClient, &reply);
    assert_eq!(ini.handle_input(&reply, now), reply.len());
    let ini_neg = ini.poll_outcome().expect("outcome").expect("accepted");
    let resp_neg = resp.poll_outcome().expect("outcome").expect("accepted");
    assert!(ini_neg.crc && resp_neg.crc, "CRC negotiated");
    assert_eq!(
        (ini_neg.markers_tx, ini_neg.markers_rx),
        (sc.responder_m, sc.initiator_m)
    );
    assert_eq!(
        (resp_neg.markers_tx, resp_neg.markers_rx),
        (sc.initiator_m, sc.responder_m)
    );
    assert_eq!(ini_neg.rtr, Some(RtrKind::Write));
    assert!(ini_neg.initiator_sends_rtr && resp_neg.responder_expects_rtr);

    let mut g = Generator {
        writer,
        coalesce: sc.coalesce,
        pending: None,
        peers: [Peer::new(&ini_neg), Peer::new(&resp_neg)],
    };
    let (c, s) = (INI, RESP);
    let is_header = |l: &Layout| has_spot(l, |spot| matches!(spot, Spot::InHeader(_)));

    // RFC 6581 RTR: a zero-length RDMA Write before anything else (siw's STag 1, TO 0).
    g.tagged(c, Opcode::Write, STag(1), 0, &[]);
    // Sends of every kind, both ways, 0..100 octets.
    g.send(s, Opcode::Send, &[]);
    g.send(c, Opcode::Send, &pattern(16, 1));
    g.send(s, Opcode::SendInvalidate, &pattern(3, 2));
    g.send(c, Opcode::SendSe, &pattern(1, 3));
    g.send(s, Opcode::SendSe, &pattern(33, 4));
    g.send(c, Opcode::SendSeInvalidate, &pattern(100, 5));
    g.send(s, Opcode::SendSeInvalidate, &pattern(7, 6));
    g.send(c, Opcode::SendInvalidate, &pattern(64, 7));
    // Small Writes, each with a marker steered into its DDP header.
    g.steer(s, TAGGED_HEADER_LEN, 200, is_header);
    g.tagged(s, Opcode::Write, C_BUF, C_BUF_TO + 0x100, &pattern(200, 8));
    g.steer(c, TAGGED_HEADER_LEN, 200, is_header);
    g.tagged(c, Opcode::Write, S_BUF, S_BUF_TO + 0x80, &pattern(200, 9));
    // A Write of several segments.
    let big_write = pattern(5000, 10);
    g.tagged(c, Opcode::Write, S_BUF, S_BUF_TO + 0x1000, &big_write);
    g.tagged(
        s,
        Opcode::Write,
        C_BUF,
        C_BUF_TO + 0x1000,
        &pattern(2500, 15),
    );
    // Read Requests, each with a marker steered into its Read Request header (past the DDP
    // header), and their Read Responses.
    let in_rr_body = |l: &Layout| {
        has_spot(
            l,
            |spot| matches!(spot, Spot::InHeader(k) if k >= UNTAGGED_HEADER_LEN),
        )
    };
    let hdr_rr = UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;
    let s_read = ReadRequestBody {
        sink_stag: S_BUF,
        sink_to: S_BUF_TO + 0x8000,
        read_size: 4000,
        source_stag: C_BUF,
        source_to: C_BUF_TO + 0x2000,
    };
    g.steer(s, hdr_rr, 0, in_rr_body);
    g.read_request(s, s_read);
    g.tagged(
        c,
        Opcode::ReadResponse,
        s_read.sink_stag,
        s_read.sink_to,
        &pattern(4000, 11),
    );
    let c_read = ReadRequestBody {
        sink_stag: C_BUF,
        sink_to: C_BUF_TO + 0x4000,
        read_size: 200,
        source_stag: S_BUF,
        source_to: S_BUF_TO,
    };
    g.steer(c, hdr_rr, 0, in_rr_body);
    g.read_request(c, c_read);
    g.tagged(
        s,
        Opcode::ReadResponse,
        c_read.sink_stag,
        c_read.sink_to,
        &pattern(200, 12),
    );
    // A marker between pad and CRC (pad > 0), and an FPDU ending on a marker boundary so the
    // next FPDU starts with a marker mid-stream, each way.
    for from in [c, s] {
        g.shaped_send(from, |l, p| {
            pad_len(UNTAGGED_HEADER_LEN + p) > 0
                && has_spot(l, |spot| matches!(spot, Spot::BeforeCrc { .. }))
        });
        g.shaped_send(from, |l, _| l.end % MARKER_INTERVAL == 0);
        g.send(from, Opcode::Send, &pattern(5, 13));
    }
    // A Send of several segments (MO advancing).
    g.send(c, Opcode::Send, &pattern(3000, 14));
    // The responder terminates, quoting the DDP header of C's second Write segment.
    let quoted = g.peers[c]
        .fpdus
        .iter()
        .filter(|f| f.header.opcode() == Opcode::Write && !f.header.last())
        .nth(1)
        .expect("a middle Write segment")
        .clone();
    let term = TerminateHeader {
        code: TermCode::new(
            TermLayer::Ddp,
            ddp_etype::TAGGED_BUF,
            ddp_ecode::T_BASE_BOUNDS,
        ),
        segment_length_valid: true,
        ddp_segment_length: u16::try_from(quoted.ulpdu.len()).expect("segment length"),
        ddp_header: Some(TerminatedDdpHeader::from_ulpdu(&quoted.ulpdu).expect("DDP header")),
        rdmap_header: None,
        reserved: 0,
    };
    let term_len = RdmapHeader::new(
        RdmapMessage::Terminate {
            msn: 1,
            mo: 0,
            term,
        },
        true,
    )
    .buffer_len();
    g.steer(s, term_len, 0, is_header);
    g.terminate(s, term);
    g.flush();

    let Generator { writer, peers, .. } = g;
    Conversation {
        sc,
        ini_config,
        resp_config,
        request,
        reply,
        negotiated: [ini_neg, resp_neg],
        peers,
        pcap: writer.finish(),
    }
}

// ---------------------------------------------------------------------------------------------
// Verification of the written capture

fn verify(path: &Path, conv: &Conversation) {
    let now = Duration::ZERO;
    let streams = read_streams(path);
    assert_eq!(streams.len(), 1, "one TCP connection");
    let tcp = &streams[0];
    assert_eq!(tcp.client.port(), conv.sc.client_port);

    // The MPA frames, parsed by fresh state machines from the captured bytes.
    let mut resp = Responder::new_auto_accept(conv.resp_config.clone(), now).expect("config");
    let req_len = resp.handle_input(&tcp.to_server, now);
    assert_eq!(&tcp.to_server[..req_len], &conv.request[..], "MPA Request");
    let reply = resp.poll_transmit().expect("Reply");
    assert_eq!(reply, conv.reply);
    let mut ini = Initiator::new(conv.ini_config.clone(), now).expect("config");
    assert_eq!(ini.poll_transmit().expect("Request"), conv.request);
    let rep_len = ini.handle_input(&tcp.to_client, now);
    assert_eq!(&tcp.to_client[..rep_len], &conv.reply[..], "MPA Reply");
    let negotiated = [
        ini.poll_outcome().expect("outcome").expect("accepted"),
        resp.poll_outcome().expect("outcome").expect("accepted"),
    ];
    assert_eq!(negotiated, conv.negotiated);

    let fpdu_streams = [&tcp.to_server[req_len..], &tcp.to_client[rep_len..]];
    let mut received: [Vec<Message>; 2] = [Vec::new(), Vec::new()];
    for from in [INI, RESP] {
        let to = 1 - from;
        let label = format!(
            "{} {}",
            conv.sc.name,
            if from == INI { "C->S" } else { "S->C" }
        );
        let peer = &conv.peers[from];
        let stream = fpdu_streams[from];
        assert_eq!(stream, &peer.stream[..], "{label}: FPDU stream");
        let rx = RxConfig {
            crc: negotiated[to].crc,
            markers: negotiated[to].markers_rx,
            max_ulpdu: peer.mulpdu,
        };
        assert_eq!(rx.markers, peer.markers(), "{label}: marker agreement");

        // The real deframer, whole and in odd chunks (one octet at a time included).
        let whole = deframe(stream, rx, usize::MAX, &label);
        for chunk in [1, 7, TINY_MSS, 509] {
            assert_eq!(
                deframe(stream, rx, chunk, &label),
                whole,
                "{label}: chunk {chunk}"
            );
        }
        assert_eq!(whole.len(), peer.fpdus.len(), "{label}: FPDU count");
        for (i, (ulpdu, sent)) in whole.iter().zip(&peer.fpdus).enumerate() {
            assert_eq!(ulpdu, &sent.ulpdu, "{label}: FPDU {i} ULPDU");
            let (header, hlen) = RdmapHeader::parse(ulpdu).expect("header parses");
            assert_eq!(header, sent.header, "{label}: FPDU {i} header");
            assert_eq!(hlen, sent.header_len, "{label}: FPDU {i} header length");
        }

        // Raw octets: every marker and CRC where the oracle says, independently of the
        // deframer.
        let mut at = 0u64;
        for (i, sent) in peer.fpdus.iter().enumerate() {
            let l = &sent.layout;
            assert_eq!(l.start, at, "{label}: FPDU {i} is contiguous");
            let raw = &stream[l.start as usize..l.end as usize];
            let crc_at = raw.len() - 4;
            assert_eq!(
                raw[crc_at..],
                crc::to_wire(crc::crc32c(&raw[..crc_at])),
                "{label}: FPDU {i} CRC covers everything before it, markers included"
            );
            for &(pos, spot) in &l.markers {
                let m = &stream[pos as usize..pos as usize + MARKER_LEN];
                let want = l.fpduptr(pos, spot).to_be_bytes();
                assert_eq!(
                    m,
                    [0, 0, want[0], want[1]],
                    "{label}: FPDU {i} marker at {pos} ({spot:?})"
                );
            }
            let len_at = l.ulpdu_length_at as usize;
            assert_eq!(
                usize::from(u16::from_be_bytes([stream[len_at], stream[len_at + 1]])),
                sent.ulpdu.len(),
                "{label}: FPDU {i} ULPDU_LENGTH"
            );
            at = l.end;
        }
        assert_eq!(
            at,
            stream.len() as u64,
            "{label}: nothing after the last FPDU"
        );
        // Every marker position of the stream belongs to some FPDU's layout.
        let all: Vec<u64> = peer
            .fpdus
            .iter()
            .flat_map(|f| f.layout.markers.iter().map(|&(p, _)| p))
            .collect();
        let grid: Vec<u64> = if peer.markers() {
            (0..stream.len() as u64)
                .step_by(MARKER_INTERVAL as usize)
                .collect()
        } else {
            Vec::new()
        };
        assert_eq!(all, grid, "{label}: a marker at every 512th octet, from 0");

        // The marker placements the scenario promises.
        if peer.markers() {
            let spots: Vec<(usize, u64, Spot)> = peer
                .fpdus
                .iter()
                .enumerate()
                .flat_map(|(i, f)| f.layout.markers.iter().map(move |&(p, s)| (i, p, s)))
                .collect();
            let seen = |what: &str, f: &dyn Fn(usize, u64, Spot) -> bool| {
                assert!(
                    spots.iter().any(|&(i, p, s)| f(i, p, s)),
                    "{label}: no marker {what}"
                );
            };
            seen("in front of the first FPDU", &|i, p, s| {
                i == 0 && p == 0 && s == Spot::BeforeLength
            });
            seen("in front of an FPDU mid-stream", &|i, _, s| {
                i > 0 && s == Spot::BeforeLength
            });
            seen(
                "inside a DDP header",
                &|_, _, s| matches!(s, Spot::InHeader(k) if k < UNTAGGED_HEADER_LEN),
            );
            seen("inside a Read Request header", &|i, _, s| {
                peer.fpdus[i].header.opcode() == Opcode::ReadRequest
                    && matches!(s, Spot::InHeader(k) if k >= UNTAGGED_HEADER_LEN)
            });
            seen("inside a payload", &|_, _, s| {
                matches!(s, Spot::InPayload(_))
            });
            seen(
                "between pad and CRC",
                &|_, _, s| matches!(s, Spot::BeforeCrc { pad } if pad > 0),
            );
            if from == RESP {
                seen("inside a Terminate header", &|i, _, s| {
                    peer.fpdus[i].header.opcode() == Opcode::Terminate
                        && matches!(s, Spot::InHeader(_))
                });
            }
        }

        // Messages: segments reassembled by their headers, MSN/MO/TO/L checked.
        received[from] = reassemble(&whole, &label);
        assert_eq!(received[from], peer.messages, "{label}: messages");
    }

    // Every Read Request is answered by a Read Response of its size to its sink.
    for from in [INI, RESP] {
        let requests: Vec<ReadRequestBody> = received[from]
            .iter()
            .filter_map(|m| match m.first.body {
                RdmapBody::ReadRequest(b) => Some(b),
                _ => None,
            })
            .collect();
        let responses: Vec<&Message> = received[1 - from]
            .iter()
            .filter(|m| m.first.opcode() == Opcode::ReadResponse)
            .collect();
        assert_eq!(requests.len(), responses.len());
        for (rr, resp) in requests.iter().zip(responses) {
            assert_eq!(
                resp.first.ddp.buffer,
                DdpBuffer::Tagged {
                    stag: rr.sink_stag,
                    to: rr.sink_to
                }
            );
            assert_eq!(resp.payload.len(), rr.read_size as usize);
        }
    }
}

/// The ULPDUs of a stream, fed to the deframer in chunks of `chunk` octets.
fn deframe(stream: &[u8], rx: RxConfig, chunk: usize, label: &str) -> Vec<Vec<u8>> {
    let mut deframer = Deframer::new(rx);
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut current: Option<Vec<u8>> = None;
    for input in stream.chunks(chunk.min(stream.len().max(1))) {
        let mut at = 0;
        loop {
            match deframer.next(input, &mut at) {
                Ok(Event::Header(h)) => {
                    assert!(current.is_none(), "{label}: header inside an FPDU");
                    let mut ulpdu = h.bytes().to_vec();
                    ulpdu.reserve(h.payload_len());
                    current = Some(ulpdu);
                }
                Ok(Event::Payload { range, offset }) => {
                    let ulpdu = current.as_mut().expect("payload after a header");
                    assert_eq!(
                        offset,
                        ulpdu.len(),
                        "{label}: payload offsets are contiguous"
                    );
                    ulpdu.extend_from_slice(&input[range]);
                }
                Ok(Event::End) => out.push(current.take().expect("end after a header")),
                Ok(Event::NeedMore) => break,
                Err(e) => panic!(
                    "{label}: deframer error {e:?} at stream position {} (chunk {chunk})",
                    deframer.position()
                ),
            }
        }
    }
    assert!(deframer.is_idle(), "{label}: stream ends inside an FPDU");
    assert_eq!(deframer.position(), stream.len() as u64);
    out
}

/// Groups DDP segments into messages, checking MSN per queue, MO and TO continuity and that
/// only the last segment has L.
fn reassemble(ulpdus: &[Vec<u8>], label: &str) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    let mut open: Option<Message> = None;
    let mut next_msn = [1u32; 3];
    for (i, ulpdu) in ulpdus.iter().enumerate() {
        let (header, hlen) = RdmapHeader::parse(ulpdu).expect("header");
        let payload = &ulpdu[hlen..];
        assert!(
            !matches!(header.message(), RdmapMessage::Unexpected { .. }),
            "{label}: segment {i}: unexpected {header:?}"
        );
        match open.as_mut() {
            None => {
                if let DdpBuffer::Untagged { qn, msn, mo, .. } = header.ddp.buffer {
                    let q = qn as usize;
                    assert!(q < 3, "{label}: segment {i}: QN {qn}");
                    assert_eq!(header.opcode().queue_number(), Some(qn));
                    assert_eq!(msn, next_msn[q], "{label}: segment {i}: MSN on QN {qn}");
                    assert_eq!(mo, 0, "{label}: segment {i}: first MO");
                    next_msn[q] += 1;
                }
                open = Some(Message {
                    first: header,
                    payload: payload.to_vec(),
                    segments: 1,
                });
            }
            Some(m) => {
                assert_eq!(header.opcode(), m.first.opcode(), "{label}: segment {i}");
                let done = m.payload.len();
                match (header.ddp.buffer, m.first.ddp.buffer) {
                    (
                        DdpBuffer::Tagged { stag, to },
                        DdpBuffer::Tagged {
                            stag: first_stag,
                            to: first_to,
                        },
                    ) => {
                        assert_eq!(stag, first_stag, "{label}: segment {i}: STag");
                        assert_eq!(to, first_to + done as u64, "{label}: segment {i}: TO");
                    }
                    (
                        DdpBuffer::Untagged {
                            qn,
                            msn,
                            mo,
                            ulp_rsvd,
                        },
                        DdpBuffer::Untagged {
                            qn: q0,
                            msn: m0,
                            ulp_rsvd: r0,
                            ..
                        },
                    ) => {
                        assert_eq!((qn, msn, ulp_rsvd), (q0, m0, r0), "{label}: segment {i}");
                        assert_eq!(mo as usize, done, "{label}: segment {i}: MO");
                    }
                    _ => panic!("{label}: segment {i}: buffer model changed mid-message"),
                }
                m.payload.extend_from_slice(payload);
                m.segments += 1;
            }
        }
        if header.last() {
            out.push(open.take().expect("open message"));
        } else {
            assert!(
                matches!(
                    header.opcode(),
                    Opcode::Write
                        | Opcode::ReadResponse
                        | Opcode::Send
                        | Opcode::SendInvalidate
                        | Opcode::SendSe
                        | Opcode::SendSeInvalidate
                ),
                "{label}: segment {i}: {:?} must be a single segment",
                header.opcode()
            );
        }
    }
    assert!(open.is_none(), "{label}: the last message has no L segment");
    // The message's first header is recorded with its own L bit; sent messages record the
    // header of their first segment the same way.
    out
}

// ---------------------------------------------------------------------------------------------
// What tshark must report (read by scripts/tests/generated-capture.sh)

const OPCODE_NAMES: [&str; 8] = [
    "Write",
    "Read Request",
    "Read Response",
    "Send",
    "Send Inv",
    "Send SE",
    "Send SE Inv",
    "Terminate",
];

/// Opcode counts per DDP segment in wirecheck's wording.
fn opcode_line(fpdus: &[&SentFpdu]) -> String {
    let mut counts = [0usize; 8];
    for f in fpdus {
        counts[usize::from(f.header.opcode().to_raw())] += 1;
    }
    let opcodes: Vec<String> = OPCODE_NAMES
        .iter()
        .zip(counts)
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    opcodes.join(", ")
}

/// The TCP stream offset (from the first octet after the SYN) of a payload octet of the
/// initiator's first FPDU with at least 64 payload octets, away from any marker: the octet
/// the script flips to see wirecheck report a bad CRC.
fn payload_octet_to_flip(conv: &Conversation) -> usize {
    let peer = &conv.peers[INI];
    let f = peer
        .fpdus
        .iter()
        .find(|f| f.ulpdu.len() - f.header_len >= 64)
        .expect("an FPDU with a payload");
    let mut at = f.layout.ulpdu_length_at + 2 + f.header_len as u64 + 32;
    while peer.markers() && markers::in_marker(at) {
        at += MARKER_LEN as u64;
    }
    conv.request.len() + at as usize
}

fn expectations(conv: &Conversation) -> String {
    let all: Vec<&SentFpdu> = conv.peers.iter().flat_map(|p| &p.fpdus).collect();
    let mut out = String::new();
    out.push_str(&format!("scenario {}\n", conv.sc.name));
    out.push_str(&format!("mss {}\n", conv.sc.mss));
    out.push_str(&format!(
        "ports {} {}\n",
        conv.sc.client_port, conv.sc.server_port
    ));
    out.push_str(&format!("fpdus {}\n", all.len()));
    out.push_str(&format!("opcodes {}\n", opcode_line(&all)));
    out.push_str(&format!("flip_up {}\n", payload_octet_to_flip(conv)));
    for (from, key) in [(INI, "up"), (RESP, "down")] {
        let peer = &conv.peers[from];
        let mine: Vec<&SentFpdu> = peer.fpdus.iter().collect();
        out.push_str(&format!("opcodes_{key} {}\n", opcode_line(&mine)));
        let ptrs: Vec<String> = peer
            .fpdus
            .iter()
            .flat_map(|f| {
                f.layout
                    .markers
                    .iter()
                    .map(|&(p, s)| f.layout.fpduptr(p, s).to_string())
            })
            .collect();
        out.push_str(&format!(
            "markers_{key} {}\n",
            if peer.markers() { 1 } else { 0 }
        ));
        out.push_str(&format!("fpdus_{key} {}\n", peer.fpdus.len()));
        out.push_str(&format!("fpduptrs_{key} {}\n", ptrs.join(",")));
    }
    out
}

fn summary(conv: &Conversation) -> String {
    let part = |from: usize| {
        let p = &conv.peers[from];
        let markers: usize = p.fpdus.iter().map(|f| f.layout.markers.len()).sum();
        format!(
            "{} FPDUs / {} messages / {} octets / {} markers",
            p.fpdus.len(),
            p.messages.len(),
            p.stream.len(),
            markers
        )
    };
    format!("C->S {}; S->C {}", part(INI), part(RESP))
}
