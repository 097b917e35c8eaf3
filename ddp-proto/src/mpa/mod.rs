//! MPA (RFC 5044, RFC 6581): the CRC-32C, markers, the FPDU framer and deframer, and the
//! startup negotiation (MPA Request/Reply).

pub mod crc;
pub mod deframer;
pub mod framer;
pub mod markers;
pub mod startup;
