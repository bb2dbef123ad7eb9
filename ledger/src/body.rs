//! Message bodies that prove themselves: a header naming the attempt that wrote them, then bytes
//! drawn from a generator seeded by that attempt, and a hash over both. A reader checks every
//! byte of every message it receives, so "whole" is checked by content, never trusted.
//!
//! Header (40 bytes, little-endian): magic `LDG1`, writer, incarnation, session, sequence
//! number (u64), total length (u32), zero (u32), hash (u64) of the other fields and the body.

use crate::prng::mix;

/// Bytes of the header: the shortest message.
pub const HEADER: usize = 40;
const MAGIC: u32 = u32::from_le_bytes(*b"LDG1");

/// The attempt a message belongs to: which writer process (`inc`, unique in a run, and its
/// logical writer `writer`), which session it wrote in, and its sequence number there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Id {
    pub writer: u32,
    pub inc: u32,
    pub session: i32,
    pub seq: u64,
}

fn seed(id: &Id) -> u64 {
    mix(mix(u64::from(id.inc) << 32 | u64::from(id.writer)) ^ id.seq)
}

fn hash(id: &Id, len: usize, body: &[u8]) -> u64 {
    let mut h = mix(seed(id) ^ len as u64 ^ (id.session as u32 as u64) << 17);
    for chunk in body.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    h
}

fn generate(id: &Id, out: &mut [u8]) {
    let s = seed(id);
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let w = mix(s.wrapping_add(i as u64)).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Writes the message of attempt `id`, `len` bytes long (at least [`HEADER`]), into `out`.
pub fn fill(id: Id, len: usize, out: &mut Vec<u8>) {
    let len = len.max(HEADER);
    out.clear();
    out.resize(len, 0);
    generate(&id, &mut out[HEADER..]);
    let h = hash(&id, len, &out[HEADER..]);
    out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    out[4..8].copy_from_slice(&id.writer.to_le_bytes());
    out[8..12].copy_from_slice(&id.inc.to_le_bytes());
    out[12..16].copy_from_slice(&id.session.to_le_bytes());
    out[16..24].copy_from_slice(&id.seq.to_le_bytes());
    out[24..28].copy_from_slice(&(len as u32).to_le_bytes());
    out[32..40].copy_from_slice(&h.to_le_bytes());
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The attempt a received message claims to be, if every byte of it says so.
pub fn check(bytes: &[u8]) -> Result<Id, &'static str> {
    if bytes.len() < HEADER {
        return Err("shorter-than-header");
    }
    if u32_at(bytes, 0) != MAGIC {
        return Err("bad-magic");
    }
    let id = Id {
        writer: u32_at(bytes, 4),
        inc: u32_at(bytes, 8),
        session: u32_at(bytes, 12) as i32,
        seq: u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")),
    };
    if u32_at(bytes, 28) != 0 {
        return Err("bad-header");
    }
    if u32_at(bytes, 24) as usize != bytes.len() {
        return Err("length-differs");
    }
    if u64::from_le_bytes(bytes[32..40].try_into().expect("8 bytes"))
        != hash(&id, bytes.len(), &bytes[HEADER..])
    {
        return Err("bad-hash");
    }
    let mut expected = vec![0u8; bytes.len() - HEADER];
    generate(&id, &mut expected);
    if expected != bytes[HEADER..] {
        return Err("bad-body");
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_message_checks_and_any_change_is_caught() {
        let id = Id { writer: 3, inc: 9, session: -77, seq: 12345 };
        let mut m = Vec::new();
        for len in [0, HEADER, HEADER + 1, 333, 5000] {
            fill(id, len, &mut m);
            assert_eq!(check(&m), Ok(id), "len {len}");
        }
        for at in [0, 5, 13, 20, 25, 29, 35, 41, 4999] {
            let mut bad = m.clone();
            bad[at] ^= 0x10;
            assert!(check(&bad).is_err(), "flip at {at}");
        }
        assert!(check(&m[..4000]).is_err(), "truncated");
        let mut longer = m.clone();
        longer.push(0);
        assert!(check(&longer).is_err(), "extended");
        assert_eq!(check(&m[..10]), Err("shorter-than-header"));
    }
}
