//! The route table. Each route names its methods, who may call it ([`Access`]) and its
//! handler: a request is matched to its route, its method checked (a CORS preflight is
//! answered here, from the table alone), its caller let in by the route's access, then
//! handed to the handler, which validates its input before touching Redis or MySQL.

use std::future::Future;
use std::time::SystemTime;

use futures::future::LocalBoxFuture;

use crate::auth::{self, Access, Caller, Granted, Secrets, Service};
use crate::cors::Cors;
use crate::error::Failure;
use crate::handlers::{events, health, metrics, orders, vouchers};
use crate::http::{Answer, Request};
use crate::request_log;
use crate::storage::connections::Connections;
use seckill_core::ApiError;
use seckill_core::{OrderId, SaleId};

/// What a route does once its method is right and its caller let in, on the request's
/// connections (opened as the work first asks for each).
type Work<'a> = Box<
    dyn FnOnce(&'a Request, Granted, Connections) -> LocalBoxFuture<'a, Result<Answer, Failure>>
        + 'a,
>;

/// A route's work, and whether it takes a body: the others' is never read.
struct Handler<'a> {
    takes_body: bool,
    work: Work<'a>,
}

fn handler<'a, Work>(
    work: impl FnOnce(&'a Request, Granted, Connections) -> Work + 'a,
) -> Handler<'a>
where
    Work: Future<Output = Result<Answer, Failure>> + 'a,
{
    Handler {
        takes_body: false,
        work: Box::new(move |request, granted, connections| {
            Box::pin(work(request, granted, connections))
        }),
    }
}

impl Handler<'_> {
    /// The same work, of a route that takes a body.
    fn with_body(self) -> Self {
        Handler {
            takes_body: true,
            ..self
        }
    }
}

/// A route: its methods (as `Allow` lists them), its template (for the request log), and
/// for the method asked, what its success is called there, who may call it and its
/// handler.
pub struct Endpoint<'a> {
    pub method: &'static str,
    pub route: &'static str,
    pub access: Access,
    success: &'static str,
    handler: Handler<'a>,
}

impl Endpoint<'_> {
    pub fn allows(&self, method: &str) -> bool {
        self.method.split(", ").any(|allowed| allowed == method)
    }
}

/// Routes the request whose head is `request` and lets its caller in, from the head
/// alone; only then, on a route that takes one, awaits `body` (which reads it), and runs
/// the handler.
pub async fn route(
    mut request: Request,
    body: impl Future<Output = Result<Vec<u8>, ApiError>>,
    cors: &Cors,
    secrets: &impl Secrets,
) -> Result<Answer, Failure> {
    let (granted, takes_body) = match admit(&request, cors, secrets)? {
        Admitted::Preflight(answer) => return Ok(answer),
        Admitted::Caller {
            granted,
            takes_body,
        } => (granted, takes_body),
    };
    if takes_body {
        request.body = body.await?;
    }
    // The same endpoint again, now that the request holds its body.
    let endpoint = endpoint(&request.path, &request.method)?;
    (endpoint.handler.work)(&request, granted, Connections::default()).await
}

/// What the head alone decides, past the refusals: a preflight's answer, or the caller
/// let in (and whether the route takes a body).
enum Admitted {
    Preflight(Answer),
    Caller { granted: Granted, takes_body: bool },
}

/// Matches the request's route and lets its caller in, from its head; refused, in this
/// order: no such route, a method the route does not take, a caller it does not let in.
fn admit(request: &Request, cors: &Cors, secrets: &impl Secrets) -> Result<Admitted, Failure> {
    let endpoint = endpoint(&request.path, &request.method)?;
    request_log::note_route(endpoint.route);
    if cors.is_preflight() {
        request_log::note_success("preflight");
        return Ok(Admitted::Preflight(cors.preflight(endpoint.method)));
    }
    if !endpoint.allows(&request.method) {
        return Err(ApiError::MethodNotAllowed {
            allow: endpoint.method,
        }
        .into());
    }
    request_log::note_success(endpoint.success);
    let who = auth::identify(
        endpoint.access,
        request.authorization.as_deref(),
        secrets,
        SystemTime::now(),
    )?;
    // Logged even when the route refuses her.
    if let Granted::Caller(Caller::Buyer(user)) = who {
        request_log::note_user(user);
    }
    let granted = auth::admit(endpoint.access, who)?;
    Ok(Admitted::Caller {
        granted,
        takes_body: endpoint.handler.takes_body,
    })
}

/// The route table: the endpoint of `path` (and, for a route of two methods, of
/// `method`), before any handler runs.
pub fn endpoint<'a>(path: &'a str, method: &str) -> Result<Endpoint<'a>, ApiError> {
    use Access::{Admin, Buyer, Public, Signed};
    let segments: Vec<&str> = match path.strip_prefix('/') {
        Some(rest) => rest.split('/').collect(),
        None => return Err(ApiError::NotFound),
    };
    #[rustfmt::skip]
    let (method, route, success, access, handler): (_, _, _, _, Handler) = match *segments.as_slice() {
        ["health"] => ("GET", "/health", "ok", Public,
            handler(|request, _, connections| health::check(request, connections))),
        ["health", "live"] => ("GET", "/health/live", "ok", Public,
            handler(|_, _, _| async { health::live() })),
        ["metrics"] => ("GET", "/metrics", "ok", Access::Service(Service::Metrics),
            handler(|_, _, connections| metrics::report(connections))),
        ["vouchers"] if method == "GET" => ("GET, POST", "/vouchers", "found", Admin,
            handler(|request, _, connections| async move { vouchers::list(request, connections).await })),
        ["vouchers"] => ("GET, POST", "/vouchers", "created", Admin,
            handler(|request, _, connections| vouchers::create(request, connections)).with_body()),
        ["vouchers", id] if method == "PATCH" => ("GET, PATCH", "/vouchers/{id}", "changed", Admin,
            handler(move |request, _, connections| async move { vouchers::change(sale_id(id)?, request, connections).await }).with_body()),
        ["vouchers", id] => ("GET, PATCH", "/vouchers/{id}", "found", Public,
            handler(move |request, _, connections| async move { vouchers::get(sale_id(id)?, request, connections).await })),
        ["vouchers", id, "orders"] if method == "GET" => ("GET, POST", "/vouchers/{id}/orders", "found", Admin,
            handler(move |request, _, connections| async move { orders::of_voucher(sale_id(id)?, request, connections).await })),
        ["vouchers", id, "orders.csv"] => ("GET", "/vouchers/{id}/orders.csv", "found", Admin,
            handler(move |request, _, connections| async move { orders::csv(sale_id(id)?, request, connections).await })),
        ["vouchers", id, "orders"] => ("GET, POST", "/vouchers/{id}/orders", "ordered", Buyer,
            handler(move |request, granted, connections| async move { orders::purchase(sale_id(id)?, granted.buyer()?, orders::units_asked(request)?, connections).await }).with_body()),
        ["vouchers", id, "line"] if method == "GET" => ("GET, POST, DELETE", "/vouchers/{id}/line", "found", Buyer,
            handler(move |_, granted, connections| async move { orders::line(sale_id(id)?, granted.buyer()?, connections).await })),
        ["vouchers", id, "line"] if method == "DELETE" => ("GET, POST, DELETE", "/vouchers/{id}/line", "left", Buyer,
            handler(move |_, granted, connections| async move { orders::leave_line(sale_id(id)?, granted.buyer()?, connections).await })),
        ["vouchers", id, "line"] => ("GET, POST, DELETE", "/vouchers/{id}/line", "joined", Buyer,
            handler(move |request, granted, connections| async move { orders::join_line(sale_id(id)?, granted.buyer()?, orders::units_asked(request)?, connections).await }).with_body()),
        ["vouchers", id, "orders", "mine"] => ("GET", "/vouchers/{id}/orders/mine", "found", Buyer,
            handler(move |_, granted, connections| async move { orders::mine(sale_id(id)?, granted.buyer()?, connections).await })),
        ["vouchers", id, "sync"] => ("POST", "/vouchers/{id}/sync", "synced", Admin,
            handler(move |_, _, connections| async move { vouchers::sync(sale_id(id)?, connections).await })),
        ["vouchers", id, "end"] => ("POST", "/vouchers/{id}/end", "ended", Admin,
            handler(move |_, _, connections| async move { vouchers::end(sale_id(id)?, connections).await })),
        ["vouchers", id, "expire"] => ("POST", "/vouchers/{id}/expire", "expired", Admin,
            handler(move |_, _, connections| async move { vouchers::expire(sale_id(id)?, connections).await })),
        ["events"] => ("GET", "/events", "ok", Access::Service(Service::Feed),
            handler(|request, _, connections| events::page(request, connections))),
        ["orders", id, "pay"] => ("POST", "/orders/{id}/pay", "paid", Access::Service(Service::Payments),
            handler(move |_, _, connections| async move { orders::pay(order_id(id)?, connections).await })),
        ["orders", id, "cancel"] => ("POST", "/orders/{id}/cancel", "cancelled", Signed,
            handler(move |_, granted, connections| async move { orders::cancel(order_id(id)?, granted.caller()?, connections).await })),
        ["orders", id] => ("GET", "/orders/{id}", "found", Signed,
            handler(move |_, granted, connections| async move { orders::get(order_id(id)?, granted.caller()?, connections).await })),
        _ => return Err(ApiError::NotFound),
    };
    Ok(Endpoint {
        method,
        route,
        access,
        success,
        handler,
    })
}

fn order_id(segment: &str) -> Result<OrderId, ApiError> {
    OrderId::parse(segment)
        .ok_or_else(|| ApiError::BadRequest(format!("{segment:?} is not an order id")))
}

/// A voucher id in a path: a sale, the voucher a storefront names (a later bucket's id is
/// no voucher of its own, and the routes find none under it).
fn sale_id(segment: &str) -> Result<SaleId, ApiError> {
    let id = SaleId::parse(segment)
        .ok_or_else(|| ApiError::BadRequest(format!("{segment:?} is not a voucher id")))?;
    request_log::note_voucher(id);
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::tests::{authorize, bearer_header, now, secrets, token, SECRET};
    use crate::auth::Known;
    use futures::executor::block_on;
    use std::collections::BTreeSet;
    use std::time::UNIX_EPOCH;

    fn request(method: &str, path: &str) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            ..Request::default()
        }
    }

    /// A body that must not be read.
    async fn unread() -> Result<Vec<u8>, ApiError> {
        panic!("the body was read")
    }

    #[test]
    fn a_body_is_read_only_on_a_route_that_takes_one_for_a_caller_it_lets_in() {
        let route_with =
            |method, path, authorization: Option<String>, body: LocalBoxFuture<'static, _>| {
                let request = Request {
                    authorization,
                    ..request(method, path)
                };
                block_on(route(request, body, &Cors::default(), &secrets()))
                    .unwrap_err()
                    .api()
            };
        // `route` reads the real clock: a token valid for a minute from now, within the
        // longest lifetime a buyer token may have.
        let seconds = |at: SystemTime| at.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        let since_test_now = seconds(SystemTime::now()) - seconds(now());
        let buyer = Some(bearer_header(&token(
            SECRET,
            Some("42"),
            Some(since_test_now + 60),
            None,
        )));
        // Refused from the head, unread: no caller, the wrong caller, a wrong method.
        for (method, path, authorization, refused) in [
            ("POST", "/vouchers/1/orders", None, ApiError::Unauthorized),
            ("POST", "/vouchers", buyer.clone(), ApiError::Forbidden),
            (
                "POST",
                "/health/live",
                None,
                ApiError::MethodNotAllowed { allow: "GET" },
            ),
        ] {
            let body = Box::pin(unread());
            assert_eq!(
                route_with(method, path, authorization, body),
                refused,
                "{path}"
            );
        }
        // Let in, the route waits for the body, and a body that does not come is its 408.
        let late = Box::pin(async { Err(ApiError::RequestTimeout) });
        assert_eq!(
            route_with("POST", "/vouchers/1/orders", buyer, late),
            ApiError::RequestTimeout
        );
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
                block_on(route(
                    request("GET", path),
                    unread(),
                    &Cors::default(),
                    &Known::default()
                ))
                .unwrap_err()
                .api(),
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
            ("DELETE", "/vouchers/1", "GET, PATCH"),
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
                block_on(route(
                    request(method, path),
                    unread(),
                    &Cors::default(),
                    &Known::default()
                ))
                .unwrap_err()
                .api(),
                ApiError::MethodNotAllowed { allow },
                "{method} {path}"
            );
        }
    }

    #[test]
    fn voucher_ids_must_be_positive_63_bit_decimals() {
        assert_eq!(
            sale_id("9223372036854775807"),
            Ok(SaleId::from_raw(i64::MAX as u64))
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
            assert_eq!(sale_id(bad).unwrap_err().code(), "bad_request", "{bad:?}");
        }
    }

    /// The access policy, reviewed in one place: every route (each method of it) and what
    /// each kind of credential gets there.
    #[test]
    fn who_may_call_each_route() {
        let known = Known {
            metrics_token: "metrics-token".into(),
            payments_token: "payments-token".into(),
            feed_token: "feed-token".into(),
            ..secrets()
        };
        // In the order of each row below.
        let credentials = [
            None,
            Some(bearer_header("a-token-nobody-issued")),
            Some(bearer_header(&token(SECRET, Some("42"), Some(-60), None))),
            Some(bearer_header(&token(SECRET, Some("42"), Some(60), None))),
            Some(bearer_header("admin-token-xyz")),
            Some(bearer_header("metrics-token")),
            Some(bearer_header("payments-token")),
            Some(bearer_header("feed-token")),
        ];
        const PUBLIC: &str = "ok  ok  ok  ok  ok  ok  ok  ok";
        const ADMIN: &str = "401 401 401 403 ok  401 401 401";
        const BUYER: &str = "401 401 401 ok  403 401 401 401";
        const SIGNED: &str = "401 401 401 ok  ok  401 401 401";
        //  method  path                       none bad expired buyer admin metrics payments feed
        let policy = [
            ("GET", "/health", PUBLIC),
            ("GET", "/health/live", PUBLIC),
            ("GET", "/metrics", "401 401 401 403 ok  ok  401 401"),
            ("GET", "/vouchers", ADMIN),
            ("POST", "/vouchers", ADMIN),
            ("GET", "/vouchers/1", PUBLIC),
            ("PATCH", "/vouchers/1", ADMIN),
            ("GET", "/vouchers/1/orders.csv", ADMIN),
            ("GET", "/vouchers/1/orders", ADMIN),
            ("POST", "/vouchers/1/orders", BUYER),
            ("GET", "/vouchers/1/orders/mine", BUYER),
            ("POST", "/vouchers/1/sync", ADMIN),
            ("POST", "/vouchers/1/end", ADMIN),
            ("POST", "/vouchers/1/expire", ADMIN),
            ("GET", "/events", "401 401 401 403 ok  401 401 ok"),
            ("POST", "/orders/1/pay", "401 401 401 403 ok  401 ok  401"),
            ("POST", "/orders/1/cancel", SIGNED),
            ("GET", "/orders/1", SIGNED),
        ];
        let mut routes = BTreeSet::new();
        for (method, path, expected) in policy {
            let endpoint = endpoint(path, method).unwrap();
            assert!(endpoint.allows(method), "{method} {path}");
            routes.insert((method, endpoint.route));
            let answers: Vec<&str> = credentials
                .iter()
                .map(
                    |header| match authorize(endpoint.access, header.as_deref(), &known, now()) {
                        Ok(_) => "ok",
                        Err(ApiError::Unauthorized) => "401",
                        Err(ApiError::Forbidden) => "403",
                        Err(other) => panic!("{method} {path}: {other:?}"),
                    },
                )
                .collect();
            let expected: Vec<&str> = expected.split_whitespace().collect();
            assert_eq!(answers, expected, "{method} {path}");
        }
        // Every method of every route is in the policy: the table has 15 routes, three of
        // them with two methods (a route added to the table must be added here).
        let methods: usize = routes
            .iter()
            .map(|(_, route)| *route)
            .collect::<BTreeSet<_>>()
            .len();
        assert_eq!((methods, routes.len()), (15, 18));
    }
}
