//! Metrics with controller-runtime's names, kept in one registry per manager.
