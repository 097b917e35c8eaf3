//! Every operation × sizes × framing variants, over real loopback sockets, content checked
//! byte by byte.

mod common;

use common::*;
use ddp_user::engine::cq::{WC_WITH_INV, opcode, status};
use ddp_user::engine::options::Options;
use ddp_user::{DdpSocket, SIGNALED, STag};

const SMALL_SIZES: &[usize] = &[0, 1, 4095, 4096, 65536, (1 << 20) + 1];
const BIG: usize = 16 << 20;

const ACC_LOCAL_WRITE: u32 = 1;
const ACC_REMOTE_WRITE: u32 = 2;
const ACC_REMOTE_READ: u32 = 4;

fn stream(a: &DdpSocket, b: &DdpSocket, len: usize, seed: u64) {
    let data = pattern(len, seed);
    let a2 = a.clone();
    let d2 = data.clone();
    let t = std::thread::spawn(move || send_all(&a2, &d2));
    let got = recv_exact(b, len);
    t.join().unwrap();
    assert!(got == data, "stream content differs ({len} bytes)");
}

fn send_recv(a: &DdpSocket, b: &DdpSocket, len: usize, seed: u64, inv: Option<STag>) {
    let data = pattern(len, seed);
    let mut sink = vec![0u8; len];
    // SAFETY: `sink` lives until its completion is taken below.
    unsafe { b.post_recv(11, &[iov(&sink)]).unwrap() };
    match inv {
        // SAFETY: `data` lives until the completion below.
        None => unsafe { a.post_send(22, &[iov(&data)], SIGNALED).unwrap() },
        // SAFETY: as above.
        Some(s) => unsafe { a.post_send_inv(22, &[iov(&data)], s, SIGNALED).unwrap() },
    }
    let wa = wait_one(a);
    assert_eq!(
        (wa.wr_id, wa.status, wa.opcode),
        (22, status::SUCCESS, opcode::SEND)
    );
    let wb = wait_one(b);
    assert_eq!(
        (wb.wr_id, wb.status, wb.opcode),
        (11, status::SUCCESS, opcode::RECV)
    );
    assert_eq!(wb.byte_len as usize, len);
    if let Some(s) = inv {
        assert_eq!(wb.flags & WC_WITH_INV, WC_WITH_INV);
        assert_eq!(wb.inv_stag, s.0);
    }
    // The completion was taken: the buffer is ours again.
    sink.truncate(len);
    assert!(sink == data, "posted Send content differs ({len} bytes)");
}

fn write(a: &DdpSocket, b: &DdpSocket, len: usize, seed: u64) {
    let data = pattern(len, seed);
    let mut region = vec![0u8; len.max(1)];
    // SAFETY: `region` outlives the registration (dereg below).
    let stag = unsafe { b.reg_mr(region.as_mut_ptr(), region.len(), ACC_REMOTE_WRITE) }.unwrap();
    let reg = Registered::new(b, stag);
    let note = [0u8; 1];
    // SAFETY: `note` lives until its completion is taken.
    unsafe { b.post_recv(1, &[iov(&note)]).unwrap() };
    // SAFETY: `data` lives until the completions below.
    unsafe {
        a.post_write(2, &[iov(&data)], stag, region.as_ptr() as u64, SIGNALED)
            .unwrap();
        a.post_send(3, &[iov(&[7u8])], SIGNALED).unwrap();
    }
    let w = wait_one(a);
    assert_eq!(
        (w.wr_id, w.status, w.opcode, w.byte_len as usize),
        (2, 0, opcode::WRITE, len)
    );
    assert_eq!(wait_one(a).wr_id, 3);
    // The Send follows the Write: once it is received, the Write is placed.
    let r = wait_one(b);
    assert_eq!((r.wr_id, r.status), (1, 0));
    reg.dereg();
    assert!(
        region[..len] == data[..],
        "RDMA Write content differs ({len} bytes)"
    );
}

fn read(a: &DdpSocket, b: &DdpSocket, len: usize, seed: u64) {
    let data = pattern(len, seed);
    let mut src = data.clone();
    src.push(0);
    // SAFETY: `src` outlives the registration.
    let stag = unsafe { b.reg_mr(src.as_mut_ptr(), src.len(), ACC_REMOTE_READ) }.unwrap();
    let reg = Registered::new(b, stag);
    let sink = vec![0u8; len];
    // SAFETY: `sink` lives until the completion.
    unsafe {
        a.post_read(5, &[iov(&sink)], stag, src.as_ptr() as u64, SIGNALED)
            .unwrap()
    };
    let w = wait_one(a);
    assert_eq!(
        (w.wr_id, w.status, w.opcode, w.byte_len as usize),
        (5, 0, opcode::READ, len)
    );
    reg.dereg();
    assert!(sink == data, "RDMA Read content differs ({len} bytes)");
}

fn all_ops(name: &str, sizes: &[usize]) {
    let (oa, ob) = variant(name);
    let (a, b) = pair(&oa, &ob);
    let info = a.info().unwrap();
    assert_eq!(info.state, 2, "RTS");
    assert_eq!(info.crc, u8::from(oa.crc || ob.crc));
    assert_eq!(info.mpa_rev, oa.mpa_rev);
    assert_eq!(info.markers_rx, u8::from(oa.markers));
    if !oa.p2p.is_empty() {
        assert_eq!(info.p2p, 1);
        assert_eq!(
            u32::from(info.rtr),
            ddp_user::engine::options::rtr_to_bits(oa.p2p)
        );
    }
    for (i, &len) in sizes.iter().enumerate() {
        let seed = i as u64 * 31 + len as u64;
        stream(&a, &b, len, seed);
        stream(&b, &a, len, seed + 1);
    }
    // Receives posted from here on: the sockets are in posted mode.
    for (i, &len) in sizes.iter().enumerate() {
        let seed = i as u64 * 17 + len as u64;
        send_recv(&a, &b, len, seed, None);
        let mut inv_region = vec![0u8; 64];
        // SAFETY: deregistered below, before `inv_region` is dropped.
        let s = unsafe { a.reg_mr(inv_region.as_mut_ptr(), 64, ACC_REMOTE_WRITE) }.unwrap();
        send_recv(&b, &a, len, seed + 1, Some(s));
        a.dereg_mr(s).unwrap();
        write(&a, &b, len, seed + 2);
        read(&a, &b, len, seed + 3);
    }
    let ib = b.info().unwrap();
    // With markers every 512 octets a payload run is at most 508 octets long, and whether a
    // read starts at one (direct) or takes it with a large buffered read depends on timing:
    // under load `ops_nocrc_markers` placed nothing directly in 2 of 30 runs (before and
    // after session 15's receive change; it failed a CI run once). Only without markers is
    // direct placement of the large payloads certain.
    if sizes.iter().any(|&s| s >= 65536) && !oa.markers {
        assert!(ib.placed_direct > 0, "no direct placement at the responder");
        assert!(
            a.info().unwrap().placed_direct > 0,
            "no direct placement at the initiator"
        );
    }
    assert_eq!(ib.term_sent, 0);
}

#[test]
fn ops_default_all_sizes() {
    bounded(240, || {
        let mut sizes = SMALL_SIZES.to_vec();
        sizes.push(BIG);
        all_ops("default", &sizes);
    });
}

#[test]
fn ops_nocrc_markers() {
    bounded(120, || all_ops("nocrc_markers", SMALL_SIZES));
}

#[test]
fn ops_crc_markers_rev1() {
    bounded(120, || all_ops("crc_markers_rev1", SMALL_SIZES));
}

#[test]
fn ops_nocrc_rev1_big() {
    bounded(240, || all_ops("nocrc_rev1", &[0, 1, 4096, BIG]));
}

#[test]
fn ops_p2p_write_rtr() {
    bounded(120, || all_ops("p2p_write", SMALL_SIZES));
}

#[test]
fn ops_p2p_read_rtr() {
    bounded(120, || all_ops("p2p_read", SMALL_SIZES));
}

#[test]
fn markers_big_write() {
    bounded(240, || {
        let (oa, ob) = variant("nocrc_markers");
        let (a, b) = pair(&oa, &ob);
        write(&a, &b, BIG, 99);
        read(&a, &b, BIG, 98);
    });
}

#[test]
fn direct_placement_counts() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        let before = b.info().unwrap().placed_direct;
        write(&a, &b, 1 << 20, 1);
        let after_write = b.info().unwrap().placed_direct;
        assert!(
            after_write - before > 512 * 1024,
            "Write not placed directly: {}",
            after_write - before
        );
        send_recv(&a, &b, 1 << 20, 2, None);
        let after_send = b.info().unwrap().placed_direct;
        assert!(
            after_send - after_write > 512 * 1024,
            "Send not placed directly"
        );
        let before = a.info().unwrap().placed_direct;
        read(&a, &b, 1 << 20, 3);
        let after_read = a.info().unwrap().placed_direct;
        assert!(
            after_read - before > 512 * 1024,
            "Read Response not placed directly"
        );
    });
}

/// Stream writes whose last FPDU is small (64 KiB: one MULPDU-sized FPDU and a few bytes)
/// mixed with writes whose next FPDU is large, read in buffers of several sizes: the read
/// that places a large FPDU also takes the small one that followed last time, and a wrong
/// guess (a large FPDU after all) must still deliver every byte in order. (How much is
/// placed directly depends on whether the reader waits or the writer does: not asserted.)
#[test]
fn stream_small_followers_and_wrong_guesses() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        let sizes: Vec<usize> = [65536, 65536, 65536, 1 << 20, 65536, 100, 65616, 200_000]
            .iter()
            .cycle()
            .take(48)
            .copied()
            .collect();
        let reads: [&[usize]; 4] = [&[65536], &[65536], &[1 << 20], &[100_000]];
        stream_sizes(&a, &b, sizes, &reads, 77);
    });
}

/// Small writes (the fast path: one FPDU framed and written at once) until the kernel's
/// buffers and then the engine's queue are full and a nonblocking send says EAGAIN (the
/// write the kernel stopped in the middle of waits as the tail), then mixed sizes, some in
/// several iovecs, while the peer reads: every accepted byte arrives, in order.
#[test]
fn small_writes_fill_the_buffers_and_mix_with_large() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        let data = pattern(64 << 20, 91);
        let mut rng = Rng::new(5);
        let mut at = 0usize;
        let mut full = false;
        for _ in 0..200_000 {
            // (up to the small-write fast path's limit, `SMALL_SEND_MAX`)
            let n = (1 + rng.below(16 << 10) as usize).min(data.len() - at);
            if n == 0 {
                break;
            }
            match a.send(
                &[std::io::IoSlice::new(&data[at..at + n])],
                libc::MSG_DONTWAIT,
            ) {
                Ok(k) => at += k,
                Err(e) if e.0 == libc::EAGAIN => {
                    full = true;
                    break;
                }
                Err(e) => panic!("send: {e:?}"),
            }
        }
        assert!(full, "the buffers never filled ({at} bytes accepted)");
        let filled = at;
        let end = filled + (24 << 20);
        assert!(
            end <= data.len(),
            "{filled} bytes before the buffers filled"
        );
        let a2 = a.clone();
        let d2 = data.clone();
        let t = std::thread::spawn(move || {
            let mut rng = Rng::new(6);
            let mut at = filled;
            for i in 0.. {
                if at == end {
                    break;
                }
                let n = match i % 4 {
                    0 => 65536 + rng.below(200_000) as usize,
                    _ => 1 + rng.below(16 << 10) as usize,
                }
                .min(end - at);
                let cut = at + n / 2;
                at += if i % 3 == 0 && n >= 2 {
                    let two = [
                        std::io::IoSlice::new(&d2[at..cut]),
                        std::io::IoSlice::new(&d2[cut..at + n]),
                    ];
                    a2.send(&two, 0).expect("send")
                } else {
                    a2.send(&[std::io::IoSlice::new(&d2[at..at + n])], 0)
                        .expect("send")
                };
            }
        });
        let got = recv_exact(&b, end);
        t.join().unwrap();
        assert!(got[..] == data[..end], "stream content differs");
    });
}

/// Small posted Sends (the `post_send` fast path) complete in posting order, each once, with
/// every byte received in order. Small TCP buffers make the kernel take only part of many of
/// them (the rest waits as the tail; later posts queue behind it, the general path); a large
/// Send in the middle queues thousands behind it; RDMA Reads in between must complete before
/// the Sends posted after them; some Sends have two SGEs, some are unsignaled (no completion).
/// Every 300 posts the completions so far are taken (the queue empties: the fast path again).
#[test]
fn small_posted_sends_complete_in_order() {
    bounded(60, || {
        const N: usize = 2000;
        // (the fast path's limit, `SMALL_SEND_MAX`)
        const MAX: usize = 16 << 10;
        const LARGE_AT: usize = N / 2;
        let o = Options::default();
        let (a, b) = pair_bufs(&o, &o, Some(8192));
        let data = pattern(N * MAX, 17);
        let large = pattern(4 << 20, 19);
        let mut rng = Rng::new(9);
        // Receives for all of them first (each names its own slot; the large one's in order).
        let sinks = vec![0u8; N * MAX];
        let large_sink = vec![0u8; large.len()];
        for i in 0..N {
            if i == LARGE_AT {
                // SAFETY: `large_sink` lives until its receive completed.
                unsafe { b.post_recv(u64::MAX, &[iov(&large_sink)]).unwrap() };
            }
            let at = i * MAX;
            // SAFETY: `sinks` lives until every receive completed (below).
            unsafe { b.post_recv(i as u64, &[iov(&sinks[at..at + MAX])]).unwrap() };
        }
        let mut src = pattern(4096, 18);
        // SAFETY: `src` outlives the registration.
        let stag = unsafe { b.reg_mr(src.as_mut_ptr(), src.len(), ACC_REMOTE_READ) }.unwrap();
        let reg = Registered::new(&b, stag);
        let read_sinks = vec![0u8; 64 * 100];
        let mut lens = Vec::with_capacity(N);
        let mut want = Vec::new(); // a's completions, in posting order
        let mut got = Vec::new();
        let take_all = |got: &mut Vec<u64>, want: &[u64]| {
            while got.len() < want.len() {
                let w = wait_one(&a);
                assert_eq!(w.status, status::SUCCESS, "{w:?}");
                got.push(w.wr_id);
            }
        };
        let mut reads = 0usize;
        for i in 0..N {
            if i % 300 == 0 {
                take_all(&mut got, &want);
            }
            if i == LARGE_AT {
                // SAFETY: `large` lives until its completion was taken.
                unsafe { a.post_send(u64::MAX, &[iov(&large)], SIGNALED).unwrap() };
                want.push(u64::MAX);
            }
            let len = 1 + rng.below(MAX as u64) as usize;
            let at = i * MAX;
            let d = &data[at..at + len];
            if i % 97 == 50 && reads < 64 {
                let sink = &read_sinks[reads * 100..reads * 100 + 100];
                // SAFETY: `read_sinks` lives until the completions are taken.
                unsafe {
                    a.post_read(
                        1_000_000 + reads as u64,
                        &[iov(sink)],
                        stag,
                        src.as_ptr() as u64 + reads as u64,
                        SIGNALED,
                    )
                    .unwrap()
                };
                want.push(1_000_000 + reads as u64);
                reads += 1;
            }
            // (some unsignaled: no completion of their own; the buffers stay lent until a
            // later signaled one completed)
            let signaled = i % 7 != 5 || i + 1 == N;
            let fl = if signaled { SIGNALED } else { 0 };
            // SAFETY: `data` lives until every completion was taken.
            unsafe {
                if i % 5 == 3 && len >= 2 {
                    a.post_send(i as u64, &[iov(&d[..len / 2]), iov(&d[len / 2..])], fl)
                } else {
                    a.post_send(i as u64, &[iov(d)], fl)
                }
                .unwrap()
            };
            if signaled {
                want.push(i as u64);
            }
            lens.push(len);
        }
        take_all(&mut got, &want);
        assert!(got == want, "completions out of order");
        for (i, &len) in lens.iter().enumerate() {
            if i == LARGE_AT {
                let w = wait_one(&b);
                assert_eq!(
                    (w.wr_id, w.status, w.byte_len as usize),
                    (u64::MAX, 0, large.len())
                );
            }
            let w = wait_one(&b);
            assert_eq!(
                (w.wr_id, w.status, w.opcode, w.byte_len as usize),
                (i as u64, status::SUCCESS, opcode::RECV, len)
            );
        }
        reg.dereg();
        assert!(large_sink == large, "the large Send differs");
        for (i, &len) in lens.iter().enumerate() {
            let at = i * MAX;
            assert!(
                sinks[at..at + len] == data[at..at + len],
                "Send {i} differs"
            );
        }
        for r in 0..reads {
            assert!(
                read_sinks[r * 100..r * 100 + 100] == src[r..r + 100],
                "Read {r}"
            );
        }
    });
}

/// `DDP_CONN_INFO`'s `bytes_tx`/`bytes_rx` count every payload byte, tagged included: the
/// peer's RDMA Writes and the Read Responses we serve (regression: found by the siw interop,
/// `write_bw-from-siw`, whose server saw 0 bytes received after 16 RDMA Writes).
#[test]
fn byte_counters_count_tagged_traffic() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        let (a0, b0) = (a.info().unwrap(), b.info().unwrap());
        write(&a, &b, 4000, 1); // + the 1-byte Send that follows it
        let (a1, b1) = (a.info().unwrap(), b.info().unwrap());
        assert_eq!(a1.bytes_tx - a0.bytes_tx, 4001, "Write + Send sent");
        assert_eq!(
            b1.bytes_rx - b0.bytes_rx,
            4001,
            "Write placed + Send received"
        );
        read(&a, &b, 70000, 2);
        let (a2, b2) = (a.info().unwrap(), b.info().unwrap());
        assert_eq!(b2.bytes_tx - b1.bytes_tx, 70000, "Read Response served");
        assert_eq!(a2.bytes_rx - a1.bytes_rx, 70000, "Read Response placed");
        assert_eq!(a2.bytes_tx, b2.bytes_rx, "a's tx is b's rx");
        assert_eq!(b2.bytes_tx, a2.bytes_rx, "b's tx is a's rx");
    });
}

#[test]
fn local_write_access_and_bad_args() {
    bounded(30, || {
        let o = Options::default();
        let (a, _b) = pair(&o, &o);
        let mut v = vec![0u8; 16];
        // SAFETY: zero length is refused before anything is recorded.
        assert_eq!(
            unsafe { a.reg_mr(v.as_mut_ptr(), 0, ACC_LOCAL_WRITE) }
                .unwrap_err()
                .0,
            libc::EINVAL
        );
        // SAFETY: bad access bits are refused.
        assert_eq!(
            unsafe { a.reg_mr(v.as_mut_ptr(), 16, 8) }.unwrap_err().0,
            libc::EINVAL
        );
        assert_eq!(a.dereg_mr(STag(0x1234_5600)).unwrap_err().0, libc::EINVAL);
        let many: Vec<libc::iovec> = (0..17).map(|_| iov(&v)).collect();
        // SAFETY: refused (too many SGEs) before anything is posted.
        assert_eq!(
            unsafe { a.post_send(1, &many, SIGNALED) }.unwrap_err().0,
            libc::EINVAL
        );
        // SAFETY: refused (bad flags).
        assert_eq!(
            unsafe { a.post_write(1, &[iov(&v)], STag(1), 0, 0x80) }
                .unwrap_err()
                .0,
            libc::EINVAL
        );
    });
}

/// Sends `sizes` as separate writes from a thread while `b` reads with `readv`s, the `k`th
/// into pieces of `reads[k % reads.len()]` bytes; checks every byte and returns the
/// reader's counters.
fn stream_sizes(
    a: &DdpSocket,
    b: &DdpSocket,
    sizes: Vec<usize>,
    reads: &[&[usize]],
    seed: u64,
) -> ddp_user::Counters {
    let total: usize = sizes.iter().sum();
    let data = pattern(total, seed);
    let d2 = data.clone();
    let a2 = a.clone();
    let t = std::thread::spawn(move || {
        let mut at = 0;
        for n in sizes {
            send_all(&a2, &d2[at..at + n]);
            at += n;
        }
    });
    let mut got = vec![0u8; total];
    let mut at = 0;
    for round in 0.. {
        if at == total {
            break;
        }
        let mut bufs = Vec::new();
        let mut rest = &mut got[at..];
        for &r in reads[round % reads.len()] {
            let (piece, after) = rest.split_at_mut(r.min(rest.len()));
            bufs.push(std::io::IoSliceMut::new(piece));
            rest = after;
        }
        let n = b.recv(&mut bufs, 0).expect("recv");
        assert!(n > 0, "unexpected EOF after {at} of {total} bytes");
        at += n;
    }
    t.join().unwrap();
    assert!(got == data, "stream content differs");
    b.counters().expect("counters")
}

/// Equal 64 KiB writes read in 1 MiB buffers: reads place several FPDUs each, every byte
/// in order.
#[test]
fn stream_chained_reads() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        let c = stream_sizes(&a, &b, vec![65536; 384], &[&[1 << 20]], 5);
        eprintln!("{c:?}");
        assert!(c.rx_chained > 0, "no read placed several FPDUs: {c:?}");
        // readv into pieces that cut FPDUs: a payload is chained only into one piece
        let c = stream_sizes(
            &a,
            &b,
            vec![65536; 384],
            &[&[100_000, 300_001, 7, 700_000]],
            7,
        );
        eprintln!("{c:?}");
    });
}

/// Runs of equal writes whose size changes now and then: the reads that guessed the next
/// FPDUs from the last message find a different one, copy what came after it back out,
/// and every byte still arrives in order.
#[test]
fn stream_chained_reads_wrong_guesses() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        let mut sizes = Vec::new();
        let mut rng = Rng::new(9);
        while sizes.len() < 1500 {
            let size = [65536, 100_000, 1 << 20, 65536 * 3, 200_000][rng.below(5) as usize];
            for _ in 0..1 + rng.below(12) {
                sizes.push(size);
            }
            sizes.push(1 + rng.below(3000) as usize);
        }
        let c = stream_sizes(&a, &b, sizes, &[&[1 << 20]], 6);
        eprintln!("{c:?}");
        assert!(c.rx_chained > 0 && c.rx_chain_misses > 0, "{c:?}");
    });
}

/// A nonblocking stream writer whose peer sends nothing reads no input as it writes: its
/// TCP fd's input interest is armed with the progress thread, which would be told of any
/// input, so a write does not also try a read (one `recvfrom` saying `EAGAIN` per write
/// before), nor does the progress thread when it is told of output room or takes a spilled
/// write from the socketpair. Every byte arrives, in order.
#[test]
fn a_writer_that_receives_nothing_does_not_read_per_write() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        const CHUNK: usize = 64 << 10;
        const TOTAL: usize = 32 << 20;
        let data = pattern(TOTAL, 93);
        let reader = std::thread::spawn(move || recv_exact(&b, TOTAL));
        let before = a.counters().expect("counters").rx_reads;
        let (mut at, mut writes) = (0usize, 0u64);
        while at < TOTAL {
            let end = (at + CHUNK).min(TOTAL);
            match a.send(&[std::io::IoSlice::new(&data[at..end])], libc::MSG_DONTWAIT) {
                Ok(n) => {
                    at += n;
                    writes += 1;
                }
                Err(e) if e.0 == libc::EAGAIN => {
                    assert!(
                        poll_out(a.app_fd(), 10_000 * time_scale() as i32),
                        "no POLLOUT within 10 s at {at} bytes"
                    );
                }
                Err(e) => panic!("send: {e:?}"),
            }
        }
        let reads = a.counters().expect("counters").rx_reads - before;
        let got = reader.join().unwrap();
        assert!(got[..] == data[..], "stream content differs");
        eprintln!("{writes} writes, {reads} input reads");
        assert!(writes >= 64, "{writes} writes");
        // (before: one per write at least; then a read per report of output room to the
        // progress thread and per spilled write it took from the socketpair, 20 to 290 of
        // 512 depending on the machine's pace; none now but those of a write that finds
        // the interest used up by such a report that came while it was inside)
        assert!(
            reads * 8 <= writes,
            "{reads} input reads for {writes} writes of a writer that receives nothing"
        );
    });
}

/// A request-response loop of blocking `recv`s (sockperf's ping-pong) takes each small message
/// in one step (`ConnState::small_round`, as a `poll`'s round does), not through the general
/// round; messages of several sizes, some larger than the reader's buffer (the rest follows in
/// the next `recv`), every byte checked on both sides.
#[test]
fn blocking_receives_take_small_messages_in_one_step() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        const ROUNDS: u64 = 1000;
        let len = |r: u64| 1 + (r as usize * 37) % 300;
        let echo = std::thread::spawn(move || {
            for r in 0..ROUNDS {
                let got = recv_exact(&b, len(r));
                assert!(got == pattern(len(r), r), "request {r} differs");
                send_all(&b, &pattern(len(r), r + ROUNDS));
            }
            b.counters().expect("counters").rx_small_rounds
        });
        let before = a.counters().expect("counters").rx_small_rounds;
        for r in 0..ROUNDS {
            send_all(&a, &pattern(len(r), r));
            // (a buffer of 100 bytes: longer answers come in two or more receives)
            let want = pattern(len(r), r + ROUNDS);
            let mut got = Vec::new();
            while got.len() < want.len() {
                let mut buf = [0u8; 100];
                let n = a
                    .recv(&mut [std::io::IoSliceMut::new(&mut buf)], 0)
                    .expect("recv");
                assert!(n > 0, "EOF at {} of answer {r}", got.len());
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got == want, "answer {r} differs");
        }
        let client = a.counters().expect("counters").rx_small_rounds - before;
        let server = echo.join().unwrap();
        eprintln!("one-step rounds: client {client}, server {server} for {ROUNDS} messages");
        // (the general round for all of them before)
        assert!(client * 2 >= ROUNDS, "client: {client} one-step rounds");
        assert!(server * 2 >= ROUNDS, "server: {server} one-step rounds");
    });
}

/// One socket's waits alternate between the socketpair and the completion eventfd (a
/// blocking stream `recv`, then `wait_cq` for an RDMA Read's completion, and back): the
/// socket's wait set (`driver::waitset`) swaps its registrations each time, and every wait
/// still ends with its data. 20 rounds each way, content checked.
#[test]
fn waits_alternate_between_stream_and_completions() {
    let (a, b) = pair(&Options::default(), &Options::default());
    for round in 0..20u64 {
        let len = 1 + (round as usize * 997) % 5000;
        stream(&a, &b, len, round);
        read(&b, &a, len, round + 100);
        stream(&b, &a, len, round + 200);
        read(&a, &b, len, round + 300);
    }
}
