//! Controllers: the builder that wires watches to a queue, and the workers that reconcile.
