[package]
name = "{{project_name}}"
description = "An operator on controller-runtime, scaffolded by kubebuilder-rs"
version = "0.1.0"
edition = "{{edition}}"
rust-version = "{{rust_version}}"
publish = false

# A project of its own, even when it sits inside another Cargo workspace's directory.
[workspace]

[dependencies]
{{runtime_dependency}}
{{dependencies}}

[lints.rust]
unsafe_code = "forbid"
