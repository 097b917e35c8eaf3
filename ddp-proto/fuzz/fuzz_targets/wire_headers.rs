//! cargo-fuzz target: see `ddp_proto::fuzz::wire_headers`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ddp_proto::fuzz::wire_headers(data));
