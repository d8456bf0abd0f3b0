use std::collections::{HashMap, HashSet};

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::Params;
use proptest::test_runner::TestCaseError;
use redis::AsyncCommands;

use seckill_core::buckets::Buckets;
use seckill_core::returns::{self, Returns};
use seckill_core::sale::{Limits, LineAsk};
use seckill_core::{BucketId, OrderId, SaleId, UserId};
use seckill_tests::drivers::purchases::InFlight;
use seckill_tests::drivers::scripts::{self, Sale};
use seckill_tests::promise;

use super::{LATE_BUYERS, SETTLE_STEPS};

/// A purchase request in flight.
pub(super) struct Request {
    pub(super) id: u64,
    pub(super) buyer: u64,
    /// The units she asked for.
    pub(super) units: u32,
    pub(super) flight: InFlight,
    /// [`World::came_back`] when she pressed.
    pub(super) came_back: u64,
    /// [`World::steps`] when she pressed.
    pub(super) pressed: u64,
    /// An order of hers cancelled before she pressed that a bucket's "e:" record still
    /// names: that bucket answers already_ordered for it (known, not this explorer's).
    pub(super) stale_elsewhere: Option<OrderId>,
    /// What it asks of the sale's line: a press, a join, or a look.
    pub(super) ask: LineAsk,
    /// Whether its buyer held a purchase when it was made.
    pub(super) had: bool,
}

/// A give-back in flight of one bucket (a restock's).
pub(super) struct GiveBackRun {
    pub(super) what: String,
    pub(super) bucket: BucketId,
    pub(super) run: Returns,
    /// What it needs next.
    pub(super) io: returns::Io,
}

/// One schedule's world: the sale's buckets, the requests in flight, what was promised.
pub(super) struct World {
    /// A sale per bucket, the voucher first; the first's connection runs every command.
    pub(super) sales: Vec<Sale>,
    pub(super) buckets: Buckets,
    pub(super) stock: u64,
    /// The most units a buyer may hold: each asks for a number of her own up to it
    /// ([`World::units`]).
    pub(super) per_buyer: u64,
    /// What a buyer asks for since she heard fewer units were left: that many.
    pub(super) asking: HashMap<u64, u32>,
    pub(super) requests: Vec<Request>,
    /// (order id, buyer) of every 201 and every `already_ordered`.
    pub(super) told_order: Vec<(OrderId, u64)>,
    /// Times the buckets' Redis stock rose (a unit back from a cancellation, or from a
    /// purchase another bucket's order made void): a `sold_out` told before is no lie.
    pub(super) came_back: u64,
    /// The buckets' Redis stock together at the last check.
    pub(super) last_stock: i64,
    /// The opening draw, when the sale has one.
    pub(super) draw: Option<Draw>,
    /// The presses' limits.
    pub(super) limits: Limits,
    pub(super) next_request: u64,
    /// Steps played.
    pub(super) steps: u64,
    /// The step at which each cancelled order was cancelled.
    pub(super) dead: HashMap<OrderId, u64>,
    /// (order id, buyer, bucket) of the orders MySQL lost.
    pub(super) lost: Vec<(OrderId, u64, BucketId)>,
    /// Per bucket, whether it was marked all-out at the last check, and its Redis stock.
    pub(super) marks: Vec<(bool, i64)>,
    /// Buyers who pressed or joined (a request of theirs was made): only a look of theirs,
    /// or of one who held a purchase, may answer an order.
    pub(super) pressed: HashSet<u64>,
    /// Buyers who left the line with no request of theirs in flight and made none since,
    /// and whether the line had handed them units already then: it hands them nothing
    /// more.
    pub(super) left: HashMap<u64, bool>,
    /// The explorer's own connection to MySQL, for its reads: one a schedule, not one a
    /// read.
    pub(super) db: tokio::sync::Mutex<mysql_async::Conn>,
    pub(super) give_backs: Vec<GiveBackRun>,
    /// Each bucket's units at the sale's creation.
    pub(super) created: Vec<u64>,
    /// The units of each restock MySQL committed (`Step::Restock`).
    pub(super) restocks: Vec<u64>,
    /// The sale's own events MySQL wrote for them ([`World::read_sale_events`]), read
    /// after each: nothing else writes or removes them.
    pub(super) sale_events: Vec<(u64, u64, u8, u64)>,
    /// Whether restocked units were sold, and whether a restock reached a bucket by
    /// another run than its own give-back (a cancellation's, a sweep's).
    pub(super) restock_reached: (bool, bool),
    pub(super) log: Vec<String>,
}

/// What the explorer sees of a sale's opening draw.
pub(super) struct Draw {
    /// Redis's clock when the window closes.
    pub(super) at_ms: i64,
    /// Each entrant's place in the line and the units she asked for, as first seen there
    /// (neither ever changes).
    pub(super) places: HashMap<u64, (u64, u32)>,
    /// The entrants in line at the last check.
    pub(super) line: Vec<u64>,
}

pub(super) type Checked = Result<(), TestCaseError>;

/// One bucket as MySQL holds it.
#[derive(Debug)]
pub(super) struct Bucket {
    pub(super) id: u64,
    pub(super) initial: u64,
    pub(super) stock: u64,
    pub(super) live: u64,
}

impl World {
    pub(super) async fn new(stock: u64, buckets: u32, per_buyer: u64) -> World {
        let sales = Sale::live_buckets_per_buyer(stock as u32, buckets, per_buyer as u32).await;
        World::of(
            sales,
            stock,
            per_buyer,
            None,
            Limits::SHIPPED,
            format!("{stock} units in {buckets} buckets, {per_buyer} a buyer at most"),
        )
        .await
    }

    /// A sale of one bucket whose opening draw's window closes `window_left_ms` from now,
    /// each press handing units to at most `hand_out` entrants.
    pub(super) async fn drawing(
        stock: u64,
        window_left_ms: i64,
        per_buyer: u64,
        hand_out: i64,
    ) -> World {
        let sale = Sale::drawing_per_buyer(stock, window_left_ms, per_buyer).await;
        // The draw's time as the sale holds it: Redis's clock has moved on since the sale
        // was made from it (a loaded host, a few ms), and a window of a few ms with it.
        let mut conn = sale.conn.clone();
        let (begin_ms, draw_ms): (i64, i64) = redis::cmd("HMGET")
            .arg(sale.keys().voucher())
            .arg("begin_ms")
            .arg("draw_ms")
            .query_async(&mut conn)
            .await
            .unwrap();
        let draw = Draw {
            at_ms: begin_ms + draw_ms,
            places: HashMap::new(),
            line: Vec::new(),
        };
        let what = format!(
            "{stock} units, {per_buyer} a buyer at most, the draw's window closing in \
             {window_left_ms} ms, {hand_out} entrants a press"
        );
        let limits = Limits {
            draw_batch: hand_out,
            ..Limits::SHIPPED
        };
        World::of(vec![sale], stock, per_buyer, Some(draw), limits, what).await
    }

    async fn of(
        sales: Vec<Sale>,
        stock: u64,
        per_buyer: u64,
        draw: Option<Draw>,
        limits: Limits,
        what: String,
    ) -> World {
        let ids: Vec<BucketId> = sales.iter().map(|sale| sale.voucher).collect();
        let db = scripts::connect().await.unwrap();
        let mut world = World {
            buckets: Buckets::new(sales[0].sale(), &ids[1..]),
            sales,
            stock,
            per_buyer,
            asking: HashMap::new(),
            requests: Vec::new(),
            told_order: Vec::new(),
            came_back: 0,
            last_stock: stock as i64,
            limits,
            draw,
            next_request: 0,
            steps: 0,
            dead: HashMap::new(),
            lost: Vec::new(),
            marks: Vec::new(),
            pressed: HashSet::new(),
            left: HashMap::new(),
            db: tokio::sync::Mutex::new(db),
            give_backs: Vec::new(),
            created: Vec::new(),
            restocks: Vec::new(),
            sale_events: Vec::new(),
            restock_reached: (false, false),
            log: vec![what],
        };
        // Each bucket's units at the sale's creation.
        let buckets = world.mysql_buckets().await;
        world.created = buckets.iter().map(|b| b.initial).collect();
        world
    }

    /// The rows a query returns, on the explorer's connection.
    async fn query<T: FromRow + Send + 'static>(
        &self,
        sql: &str,
        params: impl Into<Params> + Send,
    ) -> Vec<T> {
        self.db.lock().await.exec(sql, params).await.unwrap()
    }

    pub(super) fn sale(&self) -> SaleId {
        self.buckets.sale()
    }

    /// The units buyer `buyer` asks for: 1 to the sale's limit, by buyer, or the units
    /// left she was told of last; the late buyers ask for one.
    pub(super) fn units(&self, buyer: u64) -> u32 {
        if buyer >= LATE_BUYERS {
            return 1;
        }
        self.asking
            .get(&buyer)
            .copied()
            .unwrap_or((1 + buyer % self.per_buyer) as u32)
    }

    /// The bucket and record of the buyer's purchase, queued or committed, in any bucket.
    pub(super) async fn held_by(&self, buyer: u64) -> Option<(BucketId, String)> {
        for sale in &self.sales {
            let record: Option<String> = sale
                .conn
                .clone()
                .hget(sale.keys().buyers(), buyer)
                .await
                .unwrap();
            if let Some(record) = record.filter(|r| ["q:", "o:", "e:"].contains(&&r[..2])) {
                return Some((sale.voucher, record));
            }
        }
        None
    }

    /// An order of the buyer's cancelled before now that a bucket's "e:" record names.
    pub(super) async fn stale_elsewhere(&self, user: UserId) -> Option<OrderId> {
        for sale in &self.sales {
            let record = sale.raw_record(user).await;
            let named = record
                .as_deref()
                .and_then(|record| record.strip_prefix("e:"))
                .and_then(|id| id.parse().ok())
                .map(OrderId::from_raw);
            if let Some(order) = named.filter(|order| self.dead.contains_key(order)) {
                return Some(order);
            }
        }
        None
    }

    /// The bucket whose stock the order took, if MySQL holds it.
    pub(super) async fn bucket_of(&self, order: OrderId) -> Option<BucketId> {
        let bucket = self
            .orders()
            .await
            .into_iter()
            .find(|o| o.0 == order.raw())
            .map(|o| o.2);
        bucket.map(BucketId::from_raw)
    }

    pub(super) async fn redis_stock(&self) -> i64 {
        let mut total = 0;
        for sale in &self.sales {
            total += sale.stock().await.unwrap_or(0);
        }
        total
    }

    /// How many wait in the sales' lines: units left may be theirs (docs/design.md, "The
    /// line").
    pub(super) async fn in_line(&self) -> u64 {
        let mut total = 0;
        for sale in &self.sales {
            total += sale.line_length().await;
        }
        total
    }

    pub(super) async fn mysql_buckets(&self) -> Vec<Bucket> {
        let rows: Vec<(u64, u64, u64, u64)> = self
            .query(
                "SELECT v.voucher_id, v.initial_stock, v.stock, \
                   CAST((SELECT COALESCE(SUM(o.quantity), 0) FROM tb_voucher_order o \
                     WHERE o.voucher_id = v.voucher_id AND o.status NOT IN (4, 7)) AS UNSIGNED) \
                 FROM tb_seckill_voucher v WHERE v.sale_id = ? ORDER BY v.voucher_id",
                (self.sale().raw(),),
            )
            .await;
        rows.into_iter()
            .map(|(id, initial, stock, live)| Bucket {
                id,
                initial,
                stock,
                live,
            })
            .collect()
    }

    /// The sale's own events in MySQL, in id order: (event, bucket, type, units) of each
    /// sale.restocked (5) and sale.changed (6).
    pub(super) async fn read_sale_events(&self) -> Vec<(u64, u64, u8, u64)> {
        let rows = self
            .query(
                "SELECT e.id, e.voucher_id, e.type, COALESCE(e.units, 0) FROM tb_order_event e \
                 JOIN tb_seckill_voucher s ON s.voucher_id = e.voucher_id \
                 WHERE s.sale_id = ? AND e.type IN (5, 6) AND e.order_id = 0 \
                 AND e.user_id = 0 ORDER BY e.id",
                (self.sale().raw(),),
            )
            .await;
        rows
    }

    /// Each bucket's last return (a cancellation's, an expiry's, a restock's) in MySQL.
    pub(super) async fn last_returns(&self) -> HashMap<u64, u64> {
        let rows: Vec<(u64, u64)> = self
            .query(
                "SELECT e.voucher_id, MAX(e.id) FROM tb_order_event e \
                 JOIN tb_seckill_voucher s ON s.voucher_id = e.voucher_id \
                 WHERE s.sale_id = ? AND e.type IN (3, 4, 5) GROUP BY e.voucher_id",
                (self.sale().raw(),),
            )
            .await;
        rows.into_iter().collect()
    }

    /// The sale's orders in MySQL: (order id, buyer, bucket, status).
    pub(super) async fn orders(&self) -> Vec<(u64, u64, u64, u8)> {
        let rows = self
            .query(
                "SELECT id, user_id, voucher_id, status FROM tb_voucher_order WHERE sale_id = ?",
                (self.sale().raw(),),
            )
            .await;
        rows
    }

    /// Every request in flight runs to its answer, the leases of dead ones lapsing.
    pub(super) async fn run_all(&mut self) -> Checked {
        let mut steps = 0;
        while !self.requests.is_empty() {
            steps += 1;
            promise!(
                self,
                steps <= SETTLE_STEPS,
                "livelock: {} requests",
                self.requests.len()
            );
            self.proceed(steps % self.requests.len(), false).await?;
            self.check().await?;
            if steps % 50 == 0 {
                for sale in &self.sales {
                    sale.expire_lease().await;
                }
            }
        }
        Ok(())
    }

    /// Whether a bucket's Redis has not applied its last return in MySQL.
    async fn returns_pending(&self) -> bool {
        let last = self.last_returns().await;
        for sale in &self.sales {
            let mark = sale.voucher_field("returned_event").await.unwrap_or(0);
            if last
                .get(&sale.voucher.raw())
                .is_some_and(|&event| event > mark as u64)
            {
                return true;
            }
        }
        false
    }

    /// Buyers press again a while later: the all-out marks, the sightings behind them and
    /// the leases of dead requests have lapsed by then. A mark lasts longest
    /// (`ALL_OUT_MS`): units a cancellation or a sweep gives back reopen every bucket at
    /// once (checked as they come back), and this is the bound for those that come back
    /// otherwise (a publication's give-back, an audit's).
    pub(super) async fn a_while_later(&mut self) {
        for sale in &self.sales {
            // The buckets' sightings of each other sold out lapse before the marks: a press
            // then weighs none of them.
            let stale = [sale.keys().all_out(), sale.keys().seen_out()];
            let _: () = sale.conn.clone().del(&stale).await.unwrap();
            sale.expire_lease().await;
        }
        self.log.push("a while later".into());
    }

    /// Every bucket sweeps, as the presses of a quiet sale do once their audits are due;
    /// only once MySQL lost an order or a bucket has a return it has not applied (a
    /// restock whose reply was lost): nothing else here leaves a sweep anything to do, no
    /// deadline passing, which keeps the other schedules as quick as before.
    pub(super) async fn sweep_all(&mut self) -> Checked {
        if self.lost.is_empty() && !self.returns_pending().await {
            return Ok(());
        }
        for n in 0..self.sales.len() {
            self.sweep(n).await;
        }
        self.check().await
    }
}
