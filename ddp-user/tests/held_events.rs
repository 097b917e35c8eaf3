//! What `epoll_wait` reports with stream data held for its reader (`DdpSocket::epoll_held`):
//! the events a TCP socket shows when that data arrives, not `EPOLLIN` alone. A wakeup of a
//! TCP socket reports its whole state, also to an edge-triggered registration: `EPOLLOUT`
//! with the input while it is writable, `EPOLLRDHUP` once the peer's FIN is in (the round
//! that a report of the FIN brought on reads up to it). The data is held by an epoll group's
//! service, as a thread in `epoll_wait` holds it; in a process of its own (it holds a group).

mod common;

use std::time::{Duration, Instant};

use common::*;
use ddp_user::{DdpSocket, EpollGroup, Options};

const IN: u32 = (libc::EPOLLIN | libc::EPOLLRDNORM) as u32;
const OUT: u32 = (libc::EPOLLOUT | libc::EPOLLWRNORM) as u32;
const RDHUP: u32 = libc::EPOLLRDHUP as u32;
const ASKED: u32 = IN | OUT | RDHUP;

/// Waits (bounded) for the group's shadow to report `b`, then serves it as a thread in
/// `epoll_wait` would; true if the data is held for the reader.
fn serve_when_reported(g: &EpollGroup, b: &DdpSocket) -> bool {
    let end = Instant::now() + Duration::from_secs(10 * time_scale());
    loop {
        let mut ready = [(0u64, 0u32); 64];
        let n = g.ready_events(&mut ready);
        if let Some(&(id, events)) = ready[..n].iter().find(|r| r.0 == b.id()) {
            return g.service_report(id, true, events);
        }
        assert!(Instant::now() < end, "the shadow never reported the member");
        let mut p = libc::pollfd {
            fd: g.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack.
        unsafe { libc::poll(&mut p, 1, 100) };
    }
}

#[test]
fn held_data_reports_what_tcp_reports_with_it() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair(&o, &o);
        let g = EpollGroup::new().expect("an epoll group");
        g.add(&b);
        // An application thread waits on the group: the progress thread leaves it alone.
        let _visit = g.enter();
        let mut rx = 0;
        for seed in 0..20 {
            let body = pattern(40 + seed as usize, seed);
            send_all(&a, &body);
            assert!(serve_when_reported(&g, &b), "message {seed}: not held");
            let h = b.epoll_held().expect("held");
            assert_eq!(
                h.events & ASKED,
                IN | OUT,
                "message {seed}: {:#x}",
                h.events
            );
            let again = b.epoll_held().map(|h| h.rx);
            assert_eq!(
                again,
                Some(h.rx),
                "message {seed}: an edge with nothing new"
            );
            assert_ne!(h.rx, rx, "message {seed}: no new edge");
            rx = h.rx;
            assert!(recv_exact(&b, body.len()) == body, "message {seed} differs");
            assert_eq!(b.epoll_held(), None, "message {seed}: read, still held");
        }
        // The last data and the FIN behind it, both in before the shadow is asked:
        // EPOLLRDHUP with the data (the round that takes the data reads on up to the FIN its
        // report shows).
        let body = pattern(100, 99);
        send_all(&a, &body);
        a.shutdown(libc::SHUT_WR).expect("shutdown");
        let mut p = libc::pollfd {
            fd: b.tcp_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack.
        let r = unsafe { libc::poll(&mut p, 1, (5000 * time_scale()) as i32) };
        assert_eq!(r, 1, "the FIN never arrived");
        assert!(serve_when_reported(&g, &b), "the last data: not held");
        let h = b.epoll_held().expect("held");
        assert_eq!(h.events & ASKED, IN | OUT | RDHUP, "{:#x}", h.events);
        assert_ne!(h.rx, rx, "the end: no new edge");
        assert_eq!(b.poll_held_events() as u32 & ASKED, IN | OUT | RDHUP);
        assert!(recv_exact(&b, body.len()) == body, "the last data differs");
        let mut x = [0u8; 1];
        let n = b
            .recv(&mut [std::io::IoSliceMut::new(&mut x)], 0)
            .expect("recv at the end");
        assert_eq!(n, 0, "the end of the stream");
    });
}
