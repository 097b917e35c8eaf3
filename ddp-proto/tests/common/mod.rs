//! Helpers shared by ddp-proto's integration tests (each `tests/*.rs` is its own crate and
//! includes this with `mod common;`).

pub mod pcap;
