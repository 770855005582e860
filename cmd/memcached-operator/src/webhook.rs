//! The webhooks: a defaulting one (a missing `spec.size` becomes 1, as the Go sample
//! defaults its size), a validating one for what the schema cannot say (the image must come
//! from a registry the operator was started to allow), and the conversion webhook between
//! the CRD's versions (see [`crate::api`]).
//!
//! The admission webhooks are registered for `v1alpha1`; the API server sends them `v1beta1`
//! objects too, converted to `v1alpha1` (a webhook configuration's default `matchPolicy:
//! Equivalent`), so one pair of functions covers both versions.

use controller_runtime::runtime::conversion::Conversion;
use controller_runtime::runtime::webhook::{
    Operation, WebhookOptions, WebhookServer, mutate_path, validate_path,
};

use crate::api::{DEFAULT_SIZE, Memcached, v1beta1};

/// Fills in what a `Memcached` left out: the size.
pub fn default(mc: &mut Memcached) {
    if mc.spec.size.is_none() {
        mc.spec.size = Some(DEFAULT_SIZE);
    }
}

/// Refuses an image from a registry outside `allowed` (prefixes such as
/// `registry.example.com/`); with no prefixes, every image passes. A resource without an
/// image runs the operator's default, which the operator's own flags chose.
///
/// # Errors
///
/// The denial message the user sees, naming the image and the allowed prefixes.
pub fn validate(mc: &Memcached, allowed: &[String]) -> Result<Vec<String>, String> {
    let Some(image) = &mc.spec.image else {
        return Ok(Vec::new());
    };
    if allowed.is_empty()
        || allowed
            .iter()
            .any(|prefix| image.starts_with(prefix.as_str()))
    {
        return Ok(Vec::new());
    }
    Err(format!(
        "spec.image {image:?} is not from an allowed registry; allowed prefixes: {}",
        allowed.join(", ")
    ))
}

/// The conversions between the versions of `Memcached`: `v1alpha1` is the hub, `v1beta1`
/// converts to and from it.
pub fn conversion() -> Conversion {
    Conversion::new().spoke::<Memcached, v1beta1::Memcached>()
}

/// The webhook server for `Memcached`: defaulting at `/mutate-cache-example-com-v1alpha1-memcached`,
/// validating at `/validate-cache-example-com-v1alpha1-memcached`, and converting between
/// versions at `/convert`.
pub fn server(options: WebhookOptions, allowed_images: Vec<String>) -> WebhookServer {
    WebhookServer::new(options)
        .conversion(conversion())
        .defaulting::<Memcached>(&mutate_path::<Memcached>(), default)
        .validating::<Memcached>(
            &validate_path::<Memcached>(),
            move |mc: &Memcached, _old: Option<&Memcached>, _operation: Operation| {
                validate(mc, &allowed_images)
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MemcachedSpec;

    fn memcached(size: Option<i32>, image: Option<&str>) -> Memcached {
        Memcached::new(
            "cache",
            MemcachedSpec {
                size,
                container_port: 11211,
                image: image.map(str::to_owned),
            },
        )
    }

    #[test]
    fn a_missing_size_defaults_to_one_and_a_given_one_stays() {
        let mut mc = memcached(None, None);
        default(&mut mc);
        assert_eq!(mc.spec.size, Some(1));
        let mut zero = memcached(Some(0), None);
        default(&mut zero);
        assert_eq!(zero.spec.size, Some(0), "zero is a size the user chose");
    }

    #[test]
    fn images_outside_the_allowed_registries_are_refused() {
        let allowed = vec![
            "registry.example.com/".to_owned(),
            "docker.io/library/".to_owned(),
        ];
        assert!(
            validate(
                &memcached(None, Some("registry.example.com/memcached:1")),
                &allowed
            )
            .is_ok()
        );
        assert!(validate(&memcached(None, None), &allowed).is_ok());
        let refused = validate(
            &memcached(None, Some("evil.example.org/memcached")),
            &allowed,
        );
        let message = refused.unwrap_err();
        assert!(
            message.contains("evil.example.org/memcached")
                && message.contains("registry.example.com/")
        );
        assert!(validate(&memcached(None, Some("anything")), &[]).is_ok());
    }
}
