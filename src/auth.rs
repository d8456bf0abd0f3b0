//! Who is calling. Identity only ever comes from the `Authorization` header:
//! the admin token, or a buyer's HS256 JWT whose `sub` is the user id.

use std::time::SystemTime;

use chrono::{DateTime, Duration, Utc};
use jwt_compact::alg::{Hs256, Hs256Key};
use jwt_compact::{AlgorithmExt, TimeOptions, UntrustedToken};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use seckill_core::ApiError;
use seckill_core::{parse_id, UserId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Admin,
    Buyer(UserId),
}

impl Caller {
    pub fn require_admin(self) -> Result<(), ApiError> {
        match self {
            Caller::Admin => Ok(()),
            Caller::Buyer(_) => Err(ApiError::Forbidden),
        }
    }

    pub fn require_buyer(self) -> Result<UserId, ApiError> {
        match self {
            Caller::Buyer(user) => Ok(user),
            Caller::Admin => Err(ApiError::Forbidden),
        }
    }
}

/// The two secrets a caller can prove knowledge of, each fetched only when a token needs
/// it: under Spin every variable is a host call, the largest cost of a rejection after
/// Redis itself (BENCHMARKS.md).
pub trait Secrets {
    fn jwt_secret(&self) -> Result<String, ApiError>;
    fn admin_token(&self) -> Result<String, ApiError>;
}

/// The component's `jwt_secret` and `admin_token` variables.
pub struct Variables;

impl Secrets for Variables {
    fn jwt_secret(&self) -> Result<String, ApiError> {
        crate::config::get("jwt_secret")
    }

    fn admin_token(&self) -> Result<String, ApiError> {
        crate::config::get("admin_token")
    }
}

/// Secrets known up front, for tests.
#[cfg(test)]
pub struct Known {
    pub admin_token: String,
    pub jwt_secret: String,
}

#[cfg(test)]
impl Secrets for Known {
    fn jwt_secret(&self) -> Result<String, ApiError> {
        Ok(self.jwt_secret.clone())
    }

    fn admin_token(&self) -> Result<String, ApiError> {
        Ok(self.admin_token.clone())
    }
}

#[derive(Deserialize)]
struct BuyerClaims {
    sub: String,
}

/// Any failure is 401 with no detail, so that forged tokens learn nothing.
pub fn authenticate(
    authorization: Option<&str>,
    secrets: &impl Secrets,
    now: SystemTime,
) -> Result<Caller, ApiError> {
    let token = authorization
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
        .ok_or(ApiError::Unauthorized)?;
    // Buyers first: buying is the hot path, and a buyer's request then never looks the
    // admin token up. A token cannot be both: the admin's is no JWT signed with jwt_secret.
    if let Some(user) = verify_buyer(token, &secrets.jwt_secret()?, now) {
        return Ok(Caller::Buyer(user));
    }
    if is_admin_token(token, &secrets.admin_token()?) {
        return Ok(Caller::Admin);
    }
    Err(ApiError::Unauthorized)
}

/// Compares digests in constant time, so neither the content nor the length of the
/// admin token leaks through timing. An empty configured token matches nothing.
fn is_admin_token(token: &str, admin_token: &str) -> bool {
    !admin_token.is_empty() && bool::from(Sha256::digest(token).ct_eq(&Sha256::digest(admin_token)))
}

/// HS256 only (the algorithm is fixed by the key type, so `none`, RS256 or HS512 headers
/// fail), a valid signature, a present and unexpired `exp`, `nbf` if present, and a
/// `sub` that is a canonical positive 64-bit integer.
fn verify_buyer(token: &str, secret: &str, now: SystemTime) -> Option<UserId> {
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
    let claims = token.claims();
    claims.validate_expiration(&time).ok()?;
    if claims.not_before.is_some() {
        claims.validate_maturity(&time).ok()?;
    }
    parse_id(&claims.custom.sub).map(UserId::from_raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jwt_compact::{Claims, Header};
    use std::time::{Duration as StdDuration, UNIX_EPOCH};

    const SECRET: &str = "test-secret-of-a-decent-length-0123456789";

    fn secrets() -> Known {
        Known {
            admin_token: "admin-token-xyz".into(),
            jwt_secret: SECRET.into(),
        }
    }

    fn now() -> SystemTime {
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

    fn token(secret: &str, sub: Option<&str>, exp: Option<i64>, nbf: Option<i64>) -> String {
        let mut claims = Claims::new(AnyClaims {
            sub: sub.map(str::to_string),
        });
        claims.expiration = exp.map(at);
        claims.not_before = nbf.map(at);
        let key = Hs256Key::new(secret.as_bytes());
        Hs256.token(&Header::empty(), &claims, &key).unwrap()
    }

    fn auth(token: &str) -> Result<Caller, ApiError> {
        authenticate(Some(&format!("Bearer {token}")), &secrets(), now())
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
        };
        assert_eq!(
            authenticate(Some("Bearer "), &secrets, now()),
            Err(ApiError::Unauthorized)
        );
        assert!(!is_admin_token("", ""));
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
    fn roles_guard_routes() {
        assert_eq!(Caller::Admin.require_admin(), Ok(()));
        assert_eq!(
            Caller::Buyer(UserId::from_raw(1)).require_admin(),
            Err(ApiError::Forbidden)
        );
        assert_eq!(
            Caller::Buyer(UserId::from_raw(1)).require_buyer(),
            Ok(UserId::from_raw(1))
        );
        assert_eq!(Caller::Admin.require_buyer(), Err(ApiError::Forbidden));
    }
}
