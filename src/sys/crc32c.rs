//! CRC32C (Castagnoli: reflected polynomial `0x82F63B78`, initial value and final XOR `!0`), the
//! checksum of recorded frames (`journal::frames::checksum`). The core crate takes no CRC crate
//! as a dependency (issue 24: libc and memmap2 only), so it is computed here:
//!
//! - with the CPU's CRC32C instruction where it has one, detected at run time (std caches the
//!   answer after the first look): `crc32` of SSE4.2 on x86-64, `crc32cx` of the CRC extension on
//!   aarch64. The instruction's latency (3 cycles) and not its throughput (1 a cycle) bounds a
//!   single stream, so long inputs are cut into three equal runs computed side by side, and the
//!   three registers are joined by shifting each over the runs after it (a table lookup, see
//!   [`Shift`]);
//! - elsewhere with tables, eight bytes a step ("slicing by 8").
//!
//! Checked against RFC 3720's vectors and against the `crc32c` crate over random buffers (tests
//! below); benched against that crate in `benches/journal.rs`.

/// The reflected CRC32C polynomial.
const POLY: u32 = 0x82F6_3B78;

/// The CRC32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    !raw(!0, bytes)
}

/// The CRC32C of the bytes whose CRC32C is `crc` followed by `bytes`.
#[inline]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    !raw(!crc, bytes)
}

/// Runs `bytes` through the CRC register `crc` (no inversion at either end).
fn raw(crc: u32, bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2 (just checked), the only requirement of `raw_sse42`.
        return unsafe { raw_sse42(crc, bytes) };
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("crc") {
        // SAFETY: the CPU has the CRC extension (just checked), the only requirement of `raw_arm`.
        return unsafe { raw_arm(crc, bytes) };
    }
    raw_table(crc, bytes)
}

/// The table path, also for tests of the hardware path against it.
pub(crate) fn raw_table(mut crc: u32, bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let lo = crc ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        crc = TABLES[7][(lo & 0xff) as usize]
            ^ TABLES[6][((lo >> 8) & 0xff) as usize]
            ^ TABLES[5][((lo >> 16) & 0xff) as usize]
            ^ TABLES[4][(lo >> 24) as usize]
            ^ TABLES[3][(hi & 0xff) as usize]
            ^ TABLES[2][((hi >> 8) & 0xff) as usize]
            ^ TABLES[1][((hi >> 16) & 0xff) as usize]
            ^ TABLES[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        crc = (crc >> 8) ^ TABLES[0][((crc ^ b as u32) & 0xff) as usize];
    }
    crc
}

/// `TABLES[0][b]`: the register after one byte `b` from zero; `TABLES[k][b]`: the same followed by
/// `k` zero bytes. Built at compile time.
static TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut crc = b as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ POLY } else { crc >> 1 };
            bit += 1;
        }
        t[0][b] = crc;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
}

/// `a * b` modulo the polynomial, both in the reflected representation (bit 31 is `x^0`).
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut m = 1u32 << 31;
    while m != 0 {
        if a & m != 0 {
            product ^= b;
        }
        m >>= 1;
        // b *= x
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// `x^(8 n)` modulo the polynomial: what running `n` zero bytes through the register multiplies
/// it by.
const fn x_pow_8n(mut n: usize) -> u32 {
    let mut result = 1u32 << 31; // x^0
    let mut square = 1u32 << 23; // x^8
    while n != 0 {
        if n & 1 != 0 {
            result = mul_mod(result, square);
        }
        square = mul_mod(square, square);
        n >>= 1;
    }
    result
}

/// The register after `LEN` zero bytes, as a function of the register before them: linear, so
/// four lookups, one per byte of the register. Joins runs computed side by side: the register
/// of `A ++ B` is `shift(reg(A)) ^ reg_from_zero(B)`, with `LEN = B.len()`.
struct Shift([[u32; 256]; 4]);

impl Shift {
    const fn new(len: usize) -> Self {
        let factor = x_pow_8n(len);
        let mut t = [[0u32; 256]; 4];
        let mut k = 0;
        while k < 4 {
            let mut b = 0;
            while b < 256 {
                t[k][b] = mul_mod(factor, (b as u32) << (8 * k));
                b += 1;
            }
            k += 1;
        }
        Self(t)
    }

    #[inline(always)]
    fn apply(&self, crc: u32) -> u32 {
        self.0[0][(crc & 0xff) as usize]
            ^ self.0[1][((crc >> 8) & 0xff) as usize]
            ^ self.0[2][((crc >> 16) & 0xff) as usize]
            ^ self.0[3][(crc >> 24) as usize]
    }
}

/// Run lengths of the three-way split, longest first, each with its shift. A 1 KiB frame takes
/// one 3 x 256 step and one 3 x 64 step; a 1 MiB block mostly 3 x 4 KiB steps.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
static LONG: Shift = Shift::new(4096);
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
static MEDIUM: Shift = Shift::new(256);
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
static SHORT: Shift = Shift::new(64);

/// The three-way hardware loop over `step` (one 8-byte CRC instruction) and `step_byte`. The
/// registers are kept as `u64`, as x86-64's instruction takes and gives them: narrowing to
/// `u32` between steps put a zero-extending move on each chain (4 cycles a step instead of 3).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
fn interleaved(
    crc: u32,
    mut bytes: &[u8],
    step: impl Fn(u64, u64) -> u64,
    step_byte: impl Fn(u32, u8) -> u32,
) -> u32 {
    let mut crc = crc as u64;
    for (len, shift) in [(4096, &LONG), (256, &MEDIUM), (64, &SHORT)] {
        while bytes.len() >= 3 * len {
            let (a, rest) = bytes.split_at(len);
            let (b, rest) = rest.split_at(len);
            let (c, rest) = rest.split_at(len);
            let (mut x, mut y, mut z) = (crc, 0u64, 0u64);
            for ((a, b), c) in a.chunks_exact(8).zip(b.chunks_exact(8)).zip(c.chunks_exact(8)) {
                x = step(x, u64::from_le_bytes(a.try_into().expect("8 bytes")));
                y = step(y, u64::from_le_bytes(b.try_into().expect("8 bytes")));
                z = step(z, u64::from_le_bytes(c.try_into().expect("8 bytes")));
            }
            crc = (shift.apply(shift.apply(x as u32) ^ y as u32) ^ z as u32) as u64;
            bytes = rest;
        }
    }
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        crc = step(crc, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut crc = crc as u32;
    for &b in words.remainder() {
        crc = step_byte(crc, b);
    }
    crc
}

/// # Safety
/// The CPU must have SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
// Rust 1.86 made these calls safe inside the function (this crate supports 1.82).
#[allow(unused_unsafe)]
unsafe fn raw_sse42(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    interleaved(
        crc,
        bytes,
        // SAFETY: the caller's contract: the CPU has SSE4.2, the intrinsic's only requirement.
        |crc, w| unsafe { _mm_crc32_u64(crc, w) },
        // SAFETY: as above.
        |crc, b| unsafe { _mm_crc32_u8(crc, b) },
    )
}

/// # Safety
/// The CPU must have the CRC extension.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "crc")]
// Rust 1.86 made these calls safe inside the function (this crate supports 1.82).
#[allow(unused_unsafe)]
unsafe fn raw_arm(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::aarch64::{__crc32cb, __crc32cd};
    interleaved(
        crc,
        bytes,
        // SAFETY: the caller's contract: the CPU has the CRC extension, the intrinsic's only
        // requirement.
        |crc, w| unsafe { __crc32cd(crc as u32, w) as u64 },
        // SAFETY: as above.
        |crc, b| unsafe { __crc32cb(crc, b) },
    )
}

#[cfg(all(test, not(shmlog_loom)))]
mod tests {
    use super::*;

    /// RFC 3720 (iSCSI), appendix B.4, and the usual check value.
    #[test]
    fn known_vectors() {
        let inc: Vec<u8> = (0..32).collect();
        let dec: Vec<u8> = (0..32).rev().collect();
        let pdu: [u8; 48] = [
            0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0,
            0x14, 0, 0, 0, 0x18, 0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0,
        ];
        let cases: [(&[u8], u32); 7] = [
            (&[0; 32], 0x8A91_36AA),
            (&[0xff; 32], 0x62A8_AB43),
            (&inc, 0x46DD_794E),
            (&dec, 0x113F_DB5C),
            (&pdu, 0xD996_3A56),
            (b"123456789", 0xE306_9283),
            (b"", 0),
        ];
        for (bytes, want) in cases {
            assert_eq!(crc32c(bytes), want, "{bytes:02x?}");
            assert_eq!(!raw_table(!0, bytes), want, "table path, {bytes:02x?}");
        }
    }

    #[test]
    fn the_shift_tables_equal_running_zero_bytes() {
        for len in [64, 256, 4096, 1, 3] {
            let shift = Shift::new(len);
            for crc in [1u32, 0x8000_0000, 0xdead_beef, 0x1234_5678] {
                assert_eq!(shift.apply(crc), raw_table(crc, &vec![0; len]), "len {len}, crc {crc:x}");
            }
        }
    }

    /// Every length up to a few runs of each split and random contents, split anywhere for the
    /// append form: the same as the `crc32c` crate, on the hardware path and the table path.
    #[test]
    fn agrees_with_the_crc32c_crate_over_random_buffers() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let lengths: Vec<usize> =
            (0..200).chain([767, 768, 769, 3 * 4096 - 1, 3 * 4096, 3 * 4096 + 9, 1 << 20]).collect();
        for (i, &len) in lengths.iter().enumerate() {
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let offset = (i * 7) % 8; // unaligned starts too
            let bytes = &bytes[offset.min(len)..];
            let want = crc32c::crc32c(bytes);
            assert_eq!(crc32c(bytes), want, "len {}", bytes.len());
            assert_eq!(!raw_table(!0, bytes), want, "table, len {}", bytes.len());
            let cut = next() as usize % (bytes.len() + 1);
            assert_eq!(crc32c_append(crc32c(&bytes[..cut]), &bytes[cut..]), want, "split at {cut}");
        }
    }
}
