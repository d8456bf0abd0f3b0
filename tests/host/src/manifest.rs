//! The subset of a Spin application manifest (`spin_manifest_version = 2`)
//! that a single-component HTTP application needs.
//!
//! Parsing is strict where Spin is strict (manifest version, variable
//! declarations, unknown variable fields) so a manifest this host accepts has
//! a good chance of being accepted by `spin up` too. Everything the host does
//! not implement (other trigger types, remote sources, ...) is rejected with
//! an explicit error instead of being silently ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use serde::Deserialize;

use crate::variables;

/// A parsed and validated manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Application-level variables, by name.
    pub variables: BTreeMap<String, Variable>,
    /// `[[trigger.http]]` entries that have a routable route, in manifest order.
    pub http_triggers: Vec<HttpTrigger>,
    /// Components, by id.
    pub components: BTreeMap<String, Component>,
}

/// An application variable declaration (`[variables]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variable {
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub default: Option<String>,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub secret: bool,
}

/// One routable `[[trigger.http]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTrigger {
    pub route: String,
    pub component: String,
}

/// A `[component.<id>]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// Path of the Wasm file, already joined to the manifest's folder.
    pub source: PathBuf,
    pub allowed_outbound_hosts: Vec<String>,
    /// Component variable templates (`[component.<id>.variables]`).
    pub variables: BTreeMap<String, String>,
    /// Environment variables given to the guest through WASI.
    pub environment: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawManifest {
    spin_manifest_version: toml::Value,
    #[serde(default)]
    variables: BTreeMap<String, Variable>,
    #[serde(default)]
    trigger: BTreeMap<String, Vec<RawTrigger>>,
    #[serde(default)]
    component: BTreeMap<String, RawComponent>,
}

#[derive(Deserialize)]
struct RawTrigger {
    route: Option<RawRoute>,
    component: Option<toml::Value>,
}

/// Spin accepts either a route pattern or `{ private = true }`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawRoute {
    Pattern(String),
    Private { private: bool },
}

#[derive(Deserialize)]
struct RawComponent {
    source: toml::Value,
    #[serde(default)]
    allowed_outbound_hosts: Vec<String>,
    #[serde(default)]
    variables: BTreeMap<String, String>,
    #[serde(default)]
    environment: BTreeMap<String, String>,
}

impl Manifest {
    /// Reads and parses the manifest at `path`; component sources are
    /// resolved relative to the manifest's folder, as Spin does.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read manifest {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).with_context(|| format!("invalid manifest {}", path.display()))
    }

    /// Parses manifest text; `base` is the folder relative sources live in.
    pub fn parse(text: &str, base: &Path) -> Result<Self> {
        let raw: RawManifest = toml::from_str(text)?;
        ensure!(
            raw.spin_manifest_version.as_integer() == Some(2),
            "only spin_manifest_version = 2 is supported, found {}",
            raw.spin_manifest_version
        );

        for (name, var) in &raw.variables {
            variables::validate_name(name).with_context(|| format!("variable {name:?}"))?;
            // Spin's loader rejects both "neither" and "both".
            ensure!(
                var.required ^ var.default.is_some(),
                "variable {name:?} must be `required` OR have a `default`"
            );
        }

        let mut components = BTreeMap::new();
        for (id, raw) in raw.component {
            validate_component_id(&id)?;
            let source = match &raw.source {
                toml::Value::String(file) => base.join(file),
                other => bail!(
                    "component {id:?}: only a local file `source` is supported, found {other}"
                ),
            };
            for key in raw.variables.keys() {
                variables::validate_name(key)
                    .with_context(|| format!("component {id:?} variable {key:?}"))?;
            }
            let component = Component {
                source,
                allowed_outbound_hosts: raw.allowed_outbound_hosts,
                variables: raw.variables,
                environment: raw.environment,
            };
            components.insert(id, component);
        }

        let mut http_triggers = Vec::new();
        for (kind, triggers) in raw.trigger {
            ensure!(kind == "http", "trigger type {kind:?} is not supported");
            for trigger in triggers {
                let component = match trigger.component {
                    Some(toml::Value::String(id)) => id,
                    Some(_) => bail!("inline trigger components are not supported"),
                    None => bail!("an HTTP trigger has no `component`"),
                };
                ensure!(
                    components.contains_key(&component),
                    "HTTP trigger refers to unknown component {component:?}"
                );
                match trigger.route {
                    Some(RawRoute::Pattern(route)) => {
                        http_triggers.push(HttpTrigger { route, component })
                    }
                    Some(RawRoute::Private { private: true }) => {}
                    Some(RawRoute::Private { private: false }) => bail!(
                        "route must be a string pattern or '{{ private = true }}': \
                         {component:?} has {{ private = false }}"
                    ),
                    None => bail!("the HTTP trigger for {component:?} has no `route`"),
                }
            }
        }

        Ok(Self {
            variables: raw.variables,
            http_triggers,
            components,
        })
    }
}

/// Spin's component ids are kebab-case: `-`-separated words, each starting
/// with an ASCII letter, alphanumeric, and all lower- or all upper-case.
fn validate_component_id(id: &str) -> Result<()> {
    let word_ok = |word: &str| {
        word.starts_with(|c: char| c.is_ascii_alphabetic())
            && word.chars().all(|c| c.is_ascii_alphanumeric())
            && (word == word.to_ascii_lowercase() || word == word.to_ascii_uppercase())
    };
    ensure!(
        !id.is_empty() && id.split('-').all(word_ok),
        "component id {id:?} must be kebab-case (e.g. \"my-component\")"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECKILL_LIKE: &str = r#"
        spin_manifest_version = 2

        [application]
        name = "app"

        [variables]
        redis_url = { default = "redis://127.0.0.1:6379" }
        jwt_secret = { required = true, secret = true }

        [[trigger.http]]
        route = "/..."
        component = "web"

        [component.web]
        source = "target/web.wasm"
        allowed_outbound_hosts = ["redis://127.0.0.1:6379"]

        [component.web.variables]
        redis_url = "{{ redis_url }}"

        [component.web.build]
        command = "cargo build"
    "#;

    #[test]
    fn parses_a_seckill_like_manifest() {
        let m = Manifest::parse(SECKILL_LIKE, Path::new("/app")).unwrap();
        assert_eq!(
            m.variables["redis_url"].default.as_deref(),
            Some("redis://127.0.0.1:6379")
        );
        assert!(m.variables["jwt_secret"].required && m.variables["jwt_secret"].secret);
        assert_eq!(
            m.http_triggers,
            vec![HttpTrigger {
                route: "/...".into(),
                component: "web".into()
            }]
        );
        let web = &m.components["web"];
        assert_eq!(web.source, Path::new("/app/target/web.wasm"));
        assert_eq!(web.allowed_outbound_hosts, ["redis://127.0.0.1:6379"]);
        assert_eq!(web.variables["redis_url"], "{{ redis_url }}");
    }

    #[test]
    fn rejects_what_spin_rejects() {
        let cases = [
            ("spin_manifest_version = 1", "spin_manifest_version"),
            (
                "spin_manifest_version = 2\n[variables]\nx = { default = \"1\", required = true }",
                "must be `required` OR have a `default`",
            ),
            (
                "spin_manifest_version = 2\n[variables]\nx = {}",
                "must be `required` OR have a `default`",
            ),
            (
                "spin_manifest_version = 2\n[variables]\nBad = { default = \"1\" }",
                "variable \"Bad\"",
            ),
            (
                "spin_manifest_version = 2\n[variables]\nx = { defualt = \"1\" }",
                "unknown field",
            ),
            (
                "spin_manifest_version = 2\n[[trigger.http]]\nroute = \"/\"\ncomponent = \"nope\"",
                "unknown component",
            ),
            (
                "spin_manifest_version = 2\n[component.my_comp]\nsource = \"a.wasm\"",
                "must be kebab-case",
            ),
            (
                "spin_manifest_version = 2\n[[trigger.redis]]\nchannel = \"c\"\ncomponent = \"c\"",
                "not supported",
            ),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", Manifest::parse(text, Path::new(".")).unwrap_err());
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn component_ids_are_kebab_case() {
        for good in ["seckill", "my-comp2", "ABC-def"] {
            validate_component_id(good).expect(good);
        }
        for bad in ["", "my_comp", "-a", "a--b", "2fast", "MixedCase"] {
            assert!(validate_component_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn private_routes_are_not_routable() {
        let text = r#"
            spin_manifest_version = 2
            [[trigger.http]]
            route = { private = true }
            component = "c"
            [component.c]
            source = "c.wasm"
        "#;
        let m = Manifest::parse(text, Path::new(".")).unwrap();
        assert!(m.http_triggers.is_empty());
    }
}
