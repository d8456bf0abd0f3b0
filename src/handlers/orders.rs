//! Order routes: the purchase itself, and reading orders back.

use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};

use seckill_core::drive;
use seckill_core::purchase::{DrawPlace, Io, Purchase};
use seckill_core::sale::{
    AskMysql, Count, Counted, Created, FreeProbe, Holding, Limits, MayAsk, Probe, Probed,
    ReadHolding, TakeProbe, MOST_PER_BUYER,
};
use seckill_core::sql::Status;
use seckill_core::{ApiError, BucketId, OrderId, SaleId, UserId};

use super::events;
use crate::auth::Caller;
use crate::error::Failure;
use crate::http::{json_body, page_params, Answer, Request, Then};
#[cfg(not(target_env = "p2"))]
use crate::p1::known_buckets;
#[cfg(target_env = "p2")]
use crate::p3::known_buckets;
use crate::request_log;
use crate::storage::backends::Connections;
use crate::storage::db::{Db, OrderRow};
use crate::storage::redis::Redis;
use crate::storage::{returns, turns};

#[derive(Debug, Serialize, PartialEq)]
struct OrderView {
    order_id: OrderId,
    voucher_id: SaleId,
    user_id: UserId,
    status: &'static str,
    created_at: String,
    quantity: u32,
}

/// The body of a purchase of more than one unit: `{"quantity": n}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Press {
    quantity: serde_json::Value,
}

/// The units a press asks for: one with no body; else its `quantity`, a whole number from
/// 1 to [`MOST_PER_BUYER`] (admission holds it to the sale's own `per_buyer`).
pub fn units_asked(request: &Request) -> Result<u32, ApiError> {
    if request.body.is_empty() {
        return Ok(1);
    }
    let press: Press = json_body(request)?;
    press
        .quantity
        .as_u64()
        .and_then(|units| u32::try_from(units).ok())
        .filter(|units| (1..=MOST_PER_BUYER).contains(units))
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "quantity must be a whole number from 1 to {MOST_PER_BUYER}, and at most the sale's per_buyer"
            ))
        })
}

/// `POST /vouchers/{id}/orders`: runs the purchase (`seckill_core::purchase`, where its
/// decisions and their reasons are) on Spin's Redis and MySQL. A buyer whose order this
/// request committed hears her `201` at once, and the batch's publication follows it.
pub async fn purchase(
    sale: SaleId,
    buyer: UserId,
    units: u32,
    connections: Connections,
) -> Result<Answer, Failure> {
    let on_a_cluster = connections.redis().await?.on_a_cluster();
    let known = known_buckets::known(sale, on_a_cluster);
    let listed = known.as_ref().map(|buckets| buckets.all().to_vec());
    // Her place if the press enters a draw, from the OS's randomness.
    let place = DrawPlace::from_random(uuid::Uuid::new_v4().as_u128());
    let (purchase, io) = match known {
        Some(buckets) => Purchase::knowing(buckets, buyer, units, Limits::SHIPPED, place),
        None => Purchase::start(sale, buyer, units, place),
    };
    let mut run = Run {
        connections,
        purchase,
    };
    let io = run.until(io, |purchase| purchase.receipt().is_some()).await;
    // Learnt, or learnt again when the list kept was of another creation of the sale's id;
    // kept with the creation its first bucket names.
    let learnt = run.purchase.buckets().cloned();
    if let Some(buckets) = learnt.filter(|buckets| listed.as_deref() != Some(buckets.all())) {
        if known_buckets::keeps(on_a_cluster) {
            let voucher_id = sale.first_bucket();
            let created = match run.connections.redis().await {
                Ok(redis) => redis.call(&Created { voucher_id }).await.ok(),
                Err(_) => None,
            };
            if let Some(created) = created {
                known_buckets::keep(&buckets.with_created(created), on_a_cluster);
            }
        }
    }
    let Some(receipt) = run.purchase.receipt() else {
        let Io::Answer(answer) = io else {
            unreachable!("the run stopped early only with a receipt")
        };
        run.note_causes();
        return Answer::json(201, answer?);
    };
    let mut answer = Answer::json(201, receipt)?;
    answer.then = Some(Then::new(async move {
        run.until(io, |_| false).await;
        run.note_causes();
    }));
    Ok(answer)
}

/// A purchase on the request's connections: Redis, opened before it starts, and MySQL,
/// opened by the first batch this request commits and kept for the next ones (a failed
/// commit drops it, so that its retry runs on a fresh connection).
struct Run {
    connections: Connections,
    purchase: Purchase,
}

impl Run {
    /// Runs the purchase from `io` until its answer or until `stop`; returns what it would
    /// do next.
    async fn until(&mut self, io: Io, stop: impl Fn(&Purchase) -> bool) -> Io {
        let mut backends = match self.connections.port().await {
            Ok(backends) => backends,
            Err(error) => return Io::Answer(Err(error.api())),
        };
        drive::purchase_until(&mut backends, &mut self.purchase, io, stop).await
    }

    fn note_causes(&self) {
        for cause in self.purchase.causes() {
            request_log::note_cause(cause);
        }
    }
}

/// `GET /orders/{id}`: for the buyer who owns it, or an admin. Anyone else gets the same
/// 404 as for an id that does not exist, so ids cannot be probed. A buyer reads MySQL at
/// most once a second ([`reader`]). An order past its deadline reads `expired`, and
/// sweeps its voucher ([`shown`]).
pub async fn get(
    order_id: OrderId,
    caller: Caller,
    connections: Connections,
) -> Result<Answer, Failure> {
    let db = match caller {
        Caller::Admin => connections.mysql().await?,
        Caller::Buyer(user) => reader(&connections, user).await?,
    };
    let order = db.order(order_id).await?.ok_or(ApiError::NotFound)?;
    match caller {
        Caller::Buyer(user) if user != order.user_id => Err(ApiError::NotFound.into()),
        _ => shown(&connections, &order).await,
    }
}

/// An order read back. One unpaid past its deadline is shown expired (paying it would
/// expire it), and its voucher is swept now, so that it expires in MySQL, the feed says
/// so and its unit goes back, with nobody pressing. The order was read on the request's
/// MySQL; its Redis is opened here if the request has none yet.
async fn shown(connections: &Connections, order: &OrderRow) -> Result<Answer, Failure> {
    if order.overdue {
        let db = connections.mysql().await?;
        match connections.redis().await {
            Ok(redis) => returns::sweep_unless_busy(db, redis, order.bucket).await,
            Err(error) => request_log::note_cause(format!("no sweep: {error}")),
        }
    }
    Answer::json(200, OrderView::from(order))
}

/// `GET /vouchers/{id}/orders/mine`: the buyer's order of the voucher, before, during and
/// after the sale; `404` while she has none (a purchase still queued is not an order
/// yet). Redis answers that she has none while it holds the sale whole, so a buyer
/// polling for the order of a `201` she lost costs MySQL nothing until it exists; her
/// order, or a sale Redis does not hold, is read from MySQL at most once a second.
pub async fn mine(
    sale: SaleId,
    buyer: UserId,
    connections: Connections,
) -> Result<Answer, Failure> {
    let redis = connections.redis().await?;
    let voucher_id = sale.first_bucket();
    let order_id = match redis
        .call(&ReadHolding {
            voucher_id,
            user: buyer,
        })
        .await?
    {
        Holding::Nothing | Holding::Unknown => return Err(ApiError::NotFound.into()),
        Holding::Order(order_id) => Some(order_id),
        Holding::Missing => {
            let ask = AskMysql {
                voucher_id,
                probe: false,
            };
            if let MayAsk::Unknown(highest) = redis.call(&ask).await? {
                let probed = Probed {
                    voucher_id,
                    absent: false,
                    highest,
                };
                keep(redis, probed).await;
                return Err(ApiError::NotFound.into());
            }
            None
        }
    };
    let db = reader(&connections, buyer).await?;
    let order_id = match order_id {
        Some(order_id) => order_id,
        None => db.order_of(buyer, sale).await?.ok_or(ApiError::NotFound)?,
    };
    let order = db.order(order_id).await?.ok_or(ApiError::NotFound)?;
    shown(&connections, &order).await
}

/// Keeps in Redis what a lookup learnt (`probed.lua`), so that the next requests for such
/// an id are answered at once; a failure only costs them the lookup again.
async fn keep(redis: &Redis, probed: Probed) {
    if let Err(error) = redis.call(&probed).await {
        request_log::note_cause(format!("what MySQL said not kept in Redis: {error}"));
    }
}

/// A MySQL connection to read a buyer's orders on: her reads cost one a second at most
/// (Redis keeps the count; without Redis, none), so that no buyer's polling, nor a flood
/// of made-up order ids, becomes a crowd of MySQL connections. An admin's reads are not
/// bounded.
async fn reader(connections: &Connections, buyer: UserId) -> Result<&Db, Failure> {
    let probe = TakeProbe {
        probe: Probe::Reads(buyer),
    };
    if !connections.redis().await?.call(&probe).await? {
        return Err(ApiError::RateLimited.into());
    }
    connections.mysql().await
}

/// `POST /orders/{id}/pay`, by the payment system: `unpaid` to `paid`. Paying again
/// answers the paid order; a cancelled or expired one is a `409`, and one unpaid past its
/// deadline expires now (its unit goes back) and is answered so.
pub async fn pay(order_id: OrderId, connections: Connections) -> Result<Answer, Failure> {
    let redis = redis_if_up(&connections).await;
    Ok(settle(&connections, redis, order_id, None, Status::Paid)
        .await?
        .0)
}

/// `POST /orders/{id}/cancel`, by its buyer or the admin: `unpaid` to `cancelled`, its
/// unit back to the sale. Cancelling again answers the cancelled order; a paid one is a
/// `409`; someone else's is the same `404` as an unknown id. A buyer's cancellations ask
/// MySQL once a second at most until one changes an order of hers (`Probe::Cancels`), so
/// that naming other buyers' order ids costs MySQL next to nothing.
pub async fn cancel(
    order_id: OrderId,
    caller: Caller,
    connections: Connections,
) -> Result<Answer, Failure> {
    let Caller::Buyer(buyer) = caller else {
        let redis = redis_if_up(&connections).await;
        return Ok(
            settle(&connections, redis, order_id, None, Status::Cancelled)
                .await?
                .0,
        );
    };
    let redis = connections.redis().await?;
    let probe = Probe::Cancels(buyer);
    if !redis.call(&TakeProbe { probe }).await? {
        return Err(ApiError::RateLimited.into());
    }
    let (answer, changed) = settle(
        &connections,
        Some(redis),
        order_id,
        Some(buyer),
        Status::Cancelled,
    )
    .await?;
    if changed {
        if let Err(error) = redis.call(&FreeProbe { probe }).await {
            request_log::note_cause(format!("cancellations stay bounded for a second: {error}"));
        }
    }
    Ok(answer)
}

/// The payment system's and the admin's Redis: their settles go on without it (MySQL
/// holds the truth), only untold and out of turn.
async fn redis_if_up(connections: &Connections) -> Option<&Redis> {
    connections
        .redis()
        .await
        .inspect_err(|cause| request_log::note_cause(format!("without Redis: {cause}")))
        .ok()
}

/// Moves the order on as `to` asks, in its turn (`storage::turns`); the answer, and
/// whether this call changed it. `redis` is the request's, when it has one.
async fn settle(
    connections: &Connections,
    redis: Option<&Redis>,
    order_id: OrderId,
    buyer: Option<UserId>,
    to: Status,
) -> Result<(Answer, bool), Failure> {
    let db = connections.mysql().await?;
    let (status, changed, voucher_id) =
        turns::in_turn(redis, order_id, db.settle_order(order_id, buyer, to))
            .await?
            .ok_or(ApiError::NotFound)?;
    request_log::note_voucher(voucher_id);
    if let (true, Some(redis)) = (changed, redis) {
        tell_redis(db, redis, voucher_id, status).await;
    }
    status.settles(to, order_id)?;
    let order = db.order(order_id).await?.ok_or(ApiError::NotFound)?;
    Ok((Answer::json(200, OrderView::from(&order))?, changed))
}

/// `GET /vouchers/{id}/orders?after=&limit=`: the voucher's orders in id order, with
/// their statuses, for the merchant's reconciliation; `next` is the `after` of the next
/// page, `null` after the last.
pub async fn of_voucher(
    sale: SaleId,
    request: &Request,
    connections: Connections,
) -> Result<Answer, Failure> {
    let (after, limit) = page_params(request, events::DEFAULT_LIMIT, events::MAX_LIMIT)?;
    let db = connections.mysql().await?;
    db.lookup(sale.first_bucket())
        .await?
        .terms
        .ok_or(ApiError::NotFound)?;
    let page = db
        .voucher_orders(sale, OrderId::from_raw(after.unwrap_or(0)), limit)
        .await?;
    let next = match page.last() {
        Some(order) if page.len() == limit as usize => Some(order.id.to_string()),
        _ => None,
    };
    let orders: Vec<OrderView> = page.iter().map(OrderView::from).collect();
    Answer::json(200, serde_json::json!({ "orders": orders, "next": next }))
}

/// A change MySQL made, for the sale in Redis: a unit given back, or an order paid for the
/// counters. A failure is logged, not answered: MySQL holds the truth, and the voucher's
/// next sweep gives the unit back.
async fn tell_redis(db: &Db, redis: &Redis, voucher_id: BucketId, status: Status) {
    let told = async {
        match status {
            Status::Cancelled | Status::Expired => {
                returns::restock(db, redis, voucher_id).await;
                Ok(())
            }
            _ => Ok(redis
                .call(&Count {
                    voucher_id,
                    counted: Counted::Paid,
                })
                .await?),
        }
    }
    .await;
    if let Err::<(), Failure>(cause) = told {
        request_log::note_cause(format!("Redis not told of {}: {cause}", status.name()));
    }
}

impl From<&OrderRow> for OrderView {
    fn from(order: &OrderRow) -> OrderView {
        OrderView {
            order_id: order.id,
            voucher_id: order.voucher_id,
            user_id: order.user_id,
            status: order.status.name(),
            created_at: order.created_at.to_rfc3339_opts(SecondsFormat::Secs, true),
            quantity: order.quantity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    #[test]
    fn a_press_asks_for_one_unit_or_its_quantity() {
        let press = |body: &str| {
            units_asked(&Request {
                content_type: Some("application/json".into()),
                body: body.as_bytes().to_vec(),
                ..Request::default()
            })
        };
        assert_eq!(press(""), Ok(1));
        assert_eq!(press(r#"{"quantity":1}"#), Ok(1));
        assert_eq!(press(r#"{"quantity":10}"#), Ok(10));
        for bad in [
            r#"{"quantity":0}"#,
            r#"{"quantity":-1}"#,
            r#"{"quantity":11}"#,
            r#"{"quantity":2.5}"#,
            r#"{"quantity":"2"}"#,
            r#"{"quantity":null}"#,
            r#"{"quantity":2,"user_id":"1"}"#,
            r#"{}"#,
            "2",
        ] {
            assert_eq!(press(bad).unwrap_err().code(), "bad_request", "{bad}");
        }
    }

    #[test]
    fn orders_render_ids_as_strings_and_times_in_utc() {
        let order = OrderRow {
            id: OrderId::from_raw(1 << 60),
            user_id: UserId::from_raw(u64::MAX),
            voucher_id: SaleId::from_raw(3),
            bucket: BucketId::from_raw(4),
            status: Status::Unpaid,
            created_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            overdue: false,
            quantity: 2,
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
                "quantity": 2,
            })
        );
    }
}
