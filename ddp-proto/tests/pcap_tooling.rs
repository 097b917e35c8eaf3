//! Tests of the test-only pcap tooling in `tests/common/pcap.rs`: reading the real siw captures
//! (every connection starts with an MPA Request/Reply and then frames into whole FPDUs, with good
//! CRCs where CRC was negotiated; the three legs of a scenario carry the same bytes), and the
//! writer → reader round trip under reordering, duplication and loss.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::pcap::{
    Direction, PcapWriter, TcpStream, capture_files, captures_dir, fold, frames_in,
    ones_complement_sum, parse_frame, pcap_file_of, read_streams, streams_in,
    tcp_pseudo_header_sum, write_conversation,
};
use proptest::prelude::*;

const MPA_REQ_KEY: &[u8; 16] = b"MPA ID Req Frame";
const MPA_REP_KEY: &[u8; 16] = b"MPA ID Rep Frame";
const MPA_FLAG_CRC: u8 = 0x40;
const MPA_FLAG_REJECT: u8 = 0x20;

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

/// Length of the MPA Request/Reply frame at the start of `stream` (20 + private data).
fn mpa_frame_len(stream: &[u8]) -> usize {
    assert!(
        stream.len() >= 20,
        "MPA frame cut short: {} bytes",
        stream.len()
    );
    20 + usize::from(u16::from_be_bytes([stream[18], stream[19]]))
}

/// Walks the FPDUs after the MPA frame (no markers: siw never uses them); checks each CRC if
/// `crc`. Returns the number of FPDUs. Panics unless the stream ends on an FPDU boundary.
fn walk_fpdus(stream: &[u8], crc: bool, label: &str) -> usize {
    let mut pos = mpa_frame_len(stream);
    let mut count = 0;
    while pos < stream.len() {
        assert!(
            pos + 2 <= stream.len(),
            "{label}: stream ends inside an FPDU header at {pos}"
        );
        let ulpdu_len = usize::from(u16::from_be_bytes([stream[pos], stream[pos + 1]]));
        let padded = (2 + ulpdu_len).next_multiple_of(4);
        let end = pos + padded + 4;
        assert!(
            end <= stream.len(),
            "{label}: FPDU at {pos} ({end} > {})",
            stream.len()
        );
        let wire_crc = u32::from_le_bytes(stream[end - 4..end].try_into().unwrap());
        if crc {
            assert_eq!(
                crc32c::crc32c(&stream[pos..end - 4]),
                wire_crc,
                "{label}: bad CRC in the FPDU at {pos}"
            );
        } else {
            assert_eq!(
                wire_crc, 0,
                "{label}: CRC field of the FPDU at {pos} without CRC"
            );
        }
        pos = end;
        count += 1;
    }
    count
}

#[test]
fn real_captures_are_mpa_streams_of_whole_fpdus() {
    let mut total_streams = 0;
    let mut total_fpdus = 0;
    for path in real_captures() {
        let label = path.file_name().unwrap().to_string_lossy().into_owned();
        let streams = read_streams(&path);
        assert!(!streams.is_empty(), "{label}: no TCP connection");
        for s in &streams {
            let label = format!("{label} {} -> {}", s.client, s.server);
            assert!(
                s.to_server.starts_with(MPA_REQ_KEY),
                "{label}: no MPA Request"
            );
            assert!(
                s.to_client.starts_with(MPA_REP_KEY),
                "{label}: no MPA Reply"
            );
            let (req_flags, rep_flags) = (s.to_server[16], s.to_client[16]);
            let crc = req_flags & MPA_FLAG_CRC != 0 && rep_flags & MPA_FLAG_CRC != 0;
            let up = walk_fpdus(&s.to_server, crc, &format!("{label} to server"));
            let down = walk_fpdus(&s.to_client, crc, &format!("{label} to client"));
            if rep_flags & MPA_FLAG_REJECT != 0 {
                assert_eq!(up + down, 0, "{label}: FPDUs after an MPA reject");
            }
            total_fpdus += up + down;
        }
        total_streams += streams.len();
    }
    eprintln!("{total_streams} connections, {total_fpdus} FPDUs");
}

#[test]
fn the_legs_of_a_scenario_carry_the_same_bytes() {
    // `<scenario>.{lo,server,client}.pcap`: slirp re-segments, the byte streams stay equal.
    let mut scenarios: BTreeMap<String, Vec<(PathBuf, Vec<TcpStream>)>> = BTreeMap::new();
    for path in real_captures() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(scenario) = [".lo.pcap", ".server.pcap", ".client.pcap"]
            .iter()
            .find_map(|leg| name.strip_suffix(leg))
        else {
            continue;
        };
        let streams = read_streams(&path);
        scenarios
            .entry(scenario.to_owned())
            .or_default()
            .push((path, streams));
    }
    for (scenario, legs) in &scenarios {
        assert_eq!(legs.len(), 3, "{scenario}: expected three legs");
        let (first_path, first) = &legs[0];
        for (path, streams) in &legs[1..] {
            let bytes = |s: &[TcpStream]| -> Vec<(Vec<u8>, Vec<u8>)> {
                s.iter()
                    .map(|s| (s.to_server.clone(), s.to_client.clone()))
                    .collect()
            };
            assert!(
                bytes(first) == bytes(streams),
                "{} and {} differ",
                first_path.display(),
                path.display()
            );
        }
    }
}

fn conversation(mss: usize, writes: &[(Direction, Vec<u8>)]) -> PcapWriter {
    let mut w = PcapWriter::new(40000, 7174, mss);
    for (dir, bytes) in writes {
        w.write(*dir, bytes);
    }
    w
}

fn expected(writes: &[(Direction, Vec<u8>)]) -> (Vec<u8>, Vec<u8>) {
    let mut up = Vec::new();
    let mut down = Vec::new();
    for (dir, bytes) in writes {
        match dir {
            Direction::ToServer => up.extend_from_slice(bytes),
            Direction::ToClient => down.extend_from_slice(bytes),
        }
    }
    (up, down)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sample_writes() -> Vec<(Direction, Vec<u8>)> {
    vec![
        (
            Direction::ToServer,
            b"MPA ID Req Frame\x10\x02\x00\x04\x00\x01\x00\x01".to_vec(),
        ),
        (
            Direction::ToClient,
            b"MPA ID Rep Frame\x10\x02\x00\x04\x00\x01\x00\x01".to_vec(),
        ),
        (Direction::ToServer, pattern(4000, 1)),
        (Direction::ToClient, Vec::new()),
        (Direction::ToClient, pattern(1, 2)),
        (Direction::ToClient, pattern(70_000, 3)),
        (Direction::ToServer, pattern(1460, 4)),
    ]
}

/// Checks the IPv4 header and TCP checksums of an Ethernet/IPv4/TCP frame: each sums to 0xffff.
fn assert_checksums(frame: &[u8], index: usize) {
    let ip = &frame[14..];
    assert_eq!(
        fold(ones_complement_sum(0, &ip[..20])),
        0xffff,
        "frame {index}: IPv4 checksum"
    );
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    assert_eq!(frame.len(), 14 + total, "frame {index}: IPv4 total length");
    let src = std::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = std::net::Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let tcp = &ip[20..total];
    let sum = ones_complement_sum(tcp_pseudo_header_sum(src, dst, tcp.len()), tcp);
    assert_eq!(fold(sum), 0xffff, "frame {index}: TCP checksum");
}

#[test]
fn written_conversation_reads_back_identically() {
    let writes = sample_writes();
    let (up, down) = expected(&writes);
    for mss in [1, 100, 1460, 65495] {
        let w = conversation(mss, &writes);
        let (client, server) = (w.client(), w.server());
        let file = w.finish();
        let streams = streams_in(&file, "synthetic");
        assert_eq!(
            streams,
            vec![TcpStream {
                client,
                server,
                to_server: up.clone(),
                to_client: down.clone()
            }],
            "mss {mss}"
        );
    }
}

#[test]
fn written_frames_are_valid_tcp() {
    let mss = 1000;
    let file = conversation(mss, &sample_writes()).finish();
    let frames = frames_in(&file, "synthetic");
    // handshake 3 + data segments + one ACK per non-empty write + FIN exchange 3
    let data_segments: usize = sample_writes()
        .iter()
        .map(|(_, b)| b.len().div_ceil(mss))
        .sum();
    let writes = sample_writes()
        .iter()
        .filter(|(_, b)| !b.is_empty())
        .count();
    assert_eq!(frames.len(), 3 + data_segments + writes + 3);
    let mut next = std::collections::HashMap::new();
    for (i, (link, frame)) in frames.iter().enumerate() {
        assert_eq!(*link, pcap_file::DataLink::ETHERNET);
        assert_checksums(frame, i + 1);
        let seg = parse_frame(*link, frame).unwrap().expect("TCP");
        assert!(seg.payload.len() <= mss);
        // sequence numbers are contiguous per sender; every ACK after the SYN acks all sent
        if let Some(&expected_seq) = next.get(&seg.src) {
            assert_eq!(seg.seq, expected_seq, "frame {}: seq", i + 1);
        }
        let consumed = seg.payload.len() as u32 + u32::from(seg.flags & 0x03 != 0);
        next.insert(seg.src, seg.seq.wrapping_add(consumed));
        if seg.flags & 0x10 != 0 {
            assert_eq!(Some(&seg.ack), next.get(&seg.dst), "frame {}: ack", i + 1);
        }
    }
    let flags: Vec<u8> = frames
        .iter()
        .map(|(l, f)| parse_frame(*l, f).unwrap().unwrap().flags)
        .collect();
    assert_eq!(&flags[..3], &[0x02, 0x12, 0x10]);
    assert_eq!(&flags[flags.len() - 3..], &[0x11, 0x11, 0x10]);
}

#[test]
fn sequence_numbers_may_wrap() {
    let writes = sample_writes();
    let (up, down) = expected(&writes);
    let mut w = PcapWriter::with_isns(1, 2, 536, u32::MAX - 3000, u32::MAX);
    for (dir, bytes) in &writes {
        w.write(*dir, bytes);
    }
    let streams = streams_in(&w.finish(), "wrap");
    assert_eq!((&streams[0].to_server, &streams[0].to_client), (&up, &down));
}

#[test]
fn file_api_round_trip() {
    let path =
        std::env::temp_dir().join(format!("exsock-pcap-tooling-{}.pcap", std::process::id()));
    let writes = sample_writes();
    write_conversation(
        &path,
        5000,
        6000,
        1460,
        writes.iter().map(|(d, b)| (*d, b.as_slice())),
    );
    let streams = read_streams(&path);
    std::fs::remove_file(&path).unwrap();
    let (up, down) = expected(&writes);
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].client, "127.0.0.1:5000".parse().unwrap());
    assert_eq!(streams[0].server, "127.0.0.1:6000".parse().unwrap());
    assert_eq!((&streams[0].to_server, &streams[0].to_client), (&up, &down));
}

#[test]
fn two_conversations_on_one_port_pair_stay_apart() {
    let mut a = PcapWriter::with_isns(5000, 6000, 100, 1000, 2000);
    a.write(Direction::ToServer, b"first");
    let mut b = PcapWriter::with_isns(5000, 6000, 100, 9000, 7000);
    b.write(Direction::ToClient, b"second");
    let mut frames: Vec<Vec<u8>> = frames_in(&a.finish(), "a")
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    frames.extend(frames_in(&b.finish(), "b").into_iter().map(|(_, f)| f));
    let streams = streams_in(&pcap_file_of(&frames), "two");
    assert_eq!(streams.len(), 2);
    assert_eq!(
        (
            streams[0].to_server.as_slice(),
            streams[0].to_client.as_slice()
        ),
        (&b"first"[..], &b""[..])
    );
    assert_eq!(
        (
            streams[1].to_server.as_slice(),
            streams[1].to_client.as_slice()
        ),
        (&b""[..], &b"second"[..])
    );
}

fn frames_of(w: PcapWriter) -> Vec<Vec<u8>> {
    frames_in(&w.finish(), "synthetic")
        .into_iter()
        .map(|(_, f)| f)
        .collect()
}

#[test]
#[should_panic(expected = "hole in the stream")]
fn a_lost_segment_is_a_hole() {
    let mut frames = frames_of(conversation(100, &sample_writes()));
    let data = frames.iter().position(|f| f.len() > 54 + 30).unwrap(); // a data segment
    frames.remove(data + 1);
    streams_in(&pcap_file_of(&frames), "lossy");
}

#[test]
#[should_panic(expected = "with different contents")]
fn a_retransmission_with_other_bytes_is_refused() {
    let mut frames = frames_of(conversation(100, &sample_writes()));
    let mut copy = frames[3].clone(); // the first data segment
    let last = copy.len() - 1;
    copy[last] ^= 1; // payload byte (checksums are not checked when reading)
    frames.push(copy);
    streams_in(&pcap_file_of(&frames), "corrupt");
}

#[test]
fn frames_without_a_syn_are_ignored() {
    let frames = frames_of(conversation(100, &sample_writes()));
    assert!(streams_in(&pcap_file_of(&frames[3..]), "late start").is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(64) })]

    /// Any conversation, with its frames shuffled and some duplicated (retransmissions, or a
    /// capture on two interfaces), reads back as the writes. SYN and SYN-ACK stay first: data
    /// before them has no known offset.
    #[test]
    fn round_trip_survives_reordering_and_duplicates(
        writes in prop::collection::vec((any::<bool>(), prop::collection::vec(any::<u8>(), 0..3000)), 0..12),
        mss in 1usize..2000,
        isns in (any::<u32>(), any::<u32>()),
        shuffle in prop::collection::vec(any::<prop::sample::Index>(), 0..64),
        dups in prop::collection::vec(any::<prop::sample::Index>(), 0..16),
    ) {
        let writes: Vec<(Direction, Vec<u8>)> = writes
            .into_iter()
            .map(|(up, b)| (if up { Direction::ToServer } else { Direction::ToClient }, b))
            .collect();
        let mut w = PcapWriter::with_isns(33000, 7174, mss, isns.0, isns.1);
        for (dir, bytes) in &writes {
            w.write(*dir, bytes);
        }
        let (client, server) = (w.client(), w.server());
        let mut frames = frames_of(w);
        let n = frames.len();
        for d in &dups {
            let f = frames[d.index(n)].clone();
            frames.push(f);
        }
        let n = frames.len();
        for pair in shuffle.chunks_exact(2) {
            let (i, j) = (2 + pair[0].index(n - 2), 2 + pair[1].index(n - 2));
            frames.swap(i, j);
        }
        let (up, down) = expected(&writes);
        let streams = streams_in(&pcap_file_of(&frames), "shuffled");
        prop_assert_eq!(streams, vec![TcpStream { client, server, to_server: up, to_client: down }]);
    }
}
