//! Objects as `name → resourceVersion`: what a cache, a store or a handler holds is compared
//! with a fresh LIST in these terms.

use std::collections::BTreeMap;

use controller_runtime::client::{Api, ListParams, WatchObject};
use controller_runtime::informer::Object;

/// `obj`'s name and resourceVersion.
pub fn entry<K: Object>(obj: &K) -> (String, String) {
    (
        obj.name().to_owned(),
        obj.resource_version().unwrap_or_default().to_owned(),
    )
}

/// A fresh LIST of `api`, as `name → resourceVersion`.
pub async fn listed<K>(api: &Api<K>) -> BTreeMap<String, String>
where
    K: WatchObject + serde::Serialize + Object,
{
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(entry)
        .collect()
}
