//! Shared helpers for the integration tests: connections to the real Redis and MariaDB
//! the project runs against, and a harness that serves the built component with real Spin
//! and talks to it over HTTP as a storefront would.

pub mod app;
pub mod backends;
pub mod crowd;
pub mod explorer;
pub mod faults;
pub mod galera;
pub mod invariants;
pub mod mariadb;
pub mod mysql_pair;
pub mod proxy;
pub mod purchases;
pub mod redis_cluster;
pub mod scripts;
pub mod spin;
