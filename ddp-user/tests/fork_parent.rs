//! The back-pressure token and `fork`: in a process of its own, because
//! `after_fork_in_parent` changes what every older socket of the process does.

mod common;

use std::io::IoSlice;

use common::*;
use ddp_user::Options;

/// After a `fork` in the parent (`after_fork_in_parent`), a child may write on the app fds
/// of the sockets that existed: those no longer use the socketpair for back-pressure (the
/// engine queues as before), while a socket made afterwards does.
#[test]
fn no_back_pressure_token_on_sockets_older_than_a_fork() {
    bounded(60, || {
        let o = Options::default();
        let (a, b) = pair_bufs(&o, &o, Some(64 << 10));
        ddp_user::after_fork_in_parent();
        let (c, d) = pair_bufs(&o, &o, Some(64 << 10));
        let data = pattern(16 << 20, 0xf0c);
        let mut queued = [0usize; 2];
        for (k, (w, r)) in [(&b, &a), (&d, &c)].into_iter().enumerate() {
            let mut sent = 0usize;
            for _ in 0..1000 {
                match w.send(
                    &[IoSlice::new(&data[sent..sent + (64 << 10)])],
                    libc::MSG_DONTWAIT,
                ) {
                    Ok(n) => sent += n,
                    Err(e) => {
                        assert_eq!(e.0, libc::EAGAIN);
                        if !poll_out(w.app_fd(), 200) {
                            break;
                        }
                    }
                }
            }
            queued[k] = w.out_queue(false).unwrap();
            let got = {
                let r = r.clone();
                std::thread::spawn(move || recv_exact(&r, sent))
            };
            assert!(got.join().unwrap() == data[..sent], "stream content");
        }
        assert!(
            queued[0] > 2 << 20,
            "older socket: the engine queued ({queued:?})"
        );
        assert!(queued[1] < 1 << 20, "newer socket: held back ({queued:?})");
    });
}
