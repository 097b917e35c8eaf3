//! The pure half of the engine: no system calls, no threads of its own.
//!
//! - [`registry`]: the process-wide memory registry (STags, protection domains, pins that
//!   make deregistration wait for placements in flight).
//! - [`cq`]: completions in the C layout of `struct ddp_wc`, the `WcStatus` → `DDP_WC_*`
//!   mapping, and `struct ddp_conn_info`.
//! - [`options`]: the socket options of `sockopt_ext.h` and their translation into an MPA
//!   configuration.
//!
//! The queue pairs themselves are `ddp_proto::conn::Connection`s (send queue, receive queue,
//! ORD/IRD); the driver ([`crate::driver`]) owns them and moves bytes.

pub mod cq;
pub mod options;
pub mod registry;
