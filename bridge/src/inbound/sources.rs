//! Which images carry which source, and which of their frames are new: the in bridge's ledger
//! against duplicates and reordering.
//!
//! A **source** is one far out bridge's Aeron stream. Aeron delivers one image reliably and in
//! order, but a source outlives its images: when the out bridge loses its media driver it
//! starts a new publication that continues the same stream. The new publication's session id
//! is the old one + 1 and its positions are the old stream's (its initial term id is the term
//! it starts in, at the offset where the old stream stood before the first message the dead
//! driver may not have sent, see `outbound/stream.rs`); so its frames lie at the very stream
//! positions the old image's did, and its first frames are the ones the old image may have
//! carried already. An image Aeron replaced after a timeout (same session id, same initial
//! term id) continues its stream the same way.
//!
//! So each source keeps one number, the stream position up to which its frames were taken
//! (`consumed`), and every frame is judged by where it ends:
//! - at or below `consumed`: taken already from an earlier image of the source, a duplicate;
//!   skipped (a message's first frame is counted in `duplicates`);
//! - above it: new, in the source's order, whichever image brings it.
//!
//! Nothing is compared with another source's positions, and source positions (which start again
//! with each session of the out bridge's publisher) play no part: a second source cannot make
//! the bridge drop a message of the first, and a new session of the source whose first message
//! died with the driver is still new by its stream position.
//!
//! **Order across images.** The Aeron client polls images round robin, so an old image still
//! holding frames (the bridge held by its local stream) and its successor interleave. Frames
//! are new only above `consumed`, so whichever image brings a frame first, the other's copy is
//! then a duplicate: the order is the stream's. The one decision that must wait is a hole: a
//! successor that starts above `consumed` (what the dead driver counted as sent but never
//! arrived) is taken only once every older image of its source has nothing more to give
//! ([`Sources::may_poll`]): an older image may still hold what fills it.

use super::accounts::Expect;
use super::assembly::Assembly;

/// Sources no image carries any more that are kept, for a successor image to continue (the
/// least recently left is forgotten first). An out bridge whose driver died starts its next
/// publication within seconds; a source forgotten before that is taken as a new one.
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub const MAX_RETIRED: usize = 64;

/// An image as the subscription lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(shmlog_fuzz), allow(unreachable_pub))]
pub struct ImageInfo {
    /// Its session id (one per publication of the far side).
    pub session: i32,
    /// Its correlation id (one per image: a session's image that Aeron replaced has a new one).
    pub correlation: i64,
    /// The term id its positions count from.
    pub initial_term_id: i32,
    /// Its term length (a power of two).
    pub term_length: i32,
    /// The position, in its own terms, where the subscription joined it.
    pub join_position: i64,
}

/// An image of the subscription's list, as the ledger keeps it.
#[derive(Debug)]
struct Image {
    info: ImageInfo,
    /// The source it carries, and its index in the sources (until the next sync).
    source: u64,
    at: usize,
    /// Its order among the images of that source.
    member: u64,
    /// Add to one of its positions to get the source's stream position.
    base: i64,
    /// Where it joined, in the source's stream positions.
    join: i64,
    /// A frame of it was taken (or skipped): its join was settled against the source.
    started: bool,
    /// Its last poll gave nothing.
    idle: bool,
}

/// One far out bridge's Aeron stream, and what the in bridge made of it so far.
#[derive(Debug)]
pub(crate) struct Source {
    id: u64,
    /// Session id of its newest image: a successor has a later one (or the same, replaced).
    session: i32,
    /// The term id its stream positions count from.
    initial_term_id: i32,
    term_length: i32,
    /// Stream position up to which its frames were taken.
    consumed: i64,
    /// Where its newest image joined, in its stream positions.
    newest_join: i64,
    /// Images it had.
    members: u64,
    /// When it was last used, and when it lost its last image (`None`: it has one).
    last_used: u64,
    retired: Option<u64>,
    /// The message it is assembling.
    pub(crate) assembly: Assembly,
    /// What it expects of its next message.
    pub(crate) expect: Expect,
}

/// What a frame is to its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// New: taken in the source's order. `before`: the stream position just before it; `hole`:
    /// frames between the source's last one and this image's start never arrived.
    New { source: usize, before: i64, hole: bool },
    /// Taken already from an earlier image of the source.
    Duplicate,
}

/// The images of the subscription and the sources they carry.
#[derive(Debug, Default)]
pub(crate) struct Sources {
    /// The subscription's images, in its order (`ImageInfo` indexes).
    images: Vec<Image>,
    sources: Vec<Source>,
    next_id: u64,
    clock: u64,
}

impl Sources {
    /// Takes the subscription's image list (before a poll): keeps the images it had, links each
    /// new one to the source it continues (or makes a new source), and retires the sources no
    /// image carries any more.
    pub(crate) fn sync(&mut self, list: &[ImageInfo]) {
        self.clock += 1;
        if self.images.len() == list.len()
            && self.images.iter().zip(list).all(|(img, info)| img.info == *info)
        {
            return;
        }
        let mut old = std::mem::take(&mut self.images);
        let mut fresh = Vec::new();
        for (i, info) in list.iter().enumerate() {
            match old.iter().position(|img| img.info == *info) {
                Some(k) => self.images.push(old.swap_remove(k)),
                None => {
                    // Placeholder until linked below, in session order, so that an image and
                    // its successor listed together for the first time link in theirs.
                    fresh.push(i);
                    self.images.push(Image {
                        info: *info,
                        source: u64::MAX,
                        at: 0,
                        member: 0,
                        base: 0,
                        join: 0,
                        started: false,
                        idle: false,
                    });
                }
            }
        }
        fresh.sort_by_key(|&i| list[i].session);
        for i in fresh {
            self.images[i] = self.link(list[i]);
        }
        let clock = self.clock;
        for s in &mut self.sources {
            let listed = self.images.iter().any(|img| img.source == s.id);
            match (listed, s.retired) {
                (false, None) => {
                    s.retired = Some(clock);
                    // Its unfinished message was cut off with its last image: the source goes
                    // back to just before it, so a successor that carries it again has it whole
                    // (one that does not reports it in its gap).
                    if let Some(back) = s.assembly.release() {
                        s.consumed = back;
                    }
                }
                (true, Some(_)) => s.retired = None,
                _ => {}
            }
        }
        let retired = self.sources.iter().filter(|s| s.retired.is_some()).count();
        for _ in MAX_RETIRED..retired {
            let oldest = (0..self.sources.len())
                .filter(|&i| self.sources[i].retired.is_some())
                .min_by_key(|&i| self.sources[i].retired);
            if let Some(i) = oldest {
                self.sources.swap_remove(i);
            }
        }
        for img in &mut self.images {
            img.at = self.sources.iter().position(|s| s.id == img.source).unwrap_or(usize::MAX);
        }
    }

    /// The image `info` as a member of the source it continues, or of a new source.
    fn link(&mut self, info: ImageInfo) -> Image {
        let continued = self.sources.iter_mut().find_map(|s| {
            let base = continues(s, &info)?;
            Some((s, base))
        });
        let (source, base) = match continued {
            Some((s, base)) => {
                s.session = info.session;
                s.newest_join = base.saturating_add(info.join_position);
                (s, base)
            }
            None => {
                self.next_id += 1;
                self.sources.push(Source {
                    id: self.next_id,
                    session: info.session,
                    initial_term_id: info.initial_term_id,
                    term_length: info.term_length,
                    consumed: info.join_position,
                    newest_join: info.join_position,
                    members: 0,
                    last_used: self.clock,
                    retired: None,
                    assembly: Assembly::new(),
                    expect: Expect::new(),
                });
                let s = self.sources.last_mut().expect("just pushed");
                (s, 0)
            }
        };
        source.members += 1;
        source.retired = None;
        Image {
            info,
            source: source.id,
            at: 0,
            member: source.members,
            base,
            join: base.saturating_add(info.join_position),
            started: false,
            idle: false,
        }
    }

    /// Whether image `i` may be polled now. Only an image whose start leaves a hole in its
    /// source's stream waits: until every older image of the source has nothing more to give.
    pub(crate) fn may_poll(&self, i: usize) -> bool {
        let Some(img) = self.images.get(i) else { return false };
        if img.started || self.source(img.source).is_none_or(|s| img.join <= s.consumed) {
            return true;
        }
        self.images.iter().all(|o| o.source != img.source || o.member >= img.member || o.idle)
    }

    /// Image `i` was polled and gave `fragments`.
    pub(crate) fn polled(&mut self, i: usize, fragments: usize) {
        if let Some(img) = self.images.get_mut(i) {
            img.idle = fragments == 0;
        }
    }

    /// Judges a frame of image `i` that ends at `position` (in the image's own terms); `None`
    /// if it is not a frame of a listed image, or its position cannot be one.
    #[inline]
    pub(crate) fn arrive(&mut self, i: usize, position: i64) -> Option<Arrival> {
        let img = self.images.get_mut(i)?;
        let end = img.base.checked_add(position)?;
        let (join, first, at) = (img.join, !std::mem::replace(&mut img.started, true), img.at);
        let s = self.sources.get_mut(at)?;
        s.last_used = self.clock;
        let hole = first && join > s.consumed;
        if hole {
            s.consumed = join;
        }
        if end <= s.consumed {
            return Some(Arrival::Duplicate);
        }
        let before = std::mem::replace(&mut s.consumed, end);
        Some(Arrival::New { source: at, before, hole })
    }

    fn source(&self, id: u64) -> Option<&Source> {
        self.sources.iter().find(|s| s.id == id)
    }

    /// Source `at` (an index from [`Arrival::New`], valid until the next [`Sources::sync`]).
    pub(crate) fn get_mut(&mut self, at: usize) -> &mut Source {
        &mut self.sources[at]
    }

    /// Every source, listed or retired.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Source> {
        self.sources.iter_mut()
    }

    /// Images listed.
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn image_count(&self) -> usize {
        self.images.len()
    }

    /// Sources kept (listed and retired).
    #[cfg(any(test, shmlog_fuzz))]
    pub(crate) fn source_count(&self) -> usize {
        self.sources.len()
    }
}

impl Source {
    /// When it was last given a frame.
    pub(crate) fn last_used(&self) -> u64 {
        self.last_used
    }
}

/// Session ids a successor may be ahead of its source's newest image: each lost driver adds
/// one, and a publication whose driver died before its image reached this bridge is never seen
/// (a driver in a crash loop). What keeps an unrelated image out is mostly the position rule
/// (within two terms of what was taken, for a random initial term id about 1 in 10⁹); the session
/// rule only narrows that further.
pub(super) const MAX_SESSION_STEP: u32 = 1 << 16;

/// If `info` continues source `s`'s stream, the base that turns the image's positions into the
/// stream's: the same term length, the session id of its newest image + 1 (a successor after a
/// lost driver; up to [`MAX_SESSION_STEP`] more if successors died unseen) or the same (an image
/// Aeron replaced), an initial term id at or after the stream's, and a start within two terms of
/// what was taken: no more below it (an out bridge offers again at most a term), and no more
/// above it or above its newest image's start (Aeron's flow control keeps a sender within a
/// receiver window, at most half a term, of what its image has been polled to). A random image
/// of another sender almost never lines up so.
fn continues(s: &Source, info: &ImageInfo) -> Option<i64> {
    let successor = info.session.wrapping_sub(s.session) as u32 <= MAX_SESSION_STEP;
    if !successor || info.term_length != s.term_length || info.term_length <= 0 {
        return None;
    }
    let bits = positive_power_of_two(info.term_length)?;
    let terms = i64::from(info.initial_term_id.wrapping_sub(s.initial_term_id));
    if terms < 0 {
        return None;
    }
    let base = terms << bits;
    let join = base.checked_add(info.join_position)?;
    let slack = 2 * i64::from(info.term_length);
    let above = s.consumed.max(s.newest_join).saturating_add(slack);
    (join >= s.consumed.saturating_sub(slack) && join <= above).then_some(base)
}

/// `log2(n)` if `n` is a power of two.
fn positive_power_of_two(n: i32) -> Option<u32> {
    (n > 0 && n.count_ones() == 1).then(|| n.trailing_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERM: i32 = 1 << 16;

    fn image(session: i32, correlation: i64, initial_term_id: i32, join_position: i64) -> ImageInfo {
        ImageInfo { session, correlation, initial_term_id, term_length: TERM, join_position }
    }

    fn new_at(a: Option<Arrival>) -> Option<(i64, bool)> {
        match a? {
            Arrival::New { before, hole, .. } => Some((before, hole)),
            Arrival::Duplicate => None,
        }
    }

    /// A successor after a lost driver (session + 1, positions continued from a later term)
    /// is one source with its predecessor: frames it brings again are duplicates, the rest new;
    /// another image is another source, whatever its positions.
    #[test]
    fn a_successor_continues_its_source_and_another_image_does_not() {
        let mut s = Sources::default();
        let old = image(10, 1, 100, 0);
        s.sync(&[old]);
        assert_eq!(new_at(s.arrive(0, 96)), Some((0, false)));
        assert_eq!(new_at(s.arrive(0, 192)), Some((96, false)));
        // The successor starts in term 101 at offset 64: stream position 65 600, below 65 664.
        s.arrive(0, i64::from(TERM) + 128);
        let next = image(11, 2, 101, 64);
        let other = image(10_000_000, 3, 101, 64);
        s.sync(&[old, next, other]);
        assert_eq!(s.source_count(), 2);
        assert_eq!(s.arrive(1, 96), Some(Arrival::Duplicate), "65 632 was taken");
        assert_eq!(s.arrive(1, 128), Some(Arrival::Duplicate));
        assert_eq!(new_at(s.arrive(1, 192)), Some((i64::from(TERM) + 128, false)));
        assert_eq!(s.arrive(0, i64::from(TERM) + 192), Some(Arrival::Duplicate), "the old image's copy");
        assert_eq!(new_at(s.arrive(2, 96)), Some((64, false)), "another source: its own positions");
    }

    /// A successor that starts above what was taken leaves a hole: it waits while an older image
    /// of its source may still fill it, and is taken (as a hole) once that one has nothing more.
    #[test]
    fn a_hole_waits_for_the_older_images_of_its_source() {
        let mut s = Sources::default();
        let old = image(10, 1, 100, 0);
        s.sync(&[old]);
        s.arrive(0, 64);
        let next = image(11, 2, 100, 4096);
        s.sync(&[old, next]);
        assert!(!s.may_poll(1), "the old image was not polled yet");
        s.polled(0, 3);
        assert!(!s.may_poll(1), "it still gives frames");
        s.arrive(0, 2048);
        s.polled(0, 0);
        assert!(s.may_poll(1));
        assert_eq!(new_at(s.arrive(1, 4160)), Some((4096, true)));
        // Once filled up to the successor's start, it is no hole at all.
        let mut s = Sources::default();
        s.sync(&[old]);
        s.arrive(0, 64);
        s.sync(&[old, next]);
        s.arrive(0, 4096);
        assert!(s.may_poll(1));
        assert_eq!(new_at(s.arrive(1, 4160)), Some((4096, false)));
    }

    /// A source whose last image went with a message half assembled goes back to just before
    /// it; kept retired, it is continued by a successor listed later, and forgotten after
    /// [`MAX_RETIRED`] others.
    #[test]
    fn a_retired_source_is_kept_for_its_successor() {
        let t = i64::from(TERM);
        let mut s = Sources::default();
        let old = image(-1, 1, i32::MAX, 0);
        s.sync(&[old]);
        s.arrive(0, t + 64);
        let src = match s.arrive(0, t + 128) {
            Some(Arrival::New { source, .. }) => source,
            a => panic!("{a:?}"),
        };
        s.get_mut(src).assembly.take(super::super::assembly::BEGIN, 0, Some(b"x"), 64, t + 64, |_| {});
        s.sync(&[]);
        // Session and term ids wrap: the successor's stream starts in the next term, at 32.
        let next = image(0, 2, i32::MIN, 32);
        s.sync(&[next]);
        assert_eq!(s.source_count(), 1);
        assert_eq!(s.arrive(0, 64), Some(Arrival::Duplicate));
        assert_eq!(new_at(s.arrive(0, 128)), Some((t + 64, false)), "back before the cut message");
        s.sync(&[]);
        for k in 0..MAX_RETIRED as i32 {
            s.sync(&[image(1000 + 100_000 * k, 10 + i64::from(k), 0, 0)]);
        }
        s.sync(&[]);
        assert_eq!(s.source_count(), MAX_RETIRED);
        let late = image(1, 99, i32::MIN.wrapping_add(1), 0);
        s.sync(&[late]);
        assert_eq!(new_at(s.arrive(0, 96)), Some((0, false)), "forgotten: a new source");
    }

    /// What does not continue a source: another term length, an earlier initial term id, a
    /// start more than two terms below what was taken, a session that is neither the same nor
    /// the next; nor do positions that overflow make a frame.
    #[test]
    fn only_a_plausible_successor_is_linked() {
        let mut s = Sources::default();
        s.sync(&[image(10, 1, 100, 0)]);
        s.arrive(0, 3 * i64::from(TERM));
        s.sync(&[]);
        for (info, why) in [
            (ImageInfo { term_length: 2 * TERM, ..image(11, 2, 100, 0) }, "term length"),
            (image(11, 3, 99, 0), "earlier term"),
            (image(11, 4, 100, 0), "three terms back"),
            (image(11, 8, 106, 0), "three terms ahead"),
            (image(11 + MAX_SESSION_STEP as i32, 5, 103, 0), "too many sessions on"),
            (image(9, 7, 103, 0), "an earlier session"),
        ] {
            let mut s2 = Sources::default();
            s2.sync(&[image(10, 1, 100, 0)]);
            s2.arrive(0, 3 * i64::from(TERM));
            s2.sync(&[info]);
            assert_eq!(s2.source_count(), 2, "{why}");
        }
        s.sync(&[image(11, 6, 101, 0)]);
        assert_eq!(s.source_count(), 1, "one term back: linked");
        assert_eq!(s.arrive(0, i64::MAX), None);
    }
}
