//! cargo-fuzz target: see `ddp_proto::fuzz::mpa_responder`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ddp_proto::fuzz::mpa_responder(data));
