//! # exsock-stat — the stats surface of libexsock.so, and its reader
//!
//! Each process that has a DDP socket keeps a shared-memory segment, `/dev/shm/exsock-<pid>`
//! (mode 0600, unlinked at `exit`), with one fixed-size [`Slot`] per DDP socket: addresses,
//! negotiated MPA parameters, byte/FPDU counters, CRC errors, Terminates, direct placement.
//! This crate's library part is the layout of that segment, shared by the writer (the
//! preload's `stats` module) and the reader (the `exsock-stat` program), the way vma_stats
//! reads libvma's counters from outside the process.
//!
//! - **Layout.** A [`Header`] (512 bytes) and [`SLOTS`] slots of 32 words (256 bytes). Every
//!   field is an atomic, so both sides read and write shared memory without `unsafe` beyond
//!   the mapping itself. A slot's content is [`SlotData`], packed into words in one place
//!   ([`SlotData::encode`] / [`SlotData::decode`]).
//! - **Consistency.** One writer per segment (the process, under its own lock); a slot is
//!   published with a seqlock (word 0 odd while it is written), so a reader never sees a
//!   half-written slot: it retries.
//! - **Freshness.** The writer refreshes its slots when a socket appears, about once a second
//!   while it has sockets, and whenever a reader asks: a reader bumps
//!   [`Header::refresh_req`] and wakes it (a futex in the shared mapping), the writer
//!   refreshes and sets [`Header::refresh_done`] to that value and wakes the reader back. A
//!   process that cannot answer (stopped, busy) still shows its last refresh.
//!
//! What it refuses to do: allocate or lock in the writer's path beyond what the preload
//! already holds; trust a segment whose magic or version differ.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// `b"EXSOCKS1"` as a little-endian word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"EXSOCKS1");
/// Layout version.
pub const VERSION: u32 = 1;
/// Slots per segment (DDP sockets shown per process; more are counted in `overflow`).
pub const SLOTS: usize = 256;
/// Words per slot.
pub const SLOT_WORDS: usize = 32;

/// The segment's header.
#[repr(C)]
pub struct Header {
    /// [`MAGIC`] once the segment is initialised.
    pub magic: AtomicU64,
    /// [`VERSION`].
    pub version: AtomicU32,
    /// [`SLOTS`].
    pub slot_count: AtomicU32,
    /// The writing process.
    pub pid: AtomicU32,
    /// Futex word: bumped by a reader that wants fresh counters.
    pub refresh_req: AtomicU32,
    /// Futex word: the last `refresh_req` value the writer served.
    pub refresh_done: AtomicU32,
    /// Reserved.
    pub flags: AtomicU32,
    /// DDP sockets not shown for want of a free slot.
    pub overflow: AtomicU64,
    /// Wall-clock time (ms since the epoch) of the last refresh.
    pub updated_ms: AtomicU64,
    /// The program's name, NUL-padded (8 words).
    pub program: [AtomicU64; 8],
    /// Reserved (zero).
    pub reserved: [AtomicU64; 50],
}

/// One socket's slot: word 0 is the seqlock, words 1.. hold a [`SlotData`].
#[repr(C)]
pub struct Slot {
    /// The words.
    pub words: [AtomicU64; SLOT_WORDS],
}

/// The whole segment.
#[repr(C)]
pub struct Segment {
    /// The header.
    pub header: Header,
    /// The slots.
    pub slots: [Slot; SLOTS],
}

/// Size of the segment file.
pub const SEGMENT_SIZE: usize = core::mem::size_of::<Segment>();

/// `DDP_STATE_*` names (0: free slot).
pub fn state_name(s: u8) -> &'static str {
    match s {
        0 => "FREE",
        1 => "CONNECTING",
        2 => "RTS",
        3 => "CLOSING",
        4 => "ERROR",
        5 => "CLOSED",
        _ => "?",
    }
}

/// A slot's content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotData {
    /// `DDP_STATE_*`; 0 means the slot is free.
    pub state: u8,
    /// The application's fd number.
    pub fd: i32,
    /// Local TCP address.
    pub local: Option<SocketAddr>,
    /// Peer TCP address.
    pub peer: Option<SocketAddr>,
    /// 1 if this side sent the MPA Request.
    pub initiator: u8,
    /// 1 if it came from a dual-mode listener.
    pub dual: u8,
    /// Negotiated MPA revision.
    pub mpa_rev: u8,
    /// CRC in use.
    pub crc: u8,
    /// Markers we send.
    pub markers_tx: u8,
    /// Markers the peer sends.
    pub markers_rx: u8,
    /// Peer-to-peer mode.
    pub p2p: u8,
    /// `DDP_RTR_*` used.
    pub rtr: u8,
    /// Negotiated IRD.
    pub ird: u32,
    /// Negotiated ORD.
    pub ord: u32,
    /// Largest ULPDU we send.
    pub mulpdu: u32,
    /// Protection domain.
    pub pd: u32,
    /// Last Terminate: `sent(1)/received(2) << 24 | layer << 16 | etype << 8 | ecode`.
    pub last_term: u32,
    /// Payload bytes sent.
    pub bytes_tx: u64,
    /// Payload bytes received.
    pub bytes_rx: u64,
    /// FPDUs sent.
    pub fpdus_tx: u64,
    /// FPDUs received.
    pub fpdus_rx: u64,
    /// Bytes placed straight from TCP into their destination.
    pub placed_direct: u64,
    /// CRC errors.
    pub crc_errors: u64,
    /// Terminates sent.
    pub terms_sent: u64,
    /// Terminates received.
    pub terms_received: u64,
    /// When the socket was registered (ms since the epoch).
    pub opened_ms: u64,
    /// When the slot was last refreshed (ms since the epoch).
    pub updated_ms: u64,
    /// Where the data is (zero from a writer that does not report it: `Q_VALID` clear).
    pub queues: QueueData,
}

/// Where a socket's data was at the last refresh, and who watched it (the preload's
/// `ddp_user::Queues`): byte counts saturate at `u32::MAX`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueData {
    /// Input in the TCP socket not read by the engine.
    pub tcp_in: u32,
    /// Received stream data in the engine (held for a reader, or waiting for the socketpair).
    pub backlog: u32,
    /// Received stream data in the socketpair, for the application.
    pub pair_in: u32,
    /// Data the application wrote into the socketpair, not yet taken by the engine.
    pub pair_out: u32,
    /// Bytes the engine has still to write to the TCP socket.
    pub unsent: u32,
    /// The TCP socket's send queue (`SIOCOUTQ`).
    pub tcp_out: u32,
    /// Application threads inside the library on the socket.
    pub inside: u16,
    /// `Q_*` flags.
    pub flags: u16,
}

/// [`QueueData::flags`]: received data held in the engine for a reader told it is readable.
pub const Q_HELD: u16 = 1;
/// ... and still in the TCP socket (announced, not read yet).
pub const Q_ANNOUNCED: u16 = 2;
/// The TCP fd is watched by an application thread (after its last wait), not the progress
/// thread.
pub const Q_LAZY: u16 = 4;
/// The progress thread is armed for the TCP fd's input.
pub const Q_ARMED_IN: u16 = 8;
/// The progress thread is armed for the TCP fd's output.
pub const Q_ARMED_OUT: u16 = 16;
/// Stream sends went into the socketpair (the engine's send limit was reached).
pub const Q_SPILLED: u16 = 32;
/// The input has ended (EOF, or the connection failed).
pub const Q_RX_DONE: u16 = 64;
/// The application closed the socket while another process still had it (a forked child):
/// the engine serves the connection for them.
pub const Q_OTHERS: u16 = 128;
/// The queue fields were reported.
pub const Q_VALID: u16 = 0x8000;

impl QueueData {
    /// The flags set, by name (`held`, `announced`, `lazy`, `armed-in`, `armed-out`,
    /// `spilled`, `rx-done`, `others`).
    pub fn flag_names(&self) -> Vec<&'static str> {
        [
            (Q_HELD, "held"),
            (Q_ANNOUNCED, "announced"),
            (Q_LAZY, "lazy"),
            (Q_ARMED_IN, "armed-in"),
            (Q_ARMED_OUT, "armed-out"),
            (Q_SPILLED, "spilled"),
            (Q_RX_DONE, "rx-done"),
            (Q_OTHERS, "others"),
        ]
        .iter()
        .filter(|(f, _)| self.flags & f != 0)
        .map(|&(_, n)| n)
        .collect()
    }
}

fn enc_addr(a: Option<SocketAddr>) -> [u64; 3] {
    match a {
        None => [0; 3],
        Some(SocketAddr::V4(a)) => [
            u64::from(libc::AF_INET as u16) | u64::from(a.port()) << 16,
            u64::from(u32::from(*a.ip())),
            0,
        ],
        Some(SocketAddr::V6(a)) => {
            let b = a.ip().octets();
            [
                u64::from(libc::AF_INET6 as u16) | u64::from(a.port()) << 16,
                u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
            ]
        }
    }
}

fn dec_addr(w: &[u64]) -> Option<SocketAddr> {
    let fam = (w[0] & 0xffff) as i32;
    let port = (w[0] >> 16) as u16;
    match fam {
        libc::AF_INET => Some(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::from(w[1] as u32)),
            port,
        )),
        libc::AF_INET6 => {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&w[1].to_le_bytes());
            b[8..].copy_from_slice(&w[2].to_le_bytes());
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(b)), port))
        }
        _ => None,
    }
}

impl SlotData {
    /// Packs into slot words 1.. (the seqlock word excluded).
    pub fn encode(&self) -> [u64; SLOT_WORDS - 1] {
        let mut w = [0u64; SLOT_WORDS - 1];
        w[0] = u64::from_le_bytes([
            self.state,
            self.initiator | self.dual << 1,
            self.mpa_rev,
            self.crc,
            self.markers_tx,
            self.markers_rx,
            self.p2p,
            self.rtr,
        ]);
        w[1] = u64::from(self.fd as u32) | u64::from(self.pd) << 32;
        w[2] = u64::from(self.ird) | u64::from(self.ord) << 32;
        w[3] = u64::from(self.mulpdu) | u64::from(self.last_term) << 32;
        w[4..7].copy_from_slice(&enc_addr(self.local));
        w[7..10].copy_from_slice(&enc_addr(self.peer));
        w[10] = self.bytes_tx;
        w[11] = self.bytes_rx;
        w[12] = self.fpdus_tx;
        w[13] = self.fpdus_rx;
        w[14] = self.placed_direct;
        w[15] = self.crc_errors;
        w[16] = self.terms_sent;
        w[17] = self.terms_received;
        w[18] = self.opened_ms;
        w[19] = self.updated_ms;
        let q = &self.queues;
        w[20] = u64::from(q.tcp_in) | u64::from(q.backlog) << 32;
        w[21] = u64::from(q.pair_in) | u64::from(q.pair_out) << 32;
        w[22] = u64::from(q.unsent) | u64::from(q.tcp_out) << 32;
        w[23] = u64::from(q.inside) | u64::from(q.flags) << 16;
        w
    }

    /// Unpacks slot words 1...
    pub fn decode(w: &[u64; SLOT_WORDS - 1]) -> SlotData {
        let b = w[0].to_le_bytes();
        SlotData {
            state: b[0],
            initiator: b[1] & 1,
            dual: (b[1] >> 1) & 1,
            mpa_rev: b[2],
            crc: b[3],
            markers_tx: b[4],
            markers_rx: b[5],
            p2p: b[6],
            rtr: b[7],
            fd: w[1] as u32 as i32,
            pd: (w[1] >> 32) as u32,
            ird: w[2] as u32,
            ord: (w[2] >> 32) as u32,
            mulpdu: w[3] as u32,
            last_term: (w[3] >> 32) as u32,
            local: dec_addr(&w[4..7]),
            peer: dec_addr(&w[7..10]),
            bytes_tx: w[10],
            bytes_rx: w[11],
            fpdus_tx: w[12],
            fpdus_rx: w[13],
            placed_direct: w[14],
            crc_errors: w[15],
            terms_sent: w[16],
            terms_received: w[17],
            opened_ms: w[18],
            updated_ms: w[19],
            queues: QueueData {
                tcp_in: w[20] as u32,
                backlog: (w[20] >> 32) as u32,
                pair_in: w[21] as u32,
                pair_out: (w[21] >> 32) as u32,
                unsent: w[22] as u32,
                tcp_out: (w[22] >> 32) as u32,
                inside: w[23] as u16,
                flags: (w[23] >> 16) as u16,
            },
        }
    }
}

impl Slot {
    /// Publishes `d` (the single writer of this segment only).
    pub fn write(&self, d: &SlotData) {
        let seq = self.words[0].load(Ordering::Relaxed);
        self.words[0].store(seq.wrapping_add(1) | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        for (w, v) in self.words[1..].iter().zip(d.encode()) {
            w.store(v, Ordering::Relaxed);
        }
        self.words[0].store((seq | 1).wrapping_add(1), Ordering::Release);
    }

    /// A consistent copy, or `None` if the writer kept it busy for 1000 tries.
    pub fn read(&self) -> Option<SlotData> {
        for _ in 0..1000 {
            let s1 = self.words[0].load(Ordering::Acquire);
            if s1 & 1 == 1 {
                core::hint::spin_loop();
                continue;
            }
            let mut w = [0u64; SLOT_WORDS - 1];
            for (o, a) in w.iter_mut().zip(&self.words[1..]) {
                *o = a.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if self.words[0].load(Ordering::Relaxed) == s1 {
                return Some(SlotData::decode(&w));
            }
        }
        None
    }
}

impl Header {
    /// The program name.
    pub fn program(&self) -> String {
        let mut b = Vec::with_capacity(64);
        for w in &self.program {
            b.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    }

    /// Sets the program name (cut to 63 bytes).
    pub fn set_program(&self, name: &[u8]) {
        let mut b = [0u8; 64];
        let n = name.len().min(63);
        b[..n].copy_from_slice(&name[..n]);
        for (i, w) in self.program.iter().enumerate() {
            w.store(
                u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes")),
                Ordering::Relaxed,
            );
        }
    }
}

/// `FUTEX_WAIT` on a shared (not process-private) futex word: sleeps while `*word == val`, at
/// most `timeout_ms` (`None`: no limit). Raw system call.
pub fn futex_wait(word: &AtomicU32, val: u32, timeout_ms: Option<u64>) {
    let ts = timeout_ms.map(|ms| libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; `tsp` is null or
    // points to our timespec. FUTEX_WAIT only reads them.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            val,
            tsp,
            core::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// `FUTEX_WAKE` of every waiter on a shared futex word. Raw system call.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not touch memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            core::ptr::null::<libc::timespec>(),
            core::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// The segment path of a process: `/dev/shm/exsock-<pid>`.
pub fn segment_path(pid: u32) -> String {
    format!("/dev/shm/exsock-{pid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_sizes() {
        assert_eq!(core::mem::size_of::<Header>(), 512);
        assert_eq!(core::mem::size_of::<Slot>(), 256);
        assert_eq!(SEGMENT_SIZE, 512 + 256 * SLOTS);
    }

    #[test]
    fn slot_round_trip() {
        let d = SlotData {
            state: 2,
            fd: 7,
            local: Some("127.0.0.1:40000".parse().unwrap()),
            peer: Some("[::1]:5201".parse().unwrap()),
            initiator: 1,
            dual: 1,
            mpa_rev: 2,
            crc: 1,
            markers_tx: 0,
            markers_rx: 1,
            p2p: 0,
            rtr: 0,
            ird: 16,
            ord: 8,
            mulpdu: 65000,
            pd: 0x8000_0001,
            last_term: 1 << 24 | 2 << 16 | 3 << 8 | 4,
            bytes_tx: u64::MAX,
            bytes_rx: 2,
            fpdus_tx: 3,
            fpdus_rx: 4,
            placed_direct: 5,
            crc_errors: 6,
            terms_sent: 7,
            terms_received: 8,
            opened_ms: 9,
            updated_ms: 10,
            queues: QueueData {
                tcp_in: 11,
                backlog: u32::MAX,
                pair_in: 12,
                pair_out: 13,
                unsent: 14,
                tcp_out: 15,
                inside: 3,
                flags: Q_VALID | Q_HELD | Q_RX_DONE,
            },
        };
        assert_eq!(d.queues.flag_names(), ["held", "rx-done"]);
        assert_eq!(SlotData::decode(&d.encode()), d);
        let s = Slot {
            words: [const { AtomicU64::new(0) }; SLOT_WORDS],
        };
        s.write(&d);
        assert_eq!(s.read(), Some(d));
        assert_eq!(s.words[0].load(Ordering::Relaxed), 2);
        s.write(&SlotData::default());
        assert_eq!(s.read(), Some(SlotData::default()));
    }

    #[test]
    fn program_name() {
        // SAFETY: Header is all atomics: all-zero is a valid value.
        let h: Header = unsafe { core::mem::zeroed() };
        h.set_program(b"redis-server");
        assert_eq!(h.program(), "redis-server");
        h.set_program(&[b'x'; 100]);
        assert_eq!(h.program().len(), 63);
    }
}
