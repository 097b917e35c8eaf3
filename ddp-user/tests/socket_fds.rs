//! The descriptors a DDP socket holds: its TCP socket and the two socketpair ends, and a
//! completion eventfd only once someone needs one (`event_fd`, or a `wait_cq` that blocks).
//! Each eventfd made at setup cost a connection four system calls (make, move, close, and
//! close again at the end) that most sockets never used. In a process of its own: it counts
//! this process's descriptors.

mod common;

use std::time::Duration;

use common::*;
use ddp_user::engine::cq::{opcode, status};
use ddp_user::{Options, SIGNALED, Wc};

/// This process's eventfds and sockets, from /proc/self/fd.
fn kinds() -> (usize, usize) {
    let (mut eventfds, mut sockets) = (0, 0);
    for e in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let Ok(target) = std::fs::read_link(e.expect("fd entry").path()) else {
            continue; // (the directory's own descriptor, closed by now)
        };
        let t = target.to_string_lossy();
        if t == "anon_inode:[eventfd]" {
            eventfds += 1;
        } else if t.starts_with("socket:") {
            sockets += 1;
        }
    }
    (eventfds, sockets)
}

fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of our own.
    unsafe { libc::poll(&mut p, 1, ms) == 1 && p.revents & libc::POLLIN != 0 }
}

#[test]
fn a_socket_makes_its_eventfd_only_when_asked() {
    bounded(60, || {
        let o = Options::default();
        // The first pair starts the engine (its own eventfds); the counting starts after it.
        let first = pair(&o, &o);
        let (ev0, so0) = kinds();
        let (a, b) = pair(&o, &o);
        let (ev1, so1) = kinds();
        assert_eq!(ev1, ev0, "a new connected pair made eventfds");
        // Each side: its TCP socket and the two socketpair ends (the caller's TCP fds were
        // handed over and closed by `pair`).
        assert_eq!(so1 - so0, 6, "sockets held by a new pair");

        // Asked for: one eventfd, the same one every time.
        let fd = b.event_fd().expect("event_fd");
        assert_eq!(b.event_fd().expect("event_fd again"), fd);
        assert_eq!(kinds().0, ev0 + 1, "event_fd made one eventfd");
        assert!(!readable(fd, 0), "readable with no completion");

        // It says when a completion is pending, and stops once it is taken.
        let data = pattern(300, 7);
        let sink = vec![0u8; 300];
        // SAFETY: `sink` and `data` live until their completions are taken below.
        unsafe { b.post_recv(1, &[iov(&sink)]).expect("post_recv") };
        // SAFETY: as above.
        unsafe { a.post_send(2, &[iov(&data)], SIGNALED).expect("post_send") };
        let ms = 10_000 * time_scale() as i32;
        assert!(readable(fd, ms), "no completion signalled within {ms} ms");
        let mut wc = [Wc::default(); 2];
        assert_eq!(b.poll_cq(&mut wc).expect("poll_cq"), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
            (1, status::SUCCESS, opcode::RECV, 300)
        );
        assert!(sink == data, "posted Send content differs");
        assert!(
            !readable(fd, 0),
            "still readable after the completion was taken"
        );

        // A blocking `wait_cq` on a socket without one makes its own, once.
        let w = a
            .wait_cq(&mut wc, Some(Duration::from_secs(10 * time_scale())))
            .expect("wait_cq");
        assert_eq!((w, wc[0].wr_id), (1, 2));
        let t = std::thread::spawn({
            let a = a.clone();
            move || {
                let mut wc = [Wc::default(); 1];
                a.wait_cq(&mut wc, Some(Duration::from_secs(10 * time_scale())))
                    .map(|n| (n, wc[0].wr_id))
            }
        });
        // The waiter has nothing pending and nothing comes until the Send below, so it blocks
        // on an eventfd it makes. No event says so: /proc is looked at every millisecond
        // (a polling interval, bounded by the deadline), and only then is the Send posted.
        let until = std::time::Instant::now() + Duration::from_secs(10 * time_scale());
        while kinds().0 < ev0 + 2 {
            assert!(std::time::Instant::now() < until, "wait_cq made no eventfd");
            std::thread::sleep(Duration::from_millis(1));
        }
        let back = vec![0u8; 10];
        // SAFETY: `back` lives until the waiter has taken its completion (joined below).
        unsafe { a.post_recv(3, &[iov(&back)]).expect("post_recv") };
        let ping = pattern(10, 9);
        // SAFETY: `ping` lives until its completion is taken below.
        unsafe { b.post_send(4, &[iov(&ping)], SIGNALED).expect("post_send") };
        assert_eq!(t.join().expect("waiter").expect("wait_cq"), (1, 3));
        assert!(back == ping, "posted Send content differs");
        assert_eq!(kinds().0, ev0 + 2, "one eventfd per socket that needed one");

        drop((a, b, first));
    });
}
