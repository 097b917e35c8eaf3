//! Wire views and reprs, in the style of smoltcp's `wire` module: each header has a view
//! `XxxPacket<T: AsRef<[u8]>>` (checked and unchecked constructors, getters/setters over a
//! private table of byte ranges) and an `XxxRepr` with `parse`, `buffer_len` and `emit`.

pub mod ddp;
pub mod mpa;
pub mod rdmap;

pub use ddp::WireError;
