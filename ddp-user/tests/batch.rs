//! Posts with `MORE` (sockopt_ext.h `DDP_MORE`): many small Sends framed into few `sendmsg`s,
//! in order, with their content; a batch left open goes out at the next `poll_cq`; small
//! messages that arrive back to back (copied out of large buffered reads) and a large one
//! after them (placed directly) land intact.

mod common;

use common::*;
use ddp_user::engine::cq::{Wc, opcode, status};
use ddp_user::engine::options::Options;
use ddp_user::{DdpSocket, MORE, SIGNALED};

/// Takes `n` completions of `s` (bounded), in order.
fn take(s: &DdpSocket, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    while got.len() < n {
        got.push(wait_one(s));
    }
    got
}

fn batch(o: &Options, count: usize, size: usize) {
    let (a, b) = pair(o, o);
    let mut sinks: Vec<Vec<u8>> = (0..count).map(|_| vec![0u8; size]).collect();
    for (i, s) in sinks.iter().enumerate() {
        // SAFETY: `sinks` lives until every receive completed (taken below).
        unsafe { b.post_recv(i as u64, &[iov(s)]).unwrap() };
    }
    let data: Vec<Vec<u8>> = (0..count).map(|i| pattern(size, i as u64 + 7)).collect();
    for (i, d) in data.iter().enumerate() {
        let last = i == count - 1;
        let flags = if last { SIGNALED } else { MORE };
        // SAFETY: `data` lives until the signaled last Send completed (taken below).
        unsafe { a.post_send(1000 + i as u64, &[iov(d)], flags).unwrap() };
    }
    let wa = wait_one(&a);
    assert_eq!(
        (wa.wr_id, wa.status, wa.opcode),
        (1000 + count as u64 - 1, status::SUCCESS, opcode::SEND)
    );
    for (i, wc) in take(&b, count).iter().enumerate() {
        assert_eq!((wc.wr_id, wc.status), (i as u64, status::SUCCESS));
        assert_eq!(wc.byte_len as usize, size);
    }
    for (i, (s, d)) in sinks.iter_mut().zip(&data).enumerate() {
        assert!(s == d, "message {i} ({size} bytes) differs");
    }
    // A batch left open (every post with MORE) goes out at the next poll_cq.
    let big = pattern(200_000, 99);
    let mut big_sink = vec![0u8; big.len()];
    // SAFETY: lives until the completion below.
    unsafe { b.post_recv(77, &[iov(&big_sink)]).unwrap() };
    // SAFETY: lives until the completion below.
    unsafe { a.post_send(78, &[iov(&big)], SIGNALED | MORE).unwrap() };
    let mut first = [Wc::default(); 1];
    let wa = if a.poll_cq(&mut first).unwrap() == 1 {
        first[0]
    } else {
        wait_one(&a)
    };
    assert_eq!((wa.wr_id, wa.status), (78, status::SUCCESS));
    let wb = wait_one(&b);
    assert_eq!((wb.wr_id, wb.status), (77, status::SUCCESS));
    big_sink.truncate(big.len());
    assert!(big_sink == big, "large message after small ones differs");
}

#[test]
fn more_batches_small_sends() {
    bounded(60, || batch(&Options::default(), 1000, 64));
}

#[test]
fn more_batches_odd_sizes_markers_no_crc() {
    bounded(60, || {
        let (o, _) = variant("nocrc_markers");
        batch(&o, 300, 61);
    });
}

#[test]
fn more_batches_medium_sends() {
    bounded(60, || batch(&Options::default(), 200, 3000));
}

/// A 64 KiB RDMA Write posted with `MORE` stays queued on its own (a request as large as a
/// batch's bound, when the batch was empty before it) and leaves with the Send posted after
/// it; before session 48 it went out alone and woke the peer twice (xs-rdmalat: a 64 KiB
/// Write + Send round trip 47.9-50.7 us against 37.7-43.0 with this and the small-behind
/// rule of ddp-proto).
#[test]
fn a_large_write_posted_with_more_waits_for_the_send() {
    const REMOTE_WRITE: u32 = 2;
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        let mut region = vec![0u8; 64 * 1024];
        // SAFETY: deregistered before `region` is read at the end and dropped.
        let stag = unsafe { b.reg_mr(region.as_mut_ptr(), region.len(), REMOTE_WRITE) }.unwrap();
        let note = pattern(8, 5);
        let mut sink = vec![0u8; 8];
        // SAFETY: lives until the completion below.
        unsafe { b.post_recv(1, &[iov(&sink)]).unwrap() };
        let data = pattern(64 * 1024, 3);
        let before = a.info().unwrap().fpdus_tx;
        // SAFETY: `data` lives until the signaled Send after it completed (RDMAP order).
        unsafe {
            a.post_write(7, &[iov(&data)], stag, region.as_ptr() as u64, MORE)
                .unwrap()
        };
        assert_eq!(
            a.info().unwrap().fpdus_tx,
            before,
            "the Write went out before the Send was posted"
        );
        // SAFETY: lives until the completion below.
        unsafe { a.post_send(8, &[iov(&note)], SIGNALED).unwrap() };
        assert!(
            a.info().unwrap().fpdus_tx > before + 1,
            "both framed at the Send"
        );
        let wa = wait_one(&a);
        assert_eq!(
            (wa.wr_id, wa.status, wa.opcode),
            (8, status::SUCCESS, opcode::SEND)
        );
        let wb = wait_one(&b);
        assert_eq!((wb.wr_id, wb.status), (1, status::SUCCESS));
        b.dereg_mr(stag).unwrap();
        sink.truncate(8);
        assert!(
            sink == note && region == data,
            "the Write or the Send differs"
        );
    });
}
