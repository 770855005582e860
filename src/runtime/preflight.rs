//! The preflight: each kind the manager caches listed once before it starts, so that a
//! configuration that cannot work stops the process at once, saying why and what to do.
//!
//! Without it, a manager whose informers cannot list a kind starts anyway: they retry in the
//! background, and the manager stops only when the cache's `sync_timeout` (2 minutes by
//! default) runs out. [`Manager::preflight`] lists every kind the registered controllers
//! cache, one object at most, in the namespaces the cache is limited to and with each kind's
//! selector, as the informers will, and turns the first failure into one line with the
//! cause and the fix:
//!
//! | the server answers | the line |
//! |---|---|
//! | nothing (refused, wrong CA, reset) | `listing <resource>: request to <url> failed: <cause and fix>` |
//! | 404 for a custom resource | `the <Kind> CRD is not installed (the server does not serve <resource>/<version>): install it with ...` |
//! | 401 with an expired client certificate | `401 Unauthorized: the kubeconfig's client certificate has expired: ...` |
//! | 403 | the server's message, then the RBAC role to bind (kubebuilder's `config/rbac`) |
//! | anything else | `listing <resource>: <the client's error>` |
//!
//! The fixes name kubebuilder's project layout (`config/crd`, `config/rbac/role.yaml`),
//! which the operators built on this runtime share. Custom resources are listed first: a CRD
//! not installed is the likeliest failure, and the one whose fix is most specific.

use std::time::SystemTime;

use super::Manager;
use super::cache::CachedInformer;
use crate::client::{Api, ApiResource, DynamicObject, Error as ClientError, ListParams};

/// Why the manager cannot work with this configuration; see the [module docs](self).
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The server does not serve a custom resource: its CRD is not installed.
    #[error(
        "the {kind} CRD is not installed (the server does not serve {resource}/{version}): \
         install it with `kubectl apply -k config/crd`"
    )]
    CrdNotInstalled {
        /// The kind, e.g. `Memcached`.
        kind: String,
        /// The CRD's name, `<plural>.<group>`.
        resource: String,
        /// The version the controllers use.
        version: String,
    },
    /// The server refused the client certificate, which has expired.
    #[error(
        "401 Unauthorized: the kubeconfig's client certificate has expired: issue a new one \
         from the cluster's client CA and set the user's client-certificate(-data) and \
         client-key(-data) to it"
    )]
    ClientCertificateExpired {
        /// The certificate's `notAfter`.
        not_after: SystemTime,
    },
    /// RBAC does not allow the list (the server's message names the user, verb, resource and
    /// namespace).
    #[error(
        "{source}; for this operator, bind the ClusterRole in config/rbac/role.yaml \
         (`kubectl apply -k config/rbac` does, for its ServiceAccount)"
    )]
    Forbidden {
        /// What was listed: `<plural>.<group>`.
        resource: String,
        /// The server's 403.
        #[source]
        source: ClientError,
    },
    /// Any other failure to list: no answer, a bad certificate, a 401, a 5xx.
    #[error("listing {resource}: {source}")]
    List {
        /// What was listed: `<plural>.<group>`, or `<plural>` for the core group.
        resource: String,
        /// The client's error, which names the cause and the fix.
        #[source]
        source: ClientError,
    },
}

impl Manager {
    /// Lists each kind the cache holds (what the controllers and stores registered so far
    /// watch), once and one object at most, in the cache's namespaces and with each kind's
    /// selector; custom resources first, then the rest in the order they were registered.
    /// Call it after setting up the controllers and before [`start`](Manager::start);
    /// [`ManagerArgs::run`](super::flags::ManagerArgs::run) does.
    ///
    /// # Errors
    ///
    /// The first kind that cannot be listed, as a [`PreflightError`] that says why and
    /// what to do; see the [module docs](self).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn preflight(&self) -> Result<(), PreflightError> {
        let mut informers = self.cache().informers();
        // Stable: registration order within each group.
        informers.sort_by_key(|i| !is_custom(&i.resource));
        let expired = self
            .client_cert_not_after()
            .filter(|not_after| *not_after < SystemTime::now());
        for CachedInformer {
            resource,
            namespace,
            selector,
        } in informers
        {
            let api = Api::<DynamicObject>::dynamic(self.client(), &resource, namespace.as_deref());
            let one = ListParams {
                selector,
                limit: Some(1),
                ..ListParams::default()
            };
            if let Err(e) = api.list(&one).await {
                return Err(explain(&resource, e, expired));
            }
        }
        Ok(())
    }
}

/// Whether `resource` is a custom resource, as far as its group tells: one with a dot that
/// is not Kubernetes' own (`*.k8s.io`). The built-in groups are the core group, single
/// words (`apps`, `batch`) and `*.k8s.io`.
fn is_custom(resource: &ApiResource) -> bool {
    resource.group.contains('.') && !resource.group.ends_with(".k8s.io")
}

/// The preflight's failure to list `resource` as one error, with the fix where there is
/// one; `expired` is the client certificate's `notAfter` when it has passed.
fn explain(resource: &ApiResource, e: ClientError, expired: Option<SystemTime>) -> PreflightError {
    let name = match resource.group.as_str() {
        "" => resource.plural.clone(),
        group => format!("{}.{group}", resource.plural),
    };
    match (e.code(), expired) {
        (Some(404), _) if is_custom(resource) && e.reason() == Some("NotFound") => {
            PreflightError::CrdNotInstalled {
                kind: resource.kind.clone(),
                resource: name,
                version: resource.version.clone(),
            }
        }
        (Some(401), Some(not_after)) => PreflightError::ClientCertificateExpired { not_after },
        (Some(403), _) => PreflightError::Forbidden {
            resource: name,
            source: e,
        },
        _ => PreflightError::List {
            resource: name,
            source: e,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Status;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;

    fn status(code: i32, reason: &str, message: &str) -> ClientError {
        ClientError::Api(Box::new(Status {
            code: Some(code),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            ..Status::default()
        }))
    }

    fn custom() -> ApiResource {
        ApiResource {
            group: "cache.example.com".into(),
            version: "v1alpha1".into(),
            api_version: "cache.example.com/v1alpha1".into(),
            kind: "Memcached".into(),
            plural: "memcacheds".into(),
            namespaced: true,
        }
    }

    #[test]
    fn a_custom_resource_not_served_names_its_crd_and_how_to_install_it() {
        let e = explain(
            &custom(),
            status(404, "NotFound", "404 page not found"),
            None,
        );
        assert_eq!(
            e.to_string(),
            "the Memcached CRD is not installed (the server does not serve \
             memcacheds.cache.example.com/v1alpha1): install it with `kubectl apply -k config/crd`"
        );
    }

    #[test]
    fn a_built_in_kind_not_served_is_the_clients_error_not_a_crd() {
        let e = explain(
            &ApiResource::of::<Deployment>(),
            status(404, "NotFound", "404 page not found"),
            None,
        );
        assert!(matches!(e, PreflightError::List { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("listing deployments.apps: 404 NotFound"),
            "{e}"
        );
        let core = explain(
            &ApiResource::of::<Pod>(),
            status(500, "InternalError", "boom"),
            None,
        );
        assert!(core.to_string().starts_with("listing pods: 500"), "{core}");
    }

    #[test]
    fn a_401_is_named_as_an_expired_certificate_only_when_it_has_expired() {
        let not_after = SystemTime::UNIX_EPOCH;
        let expired = explain(
            &custom(),
            status(401, "Unauthorized", "Unauthorized"),
            Some(not_after),
        );
        assert!(
            matches!(expired, PreflightError::ClientCertificateExpired { not_after: t } if t == not_after)
        );
        assert!(
            expired
                .to_string()
                .starts_with("401 Unauthorized: the kubeconfig's client certificate has expired: ")
        );
        let refused = explain(&custom(), status(401, "Unauthorized", "Unauthorized"), None);
        assert!(
            refused
                .to_string()
                .starts_with("listing memcacheds.cache.example.com: 401 Unauthorized"),
            "{refused}"
        );
    }

    #[test]
    fn a_403_keeps_the_servers_words_and_points_at_the_rbac_role() {
        let e = explain(
            &ApiResource::of::<Pod>(),
            status(
                403,
                "Forbidden",
                r#"pods is forbidden: User "u" cannot list resource "pods" in API group "" at the cluster scope"#,
            ),
            Some(SystemTime::UNIX_EPOCH),
        );
        let line = e.to_string();
        assert!(
            line.starts_with(r#"403 Forbidden: pods is forbidden: User "u" cannot list"#),
            "{line}"
        );
        assert!(
            line.ends_with(
                "; for this operator, bind the ClusterRole in config/rbac/role.yaml \
                 (`kubectl apply -k config/rbac` does, for its ServiceAccount)"
            ),
            "{line}"
        );
    }

    #[test]
    fn only_groups_outside_kubernetes_own_count_as_custom() {
        let group = |g: &str| ApiResource {
            group: g.into(),
            ..custom()
        };
        assert!(is_custom(&group("cache.example.com")));
        for built_in in ["", "apps", "batch", "networking.k8s.io"] {
            assert!(!is_custom(&group(built_in)), "{built_in}");
        }
    }
}
