//! The real servers a test runs against, and how it starts, stops or breaks them.

pub mod faults;
pub mod galera;
pub mod local;
pub mod mariadb;
pub mod mysql_pair;
pub mod proxy;
pub mod redis_cluster;
pub mod spin;
