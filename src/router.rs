//! The route table. Each route checks its method (a CORS preflight is answered here, from
//! the table alone), then authenticates, then hands over to its handler, which validates
//! its input before touching Redis or MySQL.

use std::future::Future;
use std::time::SystemTime;

use futures::future::LocalBoxFuture;

use crate::auth::{self, Caller, Variables};
use crate::cors::Cors;
use crate::http::{Answer, Request};
use crate::{events, health, metrics, orders, request_log, vouchers};
use seckill_core::ApiError;
use seckill_core::{OrderId, VoucherId};

/// What a route does once its method is right.
type Handler<'a> =
    Box<dyn FnOnce(&'a Request) -> LocalBoxFuture<'a, Result<Answer, ApiError>> + 'a>;

fn handler<'a, Work>(work: impl FnOnce(&'a Request) -> Work + 'a) -> Handler<'a>
where
    Work: Future<Output = Result<Answer, ApiError>> + 'a,
{
    Box::new(move |request| Box::pin(work(request)))
}

/// A route: its methods (as `Allow` lists them), its template (for the request log), and
/// for the method asked, what its success is called there and its handler.
pub struct Endpoint<'a> {
    pub method: &'static str,
    pub route: &'static str,
    success: &'static str,
    handler: Handler<'a>,
}

impl Endpoint<'_> {
    pub fn allows(&self, method: &str) -> bool {
        self.method.split(", ").any(|allowed| allowed == method)
    }
}

pub async fn route(request: &Request, cors: &Cors) -> Result<Answer, ApiError> {
    let endpoint = endpoint(&request.path, &request.method)?;
    request_log::note_route(endpoint.route);
    if cors.is_preflight() {
        request_log::note_success("preflight");
        return Ok(cors.preflight(endpoint.method));
    }
    if !endpoint.allows(&request.method) {
        return Err(ApiError::MethodNotAllowed {
            allow: endpoint.method,
        });
    }
    request_log::note_success(endpoint.success);
    (endpoint.handler)(request).await
}

/// The route table: the endpoint of `path` (and, for a route of two methods, of
/// `method`), before any handler runs.
pub fn endpoint<'a>(path: &'a str, method: &str) -> Result<Endpoint<'a>, ApiError> {
    let segments: Vec<&str> = match path.strip_prefix('/') {
        Some(rest) => rest.split('/').collect(),
        None => return Err(ApiError::NotFound),
    };
    let (method, route, success, handler): (_, _, _, Handler) = match *segments.as_slice() {
        ["health"] => ("GET", "/health", "ok", handler(|_| health::check())),
        ["health", "live"] => (
            "GET",
            "/health/live",
            "ok",
            handler(|_| async { health::live() }),
        ),
        ["metrics"] => (
            "GET",
            "/metrics",
            "ok",
            handler(move |request| async move {
                // The metrics token (a scraper's, which may do nothing else), else the admin.
                if !auth::is_metrics_token(request.authorization.as_deref(), &Variables)? {
                    authenticate(request)?.require_admin()?;
                }
                metrics::report().await
            }),
        ),
        ["vouchers"] if method == "GET" => (
            "GET, POST",
            "/vouchers",
            "found",
            handler(move |request| async move {
                authenticate(request)?.require_admin()?;
                vouchers::list(request)
            }),
        ),
        ["vouchers"] => (
            "GET, POST",
            "/vouchers",
            "created",
            handler(move |request| async move {
                authenticate(request)?.require_admin()?;
                vouchers::create(request).await
            }),
        ),
        ["vouchers", id] => (
            "GET",
            "/vouchers/{id}",
            "found",
            handler(move |_| async move { vouchers::get(voucher_id(id)?).await }),
        ),
        ["vouchers", id, "orders"] if method == "GET" => (
            "GET, POST",
            "/vouchers/{id}/orders",
            "found",
            handler(move |request| async move {
                authenticate(request)?.require_admin()?;
                orders::of_voucher(voucher_id(id)?, request)
            }),
        ),
        ["vouchers", id, "orders"] => (
            "GET, POST",
            "/vouchers/{id}/orders",
            "ordered",
            handler(move |request| async move {
                let buyer = authenticate(request)?.require_buyer()?;
                orders::purchase(voucher_id(id)?, buyer).await
            }),
        ),
        ["vouchers", id, "orders", "mine"] => (
            "GET",
            "/vouchers/{id}/orders/mine",
            "found",
            handler(move |request| async move {
                let buyer = authenticate(request)?.require_buyer()?;
                orders::mine(voucher_id(id)?, buyer).await
            }),
        ),
        ["vouchers", id, "sync"] => (
            "POST",
            "/vouchers/{id}/sync",
            "synced",
            handler(move |request| async move {
                authenticate(request)?.require_admin()?;
                vouchers::sync(voucher_id(id)?).await
            }),
        ),
        ["vouchers", id, "end"] => (
            "POST",
            "/vouchers/{id}/end",
            "ended",
            handler(move |request| async move {
                authenticate(request)?.require_admin()?;
                vouchers::end(voucher_id(id)?).await
            }),
        ),
        ["vouchers", id, "expire"] => (
            "POST",
            "/vouchers/{id}/expire",
            "expired",
            handler(move |request| async move {
                authenticate(request)?.require_admin()?;
                vouchers::expire(voucher_id(id)?).await
            }),
        ),
        ["events"] => (
            "GET",
            "/events",
            "ok",
            handler(move |request| async move {
                // The feed reader's token (which may do nothing else), else the admin.
                if !auth::is_service_token(request.authorization.as_deref(), "feed_token")? {
                    authenticate(request)?.require_admin()?;
                }
                events::page(request).await
            }),
        ),
        ["orders", id, "pay"] => (
            "POST",
            "/orders/{id}/pay",
            "paid",
            handler(move |request| async move {
                // The payment system's token (which may do nothing else), else the admin.
                if !auth::is_service_token(request.authorization.as_deref(), "payments_token")? {
                    authenticate(request)?.require_admin()?;
                }
                orders::pay(order_id(id)?).await
            }),
        ),
        ["orders", id, "cancel"] => (
            "POST",
            "/orders/{id}/cancel",
            "cancelled",
            handler(move |request| async move {
                let caller = authenticate(request)?;
                orders::cancel(order_id(id)?, caller).await
            }),
        ),
        ["orders", id] => (
            "GET",
            "/orders/{id}",
            "found",
            handler(move |request| async move {
                let caller = authenticate(request)?;
                orders::get(order_id(id)?, caller).await
            }),
        ),
        _ => return Err(ApiError::NotFound),
    };
    Ok(Endpoint {
        method,
        route,
        success,
        handler,
    })
}

fn authenticate(request: &Request) -> Result<Caller, ApiError> {
    let caller = auth::authenticate(
        request.authorization.as_deref(),
        &Variables,
        SystemTime::now(),
    )?;
    if let Caller::Buyer(user) = caller {
        request_log::note_user(user);
    }
    Ok(caller)
}

fn order_id(segment: &str) -> Result<OrderId, ApiError> {
    OrderId::parse(segment)
        .ok_or_else(|| ApiError::BadRequest(format!("{segment:?} is not an order id")))
}

fn voucher_id(segment: &str) -> Result<VoucherId, ApiError> {
    let id = VoucherId::parse(segment)
        .ok_or_else(|| ApiError::BadRequest(format!("{segment:?} is not a voucher id")))?;
    request_log::note_voucher(id);
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

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
                block_on(route(&request("GET", path), &Cors::default())).unwrap_err(),
                ApiError::NotFound,
                "{path:?}"
            );
        }
    }

    #[test]
    fn wrong_methods_are_refused_with_the_allowed_ones() {
        let cases = [
            ("POST", "/health", "GET"),
            ("POST", "/metrics", "GET"),
            ("DELETE", "/vouchers", "GET, POST"),
            ("DELETE", "/vouchers/1", "GET"),
            ("PUT", "/vouchers/1/orders", "GET, POST"),
            ("PUT", "/vouchers/1/sync", "POST"),
            ("GET", "/vouchers/1/end", "POST"),
            ("GET", "/orders/1/pay", "POST"),
            ("GET", "/orders/1/cancel", "POST"),
            ("POST", "/events", "GET"),
            ("POST", "/orders/1", "GET"),
            ("POST", "/vouchers/1/orders/mine", "GET"),
        ];
        for (method, path, allow) in cases {
            assert_eq!(
                block_on(route(&request(method, path), &Cors::default())).unwrap_err(),
                ApiError::MethodNotAllowed { allow },
                "{method} {path}"
            );
        }
    }

    #[test]
    fn voucher_ids_must_be_positive_63_bit_decimals() {
        assert_eq!(
            voucher_id("9223372036854775807"),
            Ok(VoucherId::from_raw(i64::MAX as u64))
        );
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
