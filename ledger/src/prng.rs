//! The one source of chance: splitmix64, seeded, so that a seed replays a run's choices.

/// splitmix64's finaliser: a good 64-bit mixer.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seeded generator (splitmix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        // The modulo's bias is below 2^-32 for the small ranges used here.
        self.next_u64() % n.max(1)
    }

    /// A number in `lo..hi` (`lo` if the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.below(hi - lo)
        }
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// One of `items` chosen by weight.
    pub fn weighted<'a, T>(&mut self, items: &'a [(u32, T)]) -> &'a T {
        let total: u64 = items.iter().map(|(w, _)| u64::from(*w)).sum();
        let mut r = self.below(total);
        for (w, item) in items {
            if r < u64::from(*w) {
                return item;
            }
            r -= u64::from(*w);
        }
        &items[items.len() - 1].1
    }

    /// An independent generator for a sub-task, so adding draws to one task never shifts another's.
    pub fn fork(&mut self, tag: u64) -> Rng {
        Rng(mix(self.next_u64() ^ mix(tag)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_draws_and_ranges_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let r = a.range(10, 20);
            assert!((10..20).contains(&r));
            b.range(10, 20);
        }
        assert_eq!(a.range(5, 5), 5);
    }
}
