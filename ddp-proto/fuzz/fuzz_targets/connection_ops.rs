//! cargo-fuzz target: see `ddp_proto::fuzz::connection_ops`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ddp_proto::fuzz::connection_ops(data));
