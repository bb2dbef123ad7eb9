//! The out bridge's Aeron stream, one stream across lost media drivers.
//!
//! An Aeron image is reliable and in order, but it dies with the driver that sends it. When the
//! out bridge loses its driver it offers again every message the dead driver may not have sent
//! (its sender position counter, read from the dead driver's still-mapped counters, is stored
//! after the send, so some of those had arrived). For the far side to tell which, the new
//! publication continues the old stream: it gets the old session id + 1, the old term length
//! and MTU, and an initial term id and offset that put its first frame exactly where the first
//! message offered again stood (Aeron's `init-term-id`, `term-id` and `term-offset` channel
//! parameters, with `init-term-id` = `term-id`, the term that position lies in). Offered again
//! in the same order, the messages take the same frames at the same positions, so the in
//! bridge knows a frame it has already by its position alone (`inbound/sources.rs`), whatever
//! the source positions say.
//!
//! Positions here are the stream's: the first publication's, counted from its initial term id.
//! A later publication's own positions are its base less.

use super::{recycle, Msg};
use aeron_rs::exclusive_publication::ExclusivePublication;
use std::collections::VecDeque;

/// What a publication of the stream must share with the first one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    /// Session id of the current publication (or the last one).
    session: i32,
    /// The term id the stream's positions count from.
    initial_term_id: i32,
    term_length: i32,
    mtu: i32,
}

/// A message a publication took: where it starts and ends in the stream, and its copy.
struct Taken {
    start: i64,
    end: i64,
    msg: Msg,
}

/// The out bridge's Aeron stream.
pub(super) struct AeronStream {
    /// `None` until the first publication.
    id: Option<Identity>,
    /// Stream position of the current publication's position 0.
    base: i64,
    /// Where the next message offered begins (the end of the last one taken, before any
    /// padding the next one may need).
    end: i64,
    /// After a lost driver: where the next publication must start.
    resume_at: Option<i64>,
    /// Copies of the messages the current publication took within its last term (it never
    /// holds more unsent): what a lost driver had not sent is offered again from here.
    offered: VecDeque<Taken>,
}

impl AeronStream {
    pub(super) fn new() -> Self {
        AeronStream { id: None, base: 0, end: 0, resume_at: None, offered: VecDeque::new() }
    }

    /// The channel for the next publication: `channel` itself, or, after a lost driver, with the
    /// parameters that make the publication continue this stream.
    pub(super) fn channel_for(&self, channel: &str) -> Option<String> {
        let (id, at) = (self.id?, self.resume_at?);
        let bits = id.term_length.trailing_zeros();
        let term = id.initial_term_id.wrapping_add((at >> bits) as i32);
        let offset = at & (i64::from(id.term_length) - 1);
        let params = [
            ("session-id", i64::from(id.session.wrapping_add(1))),
            ("init-term-id", i64::from(term)),
            ("term-id", i64::from(term)),
            ("term-offset", offset),
            ("term-length", i64::from(id.term_length)),
            ("mtu", i64::from(id.mtu)),
        ];
        let mut pinned = without_params(channel, &params.map(|(k, _)| k));
        for (k, v) in params {
            pinned.push(if pinned.contains('?') { '|' } else { '?' });
            pinned.push_str(&format!("{k}={v}"));
        }
        Some(pinned)
    }

    /// A new publication `p` was made (from [`AeronStream::channel_for`]'s channel, if it gave
    /// one): it continues the stream if it starts where asked; else it begins a new stream
    /// (the first publication, or a driver that did not take the parameters: the far side then
    /// takes the messages offered again as a new source's, and may get some twice).
    pub(super) fn adopt(&mut self, p: &ExclusivePublication) {
        let fresh = Identity {
            session: p.session_id(),
            initial_term_id: p.initial_term_id(),
            term_length: p.term_buffer_length(),
            mtu: p.max_payload_length() + 32,
        };
        let position = p.position().unwrap_or(0);
        let continued = match (self.id, self.resume_at.take()) {
            (Some(id), Some(at)) => {
                let terms = i64::from(fresh.initial_term_id.wrapping_sub(id.initial_term_id));
                let base = terms << id.term_length.trailing_zeros();
                let same = Identity { session: id.session.wrapping_add(1), ..id } == fresh;
                (same && terms >= 0 && base + position == at).then_some((id, base))
            }
            _ => None,
        };
        match continued {
            Some((id, base)) => {
                self.id = Some(Identity { session: fresh.session, ..id });
                self.base = base;
                self.end = base + position;
            }
            None => {
                if self.id.is_some() {
                    eprintln!(
                        "shmlog bridge out: the new publication (session {}) does not continue the Aeron stream; \
                         the far side may get messages offered again twice",
                        fresh.session
                    );
                }
                self.id = Some(fresh);
                self.base = 0;
                self.end = position;
            }
        }
    }

    /// The parameters asked for could not be used: the next publication begins a new stream.
    pub(super) fn give_up_continuing(&mut self) {
        self.resume_at = None;
    }

    /// The current publication took `m`, ending at its own position `end`; keeps its copy,
    /// and lets go of those more than a term (`term`) behind.
    pub(super) fn taken(&mut self, pool: &mut Vec<Vec<u8>>, term: i64, end: i64, m: Msg) {
        let end = self.base.saturating_add(end);
        while self.offered.front().is_some_and(|t| t.end.saturating_add(term) < end) {
            if let Some(old) = self.offered.pop_front() {
                recycle(pool, old.msg.bytes);
            }
        }
        self.offered.push_back(Taken { start: self.end, end, msg: m });
        self.end = end;
    }

    /// The driver was lost; its sender had reached `sent_to` (the publication's own position),
    /// if its counter could be read. Returns, in order, the messages it had not sent in full
    /// (with no counter, every copy kept: the far side skips what it has), and makes the next
    /// publication start where the first of them did (or where the stream ends).
    pub(super) fn lost(&mut self, pool: &mut Vec<Vec<u8>>, sent_to: Option<i64>) -> Vec<Msg> {
        let first = match sent_to.map(|p| self.base.saturating_add(p)) {
            Some(sent_to) => self.offered.iter().position(|t| t.end > sent_to).unwrap_or(self.offered.len()),
            None => 0,
        };
        let unsent: Vec<Taken> = self.offered.drain(first..).collect();
        for t in self.offered.drain(..) {
            recycle(pool, t.msg.bytes);
        }
        if self.id.is_some() {
            self.resume_at = Some(unsent.first().map_or(self.end, |t| t.start));
        }
        unsent.into_iter().map(|t| t.msg).collect()
    }
}

/// `channel` without the parameters named in `keys` (the stream's own replace them).
fn without_params(channel: &str, keys: &[&str]) -> String {
    let Some((head, params)) = channel.split_once('?') else { return channel.to_owned() };
    let kept: Vec<&str> = params
        .split('|')
        .filter(|p| !p.is_empty() && !keys.contains(&p.split('=').next().unwrap_or("")))
        .collect();
    if kept.is_empty() {
        head.to_owned()
    } else {
        format!("{head}?{}", kept.join("|"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(start: i64) -> Msg {
        Msg { bytes: vec![1; 10], start, end: start + 64, session: 1, flags: 0 }
    }

    fn stream(session: i32, initial_term_id: i32, term_length: i32) -> AeronStream {
        let mut s = AeronStream::new();
        s.id = Some(Identity { session, initial_term_id, term_length, mtu: 1408 });
        s
    }

    /// After a lost driver the next publication asks to start where the first message the
    /// driver had not sent in full started, in the stream's terms, with the next session id;
    /// the channel's own settings of those parameters give way.
    #[test]
    fn the_next_publication_continues_the_stream_where_the_unsent_messages_start() {
        let mut s = stream(i32::MAX, -5, 1 << 16);
        let mut pool = Vec::new();
        s.end = (3 << 16) + 4000;
        for (k, end) in [(0, (3 << 16) + 4064), (1, (3 << 16) + 4128), (2, (3 << 16) + 4192)] {
            s.taken(&mut pool, 1 << 16, end, msg(k * 64));
        }
        let unsent = s.lost(&mut pool, Some((3 << 16) + 4100));
        assert_eq!(unsent.iter().map(|m| m.start).collect::<Vec<_>>(), [64, 128]);
        assert_eq!(s.resume_at, Some((3 << 16) + 4064));
        let ch = s.channel_for("aeron:udp?endpoint=10.0.0.2:40123|session-id=9|mtu=8960").unwrap();
        assert_eq!(
            ch,
            "aeron:udp?endpoint=10.0.0.2:40123|session-id=-2147483648|init-term-id=-2|term-id=-2\
             |term-offset=4064|term-length=65536|mtu=1408"
        );
        assert_eq!(stream(1, 0, 1 << 16).channel_for("aeron:udp"), None, "nothing to continue");
        let mut t = stream(1, 0, 1 << 16);
        t.resume_at = Some(0);
        assert_eq!(
            t.channel_for("aeron:udp").unwrap(),
            "aeron:udp?session-id=2|init-term-id=0|term-id=0|term-offset=0|term-length=65536|mtu=1408"
        );
        // Nothing sent unread, or no counter: the next publication starts at the stream's end.
        for sent_to in [Some(1 << 20), None] {
            let mut u = stream(1, 0, 1 << 16);
            u.taken(&mut pool, 1 << 16, 96, msg(0));
            let unsent = u.lost(&mut pool, sent_to);
            assert_eq!(
                (unsent.len(), u.resume_at),
                (usize::from(sent_to.is_none()), Some(if sent_to.is_none() { 0 } else { 96 }))
            );
        }
    }

    /// Copies more than a term behind the newest are let go: a publication never holds more
    /// unsent.
    #[test]
    fn copies_are_kept_for_a_term() {
        let mut s = stream(1, 0, 1 << 16);
        let mut pool = Vec::new();
        for k in 0..10 {
            s.taken(&mut pool, 256, 96 * (k + 1), msg(k * 64));
        }
        assert_eq!(s.offered.len(), 3);
        assert_eq!(pool.len(), 7);
    }

    #[test]
    fn parameters_are_replaced_and_others_kept() {
        assert_eq!(
            without_params("aeron:udp?endpoint=a:1|mtu=8960|ttl=4", &["mtu"]),
            "aeron:udp?endpoint=a:1|ttl=4"
        );
        assert_eq!(without_params("aeron:udp?mtu=8960", &["mtu"]), "aeron:udp");
        assert_eq!(without_params("aeron:udp", &["mtu"]), "aeron:udp");
    }
}
