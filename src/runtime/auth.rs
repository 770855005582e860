//! Authentication and authorization of requests to `/metrics` through the API server, as
//! controller-runtime's `filters.WithAuthenticationAndAuthorization` does it.
//!
//! A scrape must carry `Authorization: Bearer <token>`. The [`Authorizer`]:
//!
//! 1. asks the API server who the token belongs to with a `TokenReview`
//!    (`authentication.k8s.io/v1`); no token, or one the server does not authenticate, is a
//!    **401** `Unauthorized`;
//! 2. asks whether that user may make the request with a `SubjectAccessReview`
//!    (`authorization.k8s.io/v1`) for a non-resource URL: the request's path, and its HTTP
//!    method in lower case as the verb (`get`), with the user's name, uid, groups and extra
//!    from the token review; anything but `allowed` is a **403** `Authorization denied for
//!    user <name>`;
//! 3. lets the request through.
//!
//! A review that fails (the API server cannot be reached, or refuses the review itself, say
//! for want of the `create` rights below) is a **500**, and is retried first: up to five
//! attempts, 0.5 s apart growing by half each time, as controller-runtime's webhook backoff
//! (without its jitter), each attempt given 10 s.
//!
//! The operator needs `create` on `tokenreviews` and `subjectaccessreviews` (kubebuilder's
//! `metrics-auth-role`); a scraper needs `get` on the non-resource URL `/metrics`
//! (`metrics-reader`).
//!
//! # Caching
//!
//! As controller-runtime's delegating authenticator and authorizer: a token's review is kept
//! for 1 minute (authenticated or not); an access decision for 5 minutes when allowed and
//! 30 seconds when denied. Failed reviews are not kept. Tokens are never kept as they are:
//! the cache is keyed by an HMAC-SHA256 of the token under a key drawn at random for each
//! [`Authorizer`], so a memory dump shows no token, and the cache holds at most
//! [`CACHE_LIMIT`] entries of each kind (expired entries are dropped first, then the whole
//! cache when it is still full).
//!
//! Nothing here logs a token: denials are logged at debug level with the user's name only.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, StatusCode};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::client::{Api, Client, PostParams};

/// What a review can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server could not be asked, or refused the review.
    #[error("creating a {what}: {source}")]
    Review {
        /// `TokenReview` or `SubjectAccessReview`.
        what: &'static str,
        /// The client's error.
        #[source]
        source: crate::client::Error,
    },
    /// The API server did not answer in time.
    #[error("creating a {what}: no answer within {REVIEW_TIMEOUT:?}")]
    Timeout {
        /// `TokenReview` or `SubjectAccessReview`.
        what: &'static str,
    },
}

/// How long one review may take.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a token's review is kept.
pub const TOKEN_TTL: Duration = Duration::from_secs(60);
/// How long an allowed access decision is kept.
pub const ALLOW_TTL: Duration = Duration::from_secs(5 * 60);
/// How long a denied access decision is kept.
pub const DENY_TTL: Duration = Duration::from_secs(30);
/// The most entries each cache holds.
pub const CACHE_LIMIT: usize = 4096;
/// Attempts at a review before it fails.
const ATTEMPTS: u32 = 5;
/// The wait before the second attempt; each later wait is half as long again.
const FIRST_RETRY: Duration = Duration::from_millis(500);

/// What the [`Authorizer`] decided about a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it.
    Allow,
    /// No token, or one the API server does not authenticate: 401.
    Unauthorized,
    /// The user may not: 403.
    Forbidden {
        /// The user's name.
        user: String,
    },
    /// A review failed: 500, with this body.
    Failed(String),
}

impl Verdict {
    /// The status and text body to answer with instead of serving; `None` for
    /// [`Verdict::Allow`]. The bodies are controller-runtime's (Go's `http.Error` adds the
    /// newline).
    pub fn refusal(&self) -> Option<(StatusCode, String)> {
        match self {
            Verdict::Allow => None,
            Verdict::Unauthorized => Some((StatusCode::UNAUTHORIZED, "Unauthorized\n".to_owned())),
            Verdict::Forbidden { user } => Some((
                StatusCode::FORBIDDEN,
                format!("Authorization denied for user {user}\n"),
            )),
            Verdict::Failed(message) => {
                Some((StatusCode::INTERNAL_SERVER_ERROR, format!("{message}\n")))
            }
        }
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The two reviews, behind a seam so that the caching and the decisions are tested without
/// an API server.
pub(crate) trait Reviews: Send + Sync {
    /// The token review's verdict: the user, or `None` when not authenticated.
    fn review_token(&self, token: &str) -> BoxFuture<'_, Result<Option<UserInfo>, Error>>;
    /// Whether the access review allows `spec`.
    fn review_access(&self, spec: SubjectAccessReviewSpec) -> BoxFuture<'_, Result<bool, Error>>;
}

/// The reviews, asked of the API server with the manager's client.
struct ApiReviews {
    client: Client,
}

impl Reviews for ApiReviews {
    fn review_token(&self, token: &str) -> BoxFuture<'_, Result<Option<UserInfo>, Error>> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        Box::pin(async move {
            let api = Api::<TokenReview>::cluster(self.client.clone());
            let answer = create(&api, &review, "TokenReview").await?;
            let status = answer.status.unwrap_or_default();
            Ok(status
                .authenticated
                .unwrap_or(false)
                .then(|| status.user.unwrap_or_default()))
        })
    }

    fn review_access(&self, spec: SubjectAccessReviewSpec) -> BoxFuture<'_, Result<bool, Error>> {
        let review = SubjectAccessReview {
            spec,
            ..SubjectAccessReview::default()
        };
        Box::pin(async move {
            let api = Api::<SubjectAccessReview>::cluster(self.client.clone());
            let answer = create(&api, &review, "SubjectAccessReview").await?;
            Ok(answer.status.is_some_and(|s| s.allowed))
        })
    }
}

/// Creates `review`, retrying failures that may pass (no answer, a 5xx, a 429).
async fn create<K>(api: &Api<K>, review: &K, what: &'static str) -> Result<K, Error>
where
    K: serde::de::DeserializeOwned + serde::Serialize,
{
    let mut wait = FIRST_RETRY;
    let mut attempt = 1;
    loop {
        let result =
            tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), review)).await;
        let error = match result {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(source)) => {
                let lasting = source
                    .code()
                    .is_some_and(|c| (400..500).contains(&c) && c != 429);
                let error = Error::Review { what, source };
                if lasting {
                    return Err(error);
                }
                error
            }
            Err(_) => Error::Timeout { what },
        };
        if attempt >= ATTEMPTS {
            return Err(error);
        }
        tracing::debug!(%error, attempt, "review failed; retrying");
        tokio::time::sleep(wait).await;
        wait = wait.mul_f64(1.5);
        attempt += 1;
    }
}

// === TtlCache ===

/// Entries that expire, at most [`CACHE_LIMIT`] of them.
struct TtlCache<K, V> {
    entries: HashMap<K, (Instant, V)>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        TtlCache {
            entries: HashMap::new(),
        }
    }

    fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, v)| v.clone())
    }

    fn insert(&mut self, key: K, value: V, expires: Instant, now: Instant) {
        if self.entries.len() >= CACHE_LIMIT && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (e, _)| *e > now);
            if self.entries.len() >= CACHE_LIMIT {
                self.entries.clear();
            }
        }
        self.entries.insert(key, (expires, value));
    }
}

// === Authorizer ===

/// Decides whether a request to the metrics server is served; see the [module docs](self).
/// Cheap to clone: clones share the caches.
#[derive(Clone)]
pub struct Authorizer {
    inner: Arc<Inner>,
}

struct Inner {
    reviews: Box<dyn Reviews>,
    /// Keys the token cache: tokens are cached by their HMAC under it, never as they are.
    token_key: ring::hmac::Key,
    /// Token digest → the user it authenticated as (`None`: not authenticated).
    tokens: Mutex<TtlCache<[u8; 32], Option<UserInfo>>>,
    /// The access review's spec, as JSON → allowed.
    decisions: Mutex<TtlCache<String, bool>>,
}

impl fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// Reviews tokens and access with `client`, whose identity needs `create` on
    /// `tokenreviews.authentication.k8s.io` and `subjectaccessreviews.authorization.k8s.io`.
    pub fn new(client: Client) -> Authorizer {
        Authorizer::with_reviews(Box::new(ApiReviews { client }))
    }

    pub(crate) fn with_reviews(reviews: Box<dyn Reviews>) -> Authorizer {
        let rng = ring::rand::SystemRandom::new();
        let token_key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .expect("the system's random number generator works");
        Authorizer {
            inner: Arc::new(Inner {
                reviews,
                token_key,
                tokens: Mutex::new(TtlCache::new()),
                decisions: Mutex::new(TtlCache::new()),
            }),
        }
    }

    /// Decides on a request with `method` to `path` carrying the `authorization` header (if
    /// any).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a review cut short is simply not cached.
    pub async fn check(
        &self,
        authorization: Option<&HeaderValue>,
        method: &Method,
        path: &str,
    ) -> Verdict {
        let Some(token) = authorization.and_then(bearer_token) else {
            tracing::debug!(path, "unauthorized: no bearer token");
            return Verdict::Unauthorized;
        };
        let user = match self.authenticate(token).await {
            Ok(Some(user)) => user,
            Ok(None) => {
                tracing::debug!(path, "unauthorized: the token is not authenticated");
                return Verdict::Unauthorized;
            }
            Err(error) => {
                tracing::error!(%error, "authentication failed");
                return Verdict::Failed("Authentication failed".to_owned());
            }
        };
        let name = user.username.clone().unwrap_or_default();
        let spec = SubjectAccessReviewSpec {
            user: user.username,
            uid: user.uid,
            groups: user.groups,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some(method.as_str().to_lowercase()),
            }),
            resource_attributes: None,
        };
        match self.authorize(spec).await {
            Ok(true) => Verdict::Allow,
            Ok(false) => {
                tracing::debug!(user = %name, path, "authorization denied");
                Verdict::Forbidden { user: name }
            }
            Err(error) => {
                tracing::error!(%error, user = %name, "authorization failed");
                Verdict::Failed(format!("Authorization for user {name} failed"))
            }
        }
    }

    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, Error> {
        let mut digest = [0u8; 32];
        digest.copy_from_slice(ring::hmac::sign(&self.inner.token_key, token.as_bytes()).as_ref());
        if let Some(user) = self.inner.tokens.lock().get(&digest, Instant::now()) {
            return Ok(user);
        }
        let user = self.inner.reviews.review_token(token).await?;
        let now = Instant::now();
        self.inner
            .tokens
            .lock()
            .insert(digest, user.clone(), now + TOKEN_TTL, now);
        Ok(user)
    }

    async fn authorize(&self, spec: SubjectAccessReviewSpec) -> Result<bool, Error> {
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(allowed) = self.inner.decisions.lock().get(&key, Instant::now()) {
            return Ok(allowed);
        }
        let allowed = self.inner.reviews.review_access(spec).await?;
        let now = Instant::now();
        let ttl = if allowed { ALLOW_TTL } else { DENY_TTL };
        self.inner
            .decisions
            .lock()
            .insert(key, allowed, now + ttl, now);
        Ok(allowed)
    }
}

/// The token of an `Authorization: Bearer <token>` header, as the API server's bearer token
/// authenticator reads it: trimmed, the scheme in any case, then the token up to the next
/// space; an empty token is none.
fn bearer_token(header: &HeaderValue) -> Option<&str> {
    let mut parts = header.to_str().ok()?.trim().splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Reviews from fixed tables, counting how often each is asked.
    #[derive(Default)]
    struct Fake {
        /// token → user name
        users: BTreeMap<String, String>,
        /// user names allowed
        allowed: Vec<String>,
        fail: bool,
        token_reviews: Arc<AtomicUsize>,
        access_reviews: Arc<AtomicUsize>,
        last_spec: Arc<Mutex<Option<SubjectAccessReviewSpec>>>,
    }

    impl Reviews for Fake {
        fn review_token(&self, token: &str) -> BoxFuture<'_, Result<Option<UserInfo>, Error>> {
            self.token_reviews.fetch_add(1, Ordering::SeqCst);
            let user = self.users.get(token).map(|name| UserInfo {
                username: Some(name.clone()),
                uid: Some(format!("uid-{name}")),
                groups: Some(vec!["system:authenticated".into()]),
                extra: None,
            });
            let fail = self.fail;
            Box::pin(async move {
                if fail {
                    return Err(Error::Timeout {
                        what: "TokenReview",
                    });
                }
                Ok(user)
            })
        }

        fn review_access(
            &self,
            spec: SubjectAccessReviewSpec,
        ) -> BoxFuture<'_, Result<bool, Error>> {
            self.access_reviews.fetch_add(1, Ordering::SeqCst);
            let allowed = self
                .allowed
                .contains(spec.user.as_ref().unwrap_or(&String::new()));
            *self.last_spec.lock() = Some(spec);
            Box::pin(async move { Ok(allowed) })
        }
    }

    fn bearer(token: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap()
    }

    fn fake() -> Fake {
        Fake {
            users: BTreeMap::from([
                ("good".to_owned(), "reader".to_owned()),
                ("other".to_owned(), "stranger".to_owned()),
            ]),
            allowed: vec!["reader".to_owned()],
            ..Fake::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn no_token_or_an_unknown_one_is_unauthorized() {
        let auth = Authorizer::with_reviews(Box::new(fake()));
        assert_eq!(
            auth.check(None, &Method::GET, "/metrics").await,
            Verdict::Unauthorized
        );
        let basic = HeaderValue::from_static("Basic dXNlcjpwYXNz");
        assert_eq!(
            auth.check(Some(&basic), &Method::GET, "/metrics").await,
            Verdict::Unauthorized
        );
        assert_eq!(
            auth.check(Some(&bearer("nope")), &Method::GET, "/metrics")
                .await,
            Verdict::Unauthorized
        );
        let (status, body) = Verdict::Unauthorized.refusal().unwrap();
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::UNAUTHORIZED, "Unauthorized\n")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_allowed_user_passes_and_another_is_forbidden_by_name() {
        let fake = fake();
        let spec = fake.last_spec.clone();
        let auth = Authorizer::with_reviews(Box::new(fake));
        assert_eq!(
            auth.check(Some(&bearer("good")), &Method::GET, "/metrics")
                .await,
            Verdict::Allow
        );
        let asked = spec.lock().clone().unwrap();
        assert_eq!(asked.user.as_deref(), Some("reader"));
        assert_eq!(asked.uid.as_deref(), Some("uid-reader"));
        assert_eq!(asked.groups, Some(vec!["system:authenticated".to_owned()]));
        let attributes = asked.non_resource_attributes.unwrap();
        assert_eq!(
            (attributes.path.as_deref(), attributes.verb.as_deref()),
            (Some("/metrics"), Some("get"))
        );
        assert!(asked.resource_attributes.is_none());

        let denied = auth
            .check(Some(&bearer("other")), &Method::GET, "/metrics")
            .await;
        assert_eq!(
            denied,
            Verdict::Forbidden {
                user: "stranger".into()
            }
        );
        assert_eq!(
            denied.refusal().unwrap(),
            (
                StatusCode::FORBIDDEN,
                "Authorization denied for user stranger\n".to_owned()
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reviews_are_cached_for_controller_runtimes_times() {
        let fake = fake();
        let (tokens, access) = (fake.token_reviews.clone(), fake.access_reviews.clone());
        let auth = Authorizer::with_reviews(Box::new(fake));
        let check = async |token: &str| {
            auth.check(Some(&bearer(token)), &Method::GET, "/metrics")
                .await
        };
        check("good").await;
        check("good").await;
        check("other").await;
        check("other").await;
        assert_eq!(
            tokens.load(Ordering::SeqCst),
            2,
            "one token review per token"
        );
        assert_eq!(
            access.load(Ordering::SeqCst),
            2,
            "one access review per user"
        );

        // After 30 s the denial is asked again; the allowance and the tokens are kept.
        tokio::time::advance(DENY_TTL + Duration::from_millis(1)).await;
        check("good").await;
        check("other").await;
        assert_eq!(tokens.load(Ordering::SeqCst), 2);
        assert_eq!(access.load(Ordering::SeqCst), 3);

        // After a minute the tokens are reviewed again.
        tokio::time::advance(TOKEN_TTL).await;
        check("good").await;
        assert_eq!(tokens.load(Ordering::SeqCst), 3);
        assert_eq!(
            access.load(Ordering::SeqCst),
            3,
            "the allowance lasts 5 minutes"
        );
        tokio::time::advance(ALLOW_TTL).await;
        check("good").await;
        assert_eq!(access.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_review_is_a_500_and_is_not_cached() {
        let fake = Fake {
            fail: true,
            ..fake()
        };
        let tokens = fake.token_reviews.clone();
        let auth = Authorizer::with_reviews(Box::new(fake));
        for _ in 0..2 {
            let verdict = auth
                .check(Some(&bearer("good")), &Method::GET, "/metrics")
                .await;
            assert_eq!(
                verdict.refusal().unwrap(),
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Authentication failed\n".to_owned()
                )
            );
        }
        assert_eq!(tokens.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn bearer_tokens_are_read_as_the_api_server_reads_them() {
        let token = |s: &'static str| bearer_token(&HeaderValue::from_static(s)).map(str::to_owned);
        assert_eq!(token("Bearer abc"), Some("abc".to_owned()));
        assert_eq!(token("bearer abc"), Some("abc".to_owned()));
        assert_eq!(token("  BEARER abc  "), Some("abc".to_owned()));
        assert_eq!(token("Bearer "), None);
        assert_eq!(token("Bearer"), None);
        assert_eq!(token("Bearer a b"), Some("a".to_owned()));
        assert_eq!(token("Bearer  a"), None);
        assert_eq!(token("Basic abc"), None);
    }

    #[test]
    fn a_full_cache_drops_expired_entries_first_then_everything() {
        let now = Instant::now();
        let mut cache = TtlCache::new();
        for i in 0..CACHE_LIMIT {
            let expires = if i % 2 == 0 { now } else { now + DENY_TTL };
            cache.insert(i, i, expires, now);
        }
        cache.insert(CACHE_LIMIT, 0, now + DENY_TTL, now);
        assert_eq!(cache.entries.len(), CACHE_LIMIT / 2 + 1);
        assert_eq!(cache.get(&1, now), Some(1));
        assert_eq!(cache.get(&0, now), None);
        for i in 0..CACHE_LIMIT {
            cache.insert(CACHE_LIMIT + 1 + i, 0, now + DENY_TTL, now);
        }
        assert!(cache.entries.len() <= CACHE_LIMIT);
    }
}
