//! Writes a reconciler needs: create or update, retry on conflict, status updates,
//! server-side apply, and [`apply_cached`], which keeps an owned object in line with the
//! cheapest write (or none) given the cache's copy.
//!
//! ```no_run
//! use controller_runtime::client::{Api, Client};
//! use controller_runtime::runtime::ops::{self, Backoff, OperationResult};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! # async fn run(client: Client) -> Result<(), ops::Error> {
//! let configmaps: Api<ConfigMap> = Api::namespaced(client, "shop");
//! // Read, change what we own, write only if something changed; on a conflict (someone
//! // wrote in between), read again and redo the change.
//! let (cm, result) = ops::retry_on_conflict(Backoff::default(), || {
//!     ops::create_or_update(&configmaps, "settings", |cm| {
//!         cm.data
//!             .get_or_insert_with(Default::default)
//!             .insert("size".into(), "3".into());
//!         Ok(())
//!     })
//! })
//! .await?;
//! if result != OperationResult::Unchanged {
//!     println!("{result} {}", cm.metadata.name.unwrap_or_default());
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::client::{self, Api, Patch, PatchParams, PostParams};

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any error, boxed: what a mutate function of [`create_or_update`] returns, so that `?`
/// works on any error type (and on `String` and `&str`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a write helper failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused the request, or could not be reached.
    #[error(transparent)]
    Client(#[from] client::Error),

    /// The mutate function of [`create_or_update`] failed; nothing was written.
    #[error("the mutate function failed: {0}")]
    Mutate(#[source] BoxError),

    /// The mutate function of [`create_or_update`] changed the object's name or namespace;
    /// nothing was written.
    #[error(
        "the mutate function may not change the object's name or namespace ({before} became {after})"
    )]
    KeyChanged {
        /// `namespace/name` before.
        before: String,
        /// `namespace/name` after.
        after: String,
    },

    /// The object given has no `metadata.name`, which the request needs.
    #[error("the {kind} has no metadata.name")]
    NoName {
        /// The object's kind.
        kind: &'static str,
    },

    /// The object could not be serialized to JSON.
    #[error("serializing the {kind}: {source}")]
    Serialize {
        /// The object's kind.
        kind: &'static str,
        /// serde_json's complaint.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Whether the server answered 409 Conflict: a write against a stale `resourceVersion`,
    /// a create of a name that is taken, or an apply conflict. [`retry_on_conflict`] retries
    /// exactly these.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Client(e) if e.is_conflict())
    }

    /// Whether the server answered 404 Not Found.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Client(e) if e.is_not_found())
    }
}

/// An error that can say whether it is a 409 Conflict: what [`retry_on_conflict`] retries.
pub trait Conflict {
    /// Whether this is a conflict worth retrying after reading the object again.
    fn is_conflict(&self) -> bool;
}

impl Conflict for client::Error {
    fn is_conflict(&self) -> bool {
        client::Error::is_conflict(self)
    }
}

impl Conflict for Error {
    fn is_conflict(&self) -> bool {
        Error::is_conflict(self)
    }
}

// === retry ===

/// How often and how long to wait between attempts: client-go's `wait.Backoff` without a
/// cap. The delay starts at `duration` and is multiplied by `factor` after each step; each
/// delay is stretched by a random fraction of up to `jitter` of itself.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// How many attempts in all (at least one is always made).
    pub steps: u32,
    /// The first delay.
    pub duration: Duration,
    /// What each delay is multiplied by for the next; 0 or 1 keeps it constant.
    pub factor: f64,
    /// Each delay is `d + random(0..1) * jitter * d`.
    pub jitter: f64,
}

impl Backoff {
    /// client-go's `retry.DefaultRetry`, meant for conflicts: 5 attempts, 10 ms apart, with
    /// 10 % jitter. Conflicts clear quickly; this is not for waiting out an outage.
    pub const DEFAULT_RETRY: Backoff = Backoff {
        steps: 5,
        duration: Duration::from_millis(10),
        factor: 1.0,
        jitter: 0.1,
    };

    /// client-go's `retry.DefaultBackoff`, for errors that take longer to clear: 4 attempts,
    /// 10 ms, then ×5 each time, with 10 % jitter.
    pub const DEFAULT_BACKOFF: Backoff = Backoff {
        steps: 4,
        duration: Duration::from_millis(10),
        factor: 5.0,
        jitter: 0.1,
    };

    /// The next delay, jittered by `random` in `[0, 1)`; advances the state.
    fn step(&mut self, random: f64) -> Duration {
        self.steps = self.steps.saturating_sub(1);
        let delay = self.duration;
        if self.factor != 0.0 {
            self.duration = self.duration.mul_f64(self.factor.max(0.0));
        }
        if self.jitter > 0.0 {
            delay + delay.mul_f64(self.jitter * random.clamp(0.0, 1.0))
        } else {
            delay
        }
    }
}

impl Default for Backoff {
    /// [`Backoff::DEFAULT_RETRY`].
    fn default() -> Self {
        Backoff::DEFAULT_RETRY
    }
}

/// Runs `f` until it succeeds, fails with an error that is not a conflict, or `backoff` has
/// no attempts left (then the last conflict is returned): client-go's
/// `retry.RetryOnConflict`. `f` must read the object afresh each time, or every retry meets
/// the same conflict.
///
/// # Errors
///
/// The first error that is not a conflict, or the last conflict.
///
/// # Cancel safety
///
/// Dropping the future drops the attempt in flight; a write already sent may or may not
/// have been applied.
pub async fn retry_on_conflict<T, E, F, Fut>(backoff: Backoff, f: F) -> Result<T, E>
where
    E: Conflict,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    retry_on_error(backoff, E::is_conflict, f).await
}

/// Runs `f` until it succeeds, fails with an error `retriable` declines, or `backoff` has no
/// attempts left (then the last error is returned): client-go's `retry.OnError`.
///
/// # Errors
///
/// The first error `retriable` declines, or the last error.
///
/// # Cancel safety
///
/// As [`retry_on_conflict`].
pub async fn retry_on_error<T, E, F, Fut, R>(
    backoff: Backoff,
    mut retriable: R,
    mut f: F,
) -> Result<T, E>
where
    R: FnMut(&E) -> bool,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut backoff = backoff;
    loop {
        match f().await {
            Ok(value) => return Ok(value),
            Err(e) if backoff.steps <= 1 || !retriable(&e) => return Err(e),
            Err(_) => tokio::time::sleep(backoff.step(unit_random())).await,
        }
    }
}

/// A random number in `[0, 1)`, for jitter: the standard library's randomly keyed hasher
/// (fresh keys for every `RandomState`) over the clock.
fn unit_random() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    hasher.write_u32(nanos);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

// === create or update ===

/// What [`create_or_update`] did (controllerutil's `OperationResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OperationResult {
    /// The object did not exist and was created.
    Created,
    /// The object existed, the mutate function changed it, and it was written.
    Updated,
    /// The object existed and the mutate function changed nothing; nothing was written.
    Unchanged,
}

impl OperationResult {
    /// `created`, `updated` or `unchanged`, as controllerutil names them.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationResult::Created => "created",
            OperationResult::Updated => "updated",
            OperationResult::Unchanged => "unchanged",
        }
    }
}

impl fmt::Display for OperationResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads the object `name`, lets `mutate` bring it to the state wanted, and writes it only if
/// that changed something (controllerutil's `CreateOrUpdate`). If the object does not exist,
/// `mutate` starts from `K::default()` with the name and the API's namespace set, and the
/// result is created.
///
/// "Changed" compares the object's JSON before and after `mutate`. `mutate` should therefore
/// set the fields it owns rather than rebuild whole sub-objects: a rebuilt spec lacks the
/// fields the server defaulted, compares as changed every time, and makes every call a write.
///
/// Returns the object as the server stored it (or, when unchanged, as read) and what was
/// done.
///
/// # Errors
///
/// [`Error::Mutate`] if `mutate` fails and [`Error::KeyChanged`] if it changes the name or
/// namespace, both before any write; [`Error::Client`] if a request fails: a 409 conflict
/// when another writer got in between the read and the write (see [`retry_on_conflict`]).
///
/// # Cancel safety
///
/// Dropping the future after the write was sent leaves it applied or not.
pub async fn create_or_update<K, F>(
    api: &Api<K>,
    name: &str,
    mutate: F,
) -> Result<(K, OperationResult)>
where
    K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned + Default,
    F: FnOnce(&mut K) -> std::result::Result<(), BoxError>,
{
    match api.get_opt(name).await? {
        None => {
            let mut object = K::default();
            let meta = object.metadata_mut();
            meta.name = Some(name.to_owned());
            meta.namespace = api.namespace().map(str::to_owned);
            run_mutate(&mut object, mutate)?;
            let created = api.create(&PostParams::default(), &object).await?;
            Ok((created, OperationResult::Created))
        }
        Some(mut object) => {
            let before = to_json(&object)?;
            run_mutate(&mut object, mutate)?;
            if to_json(&object)? == before {
                return Ok((object, OperationResult::Unchanged));
            }
            let updated = api.replace(name, &PostParams::default(), &object).await?;
            Ok((updated, OperationResult::Updated))
        }
    }
}

/// Runs `mutate`, refusing a change of name or namespace.
fn run_mutate<K, F>(object: &mut K, mutate: F) -> Result<()>
where
    K: Metadata<Ty = ObjectMeta>,
    F: FnOnce(&mut K) -> std::result::Result<(), BoxError>,
{
    let before = key(object.metadata());
    mutate(object).map_err(Error::Mutate)?;
    let after = key(object.metadata());
    if before != after {
        return Err(Error::KeyChanged { before, after });
    }
    Ok(())
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn key(meta: &ObjectMeta) -> String {
    let name = meta.name.as_deref().unwrap_or("");
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

fn to_json<K: Resource + Serialize>(object: &K) -> Result<Value> {
    serde_json::to_value(object).map_err(|source| Error::Serialize {
        kind: K::KIND,
        source,
    })
}

fn name_of<K: Resource + Metadata<Ty = ObjectMeta>>(object: &K) -> Result<&str> {
    object
        .metadata()
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(Error::NoName { kind: K::KIND })
}

// === status ===

/// Replaces the object's status (PUT `…/{name}/status`; the server ignores every other
/// change). The object's `resourceVersion`, if set, makes the write conditional on it.
///
/// # Errors
///
/// [`Error::NoName`] if the object has no name; [`Error::Client`]: 409 if the object changed
/// since it was read, 404 if the kind has no status subresource.
///
/// # Cancel safety
///
/// Dropping the future after the request was sent leaves it applied or not.
pub async fn update_status<K>(api: &Api<K>, object: &K) -> Result<K>
where
    K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
{
    let name = name_of(object)?;
    Ok(api
        .replace_status(name, &PostParams::default(), object)
        .await?)
}

/// Merge-patches the status of the object `name` with `patch`, a JSON merge patch (RFC
/// 7386) of the whole object, e.g. `{"status": {"readyReplicas": 3}}`. Unconditional: no
/// `resourceVersion` is checked unless the patch carries one.
///
/// # Errors
///
/// [`Error::Client`]: 404 if the object (or the kind's status subresource) does not exist,
/// 422 if the result is invalid.
///
/// # Cancel safety
///
/// As [`update_status`].
pub async fn patch_status<K, P>(api: &Api<K>, name: &str, patch: &P) -> Result<K>
where
    K: Serialize + DeserializeOwned,
    P: Serialize,
{
    Ok(api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?)
}

// === server-side apply ===

/// Applies `object` server-side as `field_manager`, taking ownership of any field another
/// manager holds (`force=true`): the object becomes what `object` says for every field it
/// sets, and fields this manager set before but `object` leaves out are removed. Creates the
/// object if it does not exist. Reapplying the same object writes nothing.
///
/// `object` should hold only the fields this manager owns (a fresh object, not one read from
/// the server): its `apiVersion` and `kind` are filled in from `K` if the type does not
/// serialize them, and `metadata.managedFields`, which an apply may not carry, is dropped.
/// A `metadata.resourceVersion` makes the apply conditional on it.
///
/// # Errors
///
/// [`Error::NoName`] if the object has no name; [`Error::Client`]: 422 if the result is
/// invalid.
///
/// # Cancel safety
///
/// As [`update_status`].
pub async fn apply<K>(api: &Api<K>, object: &K, field_manager: &str) -> Result<K>
where
    K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
{
    let name = name_of(object)?;
    let body = apply_body(object)?;
    let params = PatchParams::apply(field_manager).force();
    Ok(api.patch(name, &params, &Patch::Apply(body)).await?)
}

/// Applies `object`'s status server-side as `field_manager` through the status subresource,
/// as [`apply`] does for the whole object. Only `status` (and the identifying metadata) of
/// `object` matters.
///
/// # Errors
///
/// As [`apply`]; 404 if the object does not exist.
///
/// # Cancel safety
///
/// As [`update_status`].
pub async fn apply_status<K>(api: &Api<K>, object: &K, field_manager: &str) -> Result<K>
where
    K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned,
{
    let name = name_of(object)?;
    let body = apply_body(object)?;
    let params = PatchParams::apply(field_manager).force();
    Ok(api.patch_status(name, &params, &Patch::Apply(body)).await?)
}

/// The body of an apply: the object's JSON with `apiVersion` and `kind` present and no
/// `metadata.managedFields`.
fn apply_body<K: Resource + Serialize>(object: &K) -> Result<Value> {
    let mut body = to_json(object)?;
    if let Value::Object(fields) = &mut body {
        fields
            .entry("apiVersion")
            .or_insert_with(|| Value::from(K::API_VERSION));
        fields.entry("kind").or_insert_with(|| Value::from(K::KIND));
        if let Some(Value::Object(meta)) = fields.get_mut("metadata") {
            meta.remove("managedFields");
        }
    }
    Ok(body)
}

// === apply from the cache ===

/// Brings the object to `want` with the cheapest write, or none, given `cached`, the copy
/// the cache holds (`None` if it holds none); returns the object as written (or `cached`,
/// unchanged) and what was done. A reconcile that keeps an owned object in line calls it
/// on every pass:
///
/// | `cached` | the write | result |
/// |---|---|---|
/// | `None` | a create (POST) of `want`; if the name is taken (409: the cache was behind, say just after this controller's own create), a read of the object, then as the rows below | `Created`, or as below |
/// | holds every field `want` sets, with `want`'s values ([`is_applied`]) | none | `Unchanged` |
/// | differs only in fields outside lists (a scale: `spec.replicas`) | an update (PUT) of `cached` with those fields, carrying its resourceVersion; if that meets 409 (the cache was behind), a merge patch of those fields alone | `Updated` |
/// | differs inside a list (a container's image) | a server-side apply of `want` | `Updated` |
///
/// An update is the write the API server does fastest, then a merge patch, then an apply
/// (`benches/deployment-writes.py` measures the three; an update took about half an
/// apply's time on the local cluster), and the change most often made, a scale, is one.
/// A list changes only by an apply, which merges list entries by their keys (containers by
/// name) where an update by position could mistake one entry for another. A create
/// reports `Created` only for an object the server made then, so a reconcile that reads a
/// cache behind its own write neither writes twice nor announces a second creation. Fields the
/// server or others set beyond what `want` sets are left alone; unlike a plain apply, a
/// field `want` stops setting is not removed.
///
/// Every write is made as `field_manager`; `want` should hold only the fields this manager
/// owns, as for [`apply`].
///
/// # Errors
///
/// [`Error::NoName`] if `want` has no name, [`Error::Serialize`] if an object does not
/// serialize, [`Error::Client`] if the write is refused: 422 if the result is invalid, or
/// the apply's own refusals (another controller's reference, RBAC).
///
/// # Cancel safety
///
/// As [`update_status`].
///
/// ```no_run
/// use controller_runtime::client::Api;
/// use controller_runtime::runtime::ops::{self, OperationResult};
/// use controller_runtime::runtime::Store;
/// use k8s_openapi::api::apps::v1::Deployment;
///
/// # async fn run(api: Api<Deployment>, cache: Store<Deployment>, want: Deployment)
/// #     -> Result<(), Box<dyn std::error::Error>> {
/// let cached = cache.get("shop", "web").await?;
/// let (deployment, result) = ops::apply_cached(&api, cached.as_deref(), &want, "shop-operator").await?;
/// if result != OperationResult::Unchanged {
///     println!("{result} {:?}", deployment.metadata.name);
/// }
/// # Ok(())
/// # }
/// ```
pub async fn apply_cached<K>(
    api: &Api<K>,
    cached: Option<&K>,
    want: &K,
    field_manager: &str,
) -> Result<(K, OperationResult)>
where
    K: Resource + Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned + Clone,
{
    let name = name_of(want)?;
    let live;
    let cached = match cached {
        Some(cached) => cached,
        None => {
            let params = PostParams {
                field_manager: Some(field_manager.to_owned()),
                ..PostParams::default()
            };
            match api.create(&params, want).await {
                Ok(created) => return Ok((created, OperationResult::Created)),
                // The name is taken: the cache has not seen the object yet. Go on from
                // the server's copy.
                Err(e) if e.is_conflict() => {
                    live = api.get(name).await?;
                    &live
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let mut have = to_json(cached)?;
    let fields = match missing(Some(&have), &apply_body(want)?) {
        Missing::Nothing => return Ok((cached.clone(), OperationResult::Unchanged)),
        Missing::InList => {
            let applied = apply(api, want, field_manager).await?;
            return Ok((applied, OperationResult::Updated));
        }
        Missing::Fields(fields) => fields,
    };
    merge(&mut have, fields.clone());
    let updated: K = serde_json::from_value(have).map_err(|source| Error::Serialize {
        kind: K::KIND,
        source,
    })?;
    let params = PostParams {
        field_manager: Some(field_manager.to_owned()),
        ..PostParams::default()
    };
    let written = match api.replace(name, &params, &updated).await {
        Err(e) if e.is_conflict() => {
            let params = PatchParams {
                field_manager: Some(field_manager.to_owned()),
                ..PatchParams::default()
            };
            api.patch(name, &params, &Patch::Merge(fields)).await?
        }
        written => written?,
    };
    Ok((written, OperationResult::Updated))
}

/// Whether `have` holds every field `want` sets, with `want`'s values: what
/// [`apply_cached`] writes nothing for. Fields `want` leaves unset (or sets empty) and
/// fields only `have` holds (server defaults, other managers' fields) do not count; lists
/// must match entry by entry.
///
/// ```
/// use controller_runtime::runtime::ops::is_applied;
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// let mut want = ConfigMap::default();
/// want.data = Some([("size".to_owned(), "3".to_owned())].into());
/// let mut have = want.clone();
/// have.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into()); // someone else's
/// assert!(is_applied(&have, &want));
/// have.data = Some([("size".to_owned(), "2".to_owned())].into());
/// assert!(!is_applied(&have, &want));
/// ```
pub fn is_applied<K: Resource + Serialize>(have: &K, want: &K) -> bool {
    match (to_json(have), apply_body(want)) {
        (Ok(have), Ok(want)) => matches!(missing(Some(&have), &want), Missing::Nothing),
        _ => false,
    }
}

/// What of `want` an object lacks.
#[derive(Debug, PartialEq)]
enum Missing {
    /// Nothing: it holds every field `want` sets.
    Nothing,
    /// These fields, a merge patch with no list in it.
    Fields(Value),
    /// A list, or a field inside one.
    InList,
}

/// What of `want` is missing from `have` (`None`: the field is absent).
fn missing(have: Option<&Value>, want: &Value) -> Missing {
    match (have, want) {
        (have, Value::Object(want)) => {
            let none = Map::new();
            let have = match have {
                Some(Value::Object(have)) => have,
                _ => &none,
            };
            let mut fields = Map::new();
            for (key, want) in want {
                match missing(have.get(key), want) {
                    Missing::Nothing => {}
                    Missing::Fields(value) => {
                        fields.insert(key.clone(), value);
                    }
                    Missing::InList => return Missing::InList,
                }
            }
            if fields.is_empty() {
                Missing::Nothing
            } else {
                Missing::Fields(Value::Object(fields))
            }
        }
        (Some(Value::Array(have)), Value::Array(want)) => {
            let same = have.len() == want.len()
                && have
                    .iter()
                    .zip(want)
                    .all(|(h, w)| missing(Some(h), w) == Missing::Nothing);
            if same {
                Missing::Nothing
            } else {
                Missing::InList
            }
        }
        (_, want) if is_empty(want) => Missing::Nothing,
        (Some(have), want) if have == want => Missing::Nothing,
        (_, Value::Array(_)) => Missing::InList,
        (_, want) => Missing::Fields(want.clone()),
    }
}

/// Whether `value` sets nothing: `null`, `{}` or `[]`.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(list) => list.is_empty(),
        _ => false,
    }
}

/// Applies the merge patch `patch` (no `null`s in it) to `target`.
fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                match target.get_mut(&key) {
                    Some(slot) if slot.is_object() && value.is_object() => merge(slot, value),
                    _ => {
                        target.insert(key, value);
                    }
                }
            }
        }
        (target, patch) => *target = patch,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Status};

    use super::*;

    fn api_error(code: i32) -> client::Error {
        client::Error::Api(Box::new(Status {
            code: Some(code),
            ..Status::default()
        }))
    }

    #[test]
    fn default_retry_waits_ten_milliseconds_with_a_tenth_of_jitter() {
        let mut b = Backoff::default();
        assert_eq!(b, Backoff::DEFAULT_RETRY);
        assert_eq!(b.step(0.0), Duration::from_millis(10));
        assert_eq!(b.step(0.5), Duration::from_micros(10_500));
        assert_eq!(b.step(0.999_999), Duration::from_nanos(10_999_999));
        assert_eq!(b.steps, 2);
    }

    #[test]
    fn default_backoff_multiplies_by_five() {
        let mut b = Backoff::DEFAULT_BACKOFF;
        let delays: Vec<_> = (0..3).map(|_| b.step(0.0)).collect();
        assert_eq!(delays, [10, 50, 250].map(Duration::from_millis).to_vec());
    }

    #[test]
    fn unit_random_stays_in_the_unit_interval() {
        for _ in 0..1000 {
            let r = unit_random();
            assert!((0.0..1.0).contains(&r), "{r}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_on_conflict_retries_conflicts_until_success() {
        let attempts = AtomicU32::new(0);
        let out = retry_on_conflict(Backoff::default(), || async {
            match attempts.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(api_error(409)),
                _ => Ok("written"),
            }
        })
        .await
        .unwrap();
        assert_eq!(out, "written");
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_on_conflict_gives_up_after_five_attempts_with_the_last_conflict() {
        let attempts = AtomicU32::new(0);
        let err = retry_on_conflict(Backoff::default(), || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(api_error(409))
        })
        .await
        .unwrap_err();
        assert!(err.is_conflict());
        assert_eq!(attempts.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_on_conflict_returns_other_errors_at_once() {
        let attempts = AtomicU32::new(0);
        let err = retry_on_conflict(Backoff::default(), || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Error::from(api_error(422)))
        })
        .await
        .unwrap_err();
        assert!(
            matches!(err, Error::Client(ref e) if e.is_invalid()),
            "{err}"
        );
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_sleeps_between_attempts_only() {
        let begin = tokio::time::Instant::now();
        let plan = Backoff {
            jitter: 0.0,
            ..Backoff::DEFAULT_RETRY
        };
        let _ = retry_on_conflict(plan, || async { Err::<(), _>(api_error(409)) }).await;
        assert_eq!(begin.elapsed(), Duration::from_millis(40));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_steps_still_make_one_attempt() {
        let plan = Backoff {
            steps: 0,
            ..Backoff::DEFAULT_RETRY
        };
        let attempts = AtomicU32::new(0);
        let _ = retry_on_conflict(plan, || async {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(api_error(409))
        })
        .await;
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn mutate_may_not_rename_or_move_the_object() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        cm.metadata.namespace = Some("ns".into());
        let err = run_mutate(&mut cm, |cm| {
            cm.metadata.name = Some("b".into());
            Ok(())
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the mutate function may not change the object's name or namespace (ns/a became ns/b)"
        );
        let err = run_mutate(&mut cm, |cm| {
            cm.metadata.namespace = None;
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(err, Error::KeyChanged { .. }), "{err}");
    }

    #[test]
    fn mutate_errors_are_kept_as_the_source() {
        let mut cm = ConfigMap::default();
        let err = run_mutate(&mut cm, |_| Err("no size given".into())).unwrap_err();
        assert_eq!(err.to_string(), "the mutate function failed: no size given");
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn apply_body_names_its_type_and_drops_managed_fields() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".into());
        cm.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        let body = apply_body(&cm).unwrap();
        assert_eq!(body["apiVersion"], "v1");
        assert_eq!(body["kind"], "ConfigMap");
        assert_eq!(body["metadata"], serde_json::json!({"name": "a"}));
    }

    #[test]
    fn operation_results_use_controllerutil_names() {
        assert_eq!(OperationResult::Created.to_string(), "created");
        assert_eq!(OperationResult::Updated.as_str(), "updated");
        assert_eq!(OperationResult::Unchanged.as_str(), "unchanged");
    }

    fn plan(have: Value, want: Value) -> Missing {
        missing(Some(&have), &want)
    }

    #[test]
    fn fields_the_server_or_others_add_are_not_missing() {
        let want = serde_json::json!({"spec": {"replicas": 2, "ports": [{"port": 80}]},
                                      "metadata": {"labels": {"a": "1"}}});
        let have = serde_json::json!({"spec": {"replicas": 2, "ports": [{"port": 80, "protocol": "TCP"}],
                                               "revisionHistoryLimit": 10},
                                      "metadata": {"labels": {"a": "1", "b": "2"}, "uid": "u"}});
        assert_eq!(plan(have, want), Missing::Nothing);
    }

    #[test]
    fn unset_and_empty_fields_are_not_missing() {
        let want = serde_json::json!({"spec": {"replicas": null, "selector": {}, "args": []}});
        assert_eq!(plan(serde_json::json!({}), want), Missing::Nothing);
    }

    #[test]
    fn a_changed_scalar_outside_lists_is_missing_as_a_merge_patch() {
        let want = serde_json::json!({"spec": {"replicas": 3, "paused": false},
                                      "metadata": {"labels": {"a": "1", "new": "x"}}});
        let have = serde_json::json!({"spec": {"replicas": 1, "paused": false},
                                      "metadata": {"labels": {"a": "1"}}});
        assert_eq!(
            plan(have, want),
            Missing::Fields(serde_json::json!({"spec": {"replicas": 3},
                                               "metadata": {"labels": {"new": "x"}}}))
        );
    }

    #[test]
    fn a_change_inside_a_list_or_of_its_length_needs_an_apply() {
        let want = serde_json::json!({"c": [{"name": "m", "image": "b"}]});
        let same_length = serde_json::json!({"c": [{"name": "m", "image": "a"}]});
        let longer = serde_json::json!({"c": [{"name": "m", "image": "b"}, {"name": "x"}]});
        let absent = serde_json::json!({});
        for have in [same_length, longer, absent] {
            assert_eq!(plan(have, want.clone()), Missing::InList);
        }
        // A missing object that holds a list.
        let want = serde_json::json!({"spec": {"security": {"drop": ["ALL"]}}});
        assert_eq!(plan(serde_json::json!({"spec": {}}), want), Missing::InList);
    }

    #[test]
    fn merge_sets_the_missing_fields_and_keeps_the_rest() {
        let mut have = serde_json::json!({"spec": {"replicas": 1, "paused": false}, "x": 1});
        merge(
            &mut have,
            serde_json::json!({"spec": {"replicas": 3}, "y": {"z": 2}}),
        );
        assert_eq!(
            have,
            serde_json::json!({"spec": {"replicas": 3, "paused": false}, "x": 1, "y": {"z": 2}})
        );
    }

    #[test]
    fn is_applied_compares_what_want_sets() {
        let mut want = ConfigMap::default();
        want.metadata.name = Some("a".into());
        want.data = Some([("k".to_owned(), "v".to_owned())].into());
        let mut have = want.clone();
        have.metadata.resource_version = Some("7".into());
        have.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        assert!(is_applied(&have, &want));
        want.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        assert!(is_applied(&have, &want), "managedFields are never applied");
        have.data = None;
        assert!(!is_applied(&have, &want));
    }
}
