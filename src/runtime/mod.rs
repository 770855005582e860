//! The controller runtime: manager, controllers, leader election, metrics, probes, events and
//! the helpers a reconciler writes with. (Being built; the map arrives with the parts.)

pub mod cache;
pub mod controller;
pub mod crd;
pub mod events;
pub mod finalizer;
pub mod leader_election;
pub mod manager;
pub mod metrics;
pub mod ops;
pub mod owner;
pub mod predicate;
pub mod server;
