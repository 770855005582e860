//! SplitMix64, the delay generator shared with the Go peer so both draw the same delays.

use std::time::Duration;

/// Sebastiano Vigna's SplitMix64: tiny, fast, and easy to write identically in Go.
///
/// `benches/clientgo/main.go` implements the same function, so a given seed yields the same
/// delays in both programs.
///
/// ```
/// use queue_bench::SplitMix64;
///
/// let mut rng = SplitMix64::new(1);
/// assert_eq!(rng.next_u64(), 0x910a_2dec_8902_5cc1);
/// ```
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `count` delays drawn uniformly from `[low, low + span)`, at nanosecond resolution.
    pub fn delays(&mut self, count: usize, low: Duration, span: Duration) -> Vec<Duration> {
        let low = duration_nanos(low);
        let span = duration_nanos(span).max(1);
        (0..count)
            .map(|_| Duration::from_nanos(low + self.next_u64() % span))
            .collect()
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs for seed 0 from Vigna's splitmix64.c; the Go peer checks the same.
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn delays_stay_in_range() {
        let low = Duration::from_millis(200);
        let span = Duration::from_secs(2);
        let delays = SplitMix64::new(7).delays(10_000, low, span);
        assert!(delays.iter().all(|d| *d >= low && *d < low + span));
    }
}
