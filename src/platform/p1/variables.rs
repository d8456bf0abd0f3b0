//! Spin's variables, looked up as they are asked for: an instance serves one request, so
//! there is nothing to keep.

/// Nothing to load ahead: see the p3 build's for why it does.
pub async fn load(_names: &[&str]) {}

pub fn get(name: &str) -> Result<String, String> {
    spin_sdk::variables::get(name).map_err(|error| error.to_string())
}
