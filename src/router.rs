//! The route table. Each route checks its method (a CORS preflight is answered here, from
//! the table alone), then authenticates, then hands over to its handler, which validates
//! its input before touching Redis or MySQL.

use std::time::SystemTime;

use crate::auth::{self, Caller, Variables};
use crate::cors::Cors;
use crate::error::ApiError;
use crate::http::{parse_id, Reply, Request};
use crate::order_id::OrderId;
use crate::{health, orders, vouchers};

/// What a route does once its method is right.
type Handler<'a> = Box<dyn FnOnce(&Request) -> Result<Reply, ApiError> + 'a>;

pub fn route(request: &Request, cors: &Cors) -> Result<Reply, ApiError> {
    let (method, handler) = endpoint(&request.path)?;
    if cors.is_preflight() {
        return Ok(cors.preflight(method));
    }
    if request.method != method {
        return Err(ApiError::MethodNotAllowed { allow: method });
    }
    handler(request)
}

/// The route table: each path's one method and its handler.
fn endpoint(path: &str) -> Result<(&'static str, Handler<'_>), ApiError> {
    let segments: Vec<&str> = match path.strip_prefix('/') {
        Some(rest) => rest.split('/').collect(),
        None => return Err(ApiError::NotFound),
    };
    let endpoint: (&'static str, Handler) = match *segments.as_slice() {
        ["health"] => ("GET", Box::new(|_| health::check())),
        ["vouchers"] => (
            "POST",
            Box::new(|request| {
                authenticate(request)?.require_admin()?;
                vouchers::create(request)
            }),
        ),
        ["vouchers", id] => ("GET", Box::new(move |_| vouchers::get(voucher_id(id)?))),
        ["vouchers", id, "orders"] => (
            "POST",
            Box::new(move |request| {
                let buyer = authenticate(request)?.require_buyer()?;
                orders::purchase(voucher_id(id)?, buyer)
            }),
        ),
        ["vouchers", id, "orders", "mine"] => (
            "GET",
            Box::new(move |request| {
                let buyer = authenticate(request)?.require_buyer()?;
                orders::mine(voucher_id(id)?, buyer)
            }),
        ),
        ["vouchers", id, "sync"] => (
            "POST",
            Box::new(move |request| {
                authenticate(request)?.require_admin()?;
                vouchers::sync(voucher_id(id)?)
            }),
        ),
        ["orders", id] => (
            "GET",
            Box::new(move |request| {
                let caller = authenticate(request)?;
                let order_id = OrderId::parse(id)
                    .ok_or_else(|| ApiError::BadRequest(format!("{id:?} is not an order id")))?;
                orders::get(order_id, caller)
            }),
        ),
        _ => return Err(ApiError::NotFound),
    };
    Ok(endpoint)
}

fn authenticate(request: &Request) -> Result<Caller, ApiError> {
    auth::authenticate(
        request.authorization.as_deref(),
        &Variables,
        SystemTime::now(),
    )
}

fn voucher_id(segment: &str) -> Result<u64, ApiError> {
    parse_id(segment)
        .filter(|id| *id <= i64::MAX as u64)
        .ok_or_else(|| ApiError::BadRequest(format!("{segment:?} is not a voucher id")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            ..Request::default()
        }
    }

    // These never reach a backend or the variables: routing refuses them first.
    #[test]
    fn unknown_paths_are_not_found() {
        for path in [
            "",
            "/",
            "/health/",
            "/vouchers/1/",
            "//vouchers",
            "/vouchers/1/orders/2",
            "/nope",
            "*",
        ] {
            assert_eq!(
                route(&request("GET", path), &Cors::default()).unwrap_err(),
                ApiError::NotFound,
                "{path:?}"
            );
        }
    }

    #[test]
    fn wrong_methods_are_refused_with_the_allowed_one() {
        let cases = [
            ("POST", "/health", "GET"),
            ("GET", "/vouchers", "POST"),
            ("DELETE", "/vouchers/1", "GET"),
            ("GET", "/vouchers/1/orders", "POST"),
            ("PUT", "/vouchers/1/sync", "POST"),
            ("POST", "/orders/1", "GET"),
            ("POST", "/vouchers/1/orders/mine", "GET"),
        ];
        for (method, path, allow) in cases {
            assert_eq!(
                route(&request(method, path), &Cors::default()).unwrap_err(),
                ApiError::MethodNotAllowed { allow },
                "{method} {path}"
            );
        }
    }

    #[test]
    fn voucher_ids_must_be_positive_63_bit_decimals() {
        assert_eq!(voucher_id("9223372036854775807"), Ok(i64::MAX as u64));
        for bad in [
            "0",
            "-1",
            "abc",
            "1.0",
            "%31",
            "9223372036854775808",
            "99999999999999999999",
        ] {
            assert_eq!(
                voucher_id(bad).unwrap_err().code(),
                "bad_request",
                "{bad:?}"
            );
        }
    }
}
