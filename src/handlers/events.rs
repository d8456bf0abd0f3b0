//! `GET /events`: the order feed for the systems downstream (payment, fulfilment, the
//! ledger). Every change of an order, and every change and restock of a sale by its
//! merchant, is an event written in the same MySQL transaction as the change; a read gives the events committed since the last one their places, after
//! every place given before (`seckill_feed_page`), so a consumer that reads from a cursor
//! to the end sees each change once, in order.

use chrono::{DateTime, SecondsFormat};
use serde::Serialize;

use seckill_core::sql::Event;
use seckill_core::{OrderId, SaleId, UserId};

use crate::actions::events;
use crate::error::Failure;
use crate::http::{page_params, Answer, Request};
use crate::storage::connections::Connections;

/// Events per page, by default and at most.
pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 1000;

#[derive(Serialize)]
struct EventView {
    /// The event's cursor, as a string (JavaScript loses integers above 2^53).
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    /// `null` for a sale's event (`sale.restocked`, `sale.changed`), which names no order.
    order_id: Option<OrderId>,
    voucher_id: SaleId,
    /// `null` for a sale's event.
    user_id: Option<UserId>,
    at: String,
    /// The order's units; a restock's, those it added to one bucket of the sale.
    quantity: u32,
}

#[derive(Serialize)]
struct Page {
    events: Vec<EventView>,
    /// The `after` of the next page: the last event's id, or the one asked for when there
    /// was none.
    next: String,
}

/// A page of the feed (`actions::events::page`: the overdue orders swept first, and
/// served once durable).
pub async fn page(request: &Request, connections: Connections) -> Result<Answer, Failure> {
    let (after, limit) = page_params(request, DEFAULT_LIMIT, MAX_LIMIT)?;
    let after = after.unwrap_or(0);
    let events = events::page(after, limit, &connections).await?;
    let next = events.last().map_or(after, |event| event.id).to_string();
    Answer::json(
        200,
        Page {
            events: events.iter().map(view).collect(),
            next,
        },
    )
}

fn view(event: &Event) -> EventView {
    EventView {
        id: event.id.to_string(),
        kind: event.kind,
        // A sale's events write 0 for the order and the buyer: no order or buyer has it.
        order_id: (event.order_id.raw() != 0).then_some(event.order_id),
        voucher_id: event.voucher_id,
        user_id: (event.user.raw() != 0).then_some(event.user),
        at: DateTime::from_timestamp(event.at, 0)
            .map(|at| at.to_rfc3339_opts(SecondsFormat::Secs, true))
            .unwrap_or_default(),
        quantity: event.quantity,
    }
}
