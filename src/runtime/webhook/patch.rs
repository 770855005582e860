//! JSON Patch (RFC 6902): the operations, and the diff between two JSON documents.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One RFC 6902 operation, as [`json_patch`] produces them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum PatchOperation {
    /// Adds `value` at `path` (a new object member, or inserted into an array).
    Add {
        /// A JSON Pointer (RFC 6901).
        path: String,
        /// The value to add.
        value: Value,
    },
    /// Removes the value at `path`.
    Remove {
        /// A JSON Pointer (RFC 6901).
        path: String,
    },
    /// Replaces the value at `path` with `value`.
    Replace {
        /// A JSON Pointer (RFC 6901).
        path: String,
        /// The new value.
        value: Value,
    },
}

/// The JSON Patch (RFC 6902) that turns `from` into `to`; empty when they are equal.
///
/// Both documents are walked together: objects key by key (a key only in `from` is
/// removed, only in `to` added, in both compared recursively), arrays index by index over
/// their common length (then `to`'s extra elements are added in order, or `from`'s extra
/// elements removed from the last one down, so each index is valid when its operation
/// applies), and anything else replaced when unequal. Paths are JSON Pointers with `~` and
/// `/` escaped as `~0` and `~1`.
///
/// ```
/// use controller_runtime::runtime::webhook::{PatchOperation, json_patch};
/// use serde_json::json;
///
/// let ops = json_patch(&json!({"spec": {"size": 0}}), &json!({"spec": {"size": 3}}));
/// assert_eq!(ops, [PatchOperation::Replace { path: "/spec/size".into(), value: json!(3) }]);
/// ```
pub fn json_patch(from: &Value, to: &Value) -> Vec<PatchOperation> {
    let mut operations = Vec::new();
    let mut path = String::new();
    diff(&mut path, from, to, &mut operations);
    operations
}

fn diff(path: &mut String, from: &Value, to: &Value, out: &mut Vec<PatchOperation>) {
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, old) in a {
                let len = path.len();
                push_token(path, key);
                match b.get(key) {
                    Some(new) => diff(path, old, new, out),
                    None => out.push(PatchOperation::Remove { path: path.clone() }),
                }
                path.truncate(len);
            }
            for (key, new) in b {
                if !a.contains_key(key) {
                    let len = path.len();
                    push_token(path, key);
                    out.push(PatchOperation::Add {
                        path: path.clone(),
                        value: new.clone(),
                    });
                    path.truncate(len);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            let common = a.len().min(b.len());
            let len = path.len();
            for i in 0..common {
                push_index(path, i);
                diff(path, &a[i], &b[i], out);
                path.truncate(len);
            }
            for (i, new) in b.iter().enumerate().skip(common) {
                push_index(path, i);
                out.push(PatchOperation::Add {
                    path: path.clone(),
                    value: new.clone(),
                });
                path.truncate(len);
            }
            for i in (common..a.len()).rev() {
                push_index(path, i);
                out.push(PatchOperation::Remove { path: path.clone() });
                path.truncate(len);
            }
        }
        _ if from == to => {}
        _ => out.push(PatchOperation::Replace {
            path: path.clone(),
            value: to.clone(),
        }),
    }
}

/// Appends `/token` to a JSON Pointer, escaping `~` as `~0` and `/` as `~1`.
fn push_token(path: &mut String, token: &str) {
    path.push('/');
    for c in token.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

fn push_index(path: &mut String, index: usize) {
    use std::fmt::Write;
    let _ = write!(path, "/{index}");
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    // --- a small RFC 6902 applier, to check the diff against ---

    fn unescape(token: &str) -> String {
        token.replace("~1", "/").replace("~0", "~")
    }

    fn split(path: &str) -> (Vec<String>, String) {
        assert!(path.starts_with('/'), "pointer {path:?}");
        let mut tokens: Vec<String> = path[1..].split('/').map(unescape).collect();
        let last = tokens.pop().unwrap();
        (tokens, last)
    }

    fn parent<'v>(doc: &'v mut Value, tokens: &[String]) -> &'v mut Value {
        tokens.iter().fold(doc, |v, t| match v {
            Value::Object(m) => m.get_mut(t).expect("parent member exists"),
            Value::Array(a) => &mut a[t.parse::<usize>().expect("array index")],
            other => panic!("cannot descend into {other}"),
        })
    }

    pub(crate) fn apply(doc: &mut Value, ops: &[PatchOperation]) {
        for op in ops {
            match op {
                PatchOperation::Replace { path, value } if path.is_empty() => *doc = value.clone(),
                PatchOperation::Add { path, value } => {
                    let (tokens, last) = split(path);
                    match parent(doc, &tokens) {
                        Value::Object(m) => {
                            assert!(m.insert(last, value.clone()).is_none(), "add over {path}");
                        }
                        Value::Array(a) => {
                            let i = if last == "-" {
                                a.len()
                            } else {
                                last.parse().unwrap()
                            };
                            assert!(i <= a.len(), "add past the end at {path}");
                            a.insert(i, value.clone());
                        }
                        other => panic!("add into {other}"),
                    }
                }
                PatchOperation::Remove { path } => {
                    let (tokens, last) = split(path);
                    match parent(doc, &tokens) {
                        Value::Object(m) => {
                            m.remove(&last).expect("removed member exists");
                        }
                        Value::Array(a) => {
                            a.remove(last.parse().unwrap());
                        }
                        other => panic!("remove from {other}"),
                    }
                }
                PatchOperation::Replace { path, value } => {
                    let (tokens, last) = split(path);
                    match parent(doc, &tokens) {
                        Value::Object(m) => {
                            *m.get_mut(&last).expect("replaced member exists") = value.clone();
                        }
                        Value::Array(a) => a[last.parse::<usize>().unwrap()] = value.clone(),
                        other => panic!("replace in {other}"),
                    }
                }
            }
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-3i64..3).prop_map(Value::from),
            "[xy]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 40, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                object_of(inner),
            ]
        })
    }

    /// Objects over a small key alphabet (with the characters a pointer escapes), so two
    /// random objects share keys often.
    fn object_of(inner: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a~/]{0,2}", inner, 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    proptest! {
        #[test]
        fn applying_the_patch_to_the_source_gives_the_target(
            from in object_of(json_value()),
            to in object_of(json_value()),
        ) {
            let ops = json_patch(&from, &to);
            let mut patched = from.clone();
            apply(&mut patched, &ops);
            prop_assert_eq!(patched, to);
        }

        #[test]
        fn a_document_has_no_patch_to_itself(doc in object_of(json_value())) {
            prop_assert!(json_patch(&doc, &doc).is_empty());
        }

        #[test]
        fn patches_survive_the_wire(from in object_of(json_value()), to in object_of(json_value())) {
            let ops = json_patch(&from, &to);
            let wire = serde_json::to_vec(&ops).unwrap();
            let back: Vec<PatchOperation> = serde_json::from_slice(&wire).unwrap();
            prop_assert_eq!(back, ops);
        }
    }

    #[test]
    fn pointer_tokens_escape_tilde_and_slash() {
        let ops = json_patch(&json!({}), &json!({"a/b~c": 1}));
        assert_eq!(
            ops,
            [PatchOperation::Add {
                path: "/a~1b~0c".into(),
                value: json!(1)
            }]
        );
        let wire = serde_json::to_value(&ops).unwrap();
        assert_eq!(wire, json!([{"op": "add", "path": "/a~1b~0c", "value": 1}]));
    }

    #[test]
    fn shrinking_an_array_removes_from_the_end() {
        let ops = json_patch(&json!({"l": [1, 2, 3, 4]}), &json!({"l": [1, 5]}));
        assert_eq!(
            ops,
            [
                PatchOperation::Replace {
                    path: "/l/1".into(),
                    value: json!(5)
                },
                PatchOperation::Remove {
                    path: "/l/3".into()
                },
                PatchOperation::Remove {
                    path: "/l/2".into()
                },
            ]
        );
    }

    #[test]
    fn a_changed_type_is_replaced_whole() {
        let ops = json_patch(&json!({"a": {"b": 1}}), &json!({"a": [1]}));
        assert_eq!(
            ops,
            [PatchOperation::Replace {
                path: "/a".into(),
                value: json!([1])
            }]
        );
    }
}
