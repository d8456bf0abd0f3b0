//! Order routes: the purchase itself, and reading an order back.

use chrono::SecondsFormat;
use serde::Serialize;
use uuid::Uuid;

use crate::auth::{Caller, UserId};
use crate::config;
use crate::db::{Db, OrderRow, Purchase};
use crate::error::ApiError;
use crate::http::Reply;
use crate::order_id::OrderId;
use crate::sale::{Admission, Sale, Settlement};

#[derive(Debug, Serialize, PartialEq)]
struct Receipt {
    order_id: OrderId,
    voucher_id: u64,
    user_id: UserId,
}

#[derive(Debug, Serialize, PartialEq)]
struct OrderView {
    order_id: OrderId,
    voucher_id: u64,
    user_id: UserId,
    status: &'static str,
    created_at: String,
}

/// `POST /vouchers/{id}/orders`.
///
/// Redis admission decides in one round trip; only admitted buyers reach MySQL, whose
/// answer then settles the reservation in a second round trip. A request that dies in
/// between leaves a reservation that expires after `reservation_ttl_ms` and is then
/// taken over by the buyer's next attempt or reclaimed by another buyer.
pub fn purchase(voucher_id: u64, buyer: UserId) -> Result<Reply, ApiError> {
    let ttl_ms = config::reservation_ttl_ms()?;
    let max_inflight = config::max_inflight_purchases()?;
    let sale = Sale::connect(&config::redis_url()?)?;
    let token = Uuid::new_v4().to_string();
    let admission = match sale.admit(voucher_id, buyer, &token, ttl_ms, max_inflight) {
        Ok(admission) => admission,
        Err(error) => {
            // The script may have run and reserved under this token before its reply was
            // lost or found unreadable: give back whatever the token holds.
            settle(&sale, voucher_id, buyer, &token, Settlement::Undo);
            return Err(error.into());
        }
    };
    let order_id = match admission {
        Admission::Admitted(order_id) => order_id,
        Admission::NotStarted => return Err(ApiError::NotStarted),
        Admission::Ended => return Err(ApiError::Ended),
        Admission::SoldOut => return Err(ApiError::SoldOut),
        Admission::AlreadyOrdered(order_id) => return Err(ApiError::AlreadyOrdered { order_id }),
        Admission::Busy { lock_left } => {
            let retry_after_secs = lock_left.as_millis().div_ceil(1000).max(1) as u64;
            return Err(ApiError::Busy { retry_after_secs });
        }
        Admission::Throttled => return Err(ApiError::Throttled),
        Admission::Unsettled => return Err(unsettled(&sale, voucher_id, buyer)),
        Admission::Missing => return Err(missing_sale_state(voucher_id)),
    };

    let purchase = config::mysql_url()
        .and_then(|url| Ok(Db::connect(&url)?.purchase(order_id, buyer, voucher_id)?));
    let (settlement, reply) = match purchase {
        Ok(Purchase::Ordered) => (
            Settlement::Ordered(order_id),
            Reply::json(
                201,
                Receipt {
                    order_id,
                    voucher_id,
                    user_id: buyer,
                },
            ),
        ),
        Ok(Purchase::AlreadyOrdered(existing)) => (
            Settlement::Duplicate(existing),
            Err(ApiError::AlreadyOrdered { order_id: existing }),
        ),
        Ok(Purchase::SoldOut) => (Settlement::SoldOut, Err(ApiError::SoldOut)),
        Ok(Purchase::IdTaken) => (
            Settlement::Undo,
            Err(ApiError::Unavailable("order id collision; retry".into())),
        ),
        Err(error) => (Settlement::Undo, Err(error)),
    };
    // The answer stands whatever happens here: a committed order is in MySQL, and a
    // reservation left unsettled expires and is reclaimed.
    settle(&sale, voucher_id, buyer, &token, settlement);
    reply
}

fn settle(sale: &Sale, voucher_id: u64, buyer: UserId, token: &str, settlement: Settlement) {
    if let Err(error) = sale.settle(voucher_id, buyer, token, settlement) {
        eprintln!(
            "voucher {voucher_id} buyer {buyer}: {settlement:?} not recorded in Redis: {error}"
        );
    }
}

/// No unit left for a buyer whose earlier reservation Redis gave up without MySQL's
/// answer: MySQL says whether she has an order (read only), and Redis learns it.
fn unsettled(sale: &Sale, voucher_id: u64, buyer: UserId) -> ApiError {
    let order =
        config::mysql_url().and_then(|url| Ok(Db::connect(&url)?.order_of(buyer, voucher_id)?));
    match order {
        Ok(Some(order_id)) => {
            if let Err(error) = sale.record_order(voucher_id, buyer, order_id) {
                eprintln!("voucher {voucher_id} buyer {buyer}: order {order_id} not recorded in Redis: {error}");
            }
            ApiError::AlreadyOrdered { order_id }
        }
        Ok(None) => ApiError::SoldOut,
        Err(error) => error,
    }
}

/// Redis has no sale state: either the voucher does not exist, or Redis lost it and an
/// admin must sync it from MySQL before sales resume.
fn missing_sale_state(voucher_id: u64) -> ApiError {
    let exists =
        config::mysql_url().and_then(|url| Ok(Db::connect(&url)?.voucher(voucher_id)?.is_some()));
    match exists {
        Ok(false) => ApiError::NotFound,
        Ok(true) => {
            eprintln!(
                "voucher {voucher_id} has no sale state in Redis; POST /vouchers/{voucher_id}/sync"
            );
            ApiError::Unavailable("sale state not loaded".into())
        }
        Err(error) => error,
    }
}

/// `GET /orders/{id}`: for the buyer who owns it, or an admin. Anyone else gets the same
/// 404 as for an id that does not exist, so ids cannot be probed.
pub fn get(order_id: OrderId, caller: Caller) -> Result<Reply, ApiError> {
    let db = Db::connect(&config::mysql_url()?)?;
    let order = db.order(order_id)?.ok_or(ApiError::NotFound)?;
    match caller {
        Caller::Buyer(user) if user != order.user_id => Err(ApiError::NotFound),
        _ => Reply::json(200, OrderView::from(&order)),
    }
}

impl From<&OrderRow> for OrderView {
    fn from(order: &OrderRow) -> OrderView {
        OrderView {
            order_id: order.id,
            voucher_id: order.voucher_id,
            user_id: order.user_id,
            status: status_name(order.status),
            created_at: order.created_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        }
    }
}

/// `tb_voucher_order.status`; the handler creates orders as unpaid, and payment and
/// fulfilment systems move them on.
fn status_name(status: u8) -> &'static str {
    match status {
        1 => "unpaid",
        2 => "paid",
        3 => "used",
        4 => "cancelled",
        5 => "refunding",
        6 => "refunded",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    #[test]
    fn orders_render_ids_as_strings_and_times_in_utc() {
        let order = OrderRow {
            id: OrderId::from_raw(1 << 60),
            user_id: UserId::from_raw(u64::MAX),
            voucher_id: 3,
            status: 1,
            created_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        };
        let json = serde_json::to_value(OrderView::from(&order)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "order_id": "1152921504606846976",
                "voucher_id": 3,
                "user_id": "18446744073709551615",
                "status": "unpaid",
                "created_at": "2027-01-15T08:00:00Z",
            })
        );
    }

    #[test]
    fn every_status_code_has_a_name() {
        let names: Vec<_> = (0..=7).map(status_name).collect();
        assert_eq!(
            names,
            [
                "unknown",
                "unpaid",
                "paid",
                "used",
                "cancelled",
                "refunding",
                "refunded",
                "unknown"
            ]
        );
    }
}
