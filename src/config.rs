//! The component's settings, read from Spin variables (see spin.toml).
//!
//! Every variable lookup is a call into Spin, the largest cost of a rejection after Redis
//! itself (BENCHMARKS.md), so the settings nearly every request needs come in one:
//! spin.toml's `request_settings` joins them, a line each.

use std::sync::OnceLock;

use seckill_core::cluster::Seeds;
use seckill_core::{ApiError, Unavailable};

#[cfg(not(target_env = "p2"))]
use crate::p1::variables;
#[cfg(target_env = "p2")]
use crate::p3::variables;

/// Every variable the component is given: spin.toml's `[component.seckill.variables]`
/// (the p3 build loads them all at once).
pub const VARIABLES: [&str; 6] = [
    "request_settings",
    "admin_token",
    "metrics_token",
    "payments_token",
    "feed_token",
    "allowed_origins",
];

/// Lets the build look its variables up ahead, as the p3 build must (its lookups are
/// async, the settings are read synchronously); the default build looks each up as asked.
pub async fn load() {
    variables::load(&VARIABLES).await;
}

/// One of [`VARIABLES`]; any other name is refused alike by both builds.
pub fn get(name: &str) -> Result<String, ApiError> {
    // The detail goes to the request log; the client learns only that it is not her fault.
    if !VARIABLES.contains(&name) {
        crate::request_log::note_cause(format!(
            "variable {name} is not one the component is given"
        ));
        return Err(ApiError::Unavailable(Unavailable::Configuration));
    }
    variables::get(name).map_err(|e| {
        crate::request_log::note_cause(format!("variable {name} is not set: {e}"));
        ApiError::Unavailable(Unavailable::Configuration)
    })
}

/// What `request_settings` holds, in its order.
#[derive(Debug, PartialEq)]
pub struct Settings {
    pub redis_url: String,
    /// Empty, or the seed nodes of a Redis Cluster, which `redis_url` then plays no part in.
    pub redis_cluster_nodes: String,
    pub mysql_url: String,
    pub jwt_secret: String,
    pub jwt_issuer: String,
    pub jwt_audience: String,
}

impl Settings {
    fn parse(joined: &str) -> Option<Settings> {
        let mut lines = joined.split('\n').map(str::to_string);
        let settings = Settings {
            redis_url: lines.next()?,
            redis_cluster_nodes: lines.next()?,
            mysql_url: lines.next()?,
            jwt_secret: lines.next()?,
            jwt_issuer: lines.next()?,
            jwt_audience: lines.next()?,
        };
        // One line more means a value with a line break: nothing can be read for sure.
        lines.next().is_none().then_some(settings)
    }
}

/// The request's settings, looked up once per instance.
pub fn settings() -> Result<&'static Settings, ApiError> {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    if let Some(settings) = SETTINGS.get() {
        return Ok(settings);
    }
    let settings = Settings::parse(&get("request_settings")?).ok_or_else(|| {
        crate::request_log::note_cause(
            "request_settings must be six lines: redis_url, redis_cluster_nodes, mysql_url, \
             jwt_secret, jwt_issuer, jwt_audience (none of them may hold a line break)",
        );
        ApiError::Unavailable(Unavailable::Configuration)
    })?;
    // Before any key is named: the settings come first on every route that reaches Redis.
    if Seeds::parse(&settings.redis_cluster_nodes).is_some() {
        seckill_core::sale::place_keys_for_a_cluster();
    }
    Ok(SETTINGS.get_or_init(|| settings))
}

/// Where the sales' Redis is.
pub enum RedisTarget {
    /// One server (or a proxy that follows a Sentinel's primary): `redis_url`.
    Single(String),
    /// A Redis Cluster, by its seed nodes: `redis_cluster_nodes`.
    Cluster(Seeds),
}

pub fn redis_target() -> Result<&'static RedisTarget, ApiError> {
    static TARGET: OnceLock<RedisTarget> = OnceLock::new();
    if let Some(target) = TARGET.get() {
        return Ok(target);
    }
    let settings = settings()?;
    let target = match Seeds::parse(&settings.redis_cluster_nodes) {
        Some(seeds) => RedisTarget::Cluster(seeds),
        None => RedisTarget::Single(settings.redis_url.clone()),
    };
    Ok(TARGET.get_or_init(|| target))
}

pub fn mysql_url() -> Result<String, ApiError> {
    Ok(settings()?.mysql_url.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_are_those_spin_toml_gives_the_component() {
        let manifest = include_str!("../spin.toml");
        let table = manifest
            .split("[component.seckill.variables]\n")
            .nth(1)
            .and_then(|rest| rest.split("\n[").next())
            .expect("spin.toml gives the component variables");
        let given: Vec<&str> = table
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split_once(" = ").map(|(name, _)| name))
            .collect();
        assert_eq!(given, VARIABLES);
    }

    #[test]
    fn six_lines_read_in_order_and_may_be_empty() {
        let settings = Settings::parse("redis://r\n\nmysql://m\nsecret\n\naud").unwrap();
        assert_eq!(
            settings,
            Settings {
                redis_url: "redis://r".into(),
                redis_cluster_nodes: String::new(),
                mysql_url: "mysql://m".into(),
                jwt_secret: "secret".into(),
                jwt_issuer: String::new(),
                jwt_audience: "aud".into(),
            }
        );
    }

    #[test]
    fn a_value_with_a_line_break_is_refused() {
        assert_eq!(Settings::parse("r\n\nm\nsec\nret\n\n"), None);
        assert_eq!(Settings::parse("r\n\nm\ns\ni"), None);
    }
}
