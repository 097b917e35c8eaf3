//! Test-only pcap tooling: read the TCP byte streams out of a capture, and synthesise a capture
//! of a TCP conversation from a list of writes.
//!
//! Reading ([`read_streams`]): classic pcap and pcapng (via the `pcap-file` crate); link types
//! Ethernet (with 802.1Q/802.1ad tags), Linux cooked (SLL, SLL2), BSD loopback (NULL/LOOP) and
//! raw IP; IPv4 and IPv6 (the usual extension headers); TCP. Each direction of each connection is
//! reassembled by sequence number relative to the ISN of its SYN (or SYN-ACK), so reordered,
//! retransmitted and duplicated segments (also a connection captured on two interfaces of one
//! pcapng) are fine. It panics, naming the frame, on anything that would
//! make the stream wrong: a hole, a retransmission whose bytes differ, an IP fragment, a frame
//! cut short by the snap length, data without the SYN/SYN-ACK that fixes its ISN.
//!
//! It does not guess: segments of connections whose SYN is not in the capture are ignored (their
//! byte offsets are unknown), and so is everything that is not TCP. A SYN with a new ISN on the
//! address pair of an earlier connection starts a new connection.
//!
//! Writing ([`PcapWriter`], [`write_conversation`]): one TCP conversation between two
//! 127.0.0.1 ports over Ethernet/IPv4, with a three-way handshake (MSS option), data segments of
//! at most `mss` bytes each acknowledged by the receiver, and a FIN exchange; IPv4 header and TCP
//! checksums are computed, so tshark and tcpdump accept every frame.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, Endianness, TsResolution};

/// Both directions of one TCP connection, as the applications wrote them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpStream {
    /// The sender of the SYN.
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub to_server: Vec<u8>,
    pub to_client: Vec<u8>,
}

/// Every TCP connection of the capture at `path` whose SYN was captured, in the order of their
/// SYNs. Panics (with the path and frame number) on a capture it cannot reassemble exactly.
pub fn read_streams(path: &Path) -> Vec<TcpStream> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    streams_in(&data, &path.display().to_string())
}

/// [`read_streams`] over the bytes of a pcap or pcapng file; `name` only labels panics.
pub fn streams_in(file: &[u8], name: &str) -> Vec<TcpStream> {
    let mut asm = Reassembler::default();
    for (index, (link, frame)) in frames_in(file, name).iter().enumerate() {
        let number = index + 1; // frame numbers as tshark counts them
        match parse_frame(*link, frame) {
            Ok(Some(seg)) => asm.push(&seg, number, name),
            Ok(None) => {}
            Err(e) => panic!("{name}: frame {number}: {e}"),
        }
    }
    asm.finish(name)
}

/// The link type and bytes of every frame of a pcap or pcapng file, in file order.
pub fn frames_in(file: &[u8], name: &str) -> Vec<(DataLink, Vec<u8>)> {
    let fail = |e: pcap_file::PcapError| -> ! { panic!("{name}: {e}") };
    let mut frames = Vec::new();
    if file.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]) {
        let mut reader = PcapNgReader::new(file).unwrap_or_else(|e| fail(e));
        // link types of the interfaces of the current section, by interface id
        let mut links: Vec<DataLink> = Vec::new();
        let link_of = |links: &[DataLink], id: usize| -> DataLink {
            *links
                .get(id)
                .unwrap_or_else(|| panic!("{name}: packet on unknown interface {id}"))
        };
        while let Some(block) = reader.next_block() {
            match block.unwrap_or_else(|e| fail(e)) {
                Block::SectionHeader(_) => links.clear(),
                Block::InterfaceDescription(i) => links.push(i.linktype),
                Block::EnhancedPacket(p) => {
                    let link = link_of(&links, p.interface_id as usize);
                    frames.push((link, p.data.into_owned()));
                }
                Block::SimplePacket(p) => frames.push((link_of(&links, 0), p.data.into_owned())),
                Block::Packet(p) => {
                    let link = link_of(&links, usize::from(p.interface_id));
                    frames.push((link, p.data.into_owned()));
                }
                _ => {}
            }
        }
    } else {
        // Raw packets: the checked ones reject orig_len > snaplen, which real captures have.
        let mut reader = PcapReader::new(file).unwrap_or_else(|e| fail(e));
        let link = reader.header().datalink;
        while let Some(packet) = reader.next_raw_packet() {
            frames.push((link, packet.unwrap_or_else(|e| fail(e)).data.into_owned()));
        }
    }
    frames
}

/// The directory of real siw captures (`EXSOCK_CAPTURES`, else `../shared/interop/siw-vm/captures`
/// next to the repository), if it exists.
pub fn captures_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("EXSOCK_CAPTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/interop/siw-vm/captures"),
    };
    dir.is_dir().then_some(dir)
}

/// Every `*.pcap` and `*.pcapng` file in `dir`, sorted by name.
pub fn capture_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng")
            )
        })
        .collect();
    files.sort();
    files
}

// ---------------------------------------------------------------------------------------------
// Frame parsing

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;

/// One TCP segment as read from a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpSegment {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: Vec<u8>,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn need(b: &[u8], len: usize, what: &str) -> Result<(), String> {
    if b.len() < len {
        Err(format!(
            "{what}: {} bytes, need {len} (truncated frame?)",
            b.len()
        ))
    } else {
        Ok(())
    }
}

/// The TCP segment in one frame: `Ok(None)` for frames that are not TCP over IP.
pub fn parse_frame(link: DataLink, frame: &[u8]) -> Result<Option<TcpSegment>, String> {
    let (ethertype, ip) = match link {
        DataLink::ETHERNET => {
            need(frame, 14, "Ethernet header")?;
            let mut at = 12;
            let mut ethertype = be16(frame, at);
            // 802.1Q / 802.1ad tags (at most two in practice; bounded by the frame anyway)
            while matches!(ethertype, 0x8100 | 0x88a8 | 0x9100) {
                at += 4;
                need(frame, at + 2, "VLAN tag")?;
                ethertype = be16(frame, at);
            }
            (Some(ethertype), &frame[at + 2..])
        }
        DataLink::LINUX_SLL => {
            need(frame, 16, "Linux cooked header")?;
            (Some(be16(frame, 14)), &frame[16..])
        }
        DataLink::LINUX_SLL2 => {
            need(frame, 20, "Linux cooked v2 header")?;
            (Some(be16(frame, 0)), &frame[20..])
        }
        DataLink::NULL | DataLink::LOOP => {
            need(frame, 4, "loopback header")?;
            (None, &frame[4..])
        }
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => (None, frame),
        other => return Err(format!("unsupported link type {other:?}")),
    };
    // Where the link layer does not say (or says something else), the IP version nibble decides.
    let version = ip.first().map(|b| b >> 4);
    match (ethertype, version) {
        (Some(ETHERTYPE_IPV4) | None, Some(4)) => parse_ipv4(ip),
        (Some(ETHERTYPE_IPV6) | None, Some(6)) => parse_ipv6(ip),
        _ => Ok(None),
    }
}

fn parse_ipv4(ip: &[u8]) -> Result<Option<TcpSegment>, String> {
    need(ip, 20, "IPv4 header")?;
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(be16(ip, 2));
    if ihl < 20 || total < ihl {
        return Err(format!("bad IPv4 header: ihl {ihl}, total length {total}"));
    }
    need(ip, total, "IPv4 packet")?;
    if be16(ip, 6) & 0x3fff != 0 {
        return Err("IPv4 fragment (not supported)".into());
    }
    if ip[9] != 6 {
        return Ok(None);
    }
    let src = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
    // `total` (not the frame length) ends the packet: Ethernet pads short frames.
    parse_tcp(src, dst, &ip[ihl..total]).map(Some)
}

fn parse_ipv6(ip: &[u8]) -> Result<Option<TcpSegment>, String> {
    need(ip, 40, "IPv6 header")?;
    let payload_len = usize::from(be16(ip, 4));
    if payload_len == 0 {
        return Err("IPv6 jumbogram or empty payload (not supported)".into());
    }
    need(ip, 40 + payload_len, "IPv6 packet")?;
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&ip[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(a))
    };
    let (src, dst) = (addr(8), addr(24));
    let packet = &ip[40..40 + payload_len];
    let mut next = ip[6];
    let mut at = 0;
    // hop-by-hop, routing, destination options: skip; bounded because `at` only grows
    while matches!(next, 0 | 43 | 60) {
        need(packet, at + 2, "IPv6 extension header")?;
        let len = (usize::from(packet[at + 1]) + 1) * 8;
        next = packet[at];
        at += len;
    }
    match next {
        6 => {
            need(packet, at, "IPv6 extension headers")?;
            parse_tcp(src, dst, &packet[at..]).map(Some)
        }
        44 => Err("IPv6 fragment (not supported)".into()),
        _ => Ok(None),
    }
}

fn parse_tcp(src: IpAddr, dst: IpAddr, tcp: &[u8]) -> Result<TcpSegment, String> {
    need(tcp, 20, "TCP header")?;
    let doff = usize::from(tcp[12] >> 4) * 4;
    if doff < 20 || doff > tcp.len() {
        return Err(format!(
            "bad TCP data offset {doff} in a {}-byte segment",
            tcp.len()
        ));
    }
    Ok(TcpSegment {
        src: SocketAddr::new(src, be16(tcp, 0)),
        dst: SocketAddr::new(dst, be16(tcp, 2)),
        seq: be32(tcp, 4),
        ack: be32(tcp, 8),
        flags: tcp[13],
        payload: tcp[doff..].to_vec(),
    })
}

// ---------------------------------------------------------------------------------------------
// Reassembly

struct Connection {
    client: SocketAddr,
    server: SocketAddr,
    client_isn: u32,
    server_isn: Option<u32>,
    /// (offset from ISN+1, bytes, frame number), per direction: [to server, to client]
    segments: [Vec<(u64, Vec<u8>, usize)>; 2],
}

#[derive(Default)]
struct Reassembler {
    connections: Vec<Connection>,
    /// the latest connection of each unordered address pair
    current: HashMap<(SocketAddr, SocketAddr), usize>,
}

fn pair_key(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    if a <= b { (a, b) } else { (b, a) }
}

impl Reassembler {
    fn push(&mut self, seg: &TcpSegment, frame: usize, name: &str) {
        let key = pair_key(seg.src, seg.dst);
        let syn = seg.flags & TCP_SYN != 0;
        let ack = seg.flags & TCP_ACK != 0;
        if syn && !ack {
            let retransmitted = self.current.get(&key).is_some_and(|&i| {
                let c = &self.connections[i];
                c.client == seg.src && c.client_isn == seg.seq
            });
            if !retransmitted {
                self.current.insert(key, self.connections.len());
                self.connections.push(Connection {
                    client: seg.src,
                    server: seg.dst,
                    client_isn: seg.seq,
                    server_isn: None,
                    segments: [Vec::new(), Vec::new()],
                });
            }
        }
        let Some(&index) = self.current.get(&key) else {
            return; // began before the capture: offsets unknown
        };
        let conn = &mut self.connections[index];
        let to_server = seg.src == conn.client;
        if syn && ack {
            if to_server {
                panic!("{name}: frame {frame}: SYN-ACK from the client {}", seg.src);
            }
            match conn.server_isn {
                Some(isn) if isn != seg.seq => panic!(
                    "{name}: frame {frame}: second SYN-ACK with ISN {} (first {isn})",
                    seg.seq
                ),
                _ => conn.server_isn = Some(seg.seq),
            }
        }
        if seg.payload.is_empty() {
            return;
        }
        let isn = if to_server {
            conn.client_isn
        } else {
            conn.server_isn
                .unwrap_or_else(|| panic!("{name}: frame {frame}: server data before its SYN-ACK"))
        };
        let data_seq = seg.seq.wrapping_add(u32::from(syn));
        let offset = data_seq.wrapping_sub(isn.wrapping_add(1));
        assert!(
            offset < 1 << 31,
            "{name}: frame {frame}: data at {offset:#x} bytes from the ISN (before the SYN?)"
        );
        let dir = usize::from(!to_server);
        conn.segments[dir].push((u64::from(offset), seg.payload.clone(), frame));
    }

    fn finish(self, name: &str) -> Vec<TcpStream> {
        self.connections
            .into_iter()
            .map(|c| {
                let [up, down] = c.segments;
                TcpStream {
                    client: c.client,
                    server: c.server,
                    to_server: assemble(up, &format!("{name}: {} -> {}", c.client, c.server)),
                    to_client: assemble(down, &format!("{name}: {} -> {}", c.server, c.client)),
                }
            })
            .collect()
    }
}

/// Joins the segments of one direction; panics on a hole or on a retransmission that differs.
fn assemble(mut segments: Vec<(u64, Vec<u8>, usize)>, label: &str) -> Vec<u8> {
    segments.sort_by_key(|&(offset, _, frame)| (offset, frame));
    let mut out: Vec<u8> = Vec::new();
    for (offset, bytes, frame) in segments {
        let start = usize::try_from(offset).expect("offset fits usize");
        let end = start + bytes.len();
        assert!(
            start <= out.len(),
            "{label}: hole in the stream: bytes {}..{start} missing (next data in frame {frame})",
            out.len()
        );
        let overlap = out.len().min(end) - start;
        assert!(
            out[start..start + overlap] == bytes[..overlap],
            "{label}: frame {frame} retransmits bytes {start}..{} with different contents",
            start + overlap
        );
        out.extend_from_slice(&bytes[overlap..]);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Which way a write goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    ToServer,
    ToClient,
}

/// Synthesises one TCP conversation between `127.0.0.1:client_port` and `127.0.0.1:server_port`
/// as an Ethernet/IPv4 pcap: [`PcapWriter::new`] emits the handshake, [`PcapWriter::write`] the
/// data (segments of at most `mss` bytes, each write acknowledged by its receiver),
/// [`PcapWriter::finish`] the FIN exchange and the file.
pub struct PcapWriter {
    client: SocketAddrV4,
    server: SocketAddrV4,
    mss: usize,
    /// next sequence number to send: [client, server]
    next_seq: [u32; 2],
    ip_id: u16,
    frames: Vec<Vec<u8>>,
}

/// ISNs of [`PcapWriter::new`]: the server's wraps its sequence space within the first 64 KiB.
pub const DEFAULT_CLIENT_ISN: u32 = 0x1234_5678;
pub const DEFAULT_SERVER_ISN: u32 = 0xffff_0000;

/// The largest MSS an IPv4 packet can carry with a 20-byte TCP header.
pub const MAX_MSS: usize = 65535 - 40;

impl PcapWriter {
    pub fn new(client_port: u16, server_port: u16, mss: usize) -> Self {
        Self::with_isns(
            client_port,
            server_port,
            mss,
            DEFAULT_CLIENT_ISN,
            DEFAULT_SERVER_ISN,
        )
    }

    pub fn with_isns(
        client_port: u16,
        server_port: u16,
        mss: usize,
        client_isn: u32,
        server_isn: u32,
    ) -> Self {
        assert!(
            (1..=MAX_MSS).contains(&mss),
            "mss {mss} outside 1..={MAX_MSS}"
        );
        assert_ne!(
            client_port, server_port,
            "client and server need different ports"
        );
        let mut w = PcapWriter {
            client: SocketAddrV4::new(Ipv4Addr::LOCALHOST, client_port),
            server: SocketAddrV4::new(Ipv4Addr::LOCALHOST, server_port),
            mss,
            next_seq: [client_isn, server_isn],
            ip_id: 1,
            frames: Vec::new(),
        };
        let mss_option = [2, 4, (mss >> 8) as u8, mss as u8];
        w.segment(Direction::ToServer, TCP_SYN, &mss_option, &[]);
        w.segment(Direction::ToClient, TCP_SYN | TCP_ACK, &mss_option, &[]);
        w.segment(Direction::ToServer, TCP_ACK, &[], &[]);
        w
    }

    pub fn client(&self) -> SocketAddr {
        SocketAddr::V4(self.client)
    }

    pub fn server(&self) -> SocketAddr {
        SocketAddr::V4(self.server)
    }

    /// The data of one write, in segments of at most `mss` bytes (PSH on the last), then a pure
    /// ACK from the receiver. An empty write puts nothing on the wire.
    pub fn write(&mut self, dir: Direction, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let chunks = bytes.chunks(self.mss);
        let last = chunks.len() - 1;
        for (i, chunk) in chunks.enumerate() {
            let psh = if i == last { TCP_PSH } else { 0 };
            self.segment(dir, TCP_ACK | psh, &[], chunk);
        }
        self.segment(dir.reverse(), TCP_ACK, &[], &[]);
    }

    /// The frames written so far (Ethernet), without the FIN exchange.
    pub fn frames(&self) -> &[Vec<u8>] {
        &self.frames
    }

    /// Closes the conversation (client FIN, server FIN, client ACK) and returns the pcap file.
    pub fn finish(mut self) -> Vec<u8> {
        self.segment(Direction::ToServer, TCP_FIN | TCP_ACK, &[], &[]);
        self.segment(Direction::ToClient, TCP_FIN | TCP_ACK, &[], &[]);
        self.segment(Direction::ToServer, TCP_ACK, &[], &[]);
        pcap_file_of(&self.frames)
    }

    /// [`PcapWriter::finish`] into a file.
    pub fn finish_to(self, path: &Path) {
        let file = self.finish();
        std::fs::write(path, file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    fn segment(&mut self, dir: Direction, flags: u8, options: &[u8], payload: &[u8]) {
        let (from, to, me) = match dir {
            Direction::ToServer => (self.client, self.server, 0),
            Direction::ToClient => (self.server, self.client, 1),
        };
        let seq = self.next_seq[me];
        let ack = if flags & TCP_ACK != 0 {
            self.next_seq[1 - me]
        } else {
            0
        };
        let frame = tcp_frame(from, to, self.ip_id, seq, ack, flags, options, payload);
        self.frames.push(frame);
        self.ip_id = self.ip_id.wrapping_add(1);
        let consumed = payload.len() + usize::from(flags & (TCP_SYN | TCP_FIN) != 0);
        self.next_seq[me] = seq.wrapping_add(u32::try_from(consumed).expect("segment size"));
    }
}

impl Direction {
    pub fn reverse(self) -> Self {
        match self {
            Direction::ToServer => Direction::ToClient,
            Direction::ToClient => Direction::ToServer,
        }
    }
}

/// One conversation from a list of writes, as a pcap file at `path` (see [`PcapWriter`]).
pub fn write_conversation<I, B>(
    path: &Path,
    client_port: u16,
    server_port: u16,
    mss: usize,
    writes: I,
) where
    I: IntoIterator<Item = (Direction, B)>,
    B: AsRef<[u8]>,
{
    let mut w = PcapWriter::new(client_port, server_port, mss);
    for (dir, bytes) in writes {
        w.write(dir, bytes.as_ref());
    }
    w.finish_to(path);
}

/// A little-endian, microsecond pcap file (Ethernet) holding `frames`, 10 µs apart from a fixed
/// start time (deterministic output).
pub fn pcap_file_of(frames: &[Vec<u8>]) -> Vec<u8> {
    let header = PcapHeader {
        snaplen: 262_144,
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::MicroSecond,
        endianness: Endianness::Little,
        ..PcapHeader::default()
    };
    let mut writer =
        pcap_file::pcap::PcapWriter::with_header(Vec::new(), header).expect("pcap header");
    let start = Duration::from_secs(1_700_000_000);
    for (i, frame) in frames.iter().enumerate() {
        let ts = start + Duration::from_micros(10 * i as u64);
        let len = u32::try_from(frame.len()).expect("frame length");
        writer
            .write_packet(&PcapPacket::new(ts, len, frame))
            .expect("pcap packet");
    }
    writer.into_writer()
}

/// The RFC 1071 one's-complement sum of `data` added to `sum` (not yet folded or inverted).
pub fn ones_complement_sum(mut sum: u32, data: &[u8]) -> u32 {
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// Folds a one's-complement sum to 16 bits.
pub fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The sum of the IPv4 pseudo-header for a TCP segment of `len` bytes.
pub fn tcp_pseudo_header_sum(src: Ipv4Addr, dst: Ipv4Addr, len: usize) -> u32 {
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&src.octets());
    pseudo[4..8].copy_from_slice(&dst.octets());
    pseudo[9] = 6;
    pseudo[10..12].copy_from_slice(&u16::try_from(len).expect("TCP length").to_be_bytes());
    ones_complement_sum(0, &pseudo)
}

#[allow(clippy::too_many_arguments)]
fn tcp_frame(
    from: SocketAddrV4,
    to: SocketAddrV4,
    ip_id: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    assert!(
        options.len() & 3 == 0 && options.len() <= 40,
        "TCP options must be padded to 4"
    );
    let tcp_len = 20 + options.len() + payload.len();
    let ip_len = 20 + tcp_len;
    let ip_total = u16::try_from(ip_len).expect("IPv4 packet too large");

    let mut frame = Vec::with_capacity(14 + ip_len);
    // Ethernet: loopback-style zero MACs, as captures on `lo` show
    frame.extend_from_slice(&[0; 12]);
    frame.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());

    let ip_start = frame.len();
    frame.extend_from_slice(&[0x45, 0]);
    frame.extend_from_slice(&ip_total.to_be_bytes());
    frame.extend_from_slice(&ip_id.to_be_bytes());
    frame.extend_from_slice(&0x4000u16.to_be_bytes()); // DF, no fragment offset
    frame.extend_from_slice(&[64, 6, 0, 0]); // TTL, TCP, checksum (below)
    frame.extend_from_slice(&from.ip().octets());
    frame.extend_from_slice(&to.ip().octets());
    let ip_csum = !fold(ones_complement_sum(0, &frame[ip_start..]));
    frame[ip_start + 10..ip_start + 12].copy_from_slice(&ip_csum.to_be_bytes());

    let tcp_start = frame.len();
    frame.extend_from_slice(&from.port().to_be_bytes());
    frame.extend_from_slice(&to.port().to_be_bytes());
    frame.extend_from_slice(&seq.to_be_bytes());
    frame.extend_from_slice(&ack.to_be_bytes());
    frame.push((((20 + options.len()) / 4) << 4) as u8);
    frame.push(flags);
    frame.extend_from_slice(&0xffffu16.to_be_bytes()); // window
    frame.extend_from_slice(&[0, 0, 0, 0]); // checksum (below), urgent pointer
    frame.extend_from_slice(options);
    frame.extend_from_slice(payload);
    let sum = ones_complement_sum(
        tcp_pseudo_header_sum(*from.ip(), *to.ip(), tcp_len),
        &frame[tcp_start..],
    );
    let tcp_csum = !fold(sum);
    frame[tcp_start + 16..tcp_start + 18].copy_from_slice(&tcp_csum.to_be_bytes());
    frame
}
