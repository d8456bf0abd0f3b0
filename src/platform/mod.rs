//! The host interfaces the two builds differ in (Redis, MySQL, variables, key-value, a
//! pause), behind one set of names. The build is chosen here, once: the default build's
//! Spin 2 interfaces (`p1/`, `wasm32-wasip1`) or the WASIp3 build's (`p3/`,
//! `wasm32-wasip2`); the rest of the component names `platform::…` alone. Where Spin
//! hands over a request is `crate::entry`, the top layer, as this is the bottom one (one
//! folder for both would be an import circle through `http`).

#[cfg(not(target_env = "p2"))]
mod p1;
#[cfg(not(target_env = "p2"))]
pub use p1::*;
#[cfg(target_env = "p2")]
mod p3;
#[cfg(target_env = "p2")]
pub use p3::*;
pub mod redis_values;
