//! What each route does on the request's Redis and MySQL, a file per resource, with no
//! HTTP in it: each function takes the request's connections (`storage::connections`, which
//! open each backend when first asked) and the route's input as domain values, runs the
//! storage and `seckill_core`'s machines on them, and returns what it found or did (rows,
//! terms, counts) or a [`crate::error::Failure`]. The handlers (`crate::handlers`) read
//! the request into those inputs and write the answer; the connections are opened here.

pub mod events;
pub mod health;
pub mod metrics;
pub mod orders;
pub mod vouchers;
