//! The manager: starts servers, caches, leader election and controllers in order, and stops them.
