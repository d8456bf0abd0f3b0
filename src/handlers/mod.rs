//! The routes' handlers, a file per resource: each validates its input, does its work
//! through the storage on the request's connections (`storage::backends::Connections`,
//! which the router hands it and which open each backend when first asked), and answers.

pub mod events;
pub mod health;
pub mod metrics;
pub mod orders;
pub mod vouchers;
