/// Fills in what a {{kind}} left out, before the API server stores it.
///
/// TODO(user): set your defaults. The skeleton sets `spec.foo` when it is missing.
pub fn default(obj: &mut {{kind}}) {
    tracing::debug!(name = ?obj.metadata.name, "defaulting {{kind}}");
    if obj.spec.foo.is_none() {
        obj.spec.foo = Some("default".to_owned());
    }
}

/// Serves [`default`] at kubebuilder's path, `{{mutate_path}}`.
pub fn defaulting(server: WebhookServer) -> WebhookServer {
    server.defaulting(&webhook::mutate_path::<{{kind}}>(), default)
}

#[cfg(test)]
mod defaulting_tests {
    use super::*;

    #[test]
    fn a_missing_foo_is_defaulted_and_a_given_one_kept() {
        let mut obj = {{kind}}::new("sample", Default::default());
        default(&mut obj);
        assert_eq!(obj.spec.foo.as_deref(), Some("default"));
        obj.spec.foo = Some("mine".to_owned());
        default(&mut obj);
        assert_eq!(obj.spec.foo.as_deref(), Some("mine"));
    }
}

