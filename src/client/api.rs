//! `Api<K>`: the API verbs for one kind, in one namespace or across all.

use std::fmt::Debug;
use std::marker::PhantomData;

use http::Method;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::codec::{self, Format, ObjectList, WatchObject};
use super::dynamic::{ApiResource, DynamicObject};
use super::error::{Error, Result, Status};
use super::params::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use super::watch::WatchStream;
use super::{Client, Req};

const ACCEPT_METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
const ACCEPT_METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// An object's type and metadata without its spec or status, as the metadata-only API
/// serves it: a fraction of the bytes for controllers that need only names, labels and owners.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PartialObjectMetadata {
    /// Always `meta.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// Always `PartialObjectMetadata`.
    #[serde(default)]
    pub kind: String,
    /// The object's metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
}

object_via_metadata!(PartialObjectMetadata);

/// What a delete returned.
#[derive(Clone, Debug, PartialEq)]
pub enum DeleteResult<K> {
    /// The object is gone; the server's `Status` says so.
    Deleted(Box<Status>),
    /// The object still exists, marked for deletion: finalizers or foreground deletion hold
    /// it. This is its state now.
    Pending(K),
}

/// The verbs of the API for objects of kind `K`, in one namespace, across all namespaces,
/// or for a cluster-scoped kind.
///
/// `K` is a k8s-openapi type, a custom resource implementing `k8s_openapi::Resource`, or
/// [`DynamicObject`] for kinds known only at run time.
pub struct Api<K> {
    client: Client,
    resource: ApiResource,
    namespace: Option<String>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("resource", &self.resource)
            .field("namespace", &self.namespace)
            .finish()
    }
}

// === constructors ===

impl<K: k8s_openapi::Resource<Scope = NamespaceResourceScope>> Api<K> {
    /// The objects of a namespaced kind in `namespace`.
    pub fn namespaced(client: Client, namespace: &str) -> Self {
        Api::with(client, ApiResource::of::<K>(), Some(namespace.to_owned()))
    }

    /// The objects of a namespaced kind in the configuration's default namespace.
    pub fn default_namespaced(client: Client) -> Self {
        let ns = client.default_namespace().to_owned();
        Api::with(client, ApiResource::of::<K>(), Some(ns))
    }

    /// The objects of a namespaced kind across all namespaces. Create, replace and delete
    /// need a namespace; use [`Api::namespaced`] for those.
    pub fn all(client: Client) -> Self {
        Api::with(client, ApiResource::of::<K>(), None)
    }
}

impl<K: k8s_openapi::Resource<Scope = ClusterResourceScope>> Api<K> {
    /// The objects of a cluster-scoped kind (Nodes, Namespaces, CRDs, …).
    pub fn cluster(client: Client) -> Self {
        Api::with(client, ApiResource::of::<K>(), None)
    }
}

impl Api<DynamicObject> {
    /// Objects of the kind `resource` describes (see [`Client::resolve`]), in `namespace`,
    /// or across all namespaces (or cluster-scoped) when `None`.
    pub fn dynamic(client: Client, resource: &ApiResource, namespace: Option<&str>) -> Self {
        Api::with(client, resource.clone(), namespace.map(str::to_owned))
    }
}

impl<K> Api<K> {
    fn with(client: Client, resource: ApiResource, namespace: Option<String>) -> Self {
        Api {
            client,
            resource,
            namespace,
            _kind: PhantomData,
        }
    }

    /// The resource this API serves.
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The namespace, if this API is bound to one.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The collection's path: `/api/v1/namespaces/ns/pods` or `/apis/group/version/plural`.
    pub fn collection_path(&self) -> String {
        self.resource.collection_path(self.namespace.as_deref())
    }

    fn object_path(&self, name: &str, subresource: Option<&str>) -> Result<String> {
        check_name(name)?;
        let path = self.collection_path() + "/" + name;
        Ok(match subresource {
            Some(sub) => path + "/" + sub,
            None => path,
        })
    }
}

/// Names become path segments: they must not be empty, contain `/` or `%`, or be `.` or `..`.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains(['/', '%']) || name == "." || name == ".." {
        return Err(Error::InvalidRequest(format!(
            "{name:?} is not a valid object name"
        )));
    }
    Ok(())
}

fn to_json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value)
        .map_err(|e| Error::InvalidRequest(format!("the body does not serialize to JSON: {e}")))
}

// === lists and watches ===

impl<K: WatchObject> Api<K> {
    /// Lists one page of objects.
    ///
    /// For a type with a protobuf form ([`Raw`](super::Raw) of a built-in kind), the list
    /// is fetched as protobuf, which the server encodes faster and sends smaller, and
    /// transcoded into the same JSON.
    ///
    /// # Errors
    ///
    /// [`Error::Api`]: 410 if the continue token or `resource_version` is too old.
    pub async fn list(&self, params: &ListParams) -> Result<ObjectList<K>> {
        let path = self.collection_path() + params.query().as_str();
        let format = self.client.codec().format::<K>();
        match self.list_as(format, &path).await {
            // A server newer than our tables: the codec reads this kind as JSON from now on.
            Err(e) if self.client.codec().refused(format, &e) => {
                self.list_as(Format::Json, &path).await
            }
            result => result,
        }
    }

    /// GETs the list at `path`, asking for `format`, and decodes it as it arrives.
    async fn list_as(&self, format: Format, path: &str) -> Result<ObjectList<K>> {
        let req = Req::new(Method::GET, path.to_owned()).format(format);
        let (arrived, body) = self.client.request_body(req).await?;
        codec::decode(arrived, &body, path)
    }

    /// Lists every object, following continue tokens page by page. The result's metadata
    /// has the last page's `resourceVersion`.
    ///
    /// # Errors
    ///
    /// As [`Api::list`], from any page.
    pub async fn list_all(&self, params: &ListParams) -> Result<ObjectList<K>> {
        let mut params = params.clone();
        let mut all = self.list(&params).await?;
        while let Some(token) = all.metadata.continue_.take().filter(|t| !t.is_empty()) {
            params.continue_token = Some(token);
            // The continue token carries the version; a second version would be refused.
            params.resource_version = None;
            params.version_match = None;
            let page = self.list(&params).await?;
            all.items.extend(page.items);
            all.metadata = page.metadata;
        }
        Ok(all)
    }

    /// Starts a watch; events arrive through the returned stream.
    ///
    /// For a type with a protobuf form, the watch asks for protobuf, as [`Api::list`] does.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] if the server refuses the watch, e.g. 410 for a `resource_version`
    /// that is too old. Errors once the watch runs come from the stream.
    pub async fn watch(&self, params: &WatchParams) -> Result<WatchStream<K>> {
        let path = self.collection_path() + params.query().as_str();
        self.client.request_watch(Req::new(Method::GET, path)).await
    }
}

// === verbs ===

impl<K: DeserializeOwned + Serialize> Api<K> {
    /// Reads the object `name`.
    ///
    /// # Errors
    ///
    /// [`Error::Api`] with 404 if it does not exist (see [`Api::get_opt`]).
    pub async fn get(&self, name: &str) -> Result<K> {
        let path = self.object_path(name, None)?;
        self.client.request_json(Req::new(Method::GET, path)).await
    }

    /// Reads the object `name`, or `None` if it does not exist.
    ///
    /// # Errors
    ///
    /// Any error but 404.
    pub async fn get_opt(&self, name: &str) -> Result<Option<K>> {
        match self.get(name).await {
            Ok(k) => Ok(Some(k)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates `object` in this API's namespace (its own `metadata.namespace` must agree
    /// or be empty).
    ///
    /// # Errors
    ///
    /// [`Error::Api`]: 409 `AlreadyExists` if the name is taken, 422 if it is invalid.
    pub async fn create(&self, params: &PostParams, object: &K) -> Result<K> {
        let path = self.collection_path() + params.query().as_str();
        let req = Req::new(Method::POST, path).json_body(to_json(object)?);
        self.write(req, None).await
    }

    /// Replaces the object `name` with `object`. If `object` carries a
    /// `metadata.resourceVersion`, the server applies it only if the stored object is still
    /// at that version (optimistic concurrency).
    ///
    /// # Errors
    ///
    /// [`Error::Api`]: 409 if the object changed since `object` was read.
    pub async fn replace(&self, name: &str, params: &PostParams, object: &K) -> Result<K> {
        self.put(name, None, params, object).await
    }

    /// Patches the object `name`.
    ///
    /// # Errors
    ///
    /// [`Error::Api`]: 409 for a server-side apply conflict (unless forced), 422 for an
    /// invalid result, 415 for a strategic merge patch on a custom resource.
    pub async fn patch<P: Serialize>(
        &self,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K> {
        self.patch_sub(name, None, params, patch).await
    }

    /// Deletes the object `name`.
    ///
    /// # Errors
    ///
    /// [`Error::Api`]: 404 if it does not exist, 409 if a precondition fails.
    pub async fn delete(&self, name: &str, params: &DeleteParams) -> Result<DeleteResult<K>> {
        let path = self.object_path(name, None)?;
        let req = Req::new(Method::DELETE, path).json_body(to_json(params)?);
        let value: serde_json::Value = self.write(req, Some(name)).await?;
        let failed = |what: &str, source| Error::Decode {
            what: format!("{what} deleting {name}"),
            source,
            snippet: String::new(),
        };
        if value.get("kind").and_then(|k| k.as_str()) == Some("Status") {
            let status = serde_json::from_value(value).map_err(|e| failed("the Status from", e))?;
            Ok(DeleteResult::Deleted(Box::new(status)))
        } else {
            let object =
                serde_json::from_value(value).map_err(|e| failed("the object returned by", e))?;
            Ok(DeleteResult::Pending(object))
        }
    }

    /// Reads the object `name` through its `status` subresource.
    ///
    /// # Errors
    ///
    /// As [`Api::get`].
    pub async fn get_status(&self, name: &str) -> Result<K> {
        let path = self.object_path(name, Some("status"))?;
        self.client.request_json(Req::new(Method::GET, path)).await
    }

    /// Replaces the object's status; the server ignores changes to anything else.
    ///
    /// # Errors
    ///
    /// As [`Api::replace`].
    pub async fn replace_status(&self, name: &str, params: &PostParams, object: &K) -> Result<K> {
        self.put(name, Some("status"), params, object).await
    }

    /// Patches the object's status.
    ///
    /// # Errors
    ///
    /// As [`Api::patch`].
    pub async fn patch_status<P: Serialize>(
        &self,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K> {
        self.patch_sub(name, Some("status"), params, patch).await
    }

    /// Reads only the metadata of the object `name`.
    ///
    /// # Errors
    ///
    /// As [`Api::get`].
    pub async fn get_metadata(&self, name: &str) -> Result<PartialObjectMetadata> {
        let mut req = Req::new(Method::GET, self.object_path(name, None)?);
        req.accept = ACCEPT_METADATA;
        self.client.request_json(req).await
    }

    /// Lists only the metadata of the objects.
    ///
    /// # Errors
    ///
    /// As [`Api::list`].
    pub async fn list_metadata(
        &self,
        params: &ListParams,
    ) -> Result<ObjectList<PartialObjectMetadata>> {
        let path = self.collection_path() + params.query().as_str();
        let mut req = Req::new(Method::GET, path);
        req.accept = ACCEPT_METADATA_LIST;
        self.client.request_json(req).await
    }

    /// Watches only the metadata of the objects.
    ///
    /// # Errors
    ///
    /// As [`Api::watch`].
    pub async fn watch_metadata(
        &self,
        params: &WatchParams,
    ) -> Result<WatchStream<PartialObjectMetadata>> {
        let path = self.collection_path() + params.query().as_str();
        let mut req = Req::new(Method::GET, path);
        req.accept = ACCEPT_METADATA;
        self.client.request_watch(req).await
    }

    async fn put(
        &self,
        name: &str,
        subresource: Option<&str>,
        params: &PostParams,
        object: &K,
    ) -> Result<K> {
        let path = self.object_path(name, subresource)? + params.query().as_str();
        let req = Req::new(Method::PUT, path).json_body(to_json(object)?);
        self.write(req, Some(name)).await
    }

    async fn patch_sub<P: Serialize>(
        &self,
        name: &str,
        subresource: Option<&str>,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K> {
        if matches!(patch, Patch::Apply(_)) && params.field_manager.is_none() {
            return Err(Error::InvalidRequest(
                "server-side apply needs a field manager (PatchParams::apply)".into(),
            ));
        }
        let path = self.object_path(name, subresource)? + params.query().as_str();
        let mut req = Req::new(Method::PATCH, path).json_body(to_json(patch.body())?);
        req.content_type = Some(patch.content_type());
        self.write(req, Some(name)).await
    }
}

impl<K> Api<K> {
    /// Sends the write `req` (of the object `name`, if the path names one) and decodes the
    /// answer; a client recording its writes ([`Client::recording_writes`]) notes it.
    async fn write<T: DeserializeOwned>(&self, req: Req, name: Option<&str>) -> Result<T> {
        let what = format!("the response to {} {}", req.method, req.path);
        let deleting = req.method == Method::DELETE;
        let (_, body) = self.client.request_body(req).await?;
        let answer = codec::decode_json(what, &body)?;
        if let Some(log) = self.client.write_log() {
            log.record_answer(&self.resource, self.namespace(), name, deleting, &body);
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_escape_the_path_are_refused() {
        for bad in ["", "a/b", ".", "..", "a%2Fb"] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        check_name("web-1.example").unwrap();
    }
}
