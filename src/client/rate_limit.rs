//! The client-side token bucket that keeps a client within its QPS and burst, as client-go's
//! `flowcontrol` limiter does.
//!
//! # Implementation Details
//!
//! The bucket holds up to `burst` tokens and gains `qps` tokens a second. A request takes one
//! token; when none is left it *reserves* the next one, driving the balance negative, and
//! sleeps until that token would have arrived. Reserving under the lock and sleeping outside
//! it keeps callers in arrival order without holding the lock while they wait.

use std::num::NonZeroU32;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// A token bucket: `qps` sustained, `burst` at once.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Tokens on hand at `at`; negative when callers have reserved tokens still to come.
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket. `qps` must be positive and finite.
    pub(crate) fn new(qps: f64, burst: NonZeroU32) -> Self {
        assert!(qps.is_finite() && qps > 0.0, "qps must be positive");
        let burst = f64::from(burst.get());
        TokenBucket {
            qps,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                at: Instant::now(),
            }),
        }
    }

    /// Takes a token, reserving the next one if none is left, and returns how long to wait
    /// before using it.
    pub(crate) fn reserve(&self) -> Duration {
        let now = Instant::now();
        let mut b = self.state.lock();
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.qps).min(self.burst);
        b.at = now;
        b.tokens -= 1.0;
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-b.tokens / self.qps)
        }
    }

    /// Waits for a token.
    ///
    /// # Cancel safety
    ///
    /// Cancelling the wait does not return the reserved token: a cancelled request still
    /// counts against the rate, as it does in client-go.
    pub(crate) async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[tokio::test(start_paused = true)]
    async fn burst_passes_at_once_then_requests_are_spaced_at_qps() {
        let bucket = TokenBucket::new(10.0, NonZeroU32::new(3).unwrap());
        let waits: Vec<u128> = (0..6).map(|_| ms(bucket.reserve())).collect();
        // Three from the burst, then one every 100 ms, each reserved behind the last.
        assert_eq!(waits, [0, 0, 0, 100, 200, 300]);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_refill_with_time_up_to_burst() {
        let bucket = TokenBucket::new(2.0, NonZeroU32::new(2).unwrap());
        assert_eq!(ms(bucket.reserve()), 0);
        assert_eq!(ms(bucket.reserve()), 0);
        tokio::time::advance(Duration::from_secs(10)).await;
        // Ten seconds refill far more than the burst; only two are kept.
        assert_eq!(ms(bucket.reserve()), 0);
        assert_eq!(ms(bucket.reserve()), 0);
        assert_eq!(ms(bucket.reserve()), 500);
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_sleeps_until_the_reserved_token_arrives() {
        let bucket = TokenBucket::new(4.0, NonZeroU32::new(1).unwrap());
        let start = Instant::now();
        bucket.acquire().await;
        bucket.acquire().await;
        bucket.acquire().await;
        assert_eq!(start.elapsed(), Duration::from_millis(500));
    }
}
