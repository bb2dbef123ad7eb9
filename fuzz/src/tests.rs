//! The targets in-process (`cargo test` in `fuzz/`, no libFuzzer): on random inputs, so a harness
//! bug shows up without a fuzzing run, and on the seed corpus, which the builders below write
//! (`cargo test -- --ignored write_seed_corpus`) and which must stay meaningful (deep enough).

use crate::bridge_in::run_bridge_in;
use crate::file_validation::run_file_validation;
use crate::ops_oracle::run_ops;
use crate::term_reader::run_term_reader;
use crate::{
    assembler, bridge_in, bridge_status, doorbell, file_validation, journal, ops_oracle, term_reader, unblock,
};
use shmlog::__fuzz::frame::{BEGIN_FLAG, UNFRAGMENTED};
use std::path::{Path, PathBuf};

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 9] = [
    ("term_reader", term_reader),
    ("file_validation", file_validation),
    ("ops_oracle", ops_oracle),
    ("assembler", assembler),
    ("journal", journal),
    ("unblock", unblock),
    ("bridge_status", bridge_status),
    ("bridge_in", bridge_in),
    ("doorbell", doorbell),
];

/// Bytes of a seed, written in the order the decoders read them.
#[derive(Default)]
struct Seed(Vec<u8>);

impl Seed {
    fn b(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.extend_from_slice(bytes);
        self
    }

    fn u16(&mut self, v: u16) -> &mut Self {
        self.b(&v.to_le_bytes())
    }
}

// --- ops_oracle seeds: 1 KiB terms, 64-byte MTU (4 fragments per max message), window T/2.

fn ops_header(slots: u8, start: u8) -> Seed {
    let mut s = Seed::default();
    // term 1024, mtu choice 0, window 64 + 448, initial term id EDGES[0], start term, slots
    s.b(&[3, 0]).u16(448).b(&[0, start, slots - 1]);
    s
}

impl Seed {
    /// Joins at the writer, in place (`copy` 0) or copying (1).
    fn join_latest(&mut self, copy: u8) -> &mut Self {
        self.b(&[12, 0, copy])
    }
    fn join_slowest(&mut self, copy: u8) -> &mut Self {
        self.b(&[12, 2, copy])
    }
    fn join_back(&mut self, steps: u8) -> &mut Self {
        self.b(&[12, 3, steps, 0])
    }
    /// Offer of `len` (at most 128 here) bytes.
    fn offer(&mut self, len: u8) -> &mut Self {
        self.b(&[0, 4, len])
    }
    fn offer_vectored(&mut self, len: u8, cut: u8) -> &mut Self {
        self.b(&[4, 4, len, 1, cut])
    }
    /// Claim of `len` (at most 32) bytes: then 5 commit, 6 abort, 7 hold.
    fn claim(&mut self, op: u8, len: u8) -> &mut Self {
        self.b(&[op, 1, len, 4, 1, 1])
    }
    /// Poll reader `k` of `readers` with limit index `limit` (0,1,2,3,5,8,64,MAX).
    fn poll(&mut self, k: u8, readers: u8, limit: u8) -> &mut Self {
        self.b(&[9]);
        if readers > 1 {
            self.b(&[k]);
        }
        self.b(&[0, limit])
    }
    fn controlled(&mut self, k: u8, readers: u8, actions: &[u8]) -> &mut Self {
        self.b(&[10]);
        if readers > 1 {
            self.b(&[k]);
        }
        self.b(&[2, 4, actions.len() as u8 - 1]).b(actions)
    }
    fn block(&mut self, k: u8, readers: u8, max: u8) -> &mut Self {
        self.b(&[11]);
        if readers > 1 {
            self.b(&[k]);
        }
        self.b(&[3, max])
    }
    fn leave(&mut self, k: u8, readers: u8, crash: bool) -> &mut Self {
        self.b(&[13]);
        if readers > 1 {
            self.b(&[k]);
        }
        self.b(&[!crash as u8])
    }
    /// A stray word in a free slot (`free` slots free; `kind` 0 past the writer, 1 near
    /// `i64::MAX`, 2 terms behind, 3 anything).
    fn forge(&mut self, slot: u8, free: u8, kind: u8) -> &mut Self {
        self.b(&[13 | 0x40]);
        if free > 1 {
            self.b(&[slot]);
        }
        self.b(&[kind, 9, 0, 1])
    }
}

fn ops_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut steady = ops_header(4, 2);
    steady.join_latest(0).join_latest(1);
    for i in 0..48u8 {
        steady.offer(i.wrapping_mul(37) % 129).poll(0, 2, 3);
        if i % 3 == 0 {
            steady.poll(1, 2, 7);
        }
    }
    steady.b(&[15]);

    let mut claims = ops_header(4, 2);
    claims.join_latest(0).offer(100).claim(5, 32).claim(6, 7).offer_vectored(90, 40).poll(0, 1, 7);
    claims.claim(7, 20).poll(0, 1, 7).b(&[8 | 0x10]).join_slowest(1).poll(0, 2, 7);
    for i in 0..20u8 {
        claims.claim(5 + i % 3, i).offer(i * 6).controlled(i % 2, 2, &[3, 2, 0, 1]);
        claims.block(1 - i % 2, 2, i % 6);
    }
    claims.leave(1, 2, true).offer(128).offer(128).b(&[14]).join_back(6).b(&[15]);

    let mut churn = ops_header(3, 0);
    churn.join_latest(0);
    for i in 0..16u8 {
        // a second reader at the latest position, a third one message back
        churn.join_latest(i % 2).offer(64).offer(i + 1).join_back(2).b(&[15]);
        churn.leave(2, 3, false).leave(1, 2, i % 4 == 0).b(&[14]);
    }
    churn.b(&[15]);

    let mut end_of_positions = ops_header(2, 1);
    end_of_positions.b(&[0]).join_latest(0);
    for _ in 0..40 {
        end_of_positions.offer(120).poll(0, 1, 7);
    }
    end_of_positions.b(&[15]);

    // Stray words in unowned slots while two readers read: past the writer, near i64::MAX, terms
    // behind (holding the writer until a sweep frees them).
    let mut forged = ops_header(4, 2);
    forged.join_latest(0).join_latest(1);
    for i in 0..24u8 {
        if i % 4 == 0 {
            forged.forge(i % 2, 2, i / 4 % 4);
        }
        forged.offer(60 + i).poll(0, 2, 6).poll(1, 2, 6);
        if i % 2 == 1 {
            forged.b(&[14]);
        }
    }
    forged.b(&[15]);

    vec![
        ("steady", steady.0),
        ("claims", claims.0),
        ("churn", churn.0),
        ("end-of-positions", end_of_positions.0),
        ("forged", forged.0),
    ]
}

// --- term_reader seeds: 512-byte terms, window 256.

fn term_seeds() -> Vec<(&'static str, Vec<u8>)> {
    fn frames(s: &mut Seed, lens: &[u8], flags: u8) {
        for &len in lens {
            s.b(&[0x00, len, flags]);
        }
        // a padding frame of 96 bytes, then one more data frame, then stop
        s.b(&[0x08, 63, 0, 0x00, 5, flags, 0xFF]);
    }
    fn ops(s: &mut Seed) {
        s.b(&[0, 0, 3]); // walk from the start of the term
        s.b(&[0, 2, 0, 2, 1, 2, 0, 1]); // read at 64, limit 2, actions Commit, Abort, copied
        s.b(&[0, 0, 1, 2]); // block read, max 64 bytes
        s.b(&[4, 0, 2]); // frame_starts_at at the next term
        s.b(&[0, 1, 0, 5, 0, 1, 0]); // read at 32 (mid-frame), no limit, Break, in place
    }
    let mut valid = Seed::default();
    valid.b(&[2, 192, 0, 0, 1, 2]);
    frames(&mut valid, &[0, 10, 32, 33, 1], UNFRAGMENTED);
    valid.b(&[2]);
    frames(&mut valid, &[20, 20], BEGIN_FLAG);
    valid.b(&[1]);
    ops(&mut valid);

    let mut corrupt = Seed::default();
    corrupt.b(&[2, 192, 0, 0, 1, 2]);
    // good frame, length -1, wrong term offset, wrong term id, unknown type, bad version
    corrupt.b(&[0x00, 8, 0xC0, 0x04, 2, 0xC0, 0x00, 8, 0xC0, 0x40, 4, 0xC0, 0]);
    corrupt.b(&[0x00, 8, 0xC0, 0x80, 7, 0xC0, 0x10, 0x00, 9, 0xC0, 0, 2, 0x20, 9, 5, 0xC0, 0xFF]);
    corrupt.b(&[2, 0x04, 0, 10, 0xC0, 0xFF, 1]);
    ops(&mut corrupt);

    let mut wrapped = Seed::default();
    // initial term id i32::MAX, a term count just below 2^31
    wrapped.b(&[2, 192, 10, 2, 1, 2]);
    frames(&mut wrapped, &[3, 4, 5], UNFRAGMENTED);
    wrapped.b(&[2]);
    frames(&mut wrapped, &[6], UNFRAGMENTED);
    wrapped.b(&[0]).b(&[0xAB; 512]);
    ops(&mut wrapped);

    vec![("valid", valid.0), ("corrupt", corrupt.0), ("wrapped", wrapped.0)]
}

// --- file_validation seeds.

fn file_seeds() -> Vec<(&'static str, Vec<u8>)> {
    // A 64 KiB-term log, MTU 1408, window T/2, 4 KiB pages, three appended messages.
    fn valid_log(s: &mut Seed) {
        s.b(&[1, 1, 0, 1, 2, 0, 0, 0, 3]).u16(100).u16(1500).u16(8000);
    }
    let mut heap = Seed::default();
    heap.b(&[0]);
    valid_log(&mut heap);
    heap.b(&[0]);

    let mut patched = Seed::default();
    patched.b(&[0]);
    valid_log(&mut patched);
    // tail counter of partition 0 -> a packed tail; MTU -> 33; one raw byte in the terms
    patched.b(&[3]); // three patches:
    patched.b(&[2, 0, 5, 3]).b(&40u32.to_le_bytes()); // tail of partition 0 = (31, 40)
    patched.b(&[0, 3, 5]); // MTU = 33
    patched.b(&[3]).b(&1000u32.to_le_bytes()).b(&[0, 0xFF]); // one byte in term 0

    // A valid log file whose publisher lock the harness holds: a reader maps it.
    let mut live_file = Seed::default();
    live_file.b(&[2, 4]);
    valid_log(&mut live_file);
    live_file.b(&[0, 1, 1]);

    // The same file with no publisher: a reader leaves it alone, the tools validate it.
    let mut dead_file = Seed::default();
    dead_file.b(&[2, 4]);
    valid_log(&mut dead_file);
    dead_file.b(&[0, 1, 0]);

    let mut tiny_file = Seed::default();
    tiny_file.b(&[2, 5, 1, 0, 2, 192, 0, 1, 2, 10, 20, 30, 0, 1, 1]);

    let mut slots = Seed::default();
    // four slots, two claimed, one of them reading our session at an edge position
    slots.b(&[1, 1, 1, 3, 2, 0, 1, 0, 2, 0, 1, 0, 0, 2, 0]);

    let mut readers = Seed::default();
    // four slots, slot 1 claimed by pid 1 and reading our session at 0; mapped read-only
    readers.b(&[3, 1, 1, 3, 1, 1, 4, 1, 1, 1, 0, 0, 1, 0]);

    let mut raw = Seed::default();
    raw.b(&[0, 0, 2]).b(&[0; 512]).b(b"SHMLOG\0L\x02\0\0\0\x01\0\0\0");

    vec![
        ("heap-log", heap.0),
        ("patched-log", patched.0),
        ("log-file", live_file.0),
        ("dead-log-file", dead_file.0),
        ("tiny-log-file", tiny_file.0),
        ("slots", slots.0),
        ("readers-file", readers.0),
        ("raw", raw.0),
    ]
}

// --- assembler seeds.

fn assembler_seeds() -> Vec<(&'static str, Vec<u8>)> {
    // ctl: low 3 bits pick flags (0 B, 1 M, 3 E, 4 U), 0x08 new session, 0x10 jump.
    let mut plain = Seed::default();
    plain.b(&[0, 64, 0]);
    plain.b(&[0, 10, 1, 20, 1, 30, 3, 5, 4, 7]); // B M M E, U
    plain.b(&[0, 10, 0x08 | 3, 1, 5]); // B, E of another session
    plain.b(&[0, 10, 0x10 | 3]).u16(9).b(&[5]); // B, E after a gap
    plain.b(&[1, 3, 3, 3, 0xA0, 0x80, 3, 4]); // M E without B, empty B, empty E
    plain.b(&[0xC0]).u16(2000).b(&[1, 9, 3, 1]);

    let mut controlled = Seed::default();
    controlled.b(&[1, 0, 0]);
    controlled.b(&[0, 10, 7, 1, 20, 7, 3, 5, 0, 3, 3]); // B M E aborted once, then Continue
    controlled.b(&[4, 7, 0, 0, 2]); // U aborted twice, then Commit
    controlled.b(&[0, 4, 7, 3, 4, 0, 0, 0, 0]); // B E aborted three times
    controlled.b(&[0, 4, 7, 1, 4, 7, 3, 4, 1]); // B M E, Break

    vec![("plain", plain.0), ("controlled", controlled.0)]
}

// --- journal seeds.

fn journal_seeds() -> Vec<(&'static str, Vec<u8>)> {
    // A damaged record: two words overwritten.
    let mut words = Seed::default();
    words.b(&[0, 2, 4, 4, 3, 9, 1]);
    // Recordings: scenario 2, message count - 1, then each length (u16), then damage, then where
    // the replay starts (0: the recording's start).
    let mut intact = Seed::default();
    intact.b(&[2, 39]);
    for k in 0..40u16 {
        intact.u16(k * 97 % 3000);
    }
    intact.b(&[0, 0]);
    let mut damaged = Seed::default();
    damaged.b(&[2, 9]);
    for k in 0..10u16 {
        damaged.u16(1000 + k * 300);
    }
    damaged.b(&[1, 0]).b(&[0x40, 0x1f, 0, 0]).b(&[0x77, 1, 3]);
    let mut truncated = Seed::default();
    truncated.b(&[2, 3]).u16(2900).u16(10).u16(2000).u16(64).b(&[1, 1]).b(&[0, 0x10, 0, 0]).b(&[0]);
    // Scenario 3: each frame sealed with its CRC32C; one bit flipped (damage kind 2) at position
    // 0x1234 (a u16: the recording is under 64 KiB), bit 6; replay from the start.
    let mut sealed = Seed::default();
    sealed.b(&[3, 9]);
    for k in 0..10u16 {
        sealed.u16(1000 + k * 300);
    }
    sealed.b(&[1, 2]).u16(0x1234).b(&[6]).b(&[0]);
    // The intact recording, then three operations: detach at the 31st frame's start, attach,
    // truncate at the 36th frame's start (refused if a message does not start there).
    let mut operated = Seed::default();
    operated.b(&[2, 39]);
    for k in 0..40u16 {
        operated.u16(k * 97 % 3000);
    }
    operated.b(&[0, 0]).b(&[3]).b(&[1, 30, 1]).b(&[0]).u16(0x1000).b(&[2]).b(&[1, 35, 4]);
    // Scenario 4: three durable readers, the first at recording 5, position 4096 (an i64 of
    // the input), then two words of the file overwritten (a name's length, a position).
    let mut readers = Seed::default();
    readers.b(&[4, 2]).b(&[5, 0, 0, 0]).b(&[6]).b(&4096i64.to_le_bytes());
    readers.b(&[2]).u16(5 * 8).b(&[2]).u16(256 + 3 * 8).b(&[1]);
    vec![
        ("record_words", words.0),
        ("operated", operated.0),
        ("readers", readers.0),
        ("intact", intact.0),
        ("damaged", damaged.0),
        ("truncated", truncated.0),
        ("sealed-flipped", sealed.0),
    ]
}

// --- unblock seeds: a 128-byte term (geometry bytes 0), holes of every kind, dead and live
// writers.
fn unblock_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut dead_negative = Seed::default();
    // Geometry (term 128, mtu, window), initial term id; words of the 12 frame slots: a negative
    // length at 0, zeros after.
    dead_negative.b(&[0, 0, 0]).b(&[0]).b(&[1, 0, 0]).b(&[0; 9]);
    // Term count 0, tail 96; 2 writers: slot 0 pending 0 (dead), slot 1 none.
    dead_negative.b(&[0]).b(&[96]).b(&[2]).b(&[1, 0]).b(&[0]).b(&[0, 0]);
    let mut live_and_dead = Seed::default();
    live_and_dead.b(&[0, 0, 0]).b(&[0]).b(&[0, 1, 0]).b(&[0; 9]);
    live_and_dead.b(&[0]).b(&[128]).b(&[2]).b(&[1, 0]).b(&[1, 0]).b(&[0, 1]);
    vec![("dead_negative", dead_negative.0), ("live_and_dead", live_and_dead.0)]
}

// --- bridge_status seeds: a running out bridge's file with losses, and a fresh in bridge's.
fn bridge_status_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let common = "channel aeron:udp?endpoint=10.0.0.2:40123\naeron_stream_id 1001\naeron_dir /dev/shm/aeron-a/bridge-77\n";
    let busy = format!(
        "{common}connected 1\nmessages 7000\nbytes 448000\nback_pressure 3\ndropped 12\nreconnects 1\n\
         source_position 1048576\nresume_position 1048640\nupdated_ms 1764000000000\n\
         loss 4096 4864 12 dropped\nloss 900000 1000000 - gap\n"
    );
    let fresh = format!(
        "{common}connected 0\nmessages 0\nbytes 0\nback_pressure 0\ndropped 0\nreconnects 0\n\
         source_position -1\nresume_position -1\nupdated_ms 0\n"
    );
    vec![("busy", busy.into_bytes()), ("fresh", fresh.into_bytes())]
}

// --- bridge_in seeds: a local stream taking 1 KiB messages, 4 KiB Aeron terms and 64-byte
// frames; two honest sources interleaving messages of every size (some fragmented, some longer
// than the local stream takes), one losing its driver twice (frames in flight arriving late,
// its successor offering again what had arrived), images replaced and let go; then forgers,
// push-back and refusals under both policies.
struct InSeed {
    seed: Seed,
    honest: usize,
}

impl InSeed {
    /// max 400, `hold`, 4 KiB terms, 64-byte frames, `honest` sources (the second one's
    /// initial term id `i32::MAX`: its successors' wrap).
    fn new(hold: bool, honest: usize) -> Self {
        let mut seed = Seed::default();
        seed.u16(399).b(&[hold as u8, 0, 1, 1, honest as u8 - 1]);
        for s in 0..honest {
            seed.b(&[if s == 1 { 10 } else { 0 }, 0, 0]);
        }
        InSeed { seed, honest }
    }

    fn op(&mut self, ctl: u8, s: usize) -> &mut Seed {
        self.seed.b(&[ctl]);
        if self.honest > 1 {
            self.seed.b(&[s as u8]);
        }
        &mut self.seed
    }

    /// A message of 9 + `len` bytes (`len` < 64), or of 9 + `big` bytes (< 512), no marks.
    fn send(&mut self, s: usize, len: u8) {
        self.op(0, s).b(&[0, len, 4]);
    }

    fn send_big(&mut self, s: usize, big: u16) {
        self.op(0, s).b(&[5]).u16(big).b(&[4]);
    }

    /// A message after its publisher began a new session (positions from 0).
    fn send_fresh(&mut self, s: usize, len: u8) {
        self.op(0, s).b(&[0, len, 0, 0]);
    }

    fn arrive(&mut self, s: usize, n: u8) {
        self.op(4, s).b(&[n - 1]);
    }

    fn poll(&mut self, limit: u8) {
        self.op(6, 0).b(&[limit - 1]);
    }

    fn lose_driver(&mut self, s: usize, late: u8, counted: u16) {
        self.op(8, s).b(&[late]).u16(counted);
    }

    fn replace(&mut self, s: usize) {
        self.op(9, s);
    }

    fn let_go(&mut self, s: usize) {
        self.op(10, s);
    }

    fn mode(&mut self, m: u8) {
        self.op(13, 0).b(&[m]);
    }
}

fn bridge_in_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut steady = InSeed::new(true, 2);
    for i in 0..40u8 {
        steady.send(0, i % 50);
        steady.send(1, (3 * i) % 60);
        if i % 8 == 3 {
            steady.send_big(0, 200 + u16::from(i));
            steady.send_big(1, 500);
        }
        steady.arrive(0, 16);
        steady.arrive(1, 12);
        steady.poll(40);
        if i == 20 {
            // A new session of the publisher; frames in flight, 2 of them arrive late; the
            // counter is 4 frames back: the successor offers again what had arrived.
            steady.send_fresh(1, 5);
            steady.send(1, 7);
            steady.send(1, 8);
            steady.arrive(1, 1);
            steady.lose_driver(1, 2, 4);
            steady.poll(64);
        }
        if i == 30 {
            // Everything counted as sent, and the last message lost in flight: a hole.
            steady.let_go(1);
            steady.send(1, 9);
            steady.lose_driver(1, 0, 0);
        }
        if i == 35 {
            // Half a fragmented message arrives and is polled; the driver dies counting it
            // unsent; the old images, drained, go before the successor is listed (the source has
            // no image for a poll), and it offers the message again whole.
            steady.poll(64);
            steady.poll(64);
            steady.send_big(1, 300);
            steady.arrive(1, 2);
            steady.poll(64);
            steady.lose_driver(1, 0, 5);
            for _ in 0..4 {
                steady.let_go(1);
            }
            steady.poll(64);
            steady.poll(64);
        }
    }
    let mut hostile = InSeed::new(false, 2);
    hostile.seed.0 = {
        let mut v = steady.seed.0.clone();
        v[2] = 0; // the drop policy
        v
    };
    let mut h = hostile;
    h.mode(0);
    h.send(0, 20);
    h.arrive(0, 4);
    h.poll(8);
    h.mode(1);
    h.send(1, 20);
    h.arrive(1, 4);
    h.poll(8);
    h.mode(2);
    h.replace(0);
    h.send(0, 20);
    h.arrive(0, 4);
    // Forgers: images (a new session, then its own successor) and fragments with an edge
    // reserved value (i64::MAX), bad bounds, honest-looking positions marked "sent again".
    h.op(11, 0).u16(77).b(&[1, 1]).u16(64).b(&[0]);
    h.op(11, 0).b(&[0, 1, 1, 1]).u16(64).b(&[0]);
    for k in 0..24u8 {
        h.op(12, 0).b(&[k % 2, 0x80 | 0x40, 2 + (k % 2), 0x40, 0x10, 8 + (k % 4)]).u16(20).b(&[k % 8, 2]);
        h.op(12, 0).b(&[k % 2, 0x80 | 0x40, 0, 2]).u16(5).b(&[1 + (k % 7), 3]);
    }
    h.poll(64);
    h.poll(64);
    vec![("steady", steady.seed.0), ("hostile", h.seed.0)]
}

// --- doorbell seeds: ops 0 peer write (word index, value), 1 ring, 2 ring always, 3 ring the
// writer, 4 arm (1: readers), 5 sleep (timeout us), 6 arm and ring, 7 budget (news).
fn doorbell_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut honest = Seed::default();
    honest.b(&[4, 1, 1, 5, 3]).b(&[4, 1, 5, 2]).b(&[6, 6, 3, 4, 0, 1, 5, 1]).b(&[7, 0, 7, 0, 7, 1]);
    let mut hostile = Seed::default();
    // The sleeper count at i32::MAX and i32::MIN (edge indices 9, 10), an armed word forged to
    // -1, a passed ring forged, then arms, rings and sleeps over them.
    hostile.b(&[0, 4, 9, 4, 1, 1, 5, 1]).b(&[0, 4, 10, 4, 1, 1, 5, 1]);
    hostile.b(&[0, 0, 2, 1, 0, 5, 0, 4, 1, 5, 2]).b(&[0, 1, 9, 6, 0, 3, 12, 3, 6]);
    vec![("honest", honest.0), ("hostile", hostile.0)]
}

fn seeds(target: &str) -> Vec<(&'static str, Vec<u8>)> {
    match target {
        "doorbell" => doorbell_seeds(),
        "bridge_status" => bridge_status_seeds(),
        "bridge_in" => bridge_in_seeds(),
        "journal" => journal_seeds(),
        "term_reader" => term_seeds(),
        "file_validation" => file_seeds(),
        "ops_oracle" => ops_seeds(),
        "assembler" => assembler_seeds(),
        "unblock" => unblock_seeds(),
        _ => unreachable!(),
    }
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target)
}

#[test]
fn ops_seeds_publish_rotate_and_deliver() {
    for (name, bytes) in ops_seeds() {
        let stats = run_ops(&bytes);
        assert!(stats.published >= 8 && stats.fragments >= 20, "{name}: {stats:?}");
        assert!(stats.terms >= 3, "{name}: {stats:?}");
        match name {
            "steady" => assert!(
                stats.published >= 30 && stats.joins == 2 && stats.copied_readers == 1,
                "{name}: {stats:?}"
            ),
            "claims" => {
                assert!(stats.published >= 20 && stats.joins + stats.refused_joins >= 3, "{name}: {stats:?}")
            }
            "churn" => assert!(stats.joins >= 30, "{name}: {stats:?}"),
            "forged" => {
                assert!(stats.forged >= 4 && stats.evicted >= 1 && stats.published >= 20, "{name}: {stats:?}")
            }
            _ => assert!(stats.max_position > 0, "{name}: {stats:?}"),
        }
    }
}

#[test]
fn term_and_file_seeds_reach_the_code_under_test() {
    for (name, bytes) in term_seeds() {
        let delivered = run_term_reader(&bytes);
        assert!(delivered >= 3 || name == "corrupt", "{name}: {delivered} fragments");
    }
    for (name, bytes) in file_seeds() {
        let accepted = run_file_validation(&bytes);
        let want = !matches!(name, "patched-log" | "tiny-log-file" | "raw" | "dead-log-file");
        assert_eq!(accepted, want, "{name}");
    }
}

#[test]
fn bridge_in_seeds_deliver_lose_drivers_and_skip_duplicates() {
    for (name, bytes) in bridge_in_seeds() {
        let stats = run_bridge_in(&bytes);
        assert!(stats.delivered >= 80 && stats.dropped >= 4 && stats.successors >= 2, "{name}: {stats:?}");
        assert!(stats.duplicates >= 2 && stats.lost_on_the_wire >= 1, "{name}: {stats:?}");
        if name == "hostile" {
            assert!(
                stats.bad_positions >= 1 && stats.back_pressure >= 1 && stats.forged >= 40,
                "{name}: {stats:?}"
            );
        }
    }
}

#[test]
fn bridge_status_seeds_parse() {
    for (name, bytes) in bridge_status_seeds() {
        let text = std::str::from_utf8(&bytes).unwrap();
        let b = shmlog_bridge::status::BridgeInfo::parse(
            "s",
            shmlog_bridge::status::BridgeDirection::In,
            7,
            text,
        );
        assert!(b.is_some(), "seed {name} must parse, or the target only tests the refusal");
    }
}

#[test]
fn seeds_run_clean() {
    for (target, run) in TARGETS {
        for (_, bytes) in seeds(target) {
            run(&bytes);
        }
    }
}

/// The seeds that stay in memory (heap regions only), for Miri: the appender, the reader,
/// claims, rotation, reader slots, flow control, stray slot words and the assembler with every
/// unsafe access checked. `.ci/sanitizers.sh` runs it under `cargo miri test`.
#[test]
fn miri_in_memory_seeds() {
    for (name, bytes) in term_seeds() {
        let delivered = run_term_reader(&bytes);
        assert!(delivered >= 3 || name == "corrupt", "{name}: {delivered} fragments");
    }
    for (name, bytes) in ops_seeds() {
        if name != "churn" {
            let stats = run_ops(&bytes);
            assert!(stats.published >= 8 && stats.terms >= 3, "{name}: {stats:?}");
        }
    }
    for (_, bytes) in assembler_seeds() {
        assembler(&bytes);
    }
    for (name, bytes) in file_seeds() {
        if name == "slots" {
            file_validation(&bytes);
        }
    }
}

#[test]
fn committed_corpus_runs_clean() {
    for (target, run) in TARGETS {
        let Ok(dir) = std::fs::read_dir(corpus_dir(target)) else { continue };
        for entry in dir {
            let path = entry.unwrap().path();
            run(&std::fs::read(&path).unwrap());
        }
    }
}

/// Replays the file named by `SHMLOG_FUZZ_REPLAY` through the target `SHMLOG_FUZZ_TARGET`.
#[test]
fn replay() {
    let (Some(target), Some(file)) =
        (std::env::var_os("SHMLOG_FUZZ_TARGET"), std::env::var_os("SHMLOG_FUZZ_REPLAY"))
    else {
        return;
    };
    let run = TARGETS.iter().find(|(t, _)| *t == target).expect("a target name").1;
    run(&std::fs::read(file).unwrap());
}

#[test]
fn harness_survives_random_inputs() {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (_, run) in TARGETS {
        for i in 0..300 {
            let len = (next() % [16, 200, 4000][i % 3]) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            run(&bytes);
        }
    }
}

/// Writes the seed corpus: `cargo test -- --ignored write_seed_corpus`.
#[test]
#[ignore]
fn write_seed_corpus() {
    for (target, _) in TARGETS {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds(target) {
            std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
        }
    }
}

/// Saves the first random input (as `harness_survives_random_inputs` makes them) that fails, to
/// `target/failing-input`, for `replay` with `SHMLOG_FUZZ_TRACE=1`:
/// `cargo test -- --ignored find_failing_random_input`.
#[test]
#[ignore]
fn find_failing_random_input() {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for (t, run) in TARGETS {
        for i in 0..300 {
            let len = (next() % [16, 200, 4000][i % 3]) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if std::panic::catch_unwind(|| run(&bytes)).is_err() {
                let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/failing-input");
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &bytes).unwrap();
                panic!("{t} input {i} failed, saved");
            }
        }
    }
}
