//! The routes' handlers, a file per resource: each validates its input, does its work
//! through the storage, and answers.

pub mod events;
pub mod health;
pub mod metrics;
pub mod orders;
pub mod vouchers;
