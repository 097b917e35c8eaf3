//! # ddp-proto — the sans-I/O iWARP protocol core
//!
//! Pure protocol code for the iWARP stack: RDMAP (RFC 5040) over DDP (RFC 5041) over MPA
//! (RFC 5044, with the RFC 6581 enhancements) over a reliable byte stream.
//!
//! What it does: parses and emits every wire header ([`wire`]), turns ULPDUs into the exact
//! FPDU byte stream and back ([`mpa`]), negotiates the MPA Request/Reply exchange, validates
//! incoming DDP/RDMAP segments against registered memory and maps every failure to the
//! Terminate message the peer must see ([`error`]), and runs one connection as a state
//! machine ([`conn`]).
//!
//! What it refuses to do: any I/O, threads, clocks or `unsafe`. Bytes come in as slices, time
//! comes in as an argument, memory is reached through the [`ddp::Memory`] trait, and
//! everything that must go on the wire comes out as byte ranges for the driver to write in
//! order.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod conn;
pub mod ddp;
pub mod error;
pub mod fuzz;
pub mod mpa;
pub mod rdmap;
pub mod wire;
