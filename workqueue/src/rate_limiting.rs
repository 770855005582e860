//! The rate-limited layer, [`RateLimitingQueue`]: retries delayed by a [`RateLimiter`].

use std::fmt;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::delaying::DelayingQueue;
use crate::queue::QueueConfig;
use crate::rate_limiter::RateLimiter;

/// How [`RateLimitingQueue::add_with`] adds an item (controller-runtime's `AddOpts`): a
/// priority, a delay, and whether the limiter spaces it.
///
/// The default is a plain [`add`](crate::Queue::add): priority 0, now.
///
/// ```
/// use std::time::Duration;
/// use workqueue::AddOpts;
///
/// let opts = AddOpts::new().priority(-100).after(Duration::from_secs(5));
/// assert_eq!(opts, AddOpts { priority: -100, after: Duration::from_secs(5), rate_limited: false });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddOpts {
    /// Higher first; 0 is a plain add's.
    pub priority: i32,
    /// Queue the item once this has passed (zero: now).
    pub after: Duration,
    /// Ask the limiter for the delay; with `after` also set, the shorter of the two wins.
    pub rate_limited: bool,
}

impl AddOpts {
    /// A plain add: priority 0, now, not rate-limited.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the priority.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Sets the delay.
    pub fn after(mut self, delay: Duration) -> Self {
        self.after = delay;
        self
    }

    /// Asks the limiter for the delay.
    pub fn rate_limited(mut self) -> Self {
        self.rate_limited = true;
        self
    }
}

/// A [`DelayingQueue`] whose retries are spaced by a [`RateLimiter`] (client-go's
/// `TypedRateLimitingInterface`).
///
/// All of [`DelayingQueue`]'s and [`Queue`](crate::Queue)'s methods are available through
/// `Deref`. Clones share one queue and one limiter.
///
/// The usual worker: on success [`forget`](Self::forget) the item, on failure
/// [`add_rate_limited`](Self::add_rate_limited) it, and in both cases
/// [`done`](crate::Queue::done) it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use workqueue::{RateLimitingQueue, default_controller_rate_limiter};
///
/// let queue = RateLimitingQueue::new(default_controller_rate_limiter());
/// queue.add("default/web");
/// let key = queue.get().await.unwrap();
/// // Reconciling failed: retry after the limiter's delay (5 ms for a first failure).
/// queue.add_rate_limited(key);
/// queue.done(&key);
///
/// let failed_at = Instant::now();
/// let key = queue.get().await.unwrap();
/// assert_eq!(failed_at.elapsed(), Duration::from_millis(5));
/// assert_eq!(queue.num_requeues(&key), 1);
/// // Reconciling succeeded: clear the history, then finish.
/// queue.forget(&key);
/// queue.done(&key);
/// # }
/// ```
pub struct RateLimitingQueue<T: Send> {
    queue: DelayingQueue<T>,
    limiter: Arc<dyn RateLimiter<T>>,
}

impl<T: Eq + Hash + Clone + Send + 'static> RateLimitingQueue<T> {
    /// An unnamed rate-limited queue without metrics, using `limiter`.
    ///
    /// Most controllers want
    /// [`default_controller_rate_limiter`](crate::default_controller_rate_limiter).
    pub fn new(limiter: impl RateLimiter<T> + 'static) -> Self {
        Self::with_config(limiter, QueueConfig::default())
    }

    /// A rate-limited queue built from `config` (see [`Queue::with_config`](crate::Queue::with_config)),
    /// using `limiter`.
    pub fn with_config(limiter: impl RateLimiter<T> + 'static, config: QueueConfig) -> Self {
        Self {
            queue: DelayingQueue::with_config(config),
            limiter: Arc::new(limiter),
        }
    }

    /// Adds `item` after the delay the limiter gives it: `add_after(item, limiter.when(&item))`.
    ///
    /// Asking the limiter counts as a failure of `item` (and takes a token from a bucket),
    /// also after shutdown, as in client-go; the add itself is then ignored.
    pub fn add_rate_limited(&self, item: T) {
        let delay = self.limiter.when(&item);
        self.queue.add_after(item, delay);
    }

    /// Adds `item` as `opts` say: after `opts.after`, or after the limiter's delay if
    /// `opts.rate_limited` (the shorter of the two if both are set, as in controller-runtime),
    /// with `opts.priority`. A zero delay adds it now. Returns the delay it was added with.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use workqueue::{AddOpts, RateLimitingQueue, default_controller_rate_limiter};
    ///
    /// let queue = RateLimitingQueue::new(default_controller_rate_limiter());
    /// queue.add_with("default/web", AddOpts::new().priority(-100).rate_limited());
    /// assert_eq!(queue.get_with_priority().await, Some(("default/web", -100)));
    /// # }
    /// ```
    pub fn add_with(&self, item: T, opts: AddOpts) -> Duration {
        let mut delay = opts.after;
        if opts.rate_limited {
            let limited = self.limiter.when(&item);
            if delay.is_zero() || limited < delay {
                delay = limited;
            }
        }
        if delay.is_zero() && !opts.rate_limited {
            self.queue.add_with_priority(item, opts.priority);
        } else {
            self.queue
                .add_after_with_priority(item, delay, opts.priority);
        }
        delay
    }

    /// Clears the limiter's failure history for `item`, so its next failure starts over at the
    /// shortest delay.
    ///
    /// This only clears history: it neither removes the item from the queue nor replaces
    /// [`done`](crate::Queue::done), which the item still needs.
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times `item` was rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }
}

impl<T: Send> Deref for RateLimitingQueue<T> {
    type Target = DelayingQueue<T>;

    fn deref(&self) -> &DelayingQueue<T> {
        &self.queue
    }
}

impl<T: Send> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<T: Send> fmt::Debug for RateLimitingQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RateLimitingQueue")
            .field(&*self.queue)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::{Instant, advance};

    use super::*;
    use crate::rate_limiter::{ItemExponentialFailure, default_controller_rate_limiter};

    const MS: Duration = Duration::from_millis(1);

    fn queue() -> RateLimitingQueue<&'static str> {
        RateLimitingQueue::new(ItemExponentialFailure::new(5 * MS, Duration::from_secs(1)).unwrap())
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn assert_send_sync<X: Send + Sync>(_: &X) {}
        assert_send_sync(&RateLimitingQueue::<String>::new(
            default_controller_rate_limiter(),
        ));
        assert_send_sync(&crate::DelayingQueue::<String>::new());
    }

    #[tokio::test(start_paused = true)]
    async fn add_rate_limited_waits_the_limiters_growing_delay() {
        let queue = queue();
        let mut waited = Vec::new();
        for _ in 0..4 {
            let start = Instant::now();
            queue.add_rate_limited("x");
            assert_eq!(queue.get().await, Some("x"));
            waited.push(start.elapsed());
            queue.done(&"x");
        }
        assert_eq!(waited, [5, 10, 20, 40].map(Duration::from_millis));
        assert_eq!(queue.num_requeues(&"x"), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn forget_clears_history_only() {
        let queue = queue();
        queue.add("x");
        assert_eq!(queue.get().await, Some("x"));
        queue.add_rate_limited("x");
        queue.add_rate_limited("x");
        assert_eq!(queue.num_requeues(&"x"), 2);
        queue.forget(&"x");
        assert_eq!(queue.num_requeues(&"x"), 0);
        // Still being processed and still pending: forget touched neither.
        assert_eq!(queue.pending_delayed(), 1);
        advance(5 * MS).await;
        assert_eq!(queue.len(), 0, "not handed out again before done");
        queue.done(&"x");
        assert_eq!(queue.get().await, Some("x"));
    }

    #[tokio::test(start_paused = true)]
    async fn add_rate_limited_after_shut_down_is_ignored_but_counted_by_the_limiter() {
        let queue = queue();
        queue.shut_down();
        queue.add_rate_limited("x");
        assert_eq!(queue.pending_delayed(), 0);
        assert_eq!(queue.num_requeues(&"x"), 1);
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn default_limiter_paces_a_burst_of_failures() {
        let queue = RateLimitingQueue::new(default_controller_rate_limiter());
        let start = Instant::now();
        for item in 0..102u32 {
            queue.add_rate_limited(item);
        }
        let mut arrivals = Vec::new();
        for _ in 0..102 {
            let item = queue.get().await.unwrap();
            arrivals.push((item, start.elapsed()));
            queue.done(&item);
        }
        assert!(arrivals[..100].iter().all(|&(_, at)| at == 5 * MS));
        assert_eq!(arrivals[100..], [(100, 100 * MS), (101, 200 * MS)]);
    }
}
