//! The MPA CRC-32C (RFC 5044 §4.4 "CRC", the iSCSI polynomial of RFC 3720 §12.1 and
//! Appendix B.4), one-shot and incremental.
//!
//! What it is: a thin layer over the `crc-fast` crate (carry-less multiplication, AVX-512
//! VPCLMULQDQ or PCLMULQDQ as the CPU has them, chosen at run time; about twice the `crc32c`
//! crate's SSE4.2 speed on large buffers, which is what the sender's CRC over cold data needs:
//! docs/performance.md) that fixes the one thing every MPA implementation must agree on, the
//! byte order on the wire. The tests check it against the `crc32c` crate, an independent
//! implementation. The CRC-32C
//! value (reflected, initial value and final XOR `0xffff_ffff`, as in RFC 3720) is written
//! **least significant byte first**. That is what RFC 3720 B.4's vectors show ("32 bytes of
//! zeroes ... CRC: aa 36 91 8a" for the value `0x8a91_36aa`), what Linux siw sends and what
//! Wireshark checks: in `rping-crc.lo.pcap` the 36-byte Send FPDU `00 22 41 43 ...` carries
//! the bytes `35 bd 6b b0`, and CRC-32C over the 36 bytes before them is `0xb06b_bd35`.
//!
//! What it refuses to do: decide what is covered. Coverage (ULPDU_LENGTH, ULPDU, pad and every
//! marker inside the FPDU, including a marker immediately in front of ULPDU_LENGTH) is the
//! framer's and deframer's business; see [`super::markers`].

/// Size of the CRC field at the end of every FPDU (present, as zeros, even when CRC is off).
pub const CRC_LEN: usize = 4;

/// CRC-32C of `bytes` (the checksum value, not its wire encoding).
pub fn crc32c(bytes: &[u8]) -> u32 {
    // (a 32-bit CRC in the low half)
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// The four bytes a CRC-32C value occupies on the wire (least significant byte first).
pub fn to_wire(value: u32) -> [u8; CRC_LEN] {
    value.to_le_bytes()
}

/// The CRC-32C value encoded by four wire bytes (the inverse of [`to_wire`]).
pub fn from_wire(bytes: [u8; CRC_LEN]) -> u32 {
    u32::from_le_bytes(bytes)
}

/// An incremental CRC-32C: feed the covered bytes in order, in any number of pieces; the result
/// equals [`crc32c()`] over their concatenation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Crc32c {
    /// The CRC-32C of everything fed so far (final XOR applied; `update` takes it off to
    /// continue).
    value: u32,
}

impl Crc32c {
    /// A hasher that has seen no bytes.
    pub const fn new() -> Self {
        Crc32c { value: 0 }
    }

    /// Feeds the next covered bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut d = crc_fast::Digest::new_with_init_state(
            crc_fast::CrcAlgorithm::Crc32Iscsi,
            u64::from(self.value ^ 0xffff_ffff),
        );
        d.update(bytes);
        self.value = d.finalize() as u32;
    }

    /// The CRC-32C of all bytes fed so far.
    pub fn value(&self) -> u32 {
        self.value
    }

    /// The wire encoding of [`Crc32c::value`].
    pub fn to_wire(&self) -> [u8; CRC_LEN] {
        to_wire(self.value)
    }

    /// Forgets everything fed so far.
    pub fn reset(&mut self) {
        self.value = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 3720 Appendix B.4: each vector with the CRC bytes exactly as the RFC prints them
    /// (wire order).
    fn rfc3720_vectors() -> Vec<(Vec<u8>, [u8; 4])> {
        let zeros = vec![0u8; 32];
        let ones = vec![0xffu8; 32];
        let incrementing: Vec<u8> = (0u8..32).collect();
        let decrementing: Vec<u8> = (0u8..32).rev().collect();
        // An iSCSI - SCSI Read (10) Command PDU.
        let mut read_pdu = vec![0u8; 48];
        read_pdu[0] = 0x01;
        read_pdu[1] = 0xc0;
        read_pdu[16] = 0x14;
        read_pdu[22] = 0x04;
        read_pdu[27] = 0x14;
        read_pdu[31] = 0x18;
        read_pdu[32] = 0x28;
        read_pdu[40] = 0x02;
        vec![
            (zeros, [0xaa, 0x36, 0x91, 0x8a]),
            (ones, [0x43, 0xab, 0xa8, 0x62]),
            (incrementing, [0x4e, 0x79, 0xdd, 0x46]),
            (decrementing, [0x5c, 0xdb, 0x3f, 0x11]),
            (read_pdu, [0x56, 0x3a, 0x96, 0xd9]),
        ]
    }

    #[test]
    fn rfc3720_b4_vectors_in_wire_order() {
        for (data, wire) in rfc3720_vectors() {
            assert_eq!(to_wire(crc32c(&data)), wire, "vector {data:02x?}");
            assert_eq!(from_wire(wire), crc32c(&data));
        }
    }

    /// Against the `crc32c` crate (SSE4.2 or software), an independent implementation: every
    /// length up to 4 KiB plus some large ones, at unaligned starts, one-shot and cut in
    /// three pieces.
    #[test]
    fn equals_an_independent_implementation() {
        let mut data = vec![0u8; (1 << 20) + 64];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for b in data.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let lens = (0..=4096).chain([8191, 65_536, 65_537, 1 << 20]);
        for (i, len) in lens.enumerate() {
            let start = i % 61;
            let d = &data[start..start + len];
            let want = ::crc32c::crc32c(d);
            assert_eq!(crc32c(d), want, "one-shot, {len} bytes at {start}");
            let (a, b) = (len / 3, len - len / 5);
            let mut h = Crc32c::new();
            h.update(&d[..a]);
            h.update(&d[a..b]);
            h.update(&d[b..]);
            assert_eq!(h.value(), want, "incremental, {len} bytes at {start}");
        }
    }

    #[test]
    fn check_value_of_the_catalogue() {
        // The "check" value of CRC-32/ISCSI in the CRC catalogue.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn incremental_equals_one_shot_at_every_split() {
        for (data, _) in rfc3720_vectors() {
            let whole = crc32c(&data);
            for split in 0..=data.len() {
                let mut h = Crc32c::new();
                h.update(&data[..split]);
                h.update(&[]);
                h.update(&data[split..]);
                assert_eq!(h.value(), whole);
            }
            let mut h = Crc32c::new();
            for b in &data {
                h.update(core::slice::from_ref(b));
            }
            assert_eq!(h.to_wire(), to_wire(whole));
            h.reset();
            assert_eq!(h, Crc32c::new());
        }
    }

    #[test]
    fn siw_fpdu_from_a_capture_is_little_endian_on_the_wire() {
        // rping-crc.decode.txt, frame 10: an untagged Send FPDU, "CRC check: 0x35bd6bb0
        // (Good CRC32)" as tshark prints the wire bytes.
        let fpdu: [u8; 40] = [
            0x00, 0x22, 0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x55, 0x84, 0xf9, 0x14, 0xde, 0x60,
            0x34, 0xb5, 0x76, 0x00, 0x00, 0x00, 0x00, 0x40, 0x35, 0xbd, 0x6b, 0xb0,
        ];
        let value = crc32c(&fpdu[..36]);
        assert_eq!(value, 0xb06b_bd35);
        assert_eq!(to_wire(value), fpdu[36..]);
        assert_ne!(
            value.to_be_bytes(),
            fpdu[36..],
            "big-endian would not match siw"
        );
    }
}
