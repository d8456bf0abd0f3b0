//! A page of the order feed on the request's connections: the overdue orders swept
//! first, and the page made durable before it is served.

use seckill_core::sql::Event;

use crate::error::Failure;
use crate::storage::connections::Connections;
use crate::storage::returns;

/// The feed's events after the cursor `after`, `limit` at most. Its reads drive the
/// sweeps of orders past their deadline first, so that `order.expired` comes with no
/// press (`returns::sweep_all_overdue`); and a page is returned only once its events are
/// durable (`Db::make_read_durable`).
pub async fn page(
    after: u64,
    limit: u32,
    connections: &Connections,
) -> Result<Vec<Event>, Failure> {
    let db = connections.mysql().await?;
    returns::sweep_all_overdue(connections).await;
    let events = db.events(after, limit).await?;
    if !events.is_empty() {
        db.make_read_durable().await?;
    }
    Ok(events)
}
