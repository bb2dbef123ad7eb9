//! A retention policy: how much of a recording (or of a whole journal) to keep. Plain data, kept
//! in catalog words (three per policy, zero meaning "no limit"), so any process can read the
//! policy a recorder applies, and tools can show it.

use std::time::Duration;

/// What to keep; everything older is purged, a whole segment at a time, oldest first.
///
/// Every limit is optional (`None`: no limit of that kind); a segment goes when any limit says
/// so. A recording's newest segment is kept while it is recorded into, whatever the limits, and
/// nothing a registered durable reader has not read yet is ever purged
/// (see `journal::DurableReader`).
///
/// ```
/// use shmlog::journal::Retention;
/// use std::time::Duration;
/// let keep = Retention::none().max_age(Duration::from_secs(7 * 86_400)).max_bytes(100 << 30);
/// assert!(!keep.is_none());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Retention {
    /// Segments whose last write is older than this go.
    pub max_age: Option<Duration>,
    /// Bytes of stream positions to keep at most (whole segments: a little less).
    pub max_bytes: Option<u64>,
    /// Segments to keep at most.
    pub max_segments: Option<u64>,
}

impl Retention {
    /// No limit: keep everything (the default).
    pub const fn none() -> Self {
        Self { max_age: None, max_bytes: None, max_segments: None }
    }

    /// Purge segments whose last write is older than `age`.
    pub const fn max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// Keep at most `bytes` of stream positions.
    pub const fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = Some(bytes);
        self
    }

    /// Keep at most `segments` segments (at least one is kept while recording).
    pub const fn max_segments(mut self, segments: u64) -> Self {
        self.max_segments = Some(segments);
        self
    }

    /// `true` if no limit is set.
    pub fn is_none(&self) -> bool {
        self.max_age.is_none() && self.max_bytes.is_none() && self.max_segments.is_none()
    }

    /// The three catalog words: age in nanoseconds, bytes, segments (0: no limit; a limit of
    /// zero is stored as 1, the smallest there is).
    pub(crate) fn to_words(self) -> [i64; 3] {
        let word = |v: Option<u64>| v.map_or(0, |v| v.clamp(1, i64::MAX as u64) as i64);
        [
            word(self.max_age.map(|d| d.as_nanos().min(i64::MAX as u128) as u64)),
            word(self.max_bytes),
            word(self.max_segments),
        ]
    }

    /// The policy of three catalog words; `None` if one is negative (not a policy we wrote).
    pub(crate) fn from_words(w: [i64; 3]) -> Option<Self> {
        if w.iter().any(|&v| v < 0) {
            return None;
        }
        let limit = |v: i64| (v > 0).then_some(v as u64);
        Some(Self {
            max_age: limit(w[0]).map(Duration::from_nanos),
            max_bytes: limit(w[1]),
            max_segments: limit(w[2]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_survives_its_catalog_words() {
        for p in [
            Retention::none(),
            Retention::none().max_age(Duration::from_secs(3600)),
            Retention::none().max_bytes(1 << 30).max_segments(8),
            Retention::none().max_age(Duration::from_nanos(1)).max_bytes(1).max_segments(1),
        ] {
            assert_eq!(Retention::from_words(p.to_words()), Some(p));
        }
        assert_eq!(Retention::from_words([0, -1, 0]), None);
        // A limit of zero is the smallest one there is.
        assert_eq!(Retention::none().max_segments(0).to_words(), [0, 0, 1]);
    }
}
