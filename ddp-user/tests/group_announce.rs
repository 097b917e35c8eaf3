//! An epoll group's member whose stream data was announced to its reader (the FPDU left in the
//! kernel for the reader's `recv`): the shadow keeps the input armed while the reader comes
//! (no `epoll_ctl` on either side), a report before the reader came disarms it once (never a
//! report on and on), and the reader's `recv` arms it again. In a process of its own: the
//! test holds the group (as an application thread inside `epoll_wait` would), and it reads
//! TCP receive queues.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ddp_user::{DdpSocket, EpollGroup, Options};

const MSG: usize = 64 << 10;

fn inq(fd: i32) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    assert_eq!(r, 0, "FIONREAD");
    n as usize
}

/// The ids the shadow reports now (no wait).
fn ready_now(g: &EpollGroup) -> Vec<u64> {
    let mut ids = [0u64; 64];
    let n = g.ready(&mut ids);
    ids[..n].to_vec()
}

/// Waits (bounded) until `b`'s TCP socket holds at least `bytes`, then for the shadow to
/// report it; returns what the shadow reported.
fn wait_reported(g: &EpollGroup, b: &DdpSocket, bytes: usize) -> Vec<u64> {
    let end = Instant::now() + Duration::from_secs(10 * time_scale());
    while inq(b.tcp_fd()) < bytes {
        assert!(
            Instant::now() < end,
            "{bytes} bytes never arrived ({} did)",
            inq(b.tcp_fd())
        );
        // polling interval of a bounded wait: a socket already readable raises no event
        // when more arrives (and SO_RCVLOWAT would change its window)
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut p = libc::pollfd {
        fd: g.fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack.
    let r = unsafe { libc::poll(&mut p, 1, (5000 * time_scale()) as i32) };
    assert_eq!(r, 1, "the shadow reports the member");
    ready_now(g)
}

/// A connected pair whose receiving side `b` is in a new epoll group.
fn grouped_pair() -> (DdpSocket, DdpSocket, EpollGroup) {
    let o = Options::default();
    let (a, b) = pair(&o, &o);
    let g = EpollGroup::new().expect("an epoll group");
    g.add(&b);
    (a, b, g)
}

/// Serves `b`'s reported input and checks it was announced to the reader with only the next
/// header read: the payload waits in the kernel for the reader's `recv`.
fn announced_with_the_payload_left(g: &EpollGroup, b: &DdpSocket, what: &str) {
    let before = inq(b.tcp_fd());
    assert!(g.service(b.id(), true), "{what}: announced to the reader");
    assert!(
        inq(b.tcp_fd()) + 64 >= before && inq(b.tcp_fd()) > MSG / 2,
        "{what}: the payload was read into the engine ({before} -> {})",
        inq(b.tcp_fd())
    );
}

#[test]
fn announced_input_stays_armed_until_reported_again() {
    bounded(60, || {
        let (a, b, g) = grouped_pair();
        // An application thread waits on the group: the progress thread leaves it alone.
        let _visit = g.enter();
        // Two large messages read first: a large stream from then on.
        for seed in 0..2 {
            let body = pattern(MSG, seed);
            send_all(&a, &body);
            assert!(recv_exact(&b, MSG) == body, "message {seed} differs");
        }
        // Each message is at least two FPDUs (ULPDU_LENGTH, DDP/RDMAP header, CRC: 24
        // octets each): all of the first is in the kernel before the shadow is asked.
        let wire = MSG + 2 * 24;
        for seed in 2..6 {
            let body = pattern(MSG, seed);
            send_all(&a, &body);
            let ids = wait_reported(&g, &b, wire);
            assert!(ids.contains(&b.id()), "message {seed}: reported {ids:?}");
            announced_with_the_payload_left(&g, &b, &format!("message {seed}"));
            // Still armed (level-triggered): reported again while the reader has not come.
            assert!(
                ready_now(&g).contains(&b.id()),
                "message {seed}: the announcement disarmed the input"
            );
            // That report finds the input announced: disarmed, and reported no more.
            assert!(
                !g.service(b.id(), true),
                "message {seed}: announced once only"
            );
            assert!(
                !ready_now(&g).contains(&b.id()),
                "message {seed}: reported on and on while the reader stays away"
            );
            assert!(
                b.poll_held(),
                "message {seed}: still readable for its reader"
            );
            assert!(recv_exact(&b, MSG) == body, "message {seed} differs");
        }
        // The reader re-armed the input: the next message is reported as usual.
        let body = pattern(MSG, 9);
        send_all(&a, &body);
        let ids = wait_reported(&g, &b, wire);
        assert!(ids.contains(&b.id()), "after the reader: reported {ids:?}");
        assert!(g.service(b.id(), true), "after the reader: announced");
        assert!(recv_exact(&b, MSG) == body, "the last message differs");
    });
}

/// A new connection's stream starts in the large-FPDU mode: after a short exchange (a small
/// message, as a handshake brings), its first large message is announced to the reader with
/// only its header read and placed straight into the reader's buffer by its `recv`. Started
/// small, the group's service read it into a buffer of the engine (1,000 connections
/// starting at once held 64 MB so, and their peers saw zero windows: docs/performance.md,
/// "Session 47").
#[test]
fn a_new_stream_s_first_large_message_is_left_for_its_reader() {
    bounded(60, || {
        let (a, b, g) = grouped_pair();
        let _visit = g.enter();
        let hello = pattern(32, 77);
        send_all(&a, &hello);
        assert!(
            recv_exact(&b, hello.len()) == hello,
            "the small message differs"
        );
        let body = pattern(MSG, 78);
        send_all(&a, &body);
        let ids = wait_reported(&g, &b, MSG + 2 * 24);
        assert!(ids.contains(&b.id()), "reported {ids:?}");
        announced_with_the_payload_left(&g, &b, "the first large message");
        assert!(recv_exact(&b, MSG) == body, "the large message differs");
        let placed = b.info().unwrap().placed_direct as usize;
        assert!(
            placed >= MSG / 2,
            "{placed} octets placed straight into the reader's buffer"
        );
    });
}
