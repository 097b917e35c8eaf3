//! Loopback measurements (release mode, ignored by default):
//! `cargo test --release -p ddp-user --test perf -- --ignored --nocapture`.
//! Each number is printed next to plain TCP on the same machine.

mod common;

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use common::*;
use ddp_user::{Options, SIGNALED};

const ROUNDS: usize = 20_000;
const BULK: usize = 256 << 20;

fn tcp_pair_nodelay() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    c.set_nodelay(true).unwrap();
    s.set_nodelay(true).unwrap();
    (c, s)
}

#[test]
#[ignore = "a measurement, not a test: cargo test --release -p ddp-user --test perf -- --ignored --nocapture"]
fn perf_loopback() {
    bounded(300, || {
        // --- ping-pong RTT, 1 byte ---
        let (mut c, mut s) = tcp_pair_nodelay();
        let t = std::thread::spawn(move || {
            let mut b = [0u8; 1];
            for _ in 0..ROUNDS {
                s.read_exact(&mut b).unwrap();
                s.write_all(&b).unwrap();
            }
        });
        let mut b = [0u8; 1];
        let t0 = Instant::now();
        for _ in 0..ROUNDS {
            c.write_all(&b).unwrap();
            c.read_exact(&mut b).unwrap();
        }
        let tcp_rtt = t0.elapsed().as_secs_f64() / ROUNDS as f64 * 1e6;
        t.join().unwrap();

        for (name, crc) in [("crc", true), ("nocrc", false)] {
            let o = Options {
                crc,
                ..Options::default()
            };
            let (a, bsock) = pair(&o, &o);
            let b2 = bsock.clone();
            let t = std::thread::spawn(move || {
                let mut x = [0u8; 1];
                for _ in 0..ROUNDS {
                    let n = b2.recv(&mut [IoSliceMut::new(&mut x)], 0).unwrap();
                    assert_eq!(n, 1);
                    b2.send(&[IoSlice::new(&x)], 0).unwrap();
                }
            });
            let mut x = [0u8; 1];
            let t0 = Instant::now();
            for _ in 0..ROUNDS {
                a.send(&[IoSlice::new(&x)], 0).unwrap();
                assert_eq!(a.recv(&mut [IoSliceMut::new(&mut x)], 0).unwrap(), 1);
            }
            let rtt = t0.elapsed().as_secs_f64() / ROUNDS as f64 * 1e6;
            t.join().unwrap();
            println!(
                "ping-pong 1 B stream ({name}): {rtt:.1} us RTT; plain TCP {tcp_rtt:.1} us ({:.2}x)",
                rtt / tcp_rtt
            );

            // posted Send/Recv ping-pong
            let b2 = bsock.clone();
            let rb = Box::leak(Box::new([[0u8; 8]; 2]));
            // Posted before the first Send can arrive.
            // SAFETY: the receive buffers are leaked: valid forever.
            unsafe { b2.post_recv(0, &[iov(&rb[0])]).unwrap() };
            let t = std::thread::spawn(move || {
                for i in 0..ROUNDS as u64 {
                    wait_one(&b2);
                    // Re-post before replying: the next Send must find a receive.
                    // SAFETY: as above; the send source is constant.
                    unsafe {
                        b2.post_recv(i + 1, &[iov(&rb[(i as usize + 1) % 2])])
                            .unwrap();
                        b2.post_send(i, &[iov(&[7u8; 8])], 0).unwrap();
                    }
                }
            });
            let rb = [0u8; 8];
            let t0 = Instant::now();
            for i in 0..ROUNDS as u64 {
                // SAFETY: `rb` lives until the completion is taken.
                unsafe { a.post_recv(i, &[iov(&rb)]).unwrap() };
                // SAFETY: as above (unsignaled: the receive completion follows it).
                unsafe { a.post_send(i, &[iov(&rb)], 0).unwrap() };
                wait_one(&a);
            }
            let rtt = t0.elapsed().as_secs_f64() / ROUNDS as f64 * 1e6;
            t.join().unwrap();
            println!("ping-pong 8 B posted Send/Recv ({name}): {rtt:.1} us RTT");
        }

        // --- stream bandwidth ---
        let (mut c, mut s) = tcp_pair_nodelay();
        let t = std::thread::spawn(move || {
            let mut b = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < BULK {
                got += s.read(&mut b).unwrap();
            }
        });
        let chunk = vec![1u8; 1 << 20];
        let t0 = Instant::now();
        for _ in 0..BULK / chunk.len() {
            c.write_all(&chunk).unwrap();
        }
        t.join().unwrap();
        let tcp_bw = BULK as f64 / t0.elapsed().as_secs_f64() / 1e9;
        for (name, crc) in [("crc", true), ("nocrc", false)] {
            let o = Options {
                crc,
                ..Options::default()
            };
            let (a, bsock) = pair(&o, &o);
            let t = std::thread::spawn(move || {
                let mut b = vec![0u8; 1 << 20];
                let mut got = 0;
                while got < BULK {
                    got += bsock.recv(&mut [IoSliceMut::new(&mut b)], 0).unwrap();
                }
            });
            let t0 = Instant::now();
            for _ in 0..BULK / chunk.len() {
                send_all(&a, &chunk);
            }
            t.join().unwrap();
            let bw = BULK as f64 / t0.elapsed().as_secs_f64() / 1e9;
            println!("stream bandwidth ({name}): {bw:.2} GB/s; plain TCP {tcp_bw:.2} GB/s");

            // RDMA Write bandwidth, 1 MiB Writes, window of 8
            let (a, b) = pair(&o, &o);
            let mut region = vec![0u8; 1 << 20];
            // SAFETY: registered for the test, deregistered at the end.
            let stag = unsafe { b.reg_mr(region.as_mut_ptr(), region.len(), 2) }.unwrap();
            let base = region.as_ptr() as u64;
            let t0 = Instant::now();
            let n = BULK / chunk.len();
            for i in 0..n {
                // SAFETY: `chunk` outlives all completions (waited below).
                unsafe {
                    a.post_write(i as u64, &[iov(&chunk)], stag, base, SIGNALED)
                        .unwrap()
                };
                if i >= 8 {
                    wait_one(&a);
                }
            }
            for _ in 0..8.min(n) {
                wait_one(&a);
            }
            let bw = BULK as f64 / t0.elapsed().as_secs_f64() / 1e9;
            let pd = b.info().unwrap().placed_direct;
            println!(
                "RDMA Write bandwidth ({name}): {bw:.2} GB/s (placed directly at the target: {:.0}%)",
                pd as f64 / BULK as f64 * 100.0
            );
            b.dereg_mr(stag).unwrap();
        }
    });
}
