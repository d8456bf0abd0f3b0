//! Shared helpers for the integration tests: connections to the real Redis and MariaDB
//! the project runs against, and the sale-state key layout the scripts use.

pub mod backends;
