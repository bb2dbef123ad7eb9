//! The Rust side of the Python bindings' cross-process tests (python/tests): a publisher and a
//! subscriber of messages that carry their sequence number and a checksum, so the Python side
//! checks what a Rust publisher sent and the Rust side what a Python publisher sent.
//!
//! A message: sequence number (u64, little-endian), CRC-32 of the payload (u32, little-endian,
//! the CRC of Python's `zlib.crc32`), payload.
//!
//! ```text
//! peer pub  NAME DIR COUNT SEED      wait for a reader, send COUNT random messages, close
//! peer sub  NAME DIR COUNT           print "ready", check messages until the stream closes
//! peer hold NAME DIR                 wait for a reader, send b"hello", print "sent", wait on stdin
//! peer pace NAME DIR COUNT MICROS    wait for a reader, send COUNT messages MICROS apart, close
//! ```

use shmlog::{Bytes, Publication, Receiver, RecvError, Subscription};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

fn message(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(12 + payload.len());
    m.extend_from_slice(&seq.to_le_bytes());
    m.extend_from_slice(&crc32(payload).to_le_bytes());
    m.extend_from_slice(payload);
    m
}

/// Checks a message; returns its sequence number.
fn check(m: &[u8]) -> Result<u64, String> {
    if m.len() < 12 {
        return Err(format!("message of {} bytes is shorter than its header", m.len()));
    }
    let seq = u64::from_le_bytes(m[..8].try_into().map_err(|_| "header")?);
    let crc = u32::from_le_bytes(m[8..12].try_into().map_err(|_| "header")?);
    if crc32(&m[12..]) != crc {
        return Err(format!("message {seq}: checksum mismatch"));
    }
    Ok(seq)
}

/// xorshift64*: the random sizes and bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Mostly up to 2 KiB, one in a hundred up to 200 KiB (fragmented past the 64 KiB MTU).
    fn len(&mut self) -> usize {
        let r = self.next();
        if r % 100 == 0 {
            (r >> 8) as usize % (200 << 10)
        } else {
            (r >> 8) as usize % 2048
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let arg = |i: usize| args.get(i).cloned().ok_or_else(|| format!("argument {i} missing"));
    let number = |i: usize| arg(i)?.parse::<u64>().map_err(|e| format!("argument {i}: {e}"));
    let (mode, name, dir) = (arg(1)?, arg(2)?, arg(3)?);
    let mut out = std::io::stdout();
    match mode.as_str() {
        "pub" | "pace" => {
            let count = number(4)?;
            let mut p = Publication::builder(name).dir(dir).create().map_err(|e| e.to_string())?;
            p.wait_connected(WAIT).map_err(|e| e.to_string())?;
            let mut rng = Rng(number(5)?.max(1));
            let mut payload = Vec::new();
            for seq in 0..count {
                payload.clear();
                let len = if mode == "pub" { rng.len() } else { 16 };
                payload.extend((0..len).map(|_| rng.next() as u8));
                p.offer_blocking(&message(seq, &payload), WAIT).map_err(|e| format!("offer {seq}: {e}"))?;
                if mode == "pace" {
                    std::thread::sleep(Duration::from_micros(number(5)?));
                }
            }
            p.close();
        }
        "sub" => {
            let count = number(4)?;
            let sub = Subscription::builder(name).dir(dir).open().map_err(|e| e.to_string())?;
            writeln!(out, "ready").and_then(|_| out.flush()).map_err(|e| e.to_string())?;
            let mut rx = Receiver::new(sub, Bytes);
            let mut expected = 0;
            loop {
                match rx.recv_timeout(WAIT) {
                    Ok(m) => {
                        let seq = check(&m)?;
                        if seq != expected {
                            return Err(format!("message {seq} where {expected} was expected"));
                        }
                        expected += 1;
                    }
                    Err(RecvError::Closed) if expected > 0 => break,
                    Err(RecvError::Closed) => {}
                    Err(e) => return Err(format!("after {expected} messages: {e}")),
                }
            }
            if expected != count {
                return Err(format!("{expected} messages received, {count} expected"));
            }
            writeln!(out, "ok {expected}").map_err(|e| e.to_string())?;
        }
        "hold" => {
            let mut p = Publication::builder(name).dir(dir).create().map_err(|e| e.to_string())?;
            p.wait_connected(WAIT).map_err(|e| e.to_string())?;
            p.offer_blocking(b"hello", WAIT).map_err(|e| e.to_string())?;
            writeln!(out, "sent").and_then(|_| out.flush()).map_err(|e| e.to_string())?;
            // Until stdin closes (or, in the test, SIGKILL).
            for _ in std::io::stdin().lock().lines() {}
        }
        other => return Err(format!("unknown mode {other:?}")),
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peer: {e}");
            ExitCode::FAILURE
        }
    }
}
