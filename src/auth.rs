//! Who is calling, and whether a route lets them in ([`authorize`], by the route's
//! [`Access`], a column of the route table in `src/router.rs`). Identity only ever comes
//! from the `Authorization` header: the admin token, or a buyer's HS256 JWT whose `sub` is
//! the user id. A service's token (metrics, payments, feed) is no identity: it opens its one
//! route and nothing else.

use std::time::SystemTime;

use chrono::{DateTime, Duration, Utc};
use jwt_compact::alg::{Hs256, Hs256Key};
use jwt_compact::{AlgorithmExt, TimeOptions, UntrustedToken};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use seckill_core::ApiError;
use seckill_core::{parse_id, UserId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Admin,
    Buyer(UserId),
}

/// A service that calls one route with a token of its own, held by a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Prometheus, scraping `GET /metrics`.
    Metrics,
    /// The payment system, confirming `POST /orders/{id}/pay`.
    Payments,
    /// A reader of the order feed, `GET /events`.
    Feed,
}

impl Service {
    /// The variable holding its token.
    pub fn variable(self) -> &'static str {
        match self {
            Service::Metrics => "metrics_token",
            Service::Payments => "payments_token",
            Service::Feed => "feed_token",
        }
    }
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, credentials or not (none are looked at).
    Public,
    /// A buyer's token; the admin is refused (`403`): buying is a buyer's act.
    Buyer,
    /// The admin token; a buyer is refused (`403`).
    Admin,
    /// A buyer or the admin: the handler decides what each may see or do.
    Signed,
    /// The service's token, or the admin's; a buyer is refused (`403`).
    Service(Service),
}

/// Who a route let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    Anyone,
    Caller(Caller),
    Service(Service),
}

impl Granted {
    /// The buyer, on a route whose access is [`Access::Buyer`].
    pub fn buyer(self) -> Result<UserId, ApiError> {
        match self {
            Granted::Caller(Caller::Buyer(user)) => Ok(user),
            _ => Err(ApiError::Forbidden),
        }
    }

    /// The buyer or the admin, on a route whose access is [`Access::Signed`].
    pub fn caller(self) -> Result<Caller, ApiError> {
        match self {
            Granted::Caller(caller) => Ok(caller),
            _ => Err(ApiError::Forbidden),
        }
    }
}

/// Who the credential of a request to a route of `access` names (`401` when it names
/// nobody). Only the secrets it needs are looked up: nothing for a public route, the
/// service's token first on a service's route (a scrape looks up nothing else).
pub fn identify(
    access: Access,
    authorization: Option<&str>,
    secrets: &impl Secrets,
    now: SystemTime,
) -> Result<Granted, ApiError> {
    match access {
        Access::Public => Ok(Granted::Anyone),
        Access::Service(service) => match bearer(authorization) {
            Some(token) if is_token(token, &secrets.service_token(service)?) => {
                Ok(Granted::Service(service))
            }
            _ => authenticate(authorization, secrets, now).map(Granted::Caller),
        },
        Access::Buyer | Access::Admin | Access::Signed => {
            authenticate(authorization, secrets, now).map(Granted::Caller)
        }
    }
}

/// Whether `authorization` names an operator: the admin, or the metrics service (what a
/// public route shows operators only, `/health`'s detail). No credential looks nothing up.
pub fn is_operator(authorization: Option<&str>, secrets: &impl Secrets, now: SystemTime) -> bool {
    let metrics = Access::Service(Service::Metrics);
    matches!(
        identify(metrics, authorization, secrets, now),
        Ok(Granted::Service(_) | Granted::Caller(Caller::Admin))
    )
}

/// Whether a route of `access` lets `who` in (`403` when not).
pub fn admit(access: Access, who: Granted) -> Result<Granted, ApiError> {
    match (access, who) {
        (Access::Public, _)
        | (Access::Buyer, Granted::Caller(Caller::Buyer(_)))
        | (Access::Admin, Granted::Caller(Caller::Admin))
        | (Access::Signed, Granted::Caller(_))
        | (Access::Service(_), Granted::Caller(Caller::Admin)) => Ok(who),
        (Access::Service(route), Granted::Service(service)) if route == service => Ok(who),
        _ => Err(ApiError::Forbidden),
    }
}

/// What a token is checked against (the secrets a caller can prove knowledge of, and the
/// `iss` and `aud` a buyer's token must name and the longest it may still be valid), each
/// fetched only when a token needs it:
/// under Spin every variable is a host call, the largest cost of a rejection after Redis
/// itself (BENCHMARKS.md). An empty value matches nothing (a token) or checks nothing
/// (`iss`, `aud`).
pub trait Secrets {
    fn jwt_secret(&self) -> Result<String, ApiError>;
    fn admin_token(&self) -> Result<String, ApiError>;
    fn service_token(&self, service: Service) -> Result<String, ApiError>;
    fn jwt_issuer(&self) -> Result<String, ApiError>;
    fn jwt_audience(&self) -> Result<String, ApiError>;
    fn jwt_max_lifetime_s(&self) -> Result<u64, ApiError>;
}

/// The component's variables of the same names.
pub struct Variables;

impl Secrets for Variables {
    fn jwt_secret(&self) -> Result<String, ApiError> {
        Ok(crate::config::settings()?.jwt_secret.clone())
    }

    fn admin_token(&self) -> Result<String, ApiError> {
        crate::config::get("admin_token")
    }

    fn service_token(&self, service: Service) -> Result<String, ApiError> {
        crate::config::get(service.variable())
    }

    fn jwt_issuer(&self) -> Result<String, ApiError> {
        Ok(crate::config::settings()?.jwt_issuer.clone())
    }

    fn jwt_audience(&self) -> Result<String, ApiError> {
        Ok(crate::config::settings()?.jwt_audience.clone())
    }

    fn jwt_max_lifetime_s(&self) -> Result<u64, ApiError> {
        Ok(crate::config::settings()?.jwt_max_lifetime_s)
    }
}

/// Secrets known up front, for tests; empty unless given, and a day's lifetime.
#[cfg(test)]
pub struct Known {
    pub admin_token: String,
    pub jwt_secret: String,
    pub metrics_token: String,
    pub payments_token: String,
    pub feed_token: String,
    pub jwt_issuer: String,
    pub jwt_audience: String,
    pub jwt_max_lifetime_s: u64,
}

#[cfg(test)]
impl Default for Known {
    fn default() -> Known {
        Known {
            admin_token: String::new(),
            jwt_secret: String::new(),
            metrics_token: String::new(),
            payments_token: String::new(),
            feed_token: String::new(),
            jwt_issuer: String::new(),
            jwt_audience: String::new(),
            jwt_max_lifetime_s: 86_400,
        }
    }
}

#[cfg(test)]
impl Secrets for Known {
    fn jwt_secret(&self) -> Result<String, ApiError> {
        Ok(self.jwt_secret.clone())
    }

    fn admin_token(&self) -> Result<String, ApiError> {
        Ok(self.admin_token.clone())
    }

    fn service_token(&self, service: Service) -> Result<String, ApiError> {
        Ok(match service {
            Service::Metrics => &self.metrics_token,
            Service::Payments => &self.payments_token,
            Service::Feed => &self.feed_token,
        }
        .clone())
    }

    fn jwt_issuer(&self) -> Result<String, ApiError> {
        Ok(self.jwt_issuer.clone())
    }

    fn jwt_audience(&self) -> Result<String, ApiError> {
        Ok(self.jwt_audience.clone())
    }

    fn jwt_max_lifetime_s(&self) -> Result<u64, ApiError> {
        Ok(self.jwt_max_lifetime_s)
    }
}

#[derive(Deserialize)]
struct BuyerClaims {
    sub: String,
    /// `iss` and `aud` as sent, whatever their JSON type: they matter only when
    /// `jwt_issuer` / `jwt_audience` are set, and a token must not fail on them otherwise.
    iss: Option<Value>,
    aud: Option<Value>,
}

impl BuyerClaims {
    /// `iss` is exactly `issuer`, or `issuer` is empty (no check).
    fn has_issuer(&self, issuer: &str) -> bool {
        issuer.is_empty() || matches!(&self.iss, Some(Value::String(iss)) if iss == issuer)
    }

    /// `aud` is exactly `audience` or an array holding it (RFC 7519 allows both), or
    /// `audience` is empty (no check).
    fn has_audience(&self, audience: &str) -> bool {
        if audience.is_empty() {
            return true;
        }
        match &self.aud {
            Some(Value::String(aud)) => aud == audience,
            Some(Value::Array(auds)) => auds.iter().any(|aud| aud.as_str() == Some(audience)),
            _ => false,
        }
    }
}

/// The token of a `Bearer` credential, if that is what `authorization` holds.
fn bearer(authorization: Option<&str>) -> Option<&str> {
    authorization
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
}

/// Any failure is 401 with no detail, so that forged tokens learn nothing.
pub fn authenticate(
    authorization: Option<&str>,
    secrets: &impl Secrets,
    now: SystemTime,
) -> Result<Caller, ApiError> {
    let token = bearer(authorization).ok_or(ApiError::Unauthorized)?;
    // Buyers first: buying is the hot path, and a buyer's request then never looks the
    // admin token up. A token cannot be both: the admin's is no JWT signed with jwt_secret.
    if let Some((user, claims, expires)) = verify_buyer(token, &secrets.jwt_secret()?, now) {
        // Looked up only for a token jwt_secret signed, so the admin's and forged tokens
        // pay nothing for them. A token valid for longer than the max, stolen, would serve
        // its thief as long: refused, whatever else it says.
        let latest = DateTime::<Utc>::from(now)
            + Duration::seconds(i64::try_from(secrets.jwt_max_lifetime_s()?).unwrap_or(i64::MAX));
        if expires <= latest
            && claims.has_issuer(&secrets.jwt_issuer()?)
            && claims.has_audience(&secrets.jwt_audience()?)
        {
            return Ok(Caller::Buyer(user));
        }
        return Err(ApiError::Unauthorized);
    }
    if is_token(token, &secrets.admin_token()?) {
        return Ok(Caller::Admin);
    }
    Err(ApiError::Unauthorized)
}

/// Compares digests in constant time, so neither the content nor the length of the
/// admin or metrics token leaks through timing. An empty configured token matches nothing.
fn is_token(token: &str, expected: &str) -> bool {
    !expected.is_empty() && bool::from(Sha256::digest(token).ct_eq(&Sha256::digest(expected)))
}

/// HS256 only (the algorithm is fixed by the key type, so `none`, RS256 or HS512 headers
/// fail), a valid signature, a present and unexpired `exp`, `nbf` if present, and a
/// `sub` that is a canonical positive 64-bit integer; `iss`, `aud` and how far ahead `exp`
/// is (returned with the subject) are the caller's to check.
fn verify_buyer(
    token: &str,
    secret: &str,
    now: SystemTime,
) -> Option<(UserId, BuyerClaims, DateTime<Utc>)> {
    if secret.is_empty() {
        return None;
    }
    let key = Hs256Key::new(secret.as_bytes());
    let untrusted = UntrustedToken::new(token).ok()?;
    let token = Hs256
        .validator::<BuyerClaims>(&key)
        .validate(&untrusted)
        .ok()?;
    let now = DateTime::<Utc>::from(now);
    let time = TimeOptions::new(Duration::zero(), move || now);
    let (_, claims) = token.into_parts();
    claims.validate_expiration(&time).ok()?;
    if claims.not_before.is_some() {
        claims.validate_maturity(&time).ok()?;
    }
    let user = parse_id(&claims.custom.sub).map(UserId::from_raw)?;
    Some((user, claims.custom, claims.expiration?))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jwt_compact::{Claims, Header};
    use serde_json::json;
    use std::cell::RefCell;
    use std::time::{Duration as StdDuration, UNIX_EPOCH};

    /// Lets the caller of a route of `access` in, or says why not: `401` for no or an unknown
    /// credential ([`identify`]), `403` for a known caller the route is not for ([`admit`]):
    /// the two steps the router takes.
    pub(crate) fn authorize(
        access: Access,
        authorization: Option<&str>,
        secrets: &impl Secrets,
        now: SystemTime,
    ) -> Result<Granted, ApiError> {
        admit(access, identify(access, authorization, secrets, now)?)
    }

    pub(crate) const SECRET: &str = "test-secret-of-a-decent-length-0123456789";

    pub(crate) fn secrets() -> Known {
        Known {
            admin_token: "admin-token-xyz".into(),
            jwt_secret: SECRET.into(),
            ..Known::default()
        }
    }

    pub(crate) fn now() -> SystemTime {
        UNIX_EPOCH + StdDuration::from_secs(1_800_000_000)
    }

    fn at(offset_secs: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from(now()) + Duration::seconds(offset_secs)
    }

    #[derive(serde::Serialize)]
    struct AnyClaims {
        #[serde(skip_serializing_if = "Option::is_none")]
        sub: Option<String>,
    }

    pub(crate) fn token(
        secret: &str,
        sub: Option<&str>,
        exp: Option<i64>,
        nbf: Option<i64>,
    ) -> String {
        let mut claims = Claims::new(AnyClaims {
            sub: sub.map(str::to_string),
        });
        claims.expiration = exp.map(at);
        claims.not_before = nbf.map(at);
        let key = Hs256Key::new(secret.as_bytes());
        Hs256.token(&Header::empty(), &claims, &key).unwrap()
    }

    /// A token over any `custom` claims (`sub` among them or not), expiring in a minute.
    fn token_with(custom: serde_json::Value) -> String {
        let mut claims = Claims::new(custom);
        claims.expiration = Some(at(60));
        let key = Hs256Key::new(SECRET.as_bytes());
        Hs256.token(&Header::empty(), &claims, &key).unwrap()
    }

    fn auth(token: &str) -> Result<Caller, ApiError> {
        authenticate(Some(&format!("Bearer {token}")), &secrets(), now())
    }

    pub(crate) fn bearer_header(token: &str) -> String {
        format!("Bearer {token}")
    }

    /// [`Known`] that records which values were looked up, in order.
    struct Counting {
        known: Known,
        lookups: RefCell<Vec<&'static str>>,
    }

    impl Counting {
        fn new(known: Known) -> Counting {
            Counting {
                known,
                lookups: RefCell::default(),
            }
        }

        fn look(&self, name: &'static str, value: &str) -> Result<String, ApiError> {
            self.lookups.borrow_mut().push(name);
            Ok(value.to_string())
        }

        fn take(&self) -> Vec<&'static str> {
            self.lookups.take()
        }
    }

    impl Secrets for Counting {
        fn jwt_secret(&self) -> Result<String, ApiError> {
            self.look("jwt_secret", &self.known.jwt_secret)
        }

        fn admin_token(&self) -> Result<String, ApiError> {
            self.look("admin_token", &self.known.admin_token)
        }

        fn service_token(&self, service: Service) -> Result<String, ApiError> {
            let token = self.known.service_token(service)?;
            self.look(service.variable(), &token)
        }

        fn jwt_issuer(&self) -> Result<String, ApiError> {
            self.look("jwt_issuer", &self.known.jwt_issuer)
        }

        fn jwt_audience(&self) -> Result<String, ApiError> {
            self.look("jwt_audience", &self.known.jwt_audience)
        }

        fn jwt_max_lifetime_s(&self) -> Result<u64, ApiError> {
            self.lookups.borrow_mut().push("jwt_max_lifetime_s");
            Ok(self.known.jwt_max_lifetime_s)
        }
    }

    fn b64(text: &str) -> String {
        use base64ct::{Base64UrlUnpadded, Encoding};
        Base64UrlUnpadded::encode_string(text.as_bytes())
    }

    #[test]
    fn a_valid_buyer_token_names_its_subject() {
        let good = token(SECRET, Some("42"), Some(60), None);
        assert_eq!(auth(&good), Ok(Caller::Buyer(UserId::from_raw(42))));
        let max = token(SECRET, Some("18446744073709551615"), Some(60), Some(-5));
        assert_eq!(auth(&max), Ok(Caller::Buyer(UserId::from_raw(u64::MAX))));
    }

    #[test]
    fn the_admin_token_is_admin() {
        assert_eq!(auth("admin-token-xyz"), Ok(Caller::Admin));
        assert_eq!(auth("admin-token-xy"), Err(ApiError::Unauthorized));
        assert_eq!(auth("admin-token-xyzz"), Err(ApiError::Unauthorized));
    }

    #[test]
    fn an_empty_admin_token_admits_nobody() {
        let secrets = Known {
            admin_token: String::new(),
            jwt_secret: SECRET.into(),
            ..Known::default()
        };
        assert_eq!(
            authenticate(Some("Bearer "), &secrets, now()),
            Err(ApiError::Unauthorized)
        );
        assert!(!is_token("", ""));
    }

    #[test]
    fn forged_expired_and_malformed_tokens_are_unauthorized() {
        let forged = token("another-secret", Some("42"), Some(60), None);
        let expired = token(SECRET, Some("42"), Some(-1), None);
        let no_exp = token(SECRET, Some("42"), None, None);
        let not_yet = token(SECRET, Some("42"), Some(600), Some(60));
        let no_sub = token(SECRET, None, Some(60), None);
        let payload = b64(&format!(r#"{{"sub":"42","exp":{}}}"#, at(60).timestamp()));
        let alg_none = format!("{}.{}.", b64(r#"{"alg":"none","typ":"JWT"}"#), payload);
        let signature = token(SECRET, Some("42"), Some(60), None);
        let signature = signature.rsplit('.').next().unwrap();
        let hs512 = format!("{}.{}.{}", b64(r#"{"alg":"HS512"}"#), payload, signature);
        let rs256 = format!("{}.{}.{}", b64(r#"{"alg":"RS256"}"#), payload, signature);
        for bad in [
            forged, expired, no_exp, not_yet, no_sub, alg_none, hs512, rs256,
        ] {
            assert_eq!(auth(&bad), Err(ApiError::Unauthorized), "{bad}");
        }
        for bad in ["", "garbage", "a.b.c", "..."] {
            assert_eq!(auth(bad), Err(ApiError::Unauthorized), "{bad:?}");
        }
    }

    #[test]
    fn a_buyer_token_valid_longer_than_the_max_lifetime_is_unauthorized() {
        let secrets = Known {
            jwt_max_lifetime_s: 3_600,
            ..secrets()
        };
        let within = token(SECRET, Some("42"), Some(3_600), None);
        let beyond = token(SECRET, Some("42"), Some(3_601), None);
        let forever = token(SECRET, Some("42"), Some(100 * 365 * 86_400), None);
        let check = |token: &str| authenticate(Some(&bearer_header(token)), &secrets, now());
        assert_eq!(check(&within), Ok(Caller::Buyer(UserId::from_raw(42))));
        for bad in [beyond, forever] {
            assert_eq!(check(&bad), Err(ApiError::Unauthorized), "{bad}");
        }
    }

    #[test]
    fn subjects_must_be_canonical_positive_integers() {
        for sub in [
            "0",
            "-1",
            "007",
            "1.5",
            "abc",
            "18446744073709551616",
            " 1",
            "",
        ] {
            let token = token(SECRET, Some(sub), Some(60), None);
            assert_eq!(auth(&token), Err(ApiError::Unauthorized), "{sub:?}");
        }
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        let good = token(SECRET, Some("42"), Some(60), None);
        for scheme in ["bearer", "BEARER", "BeArEr"] {
            let header = format!("{scheme} {good}");
            assert_eq!(
                authenticate(Some(&header), &secrets(), now()),
                Ok(Caller::Buyer(UserId::from_raw(42)))
            );
        }
    }

    #[test]
    fn only_bearer_credentials_count() {
        let good = token(SECRET, Some("42"), Some(60), None);
        for header in [
            None,
            Some(good.clone()),
            Some(format!("Basic {good}")),
            Some("Bearer".into()),
        ] {
            assert_eq!(
                authenticate(header.as_deref(), &secrets(), now()),
                Err(ApiError::Unauthorized),
                "{header:?}"
            );
        }
    }

    #[test]
    fn the_metrics_token_opens_metrics_and_is_no_identity() {
        let with_metrics = Known {
            metrics_token: "metrics-token-abc".into(),
            ..secrets()
        };
        let header = |token: &str| Some(bearer_header(token));
        let scrape = |header: Option<String>, secrets: &Known| {
            authorize(
                Access::Service(Service::Metrics),
                header.as_deref(),
                secrets,
                now(),
            )
        };
        let is_metrics = |header: Option<String>| {
            scrape(header, &with_metrics) == Ok(Granted::Service(Service::Metrics))
        };
        assert!(is_metrics(header("metrics-token-abc")));
        assert!(is_metrics(Some("bearer  metrics-token-abc ".into())));
        for not in [
            header("metrics-token-ab"),
            header("metrics-token-abcd"),
            header("admin-token-xyz"),
            header(&token(SECRET, Some("42"), Some(60), None)),
            Some("Basic metrics-token-abc".into()),
            Some("metrics-token-abc".into()),
            None,
        ] {
            assert!(!is_metrics(not.clone()), "{not:?}");
        }
        // Anywhere but /metrics it is unknown: 401, as for any other string.
        assert_eq!(
            authenticate(header("metrics-token-abc").as_deref(), &with_metrics, now()),
            Err(ApiError::Unauthorized)
        );
        // Unset (empty) it matches nothing, not even an empty token.
        let unset = secrets();
        for header in ["Bearer metrics-token-abc", "Bearer "] {
            assert_eq!(
                scrape(Some(header.into()), &unset),
                Err(ApiError::Unauthorized)
            );
        }
    }

    #[test]
    fn issuer_and_audience_are_checked_only_when_set() {
        let with = |issuer: &str, audience: &str| Known {
            jwt_issuer: issuer.into(),
            jwt_audience: audience.into(),
            ..secrets()
        };
        let buyer = Caller::Buyer(UserId::from_raw(42));
        let check = |secrets: &Known, claims: serde_json::Value| {
            authenticate(
                Some(&bearer_header(&token_with(claims.clone()))),
                secrets,
                now(),
            )
        };
        let cases = [
            // (issuer, audience, claims, accepted)
            ("", "", json!({"sub": "42"}), true),
            // Unset, any shape passes as before.
            (
                "",
                "",
                json!({"sub": "42", "iss": 5, "aud": {"x": 1}}),
                true,
            ),
            ("idp", "", json!({"sub": "42", "iss": "idp"}), true),
            (
                "idp",
                "",
                json!({"sub": "42", "iss": "idp", "aud": 7}),
                true,
            ),
            ("idp", "", json!({"sub": "42"}), false),
            ("idp", "", json!({"sub": "42", "iss": "other"}), false),
            ("idp", "", json!({"sub": "42", "iss": "IDP"}), false),
            ("idp", "", json!({"sub": "42", "iss": "idp "}), false),
            ("idp", "", json!({"sub": "42", "iss": ["idp"]}), false),
            ("idp", "", json!({"sub": "42", "iss": null}), false),
            ("", "shop", json!({"sub": "42", "aud": "shop"}), true),
            (
                "",
                "shop",
                json!({"sub": "42", "aud": ["cdn", "shop"]}),
                true,
            ),
            (
                "",
                "shop",
                json!({"sub": "42", "iss": 1, "aud": "shop"}),
                true,
            ),
            ("", "shop", json!({"sub": "42"}), false),
            ("", "shop", json!({"sub": "42", "aud": "shop2"}), false),
            ("", "shop", json!({"sub": "42", "aud": ["cdn"]}), false),
            ("", "shop", json!({"sub": "42", "aud": []}), false),
            ("", "shop", json!({"sub": "42", "aud": [["shop"]]}), false),
            (
                "",
                "shop",
                json!({"sub": "42", "aud": {"shop": true}}),
                false,
            ),
            ("", "shop", json!({"sub": "42", "iss": "shop"}), false),
            (
                "idp",
                "shop",
                json!({"sub": "42", "iss": "idp", "aud": "shop"}),
                true,
            ),
            (
                "idp",
                "shop",
                json!({"sub": "42", "iss": "idp", "aud": ["shop"]}),
                true,
            ),
            ("idp", "shop", json!({"sub": "42", "iss": "idp"}), false),
            ("idp", "shop", json!({"sub": "42", "aud": "shop"}), false),
            (
                "idp",
                "shop",
                json!({"sub": "42", "iss": "shop", "aud": "idp"}),
                false,
            ),
        ];
        for (issuer, audience, claims, accepted) in cases {
            let expected = if accepted {
                Ok(buyer)
            } else {
                Err(ApiError::Unauthorized)
            };
            assert_eq!(
                check(&with(issuer, audience), claims.clone()),
                expected,
                "jwt_issuer {issuer:?}, jwt_audience {audience:?}, claims {claims}"
            );
        }
        // A right iss and aud do not save a bad subject.
        assert_eq!(
            check(
                &with("idp", "shop"),
                json!({"sub": "0", "iss": "idp", "aud": "shop"})
            ),
            Err(ApiError::Unauthorized)
        );
    }

    #[test]
    fn each_request_looks_up_only_what_its_token_needs() {
        let secrets = Counting::new(Known {
            metrics_token: "metrics-token-abc".into(),
            jwt_issuer: "idp".into(),
            jwt_audience: "shop".into(),
            ..secrets()
        });
        let buyer = token_with(json!({"sub": "42", "iss": "idp", "aud": "shop"}));
        let wrong_issuer = token_with(json!({"sub": "42", "iss": "else", "aud": "shop"}));
        let forged = token("another-secret", Some("42"), Some(60), None);
        let cases: [(&str, &[&str]); 4] = [
            (
                &buyer,
                &[
                    "jwt_secret",
                    "jwt_max_lifetime_s",
                    "jwt_issuer",
                    "jwt_audience",
                ],
            ),
            (
                &wrong_issuer,
                &["jwt_secret", "jwt_max_lifetime_s", "jwt_issuer"],
            ),
            ("admin-token-xyz", &["jwt_secret", "admin_token"]),
            (&forged, &["jwt_secret", "admin_token"]),
        ];
        for (token, lookups) in cases {
            let _ = authenticate(Some(&bearer_header(token)), &secrets, now());
            assert_eq!(secrets.take(), lookups, "{token}");
        }
        assert_eq!(
            authenticate(None, &secrets, now()),
            Err(ApiError::Unauthorized)
        );
        assert_eq!(secrets.take(), Vec::<&str>::new());

        let metrics = Access::Service(Service::Metrics);
        let scrape = bearer_header("metrics-token-abc");
        assert_eq!(
            authorize(metrics, Some(&scrape), &secrets, now()),
            Ok(Granted::Service(Service::Metrics))
        );
        assert_eq!(secrets.take(), ["metrics_token"]);
        assert_eq!(
            authorize(metrics, None, &secrets, now()),
            Err(ApiError::Unauthorized)
        );
        assert_eq!(secrets.take(), Vec::<&str>::new());
    }

    #[test]
    fn a_known_caller_the_route_is_not_for_is_forbidden() {
        let admin = bearer_header("admin-token-xyz");
        let buyer = bearer_header(&token(SECRET, Some("42"), Some(60), None));
        let authorize = |access, header: &str| authorize(access, Some(header), &secrets(), now());
        let buyer_42 = Granted::Caller(Caller::Buyer(UserId::from_raw(42)));
        let the_buyer = Ok(buyer_42);
        assert_eq!(authorize(Access::Buyer, &buyer), the_buyer);
        assert_eq!(authorize(Access::Buyer, &admin), Err(ApiError::Forbidden));
        assert_eq!(
            authorize(Access::Admin, &admin),
            Ok(Granted::Caller(Caller::Admin))
        );
        assert_eq!(authorize(Access::Admin, &buyer), Err(ApiError::Forbidden));
        assert_eq!(authorize(Access::Signed, &buyer), the_buyer);
        assert_eq!(buyer_42.buyer(), Ok(UserId::from_raw(42)));
        assert_eq!(Granted::Anyone.caller(), Err(ApiError::Forbidden));
    }
}
