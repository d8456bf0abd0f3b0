//! HTTP route matching for `[[trigger.http]]` routes, as Spin does it for the
//! two forms this host supports: exact paths and trailing wildcards
//! (`/prefix/...`, or its alias `/prefix/*`). An exact route beats a
//! wildcard; among wildcards the longest prefix wins.

use anyhow::{ensure, Result};

use crate::manifest::HttpTrigger;

#[derive(Debug, Clone)]
pub struct Router {
    routes: Vec<Route>,
}

#[derive(Debug, Clone)]
struct Route {
    /// The route as written in the manifest.
    raw: String,
    /// Normalised path: leading `/`, no trailing `/` ("" for the root).
    path: String,
    wildcard: bool,
    component: String,
}

/// A successful match; the fields feed Spin's `spin-*` request headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteMatch<'a> {
    pub component: &'a str,
    /// The route as written (`spin-raw-component-route`, and, since the base
    /// is always `/`, also `spin-matched-route`).
    pub raw_route: &'a str,
    /// The route without its wildcard suffix (`spin-component-route`).
    pub component_route: &'a str,
    /// The part of the path the wildcard matched (`spin-path-info`).
    pub path_info: &'a str,
}

impl Router {
    /// Builds the router. As in Spin, when two triggers use the same route
    /// the later one wins.
    pub fn new(triggers: &[HttpTrigger]) -> Result<Self> {
        let mut routes: Vec<Route> = Vec::new();
        for trigger in triggers {
            let raw = trigger.route.clone();
            let absolute = if raw.starts_with('/') {
                raw.clone()
            } else {
                format!("/{raw}")
            };
            let (path, wildcard) = match absolute
                .strip_suffix("/...")
                .or_else(|| absolute.strip_suffix("/*"))
            {
                Some(prefix) => (prefix.to_string(), true),
                None => (
                    absolute.strip_suffix('/').unwrap_or(&absolute).to_string(),
                    false,
                ),
            };
            ensure!(
                !path.contains(['*', ':']),
                "route {raw:?}: only exact routes and trailing `/...` wildcards are supported"
            );
            routes.retain(|r| r.raw != raw);
            routes.push(Route {
                raw,
                path,
                wildcard,
                component: trigger.component.clone(),
            });
        }
        Ok(Self { routes })
    }

    /// Finds the component for a request path.
    pub fn route<'a>(&'a self, path: &'a str) -> Option<RouteMatch<'a>> {
        let trimmed = path.strip_suffix('/').unwrap_or(path);
        let exact = self
            .routes
            .iter()
            .find(|r| !r.wildcard && r.path == trimmed);
        let best = exact.or_else(|| {
            self.routes
                .iter()
                .filter(|r| r.wildcard && is_under(path, &r.path))
                .max_by_key(|r| r.path.len())
        })?;
        Some(RouteMatch {
            component: &best.component,
            raw_route: &best.raw,
            component_route: best.raw.strip_suffix("/...").unwrap_or(&best.raw),
            path_info: if best.wildcard {
                &path[best.path.len()..]
            } else {
                ""
            },
        })
    }

    /// `(route, component)` pairs, for the start-up banner.
    pub fn routes(&self) -> impl Iterator<Item = (String, &str)> {
        self.routes.iter().map(|r| {
            let shown = if r.wildcard {
                format!("{} (wildcard)", r.path)
            } else {
                r.path.clone()
            };
            (shown, r.component.as_str())
        })
    }
}

/// Whether `path` is `prefix` itself or below it (segment-wise).
fn is_under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(routes: &[(&str, &str)]) -> Router {
        let triggers: Vec<_> = routes
            .iter()
            .map(|(route, component)| HttpTrigger {
                route: route.to_string(),
                component: component.to_string(),
            })
            .collect();
        Router::new(&triggers).unwrap()
    }

    #[test]
    fn catch_all_matches_everything() {
        let r = router(&[("/...", "app")]);
        let m = r.route("/api/vouchers/1/order").unwrap();
        assert_eq!(m.component, "app");
        assert_eq!(m.raw_route, "/...");
        assert_eq!(m.component_route, "");
        assert_eq!(m.path_info, "/api/vouchers/1/order");
        assert_eq!(r.route("/").unwrap().path_info, "/");
    }

    #[test]
    fn exact_beats_wildcard_and_longest_prefix_wins() {
        let r = router(&[
            ("/...", "all"),
            ("/api/...", "api"),
            ("/api/health", "health"),
        ]);
        assert_eq!(r.route("/api/health").unwrap().component, "health");
        assert_eq!(r.route("/api/health/").unwrap().component, "health");
        let m = r.route("/api/x").unwrap();
        assert_eq!(
            (m.component, m.path_info, m.component_route),
            ("api", "/x", "/api")
        );
        assert_eq!(r.route("/api").unwrap().path_info, "");
        assert_eq!(r.route("/apix").unwrap().component, "all");
    }

    #[test]
    fn unmatched_paths_and_duplicates() {
        let r = router(&[("/a", "first"), ("/b/...", "b"), ("/a", "second")]);
        assert_eq!(r.route("/a").unwrap().component, "second");
        assert!(r.route("/c").is_none());
        assert!(r.route("/bb").is_none());
    }

    #[test]
    fn unsupported_patterns_are_rejected() {
        let t = |route: &str| HttpTrigger {
            route: route.into(),
            component: "c".into(),
        };
        assert!(Router::new(&[t("/users/:id")]).is_err());
        assert!(Router::new(&[t("/a/*/b")]).is_err());
        assert!(Router::new(&[t("/a/*")]).is_ok());
    }
}
