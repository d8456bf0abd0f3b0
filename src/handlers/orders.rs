//! Order routes: the purchase itself, reading orders back, and settling them.

use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};

use seckill_core::sale::MOST_PER_BUYER;
use seckill_core::{ApiError, OrderId, SaleId, UserId};

use super::events;
use seckill_core::sale::LineAsk;

use crate::actions::orders::{self, Ordered};
use crate::auth::Caller;
use crate::error::Failure;
use crate::http::{json_body, page_params, Answer, Body, Request, Then};
use crate::storage::connections::Connections;
use crate::storage::db::OrderRow;

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

/// `POST /vouchers/{id}/orders`: the purchase (`actions::orders::purchase`). A buyer
/// whose order this request committed hears her `201` at once, and the batch's
/// publication follows it.
pub async fn purchase(
    sale: SaleId,
    buyer: UserId,
    units: u32,
    connections: Connections,
) -> Result<Answer, Failure> {
    let ordered = orders::purchase(sale, buyer, units, LineAsk::Press, connections).await?;
    receipt(201, ordered)
}

/// Her receipt, with the rest of the purchase to run after it.
fn receipt(status: u16, ordered: Ordered) -> Result<Answer, Failure> {
    let mut answer = Answer::json(status, ordered.receipt)?;
    answer.then = ordered.rest.map(|rest| Then::new(rest.finish()));
    Ok(answer)
}

/// `POST /vouchers/{id}/line`: a press that joins the sale's line when nothing is left for
/// her: `201` with her receipt when units were (a press's), else `202` with her place
/// (docs/design.md, "The line").
pub async fn join_line(
    sale: SaleId,
    buyer: UserId,
    units: u32,
    connections: Connections,
) -> Result<Answer, Failure> {
    line_answer(
        201,
        202,
        orders::purchase(sale, buyer, units, LineAsk::Join, connections).await,
    )
}

/// `GET /vouchers/{id}/line`: her standing in the sale's line, from Redis: her place, or
/// the order the line handed her (committed by this request when it is still queued), or
/// `not_in_line`. A buyer polls it while she waits.
pub async fn line(
    sale: SaleId,
    buyer: UserId,
    connections: Connections,
) -> Result<Answer, Failure> {
    let looked = orders::purchase(sale, buyer, 1, LineAsk::Look, connections).await;
    match looked {
        Err(Failure::Api(ApiError::AlreadyOrdered { order_id })) => Answer::json(
            200,
            serde_json::json!({ "status": "ordered", "order_id": order_id.to_string() }),
        ),
        Err(Failure::Api(ApiError::NotInLine { length })) => Answer::json(
            200,
            serde_json::json!({ "status": "not_in_line", "line_length": length }),
        ),
        looked => line_answer(200, 200, looked),
    }
}

/// A line's answer: a receipt (`ordered`: `status: "ordered"` beside it), or her place in
/// line (`waiting`: `status: "waiting"`), or the press's error.
fn line_answer(
    ordered: u16,
    waiting: u16,
    result: Result<Ordered, Failure>,
) -> Result<Answer, Failure> {
    match result {
        Ok(bought) => {
            let mut answer = receipt(ordered, bought)?;
            if let Some(Body::Json(serde_json::Value::Object(body))) = &mut answer.body {
                body.insert("status".into(), "ordered".into());
            }
            Ok(answer)
        }
        Err(Failure::Api(ApiError::Waitlisted { position, line })) => {
            let mut place = line.place(position);
            place.insert("status".into(), "waiting".into());
            let mut answer = Answer::json(waiting, place)?;
            let again = line.look_again_secs(position);
            answer.headers.push(("retry-after", again.to_string()));
            Ok(answer)
        }
        Err(failure) => Err(failure),
    }
}

/// `DELETE /vouchers/{id}/line`: she leaves the sale's line; `not_in_line` when she was not
/// in it (the line may have handed her units already: her order says).
pub async fn leave_line(
    sale: SaleId,
    buyer: UserId,
    connections: Connections,
) -> Result<Answer, Failure> {
    let left = orders::leave_line(sale, buyer, &connections).await?;
    let status = if left { "left" } else { "not_in_line" };
    Answer::json(200, serde_json::json!({ "status": status }))
}

/// `GET /orders/{id}`: for the buyer who owns it, or an admin; anyone else gets the same
/// 404 as for an id that does not exist, so ids cannot be probed. An order past its
/// deadline reads `expired` (`actions::orders::order`).
pub async fn get(
    order_id: OrderId,
    caller: Caller,
    connections: Connections,
) -> Result<Answer, Failure> {
    found(orders::order(order_id, caller, &connections).await?)
}

/// `GET /vouchers/{id}/orders/mine`: the buyer's order of the voucher, before, during and
/// after the sale; `404` while she has none (`actions::orders::mine`).
pub async fn mine(
    sale: SaleId,
    buyer: UserId,
    connections: Connections,
) -> Result<Answer, Failure> {
    found(orders::mine(sale, buyer, &connections).await?)
}

/// `POST /orders/{id}/pay`, by the payment system: `unpaid` to `paid`. Paying again
/// answers the paid order; a cancelled or expired one is a `409`, and one unpaid past its
/// deadline expires now (its unit goes back) and is answered so.
pub async fn pay(order_id: OrderId, connections: Connections) -> Result<Answer, Failure> {
    found(orders::pay(order_id, &connections).await?)
}

/// `POST /orders/{id}/cancel`, by its buyer or the admin: `unpaid` to `cancelled`, its
/// unit back to the sale. Cancelling again answers the cancelled order; a paid one is a
/// `409`; someone else's is the same `404` as an unknown id.
pub async fn cancel(
    order_id: OrderId,
    caller: Caller,
    connections: Connections,
) -> Result<Answer, Failure> {
    found(orders::cancel(order_id, caller, &connections).await?)
}

/// An order as the routes that name one answer it, read back or settled.
fn found(order: OrderRow) -> Result<Answer, Failure> {
    Answer::json(200, OrderView::from(&order))
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
    let after = OrderId::from_raw(after.unwrap_or(0));
    let page = orders::of_sale(sale, after, limit, &connections).await?;
    let next = match page.last() {
        Some(order) if page.len() == limit as usize => Some(order.id.to_string()),
        _ => None,
    };
    let orders: Vec<OrderView> = page.iter().map(OrderView::from).collect();
    Answer::json(200, serde_json::json!({ "orders": orders, "next": next }))
}

/// The most orders one CSV answer holds: an export of a larger sale follows its `Link`.
pub const CSV_ROWS: u32 = 100_000;
/// Orders read from MySQL per round trip of an export.
const CSV_PAGE: u32 = 1_000;

/// `GET /vouchers/{id}/orders.csv?after=`: the sale's orders in id order, for a
/// spreadsheet or an ERP, each as `GET /vouchers/{id}/orders` shows it (an unpaid order
/// past its deadline reads expired, as the next sweep writes it in MySQL), at most
/// [`CSV_ROWS`] an answer: a `Link` header (`rel="next"`) names the rest. Every column is
/// a number, a status name or a time, so no field needs quoting.
pub async fn csv(
    sale: SaleId,
    request: &Request,
    connections: Connections,
) -> Result<Answer, Failure> {
    let (after, _) = page_params(request, CSV_ROWS, CSV_ROWS)?;
    let mut after = OrderId::from_raw(after.unwrap_or(0));
    let mut text = String::from("order_id,user_id,status,quantity,created_at\n");
    let mut rows = 0;
    let mut more = true;
    while more && rows < CSV_ROWS {
        let page =
            orders::of_sale(sale, after, CSV_PAGE.min(CSV_ROWS - rows), &connections).await?;
        more = page.len() == CSV_PAGE as usize;
        for order in &page {
            let view = OrderView::from(order);
            text.push_str(&format!(
                "{},{},{},{},{}\n",
                view.order_id, view.user_id, view.status, view.quantity, view.created_at
            ));
            after = order.id;
        }
        rows += page.len() as u32;
    }
    let mut answer = Answer::text("text/csv; charset=utf-8", text);
    answer.headers.push((
        "content-disposition",
        format!("attachment; filename=\"voucher-{sale}-orders.csv\""),
    ));
    if more {
        answer.headers.push((
            "link",
            format!("</vouchers/{sale}/orders.csv?after={after}>; rel=\"next\""),
        ));
    }
    Ok(answer)
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
    use seckill_core::sql::Status;
    use seckill_core::BucketId;

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
