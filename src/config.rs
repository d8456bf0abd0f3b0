//! The component's settings, read from Spin variables (see spin.toml).
//!
//! Every variable lookup is a call into Spin, the largest cost of a rejection after Redis
//! itself (BENCHMARKS.md), so the settings nearly every request needs come in one:
//! spin.toml's `request_settings` joins them, a line each.

use std::sync::OnceLock;

use seckill_core::redis_cluster::Seeds;
use seckill_core::{ApiError, Unavailable};

use crate::platform::variables;

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
    /// The longest a buyer JWT may still be valid, in seconds.
    pub jwt_max_lifetime_s: u64,
}

/// The shortest `jwt_secret`, in bytes: HS256's key is as strong as the secret, and one a
/// person picks ("secret", a word) is guessed offline from any one token.
pub const MIN_JWT_SECRET_BYTES: usize = 32;

impl Settings {
    fn parse(joined: &str) -> Result<Settings, String> {
        const LINES: &str = "request_settings must be seven lines: redis_url, \
            redis_cluster_nodes, mysql_url, jwt_secret, jwt_issuer, jwt_audience, \
            jwt_max_lifetime_s (none of them may hold a line break)";
        let mut lines = joined.split('\n').map(str::to_string);
        let mut next = || lines.next().ok_or(LINES);
        let settings = Settings {
            redis_url: next()?,
            redis_cluster_nodes: next()?,
            mysql_url: next()?,
            jwt_secret: next()?,
            jwt_issuer: next()?,
            jwt_audience: next()?,
            jwt_max_lifetime_s: next()?
                .parse()
                .ok()
                .filter(|&seconds| seconds > 0)
                .ok_or("jwt_max_lifetime_s must be a positive number of seconds")?,
        };
        // One line more means a value with a line break: nothing can be read for sure.
        if next().is_ok() {
            return Err(LINES.into());
        }
        if settings.jwt_secret.len() < MIN_JWT_SECRET_BYTES {
            return Err(format!(
                "jwt_secret must be at least {MIN_JWT_SECRET_BYTES} bytes (e.g. `openssl rand -hex 32`)"
            ));
        }
        Ok(settings)
    }
}

/// The request's settings, looked up once per instance.
pub fn settings() -> Result<&'static Settings, ApiError> {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    if let Some(settings) = SETTINGS.get() {
        return Ok(settings);
    }
    // Refused on every request, the cause in each one's log line, rather than served with
    // settings that cannot be read for sure or a secret that can be guessed.
    let settings = Settings::parse(&get("request_settings")?).map_err(|cause| {
        crate::request_log::note_cause(cause);
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

    const SECRET: &str = "a-secret-of-thirty-two-bytes-012";

    #[test]
    fn seven_lines_read_in_order_and_may_be_empty() {
        let joined = format!("redis://r\n\nmysql://m\n{SECRET}\n\naud\n3600");
        assert_eq!(
            Settings::parse(&joined).unwrap(),
            Settings {
                redis_url: "redis://r".into(),
                redis_cluster_nodes: String::new(),
                mysql_url: "mysql://m".into(),
                jwt_secret: SECRET.into(),
                jwt_issuer: String::new(),
                jwt_audience: "aud".into(),
                jwt_max_lifetime_s: 3600,
            }
        );
    }

    #[test]
    fn a_value_with_a_line_break_is_refused() {
        assert!(Settings::parse(&format!("r\n\nm\n{SECRET}\nret\n\n\n60")).is_err());
        assert!(Settings::parse(&format!("r\n\nm\n{SECRET}\ni")).is_err());
    }

    #[test]
    fn a_jwt_secret_shorter_than_32_bytes_is_refused_by_name() {
        let short = Settings::parse("r\n\nm\nsecret\n\n\n60").unwrap_err();
        assert!(
            short.starts_with("jwt_secret must be at least 32 bytes"),
            "{short}"
        );
        assert!(Settings::parse(&format!("r\n\nm\n{}\n\n\n60", &SECRET[1..])).is_err());
        assert!(Settings::parse(&format!("r\n\nm\n{SECRET}\n\n\n0")).is_err());
    }

    #[test]
    fn the_urls_that_may_hold_passwords_are_secret_in_both_manifests() {
        for manifest in [
            include_str!("../spin.toml"),
            include_str!("../spin-p3.toml"),
        ] {
            for name in ["redis_url", "redis_cluster_nodes", "mysql_url"] {
                let line = manifest
                    .lines()
                    .find(|line| line.starts_with(&format!("{name} = ")))
                    .unwrap_or_else(|| panic!("{name} declared"));
                assert!(line.ends_with("secret = true }"), "{line}");
            }
        }
    }
}
