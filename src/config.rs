//! The component's settings, read from Spin variables (see spin.toml).

use spin_sdk::variables;

use crate::error::ApiError;

pub fn get(name: &str) -> Result<String, ApiError> {
    variables::get(name)
        .map_err(|e| ApiError::Unavailable(format!("variable {name} is not set: {e}")))
}

pub fn redis_url() -> Result<String, ApiError> {
    get("redis_url")
}

pub fn mysql_url() -> Result<String, ApiError> {
    get("mysql_url")
}

/// How long a buyer's lock and reservation live before another attempt may reclaim them.
pub fn reservation_ttl_ms() -> Result<u64, ApiError> {
    let value = get("reservation_ttl_ms")?;
    value
        .trim()
        .parse()
        .ok()
        .filter(|ms| (100..=600_000).contains(ms))
        .ok_or_else(|| {
            ApiError::Unavailable(format!(
                "reservation_ttl_ms must be 100..=600000 ms, not {value:?}"
            ))
        })
}
