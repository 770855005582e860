//! The reflector's backoff between list-and-watch attempts: client-go's 0.8 s → 30 s,
//! factor 2, full jitter, reset after 2 minutes, unless [`BackoffOptions`] say otherwise.
//!
//! # Implementation Details
//!
//! The pure part is [`Backoff::step`]: given the time now and a random number in `[0, 1)`,
//! it returns the delay and advances the state. The un-jittered sequence is 0.8, 1.6, 3.2,
//! 6.4, 12.8, 25.6 s, then 30 s for ever; each delay is jittered to `[d, 2d)`. If more than
//! two minutes have passed since the sequence last started, it starts again at 0.8 s. Other
//! options follow the same rules with their own numbers.

use std::time::Duration;

use tokio::time::Instant;

/// How long a reflector waits between attempts: client-go's reflector backoff manager,
/// whose numbers are the defaults. Set it through [`ReflectorOptions::backoff`].
///
/// The delays grow from `initial` by `factor` up to `max`, each stretched by a random part
/// of up to `jitter` times itself, and start again from `initial` once more than
/// `reset_after` has passed since the sequence (re)started.
///
/// [`ReflectorOptions::backoff`]: crate::ReflectorOptions::backoff
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffOptions {
    /// The first delay. 800 ms by default.
    pub initial: Duration,
    /// The un-jittered delay grows no further than this. 30 s by default.
    pub max: Duration,
    /// Each un-jittered delay is this many times the one before. 2 by default; a value below
    /// 1, or not a number, counts as 1 (every delay is `initial`).
    pub factor: f64,
    /// Each delay `d` is stretched to a random length in `[d, d + jitter·d)`. 1.0 by default,
    /// so delays lie in `[d, 2d)`; 0 turns jitter off, and so does a negative value or one
    /// that is not finite.
    pub jitter: f64,
    /// The sequence starts again from `initial` when more than this has passed since it
    /// last (re)started. 2 minutes by default; zero starts every delay from `initial`.
    pub reset_after: Duration,
}

impl Default for BackoffOptions {
    /// client-go's reflector backoff: 800 ms initial, 30 s cap, factor 2, jitter 1.0, reset
    /// after 2 minutes.
    fn default() -> Self {
        BackoffOptions {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            factor: 2.0,
            jitter: 1.0,
            reset_after: Duration::from_secs(120),
        }
    }
}

/// The reflector's retry delays.
#[derive(Clone, Debug)]
pub struct Backoff {
    /// The options, with `factor` at least 1 and `jitter` at least 0.
    options: BackoffOptions,
    /// The un-jittered delay the next step returns.
    next: Duration,
    /// When the sequence last (re)started; `None` before the first step.
    started: Option<Instant>,
}

impl Default for Backoff {
    /// client-go's reflector backoff; see [`BackoffOptions::default`].
    fn default() -> Self {
        Backoff::new(BackoffOptions::default())
    }
}

impl Backoff {
    /// A backoff that follows `options`.
    pub fn new(mut options: BackoffOptions) -> Self {
        // `f64::max` drops a NaN.
        options.factor = options.factor.max(1.0);
        options.jitter = if options.jitter.is_finite() {
            options.jitter.max(0.0)
        } else {
            0.0
        };
        Backoff {
            next: options.initial,
            started: None,
            options,
        }
    }

    /// The next delay at time `now`, jittered by `random` in `[0, 1)`.
    pub fn step(&mut self, now: Instant, random: f64) -> Duration {
        let o = &self.options;
        let restart = match self.started {
            None => true,
            Some(_) if o.reset_after.is_zero() => true,
            Some(started) => now.saturating_duration_since(started) > o.reset_after,
        };
        if restart {
            self.started = Some(now);
            self.next = o.initial;
        }
        let base = self.next;
        // Float arithmetic that saturates rather than panics on huge options.
        let times = |d: Duration, x: f64| Duration::try_from_secs_f64(d.as_secs_f64() * x);
        self.next = times(base, o.factor).map_or(o.max, |d| d.min(o.max));
        let stretch = times(base, o.jitter * random.clamp(0.0, 1.0)).unwrap_or(Duration::MAX);
        base.saturating_add(stretch)
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

    #[tokio::test(start_paused = true)]
    async fn options_set_the_initial_delay_factor_and_cap() {
        let mut b = Backoff::new(BackoffOptions {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
            factor: 3.0,
            jitter: 0.0,
            reset_after: Duration::from_secs(60),
        });
        let now = Instant::now();
        // Jitter is off: the random number makes no difference.
        let seq: Vec<u128> = (0..6).map(|_| ms(b.step(now, 0.9))).collect();
        assert_eq!(seq, [100, 300, 900, 2000, 2000, 2000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_smaller_jitter_stretches_each_delay_less() {
        let mut b = Backoff::new(BackoffOptions {
            jitter: 0.25,
            ..BackoffOptions::default()
        });
        let now = Instant::now();
        assert_eq!(ms(b.step(now, 0.5)), 900);
        assert_eq!(ms(b.step(now, 0.999_999)), 1999);
    }

    #[tokio::test(start_paused = true)]
    async fn the_sequence_restarts_after_the_configured_reset() {
        let mut b = Backoff::new(BackoffOptions {
            jitter: 0.0,
            reset_after: Duration::from_secs(10),
            ..BackoffOptions::default()
        });
        let start = Instant::now();
        b.step(start, 0.0);
        assert_eq!(ms(b.step(start + Duration::from_secs(10), 0.0)), 1600);
        assert_eq!(ms(b.step(start + Duration::from_secs(11), 0.0)), 800);

        // Zero: every delay is the initial one.
        let mut b = Backoff::new(BackoffOptions {
            jitter: 0.0,
            reset_after: Duration::ZERO,
            ..BackoffOptions::default()
        });
        let seq: Vec<u128> = (0..3).map(|_| ms(b.step(start, 0.0))).collect();
        assert_eq!(seq, [800, 800, 800]);
    }

    #[tokio::test(start_paused = true)]
    async fn options_out_of_range_are_tamed_rather_than_panicking() {
        let now = Instant::now();
        // A factor below 1 or not a number keeps the delay; negative or infinite jitter is
        // off.
        for (factor, jitter) in [(0.5, -1.0), (f64::NAN, f64::INFINITY), (-3.0, f64::NAN)] {
            let mut b = Backoff::new(BackoffOptions {
                factor,
                jitter,
                ..BackoffOptions::default()
            });
            let seq: Vec<u128> = (0..3).map(|_| ms(b.step(now, 0.5))).collect();
            assert_eq!(seq, [800, 800, 800], "factor {factor}, jitter {jitter}");
        }
        // Huge numbers saturate.
        let mut b = Backoff::new(BackoffOptions {
            initial: Duration::from_secs(u64::MAX / 2),
            max: Duration::MAX,
            factor: f64::INFINITY,
            jitter: f64::MAX,
            reset_after: Duration::MAX,
        });
        assert_eq!(b.step(now, 0.5), Duration::MAX);
        assert_eq!(b.step(now, 0.0), Duration::MAX);
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
