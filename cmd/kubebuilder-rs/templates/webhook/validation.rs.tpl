/// Checks a {{kind}} the API server is about to store: `Ok(warnings)` admits it (the
/// warnings reach the user), `Err(message)` refuses it with that message. `old` is the
/// stored {{kind}} on an update.
///
/// TODO(user): check what the schema cannot say. The skeleton refuses an empty `spec.foo`.
pub fn validate(
    obj: &{{kind}},
    _old: Option<&{{kind}}>,
    _operation: webhook::Operation,
) -> Result<Vec<String>, String> {
    if obj.spec.foo.as_deref() == Some("") {
        return Err("spec.foo must not be empty".to_owned());
    }
    Ok(Vec::new())
}

/// Serves [`validate`] at kubebuilder's path, `{{validate_path}}`.
pub fn validating(server: WebhookServer) -> WebhookServer {
    server.validating(&webhook::validate_path::<{{kind}}>(), validate)
}

#[cfg(test)]
mod validation_tests {
    use super::*;

    #[test]
    fn an_empty_foo_is_refused() {
        let mut obj = {{kind}}::new("sample", Default::default());
        let create = webhook::Operation::Create;
        assert_eq!(validate(&obj, None, create), Ok(vec![]));
        obj.spec.foo = Some(String::new());
        assert!(validate(&obj, None, create).is_err());
    }
}

