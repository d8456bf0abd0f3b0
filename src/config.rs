//! The component's settings, read from Spin variables (see spin.toml).

use std::ops::RangeInclusive;

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
    number("reservation_ttl_ms", 100..=600_000)
}

/// Most purchases of one voucher in flight (admitted, not yet settled) at once: each holds
/// one or two MySQL connections, so this keeps a burst below MySQL's `max_connections`.
pub fn max_inflight_purchases() -> Result<u64, ApiError> {
    number("max_inflight_purchases", 1..=100_000)
}

fn number(name: &str, range: RangeInclusive<u64>) -> Result<u64, ApiError> {
    let value = get(name)?;
    value
        .trim()
        .parse()
        .ok()
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            ApiError::Unavailable(format!(
                "{name} must be {}..={}, not {value:?}",
                range.start(),
                range.end()
            ))
        })
}
