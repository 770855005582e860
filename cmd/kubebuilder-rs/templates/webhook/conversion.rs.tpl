/// A {{kind}} of {{spoke}} converted to and from the storage version, {{hub}} (the hub), for
/// the conversion webhook ([`converting`]).
///
/// TODO(user): move each field to where the other version keeps it. The skeleton's two
/// versions have the same fields; a field one version lacks can ride in an annotation.
mod {{spoke}}_conversion {
    use crate::api::{{hub}}::{{module}} as hub;
    use crate::api::{{spoke}}::{{module}} as spoke;

    impl From<spoke::{{kind}}> for hub::{{kind}} {
        fn from(from: spoke::{{kind}}) -> Self {
            hub::{{kind}} {
                metadata: from.metadata,
                spec: hub::{{kind}}Spec { foo: from.spec.foo },
                status: from.status.map(|status| hub::{{kind}}Status {
                    conditions: status.conditions,
                }),
            }
        }
    }

    impl From<hub::{{kind}}> for spoke::{{kind}} {
        fn from(from: hub::{{kind}}) -> Self {
            spoke::{{kind}} {
                metadata: from.metadata,
                spec: spoke::{{kind}}Spec { foo: from.spec.foo },
                status: from.status.map(|status| spoke::{{kind}}Status {
                    conditions: status.conditions,
                }),
            }
        }
    }
}

