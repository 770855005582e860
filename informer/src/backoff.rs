//! The reflector's backoff between list-and-watch attempts: client-go's 0.8 s → 30 s,
//! factor 2, full jitter, reset after 2 minutes.
//!
//! # Implementation Details
//!
//! The pure part is [`Backoff::step`]: given the time now and a random number in `[0, 1)`,
//! it returns the delay and advances the state. The un-jittered sequence is 0.8, 1.6, 3.2,
//! 6.4, 12.8, 25.6 s, then 30 s for ever; each delay is jittered to `[d, 2d)`. If more than
//! two minutes have passed since the sequence last started, it starts again at 0.8 s.

use std::time::Duration;

use tokio::time::Instant;

/// The reflector's retry delays.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    factor: f64,
    jitter: f64,
    reset_after: Duration,
    /// The un-jittered delay the next step returns.
    next: Duration,
    /// When the sequence last (re)started; `None` before the first step.
    started: Option<Instant>,
}

impl Default for Backoff {
    /// client-go's reflector backoff: 800 ms initial, 30 s cap, factor 2, jitter 1.0, reset
    /// after 2 minutes.
    fn default() -> Self {
        Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            2.0,
            1.0,
            Duration::from_secs(120),
        )
    }
}

impl Backoff {
    /// A backoff starting at `initial`, multiplied by `factor` each step up to `cap`, each
    /// delay stretched by up to `jitter` × itself, restarting after `reset_after`.
    pub fn new(
        initial: Duration,
        cap: Duration,
        factor: f64,
        jitter: f64,
        reset_after: Duration,
    ) -> Self {
        Backoff {
            initial,
            cap,
            factor,
            jitter,
            reset_after,
            next: initial,
            started: None,
        }
    }

    /// The next delay at time `now`, jittered by `random` in `[0, 1)`.
    pub fn step(&mut self, now: Instant, random: f64) -> Duration {
        let restart = match self.started {
            None => true,
            Some(started) => now.saturating_duration_since(started) > self.reset_after,
        };
        if restart {
            self.started = Some(now);
            self.next = self.initial;
        }
        let base = self.next;
        self.next = base.mul_f64(self.factor).min(self.cap);
        base + base.mul_f64(self.jitter * random.clamp(0.0, 1.0))
    }
}

/// A small, fast, non-cryptographic random source for jitter and watch timeouts.
#[derive(Clone, Debug)]
pub(crate) struct Jitter(u64);

impl Jitter {
    /// Seeded from the clock and this value's address, so reflectors do not move in step.
    pub(crate) fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let local = 0u8;
        let addr = &local as *const u8 as u64;
        Jitter((nanos ^ addr.rotate_left(32)) | 1)
    }

    #[cfg(test)]
    pub(crate) fn seeded(seed: u64) -> Self {
        Jitter(seed | 1)
    }

    /// A number in `[0, 1)`.
    pub(crate) fn next_f64(&mut self) -> f64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[tokio::test(start_paused = true)]
    async fn unjittered_sequence_doubles_to_the_cap_and_stays_there() {
        let mut b = Backoff::default();
        let now = Instant::now();
        let seq: Vec<u128> = (0..9).map(|_| ms(b.step(now, 0.0))).collect();
        assert_eq!(
            seq,
            [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stretches_each_delay_up_to_double() {
        let mut b = Backoff::default();
        let now = Instant::now();
        assert_eq!(ms(b.step(now, 0.5)), 1200);
        assert_eq!(ms(b.step(now, 0.999_999)), 3199);
    }

    #[tokio::test(start_paused = true)]
    async fn sequence_restarts_two_minutes_after_it_started() {
        let mut b = Backoff::default();
        let start = Instant::now();
        for _ in 0..5 {
            b.step(start, 0.0);
        }
        // Within two minutes of the start, the sequence goes on.
        assert_eq!(ms(b.step(start + Duration::from_secs(119), 0.0)), 25600);
        // Past two minutes, it starts again.
        assert_eq!(ms(b.step(start + Duration::from_secs(121), 0.0)), 800);
        assert_eq!(ms(b.step(start + Duration::from_secs(122), 0.0)), 1600);
    }

    #[test]
    fn jitter_source_stays_in_the_unit_interval() {
        let mut j = Jitter::seeded(42);
        for _ in 0..10_000 {
            let x = j.next_f64();
            assert!((0.0..1.0).contains(&x), "{x}");
        }
    }
}
