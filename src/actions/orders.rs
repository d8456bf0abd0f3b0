//! Orders on the request's connections: the purchase, reading a buyer's orders under
//! their bound, settling an order in its turn and telling the sale in Redis, and a sale's
//! orders for its merchant.

use seckill_core::drive;
use seckill_core::purchase::{DrawPlace, Io, Purchase, Receipt};
use seckill_core::sale::{
    AskMysql, Count, Counted, Created, FreeProbe, Leave, Limits, LineAsk, MayAsk, Probe, Probed,
    ReadHolding, Seek, TakeProbe,
};
use seckill_core::sql::Status;
use seckill_core::{ApiError, BucketId, OrderId, SaleId, UserId};

use crate::auth::Caller;
use crate::error::Failure;
use crate::platform::known_buckets;
use crate::request_log;
use crate::storage::connections::Connections;
use crate::storage::db::{Db, OrderRow};
use crate::storage::redis::Redis;
use crate::storage::{returns, turns};

/// A purchase that ordered: her receipt, and the rest of the purchase when it has more
/// to do once she has heard it (the batch's publication).
pub struct Ordered {
    pub receipt: Receipt,
    pub rest: Option<Rest>,
}

/// What a purchase still does after its buyer's receipt: it runs to its end.
pub struct Rest {
    run: Run,
    io: Io,
}

impl Rest {
    pub async fn finish(mut self) {
        self.run.until(self.io, |_| false).await;
        self.run.note_causes();
    }
}

/// Runs the purchase (`seckill_core::purchase`, where its decisions and their reasons
/// are) on Spin's Redis and MySQL, up to the buyer's receipt or the purchase's end: a
/// press, or what she asks of the sale's line (`line`), which runs as one.
pub async fn purchase(
    sale: SaleId,
    buyer: UserId,
    units: u32,
    line: LineAsk,
    connections: Connections,
) -> Result<Ordered, Failure> {
    let on_a_cluster = connections.redis().await?.on_a_cluster();
    let known = known_buckets::known(sale, on_a_cluster);
    let listed = known.as_ref().map(|buckets| buckets.all().to_vec());
    // Her place if the press enters a draw, from the OS's randomness.
    let place = DrawPlace::from_random(uuid::Uuid::new_v4().as_u128());
    let (purchase, io) = match (known, line) {
        (_, LineAsk::Join | LineAsk::Look) => Purchase::in_line(sale, buyer, units, place, line),
        (Some(buckets), LineAsk::Press) => {
            Purchase::knowing(buckets, buyer, units, Limits::SHIPPED, place)
        }
        (None, LineAsk::Press) => Purchase::start(sale, buyer, units, place),
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
        return Ok(Ordered {
            receipt: answer?,
            rest: None,
        });
    };
    Ok(Ordered {
        receipt,
        rest: Some(Rest { run, io }),
    })
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
        let mut port = match self.connections.port().await {
            Ok(port) => port,
            Err(error) => return Io::Answer(Err(error.api())),
        };
        drive::purchase_until(&mut port, &mut self.purchase, io, stop).await
    }

    fn note_causes(&self) {
        for cause in self.purchase.causes() {
            request_log::note_cause(cause);
        }
    }
}

/// Takes the buyer out of the sale's line: whether she was in it.
pub async fn leave_line(
    sale: SaleId,
    buyer: UserId,
    connections: &Connections,
) -> Result<bool, Failure> {
    let redis = connections.redis().await?;
    Ok(redis.call(&Leave { sale, user: buyer }).await?)
}

/// The order, for the buyer who owns it or an admin. Anyone else finds the same
/// [`ApiError::NotFound`] as for an id that does not exist, so ids cannot be probed. A
/// buyer reads MySQL at most once a second ([`reader`]); an order past its deadline
/// sweeps its voucher ([`sweep_if_overdue`]).
pub async fn order(
    order_id: OrderId,
    caller: Caller,
    connections: &Connections,
) -> Result<OrderRow, Failure> {
    let db = match caller {
        Caller::Admin => connections.mysql().await?,
        Caller::Buyer(user) => reader(connections, user).await?,
    };
    let order = db.order(order_id).await?.ok_or(ApiError::NotFound)?;
    match caller {
        Caller::Buyer(user) if user != order.user_id => Err(ApiError::NotFound.into()),
        _ => {
            sweep_if_overdue(connections, &order).await?;
            Ok(order)
        }
    }
}

/// For an order read back: one unpaid past its deadline shows as expired (paying it would
/// expire it), and its voucher is swept now, so that it expires in MySQL, the feed says
/// so and its unit goes back, with nobody pressing. The order was read on the request's
/// MySQL; its Redis is opened here if the request has none yet.
async fn sweep_if_overdue(connections: &Connections, order: &OrderRow) -> Result<(), Failure> {
    if order.overdue {
        let db = connections.mysql().await?;
        match connections.redis().await {
            Ok(redis) => returns::sweep_unless_busy(db, redis, order.bucket).await,
            Err(error) => request_log::note_cause(format!("no sweep: {error}")),
        }
    }
    Ok(())
}

/// The buyer's order of the sale, before, during and after it; [`ApiError::NotFound`]
/// while she has none (a purchase still queued is not an order yet). Redis answers that
/// she has none while it holds the sale whole ([`Seek`]), so a buyer polling for the
/// order of a `201` she lost costs MySQL nothing until it exists; her order, or a sale
/// Redis does not hold, is read from MySQL at most once a second.
pub async fn mine(
    sale: SaleId,
    buyer: UserId,
    connections: &Connections,
) -> Result<OrderRow, Failure> {
    let redis = connections.redis().await?;
    let voucher_id = sale.first_bucket();
    let holding = redis
        .call(&ReadHolding {
            voucher_id,
            user: buyer,
        })
        .await?;
    let order_id = match holding.seek() {
        Seek::Nowhere => return Err(ApiError::NotFound.into()),
        Seek::Order(order_id) => Some(order_id),
        Seek::Mysql => {
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
    let db = reader(connections, buyer).await?;
    let order_id = match order_id {
        Some(order_id) => order_id,
        None => db.order_of(buyer, sale).await?.ok_or(ApiError::NotFound)?,
    };
    let order = db.order(order_id).await?.ok_or(ApiError::NotFound)?;
    sweep_if_overdue(connections, &order).await?;
    Ok(order)
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

/// Pays the order, for the payment system: `unpaid` to `paid`. Paying again finds the
/// paid order; a cancelled or expired one is refused, and one unpaid past its deadline
/// expires now (its unit goes back) and is refused so.
pub async fn pay(order_id: OrderId, connections: &Connections) -> Result<OrderRow, Failure> {
    let redis = redis_if_up(connections).await;
    Ok(settle(connections, redis, order_id, None, Status::Paid)
        .await?
        .0)
}

/// Cancels the order, for its buyer or the admin: `unpaid` to `cancelled`, its unit back
/// to the sale. Cancelling again finds the cancelled order; a paid one is refused;
/// someone else's is the same [`ApiError::NotFound`] as an unknown id. A buyer's
/// cancellations ask MySQL once a second at most until one changes an order of hers
/// (`Probe::Cancels`), so that naming other buyers' order ids costs MySQL next to nothing.
pub async fn cancel(
    order_id: OrderId,
    caller: Caller,
    connections: &Connections,
) -> Result<OrderRow, Failure> {
    let Caller::Buyer(buyer) = caller else {
        let redis = redis_if_up(connections).await;
        return Ok(
            settle(connections, redis, order_id, None, Status::Cancelled)
                .await?
                .0,
        );
    };
    let redis = connections.redis().await?;
    let probe = Probe::Cancels(buyer);
    if !redis.call(&TakeProbe { probe }).await? {
        return Err(ApiError::RateLimited.into());
    }
    let (order, changed) = settle(
        connections,
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
    Ok(order)
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

/// Moves the order on as `to` asks, in its turn (`storage::turns`); the order as it then
/// stands, and whether this call changed it. `redis` is the request's, when it has one.
async fn settle(
    connections: &Connections,
    redis: Option<&Redis>,
    order_id: OrderId,
    buyer: Option<UserId>,
    to: Status,
) -> Result<(OrderRow, bool), Failure> {
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
    Ok((order, changed))
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

/// The sale's orders in id order after `after`, `limit` at most, for the merchant's
/// reconciliation; [`ApiError::NotFound`] for a sale MySQL does not hold.
pub async fn of_sale(
    sale: SaleId,
    after: OrderId,
    limit: u32,
    connections: &Connections,
) -> Result<Vec<OrderRow>, Failure> {
    let db = connections.mysql().await?;
    db.lookup(sale.first_bucket())
        .await?
        .terms
        .ok_or(ApiError::NotFound)?;
    Ok(db.voucher_orders(sale, after, limit).await?)
}
