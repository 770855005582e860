//! Finalizers.
