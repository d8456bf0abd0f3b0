//! Order routes: the purchase itself, and reading an order back.

use chrono::SecondsFormat;
use serde::Serialize;

use crate::auth::Caller;
use crate::config;
use crate::db::{Db, OrderRow, Verdict};
use crate::error::ApiError;
use crate::group_commit::{verdict_of, Queue};
use crate::http::Reply;
use crate::ids::UserId;
use crate::order_id::OrderId;
use crate::request_log;
use crate::sale::{Admission, Decision, Entry, Probe, Sale};

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
/// Redis admission decides in one round trip: a buyer admitted holds a unit and her
/// purchase is queued. She hears `201` once MySQL has committed it, in a group commit
/// that this request runs itself when it holds the voucher's lease, or that another
/// request runs while this one waits (`group_commit`). Everyone else is answered at once.
pub fn purchase(voucher_id: u64, buyer: UserId) -> Result<Reply, ApiError> {
    let sale = Sale::connect(&config::redis_url()?)?;
    let admission = sale.admit(voucher_id, buyer)?;
    // Admission counted its decision; what a queued purchase met after it is counted
    // here (only for a sale Redis holds, so that unknown ids leave no keys behind).
    let queued = matches!(
        admission.decision,
        Decision::Admitted(_) | Decision::Queued(_)
    );
    let answer = settle(&sale, voucher_id, buyer, admission);
    if let Err(error @ (ApiError::Busy { .. } | ApiError::Unavailable(_))) = &answer {
        if queued {
            if let Err(count) = sale.count_outcome(voucher_id, error.code()) {
                request_log::note_cause(format!("counting {}: {count}", error.code()));
            }
        }
    }
    answer
}

/// The answer to the buyer once admission decided, draining first when this request
/// holds the lease.
fn settle(
    sale: &Sale,
    voucher_id: u64,
    buyer: UserId,
    Admission { decision, lease }: Admission,
) -> Result<Reply, ApiError> {
    let mut queue = Queue::new(sale, voucher_id);
    let entry = |ticket| Entry {
        user: buyer,
        ticket,
    };
    // A request handed the lease drains before it answers, whatever it was told; it
    // drains until its own purchase is committed when it was just admitted.
    let committed = match lease {
        Some(lease) => {
            let own = match decision {
                Decision::Admitted(ticket) => Some(entry(ticket)),
                _ => None,
            };
            match queue.drain(&lease.token, own, lease.batch) {
                Ok(committed) => committed,
                // Her purchase stays queued, and the next drainer commits it.
                Err(error) if matches!(decision, Decision::Admitted(_) | Decision::Queued(_)) => {
                    return Err(error)
                }
                Err(error) => {
                    request_log::note_cause(format!("draining the queue failed: {error}"));
                    Vec::new()
                }
            }
        }
        None => Vec::new(),
    };
    match decision {
        Decision::Admitted(ticket) => {
            let own = entry(ticket);
            let verdict = match verdict_of(&committed, own) {
                Some(verdict) => verdict,
                None => queue.await_verdict(own)?,
            };
            answer(voucher_id, own, verdict)
        }
        // A second press while her purchase is queued: its outcome if this request just
        // committed it (an order she made with her first press), else a short wait;
        // never a second unit.
        Decision::Queued(ticket) => match verdict_of(&committed, entry(ticket)) {
            Some(Verdict::Ordered) => Err(ApiError::AlreadyOrdered {
                order_id: ticket.order_id()?,
            }),
            Some(verdict) => answer(voucher_id, entry(ticket), verdict),
            None => Err(ApiError::Busy {
                retry_after_secs: 1,
            }),
        },
        Decision::AlreadyOrdered(order_id) => Err(ApiError::AlreadyOrdered { order_id }),
        Decision::SoldOut => Err(ApiError::SoldOut),
        Decision::Ended => Err(ApiError::Ended),
        Decision::NotStarted => Err(ApiError::NotStarted),
        Decision::Throttled => Err(ApiError::Throttled),
        Decision::Unknown => Err(ApiError::NotFound),
        Decision::Missing if sale.may_ask_mysql(Probe::Purchase(voucher_id))? => {
            Err(missing_sale_state(sale, voucher_id))
        }
        Decision::Missing => Err(ApiError::Unavailable("sale state not loaded".into())),
    }
}

/// The buyer's answer for MySQL's verdict on her queued purchase.
fn answer(voucher_id: u64, own: Entry, verdict: Verdict) -> Result<Reply, ApiError> {
    match verdict {
        Verdict::Ordered => Reply::json(
            201,
            Receipt {
                order_id: own.ticket.order_id()?,
                voucher_id,
                user_id: own.user,
            },
        ),
        Verdict::Duplicate(order_id) => Err(ApiError::AlreadyOrdered { order_id }),
        Verdict::SoldOut => Err(ApiError::SoldOut),
        Verdict::IdTaken => Err(ApiError::Unavailable("order id collision; retry".into())),
    }
}

/// Redis has no sale state: either the voucher does not exist (which Redis then keeps,
/// for a minute), or Redis lost it and an admin must sync it from MySQL before sales
/// resume.
fn missing_sale_state(sale: &Sale, voucher_id: u64) -> ApiError {
    let exists =
        config::mysql_url().and_then(|url| Ok(Db::connect(&url)?.voucher(voucher_id)?.is_some()));
    match exists {
        Ok(false) => {
            if let Err(error) = sale.mark_absent(voucher_id) {
                request_log::note_cause(format!("its absence not kept in Redis: {error}"));
            }
            ApiError::NotFound
        }
        Ok(true) => {
            request_log::note_cause(format!(
                "no sale state in Redis; POST /vouchers/{voucher_id}/sync"
            ));
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

/// `GET /vouchers/{id}/orders/mine`: the buyer's order of the voucher, from MySQL, before,
/// during and after the sale; `404` while she has none (a purchase still queued is not
/// an order yet).
pub fn mine(voucher_id: u64, buyer: UserId) -> Result<Reply, ApiError> {
    let db = Db::connect(&config::mysql_url()?)?;
    let order_id = db.order_of(buyer, voucher_id)?.ok_or(ApiError::NotFound)?;
    let order = db.order(order_id)?.ok_or(ApiError::NotFound)?;
    Reply::json(200, OrderView::from(&order))
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
