//! `Connection::abort` (the engine's close linger expired): everything pending is flushed
//! with `Flushed`, including a Read whose response was half received, with no error event
//! and no Terminate. (Before, the engine used `handle_eof`, which reported the Read as
//! `Fatal(StreamLost)`, vendor_err 0x020001, found by scripts/tests/faults-kill.sh.)

#[path = "conn_harness.rs"]
mod harness;

use ddp_proto::conn::{SendFlags, State, WcOpcode, WcStatus};
use ddp_proto::ddp::{Access, Sge};
use harness::*;

fn read_pair(truncate: Option<usize>) -> Pair {
    let mut p = Pair::new(Opts::default());
    let size = 6000u32;
    let src = BASE + 8192;
    let stag =
        p.b.mem
            .register(src, u64::from(size), Access::REMOTE_READ, 1);
    p.a.conn
        .post_recv(1, &[Sge::new(BASE + 32768, 64)])
        .unwrap();
    p.a.conn
        .post_read(4, &[Sge::new(BASE + 16384, size)], stag, src, size, true)
        .unwrap();
    p.a.conn
        .post_send(
            5,
            &[Sge::new(BASE, 16)],
            SendFlags {
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    if let Some(len) = truncate {
        // the Read Response stops in the middle of an FPDU
        p.fault_to_a = Some(Fault::Truncate { len });
        p.b.conn.post_recv(9, &[Sge::new(BASE, 64)]).unwrap();
        p.drive();
    }
    p.a.conn.close();
    p
}

fn check_aborted(mut p: Pair) {
    p.a.conn.abort();
    drain_events(&mut p.a);
    assert_eq!(p.a.conn.state(), State::Closed);
    assert!(p.a.closed());
    assert!(p.a.error_events().is_empty(), "abort is not a stream error");
    let reads: Vec<_> =
        p.a.completions()
            .into_iter()
            .filter(|c| c.opcode == WcOpcode::Read)
            .collect();
    assert_eq!(reads.len(), 1);
    assert_eq!((reads[0].wr_id, reads[0].status), (4, WcStatus::Flushed));
    let recvs = p.a.recv_completions();
    assert_eq!((recvs[0].wr_id, recvs[0].status), (1, WcStatus::Flushed));
    assert!(
        p.a.conn.poll_transmit(&p.a.mem).is_none(),
        "abort sends no Terminate"
    );
    // a second abort, or EOF after it, changes nothing
    p.a.conn.abort();
    p.a.conn.handle_eof();
    drain_events(&mut p.a);
    assert!(p.a.error_events().is_empty());
}

#[test]
fn abort_with_a_read_not_yet_answered_flushes_it() {
    check_aborted(read_pair(None));
}

#[test]
fn abort_with_a_read_response_half_received_flushes_it() {
    check_aborted(read_pair(Some(3000)));
}

/// The same state ended by EOF is a lost stream: the setup above really is mid-message.
#[test]
fn eof_in_the_same_state_is_stream_lost() {
    let mut p = read_pair(Some(3000));
    p.a.conn.handle_eof();
    drain_events(&mut p.a);
    assert_eq!(
        p.a.error_events(),
        vec![ddp_proto::error::ProtoError::StreamLost]
    );
}
