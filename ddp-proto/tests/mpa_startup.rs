//! MPA Request/Reply: the wire format against the real siw captures, and the startup state
//! machines (`mpa::startup`) in initiator ↔ responder pairs with a virtual clock.
//!
//! Vectors come from two independent places: the hex dumps in the tshark decodes (copied into
//! constants below, and also re-read from the `.decode.txt` files) and the TCP streams
//! reassembled from the pcaps by `common::pcap`.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::pcap::{TcpStream, capture_files, captures_dir, read_streams};
use ddp_proto::error::ProtoError;
use ddp_proto::mpa::startup::{
    Initiator, MpaConfig, Negotiated, Responder, RtrKind, RtrKinds, StartupError, UsageError,
};
use ddp_proto::wire::mpa::{
    MPA_KEY_REP, MPA_KEY_REQ, MpaFrameKind, MpaFramePacket, MpaFrameRepr, MpaV2Params, MpaWireError,
};
use proptest::prelude::*;

const T0: Duration = Duration::ZERO;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    assert_eq!(digits.len() % 2, 0, "odd hex string {s:?}");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

// TCP payloads of the MPA frames, copied from the hex dumps in the decode files (bytes from
// offset 0x36: Ethernet 14 + IPv4 20 + TCP 20).
/// rping-default.decode.txt frame 6 (also send_bw/write_bw: PD 00000000, read_bw: 00800080).
const REQ_DEFAULT: &str = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 10 02 00 04 00 01 00 01";
/// rping-default.decode.txt frame 8.
const REP_DEFAULT: &str = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 10 02 00 04 00 01 00 01";
/// rping-crc.decode.txt frame 6.
const REQ_CRC: &str = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 50 02 00 04 00 01 00 01";
/// rping-crc.decode.txt frame 8.
const REP_CRC: &str = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 50 02 00 04 00 01 00 01";
/// rping-p2p.decode.txt frame 6.
const REQ_P2P: &str = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 10 02 00 04 80 01 c0 01";
/// rping-p2p.decode.txt frame 8.
const REP_P2P: &str = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 10 02 00 04 80 01 80 01";
/// rping-mpav1.decode.txt frame 6.
const REQ_V1: &str = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 00 01 00 00";
/// rping-mpav1.decode.txt frame 8.
const REP_V1: &str = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 00 01 00 00";
/// rping-crc-strict-mismatch.decode.txt frame 8 (the request is REQ_CRC).
const REP_REJECT: &str = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 30 02 00 04 00 00 00 00";
/// read_bw-default.decode.txt frame 6 (second connection: IRD = ORD = 128).
const REQ_READ_BW: &str = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 10 02 00 04 00 80 00 80";
/// rping-p2p.decode.txt frame 10: the RTR, a zero-length tagged RDMA Write (ULPDU 14 + CRC).
const RTR_P2P: &str = "00 0e c1 40 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00";

fn repr(bytes: &[u8]) -> MpaFrameRepr<'_> {
    MpaFrameRepr::parse_bytes(bytes).expect("valid MPA frame")
}

/// An initiator configured to send exactly what siw sent in `request`.
fn initiator_config_like(request: &MpaFrameRepr<'_>) -> MpaConfig {
    let mut cfg = MpaConfig::siw_compat();
    cfg.revision = request.revision;
    cfg.want_crc = request.crc;
    if let Some(p) = request.v2_params() {
        cfg.ird = p.ird;
        cfg.ord = p.ord;
        cfg.p2p = p.p2p;
    }
    cfg
}

/// The responder configuration that reproduces siw's Reply in a scenario.
fn siw_responder_config(scenario: &str) -> MpaConfig {
    let mut cfg = MpaConfig::siw_compat();
    if scenario.starts_with("rping-crc-strict-mismatch") {
        cfg.crc_strict = true; // the server ran with mpa_crc_strict=Y
    }
    // rping-crc-server-only: siw's server had mpa_crc_required=Y but does not add C to its
    // Reply (pitfall 9); our responder would with want_crc, so siw_compat keeps it off.
    cfg
}

// ---------------------------------------------------------------------------------------------
// Byte-exact vectors (from the decode files)

#[test]
fn decode_vectors_parse_and_reemit_identically() {
    for (name, s, kind, flags, rev, pd) in [
        (
            "req default",
            REQ_DEFAULT,
            MpaFrameKind::Request,
            0x10,
            2,
            "00010001",
        ),
        (
            "rep default",
            REP_DEFAULT,
            MpaFrameKind::Reply,
            0x10,
            2,
            "00010001",
        ),
        (
            "req crc",
            REQ_CRC,
            MpaFrameKind::Request,
            0x50,
            2,
            "00010001",
        ),
        ("rep crc", REP_CRC, MpaFrameKind::Reply, 0x50, 2, "00010001"),
        (
            "req p2p",
            REQ_P2P,
            MpaFrameKind::Request,
            0x10,
            2,
            "8001c001",
        ),
        ("rep p2p", REP_P2P, MpaFrameKind::Reply, 0x10, 2, "80018001"),
        ("req v1", REQ_V1, MpaFrameKind::Request, 0x00, 1, ""),
        ("rep v1", REP_V1, MpaFrameKind::Reply, 0x00, 1, ""),
        (
            "rep reject",
            REP_REJECT,
            MpaFrameKind::Reply,
            0x30,
            2,
            "00000000",
        ),
        (
            "req read_bw",
            REQ_READ_BW,
            MpaFrameKind::Request,
            0x10,
            2,
            "00800080",
        ),
    ] {
        let bytes = hex(s);
        let r = repr(&bytes);
        assert_eq!(r.kind, kind, "{name}");
        assert_eq!(r.flags(), flags, "{name}");
        assert_eq!(r.revision, rev, "{name}");
        assert_eq!(r.private_data, hex(pd), "{name}");
        assert_eq!(r.reserved, 0, "{name}");
        assert_eq!(r.to_bytes(), bytes, "{name}");
        let view = MpaFramePacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(view.frame_len(), bytes.len(), "{name}");
    }
}

#[test]
fn decode_vectors_v2_words_mean_what_the_readme_says() {
    let p = repr(&hex(REQ_DEFAULT)).v2_params().unwrap();
    assert_eq!(
        (p.ird, p.ord, p.p2p, p.send_rtr, p.write_rtr, p.read_rtr),
        (1, 1, false, false, false, false)
    );
    let p = repr(&hex(REQ_P2P)).v2_params().unwrap();
    assert_eq!(
        (p.ird, p.ord, p.p2p, p.write_rtr, p.read_rtr, p.send_rtr),
        (1, 1, true, true, true, false)
    );
    let p = repr(&hex(REP_P2P)).v2_params().unwrap();
    assert_eq!(
        (p.ird, p.ord, p.p2p, p.write_rtr, p.read_rtr, p.send_rtr),
        (1, 1, true, true, false, false)
    );
    let p = repr(&hex(REQ_READ_BW)).v2_params().unwrap();
    assert_eq!((p.ird, p.ord), (128, 128));
    let r = hex(REP_REJECT);
    let r = repr(&r);
    assert!(r.reject && r.enhanced && !r.crc);
    assert_eq!(r.v2_params(), Some(MpaV2Params::default()));
    assert_eq!(repr(&hex(REQ_V1)).v2_params(), None);
}

#[test]
fn siw_compat_responder_answers_decode_requests_like_siw() {
    for (name, req, rep, cfg) in [
        ("default", REQ_DEFAULT, REP_DEFAULT, MpaConfig::siw_compat()),
        ("crc", REQ_CRC, REP_CRC, MpaConfig::siw_compat()),
        ("p2p", REQ_P2P, REP_P2P, MpaConfig::siw_compat()),
        ("v1", REQ_V1, REP_V1, MpaConfig::siw_compat()),
        (
            "strict",
            REQ_CRC,
            REP_REJECT,
            siw_responder_config("rping-crc-strict-mismatch"),
        ),
    ] {
        let mut resp = Responder::new_auto_accept(cfg, T0).unwrap();
        let req = hex(req);
        assert_eq!(resp.handle_input(&req, T0), req.len(), "{name}");
        assert_eq!(resp.poll_transmit().unwrap(), hex(rep), "{name}");
    }
}

#[test]
fn initiator_sends_siw_requests_byte_for_byte() {
    for s in [REQ_DEFAULT, REQ_CRC, REQ_P2P, REQ_V1, REQ_READ_BW] {
        let bytes = hex(s);
        let cfg = initiator_config_like(&repr(&bytes));
        let mut ini = Initiator::new(cfg, T0).unwrap();
        assert_eq!(ini.poll_transmit().unwrap(), bytes);
        assert_eq!(ini.poll_transmit(), None, "the Request is handed out once");
    }
}

#[test]
fn initiator_accepts_siw_p2p_reply_with_rtr_in_the_same_chunk() {
    let cfg = initiator_config_like(&repr(&hex(REQ_P2P)));
    let mut ini = Initiator::new(cfg, T0).unwrap();
    let mut input = hex(REP_P2P);
    input.extend_from_slice(&hex(RTR_P2P)); // an FPDU right behind the Reply
    assert_eq!(ini.handle_input(&input, T0), 24);
    assert_eq!(
        ini.handle_input(&input[24..], T0),
        0,
        "nothing after the outcome"
    );
    let n = ini.poll_outcome().unwrap().unwrap();
    assert_eq!(n.rtr, Some(RtrKind::Write));
    assert!(n.p2p && n.initiator_sends_rtr && n.responder_expects_rtr);
    assert_eq!((n.ird, n.ord), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// The real captures: pcaps (via common::pcap) and decode hex dumps

fn captures() -> Vec<PathBuf> {
    match captures_dir() {
        Some(dir) => {
            let files = capture_files(&dir);
            assert!(!files.is_empty(), "no captures in {}", dir.display());
            files
        }
        None if std::env::var_os("EXSOCK_NO_CAPTURES").is_some() => Vec::new(),
        None => panic!("siw captures not found: set EXSOCK_CAPTURES=DIR (or EXSOCK_NO_CAPTURES=1)"),
    }
}

fn scenario(path: &Path) -> String {
    path.file_name().unwrap().to_str().unwrap().to_owned()
}

/// The MPA frame at the start of a stream, and its length.
fn leading_frame(stream: &[u8]) -> (MpaFrameRepr<'_>, usize) {
    let r = MpaFrameRepr::parse_bytes(stream).expect("stream starts with an MPA frame");
    let len = r.buffer_len();
    (r, len)
}

fn mpa_streams(path: &Path) -> Vec<TcpStream> {
    let streams: Vec<TcpStream> = read_streams(path)
        .into_iter()
        .filter(|s| !s.to_server.is_empty())
        .collect();
    assert!(!streams.is_empty(), "{}: no TCP data", path.display());
    streams
}

#[test]
fn every_captured_request_and_reply_reparses_and_reemits_identically() {
    let mut frames = 0;
    for path in captures() {
        let name = scenario(&path);
        for s in mpa_streams(&path) {
            let (req, req_len) = leading_frame(&s.to_server);
            let (rep, rep_len) = leading_frame(&s.to_client);
            assert_eq!(req.kind, MpaFrameKind::Request, "{name}");
            assert_eq!(rep.kind, MpaFrameKind::Reply, "{name}");
            assert_eq!(req.to_bytes(), s.to_server[..req_len], "{name}");
            assert_eq!(rep.to_bytes(), s.to_client[..rep_len], "{name}");
            assert!(!req.markers && !rep.markers, "{name}: siw never sets M");
            frames += 2;
        }
    }
    if captures_dir().is_some() {
        assert!(frames >= 2 * 30, "only {frames} frames found");
    }
}

#[test]
fn captured_v2_words_decode_as_the_readme_says() {
    for path in captures() {
        let name = scenario(&path);
        let streams = mpa_streams(&path);
        for (i, s) in streams.iter().enumerate() {
            let (req, _) = leading_frame(&s.to_server);
            let (rep, _) = leading_frame(&s.to_client);
            let (qp, rp) = (req.v2_params(), rep.v2_params());
            if name.contains("mpav1") {
                assert_eq!(
                    (req.flags(), req.revision, req.private_data.len()),
                    (0, 1, 0),
                    "{name}"
                );
                assert_eq!(
                    (rep.flags(), rep.revision, rep.private_data.len()),
                    (0, 1, 0),
                    "{name}"
                );
                continue;
            }
            assert_eq!((req.revision, rep.revision), (2, 2), "{name}");
            assert!(req.enhanced && rep.enhanced, "{name}");
            let (qp, rp) = (qp.unwrap(), rp.unwrap());
            // README table: *-crc, rping-crc-client-only and rping-large run with CRC
            let crc = (name.contains("-crc") && !name.contains("server-only"))
                || name.starts_with("rping-large");
            if name.starts_with("rping-crc-strict-mismatch") {
                assert_eq!((req.flags(), rep.flags()), (0x50, 0x30), "{name}");
                assert_eq!(rep.private_data, [0, 0, 0, 0], "{name}");
                continue;
            }
            if name.starts_with("smoke-b") {
                // siw's Request, answered with a reject by the host peer (README, mode b)
                assert_eq!(
                    (req.flags(), qp.ird, qp.ord, qp.p2p),
                    (0x10, 1, 1, false),
                    "{name}"
                );
                assert!(rep.reject, "{name}");
                continue;
            }
            let flags = if crc { 0x50 } else { 0x10 };
            assert_eq!((req.flags(), rep.flags()), (flags, flags), "{name}");
            if name.starts_with("rping-p2p") {
                assert_eq!(req.private_data, [0x80, 0x01, 0xc0, 0x01], "{name}");
                assert_eq!(rep.private_data, [0x80, 0x01, 0x80, 0x01], "{name}");
            } else if name.starts_with("rping") || name.starts_with("smoke-") {
                assert_eq!((qp.ird, qp.ord, rp.ird, rp.ord), (1, 1, 1, 1), "{name}");
                assert!(!qp.p2p && !rp.p2p, "{name}");
            } else {
                // perftest: parameter connection 0/0, then the test connection
                let want = if name.starts_with("read_bw") && i == 1 {
                    128
                } else {
                    0
                };
                assert_eq!(streams.len(), 2, "{name}");
                assert_eq!(
                    (qp.ird, qp.ord, rp.ird, rp.ord),
                    (want, want, want, want),
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn siw_compat_responder_reproduces_every_captured_siw_reply() {
    let mut checked = 0;
    for path in captures() {
        let name = scenario(&path);
        if name.starts_with("smoke-b") {
            continue; // the responder there is the Python host peer, not siw
        }
        for s in mpa_streams(&path) {
            let (req, req_len) = leading_frame(&s.to_server);
            let (_, rep_len) = leading_frame(&s.to_client);
            let mut resp = Responder::new_auto_accept(siw_responder_config(&name), T0).unwrap();
            // the whole stream at once: only the Request is consumed
            assert_eq!(resp.handle_input(&s.to_server, T0), req_len, "{name}");
            assert_eq!(
                resp.poll_transmit().unwrap(),
                s.to_client[..rep_len],
                "{name}: our Reply to {:02x?}",
                req.private_data
            );
            checked += 1;
        }
    }
    if captures_dir().is_some() {
        assert!(checked >= 30, "only {checked} replies checked");
    }
}

#[test]
fn initiator_reproduces_every_captured_request_and_reads_every_reply() {
    for path in captures() {
        let name = scenario(&path);
        for s in mpa_streams(&path) {
            let (req, req_len) = leading_frame(&s.to_server);
            let (rep, rep_len) = leading_frame(&s.to_client);
            let cfg = initiator_config_like(&req);
            let mut ini = Initiator::new(cfg.clone(), T0).unwrap();
            assert_eq!(
                ini.poll_transmit().unwrap(),
                s.to_server[..req_len],
                "{name}"
            );
            // the reply stream one byte at a time, FPDUs and all
            let mut used = 0;
            for b in s.to_client.chunks(1) {
                used += ini.handle_input(b, T0);
            }
            assert_eq!(used, rep_len, "{name}");
            let outcome = ini.poll_outcome().expect("outcome");
            if rep.reject {
                assert_eq!(
                    outcome,
                    Err(StartupError::Rejected {
                        private_data: vec![]
                    }),
                    "{name}"
                );
                continue;
            }
            let n = outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(n.crc, req.crc || rep.crc, "{name}");
            assert_eq!(n.revision, rep.revision, "{name}");
            assert_eq!(n.enhanced, rep.revision == 2, "{name}");
            assert_eq!(n.rtr.is_some(), name.starts_with("rping-p2p"), "{name}");
            if n.rtr.is_some() {
                // and the first FPDU after the Reply, from the initiator, is the 14-byte RTR
                assert_eq!(s.to_server[req_len..req_len + 2], [0x00, 0x0e], "{name}");
                assert_eq!(s.to_server[req_len + 2], 0xc1, "{name}: tagged, last");
            }
        }
    }
}

/// The MPA frames in a decode file's hex dumps (TCP payloads of Request/Reply frames).
fn decode_frames(text: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for block in text.split("\nFrame ").skip(1) {
        if !(block.contains("Request frame header") || block.contains("Reply frame header")) {
            continue;
        }
        let mut bytes = Vec::new();
        for line in block.lines() {
            let l = line.as_bytes();
            if l.len() > 6 && l[..4].iter().all(u8::is_ascii_hexdigit) && &l[4..6] == b"  " {
                let end = line.len().min(6 + 47);
                bytes.extend(hex(&line[6..end]));
            }
        }
        let ihl = usize::from(bytes[14] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
        let tcp = 14 + ihl;
        let doff = usize::from(bytes[tcp + 12] >> 4) * 4;
        out.push(bytes[tcp + doff..14 + total].to_vec());
    }
    out
}

#[test]
fn decode_hex_dumps_agree_with_the_pcaps() {
    let Some(dir) = captures_dir() else { return };
    let mut seen = 0;
    for path in capture_files(&dir) {
        let name = scenario(&path);
        let Some(base) = name.strip_suffix(".server.pcap") else {
            continue;
        };
        let text = std::fs::read_to_string(dir.join(format!("{base}.decode.txt"))).unwrap();
        let streams = mpa_streams(&path);
        for frame in decode_frames(&text) {
            let r = repr(&frame);
            assert_eq!(r.to_bytes(), frame, "{base}");
            let found = streams.iter().any(|s| match r.kind {
                MpaFrameKind::Request => s.to_server.starts_with(&frame),
                MpaFrameKind::Reply => s.to_client.starts_with(&frame),
            });
            assert!(found, "{base}: decode frame {frame:02x?} not in the pcap");
            seen += 1;
        }
    }
    assert!(seen >= 30, "only {seen} decode frames");
}

// ---------------------------------------------------------------------------------------------
// Initiator ↔ responder pairs

/// Runs a pair to the end, feeding each side's output to the other in `chunk`-byte pieces,
/// with `trailing` appended to the Reply (bytes the responder "sent" after it).
fn run_pair(
    ini_cfg: MpaConfig,
    resp_cfg: MpaConfig,
    chunk: usize,
    trailing: &[u8],
) -> (
    Result<Negotiated, StartupError>,
    Result<Negotiated, StartupError>,
) {
    let mut ini = Initiator::new(ini_cfg, T0).unwrap();
    let mut resp = Responder::new_auto_accept(resp_cfg, T0).unwrap();
    let mut req = ini.poll_transmit().unwrap();
    req.extend_from_slice(trailing); // also: bytes behind the Request stay unconsumed
    let frame_len = req.len() - trailing.len();
    let mut used = 0;
    for c in req.chunks(chunk) {
        used += resp.handle_input(c, T0);
    }
    let resp_outcome = resp.poll_outcome().expect("responder outcome");
    let Some(mut rep) = resp.poll_transmit() else {
        // no Reply at all
        return (Err(StartupError::Timeout), resp_outcome);
    };
    assert_eq!(used, frame_len, "responder consumed only the Request");
    rep.extend_from_slice(trailing);
    let rep_len = rep.len() - trailing.len();
    let mut used = 0;
    for c in rep.chunks(chunk) {
        used += ini.handle_input(c, T0);
    }
    assert_eq!(used, rep_len, "initiator consumed only the Reply");
    (ini.poll_outcome().expect("initiator outcome"), resp_outcome)
}

fn cfg(revision: u8) -> MpaConfig {
    MpaConfig {
        revision,
        ..MpaConfig::siw_compat()
    }
}

#[test]
fn every_combination_of_revision_crc_and_markers() {
    let bools = [false, true];
    let mut combos = 0;
    for ini_rev in [1, 2] {
        for resp_rev in [1, 2] {
            for (ini_crc, resp_crc) in bools.iter().flat_map(|&a| bools.map(|b| (a, b))) {
                for (ini_m, resp_m) in bools.iter().flat_map(|&a| bools.map(|b| (a, b))) {
                    for (ini_tx, resp_tx) in bools.iter().flat_map(|&a| bools.map(|b| (a, b))) {
                        for chunk in [1, 7, 1000] {
                            let mut i = cfg(ini_rev);
                            i.want_crc = ini_crc;
                            i.markers_rx = ini_m;
                            i.allow_markers_tx = ini_tx;
                            let mut r = cfg(resp_rev);
                            r.want_crc = resp_crc;
                            r.markers_rx = resp_m;
                            r.allow_markers_tx = resp_tx;
                            let (io, ro) = run_pair(i, r, chunk, b"FPDU");
                            combos += 1;
                            let ctx = format!(
                                "rev {ini_rev}/{resp_rev} crc {ini_crc}/{resp_crc} \
                                 m {ini_m}/{resp_m} tx {ini_tx}/{resp_tx} chunk {chunk}"
                            );
                            if ini_m && !resp_tx {
                                assert_eq!(ro, Err(StartupError::MarkersUnsupported), "{ctx}");
                                assert_eq!(
                                    io,
                                    Err(StartupError::Rejected {
                                        private_data: vec![]
                                    }),
                                    "{ctx}"
                                );
                                continue;
                            }
                            let rn = ro.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                            if resp_m && !ini_tx {
                                assert_eq!(io, Err(StartupError::MarkersUnsupported), "{ctx}");
                                continue;
                            }
                            let inn = io.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                            let rev = ini_rev.min(resp_rev);
                            assert_eq!((inn.revision, rn.revision), (rev, rev), "{ctx}");
                            assert_eq!((inn.enhanced, rn.enhanced), (rev == 2, rev == 2), "{ctx}");
                            let crc = ini_crc || resp_crc;
                            assert_eq!((inn.crc, rn.crc), (crc, crc), "{ctx}");
                            assert_eq!((inn.markers_tx, inn.markers_rx), (resp_m, ini_m), "{ctx}");
                            assert_eq!((rn.markers_tx, rn.markers_rx), (ini_m, resp_m), "{ctx}");
                            assert_eq!((inn.rtr, rn.rtr), (None, None), "{ctx}");
                        }
                    }
                }
            }
        }
    }
    assert_eq!(combos, 2 * 2 * 4 * 4 * 4 * 3);
}

#[test]
fn crc_strict_refuses_a_peer_that_wants_crc() {
    // responder strict, initiator wants CRC: reject with C cleared (siw)
    let mut i = cfg(2);
    i.want_crc = true;
    let mut r = cfg(2);
    r.crc_strict = true;
    let (io, ro) = run_pair(i.clone(), r.clone(), 1000, b"");
    assert_eq!(ro, Err(StartupError::CrcRequiredButRefused));
    assert_eq!(
        io,
        Err(StartupError::Rejected {
            private_data: vec![]
        })
    );
    // initiator strict, responder adds C to its Reply
    let mut i = cfg(2);
    i.crc_strict = true;
    let mut r = cfg(2);
    r.want_crc = true;
    let (io, ro) = run_pair(i, r, 1000, b"");
    assert!(ro.unwrap().crc);
    assert_eq!(io, Err(StartupError::CrcRequiredButRefused));
    // strict on both sides without CRC wishes: fine, CRC off
    let mut i = cfg(2);
    i.crc_strict = true;
    let mut r = cfg(2);
    r.crc_strict = true;
    let (io, ro) = run_pair(i, r, 1000, b"");
    assert!(!io.unwrap().crc && !ro.unwrap().crc);
}

fn kinds(bits: u8) -> RtrKinds {
    RtrKinds {
        write: bits & 1 != 0,
        read: bits & 2 != 0,
        send: bits & 4 != 0,
    }
}

#[test]
fn p2p_with_every_offer_and_acceptance() {
    for offer in 1..8u8 {
        for accept in 0..8u8 {
            let mut i = cfg(2);
            i.p2p = true;
            i.rtr = kinds(offer);
            i.ird = 4;
            i.ord = 0;
            let mut r = cfg(2);
            r.rtr = kinds(accept);
            let ctx = format!("offer {offer:03b} accept {accept:03b}");
            let (io, ro) = run_pair(i, r, 3, &hex(RTR_P2P));
            let common = offer & accept;
            let expected = [RtrKind::Write, RtrKind::Read, RtrKind::Send]
                .into_iter()
                .enumerate()
                .find(|(bit, _)| common & (1 << bit) != 0)
                .map(|(_, k)| k);
            match expected {
                None => {
                    assert_eq!(ro, Err(StartupError::NoMatchingRtr), "{ctx}");
                    assert_eq!(
                        io,
                        Err(StartupError::Rejected {
                            private_data: vec![]
                        }),
                        "{ctx}"
                    );
                }
                Some(kind) => {
                    let (inn, rn) = (io.unwrap(), ro.unwrap());
                    assert_eq!((inn.rtr, rn.rtr), (Some(kind), Some(kind)), "{ctx}");
                    assert!(inn.p2p && rn.p2p && inn.initiator_sends_rtr, "{ctx}");
                    assert!(
                        rn.responder_expects_rtr && inn.responder_expects_rtr,
                        "{ctx}"
                    );
                    // P2P with ORD 0 advertises ORD 1 (siw), so a Read RTR is possible
                    assert_eq!((inn.ord, rn.ird), (1, 1), "{ctx}");
                    assert_eq!((inn.ird, rn.ord), (4, 4), "{ctx}");
                }
            }
        }
    }
}

#[test]
fn p2p_needs_revision_2_at_the_responder() {
    let mut i = cfg(2);
    i.p2p = true;
    let (io, ro) = run_pair(i, cfg(1), 1000, b"");
    // the responder falls back to revision 1 (it sees no words); the initiator wanted P2P
    let rn = ro.unwrap();
    assert_eq!((rn.revision, rn.enhanced, rn.rtr), (1, false, None));
    assert_eq!(io, Err(StartupError::NoMatchingRtr));
    assert_eq!(
        StartupError::NoMatchingRtr.proto_error(),
        Some(ProtoError::NoMatchingRtr)
    );
}

#[test]
fn ird_ord_negotiation() {
    // (ini ird, ini ord, resp ird, resp ord) → (ini ird, ini ord, resp ird, resp ord)
    for (ini, resp, want) in [
        ((1, 1), (128, 128), (1, 1, 1, 1)),
        ((8, 4), (2, 16), (8, 2, 2, 8)),
        ((0, 0), (128, 128), (0, 0, 0, 0)),
        ((128, 128), (1, 1), (1, 1, 1, 1)),
        (
            (0x3fff, 0x3fff),
            (0x3fff, 0x3fff),
            (0x3fff, 0x3fff, 0x3fff, 0x3fff),
        ),
    ] {
        let mut i = cfg(2);
        (i.ird, i.ord) = ini;
        let mut r = cfg(2);
        (r.ird, r.ord) = resp;
        let (io, ro) = run_pair(i, r, 5, b"");
        let (inn, rn) = (io.unwrap(), ro.unwrap());
        assert_eq!((inn.ird, inn.ord, rn.ird, rn.ord), want, "{ini:?} {resp:?}");
        assert!(inn.ord <= rn.ird && rn.ord <= inn.ird);
        assert_eq!(rn.peer_params.unwrap().ird, ini.0);
    }
    // revision 1: nothing exchanged, configured values reported
    let mut i = cfg(1);
    (i.ird, i.ord) = (3, 5);
    let (io, _) = run_pair(i, cfg(2), 1000, b"");
    let inn = io.unwrap();
    assert_eq!(
        (inn.enhanced, inn.ird, inn.ord, inn.peer_params),
        (false, 3, 5, None)
    );
}

/// A Reply built by hand (for peers that misbehave).
fn reply_bytes(flags: u8, revision: u8, private_data: &[u8]) -> Vec<u8> {
    let mut b = MPA_KEY_REP.to_vec();
    b.push(flags);
    b.push(revision);
    b.extend_from_slice(&u16::try_from(private_data.len()).unwrap().to_be_bytes());
    b.extend_from_slice(private_data);
    b
}

fn request_bytes(flags: u8, revision: u8, private_data: &[u8]) -> Vec<u8> {
    let mut b = reply_bytes(flags, revision, private_data);
    b[..16].copy_from_slice(&MPA_KEY_REQ);
    b
}

fn initiator_outcome(cfg: MpaConfig, input: &[u8]) -> Result<Negotiated, StartupError> {
    let mut ini = Initiator::new(cfg, T0).unwrap();
    ini.poll_transmit().unwrap();
    ini.handle_input(input, T0);
    ini.poll_outcome().expect("outcome")
}

#[test]
fn insufficient_ird_is_a_terminate() {
    let mut c = cfg(2);
    c.ird = 2;
    // responder claims ORD 3 > our IRD 2
    let mut ini = Initiator::new(c, T0).unwrap();
    ini.poll_transmit();
    ini.handle_input(&reply_bytes(0x50, 2, &[0, 1, 0, 3]), T0);
    let e = ini.poll_outcome().unwrap().unwrap_err();
    assert_eq!(
        e,
        StartupError::InsufficientIrd {
            peer_ord: 3,
            our_ird: 2
        }
    );
    assert_eq!(e.proto_error(), Some(ProtoError::InsufficientIrd));
    // the Terminate goes out with CRC (the Reply had C)
    let f = ini.reply_framing().unwrap();
    assert!(f.crc && !f.markers);
}

#[test]
fn malformed_replies() {
    let c = cfg(2);
    // a Request key where the Reply belongs
    let e = initiator_outcome(c.clone(), &request_bytes(0x10, 2, &[0, 1, 0, 1])).unwrap_err();
    assert_eq!(e, StartupError::BadKey);
    assert_eq!(e.proto_error(), Some(ProtoError::InvalidRequestReply));
    // revision 2 without the enhanced flag / words
    assert_eq!(
        initiator_outcome(c.clone(), &reply_bytes(0x00, 2, &[])),
        Err(StartupError::InvalidFrame)
    );
    assert_eq!(
        initiator_outcome(c.clone(), &reply_bytes(0x10, 2, &[0, 1])),
        Err(StartupError::InvalidFrame)
    );
    // revision above what we sent, and revision 0
    let e = initiator_outcome(c.clone(), &reply_bytes(0x10, 3, &[0, 1, 0, 1])).unwrap_err();
    assert_eq!(e, StartupError::UnsupportedRevision { revision: 3 });
    assert_eq!(e.proto_error(), Some(ProtoError::InvalidRequestReply));
    assert_eq!(
        initiator_outcome(cfg(1), &reply_bytes(0x10, 2, &[0, 1, 0, 1])),
        Err(StartupError::UnsupportedRevision { revision: 2 })
    );
    assert_eq!(
        initiator_outcome(c.clone(), &reply_bytes(0x00, 0, &[])),
        Err(StartupError::UnsupportedRevision { revision: 0 })
    );
    // private data over 512 bytes: refused from the header, before the data
    let mut long = reply_bytes(0x10, 2, &[]);
    long[18..20].copy_from_slice(&513u16.to_be_bytes());
    assert_eq!(
        initiator_outcome(c.clone(), &long),
        Err(StartupError::InvalidFrame)
    );
    // revision-1 fallback Reply to our revision-2 Request (no P2P): accepted
    let n = initiator_outcome(c.clone(), &reply_bytes(0x00, 1, b"hi")).unwrap();
    assert_eq!(
        (n.revision, n.enhanced, n.peer_private_data),
        (1, false, b"hi".to_vec())
    );
    // P2P bits in a Reply to a non-P2P Request are ignored
    let n = initiator_outcome(c, &reply_bytes(0x10, 2, &[0x80, 1, 0x80, 1])).unwrap();
    assert_eq!((n.p2p, n.rtr), (false, None));
}

#[test]
fn p2p_reply_checks() {
    let mut c = cfg(2);
    c.p2p = true;
    c.rtr = RtrKinds::WRITE_READ;
    // no P2P in the Reply
    assert_eq!(
        initiator_outcome(c.clone(), &reply_bytes(0x10, 2, &[0, 1, 0, 1])),
        Err(StartupError::NoMatchingRtr)
    );
    // P2P with a kind we did not offer (Send)
    assert_eq!(
        initiator_outcome(c.clone(), &reply_bytes(0x10, 2, &[0xc0, 1, 0, 1])),
        Err(StartupError::NoMatchingRtr)
    );
    // several bits: our preference among those offered
    let n = initiator_outcome(c.clone(), &reply_bytes(0x10, 2, &[0xc0, 1, 0xc0, 1])).unwrap();
    assert_eq!(n.rtr, Some(RtrKind::Write));
    let n = initiator_outcome(c, &reply_bytes(0x10, 2, &[0x80, 1, 0x40, 1])).unwrap();
    assert_eq!(n.rtr, Some(RtrKind::Read));
}

#[test]
fn responder_decides_accept_with_private_data() {
    let mut ic = cfg(2);
    ic.private_data = b"hello responder".to_vec();
    let mut ini = Initiator::new(ic, T0).unwrap();
    let mut resp = Responder::new(cfg(2), T0).unwrap();
    let req = ini.poll_transmit().unwrap();
    resp.handle_input(&req, T0);
    assert!(resp.awaiting_decision());
    assert_eq!(resp.poll_transmit(), None, "nothing before the decision");
    assert_eq!(resp.poll_outcome(), None);
    assert_eq!(resp.poll_timeout(), None, "no timer while the ULP decides");
    let pr = resp.request().unwrap();
    assert_eq!(pr.private_data, b"hello responder");
    assert_eq!(
        (pr.revision, pr.enhanced, pr.params.unwrap().ird),
        (2, true, 128)
    );
    assert_eq!(
        resp.accept(&[0; 253]),
        Err(UsageError::PrivateDataTooLong { len: 253, max: 252 })
    );
    resp.accept(b"hello initiator").unwrap();
    assert_eq!(resp.accept(b""), Err(UsageError::NotAwaitingDecision));
    let rn = resp.poll_outcome().unwrap().unwrap();
    assert_eq!(rn.peer_private_data, b"hello responder");
    let rep = resp.poll_transmit().unwrap();
    assert_eq!(repr(&rep).ulp_private_data(), b"hello initiator");
    ini.handle_input(&rep, T0);
    let inn = ini.poll_outcome().unwrap().unwrap();
    assert_eq!(inn.peer_private_data, b"hello initiator");
}

#[test]
fn responder_rejects_with_private_data() {
    for rev in [1, 2] {
        let mut ic = cfg(rev);
        ic.want_crc = true;
        let mut ini = Initiator::new(ic, T0).unwrap();
        let mut resp = Responder::new(cfg(2), T0).unwrap();
        let req = ini.poll_transmit().unwrap();
        resp.handle_input(&req, T0);
        resp.reject(b"go away").unwrap();
        assert_eq!(
            resp.poll_outcome(),
            Some(Err(StartupError::LocallyRejected))
        );
        let rep = resp.poll_transmit().unwrap();
        let r = repr(&rep);
        assert!(r.reject && r.crc && !r.markers, "C echoed, as siw");
        assert_eq!((r.revision, r.enhanced), (rev, rev == 2));
        if rev == 2 {
            assert_eq!(r.private_data[..4], [0, 0, 0, 0]);
        }
        ini.handle_input(&rep, T0);
        let e = ini.poll_outcome().unwrap().unwrap_err();
        assert_eq!(
            e,
            StartupError::Rejected {
                private_data: b"go away".to_vec()
            }
        );
        assert_eq!(e.proto_error(), None);
    }
}

#[test]
fn responder_refusals_match_siw() {
    // M=1 request to siw_compat: reject 0x30 with zero words (siw reject_conn)
    let mut resp = Responder::new(MpaConfig::siw_compat(), T0).unwrap();
    resp.handle_input(&request_bytes(0x90, 2, &[0, 1, 0, 1]), T0);
    assert!(!resp.awaiting_decision());
    assert_eq!(
        resp.poll_outcome(),
        Some(Err(StartupError::MarkersUnsupported))
    );
    assert_eq!(
        resp.poll_transmit().unwrap(),
        reply_bytes(0x30, 2, &[0, 0, 0, 0])
    );
    // M=1 with C=1: C stays (siw only clears it for the strict CRC refusal)
    let mut resp = Responder::new(MpaConfig::siw_compat(), T0).unwrap();
    resp.handle_input(&request_bytes(0xd0, 2, &[0, 1, 0, 1]), T0);
    assert_eq!(
        resp.poll_transmit().unwrap(),
        reply_bytes(0x70, 2, &[0, 0, 0, 0])
    );
    // enhanced flag with too little private data
    let mut resp = Responder::new(MpaConfig::siw_compat(), T0).unwrap();
    resp.handle_input(&request_bytes(0x10, 2, &[0, 1]), T0);
    assert_eq!(resp.poll_outcome(), Some(Err(StartupError::InvalidFrame)));
    assert!(repr(&resp.poll_transmit().unwrap()).reject);
    // unsupported revisions: reject carrying our revision, no private data
    for (rev, ours) in [(3u8, 2u8), (0, 2), (255, 1)] {
        let mut resp = Responder::new(cfg(ours), T0).unwrap();
        resp.handle_input(&request_bytes(0x10, rev, &[0, 1, 0, 1]), T0);
        assert_eq!(
            resp.poll_outcome(),
            Some(Err(StartupError::UnsupportedRevision { revision: rev }))
        );
        assert_eq!(resp.poll_transmit().unwrap(), reply_bytes(0x20, ours, &[]));
    }
    // a revision-2 request without the enhanced flag: no words in the Reply either
    let mut resp = Responder::new_auto_accept(MpaConfig::siw_compat(), T0).unwrap();
    resp.handle_input(&request_bytes(0x00, 2, b"raw"), T0);
    let n = resp.poll_outcome().unwrap().unwrap();
    assert_eq!((n.enhanced, n.peer_private_data), (false, b"raw".to_vec()));
    assert_eq!(resp.poll_transmit().unwrap(), reply_bytes(0x00, 2, &[]));
}

#[test]
fn garbage_is_refused_without_a_reply() {
    let mut resp = Responder::new(MpaConfig::siw_compat(), T0).unwrap();
    let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_eq!(
        resp.handle_input(http, T0),
        1,
        "fails at the first wrong byte"
    );
    assert_eq!(resp.poll_outcome(), Some(Err(StartupError::BadKey)));
    assert_eq!(resp.poll_transmit(), None);
    assert_eq!(resp.handle_input(http, T0), 0);
    // a Reply key sent to a responder
    let mut resp = Responder::new(MpaConfig::siw_compat(), T0).unwrap();
    assert_eq!(resp.handle_input(&hex(REP_DEFAULT), T0), 10);
    assert_eq!(resp.poll_outcome(), Some(Err(StartupError::BadKey)));
    // private data over 512 bytes
    let mut resp = Responder::new(MpaConfig::siw_compat(), T0).unwrap();
    let mut long = request_bytes(0x10, 2, &[]);
    long[18..20].copy_from_slice(&0xffffu16.to_be_bytes());
    assert_eq!(resp.handle_input(&long, T0), 20);
    assert_eq!(resp.poll_outcome(), Some(Err(StartupError::InvalidFrame)));
    assert_eq!(resp.poll_transmit(), None);
}

#[test]
fn timeouts_in_virtual_time() {
    let start = Duration::from_secs(100);
    // initiator: 10 s for the Reply, a partial Reply does not help
    let mut ini = Initiator::new(MpaConfig::siw_compat(), start).unwrap();
    ini.poll_transmit();
    assert_eq!(ini.poll_timeout(), Some(start + Duration::from_secs(10)));
    let rep = hex(REP_DEFAULT);
    assert_eq!(
        ini.handle_input(&rep[..10], start + Duration::from_secs(3)),
        10
    );
    ini.handle_timeout(start + Duration::from_millis(9_999));
    assert_eq!(ini.poll_outcome(), None);
    ini.handle_timeout(start + Duration::from_secs(10));
    assert_eq!(ini.poll_outcome(), Some(Err(StartupError::Timeout)));
    assert_eq!(ini.poll_timeout(), None);
    assert!(ini.is_finished());
    assert_eq!(
        ini.handle_input(&rep[10..], start + Duration::from_secs(11)),
        0
    );
    // responder: 5 s for the Request
    let mut resp = Responder::new(MpaConfig::siw_compat(), start).unwrap();
    assert_eq!(resp.poll_timeout(), Some(start + Duration::from_secs(5)));
    resp.handle_timeout(start + Duration::from_secs(4));
    assert_eq!(resp.poll_outcome(), None);
    resp.handle_timeout(start + Duration::from_secs(6));
    assert_eq!(resp.poll_outcome(), Some(Err(StartupError::Timeout)));
    assert_eq!(resp.poll_transmit(), None, "siw just closes");
    // input at the deadline: the deadline wins
    let mut resp = Responder::new(MpaConfig::siw_compat(), start).unwrap();
    assert_eq!(
        resp.handle_input(&hex(REQ_DEFAULT), start + Duration::from_secs(5)),
        0
    );
    assert_eq!(resp.poll_outcome(), Some(Err(StartupError::Timeout)));
    // input just before it: fine
    let mut resp = Responder::new_auto_accept(MpaConfig::siw_compat(), start).unwrap();
    resp.handle_input(&hex(REQ_DEFAULT), start + Duration::from_millis(4_999));
    assert!(resp.poll_outcome().unwrap().is_ok());
    // custom timeouts
    let mut c = MpaConfig::siw_compat();
    c.reply_timeout = Duration::from_millis(250);
    let ini = Initiator::new(c, T0).unwrap();
    assert_eq!(ini.poll_timeout(), Some(Duration::from_millis(250)));
}

#[test]
fn eof_before_the_frame_is_stream_lost() {
    let mut ini = Initiator::new(MpaConfig::siw_compat(), T0).unwrap();
    ini.handle_input(&hex(REP_DEFAULT)[..21], T0);
    ini.handle_eof();
    assert_eq!(ini.poll_outcome(), Some(Err(StartupError::StreamLost)));
    let mut resp = Responder::new(MpaConfig::siw_compat(), T0).unwrap();
    resp.handle_input(&hex(REQ_DEFAULT), T0);
    assert!(resp.awaiting_decision());
    resp.handle_eof();
    assert_eq!(resp.poll_outcome(), Some(Err(StartupError::StreamLost)));
    assert_eq!(resp.accept(&[]), Err(UsageError::NotAwaitingDecision));
    // after success, EOF changes nothing
    let mut resp = Responder::new_auto_accept(MpaConfig::siw_compat(), T0).unwrap();
    resp.handle_input(&hex(REQ_DEFAULT), T0);
    resp.handle_eof();
    assert!(resp.poll_outcome().unwrap().is_ok());
}

#[test]
fn markers_are_per_direction() {
    let mut i = cfg(2);
    i.markers_rx = true; // we want markers on what we receive
    let mut r = cfg(2);
    r.allow_markers_tx = true;
    let (io, ro) = run_pair(i, r, 1, b"");
    let (inn, rn) = (io.unwrap(), ro.unwrap());
    assert_eq!((inn.markers_rx, inn.markers_tx), (true, false));
    assert_eq!((rn.markers_tx, rn.markers_rx), (true, false));
}

// ---------------------------------------------------------------------------------------------
// Properties

fn arb_repr_parts() -> impl Strategy<Value = (bool, u8, u8, Vec<u8>)> {
    (
        any::<bool>(),
        any::<u8>(),
        any::<u8>(),
        proptest::collection::vec(any::<u8>(), 0..=512),
    )
}

fn arb_config() -> impl Strategy<Value = MpaConfig> {
    (
        1u8..=2,
        any::<[bool; 5]>(),
        (0u16..=0x3fff, 0u16..=0x3fff),
        (any::<bool>(), 0u8..8),
        proptest::collection::vec(any::<u8>(), 0..=16),
    )
        .prop_map(|(revision, b, (ird, ord), (p2p, rtr), pd)| {
            let mut c = MpaConfig::siw_compat();
            c.revision = revision;
            c.want_crc = b[0];
            c.crc_strict = b[1];
            c.markers_rx = b[2];
            c.allow_markers_tx = b[3];
            c.ird = ird;
            c.ord = ord;
            c.rtr = kinds(rtr);
            c.p2p = p2p && revision == 2 && rtr != 0;
            c.private_data = pd;
            if b[4] {
                c.max_tx_private_data = 512;
            }
            c
        })
}

proptest! {
    #[test]
    fn repr_emit_parse_is_identity((reply, flags, revision, pd) in arb_repr_parts()) {
        let r = MpaFrameRepr {
            kind: if reply { MpaFrameKind::Reply } else { MpaFrameKind::Request },
            markers: flags & 0x80 != 0,
            crc: flags & 0x40 != 0,
            reject: flags & 0x20 != 0,
            enhanced: flags & 0x10 != 0,
            reserved: flags & 0x0f,
            revision,
            private_data: &pd,
        };
        let bytes = r.to_bytes();
        prop_assert_eq!(bytes.len(), r.buffer_len());
        prop_assert_eq!(bytes[16], flags);
        prop_assert_eq!(MpaFrameRepr::parse_bytes(&bytes), Ok(r));
    }

    #[test]
    fn parse_emit_keeps_every_byte(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                                   reply: bool, pd_len in 0u16..600) {
        let mut b = bytes;
        if b.len() >= 20 {
            b[..16].copy_from_slice(if reply { &MPA_KEY_REP } else { &MPA_KEY_REQ });
            b[18..20].copy_from_slice(&pd_len.to_be_bytes());
        }
        match MpaFrameRepr::parse_bytes(&b) {
            Ok(r) => prop_assert_eq!(&r.to_bytes()[..], &b[..r.buffer_len()]),
            Err(MpaWireError::PrivateDataTooLong { len }) => prop_assert!(len > 512),
            Err(MpaWireError::Truncated) => {
                prop_assert!(b.len() < 20 || b.len() < 20 + usize::from(pd_len))
            }
            Err(MpaWireError::BadKey) => prop_assert!(false, "key was set"),
        }
    }

    #[test]
    fn v2_words_roundtrip(words: [u8; 4]) {
        let p = MpaV2Params::parse(&words).unwrap();
        prop_assert_eq!(p.to_bytes(), words);
        prop_assert_eq!(MpaV2Params::parse(&p.to_bytes()), Ok(p));
    }

    /// Any two configurations, any chunking, FPDU bytes behind each frame: the outcome does not
    /// depend on the chunking, each side consumes exactly the frame, and when both succeed they
    /// agree on what they share.
    #[test]
    fn pairs_agree_under_any_chunking(ic in arb_config(), rc in arb_config(),
                                      chunk in 1usize..40) {
        let whole = run_pair(ic.clone(), rc.clone(), usize::MAX, b"trailing FPDU");
        let chunked = run_pair(ic, rc, chunk, b"trailing FPDU");
        prop_assert_eq!(&whole, &chunked);
        if let (Ok(i), Ok(r)) = whole {
            prop_assert_eq!(i.revision, r.revision);
            prop_assert_eq!(i.crc, r.crc);
            prop_assert_eq!((i.markers_tx, i.markers_rx), (r.markers_rx, r.markers_tx));
            prop_assert_eq!(i.rtr, r.rtr);
            if i.enhanced {
                prop_assert!(i.ord <= r.ird && r.ord <= i.ird);
            }
        }
    }

    /// Random bytes never panic a responder, and it never takes more than it was given.
    #[test]
    fn responder_survives_garbage(data in proptest::collection::vec(any::<u8>(), 0..64),
                                  prefix: bool) {
        let mut input = if prefix { MPA_KEY_REQ.to_vec() } else { Vec::new() };
        input.extend_from_slice(&data);
        let mut resp = Responder::new_auto_accept(MpaConfig::siw_compat(), T0).unwrap();
        let used = resp.handle_input(&input, T0);
        prop_assert!(used <= input.len());
        if let Some(Ok(_)) = resp.poll_outcome() {
            prop_assert!(resp.poll_transmit().is_some());
        }
    }
}
