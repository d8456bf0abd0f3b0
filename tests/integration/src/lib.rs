//! Shared helpers for the integration tests, in two kinds:
//! - `servers`: the real servers a test runs against and starts, stops or breaks: the
//!   shared Redis and MariaDB, private ones, a MySQL pair, a Galera cluster, a Redis
//!   Cluster, Spin serving the built component, a proxy between them;
//! - `drivers`: what drives the product on them as a storefront, a crowd or the schedule
//!   explorer would, and the invariants a test checks afterwards.

pub mod drivers;
pub mod servers;
