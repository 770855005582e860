//! Predicates: which watch events reach a controller's queue.
