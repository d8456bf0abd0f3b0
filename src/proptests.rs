//! Property tests of everything a client controls before a backend is touched: ids in
//! paths, JSON bodies and their validation, the Authorization header and JWTs, and the
//! router. Arbitrary input must never panic, and each function must agree with a plain
//! statement of its rule (the router with its own table, which its unit tests pin). Bounded (`CASES` per property) so the whole file runs in
//! seconds; `PROPTEST_CASES` raises it for a longer fuzzing run.

use std::future::ready;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};
use futures::executor::block_on;
use jwt_compact::alg::{Hs256, Hs256Key};
use jwt_compact::{AlgorithmExt, Claims, Header};
use proptest::prelude::*;
use serde::Serialize;

use crate::auth::{authenticate, Caller, Known};
use crate::cors::Cors;
use crate::handlers::vouchers::{NewVoucher, MAX_DESCRIPTION_CHARS, MAX_STOCK, MAX_TITLE_CHARS};
use crate::http::{json_body, Request};
use crate::router::{endpoint, route};
use seckill_core::ApiError;
use seckill_core::OrderId;
use seckill_core::{parse_id, UserId};

const CASES: u32 = 2000;
const JWT_SECRET: &str = "proptest-jwt-secret-0123456789abcdef";
const ADMIN_TOKEN: &str = "proptest-admin-token";

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CASES);
    ProptestConfig {
        cases,
        // A failure prints its minimal case; nothing is written into src/.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn secrets() -> Known {
    Known {
        admin_token: ADMIN_TOKEN.into(),
        jwt_secret: JWT_SECRET.into(),
        ..Known::default()
    }
}

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

#[derive(Serialize)]
struct Sub {
    sub: String,
}

/// A valid buyer token for `user`, expiring a minute after `now()`.
fn token_for(user: u64) -> String {
    let mut claims = Claims::new(Sub {
        sub: user.to_string(),
    });
    claims.expiration = Some(DateTime::<Utc>::from(now()) + chrono::Duration::seconds(60));
    let key = Hs256Key::new(JWT_SECRET.as_bytes());
    Hs256.token(&Header::empty(), &claims, &key).unwrap()
}

fn auth(header: &str) -> Result<Caller, ApiError> {
    authenticate(Some(header), &secrets(), now())
}

/// Strings that look like ids more often than arbitrary text does.
fn id_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{0,22}",
        "[-+0 ]?[0-9]{1,21}[ .e]?[0-9]?",
        any::<u64>().prop_map(|n| n.to_string()),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn parse_id_accepts_exactly_the_canonical_positive_decimals(text in id_like()) {
        let canonical = text
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0 && n.to_string() == text);
        prop_assert_eq!(parse_id(&text), canonical);
    }

    #[test]
    fn every_positive_u64_round_trips(n in 1..=u64::MAX) {
        prop_assert_eq!(parse_id(&n.to_string()), Some(n));
    }

    #[test]
    fn order_ids_are_canonical_63_bit_ids(text in id_like()) {
        let expected = parse_id(&text).filter(|n| *n <= i64::MAX as u64);
        let parsed = OrderId::parse(&text);
        prop_assert_eq!(parsed.map(OrderId::raw), expected);
        if let Some(id) = parsed {
            prop_assert_eq!(id.to_string(), text);
        }
    }

    #[test]
    fn arbitrary_bodies_never_panic_and_what_validates_is_within_bounds(
        body in prop_oneof![
            any::<Vec<u8>>(),
            any::<String>().prop_map(String::into_bytes),
            // JSON objects with the right keys and arbitrary JSON values.
            proptest::collection::btree_map(
                prop_oneof![
                    Just("title".to_string()),
                    Just("description".to_string()),
                    Just("stock".to_string()),
                    Just("begin_time".to_string()),
                    Just("end_time".to_string()),
                    "[a-z_]{1,12}",
                ],
                json_value(),
                0..7,
            )
            .prop_map(|map| serde_json::to_vec(&map).unwrap()),
        ],
        content_type in prop_oneof![
            Just(Some("application/json".to_string())),
            Just(Some("Application/JSON; charset=utf-8".to_string())),
            any::<Option<String>>(),
        ],
    ) {
        let request = Request {
            method: "POST".into(),
            path: "/vouchers".into(),
            content_type,
            body,
            ..Request::default()
        };
        let Ok(voucher) = json_body::<NewVoucher>(&request) else {
            return Ok(());
        };
        if let Ok(row) = voucher.validate() {
            prop_assert!(!row.title.trim().is_empty());
            prop_assert!(row.title.chars().count() <= MAX_TITLE_CHARS);
            prop_assert!(row.description.chars().count() <= MAX_DESCRIPTION_CHARS);
            prop_assert!((1..=MAX_STOCK as u64).contains(&row.stock));
            prop_assert!(row.begin.timestamp() >= 0 && row.end > row.begin);
            prop_assert_eq!(row.begin.timestamp_subsec_nanos(), 0);
            prop_assert_eq!(row.end.timestamp_subsec_nanos(), 0);
        }
    }

    #[test]
    fn well_formed_vouchers_validate_exactly_when_every_rule_holds(
        title in prop_oneof![any::<String>(), "[ \t\n]{0,3}", "\\PC{120,135}"],
        description in proptest::option::of(prop_oneof![any::<String>(), "x{1020,1030}"]),
        stock in prop_oneof![-2..=2i64, MAX_STOCK - 1..=MAX_STOCK + 1, any::<i64>()],
        begin in rfc3339(),
        end in rfc3339(),
    ) {
        let body = serde_json::json!({
            "title": title,
            "description": description,
            "stock": stock,
            "begin_time": begin.0,
            "end_time": end.0,
        });
        let request = Request {
            content_type: Some("application/json".into()),
            body: body.to_string().into_bytes(),
            ..Request::default()
        };
        let voucher = json_body::<NewVoucher>(&request).expect("a well-formed body parses");
        let expected = !title.trim().is_empty()
            && title.chars().count() <= MAX_TITLE_CHARS
            && description.as_deref().unwrap_or("").chars().count() <= MAX_DESCRIPTION_CHARS
            && (1..=MAX_STOCK).contains(&stock)
            && begin.1 >= 0
            && end.1 >= 0
            && end.1 > begin.1;
        match voucher.validate() {
            Ok(row) => {
                prop_assert!(expected, "validated: {:?}", row);
                prop_assert_eq!((row.begin.timestamp(), row.end.timestamp()), (begin.1, end.1));
            }
            Err(error) => prop_assert!(!expected && error.code() == "bad_request", "{:?}", error),
        }
    }

    #[test]
    fn arbitrary_authorization_headers_are_admin_only_by_the_token(
        header in prop_oneof![
            any::<String>(),
            any::<String>().prop_map(|s| format!("Bearer {s}")),
            "(Bearer|bearer|BEARER|Basic)?[ \t]{0,3}proptest-admin-toke[mno]?[ \t]{0,3}",
            "[A-Za-z0-9_-]{0,40}\\.[A-Za-z0-9_-]{0,60}\\.[A-Za-z0-9_-]{0,43}"
                .prop_map(|s| format!("Bearer {s}")),
        ],
    ) {
        // The scheme is case-insensitive (RFC 7235); one space separates it from the token.
        let is_admin = header.split_once(' ').is_some_and(|(scheme, token)| {
            scheme.eq_ignore_ascii_case("bearer") && token.trim() == ADMIN_TOKEN
        });
        match auth(&header) {
            Ok(Caller::Admin) => prop_assert!(is_admin, "{:?} is admin", header),
            Ok(Caller::Buyer(user)) => prop_assert!(false, "{:?} is buyer {}", header, user),
            Err(error) => {
                prop_assert!(!is_admin);
                prop_assert_eq!(error, ApiError::Unauthorized);
            }
        }
    }

    #[test]
    fn a_valid_token_with_any_byte_changed_is_unauthorized(
        user in 1..=u64::MAX,
        position in any::<prop::sample::Index>(),
        replacement in 0x21u8..0x7f,
    ) {
        let token = token_for(user);
        prop_assert_eq!(auth(&format!("Bearer {token}")), Ok(Caller::Buyer(UserId::from_raw(user))));
        let mut bytes = token.into_bytes();
        let at = position.index(bytes.len());
        prop_assume!(bytes[at] != replacement);
        bytes[at] = replacement;
        let mutated = String::from_utf8(bytes).unwrap();
        prop_assert_eq!(auth(&format!("Bearer {mutated}")), Err(ApiError::Unauthorized), "{}", mutated);
    }

    #[test]
    fn a_valid_token_cut_short_or_extended_is_unauthorized(
        user in 1..=u64::MAX,
        keep in any::<prop::sample::Index>(),
        extra in "[A-Za-z0-9_.-]{1,8}",
    ) {
        let token = token_for(user);
        let cut = &token[..keep.index(token.len())];
        prop_assert_eq!(auth(&format!("Bearer {cut}")), Err(ApiError::Unauthorized));
        prop_assert_eq!(auth(&format!("Bearer {token}{extra}")), Err(ApiError::Unauthorized));
    }

    #[test]
    fn routing_refuses_unknown_paths_and_wrong_methods_before_any_backend(
        method in prop_oneof![
            Just("GET".to_string()),
            Just("POST".to_string()),
            "(PUT|DELETE|PATCH|HEAD|OPTIONS|TRACE|CONNECT|get|post)",
            "[A-Za-z]{1,10}",
            any::<String>(),
        ],
        path in prop_oneof![
            Just("/health".to_string()),
            Just("/metrics".to_string()),
            Just("/vouchers".to_string()),
            id_like().prop_map(|id| format!("/vouchers/{id}")),
            id_like().prop_map(|id| format!("/vouchers/{id}/orders")),
            id_like().prop_map(|id| format!("/vouchers/{id}/orders/mine")),
            id_like().prop_map(|id| format!("/vouchers/{id}/sync")),
            id_like().prop_map(|id| format!("/vouchers/{id}/end")),
            id_like().prop_map(|id| format!("/vouchers/{id}/expire")),
            Just("/events".to_string()),
            id_like().prop_map(|id| format!("/orders/{id}")),
            id_like().prop_map(|id| format!("/orders/{id}/pay")),
            id_like().prop_map(|id| format!("/orders/{id}/cancel")),
            "/[a-z%./]{0,30}",
            any::<String>(),
        ],
        body in any::<Vec<u8>>(),
        authorization in any::<Option<String>>(),
    ) {
        let request = Request {
            method: method.clone(),
            path: path.clone(),
            query: String::new(),
            authorization,
            content_type: Some("application/json".into()),
            body,
        };
        match endpoint(&path, &method) {
            // A path of no route is not found, whatever the method.
            Err(error) => {
                prop_assert_eq!(&error, &ApiError::NotFound);
                prop_assert_eq!(block_on(route(request, ready(Ok(Vec::new())), &Cors::default(), &Known::default())).unwrap_err().api(), error);
            }
            Ok(found) => {
                // The path is an instance of its route's template: `{id}` stands for one
                // segment, every other segment is spelt out.
                let template: Vec<&str> = found.route.split('/').collect();
                let segments: Vec<&str> = path.split('/').collect();
                prop_assert_eq!(template.len(), segments.len());
                for (part, segment) in template.iter().zip(&segments) {
                    prop_assert!(*part == "{id}" || part == segment, "{} in {}", segment, found.route);
                }
                prop_assert!(found.method.split(", ").all(|m| ["GET", "POST", "PATCH", "DELETE"].contains(&m)));
                // A wrong method is refused with the right ones, before any backend.
                if !found.allows(&method) {
                    prop_assert_eq!(
                        block_on(route(request, ready(Ok(Vec::new())), &Cors::default(), &Known::default())).unwrap_err().api(),
                        ApiError::MethodNotAllowed { allow: found.method }
                    );
                }
            }
        }
    }
}

/// Arbitrary JSON values, nested a little.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
        rfc3339().prop_map(|(text, _)| serde_json::Value::from(text)),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

/// An RFC 3339 time with a random zone offset (whole minutes) and fraction, between 1900 and 9000, and
/// the whole UTC second it stands for (floored, as validation keeps it).
fn rfc3339() -> impl Strategy<Value = (String, i64)> {
    (
        -2_208_988_800i64..221_845_392_000,
        0u32..1_000_000_000,
        -1439i32..1440,
    )
        .prop_map(|(seconds, nanos, offset_minutes)| {
            let utc = DateTime::from_timestamp(seconds, nanos).unwrap();
            let zone = FixedOffset::east_opt(offset_minutes * 60).unwrap();
            let text = utc
                .with_timezone(&zone)
                .to_rfc3339_opts(SecondsFormat::AutoSi, false);
            (text, seconds)
        })
}
