//! An event recorder on events.k8s.io/v1.
