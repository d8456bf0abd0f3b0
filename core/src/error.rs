//! The errors a client can see (each has one status, one code and a message for people),
//! and what the state machines learn when a Redis or MySQL call fails them.

use crate::line::LineFigures;
use crate::order_id::OrderId;
use crate::redis::UnexpectedReply;

/// Why a Redis or MySQL call a state machine asked for gave it nothing to go on: the
/// server failed it, or answered what its caller does not understand. Its text is the
/// cause the request log writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// Redis failed the command: a connection lost or refused, a script's error.
    #[error("redis: {0}")]
    Redis(String),
    /// MySQL failed the statement, or could not be reached.
    #[error("mysql: {0}")]
    Mysql(String),
    #[error(transparent)]
    UnexpectedReply(#[from] UnexpectedReply),
    #[error(transparent)]
    UnexpectedRow(#[from] UnexpectedRow),
}

/// A MySQL row that does not read as its statement promises (`crate::sql`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mysql: unexpected result: {0}")]
pub struct UnexpectedRow(pub String);

impl BackendError {
    /// The server a client whose request it ends hears is unavailable.
    pub fn unavailable(&self) -> Unavailable {
        match self {
            BackendError::Redis(_) | BackendError::UnexpectedReply(_) => Unavailable::Redis,
            BackendError::Mysql(_) | BackendError::UnexpectedRow(_) => Unavailable::Mysql,
        }
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    /// A body whose field `field` is at fault (a `400` naming it).
    #[error("{message}")]
    InvalidField {
        field: &'static str,
        message: String,
    },
    /// A change of a sale that its state forbids (a `409` naming the field).
    #[error("{message}")]
    CannotChange {
        field: &'static str,
        message: String,
    },
    #[error("a valid bearer token is required")]
    Unauthorized,
    #[error("this route is not open to the caller")]
    Forbidden,
    #[error("no such resource")]
    NotFound,
    #[error("method not allowed; allowed: {allow}")]
    MethodNotAllowed { allow: &'static str },
    #[error("request body is larger than 16 KiB")]
    PayloadTooLarge,
    /// The body of a route that takes one did not arrive within its deadline.
    #[error("the request body did not arrive in time")]
    RequestTimeout,
    #[error("the sale has not started yet")]
    NotStarted,
    #[error("the sale has ended")]
    Ended,
    #[error("the voucher is sold out")]
    SoldOut,
    /// Fewer units are left than the buyer asked for: `left` is the most one order can
    /// have now. Nothing was taken.
    #[error("fewer units are left than asked for; at most {left} can be bought now")]
    Short { left: u64 },
    /// She asked for more units than the sale lets one buyer hold (a `400`).
    #[error("this sale lets one buyer buy at most {per_buyer} units")]
    TooMany { per_buyer: u64 },
    /// Not an error: the buyer is entered in the sale's opening draw, whose results come
    /// at `draw_at_ms` (a `202`).
    #[error("the buyer is in the sale's opening draw; press again after draw_at for the result")]
    InDraw {
        draw_at_ms: i64,
        retry_after_secs: u64,
    },
    /// `sold_out` to a buyer in the sale's line (she lost its opening draw, or joined it):
    /// her place for units given back, which go to the line in its order.
    #[error("the voucher is sold out; this buyer is in the sale's line, and units given back go to it in its order: she is number {position}")]
    Waitlisted { position: u64, line: LineFigures },
    /// A look at the line by a buyer with no place in it and no purchase of the sale.
    #[error("this buyer is not in the sale's line")]
    NotInLine { length: u64 },
    /// A sale in buckets has no line.
    #[error("this sale has no line: it is sold in buckets")]
    NoLine,
    #[error("this buyer already ordered this voucher")]
    AlreadyOrdered { order_id: OrderId },
    /// One order per buyer per sale, whatever became of it.
    #[error("this buyer's order of this voucher was cancelled; she may not buy it again")]
    OrderCancelled { order_id: OrderId },
    #[error("this buyer's order of this voucher expired unpaid; she may not buy it again")]
    OrderExpired { order_id: OrderId },
    /// A paid order cannot be cancelled here (a refund is the payment system's).
    #[error("the order is paid")]
    OrderPaid { order_id: OrderId },
    #[error("this buyer's previous purchase of this voucher is still in flight; retry shortly")]
    Busy { retry_after_secs: u64 },
    #[error("too many purchases of this voucher are in flight; retry shortly")]
    Throttled,
    /// A buyer's reads of her orders, and her cancellations that change nothing of hers,
    /// cost MySQL at most once a second.
    #[error("a buyer's order reads and refused cancellations reach MySQL at most once a second; retry in a second")]
    RateLimited,
    #[error("another sync of this voucher is in progress; retry when it is done")]
    SyncInProgress,
    #[error("service temporarily unavailable: {0}")]
    Unavailable(Unavailable),
}

/// Why a request could not be served for now (`503`): which backend failed, or which
/// passing state stopped it. The cause behind a backend's failure goes to the request log.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum Unavailable {
    #[error("redis")]
    Redis,
    #[error("mysql")]
    Mysql,
    /// The component's variables are missing or malformed.
    #[error("the component's configuration is incomplete")]
    Configuration,
    /// Redis holds no sale state for a voucher MySQL has: it waits for a sync.
    #[error("sale state not loaded")]
    NotLoaded,
    /// Redis lost a queued purchase (a restart): her next press after the sync hears it.
    #[error("the sale state was lost; retry after it is loaded again")]
    SaleLost,
    /// An order id handed out twice (see docs/design.md, "Order ids").
    #[error("order id collision; retry")]
    OrderIdCollision,
    #[error("the voucher is being looked up; retry in a second")]
    VoucherLookup,
    #[error("the sync was interrupted; run it again")]
    SyncInterrupted,
    #[error("the sweep did not finish; run it again")]
    SweepUnfinished,
    #[error("the voucher's times are out of range")]
    TimesOutOfRange,
    #[error("the answer could not be encoded")]
    Encoding,
}

impl ApiError {
    pub fn status(&self) -> u16 {
        match self {
            ApiError::InDraw { .. } => 202,
            ApiError::BadRequest(_) | ApiError::InvalidField { .. } | ApiError::TooMany { .. } => {
                400
            }
            ApiError::Unauthorized => 401,
            ApiError::Forbidden => 403,
            ApiError::NotFound | ApiError::NotInLine { .. } => 404,
            ApiError::MethodNotAllowed { .. } => 405,
            ApiError::RequestTimeout => 408,
            ApiError::PayloadTooLarge => 413,
            ApiError::NotStarted
            | ApiError::Ended
            | ApiError::SoldOut
            | ApiError::Short { .. }
            | ApiError::Waitlisted { .. }
            | ApiError::NoLine
            | ApiError::AlreadyOrdered { .. }
            | ApiError::OrderCancelled { .. }
            | ApiError::OrderExpired { .. }
            | ApiError::OrderPaid { .. }
            | ApiError::CannotChange { .. }
            | ApiError::SyncInProgress => 409,
            ApiError::Busy { .. } | ApiError::Throttled | ApiError::RateLimited => 429,
            ApiError::Unavailable(_) => 503,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) | ApiError::InvalidField { .. } => "bad_request",
            ApiError::CannotChange { .. } => "cannot_change",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden => "forbidden",
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::PayloadTooLarge => "payload_too_large",
            ApiError::RequestTimeout => "request_timeout",
            ApiError::NotStarted => "not_started",
            ApiError::Ended => "ended",
            ApiError::SoldOut => "sold_out",
            ApiError::Short { .. } => "not_enough_left",
            ApiError::TooMany { .. } => "too_many_units",
            ApiError::InDraw { .. } => "in_draw",
            ApiError::Waitlisted { .. } => "sold_out",
            ApiError::NotInLine { .. } => "not_in_line",
            ApiError::NoLine => "no_line",
            ApiError::AlreadyOrdered { .. } => "already_ordered",
            ApiError::OrderCancelled { .. } => "order_cancelled",
            ApiError::OrderExpired { .. } => "order_expired",
            ApiError::OrderPaid { .. } => "order_paid",
            ApiError::Busy { .. } => "busy",
            ApiError::Throttled => "throttled",
            ApiError::RateLimited => "rate_limited",
            ApiError::SyncInProgress => "sync_in_progress",
            ApiError::Unavailable(_) => "unavailable",
        }
    }

    /// The JSON body: `{"error", "message"}`, plus the existing order for `already_ordered`.
    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({ "error": self.code(), "message": self.to_string() });
        if let ApiError::AlreadyOrdered { order_id }
        | ApiError::OrderCancelled { order_id }
        | ApiError::OrderExpired { order_id }
        | ApiError::OrderPaid { order_id } = self
        {
            body["order_id"] = order_id.to_string().into();
        }
        match self {
            ApiError::InDraw { draw_at_ms, .. } => {
                body["draw_at"] = chrono::DateTime::from_timestamp_millis(*draw_at_ms)
                    .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                    .into();
            }
            ApiError::Waitlisted { position, line } => {
                for (name, value) in line.place(*position) {
                    body[name] = value;
                }
            }
            ApiError::NotInLine { length } => body["line_length"] = (*length).into(),
            ApiError::Short { left } => body["left"] = (*left).into(),
            ApiError::TooMany { per_buyer } => body["per_buyer"] = (*per_buyer).into(),
            ApiError::InvalidField { field, .. } | ApiError::CannotChange { field, .. } => {
                body["field"] = (*field).into()
            }
            _ => {}
        }
        body
    }

    /// Headers that go with the status: `Allow` for 405, `Retry-After` for 429.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        match self {
            ApiError::MethodNotAllowed { allow } => vec![("allow", allow.to_string())],
            ApiError::Busy { retry_after_secs }
            | ApiError::InDraw {
                retry_after_secs, ..
            } => {
                vec![("retry-after", retry_after_secs.to_string())]
            }
            ApiError::Throttled | ApiError::RateLimited => vec![("retry-after", "1".to_string())],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_its_status_and_code() {
        let cases = [
            (ApiError::BadRequest("x".into()), 400, "bad_request"),
            (
                ApiError::InvalidField {
                    field: "stock",
                    message: "x".into(),
                },
                400,
                "bad_request",
            ),
            (
                ApiError::CannotChange {
                    field: "per_buyer",
                    message: "x".into(),
                },
                409,
                "cannot_change",
            ),
            (ApiError::Unauthorized, 401, "unauthorized"),
            (ApiError::Forbidden, 403, "forbidden"),
            (ApiError::NotFound, 404, "not_found"),
            (
                ApiError::MethodNotAllowed { allow: "GET" },
                405,
                "method_not_allowed",
            ),
            (ApiError::RequestTimeout, 408, "request_timeout"),
            (ApiError::PayloadTooLarge, 413, "payload_too_large"),
            (ApiError::NotStarted, 409, "not_started"),
            (ApiError::Short { left: 2 }, 409, "not_enough_left"),
            (ApiError::TooMany { per_buyer: 2 }, 400, "too_many_units"),
            (ApiError::Ended, 409, "ended"),
            (ApiError::SoldOut, 409, "sold_out"),
            (
                ApiError::InDraw {
                    draw_at_ms: 1_800_000_000_250,
                    retry_after_secs: 2,
                },
                202,
                "in_draw",
            ),
            (
                ApiError::Waitlisted {
                    position: 3,
                    line: LineFigures::default(),
                },
                409,
                "sold_out",
            ),
            (ApiError::NotInLine { length: 2 }, 404, "not_in_line"),
            (ApiError::NoLine, 409, "no_line"),
            (
                ApiError::Busy {
                    retry_after_secs: 2,
                },
                429,
                "busy",
            ),
            (ApiError::Throttled, 429, "throttled"),
            (ApiError::RateLimited, 429, "rate_limited"),
            (ApiError::SyncInProgress, 409, "sync_in_progress"),
            (
                ApiError::Unavailable(Unavailable::Redis),
                503,
                "unavailable",
            ),
        ];
        for (error, status, code) in cases {
            assert_eq!((error.status(), error.code()), (status, code), "{error:?}");
            assert_eq!(error.body()["error"], code);
            assert!(!error.body()["message"].as_str().unwrap().is_empty());
        }
    }

    #[test]
    fn already_ordered_carries_the_existing_order_as_a_string() {
        let error = ApiError::AlreadyOrdered {
            order_id: OrderId::from_raw(u64::MAX >> 1),
        };
        assert_eq!(error.status(), 409);
        assert_eq!(error.body()["order_id"], "9223372036854775807");
    }

    #[test]
    fn busy_and_method_not_allowed_carry_their_headers() {
        assert_eq!(
            ApiError::Busy {
                retry_after_secs: 3
            }
            .headers(),
            vec![("retry-after", "3".to_string())]
        );
        assert_eq!(
            ApiError::MethodNotAllowed { allow: "POST" }.headers(),
            vec![("allow", "POST".to_string())]
        );
        assert_eq!(
            ApiError::Throttled.headers(),
            vec![("retry-after", "1".to_string())]
        );
        assert!(ApiError::SoldOut.headers().is_empty());
    }

    #[test]
    fn a_draw_s_entrant_hears_when_and_a_loser_her_place() {
        let entered = ApiError::InDraw {
            draw_at_ms: 1_800_000_000_250,
            retry_after_secs: 2,
        };
        assert_eq!(entered.body()["draw_at"], "2027-01-15T08:00:00.250Z");
        assert_eq!(entered.headers(), vec![("retry-after", "2".to_string())]);
        let lost = ApiError::Waitlisted {
            position: 3,
            line: LineFigures::default(),
        };
        assert_eq!(lost.body()["position"], 3);
    }
}
