//! The route table. Each route checks its method, then authenticates, then hands over to
//! its handler, which validates its input before touching Redis or MySQL.

use std::time::SystemTime;

use crate::auth::{self, Caller, Secrets};
use crate::error::ApiError;
use crate::http::{parse_id, Reply, Request};
use crate::order_id::OrderId;
use crate::{health, orders, vouchers};

pub fn route(request: &Request) -> Result<Reply, ApiError> {
    let segments: Vec<&str> = match request.path.strip_prefix('/') {
        Some(rest) => rest.split('/').collect(),
        None => return Err(ApiError::NotFound),
    };
    match segments.as_slice() {
        ["health"] => {
            allow(request, "GET")?;
            health::check()
        }
        ["vouchers"] => {
            allow(request, "POST")?;
            authenticate(request)?.require_admin()?;
            vouchers::create(request)
        }
        ["vouchers", id] => {
            allow(request, "GET")?;
            vouchers::get(voucher_id(id)?)
        }
        ["vouchers", id, "orders"] => {
            allow(request, "POST")?;
            let buyer = authenticate(request)?.require_buyer()?;
            orders::purchase(voucher_id(id)?, buyer)
        }
        ["vouchers", id, "sync"] => {
            allow(request, "POST")?;
            authenticate(request)?.require_admin()?;
            vouchers::sync(voucher_id(id)?)
        }
        ["orders", id] => {
            allow(request, "GET")?;
            let caller = authenticate(request)?;
            let order_id = OrderId::parse(id)
                .ok_or_else(|| ApiError::BadRequest(format!("{id:?} is not an order id")))?;
            orders::get(order_id, caller)
        }
        _ => Err(ApiError::NotFound),
    }
}

fn allow(request: &Request, method: &'static str) -> Result<(), ApiError> {
    if request.method == method {
        Ok(())
    } else {
        Err(ApiError::MethodNotAllowed { allow: method })
    }
}

fn authenticate(request: &Request) -> Result<Caller, ApiError> {
    let secrets = Secrets::from_variables()?;
    auth::authenticate(
        request.authorization.as_deref(),
        &secrets,
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
                route(&request("GET", path)).unwrap_err(),
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
        ];
        for (method, path, allow) in cases {
            assert_eq!(
                route(&request(method, path)).unwrap_err(),
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
