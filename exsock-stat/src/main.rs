//! `exsock-stat` — the DDP sockets of running processes, read from outside (like vma_stats).
//!
//! ```text
//! exsock-stat              every running process with a stats segment: pid, program, sockets
//! exsock-stat PID...       each DDP socket of those processes, with its counters
//! exsock-stat -a           each DDP socket of every running process
//! exsock-stat --clean      remove the segments of processes that have exited
//! ```
//!
//! Before reading a live process's segment it asks the process for fresh counters (futex in
//! the segment) and waits at most 500 ms for the answer; a process that does not answer
//! (stopped, or busy) shows its last refresh, and the age of the numbers is printed.
//! Exit status: 0, or 1 if a PID given has no segment.

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use exsock_stat::{MAGIC, SEGMENT_SIZE, Segment, SlotData, VERSION, state_name};

/// A mapped segment.
struct Mapped {
    seg: &'static Segment,
    pid: u32,
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `open`; `seg` is not used afterwards.
        unsafe { libc::munmap((self.seg as *const Segment).cast_mut().cast(), SEGMENT_SIZE) };
    }
}

fn open(pid: u32) -> Result<Mapped, String> {
    let path = exsock_stat::segment_path(pid);
    let f = File::options()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{path}: {e}"))?;
    let len = f.metadata().map_err(|e| format!("{path}: {e}"))?.len();
    if len < SEGMENT_SIZE as u64 {
        return Err(format!("{path}: too short ({len} bytes)"));
    }
    // SAFETY: a shared mapping of a file we opened read-write, of at least SEGMENT_SIZE bytes.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            SEGMENT_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("{path}: mmap: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: SEGMENT_SIZE bytes, page-aligned; Segment is all atomics (any bits are valid).
    let seg: &'static Segment = unsafe { &*p.cast::<Segment>() };
    let m = Mapped { seg, pid };
    let h = &seg.header;
    if h.magic.load(Ordering::Acquire) != MAGIC || h.version.load(Ordering::Relaxed) != VERSION {
        return Err(format!(
            "{path}: not an exsock stats segment of version {VERSION}"
        ));
    }
    Ok(m)
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Asks the process for a refresh and waits for it (at most 500 ms). Returns whether it
/// answered.
fn refresh(m: &Mapped) -> bool {
    let h = &m.seg.header;
    let want = h.refresh_req.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
    exsock_stat::futex_wake(&h.refresh_req);
    let deadline = Instant::now() + Duration::from_millis(500);
    loop {
        let done = h.refresh_done.load(Ordering::Acquire);
        if done.wrapping_sub(want) as i32 >= 0 {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        exsock_stat::futex_wait(
            &h.refresh_done,
            done,
            Some((deadline - now).as_millis() as u64 + 1),
        );
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The segments in /dev/shm, by pid.
fn segments() -> Vec<u32> {
    let mut v: Vec<u32> = fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("exsock-"))
                        .and_then(|p| p.parse().ok())
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

fn sockets(m: &Mapped) -> Vec<SlotData> {
    m.seg
        .slots
        .iter()
        .filter_map(|s| s.read())
        .filter(|d| d.state != 0)
        .collect()
}

fn addr(a: Option<std::net::SocketAddr>) -> String {
    a.map_or_else(|| "-".into(), |a| a.to_string())
}

fn on(v: u8) -> &'static str {
    if v != 0 { "on" } else { "off" }
}

fn show_process(pid: u32) -> Result<(), String> {
    let m = open(pid)?;
    let live = alive(pid);
    let answered = live && refresh(&m);
    let h = &m.seg.header;
    let socks = sockets(&m);
    let age = now_ms().saturating_sub(h.updated_ms.load(Ordering::Relaxed));
    println!(
        "pid {} ({}): {} DDP socket{}{}{}",
        m.pid,
        h.program(),
        socks.len(),
        if socks.len() == 1 { "" } else { "s" },
        match (live, answered) {
            (false, _) => " [process exited: last values]".to_string(),
            (true, false) => format!(" [no answer: values {:.1} s old]", age as f64 / 1000.0),
            (true, true) => String::new(),
        },
        match h.overflow.load(Ordering::Relaxed) {
            0 => String::new(),
            n => format!(" (+{n} not shown: no free slot)"),
        }
    );
    for d in socks {
        println!(
            "  fd {:<4} {:<10} {} -> {}  {}{}",
            d.fd,
            state_name(d.state),
            addr(d.local),
            addr(d.peer),
            if d.initiator != 0 {
                "initiator"
            } else {
                "responder"
            },
            if d.dual != 0 {
                " (dual-mode listener)"
            } else {
                ""
            }
        );
        println!(
            "    MPA rev {}, CRC {}, markers tx {} rx {}, IRD {} ORD {}, MULPDU {}, PD {:#x}{}",
            d.mpa_rev,
            on(d.crc),
            on(d.markers_tx),
            on(d.markers_rx),
            d.ird,
            d.ord,
            d.mulpdu,
            d.pd,
            if d.p2p != 0 {
                format!(", p2p rtr {:#x}", d.rtr)
            } else {
                String::new()
            }
        );
        println!(
            "    tx {} bytes in {} FPDUs, rx {} bytes in {} FPDUs, placed direct {} bytes",
            d.bytes_tx, d.fpdus_tx, d.bytes_rx, d.fpdus_rx, d.placed_direct
        );
        let term = if d.last_term != 0 {
            format!(
                " (last {} layer {} etype {:#x} ecode {:#x})",
                if d.last_term >> 24 == 1 {
                    "sent"
                } else {
                    "received"
                },
                (d.last_term >> 16) & 0xff,
                (d.last_term >> 8) & 0xff,
                d.last_term & 0xff
            )
        } else {
            String::new()
        };
        println!(
            "    CRC errors {}, Terminates sent {} received {}{term}",
            d.crc_errors, d.terms_sent, d.terms_received
        );
        let q = &d.queues;
        if q.flags & exsock_stat::Q_VALID != 0 {
            let flags = q.flag_names();
            println!(
                "    bytes in: TCP {} engine {} socketpair {} | out: socketpair {} engine {} TCP {} | threads inside {}{}{}",
                q.tcp_in,
                q.backlog,
                q.pair_in,
                q.pair_out,
                q.unsent,
                q.tcp_out,
                q.inside,
                if flags.is_empty() { "" } else { " | " },
                flags.join(" ")
            );
        }
    }
    Ok(())
}

fn list() {
    let pids = segments();
    if pids.is_empty() {
        println!("no process with DDP sockets (no /dev/shm/exsock-* segment)");
        return;
    }
    let (live, gone): (Vec<u32>, Vec<u32>) = pids.into_iter().partition(|&p| alive(p));
    println!("{:>8}  {:<20} {:>7}  STATUS", "PID", "PROGRAM", "SOCKETS");
    for pid in live {
        match open(pid) {
            Ok(m) => {
                let answered = refresh(&m);
                println!(
                    "{:>8}  {:<20} {:>7}  {}",
                    pid,
                    m.seg.header.program(),
                    sockets(&m).len(),
                    if answered {
                        "running"
                    } else {
                        "running (no answer)"
                    }
                );
            }
            Err(e) => println!("{pid:>8}  ? ({e})"),
        }
    }
    if !gone.is_empty() {
        println!(
            "({} segment{} of exited processes, killed before their exit handler ran: \
             `exsock-stat --clean` removes them)",
            gone.len(),
            if gone.len() == 1 { "" } else { "s" }
        );
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: exsock-stat [-a | --clean | PID...]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None => {
            list();
            ExitCode::SUCCESS
        }
        Some("-h" | "--help") => usage(),
        Some("--clean") => {
            for pid in segments() {
                if !alive(pid) {
                    let p = exsock_stat::segment_path(pid);
                    match fs::remove_file(&p) {
                        Ok(()) => println!("removed {p}"),
                        Err(e) => eprintln!("{p}: {e}"),
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Some("-a") => {
            for pid in segments().into_iter().filter(|&p| alive(p)) {
                if let Err(e) = show_process(pid) {
                    eprintln!("exsock-stat: {e}");
                }
            }
            ExitCode::SUCCESS
        }
        Some(_) => {
            let mut rc = ExitCode::SUCCESS;
            for a in &args {
                let Ok(pid) = a.parse::<u32>() else {
                    return usage();
                };
                if let Err(e) = show_process(pid) {
                    eprintln!("exsock-stat: pid {pid}: {e}");
                    rc = ExitCode::FAILURE;
                }
            }
            rc
        }
    }
}
