//! The routes' handlers, a file per resource: each reads its request into domain values
//! (the path's ids, the query, the body, validated), calls one action (`crate::actions`)
//! on the request's connections, which the router hands it and which it only passes on,
//! and writes what the action returns as the answer: its status, its JSON, its headers.

pub mod events;
pub mod health;
pub mod metrics;
pub mod orders;
pub mod vouchers;
