//! deploy/spinkube/seckill.yaml against what spin-operator (v0.6.1, the
//! `core.spinkube.dev/v1alpha1` CRDs and the admission webhook) accepts, and against this
//! app: nothing here runs Kubernetes, so this is as far as the manifest can be checked.
//! The constraints are the CRDs' as far as the manifest uses them, written out here (the
//! CRDs are not vendored).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use yaml_rust2::{Yaml, YamlLoader};

use seckill_tests::drivers::app::repo_root;

/// Every field of a SpinApp's `spec` in the CRD: any other is pruned by the API server.
const SPINAPP_FIELDS: [&str; 18] = [
    "image",
    "imagePullSecrets",
    "executor",
    "replicas",
    "enableAutoscaling",
    "runtimeConfig",
    "checks",
    "resources",
    "serviceAnnotations",
    "deploymentAnnotations",
    "podAnnotations",
    "podLabels",
    "variables",
    "volumes",
    "volumeMounts",
    "components",
    "serviceAccountName",
    "invocationLimits",
];
const PROBE_FIELDS: [&str; 6] = [
    "httpGet",
    "initialDelaySeconds",
    "timeoutSeconds",
    "periodSeconds",
    "successThreshold",
    "failureThreshold",
];
const DEPLOYMENT_CONFIG_FIELDS: [&str; 5] = [
    "runtimeClassName",
    "spinImage",
    "installDefaultCACerts",
    "caCertSecret",
    "otel",
];
/// The sources a variable's `valueFrom` may name (Kubernetes' `EnvVarSource`).
const VALUE_SOURCES: [&str; 5] = [
    "secretKeyRef",
    "configMapKeyRef",
    "fieldRef",
    "resourceFieldRef",
    "fileKeyRef",
];
/// Spin's default instance cap, which a SpinApp cannot change, and an instance's memory
/// at a sale's peak (docs/operations.md): a pod's memory limit must hold both.
const DEFAULT_INSTANCE_CAP: u64 = 1000;
const INSTANCE_BYTES: u64 = 5 * 1024 * 1024 / 2;

fn json(yaml: &Yaml) -> Value {
    match yaml {
        Yaml::Real(text) => text.parse::<f64>().map_or(Value::Null, Value::from),
        Yaml::Integer(n) => Value::from(*n),
        Yaml::String(text) => Value::from(text.as_str()),
        Yaml::Boolean(b) => Value::from(*b),
        Yaml::Array(items) => Value::Array(items.iter().map(json).collect()),
        Yaml::Hash(hash) => Value::Object(
            hash.iter()
                .map(|(key, value)| (key.as_str().expect("string keys").to_string(), json(value)))
                .collect::<Map<_, _>>(),
        ),
        _ => Value::Null,
    }
}

/// The manifest's objects, by kind.
fn manifest() -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(repo_root().join("deploy/spinkube/seckill.yaml")).unwrap();
    let mut objects = BTreeMap::new();
    for document in YamlLoader::load_from_str(&text).unwrap() {
        let object = json(&document);
        let kind = object["kind"]
            .as_str()
            .expect("every object has a kind")
            .to_string();
        assert!(
            objects.insert(kind.clone(), object).is_none(),
            "one {kind} only"
        );
    }
    objects
}

/// spin.toml's application variables, and whether each must be given.
fn spin_variables() -> BTreeMap<String, bool> {
    let text = std::fs::read_to_string(repo_root().join("spin.toml")).unwrap();
    let section = text
        .split("\n[variables]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("spin.toml has a [variables] table");
    section
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(" = "))
        .map(|(name, value)| (name.to_string(), value.contains("required = true")))
        .collect()
}

fn keys(object: &Value) -> BTreeSet<&str> {
    object
        .as_object()
        .map(|map| map.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn assert_fields(object: &Value, allowed: &[&str], what: &str) {
    let unknown: Vec<_> = keys(object)
        .into_iter()
        .filter(|key| !allowed.contains(key))
        .collect();
    assert!(
        unknown.is_empty(),
        "{what}: fields the CRD does not have: {unknown:?}"
    );
}

/// A Kubernetes quantity (`2`, `500m`, `1Gi`, `1e3`) in bytes or cores, or `None` if the
/// CRD's pattern refuses it.
fn quantity(value: &Value) -> Option<f64> {
    let text = match value {
        Value::String(text) => text.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let suffixes: [(&str, f64); 14] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    let (number, scale) = suffixes
        .iter()
        .find_map(|(suffix, scale)| text.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((text.as_str(), 1.0));
    let plain = number.trim_start_matches(['+', '-']);
    let digits_only = !plain.is_empty()
        && plain.chars().all(|c| c.is_ascii_digit() || c == '.')
        && plain.matches('.').count() <= 1
        && plain != ".";
    let exponent = number.contains(['e', 'E']) && scale == 1.0;
    (digits_only || exponent)
        .then(|| number.parse::<f64>().ok())
        .flatten()
        .map(|n| n * scale)
}

fn positive_int(value: &Value) -> bool {
    value
        .as_u64()
        .is_some_and(|n| (1..=i32::MAX as u64).contains(&n))
}

#[test]
fn every_object_is_in_one_namespace() {
    let objects = manifest();
    assert_eq!(
        objects.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "HorizontalPodAutoscaler",
            "Secret",
            "SpinApp",
            "SpinAppExecutor"
        ]
    );
    for (kind, object) in &objects {
        assert_eq!(object["metadata"]["namespace"], "seckill", "{kind}");
        assert!(object["metadata"]["name"].is_string(), "{kind}");
    }
}

#[test]
fn the_spinapp_has_what_the_crd_and_the_webhook_require() {
    let objects = manifest();
    let app = &objects["SpinApp"];
    assert_eq!(app["apiVersion"], "core.spinkube.dev/v1alpha1");
    let spec = &app["spec"];
    assert_fields(spec, &SPINAPP_FIELDS, "spec");
    assert!(spec["image"]
        .as_str()
        .is_some_and(|image| !image.is_empty()));
    // The webhook refuses an executor that is not a SpinAppExecutor of the namespace.
    let executor = &objects["SpinAppExecutor"];
    assert_eq!(executor["apiVersion"], "core.spinkube.dev/v1alpha1");
    assert_eq!(spec["executor"], executor["metadata"]["name"]);
    assert!(executor["spec"]["createDeployment"].is_boolean());
    assert_fields(
        &executor["spec"]["deploymentConfig"],
        &DEPLOYMENT_CONFIG_FIELDS,
        "deploymentConfig",
    );
    // Under autoscaling the webhook wants no replicas (or 0); without, at least one.
    if spec["enableAutoscaling"] == true {
        assert!(
            spec.get("replicas").is_none_or(|n| n == 0),
            "replicas with autoscaling"
        );
    } else {
        assert!(
            positive_int(&spec["replicas"]),
            "replicas without autoscaling"
        );
    }
}

#[test]
fn resources_are_quantities_and_hold_spins_default_cap() {
    let spec = &manifest()["SpinApp"]["spec"];
    assert_fields(&spec["resources"], &["limits", "requests"], "resources");
    for side in ["limits", "requests"] {
        for (name, value) in spec["resources"][side].as_object().unwrap() {
            assert!(quantity(value).is_some(), "{side}.{name} = {value}");
        }
    }
    let limit = quantity(&spec["resources"]["limits"]["memory"]).unwrap();
    let request = quantity(&spec["resources"]["requests"]["memory"]).unwrap();
    assert!(request <= limit);
    assert!(
        limit >= (DEFAULT_INSTANCE_CAP * INSTANCE_BYTES) as f64,
        "a pod's memory limit ({limit} bytes) below Spin's default cap of instances"
    );
    // The CPU the autoscaler's utilisation is counted against.
    assert!(quantity(&spec["resources"]["requests"]["cpu"]).is_some_and(|cpu| cpu > 0.0));
}

#[test]
fn liveness_asks_nothing_of_the_backends_and_readiness_does() {
    let checks = &manifest()["SpinApp"]["spec"]["checks"];
    assert_fields(checks, &["liveness", "readiness"], "checks");
    for (probe, path) in [("liveness", "/health/live"), ("readiness", "/health")] {
        let check = &checks[probe];
        assert_fields(check, &PROBE_FIELDS, probe);
        assert_fields(&check["httpGet"], &["path", "httpHeaders"], probe);
        assert_eq!(check["httpGet"]["path"], path, "{probe}");
        for header in check["httpGet"]["httpHeaders"].as_array().unwrap() {
            assert!(header["name"].is_string() && header["value"].is_string());
        }
        for field in &PROBE_FIELDS[1..] {
            if let Some(value) = check.get(*field) {
                assert!(positive_int(value), "{probe}.{field} = {value}");
            }
        }
    }
}

#[test]
fn every_variable_is_spins_and_bound_to_a_key_of_the_secret() {
    let objects = manifest();
    let secret = &objects["Secret"];
    let declared = spin_variables();
    let mut bound = BTreeSet::new();
    for variable in objects["SpinApp"]["spec"]["variables"].as_array().unwrap() {
        assert_fields(variable, &["name", "value", "valueFrom"], "a variable");
        let name = variable["name"].as_str().expect("a variable's name");
        assert!(
            declared.contains_key(name),
            "{name} is not a variable of spin.toml"
        );
        assert!(bound.insert(name), "{name} bound twice");
        let Some(from) = variable.get("valueFrom") else {
            assert!(
                variable["value"].is_string(),
                "{name}: a value or a valueFrom"
            );
            continue;
        };
        let sources = keys(from);
        assert_eq!(sources.len(), 1, "{name}: one source");
        assert!(sources.iter().all(|source| VALUE_SOURCES.contains(source)));
        let reference = &from["secretKeyRef"];
        assert_eq!(reference["name"], secret["metadata"]["name"], "{name}");
        let key = reference["key"].as_str().expect("a secretKeyRef's key");
        assert!(
            secret["stringData"].get(key).is_some() || secret["data"].get(key).is_some(),
            "{name}: the secret has no key {key}"
        );
    }
    for (name, required) in declared {
        assert!(
            !required || bound.contains(name.as_str()),
            "{name} is required"
        );
    }
}

#[test]
fn the_autoscaler_scales_the_operators_deployment() {
    let objects = manifest();
    let (app, hpa) = (&objects["SpinApp"], &objects["HorizontalPodAutoscaler"]);
    assert_eq!(app["spec"]["enableAutoscaling"], true);
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    let target = &hpa["spec"]["scaleTargetRef"];
    assert_eq!(target["apiVersion"], "apps/v1");
    assert_eq!(target["kind"], "Deployment");
    assert_eq!(target["name"], app["metadata"]["name"]);
    let (min, max) = (&hpa["spec"]["minReplicas"], &hpa["spec"]["maxReplicas"]);
    assert!(positive_int(min) && positive_int(max) && min.as_u64() <= max.as_u64());
}

#[test]
fn quantities_read_as_the_crd_pattern_does() {
    for (text, bytes) in [
        ("1Gi", 1024f64.powi(3)),
        ("500m", 0.5),
        ("2", 2.0),
        ("1e3", 1000.0),
    ] {
        assert_eq!(quantity(&Value::from(text)), Some(bytes), "{text}");
    }
    for bad in ["", "1GB", "Gi", "1.2.3", "one"] {
        assert_eq!(quantity(&Value::from(bad)), None, "{bad}");
    }
}

#[test]
fn the_p3_manifest_is_spin_toml_but_for_the_apis_build() {
    let read = |name: &str| std::fs::read_to_string(repo_root().join(name)).unwrap();
    let (default, p3) = (read("spin.toml"), read("spin-p3.toml"));
    // Its own header, then spin.toml with the API component built for wasm32-wasip2.
    let body = &p3[p3.find("spin_manifest_version").unwrap()..];
    let api = |manifest: &str| -> Vec<String> {
        manifest
            .lines()
            .filter(|line| line.contains("release/seckill.wasm") || line.contains("-p seckill\""))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        api(body),
        [
            "source = \"target/wasm32-wasip2/release/seckill.wasm\"",
            "command = \"cargo build --target wasm32-wasip2 --release -p seckill\""
        ]
    );
    assert_eq!(body.replace("wasm32-wasip2", "wasm32-wasip1"), default);
}
