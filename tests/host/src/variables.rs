//! Application variables and component variable templates, resolved the way
//! Spin's variables factor with its default environment provider does:
//! an app variable's value is `SPIN_VARIABLE_<NAME>` when set, else its
//! `default`; component variables are `{{ name }}` templates over app variables.
//!
//! Unlike Spin, values are resolved once at start-up (see `Resolver::new`),
//! so the guest-facing `get` is a pure map lookup.

use std::collections::{BTreeMap, HashMap};

use anyhow::{anyhow, bail, Context, Result};

use crate::manifest::Manifest;

/// Prefix of the environment variables that provide app variable values.
const ENV_PREFIX: &str = "SPIN_VARIABLE_";

/// The guest-visible failure of `fermyon:spin/variables.get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetError {
    InvalidName(String),
    Undefined(String),
}

/// Checks a variable name against Spin's rules, which exist so that every
/// name maps one-to-one onto an environment variable name.
pub fn validate_name(name: &str) -> Result<(), GetError> {
    let reason = if name.is_empty() {
        Some("must not be empty".to_string())
    } else if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'))
    {
        Some(format!(
            "invalid character {c:?}. Variable names may contain only lower-case letters, numbers, and underscores."
        ))
    } else if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        Some("must start with a lowercase ASCII letter".to_string())
    } else if !name.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        Some("must end with a lowercase ASCII letter or digit".to_string())
    } else if name.contains("__") {
        Some("must not contain multiple consecutive underscores".to_string())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(GetError::InvalidName(format!("{name:?}: {reason}"))),
        None => Ok(()),
    }
}

impl std::fmt::Display for GetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GetError::InvalidName(msg) => write!(f, "invalid variable name: {msg}"),
            GetError::Undefined(msg) => write!(f, "undefined variable: {msg}"),
        }
    }
}

impl std::error::Error for GetError {}

/// One piece of a template: literal text or a `{{ variable }}` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Lit(String),
    Var(String),
}

/// Splits a template into parts; `{{` without a closing `}}` is an error.
/// There is no escaping, exactly as in Spin.
pub fn parse_template(template: &str) -> Result<Vec<Part>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        if let Some(after_open) = rest.strip_prefix("{{") {
            let (expr, tail) = after_open.split_once("}}").ok_or_else(|| {
                anyhow!("invalid variable template: unmatched '{{{{' in {template:?}")
            })?;
            parts.push(Part::Var(expr.trim().to_string()));
            rest = tail;
        } else {
            let end = rest.find("{{").unwrap_or(rest.len());
            parts.push(Part::Lit(rest[..end].to_string()));
            rest = &rest[end..];
        }
    }
    Ok(parts)
}

/// Expands a template with `lookup`, which fails for unknown variables.
pub fn expand(template: &str, lookup: impl Fn(&str) -> Result<String>) -> Result<String> {
    parse_template(template)?
        .into_iter()
        .map(|part| match part {
            Part::Lit(text) => Ok(text),
            Part::Var(name) => lookup(&name),
        })
        .collect()
}

/// All variable values of an application, resolved.
#[derive(Debug, Clone)]
pub struct Resolver {
    /// App variable name -> value.
    app: BTreeMap<String, String>,
    /// Component id -> component variable name -> value.
    components: HashMap<String, BTreeMap<String, String>>,
}

impl Resolver {
    /// Resolves every app and component variable of `manifest`, reading
    /// `SPIN_VARIABLE_*` values through `env`. Fails, as `spin up` does, when
    /// a required variable has no value or a template names an unknown
    /// variable.
    pub fn new(manifest: &Manifest, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut app = BTreeMap::new();
        let mut missing = Vec::new();
        for (name, decl) in &manifest.variables {
            let from_env = env(&format!("{ENV_PREFIX}{}", name.to_ascii_uppercase()));
            match from_env.or_else(|| decl.default.clone()) {
                Some(value) => {
                    app.insert(name.clone(), value);
                }
                None => missing.push(name.as_str()),
            }
        }
        if !missing.is_empty() {
            bail!("no provider resolved required variable(s): {missing:?}");
        }

        let lookup = |name: &str| {
            app.get(name)
                .cloned()
                .ok_or_else(|| anyhow!("invalid variable template: unknown variable {name:?}"))
        };
        let mut components = HashMap::new();
        for (id, component) in &manifest.components {
            let values = component
                .variables
                .iter()
                .map(|(key, template)| {
                    let value = expand(template, lookup)
                        .with_context(|| format!("component {id:?} variable {key:?}"))?;
                    Ok((key.clone(), value))
                })
                .collect::<Result<_>>()?;
            components.insert(id.clone(), values);
        }
        Ok(Self { app, components })
    }

    /// Expands a template over the app variables (used for
    /// `allowed_outbound_hosts` entries, which Spin also lets be templates).
    pub fn expand_app_template(&self, template: &str) -> Result<String> {
        expand(template, |name| {
            self.app
                .get(name)
                .cloned()
                .ok_or_else(|| anyhow!("unknown variable {name:?}"))
        })
    }

    /// What `fermyon:spin/variables.get(name)` returns to `component`.
    pub fn get(&self, component: &str, name: &str) -> Result<String, GetError> {
        validate_name(name)?;
        let values = self.components.get(component).ok_or_else(|| {
            GetError::Undefined(format!("no variable for component {component:?}"))
        })?;
        values
            .get(name)
            .cloned()
            .ok_or_else(|| GetError::Undefined(format!("no variable for {component:?}.{name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn templates_split_into_parts() {
        assert_eq!(parse_template("").unwrap(), vec![]);
        assert_eq!(
            parse_template("a-{{ x }}-b{{y}}").unwrap(),
            vec![
                Part::Lit("a-".into()),
                Part::Var("x".into()),
                Part::Lit("-b".into()),
                Part::Var("y".into()),
            ]
        );
        assert!(parse_template("{{ ok }} {{ unmatched").is_err());
        // A lone closing brace pair is just text, as in Spin.
        assert_eq!(parse_template("}}").unwrap(), vec![Part::Lit("}}".into())]);
    }

    #[test]
    fn names_follow_spin_rules() {
        for good in ["a", "abc", "a1b2", "a_1", "reservation_ttl_ms"] {
            validate_name(good).expect(good);
        }
        for bad in ["", "aX", "1bc", "_x", "x.y", "x_", "a__b", "x-y"] {
            assert!(
                matches!(validate_name(bad), Err(GetError::InvalidName(_))),
                "{bad}"
            );
        }
    }

    fn manifest() -> Manifest {
        Manifest::parse(
            r#"
            spin_manifest_version = 2
            [variables]
            ttl = { default = "5000" }
            secret = { required = true }
            host = { default = "127.0.0.1" }
            [component.c]
            source = "c.wasm"
            [component.c.variables]
            ttl = "{{ ttl }}"
            secret = "{{secret}}"
            url = "redis://{{ host }}:6379/{{ ttl }}"
            fixed = "literal"
            "#,
            Path::new("."),
        )
        .unwrap()
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |key| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn env_overrides_defaults_and_feeds_templates() {
        let r = Resolver::new(
            &manifest(),
            env(&[("SPIN_VARIABLE_SECRET", "s3"), ("SPIN_VARIABLE_TTL", "200")]),
        )
        .unwrap();
        assert_eq!(r.get("c", "ttl").unwrap(), "200");
        assert_eq!(r.get("c", "secret").unwrap(), "s3");
        assert_eq!(r.get("c", "url").unwrap(), "redis://127.0.0.1:6379/200");
        assert_eq!(r.get("c", "fixed").unwrap(), "literal");
        // App variables are not visible unless the component maps them.
        assert!(matches!(r.get("c", "host"), Err(GetError::Undefined(_))));
        assert!(matches!(r.get("c", "Bad"), Err(GetError::InvalidName(_))));
        assert!(matches!(r.get("other", "ttl"), Err(GetError::Undefined(_))));
        assert_eq!(
            r.expand_app_template("redis://{{ host }}:1").unwrap(),
            "redis://127.0.0.1:1"
        );
    }

    #[test]
    fn missing_required_variable_fails_start_up() {
        let err = Resolver::new(&manifest(), env(&[])).unwrap_err();
        assert!(err.to_string().contains("\"secret\""), "{err}");
    }

    #[test]
    fn template_naming_an_unknown_variable_fails_start_up() {
        let mut m = manifest();
        m.components
            .get_mut("c")
            .unwrap()
            .variables
            .insert("bad".into(), "{{ nope }}".into());
        let err = Resolver::new(&m, env(&[("SPIN_VARIABLE_SECRET", "s")])).unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown variable \"nope\""),
            "{err:#}"
        );
    }
}
