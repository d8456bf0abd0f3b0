use std::collections::{HashMap, HashSet};

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Conn, Params};
use proptest::test_runner::TestCaseError;
use redis::AsyncCommands;

use seckill_core::purchase::{Input, Io, Lookup, Receipt};
use seckill_core::returns::{self, Returns};
use seckill_core::sale::{Entry, Installer, Limits, LineAsk, Record, Terms, MAX_QUEUED};
use seckill_core::sql::Status;
use seckill_core::sync::{self, Phase as SyncPhase, VoucherSync};
use seckill_core::verdict::Committing;
use seckill_core::{ApiError, BackendError, BucketId, OrderId, UserId};
use seckill_tests::drivers::purchases::{self, InFlight};
use seckill_tests::drivers::scripts::{self, Sale};
use seckill_tests::promise;
use seckill_tests::servers::faults::RedisServer;

use super::{END_SOON_MS, SETTLE_STEPS};

/// Where the sale stands in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    NotStarted,
    Live,
    /// Live, ending [`END_SOON_MS`] after it was set: it ends on its own mid-schedule.
    EndingSoon,
    Ended,
}

pub(super) type Answer = Result<Receipt, ApiError>;

/// A purchase request in flight.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) id: u64,
    pub(super) buyer: u64,
    pub(super) flight: InFlight,
    /// The units it asked for.
    pub(super) units: u32,
    /// Redis losses (flushes and rollbacks) before the batch in its hands was read.
    pub(super) batch_epoch: u64,
    /// Whether Redis knew every order, and the disturbances so far, at its admission:
    /// an answer of admission's own stands for that moment.
    pub(super) decided: (bool, u64),
    /// Whether the buyer heard her `201` already: the component answers as soon as
    /// MySQL committed her order, before its batch's publication (`Purchase::receipt`).
    pub(super) heard: bool,
    /// What it asks of the sale's line: a press, a join, or a look.
    pub(super) ask: LineAsk,
    /// Whether its buyer had joined the line, or held a purchase, when it began: only
    /// then may a look answer an order.
    pub(super) had: bool,
}

impl Request {
    pub(super) fn waits_on(&self, what: impl Fn(&Io) -> bool) -> bool {
        what(&self.flight.io)
    }
}

/// A sync in flight: the component's own sync, and what the explorer knows of the world
/// when it began.
#[derive(Debug)]
pub(super) struct SyncRun {
    pub(super) sync: VoucherSync,
    /// What it needs next.
    pub(super) io: sync::Io,
    /// Redis losses before it began: a sync from before the last loss restores nothing.
    pub(super) epoch: u64,
    /// Whether, when it began, no drainer could still commit a batch read before the
    /// last loss: then the orders it stages are all the orders Redis lost.
    pub(super) clean: bool,
}

/// A give-back in flight that is no purchase's: a cancellation's restock, or an admin's
/// sweep.
#[derive(Debug)]
pub(super) struct GiveBackRun {
    pub(super) what: String,
    pub(super) run: Returns,
    /// What it needs next.
    pub(super) io: returns::Io,
}

impl SyncRun {
    /// Whether it has merged its last page: only then does it install the terms.
    pub(super) fn staged_all(&self) -> bool {
        *self.sync.phase() == SyncPhase::Loading
    }
}

/// The units buyer `buyer` asks for after `losses` Redis losses: 1 to `per_buyer`, by
/// buyer, so that buyers asking for more than one meet buyers asking for one, and another
/// quantity after each loss, so that a buyer whose order Redis forgot asks for more or
/// fewer units than that order holds (a `duplicate`'s give-back then has units to give).
/// The late buyers of the quiet phase (100 on) ask for one, to sell the last unit.
pub(super) fn units_asked(buyer: u64, losses: u64, per_buyer: u64) -> u32 {
    if buyer >= 100 {
        return 1;
    }
    (1 + (buyer + losses) % per_buyer) as u32
}

/// One schedule's world: the real servers, the requests in flight and what the sale has
/// promised so far.
pub(super) struct World {
    pub(super) sale: Sale,
    /// For the explorer's own reads of MySQL.
    pub(super) db: Conn,
    pub(super) initial: u64,
    pub(super) buyers: u64,
    /// The most units a buyer may hold: each buyer of the schedule asks for a number of
    /// her own up to it ([`World::units`]).
    pub(super) per_buyer: u64,
    pub(super) limits: Limits,
    phase: Phase,
    begin_ms: i64,
    end_ms: i64,
    pub(super) requests: Vec<Request>,
    pub(super) syncs: Vec<SyncRun>,
    pub(super) give_backs: Vec<GiveBackRun>,
    /// (order id, buyer) of every 201 and every `already_ordered`: MySQL holds them
    /// from then on.
    pub(super) told_order: Vec<(OrderId, u64)>,
    /// (buyer, disturbances then) of every `sold_out` and `ended` told while Redis knew
    /// every order: she never holds an order later, unless something disturbed the sale.
    pub(super) told_final: Vec<(u64, u64)>,
    /// What each request that ended answered, by request id.
    pub(super) answers: HashMap<u64, Answer>,
    /// Orders a payment or a cancellation was answered for (a 200): paid or cancelled for
    /// good.
    pub(super) told_settled: Vec<(OrderId, Status)>,
    /// The units MySQL had given back, and the last return event Redis had applied, at
    /// the last check.
    pub(super) returned: (u64, u64),
    /// Every purchase admitted (by a press whose reply was not lost).
    pub(super) admitted: Vec<Entry>,
    /// Purchases admitted before time last moved on by a payment window (`Step::Due`):
    /// their orders' deadlines have passed, including those committed or published
    /// later. The explorer moves deadlines rather than the clock.
    pub(super) passed: Vec<Entry>,
    /// Where the clock jumped to when time last moved on (unix seconds).
    pub(super) passed_s: Option<i64>,
    /// Redis losses: flushes and rollbacks.
    pub(super) losses: u64,
    /// Events that may hand out a unit after a `sold_out` was right: Redis losing data,
    /// a ticket handed out again (its purchase holds a unit it will give back), and a
    /// unit given back for an `id_taken` order id.
    pub(super) disturbances: u64,
    /// Whether Redis holds the voucher's sale: `Some(false)` from a flush until a sync
    /// that began after it finishes; `None` after a rollback (the snapshot may hold it,
    /// and a publication may find it behind MySQL).
    pub(super) loaded: Option<bool>,
    /// Whether Redis knows every order: false from a loss until a clean sync finishes. A
    /// drainer holding a batch read before the loss may commit it after a sync read
    /// MySQL; Redis learns that order only from a sync that began after such drainers.
    pub(super) recovered: bool,
    /// Whether a sync installed MySQL's stock: Redis may be too generous from then on.
    pub(super) synced: bool,
    /// Orders MySQL lost after committing them (`Step::MysqlLoses`): until the heal of a
    /// sweep (or their queued purchase's next commit) puts them back, they may be told
    /// and missing, and Redis may hold fewer units than MySQL.
    pub(super) lost_orders: HashSet<OrderId>,
    /// Lost orders that can no longer come back, as docs/operations.md says: Redis lost
    /// their records too, or a sync handed MySQL's freed units out again.
    pub(super) forgiven: HashSet<OrderId>,
    /// Every key of the private Redis at the last snapshot, with its TTL.
    pub(super) snapshot: Option<Vec<(String, Vec<u8>, i64)>>,
    pub(super) next_request: u64,
    /// The ticket of the last admission.
    pub(super) last_admitted: Option<Entry>,
    /// Every ticket admission handed out.
    pub(super) tickets: HashSet<(i64, i64)>,
    tokens: u64,
    /// Buyers who ever joined the sale's line (a join ran its admission).
    pub(super) joined: HashSet<u64>,
    /// Buyers whose leave of the line completed and who have not joined since, with the
    /// Redis losses then and whether the line had handed her units already: the line
    /// hands her nothing more (a rollback may bring her place back).
    pub(super) left: HashMap<u64, (u64, bool)>,
    /// The units of each restock MySQL committed (`Step::Restock`): each a sale.changed
    /// event, and its units a sale.restocked one.
    pub(super) restocks: Vec<u64>,
    /// Their sale.restocked events (event, units), read after each: nothing else writes
    /// or removes them.
    pub(super) restock_events: Vec<(u64, u64)>,
    /// Each restock event restock.lua applied, with the Redis losses and rollbacks then.
    pub(super) applied: HashMap<u64, (u64, u64)>,
    /// Redis restarts from a snapshot.
    pub(super) rollbacks: u64,
    /// Whether restock.lua applied a restock again to the Redis that had applied it (its
    /// mark moved back), and again after a rollback took it back.
    pub(super) restocked_again: (bool, bool),
    pub(super) log: Vec<String>,
}

pub(super) type Checked = Result<(), TestCaseError>;

pub(super) fn user(buyer: u64) -> UserId {
    UserId::from_raw(buyer)
}

/// A schedule's sale: its units, buyers, batches, phase at the start, and the most units
/// a buyer may hold.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub(super) stock: u64,
    pub(super) buyers: u64,
    pub(super) batch: i64,
    pub(super) phase: Phase,
    pub(super) per_buyer: u64,
}

impl World {
    pub(super) async fn new(
        redis: &RedisServer,
        Shape {
            stock,
            buyers,
            batch,
            phase,
            per_buyer,
        }: Shape,
    ) -> World {
        let voucher = scripts::create_per_buyer(stock as u32, 1, 0, per_buyer as u32, -60, 3600)
            .await
            .sale();
        let db = scripts::connect().await.unwrap();
        let sale = Sale {
            conn: redis.conn().await,
            voucher: voucher.first_bucket(),
        };
        // Nothing of an earlier schedule (an order sequence set back, say) carries over.
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut sale.conn.clone())
            .await
            .unwrap();
        let mut world = World {
            sale,
            db,
            initial: stock,
            buyers,
            per_buyer,
            limits: Limits {
                batch,
                max_queued: MAX_QUEUED,
                ..Limits::SHIPPED
            },
            phase,
            begin_ms: 0,
            end_ms: 0,
            requests: Vec::new(),
            syncs: Vec::new(),
            give_backs: Vec::new(),
            told_order: Vec::new(),
            lost_orders: HashSet::new(),
            forgiven: HashSet::new(),
            told_final: Vec::new(),
            answers: HashMap::new(),
            told_settled: Vec::new(),
            returned: (0, 0),
            admitted: Vec::new(),
            passed: Vec::new(),
            passed_s: None,
            losses: 0,
            disturbances: 0,
            loaded: Some(true),
            recovered: true,
            synced: false,
            snapshot: None,
            next_request: 0,
            last_admitted: None,
            tickets: HashSet::new(),
            tokens: 0,
            joined: HashSet::new(),
            left: HashMap::new(),
            restocks: Vec::new(),
            restock_events: Vec::new(),
            applied: HashMap::new(),
            rollbacks: 0,
            restocked_again: (false, false),
            log: vec![format!(
                "voucher with {stock} units, {per_buyer} a buyer at most, batches of {batch}, \
                 {phase:?}"
            )],
        };
        world.set_window(phase).await;
        // As `POST /vouchers` does.
        let terms = world.terms(stock);
        assert!(world
            .sale
            .finish_load(Installer::Creation, &terms)
            .await
            .unwrap());
        world
    }

    pub(super) fn terms(&self, stock: u64) -> Terms {
        Terms {
            stock,
            begin_ms: self.begin_ms,
            end_ms: self.end_ms,
            initial_stock: self.initial,
            title: "sql test".into(),
            description: String::new(),
            pay_within_s: 900,
            draw_ms: 0,
            per_buyer: self.per_buyer,
            announce_ms: 0,
        }
    }

    /// The units buyer `buyer` asks for, each press: [`units_asked`] after the Redis
    /// losses so far.
    pub(super) fn units(&self, buyer: u64) -> u32 {
        units_asked(buyer, self.losses, self.per_buyer)
    }

    /// A press of `buyer`, for her units.
    pub(super) fn flight(&self, buyer: u64) -> InFlight {
        self.asking(buyer, LineAsk::Press)
    }

    /// What `buyer` asks of the sale (a press, or a join or a look of its line), for her
    /// units.
    pub(super) fn asking(&self, buyer: u64, ask: LineAsk) -> InFlight {
        InFlight::in_line_with(
            self.sale.sale(),
            user(buyer),
            self.units(buyer),
            self.limits,
            ask,
        )
    }

    /// Whether `buyer` waits in the sale's line.
    pub(super) async fn in_line(&self, buyer: u64) -> bool {
        let members = self.sale.line_members().await;
        members.iter().any(|&(member, ..)| member == buyer)
    }

    /// Whether the line handed `buyer` units she has not heard of yet (the sale's
    /// `drawn`).
    pub(super) async fn handed_unheard(&self, buyer: u64) -> bool {
        self.sale.handed_unheard(user(buyer)).await
    }

    /// Puts the sale window where `phase` says, by Redis's clock (which admission
    /// decides by), in Redis's sale state when it has one and in the terms a sync installs.
    pub(super) async fn set_window(&mut self, phase: Phase) {
        let now = self.sale.now_ms().await;
        let (begin_ms, end_ms) = match phase {
            Phase::NotStarted => (now + 3_600_000, now + 7_200_000),
            Phase::Live => (now - 60_000, now + 3_600_000),
            Phase::EndingSoon => (now - 60_000, now + END_SOON_MS),
            Phase::Ended => (now - 7_200_000, now - 1),
        };
        self.phase = phase;
        (self.begin_ms, self.end_ms) = (begin_ms, end_ms);
        self.window_to_redis().await;
    }

    /// The window in Redis's sale state, when it has one. The explorer moves the window
    /// rather than the clock, so a snapshot restored must not bring an old one back.
    pub(super) async fn window_to_redis(&mut self) {
        let key = self.sale.keys().voucher();
        let mut conn = self.sale.conn.clone();
        if conn.exists(&key).await.unwrap() {
            let window = [("begin_ms", self.begin_ms), ("end_ms", self.end_ms)];
            let _: () = conn.hset_multiple(&key, &window).await.unwrap();
        }
    }

    /// The phase the sale is in now: one ending soon has ended once its end passed.
    pub(super) async fn phase_now(&mut self) -> Phase {
        if self.phase == Phase::EndingSoon && self.sale.now_ms().await >= self.end_ms {
            self.phase = Phase::Ended;
        }
        self.phase
    }

    pub(super) fn token(&mut self) -> String {
        self.tokens += 1;
        format!("t{}", self.tokens)
    }

    /// Lost orders MySQL lacks now can no longer come back once Redis loses their records
    /// or a sync hands MySQL's freed units out again. Returns whether it forgave one it had
    /// not yet: its unit is for sale again.
    pub(super) async fn forgive_lost_orders(&mut self) -> bool {
        let held = self.lost_orders_missing().await;
        let before = self.forgiven.len();
        self.forgiven.extend(held);
        self.forgiven.len() > before
    }

    /// The lost orders MySQL lacks now.
    /// The units an order of this schedule holds: its purchase's.
    pub(super) fn units_of_order(&self, order: OrderId) -> u64 {
        self.admitted
            .iter()
            .find(|entry| entry.ticket.order_id() == Ok(order))
            .map_or(1, |entry| u64::from(entry.ticket.units()))
    }

    pub(super) async fn lost_orders_missing(&mut self) -> Vec<OrderId> {
        if self.lost_orders.is_empty() {
            return Vec::new();
        }
        let held: HashSet<OrderId> = self
            .orders()
            .await
            .into_iter()
            .map(|(order, _, _)| order)
            .collect();
        self.lost_orders
            .iter()
            .copied()
            .filter(|order| !held.contains(order))
            .collect()
    }

    pub(super) fn now(&self) -> (bool, u64) {
        (self.recovered, self.disturbances)
    }

    /// Runs an I/O on the real servers. MySQL is up in the model (its failures are steps
    /// of their own), but other suites share it: a deadlock or lock wait that outlasted
    /// the procedure's tries is a failed try, as the component sees it. Any other error
    /// fails the schedule.
    pub(super) async fn perform(&mut self, i: usize, io: &Io) -> Result<Input, TestCaseError> {
        let purchase = &self.requests[i].flight.purchase;
        Ok(match io {
            Io::Commit(batch) => commit(purchase.bucket(), batch)
                .await
                .map_err(TestCaseError::fail)?,
            io => purchases::perform(&self.sale, purchase, io).await,
        })
    }

    /// Resumes the i-th request with `input`, and ends it if it answered.
    pub(super) async fn resume(&mut self, i: usize, input: Input) -> Checked {
        let before = self.requests[i]
            .flight
            .purchase
            .drain()
            .map(|(_, batch)| batch.to_vec());
        // A sweep over, the request drains the batch its admission read before it.
        let swept = matches!(self.requests[i].flight.io, Io::Sweep(_));
        self.requests[i].flight.resume(input);
        let after = self.requests[i]
            .flight
            .purchase
            .drain()
            .map(|(_, batch)| batch.to_vec());
        if after.is_some() && after != before && !swept {
            self.requests[i].batch_epoch = self.losses;
        }
        self.early_answer(i).await?;
        self.ended(i).await
    }

    /// Performs the sync's next I/O. The window of the terms it reads is the explorer's,
    /// which moves the window rather than the clock; the stock is MySQL's. Returns what
    /// the sync asks next.
    pub(super) async fn sync_step(&mut self, run: &mut SyncRun) -> Result<(), TestCaseError> {
        let input = match &run.io {
            sync::Io::ReadVoucher => {
                let lookup = scripts::lookup(self.sale.voucher).await;
                promise!(self, lookup.is_ok(), "a sync's read failed: {lookup:?}");
                let lookup = lookup.unwrap();
                // MySQL's initial stock as read: it counts the restocks up to the mark
                // read with it, and restock.lua those after.
                let (stock, initial_stock) = lookup
                    .terms
                    .as_ref()
                    .map_or((0, 0), |terms| (terms.stock, terms.initial_stock));
                sync::Input::Voucher(Ok(Lookup {
                    terms: Some(Terms {
                        initial_stock,
                        ..self.terms(stock)
                    }),
                    ..lookup
                }))
            }
            sync::Io::BuyersPage { after, limit } => sync::Input::Page(
                scripts::buyers_page(&mut self.db, self.sale.voucher, *after, *limit).await,
            ),
            sync::Io::Redis(command) => {
                let reply = self.sale.run(command).await;
                promise!(self, reply.is_ok(), "a sync's Redis call failed: {reply:?}");
                sync::Input::Redis(Ok(reply.unwrap()))
            }
            sync::Io::Answer(_) => return Ok(()),
        };
        run.io = run.sync.resume(input);
        Ok(())
    }

    /// Every request in flight runs to its end, as the component would run it; a lease
    /// whose holder died lapses.
    pub(super) async fn settle_all(&mut self) -> Checked {
        for _ in 0..SETTLE_STEPS {
            if self.requests.is_empty() {
                return Ok(());
            }
            // Drainers first, then waiters with news: a waiter that claims finds only
            // the lease of a request that died, which then lapses.
            let mut next = self.requests.iter().position(|r| {
                r.flight.purchase.is_draining() || matches!(r.flight.io, Io::Sweep(_))
            });
            for (i, request) in self.requests.iter().enumerate() {
                if next.is_some() {
                    break;
                }
                let has_news = match request.flight.purchase.queued() {
                    Some(entry) => !self.sale.news(entry).await.is_empty(),
                    None => true,
                };
                if has_news {
                    next = Some(i);
                }
            }
            if self.proceed(next.unwrap_or(0)).await? {
                self.sale.expire_lease().await;
                self.log
                    .push("the lease of a drainer that died lapses".into());
            }
            self.check().await?;
        }
        promise!(
            self,
            false,
            "requests still in flight after {SETTLE_STEPS} steps: {:?}",
            self.requests
        );
        Ok(())
    }

    /// The rows a query returns, on the explorer's connection.
    pub(super) async fn query<T: FromRow + Send + 'static>(
        &mut self,
        sql: &str,
        params: impl Into<Params> + Send,
    ) -> Vec<T> {
        self.db.exec(sql, params).await.unwrap()
    }

    /// The units of the purchases Redis holds queued (`q:` records).
    pub(super) async fn queued(&self) -> u64 {
        let records = self.sale.records().await;
        records
            .iter()
            .filter_map(|(_, r)| match r {
                Record::Queued(ticket) => Some(u64::from(ticket.units())),
                _ => None,
            })
            .sum()
    }

    /// MySQL's (stock, initial stock).
    pub(super) async fn mysql_state(&mut self) -> (u64, u64) {
        let voucher = self.sale.voucher.raw();
        self.query(
            "SELECT stock, initial_stock FROM tb_seckill_voucher WHERE voucher_id = ?",
            (voucher,),
        )
        .await[0]
    }

    /// (order id, buyer, status) of every order of the voucher.
    pub(super) async fn orders(&mut self) -> Vec<(OrderId, u64, Status)> {
        let voucher = self.sale.voucher.raw();
        let rows: Vec<(u64, u64, u64)> = self
            .query(
                "SELECT id, user_id, status FROM tb_voucher_order WHERE voucher_id = ?",
                (voucher,),
            )
            .await;
        rows.into_iter()
            .map(|(order, buyer, status)| {
                let status = Status::of(status).expect("a known status");
                (OrderId::from_raw(order), buyer, status)
            })
            .collect()
    }

    /// The buyer's order of the voucher and its status.
    pub(super) async fn holding(&mut self, buyer: u64) -> Option<(OrderId, Status)> {
        let orders = self.orders().await;
        orders
            .into_iter()
            .find(|(_, b, _)| *b == buyer)
            .map(|(order, _, status)| (order, status))
    }

    /// The last return event Redis's sale applied.
    pub(super) async fn returned_mark(&self) -> u64 {
        let mark: Option<u64> = self.sale.voucher_get("returned_event").await;
        mark.unwrap_or(0)
    }

    /// The voucher's units MySQL gave back after the event `mark`, each return its
    /// order's, and those restocks added.
    pub(super) async fn returns_after(&mut self, mark: u64) -> u64 {
        let voucher = self.sale.voucher.raw();
        self.query(
            "SELECT CAST(COALESCE(SUM(COALESCE(e.units, o.quantity)), 0) AS UNSIGNED) \
             FROM tb_order_event e LEFT JOIN tb_voucher_order o ON o.id = e.order_id \
             WHERE e.voucher_id = ? AND e.type IN (3, 4, 5) AND e.id > ?",
            (voucher, mark),
        )
        .await[0]
    }

    /// The voucher's restock events in MySQL: (event, units).
    pub(super) async fn read_restock_events(&mut self) -> Vec<(u64, u64)> {
        let voucher = self.sale.voucher.raw();
        self.query(
            "SELECT id, units FROM tb_order_event WHERE voucher_id = ? AND type = 5 \
             ORDER BY id",
            (voucher,),
        )
        .await
    }

    /// The units of the voucher's restocks after the event `mark`.
    pub(super) fn restocks_after(&self, mark: u64) -> u64 {
        let after = self
            .restock_events
            .iter()
            .filter(|&&(event, _)| event > mark);
        after.map(|&(_, units)| units).sum()
    }

    /// The buyer's order of the voucher.
    pub(super) async fn order_of(&mut self, buyer: u64) -> Option<OrderId> {
        scripts::order_of(&mut self.db, UserId::from_raw(buyer), self.sale.sale())
            .await
            .unwrap()
    }
}

/// A group commit on a connection of its own. A deadlock or lock wait (other suites share
/// the server) is a failed try; any other error is a bug.
pub(super) async fn commit(voucher: BucketId, batch: &[Committing]) -> Result<Input, String> {
    match scripts::commit_batch(voucher, batch).await {
        Ok(committed) => Ok(Input::Committed(Ok(committed))),
        Err(mysql_async::Error::Server(error)) if [1205, 1213].contains(&error.code) => {
            Ok(Input::Committed(Err(BackendError::Mysql(error.message))))
        }
        Err(error) => Err(format!("CALL failed: {error}")),
    }
}
