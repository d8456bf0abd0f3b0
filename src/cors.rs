//! CORS, so that a storefront's page on another origin can call the API from a browser.
//!
//! Decided once per request, from its `Origin` and the `allowed_origins` variable (empty:
//! no CORS headers; `*`; or a comma-separated list of exact origins). A preflight is
//! answered by the route table without authenticating or touching Redis or MySQL; an
//! origin that is not allowed gets no CORS headers, so the browser refuses the answer.

use crate::config;
use crate::http::{Answer, Head};

/// How long a browser may reuse a preflight's answer. Short, so that a change of
/// `allowed_origins` reaches browsers soon.
const MAX_AGE_SECS: &str = "600";

/// Response headers a cross-origin page may read besides the safelisted ones: when to
/// retry a 429, the server's clock (a sale page without `server_time` counts down by it),
/// and the request's id (what a buyer's support ticket quotes).
const EXPOSE: &str = "Retry-After, Date, X-Request-Id";

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cors {
    /// What `Access-Control-Allow-Origin` says: the request's origin or `*`; `None` when
    /// the request has no origin or one that is not allowed.
    allow_origin: Option<String>,
    /// The request is a CORS preflight: `OPTIONS` with `Origin` and
    /// `Access-Control-Request-Method` (the Fetch standard's definition).
    preflight: bool,
}

impl Cors {
    pub fn of(head: &Head) -> Cors {
        // One non-empty UTF-8 value, or none: browsers send exactly that.
        let single = |name: &str| head.single(name).filter(|value| !value.is_empty());
        let Some(origin) = single("origin") else {
            return Cors::default();
        };
        let preflight =
            head.method == "OPTIONS" && single("access-control-request-method").is_some();
        // A missing variable means no CORS rather than a 5xx: the API itself still works.
        let allowed = config::get("allowed_origins").unwrap_or_default();
        Cors {
            allow_origin: allow_origin(&allowed, &origin),
            preflight,
        }
    }

    pub fn is_preflight(&self) -> bool {
        self.preflight
    }

    /// The answer to a preflight for a route that takes `method`: 204, and the CORS
    /// headers only for an allowed origin.
    pub fn preflight(&self, method: &'static str) -> Answer {
        let headers = match self.allow_origin {
            Some(_) => vec![
                ("access-control-allow-methods", method.to_string()),
                (
                    "access-control-allow-headers",
                    "Authorization, Content-Type, X-Request-Id, traceparent".to_string(),
                ),
                ("access-control-max-age", MAX_AGE_SECS.to_string()),
            ],
            None => Vec::new(),
        };
        Answer {
            status: 204,
            body: None,
            headers,
            then: None,
        }
    }

    /// Headers every answer carries. `Vary: Origin` always, since the CORS headers depend
    /// on the origin and shared caches keep public answers (`GET /vouchers/{id}`).
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![("vary", "Origin".to_string())];
        if let Some(origin) = &self.allow_origin {
            headers.push(("access-control-allow-origin", origin.clone()));
            headers.push(("access-control-expose-headers", EXPOSE.to_string()));
        }
        headers
    }
}

/// What `Access-Control-Allow-Origin` says for `origin` under the `allowed` setting.
fn allow_origin(allowed: &str, origin: &str) -> Option<String> {
    let allowed = allowed.trim();
    if allowed == "*" {
        return Some("*".to_string());
    }
    allowed
        .split(',')
        .map(str::trim)
        .any(|entry| !entry.is_empty() && entry == origin)
        .then(|| origin.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_exactly() {
        let list = "https://shop.example, http://127.0.0.1:8080";
        assert_eq!(
            allow_origin(list, "https://shop.example").as_deref(),
            Some("https://shop.example")
        );
        assert_eq!(
            allow_origin(list, "http://127.0.0.1:8080").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        for other in [
            "https://shop.example.evil",
            "http://shop.example",
            "https://SHOP.example",
            "https://shop.example/",
            "null",
            "",
        ] {
            assert_eq!(allow_origin(list, other), None, "{other:?}");
        }
    }

    #[test]
    fn empty_allows_none_and_star_allows_all() {
        for origin in ["https://shop.example", "null", ""] {
            assert_eq!(allow_origin("", origin), None);
            assert_eq!(allow_origin(" , ", origin), None);
            assert_eq!(allow_origin(" * ", origin).as_deref(), Some("*"));
        }
    }

    #[test]
    fn only_an_allowed_origin_gets_cors_headers() {
        let allowed = Cors {
            allow_origin: Some("https://shop.example".into()),
            preflight: true,
        };
        let names = |headers: Vec<(&'static str, String)>| -> Vec<&'static str> {
            headers.into_iter().map(|(name, _)| name).collect()
        };
        assert_eq!(
            names(allowed.headers()),
            [
                "vary",
                "access-control-allow-origin",
                "access-control-expose-headers"
            ]
        );
        let preflight = allowed.preflight("POST");
        assert_eq!((preflight.status, &preflight.body), (204, &None));
        assert_eq!(
            preflight.headers[0],
            ("access-control-allow-methods", "POST".to_string())
        );

        let refused = Cors {
            allow_origin: None,
            preflight: true,
        };
        assert_eq!(names(refused.headers()), ["vary"]);
        assert!(refused.preflight("GET").headers.is_empty());
    }
}
