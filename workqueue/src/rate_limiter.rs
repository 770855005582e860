//! Rate limiters: the [`RateLimiter`] trait, client-go's five limiters, and its two defaults.
//!
//! The trait and the limiters are re-exported at the crate root; [`RateLimiter`]'s docs map
//! them to their client-go names.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Why a rate limiter could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// An exponential back-off starting at zero would never grow.
    #[error("exponential back-off base delay must be greater than zero")]
    ZeroBaseDelay,
    /// The cap of an exponential back-off is below its first delay.
    #[error("maximum delay {max:?} is shorter than the base delay {base:?}")]
    MaxBelowBase {
        /// The first delay.
        base: Duration,
        /// The cap.
        max: Duration,
    },
    /// A token bucket's rate must be a finite number of tokens per second above zero.
    #[error("token bucket rate must be finite and greater than zero, got {0} per second")]
    InvalidQps(f64),
    /// A fast-slow limiter's fast delay is longer than its slow delay.
    #[error("fast delay {fast:?} is longer than slow delay {slow:?}")]
    FastSlowerThanSlow {
        /// The delay of the first attempts.
        fast: Duration,
        /// The delay of the later attempts.
        slow: Duration,
    },
}

/// The result of building a rate limiter.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Decides how long an item waits before it is retried (client-go's `TypedRateLimiter`).
///
/// A rate limiter answers one question for the [`RateLimitingQueue`](crate::RateLimitingQueue):
/// *how long should this item wait before its next try?* Per-item limiters
/// ([`ItemExponentialFailure`], [`ItemFastSlow`]) count failures per item; [`TokenBucket`]
/// limits the overall rate; the combinators [`MaxOf`] and [`WithMaxWait`] build one limiter
/// out of others. Implementations are shared by every worker of a queue, hence `Send + Sync`,
/// and use interior mutability.
///
/// | ours | client-go |
/// |---|---|
/// | [`ItemExponentialFailure`] | `TypedItemExponentialFailureRateLimiter` |
/// | [`TokenBucket`] | `TypedBucketRateLimiter` over `rate.NewLimiter(qps, burst)` |
/// | [`ItemFastSlow`] | `TypedItemFastSlowRateLimiter` |
/// | [`MaxOf`] | `TypedMaxOfRateLimiter` |
/// | [`WithMaxWait`] | `TypedWithMaxWaitRateLimiter` |
/// | [`default_controller_rate_limiter`] | `DefaultTypedControllerRateLimiter` |
/// | [`default_item_based_rate_limiter`] | `DefaultTypedItemBasedRateLimiter` |
///
/// Invalid settings (a zero base delay, a cap below the base, a rate that is zero, negative or
/// not finite, an empty burst, a fast delay above the slow one) cannot be constructed:
/// constructors return [`Error`] or take [`NonZeroU32`]. The arithmetic is kept in small pure
/// functions, apart from the locking and the clock, and the clock is
/// [`tokio::time::Instant`], so tests run on paused time.
///
/// # Example
///
/// A limiter of your own: a fixed delay, with no history to forget.
///
/// ```
/// use std::time::Duration;
/// use workqueue::RateLimiter;
///
/// struct Fixed(Duration);
///
/// impl<T> RateLimiter<T> for Fixed {
///     fn when(&self, _: &T) -> Duration {
///         self.0
///     }
///     fn forget(&self, _: &T) {}
///     fn num_requeues(&self, _: &T) -> u32 {
///         0
///     }
/// }
///
/// let queue = workqueue::RateLimitingQueue::new(Fixed(Duration::from_secs(1)));
/// queue.add_rate_limited("retry-me");
/// # assert_eq!(queue.len(), 0);
/// ```
pub trait RateLimiter<T>: Send + Sync {
    /// How long `item` should wait now. Counts as an attempt: per-item limiters record a
    /// failure and the token bucket takes a token, so call it once per retry.
    fn when(&self, item: &T) -> Duration;

    /// Stops tracking `item`: clears its failure history and nothing else. It does not take
    /// the item out of a queue, and the item still needs its `done`.
    fn forget(&self, item: &T);

    /// How many times `item` has failed (been through [`when`](Self::when)) since it was
    /// last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

impl<T, L: RateLimiter<T> + ?Sized> RateLimiter<T> for Box<L> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

impl<T, L: RateLimiter<T> + ?Sized> RateLimiter<T> for Arc<L> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item)
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

/// client-go's default for controllers: the larger of a per-item exponential back-off from
/// 5 ms to 1000 s and an overall token bucket of 10 per second with a burst of 100.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use workqueue::{RateLimiter, default_controller_rate_limiter};
///
/// let limiter = default_controller_rate_limiter();
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(5));
/// assert_eq!(limiter.when(&"a"), Duration::from_millis(10));
/// assert_eq!(limiter.num_requeues(&"a"), 2);
/// # }
/// ```
pub fn default_controller_rate_limiter<T>() -> MaxOf<T>
where
    T: Eq + Hash + Clone + Send + 'static,
{
    MaxOf::new(
        ItemExponentialFailure::new_unchecked(Duration::from_millis(5), Duration::from_secs(1000)),
        TokenBucket::new_unchecked(10.0, NonZeroU32::new(100).unwrap_or(NonZeroU32::MIN)),
    )
}

/// client-go's default per-item limiter: exponential back-off from 1 ms to 1000 s.
pub fn default_item_based_rate_limiter<T: Eq + Hash + Clone + Send>() -> ItemExponentialFailure<T> {
    ItemExponentialFailure::new_unchecked(Duration::from_millis(1), Duration::from_secs(1000))
}

// === ItemExponentialFailure ===

/// Per-item exponential back-off: the `n`-th failure of an item waits `base · 2ⁿ⁻¹`, capped at
/// `max`.
///
/// With base 5 ms: 5 ms, 10 ms, 20 ms, …; the 18th failure waits 655.36 s and every later one
/// the 1000 s cap. [`num_requeues`](RateLimiter::num_requeues) is the failure count;
/// [`forget`](RateLimiter::forget) resets it.
///
/// ```
/// use std::time::Duration;
/// use workqueue::{ItemExponentialFailure, RateLimiter};
///
/// let limiter = ItemExponentialFailure::new(Duration::from_millis(5), Duration::from_secs(1))?;
/// let delays: Vec<_> = (0..3).map(|_| limiter.when(&"pod")).collect();
/// assert_eq!(delays, [5, 10, 20].map(Duration::from_millis));
/// limiter.forget(&"pod");
/// assert_eq!(limiter.when(&"pod"), Duration::from_millis(5));
/// # Ok::<(), workqueue::RateLimiterError>(())
/// ```
pub struct ItemExponentialFailure<T> {
    base: Duration,
    max: Duration,
    failures: Failures<T>,
}

impl<T: Eq + Hash + Clone + Send> ItemExponentialFailure<T> {
    /// Back-off from `base`, doubling per failure, capped at `max`.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroBaseDelay`] if `base` is zero, [`Error::MaxBelowBase`] if `max < base`.
    pub fn new(base: Duration, max: Duration) -> Result<Self> {
        if base.is_zero() {
            return Err(Error::ZeroBaseDelay);
        }
        if max < base {
            return Err(Error::MaxBelowBase { base, max });
        }
        Ok(Self::new_unchecked(base, max))
    }

    fn new_unchecked(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Failures::new(),
        }
    }
}

impl<T: Eq + Hash + Clone + Send> RateLimiter<T> for ItemExponentialFailure<T> {
    fn when(&self, item: &T) -> Duration {
        let previous = self.failures.bump(item);
        exponential_delay(self.base, self.max, previous)
    }

    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.count(item)
    }
}

impl<T> fmt::Debug for ItemExponentialFailure<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemExponentialFailure")
            .field("base", &self.base)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// Failure counts per item: the one table behind every per-item limiter
/// ([`ItemExponentialFailure`], [`ItemFastSlow`]), which differ only in how a count becomes
/// a delay.
struct Failures<T>(Mutex<HashMap<T, u32>>);

impl<T: Eq + Hash + Clone> Failures<T> {
    fn new() -> Self {
        Self(Mutex::new(HashMap::new()))
    }

    /// Counts one more failure of `item`; returns the count before it.
    fn bump(&self, item: &T) -> u32 {
        let mut failures = self.0.lock();
        match failures.get_mut(item) {
            Some(count) => {
                let previous = *count;
                *count = count.saturating_add(1);
                previous
            }
            None => {
                failures.insert(item.clone(), 1);
                0
            }
        }
    }

    /// Clears the count of `item`.
    fn forget(&self, item: &T) {
        self.0.lock().remove(item);
    }

    /// The count of `item`.
    fn count(&self, item: &T) -> u32 {
        self.0.lock().get(item).copied().unwrap_or(0)
    }
}

/// `base · 2^exponent`, or `max` if that is larger (or does not fit).
fn exponential_delay(base: Duration, max: Duration, exponent: u32) -> Duration {
    let delay = 1u128
        .checked_shl(exponent)
        .and_then(|factor| base.as_nanos().checked_mul(factor));
    match delay {
        Some(nanos) if nanos <= max.as_nanos() => duration_from_nanos(nanos),
        _ => max,
    }
}

/// A `Duration` of `nanos` nanoseconds (which fits: it is at most some `Duration`'s).
fn duration_from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    // The remainder is below one billion, so it fits in a u32.
    Duration::new(secs, (nanos % NANOS_PER_SEC) as u32)
}

// === TokenBucket ===

/// An overall rate limit: a bucket of `burst` tokens refilled at `qps` per second
/// (golang.org/x/time/rate's `Limiter`, as client-go's `BucketRateLimiter` uses it).
///
/// [`when`](RateLimiter::when) *reserves* a token on every call, whatever the item: the first
/// `burst` calls return zero, then each call waits `1/qps` longer than the previous one until
/// the bucket refills. It keeps no per-item state: `num_requeues` is always 0 and `forget`
/// does nothing.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), workqueue::RateLimiterError> {
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use workqueue::{RateLimiter, TokenBucket};
///
/// let bucket = TokenBucket::new(10.0, NonZeroU32::new(2).unwrap())?;
/// let delays: Vec<_> = (0..4).map(|_| RateLimiter::<()>::when(&bucket, &())).collect();
/// assert_eq!(delays, [0, 0, 100, 200].map(Duration::from_millis));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: NonZeroU32,
    state: Mutex<BucketState>,
}

/// The bucket's mutable part.
#[derive(Debug, Clone, Copy)]
struct BucketState {
    /// Tokens available at `last`; negative when reservations run ahead of the refill.
    tokens: f64,
    /// When `tokens` was last brought up to date; `None` before the first reservation (the
    /// bucket starts full).
    last: Option<Instant>,
}

impl TokenBucket {
    /// A bucket of `burst` tokens, refilled at `qps` tokens per second, initially full.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidQps`] unless `qps` is finite and greater than zero.
    pub fn new(qps: f64, burst: NonZeroU32) -> Result<Self> {
        if !qps.is_finite() || qps <= 0.0 {
            return Err(Error::InvalidQps(qps));
        }
        Ok(Self::new_unchecked(qps, burst))
    }

    fn new_unchecked(qps: f64, burst: NonZeroU32) -> Self {
        Self {
            qps,
            burst,
            state: Mutex::new(BucketState {
                tokens: f64::from(burst.get()),
                last: None,
            }),
        }
    }

    /// Tokens per second.
    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// Bucket size.
    pub fn burst(&self) -> NonZeroU32 {
        self.burst
    }
}

impl<T> RateLimiter<T> for TokenBucket {
    fn when(&self, _item: &T) -> Duration {
        let mut state = self.state.lock();
        reserve(&mut state, Instant::now(), self.qps, self.burst)
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// Reserves one token at `now` and returns how long to wait for it, as `rate.Limiter`'s
/// `Reserve().Delay()` does: refill for the time since `last` (capped at `burst`), take one
/// token, and if the balance is negative wait until the refill covers it.
fn reserve(state: &mut BucketState, now: Instant, qps: f64, burst: NonZeroU32) -> Duration {
    let burst = f64::from(burst.get());
    let mut tokens = match state.last {
        None => burst,
        Some(last) => {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            (state.tokens + elapsed * qps).min(burst)
        }
    };
    tokens -= 1.0;
    // `rate.Limiter` moves `last` forward only; a clock that went back counts no refill.
    state.last = Some(state.last.map_or(now, |last| last.max(now)));
    state.tokens = tokens;
    if tokens >= 0.0 {
        return Duration::ZERO;
    }
    // Go: time.Duration(-tokens / limit * 1e9), truncated to the nanosecond.
    let nanos = -tokens / qps * 1e9;
    Duration::from_nanos(nanos as u64)
}

// === ItemFastSlow ===

/// Per-item two-speed retry: the first `max_fast_attempts` failures of an item wait `fast`,
/// later ones `slow`.
///
/// ```
/// use std::time::Duration;
/// use workqueue::{ItemFastSlow, RateLimiter};
///
/// let limiter = ItemFastSlow::new(Duration::from_millis(5), Duration::from_secs(10), 2)?;
/// let delays: Vec<_> = (0..3).map(|_| limiter.when(&"pod")).collect();
/// assert_eq!(delays, [Duration::from_millis(5), Duration::from_millis(5), Duration::from_secs(10)]);
/// # Ok::<(), workqueue::RateLimiterError>(())
/// ```
pub struct ItemFastSlow<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    failures: Failures<T>,
}

impl<T: Eq + Hash + Clone + Send> ItemFastSlow<T> {
    /// `fast` for the first `max_fast_attempts` failures of an item, `slow` after.
    ///
    /// # Errors
    ///
    /// [`Error::FastSlowerThanSlow`] if `fast > slow`.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Result<Self> {
        if fast > slow {
            return Err(Error::FastSlowerThanSlow { fast, slow });
        }
        Ok(Self {
            fast,
            slow,
            max_fast_attempts,
            failures: Failures::new(),
        })
    }
}

impl<T: Eq + Hash + Clone + Send> RateLimiter<T> for ItemFastSlow<T> {
    fn when(&self, item: &T) -> Duration {
        let attempt = self.failures.bump(item).saturating_add(1);
        if attempt <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.count(item)
    }
}

impl<T> fmt::Debug for ItemFastSlow<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemFastSlow")
            .field("fast", &self.fast)
            .field("slow", &self.slow)
            .field("max_fast_attempts", &self.max_fast_attempts)
            .finish_non_exhaustive()
    }
}

// === MaxOf ===

/// The largest delay of several limiters.
///
/// [`when`](RateLimiter::when) calls **every** limiter, so each one's state advances (a token
/// bucket inside takes a token even when another limiter's delay is larger).
/// [`num_requeues`](RateLimiter::num_requeues) is the largest count; [`forget`](RateLimiter::forget)
/// goes to all. Built from at least two limiters, so it is never empty.
pub struct MaxOf<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOf<T> {
    /// The larger of `first` and `second`.
    pub fn new(
        first: impl RateLimiter<T> + 'static,
        second: impl RateLimiter<T> + 'static,
    ) -> Self {
        Self {
            limiters: vec![Box::new(first), Box::new(second)],
        }
    }

    /// Also takes `limiter` into account.
    pub fn and(mut self, limiter: impl RateLimiter<T> + 'static) -> Self {
        self.limiters.push(Box::new(limiter));
        self
    }
}

impl<T> RateLimiter<T> for MaxOf<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|limiter| limiter.when(item))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, item: &T) {
        for limiter in &self.limiters {
            limiter.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|limiter| limiter.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

impl<T> fmt::Debug for MaxOf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOf")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

// === WithMaxWait ===

/// Caps another limiter's delay at `max_wait`; `forget` and `num_requeues` pass through.
///
/// ```
/// use std::time::Duration;
/// use workqueue::{ItemExponentialFailure, RateLimiter, WithMaxWait};
///
/// let inner = ItemExponentialFailure::new(Duration::from_secs(1), Duration::from_secs(1000))?;
/// let limiter = WithMaxWait::new(inner, Duration::from_secs(3));
/// let delays: Vec<_> = (0..4).map(|_| limiter.when(&"pod")).collect();
/// assert_eq!(delays, [1, 2, 3, 3].map(Duration::from_secs));
/// # Ok::<(), workqueue::RateLimiterError>(())
/// ```
#[derive(Debug)]
pub struct WithMaxWait<L> {
    limiter: L,
    max_wait: Duration,
}

impl<L> WithMaxWait<L> {
    /// `limiter`'s delays, never longer than `max_wait`.
    pub fn new(limiter: L, max_wait: Duration) -> Self {
        Self { limiter, max_wait }
    }
}

impl<T, L: RateLimiter<T>> RateLimiter<T> for WithMaxWait<L> {
    fn when(&self, item: &T) -> Duration {
        self.limiter.when(item).min(self.max_wait)
    }

    fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::advance;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn burst(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn exponential_doubles_from_the_base_and_caps_at_the_max() {
        let limiter = ItemExponentialFailure::new(5 * MS, Duration::from_secs(1000)).unwrap();
        let delays: Vec<_> = (0..20).map(|_| limiter.when(&"x")).collect();
        let expected: Vec<_> = (0..18)
            .map(|n| 5 * MS * 2u32.pow(n))
            .chain([Duration::from_secs(1000); 2])
            .collect();
        assert_eq!(delays, expected);
        assert_eq!(delays[17], Duration::from_millis(655_360));
        assert_eq!(limiter.num_requeues(&"x"), 20);
    }

    #[test]
    fn exponential_stays_at_the_cap_for_huge_failure_counts() {
        let limiter = ItemExponentialFailure::new(MS, Duration::from_secs(1000)).unwrap();
        for _ in 0..200 {
            limiter.when(&1);
        }
        assert_eq!(limiter.when(&1), Duration::from_secs(1000));
        assert_eq!(
            exponential_delay(MS, Duration::MAX, u32::MAX),
            Duration::MAX
        );
    }

    #[test]
    fn exponential_counts_per_item_and_forget_resets() {
        let limiter = ItemExponentialFailure::new(MS, Duration::from_secs(1)).unwrap();
        assert_eq!(limiter.when(&"a"), MS);
        assert_eq!(limiter.when(&"a"), 2 * MS);
        assert_eq!(limiter.when(&"b"), MS);
        assert_eq!(
            (limiter.num_requeues(&"a"), limiter.num_requeues(&"b")),
            (2, 1)
        );
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.when(&"a"), MS);
        assert_eq!(limiter.when(&"b"), 2 * MS);
    }

    #[test]
    fn exponential_rejects_a_zero_base_and_a_cap_below_the_base() {
        assert_eq!(
            ItemExponentialFailure::<u8>::new(Duration::ZERO, MS).unwrap_err(),
            Error::ZeroBaseDelay
        );
        assert_eq!(
            ItemExponentialFailure::<u8>::new(2 * MS, MS).unwrap_err(),
            Error::MaxBelowBase {
                base: 2 * MS,
                max: MS
            }
        );
        assert!(ItemExponentialFailure::<u8>::new(MS, MS).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_its_burst_then_spaces_calls_by_one_over_qps() {
        let bucket = TokenBucket::new(10.0, burst(100)).unwrap();
        let delays: Vec<_> = (0..104).map(|i| bucket.when(&i)).collect();
        assert_eq!(delays[..100], [Duration::ZERO; 100]);
        assert_eq!(
            delays[100..],
            [100, 200, 300, 400].map(Duration::from_millis)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_refills_at_qps_up_to_its_burst() {
        let bucket = TokenBucket::new(10.0, burst(2)).unwrap();
        let when = || RateLimiter::<()>::when(&bucket, &());
        assert_eq!(
            [when(), when(), when()],
            [Duration::ZERO, Duration::ZERO, 100 * MS]
        );
        // The third call borrowed the token that arrives at 100 ms.
        advance(100 * MS).await;
        assert_eq!(when(), 100 * MS);
        advance(Duration::from_secs(60)).await;
        // Refilled to the burst of 2, no more.
        assert_eq!(
            [when(), when(), when()],
            [Duration::ZERO, Duration::ZERO, 100 * MS]
        );
    }

    #[test]
    fn bucket_keeps_no_per_item_state() {
        let bucket = TokenBucket::new(1.0, burst(1)).unwrap();
        assert_eq!(bucket.when(&"a"), Duration::ZERO);
        assert_eq!(bucket.num_requeues(&"a"), 0);
        bucket.forget(&"a");
        assert!(
            bucket.when(&"b") > Duration::ZERO,
            "forget returns no token"
        );
    }

    #[test]
    fn bucket_rejects_rates_that_are_not_finite_and_positive() {
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(TokenBucket::new(qps, burst(1)), Err(Error::InvalidQps(_))),
                "{qps}"
            );
        }
        let bucket = TokenBucket::new(0.5, burst(3)).unwrap();
        assert_eq!((bucket.qps(), bucket.burst().get()), (0.5, 3));
    }

    #[test]
    fn fast_slow_switches_after_the_fast_attempts() {
        let limiter = ItemFastSlow::new(5 * MS, 10 * MS, 3).unwrap();
        let delays: Vec<_> = (0..5).map(|_| limiter.when(&"x")).collect();
        assert_eq!(delays, [5, 5, 5, 10, 10].map(Duration::from_millis));
        assert_eq!(limiter.num_requeues(&"x"), 5);
        assert_eq!(limiter.when(&"y"), 5 * MS);
        limiter.forget(&"x");
        assert_eq!(limiter.num_requeues(&"x"), 0);
        assert_eq!(limiter.when(&"x"), 5 * MS);
    }

    #[test]
    fn fast_slow_with_zero_fast_attempts_is_always_slow() {
        let limiter = ItemFastSlow::new(MS, 2 * MS, 0).unwrap();
        assert_eq!(limiter.when(&1), 2 * MS);
    }

    #[test]
    fn fast_slow_rejects_a_fast_delay_above_the_slow_one() {
        assert_eq!(
            ItemFastSlow::<u8>::new(2 * MS, MS, 1).unwrap_err(),
            Error::FastSlowerThanSlow {
                fast: 2 * MS,
                slow: MS
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn max_of_calls_every_limiter_and_returns_the_largest_delay() {
        let limiter = MaxOf::new(
            ItemExponentialFailure::new(Duration::from_secs(1), Duration::from_secs(1000)).unwrap(),
            TokenBucket::new(1.0, burst(2)).unwrap(),
        );
        // The exponential delay dominates, yet the bucket spends a token each time.
        assert_eq!(limiter.when(&"a"), Duration::from_secs(1));
        assert_eq!(limiter.when(&"b"), Duration::from_secs(1));
        assert_eq!(limiter.when(&"c"), Duration::from_secs(1));
        assert_eq!(
            limiter.when(&"d"),
            Duration::from_secs(2),
            "bucket empty: 2 s"
        );
        assert_eq!(
            limiter.when(&"a"),
            Duration::from_secs(3),
            "bucket owes 3 tokens"
        );
    }

    #[test]
    fn max_of_reports_the_largest_requeue_count_and_forgets_everywhere() {
        let limiter = MaxOf::new(
            ItemFastSlow::new(MS, MS, 1).unwrap(),
            ItemExponentialFailure::new(MS, Duration::from_secs(1)).unwrap(),
        )
        .and(ItemFastSlow::new(MS, MS, 1).unwrap());
        limiter.when(&"x");
        limiter.when(&"x");
        assert_eq!(limiter.num_requeues(&"x"), 2);
        limiter.forget(&"x");
        assert_eq!(limiter.num_requeues(&"x"), 0);
        assert_eq!(limiter.when(&"x"), MS);
    }

    #[test]
    fn with_max_wait_caps_the_delay_and_passes_the_rest_through() {
        let limiter = WithMaxWait::new(
            ItemExponentialFailure::new(10 * MS, Duration::from_secs(1)).unwrap(),
            25 * MS,
        );
        let delays: Vec<_> = (0..4).map(|_| limiter.when(&"x")).collect();
        assert_eq!(delays, [10, 20, 25, 25].map(Duration::from_millis));
        assert_eq!(limiter.num_requeues(&"x"), 4);
        limiter.forget(&"x");
        assert_eq!(limiter.when(&"x"), 10 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn default_controller_limiter_is_5ms_exponential_or_10_qps_burst_100() {
        let limiter = default_controller_rate_limiter::<u32>();
        // 100 distinct items: each fails for the first time (5 ms); the burst covers them.
        for item in 0..100 {
            assert_eq!(limiter.when(&item), 5 * MS);
        }
        // The bucket is empty: 10 per second from now on.
        assert_eq!(limiter.when(&100), 100 * MS);
        assert_eq!(limiter.when(&101), 200 * MS);
        // Item 0 fails again: its own back-off (10 ms, 20 ms, …) stays below the bucket's
        // growing delay until 5 ms · 2⁸ = 1.28 s passes the bucket's 1 s.
        let own: Vec<_> = (0..8).map(|_| limiter.when(&0)).collect();
        assert_eq!(
            own,
            [300, 400, 500, 600, 700, 800, 900, 1280].map(Duration::from_millis)
        );
        assert_eq!(limiter.num_requeues(&0), 9);
        advance(Duration::from_secs(1000)).await;
        for _ in 0..11 {
            limiter.when(&0);
        }
        assert_eq!(
            limiter.when(&0),
            Duration::from_secs(1000),
            "capped at 1000 s"
        );
    }

    #[test]
    fn default_item_based_limiter_is_1ms_to_1000s() {
        let limiter = default_item_based_rate_limiter::<&str>();
        let delays: Vec<_> = (0..3).map(|_| limiter.when(&"x")).collect();
        assert_eq!(delays, [1, 2, 4].map(Duration::from_millis));
        for _ in 0..30 {
            limiter.when(&"x");
        }
        assert_eq!(limiter.when(&"x"), Duration::from_secs(1000));
    }

    #[test]
    fn errors_read_well() {
        assert_eq!(
            Error::InvalidQps(0.0).to_string(),
            "token bucket rate must be finite and greater than zero, got 0 per second"
        );
    }
}
