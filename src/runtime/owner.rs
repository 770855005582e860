//! Owner references.
