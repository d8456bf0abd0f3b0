//! The component's settings, read from Spin variables (see spin.toml).

use spin_sdk::variables;

use seckill_core::ApiError;

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
