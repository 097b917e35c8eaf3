//! An epoll group's member that nobody reads while its peer keeps sending: once its backlog is
//! full the progress thread must leave it alone, not spin on the shadow's level-triggered
//! report. In a process of its own: it measures the progress thread's CPU time.

mod common;

use std::io::IoSlice;
use std::time::{Duration, Instant};

use common::*;
use ddp_user::{DdpSocket, EpollGroup, Options};

/// utime + stime of this process's progress thread, in clock ticks.
fn progress_ticks() -> u64 {
    for e in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let p = e.expect("task entry").path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if comm.trim() != "exsock-progress" {
            continue;
        }
        let stat = std::fs::read_to_string(p.join("stat")).expect("task stat");
        // (fields after the command's closing parenthesis: state is field 3, utime 14, stime 15)
        let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        return f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime");
    }
    panic!("no exsock-progress thread in this process");
}

fn inq(fd: i32) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    assert_eq!(r, 0, "FIONREAD");
    n as usize
}

/// Windows of the progress thread's CPU time: one of them must be idle (work still under way
/// may fill the first). Panics with every window's share of CPU if none is.
fn assert_progress_thread_idles(what: &str) {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let window = Duration::from_millis(200 * time_scale());
    let mut busy = Vec::new();
    let idle = (0..10).any(|_| {
        let (t0, s) = (progress_ticks(), Instant::now());
        std::thread::sleep(window); // (the measured window: nothing to do meanwhile)
        let share = (progress_ticks() - t0) as f64 / hz / s.elapsed().as_secs_f64();
        busy.push(share);
        share < 0.2
    });
    assert!(
        idle,
        "{what}: the progress thread stayed busy while nobody read (share of each window: {busy:?})"
    );
}

/// A connected pair whose responder is in a new epoll group that an application thread waited
/// on and left: after `GROUP_LAZY` its input is the progress thread's (level-triggered in the
/// shadow).
fn pair_in_group() -> (DdpSocket, DdpSocket, EpollGroup) {
    let o = Options::default();
    // (small TCP buffers: the data below is well over everything that can hold it)
    let (a, b) = pair_bufs(&o, &o, Some(256 << 10));
    let g = EpollGroup::new().expect("an epoll group");
    g.add(&b);
    drop(g.enter());
    (a, b, g)
}

// (one test: they would share the progress thread, and its CPU time, if run side by side)
#[test]
fn the_progress_thread_idles_on_group_members_nobody_reads() {
    bounded(120, || {
        full_backlog();
        peer_closed();
    });
}

/// The peer keeps sending: the backlog and socketpair fill up, then input waits in the kernel.
fn full_backlog() {
    let (a, b, g) = pair_in_group();
    const LEN: usize = 16 << 20;
    let data = pattern(LEN, 0x1d1e);
    let sent = data.clone();
    let writer = std::thread::spawn(move || {
        let n = a.send(&[IoSlice::new(&sent)], 0).expect("send");
        (a, n)
    });
    let tcp = b.tcp_fd();
    let filled = (0..2000 * time_scale()).any(|_| {
        if inq(tcp) >= 128 << 10 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5)); // (polling interval, bounded)
        false
    });
    assert!(filled, "input never waited in b's TCP socket");
    assert_progress_thread_idles("full backlog");
    // Every byte arrives, in order, once the reader comes.
    let got = recv_exact(&b, LEN);
    assert!(got == data, "stream content differs");
    let (_a, n) = writer.join().unwrap();
    assert_eq!(n, LEN);
    drop(g);
}

/// The peer sends a little and closes: the end of the stream is read, and the hang-up is
/// not reported on and on.
fn peer_closed() {
    let (a, b, g) = pair_in_group();
    const LEN: usize = 1 << 20;
    let data = pattern(LEN, 0xc105e);
    send_all(&a, &data);
    drop(a);
    assert_progress_thread_idles("peer closed");
    let got = recv_exact(&b, LEN);
    assert!(got == data, "stream content differs");
    let mut one = [0u8; 1];
    let n = b
        .recv(&mut [std::io::IoSliceMut::new(&mut one)], 0)
        .expect("recv at the end");
    assert_eq!(n, 0, "EOF after the last byte");
    drop(g);
}
