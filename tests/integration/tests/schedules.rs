//! The schedule explorer: random interleavings of purchases, deaths, expiries, admin
//! syncs, Redis losing everything and failing creations, run step by step against the
//! real scripts (a private `redis-server`, so it may be flushed) and the real stored
//! procedures (the shared MariaDB, a fresh voucher per case), with every promise of the
//! README checked after each step and again once the sale is quiet.
//!
//! A step names what it acts on by position (the n-th purchase in flight, the n-th
//! sync) and does nothing when there is nothing there, so every schedule is valid and
//! proptest shrinks a failure to a short one by dropping steps.
//!
//! `SCHEDULE_CASES` sets the number of schedules (CI: the default below); the soak is
//! `SCHEDULE_CASES=20000 cargo test -p seckill-tests --release --test schedules -- --nocapture`.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::Params;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use seckill_tests::faults::{Persistence, RedisServer};
use seckill_tests::scripts::{self, Admission, Sale, Terms, LONG_TTL};

const DEFAULT_CASES: u32 = 300;
/// Buyers of a schedule: few, so that they meet each other.
const BUYERS: u64 = 3;
/// Rows a sync reads from MySQL per page: small, so syncs take several steps.
const SYNC_PAGE: usize = 2;

#[derive(Debug, Clone)]
enum Step {
    /// A buyer presses "buy": admission runs.
    Admit {
        buyer: u64,
    },
    /// The n-th admitted purchase runs its `CALL`.
    Call {
        n: usize,
    },
    /// The n-th purchase's `CALL` commits (or not) but its reply is lost: undo.
    CallLost {
        n: usize,
    },
    /// The n-th admitted purchase cannot reach MySQL: undo.
    MysqlDown {
        n: usize,
    },
    /// The n-th purchase that has MySQL's answer settles it in Redis and answers.
    Settle {
        n: usize,
    },
    /// The n-th purchase in flight dies where it stands.
    Die {
        n: usize,
    },
    /// A buyer's lock and reservation outlive their TTL.
    Expire {
        buyer: u64,
    },
    /// An admin sync: reads the voucher, then stages a page, then swaps it in.
    SyncBegin {
        n: usize,
    },
    SyncStage {
        n: usize,
    },
    SyncFinish {
        n: usize,
    },
    /// A whole sync in one step.
    Sync,
    /// Redis restarts without persistence.
    Flush,
    /// A voucher creation whose Redis load reply is lost: MySQL's row is deleted again.
    CreateFails,
}

fn step() -> impl Strategy<Value = Step> {
    let buyer = 1..=BUYERS;
    let n = 0..4usize;
    prop_oneof![
        4 => buyer.clone().prop_map(|buyer| Step::Admit { buyer }),
        3 => n.clone().prop_map(|n| Step::Call { n }),
        1 => n.clone().prop_map(|n| Step::CallLost { n }),
        1 => n.clone().prop_map(|n| Step::MysqlDown { n }),
        3 => n.clone().prop_map(|n| Step::Settle { n }),
        2 => n.clone().prop_map(|n| Step::Die { n }),
        2 => buyer.prop_map(|buyer| Step::Expire { buyer }),
        1 => (0..2usize).prop_map(|n| Step::SyncBegin { n }),
        1 => (0..2usize).prop_map(|n| Step::SyncStage { n }),
        1 => (0..2usize).prop_map(|n| Step::SyncFinish { n }),
        1 => Just(Step::Sync),
        1 => Just(Step::Flush),
        1 => Just(Step::CreateFails),
    ]
}

/// How MySQL ended a purchase, as `src/db.rs` reads it.
#[derive(Debug, Clone, PartialEq)]
enum Called {
    Ordered,
    AlreadyOrdered(u64),
    SoldOut,
    IdTaken,
    /// No answer: MySQL unreachable, or the reply was lost.
    Failed,
}

/// A purchase in flight.
#[derive(Debug)]
struct Attempt {
    buyer: u64,
    token: String,
    order_id: u64,
    called: Option<Called>,
    /// Flushes before its admission.
    epoch: u64,
}

/// A sync in flight: what it read from MySQL and how far it has staged.
#[derive(Debug)]
struct SyncRun {
    token: String,
    stock: i64,
    begin_ms: i64,
    end_ms: i64,
    after: u64,
    /// Whether it has read a short page, the last: only then does it finish.
    staged_all: bool,
    /// Counted in flushes: a sync that began before the last flush does not restore Redis.
    epoch: u64,
    /// Whether no purchase admitted before the last flush was in flight when it began.
    clean: bool,
}

/// What a buyer was told.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Created(u64),
    AlreadyOrdered(u64),
    SoldOut,
    Busy,
    Throttled,
    Unavailable,
}

/// One schedule's world: the real servers and what the sale has promised so far.
struct World {
    sale: Sale,
    initial: u64,
    begin_ms: i64,
    end_ms: i64,
    attempts: Vec<Attempt>,
    syncs: Vec<SyncRun>,
    /// (order id, buyer) of every 201.
    acknowledged: Vec<(u64, u64)>,
    flushes: u64,
    /// Whether Redis holds the voucher's state: false from a flush until a sync that
    /// began after it finishes.
    loaded: bool,
    /// Whether Redis knows every order: false from a flush until a sync that began after
    /// every purchase in flight at the flush had ended (the README's second sync).
    recovered: bool,
    tokens: u64,
    log: Vec<String>,
}

type Checked = Result<(), TestCaseError>;

macro_rules! promise {
    ($world:expr, $cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!(
                "{}\nsteps and answers:\n  {}",
                format!($($why)+),
                $world.log.join("\n  ")
            )));
        }
    };
}

impl World {
    async fn new(redis: &RedisServer, stock: u64) -> World {
        let voucher = scripts::create_voucher(stock as u32, -60, 3600).await;
        let sale = Sale {
            conn: redis.conn().await,
            voucher,
        };
        let (begin_ms, end_ms) = window(voucher).await;
        let world = World {
            sale,
            initial: stock,
            begin_ms,
            end_ms,
            attempts: Vec::new(),
            syncs: Vec::new(),
            acknowledged: Vec::new(),
            flushes: 0,
            loaded: true,
            recovered: true,
            tokens: 0,
            log: vec![format!("voucher with {stock} units")],
        };
        // As `POST /vouchers` does.
        world.sale.load(stock as i64, begin_ms, end_ms, &[]).await;
        world
    }

    fn token(&mut self) -> String {
        self.tokens += 1;
        format!("t{}", self.tokens)
    }

    async fn run(&mut self, step: &Step) -> Checked {
        match *step {
            Step::Admit { buyer } => {
                let answer = self.admit(buyer).await?;
                if let Some(answer) = answer {
                    self.log
                        .push(format!("buyer {buyer} admission: {answer:?}"));
                    self.check_answer(buyer, &answer).await?;
                }
            }
            Step::Call { n } => {
                if let Some(i) = self.nth(n, |a| a.called.is_none()) {
                    let a = &self.attempts[i];
                    let called = call(a.order_id, a.buyer, self.sale.voucher).await;
                    self.log
                        .push(format!("buyer {} {}: {called:?}", a.buyer, a.token));
                    self.attempts[i].called = Some(called);
                }
            }
            Step::CallLost { n } => {
                if let Some(i) = self.nth(n, |a| a.called.is_none()) {
                    let a = &self.attempts[i];
                    let called = call(a.order_id, a.buyer, self.sale.voucher).await;
                    self.log.push(format!(
                        "buyer {} {}: {called:?}, reply lost",
                        a.buyer, a.token
                    ));
                    self.attempts[i].called = Some(Called::Failed);
                }
            }
            Step::MysqlDown { n } => {
                if let Some(i) = self.nth(n, |a| a.called.is_none()) {
                    self.log.push(format!(
                        "buyer {} {}: MySQL unreachable",
                        self.attempts[i].buyer, self.attempts[i].token
                    ));
                    self.attempts[i].called = Some(Called::Failed);
                }
            }
            Step::Settle { n } => {
                if let Some(i) = self.nth(n, |a| a.called.is_some()) {
                    let attempt = self.attempts.remove(i);
                    let answer = self.settle(&attempt).await?;
                    self.log.push(format!(
                        "buyer {} {} settles: {answer:?}",
                        attempt.buyer, attempt.token
                    ));
                    self.check_answer(attempt.buyer, &answer).await?;
                }
            }
            Step::Die { n } => {
                if let Some(i) = self.nth(n, |_| true) {
                    let a = self.attempts.remove(i);
                    self.log.push(format!(
                        "buyer {} {} dies ({:?})",
                        a.buyer, a.token, a.called
                    ));
                }
            }
            Step::Expire { buyer } => {
                self.sale.expire(buyer).await;
                self.log
                    .push(format!("buyer {buyer}'s lock and reservation expire"));
            }
            Step::SyncBegin { n } => {
                if n >= self.syncs.len() && self.syncs.len() < 2 {
                    self.sync_begin().await?;
                }
            }
            Step::SyncStage { n } => {
                if n < self.syncs.len() && !self.syncs[n].staged_all {
                    self.sync_stage(n).await?;
                }
            }
            Step::SyncFinish { n } => {
                if n < self.syncs.len() && self.syncs[n].staged_all {
                    self.sync_finish(n).await?;
                }
            }
            Step::Sync => self.sync().await?,
            Step::Flush => {
                let _: () = redis::cmd("FLUSHALL")
                    .query_async(&mut self.sale.conn.clone())
                    .await
                    .unwrap();
                self.flushes += 1;
                self.loaded = false;
                self.recovered = false;
                self.log.push("Redis loses everything".into());
            }
            Step::CreateFails => self.create_fails().await?,
        }
        self.check().await
    }

    /// The index of the n-th attempt (wrapping) that `matches`.
    fn nth(&self, n: usize, matches: impl Fn(&Attempt) -> bool) -> Option<usize> {
        let found: Vec<usize> = (0..self.attempts.len())
            .filter(|&i| matches(&self.attempts[i]))
            .collect();
        (!found.is_empty()).then(|| found[n % found.len()])
    }

    /// Admission, and the handler's answer when it does not go on to MySQL.
    async fn admit(&mut self, buyer: u64) -> Result<Option<Answer>, TestCaseError> {
        let token = self.token();
        let admission = self.sale.try_admit(buyer, &token, LONG_TTL).await;
        let admission = match admission {
            Ok(admission) => admission,
            Err(error) => {
                self.log.push(format!("buyer {buyer} admission: {error}"));
                promise!(self, false, "admission failed on a healthy Redis: {error}");
                unreachable!()
            }
        };
        Ok(Some(match admission {
            Admission::Admitted { .. } => {
                let order_id = admission.order_id().unwrap();
                self.log
                    .push(format!("buyer {buyer} {token}: admitted as {order_id}"));
                self.attempts.push(Attempt {
                    buyer,
                    token,
                    order_id,
                    called: None,
                    epoch: self.flushes,
                });
                return Ok(None);
            }
            Admission::Missing => {
                promise!(
                    self,
                    !self.loaded,
                    "admission says missing, but the voucher's state was loaded"
                );
                Answer::Unavailable
            }
            Admission::NotStarted | Admission::Ended => {
                promise!(
                    self,
                    false,
                    "the sale is live, admission says {admission:?}"
                );
                unreachable!()
            }
            Admission::SoldOut => Answer::SoldOut,
            Admission::AlreadyOrdered(id) => Answer::AlreadyOrdered(id.parse().unwrap()),
            Admission::Busy { .. } => Answer::Busy,
            Admission::Throttled => Answer::Throttled,
            Admission::Unsettled => self.ask_mysql(buyer).await?,
        }))
    }

    /// An unsettled buyer meets no stock: the handler reads her order from MySQL and
    /// records it in Redis.
    async fn ask_mysql(&mut self, buyer: u64) -> Result<Answer, TestCaseError> {
        let theirs = orders(self.sale.voucher)
            .await
            .into_iter()
            .find(|(_, b)| *b == buyer);
        let Some((order, _)) = theirs else {
            return Ok(Answer::SoldOut);
        };
        let recorded = self
            .sale
            .try_unlock(buyer, "", "duplicate", &order.to_string())
            .await;
        promise!(self, recorded.is_ok(), "recording failed: {recorded:?}");
        Ok(Answer::AlreadyOrdered(order))
    }

    /// The rest of the handler once MySQL answered: settle in Redis, then answer.
    async fn settle(&mut self, attempt: &Attempt) -> Result<Answer, TestCaseError> {
        let id = attempt.order_id.to_string();
        let (outcome, order_id, answer) = match attempt.called.clone().unwrap() {
            Called::Ordered => ("ordered", id.clone(), Answer::Created(attempt.order_id)),
            Called::AlreadyOrdered(existing) => (
                "duplicate",
                existing.to_string(),
                Answer::AlreadyOrdered(existing),
            ),
            Called::SoldOut => ("sold_out", String::new(), Answer::SoldOut),
            Called::IdTaken | Called::Failed => ("undo", String::new(), Answer::Unavailable),
        };
        let settled = self
            .sale
            .try_unlock(attempt.buyer, &attempt.token, outcome, &order_id)
            .await;
        promise!(self, settled.is_ok(), "unlock failed: {settled:?}");
        if let Answer::Created(order_id) = answer {
            self.acknowledged.push((order_id, attempt.buyer));
        }
        Ok(answer)
    }

    /// Returns whether the sync could begin (no other sync holds the lease).
    async fn sync_begin(&mut self) -> Result<bool, TestCaseError> {
        let (stock, _) = mysql_state(self.sale.voucher).await;
        let token = self.token();
        let begun = self.sale.begin_load(&token).await;
        promise!(self, begun.is_ok(), "sync begin failed: {begun:?}");
        if !begun.unwrap() {
            self.log
                .push("a sync begins: 409, another holds the lease".into());
            return Ok(false);
        }
        self.log
            .push(format!("sync {token} begins (MySQL stock {stock})"));
        self.syncs.push(SyncRun {
            token,
            stock: stock as i64,
            begin_ms: self.begin_ms,
            end_ms: self.end_ms,
            after: 0,
            staged_all: false,
            epoch: self.flushes,
            clean: self.attempts.iter().all(|a| a.epoch == self.flushes),
        });
        Ok(true)
    }

    async fn sync_stage(&mut self, n: usize) -> Checked {
        let run = &self.syncs[n];
        let page = buyers_page(self.sale.voucher, run.after).await;
        let staged = self.sale.stage_buyers(&run.token, &page).await;
        promise!(self, staged.is_ok(), "staging failed: {staged:?}");
        self.log
            .push(format!("sync {} stages {page:?}: {staged:?}", run.token));
        if !staged.unwrap() {
            // The lease is gone: the sync answers 503 and stops.
            self.syncs.remove(n);
            return Ok(());
        }
        let run = &mut self.syncs[n];
        if let Some((_, last)) = page.last() {
            run.after = *last;
        }
        run.staged_all = page.len() < SYNC_PAGE;
        Ok(())
    }

    async fn sync_finish(&mut self, n: usize) -> Checked {
        let run = self.syncs.remove(n);
        let terms = Terms {
            stock: run.stock,
            begin_ms: run.begin_ms,
            end_ms: run.end_ms,
            initial_stock: self.initial as i64,
            title: "sql test",
            description: "",
        };
        let finished = self.sale.finish_load(&run.token, &terms).await;
        promise!(self, finished.is_ok(), "load failed: {finished:?}");
        let finished = finished.unwrap();
        self.log
            .push(format!("sync {} finishes: {finished}", run.token));
        if finished && run.epoch == self.flushes {
            self.loaded = true;
            self.recovered |= run.clean;
        }
        Ok(())
    }

    /// A whole sync, as `POST /vouchers/{id}/sync` runs it.
    async fn sync(&mut self) -> Checked {
        if !self.sync_begin().await? {
            return Ok(());
        }
        let token = self.syncs.last().unwrap().token.clone();
        loop {
            let Some(n) = self.syncs.iter().position(|run| run.token == token) else {
                return Ok(());
            };
            if self.syncs[n].staged_all {
                return self.sync_finish(n).await;
            }
            self.sync_stage(n).await?;
        }
    }

    /// A creation whose load reply was lost: the component deletes the MySQL rows again.
    async fn create_fails(&mut self) -> Checked {
        let voucher = scripts::create_voucher(1, -60, 3600).await;
        let ghost = Sale {
            conn: self.sale.conn.clone(),
            voucher,
        };
        ghost.load(1, self.begin_ms, self.end_ms, &[]).await;
        delete_voucher(voucher).await;
        self.log.push(format!("creating voucher {voucher} fails"));
        // Whatever Redis kept of it, nobody can buy it.
        let admission = ghost.try_admit(1, "ghost", LONG_TTL).await;
        if let Ok(Admission::Admitted { .. }) = admission {
            let order_id = admission.as_ref().unwrap().order_id().unwrap();
            let called = call(order_id, 1, voucher).await;
            promise!(
                self,
                called != Called::Ordered,
                "an order for deleted voucher {voucher}"
            );
        }
        Ok(())
    }

    /// A buyer's answer must agree with MySQL.
    async fn check_answer(&self, buyer: u64, answer: &Answer) -> Checked {
        let orders = orders(self.sale.voucher).await;
        let theirs = orders.iter().find(|(_, b)| *b == buyer).map(|(o, _)| *o);
        match answer {
            Answer::Created(id) => {
                promise!(
                    self,
                    theirs == Some(*id),
                    "201 {id} but MySQL has {theirs:?}"
                )
            }
            Answer::AlreadyOrdered(id) => promise!(
                self,
                theirs == Some(*id),
                "already_ordered {id} but MySQL has {theirs:?}"
            ),
            _ => {}
        }
        Ok(())
    }

    /// The promises that hold after every step.
    async fn check(&self) -> Checked {
        let (stock, _) = mysql_state(self.sale.voucher).await;
        let orders = orders(self.sale.voucher).await;
        let count = orders.len() as u64;
        promise!(self, count <= self.initial, "oversold: {count} orders");
        promise!(
            self,
            stock + count == self.initial,
            "MySQL stock {stock} + {count} orders != {}",
            self.initial
        );
        let mut per_buyer: HashMap<u64, u64> = HashMap::new();
        for (order, buyer) in &orders {
            promise!(
                self,
                per_buyer.insert(*buyer, *order).is_none(),
                "buyer {buyer} has two orders"
            );
        }
        for (order, buyer) in &self.acknowledged {
            promise!(
                self,
                per_buyer.get(buyer) == Some(order),
                "acknowledged order {order} of buyer {buyer} is not in MySQL"
            );
        }
        for (buyer, record) in self.sale.records().await {
            if let Some(order) = record.strip_prefix("o:") {
                promise!(
                    self,
                    per_buyer.get(&buyer).map(u64::to_string).as_deref() == Some(order),
                    "Redis records buyer {buyer} as {record}, MySQL has {:?}",
                    per_buyer.get(&buyer)
                );
            }
        }
        if self.loaded {
            // Never too stingy: the units Redis can still hand out (in stock or held by a
            // reservation) cover what MySQL has left.
            let redis_stock = self.sale.stock().await.unwrap_or(0);
            let held = self.sale.pending().await.len() as i64;
            promise!(
                self,
                redis_stock + held >= stock as i64,
                "Redis too stingy: stock {redis_stock} + {held} reserved < MySQL stock {stock}"
            );
        }
        Ok(())
    }

    /// Everything in flight dies and every TTL elapses; after a loss the admin syncs (the
    /// sync the README asks for once the requests in flight at the loss have ended).
    /// Then every buyer presses once more, and new buyers until MySQL is sold out: each
    /// must get the answer MySQL stands for, and Redis must end up agreeing.
    async fn quiesce(&mut self) -> Checked {
        self.log
            .push("-- quiet: everything in flight dies, every TTL elapses".into());
        self.attempts.clear();
        self.syncs.clear();
        for buyer in 1..=BUYERS {
            self.sale.expire(buyer).await;
        }
        self.sale.expire_sync_lease().await;
        if !self.recovered {
            self.sync().await?;
            promise!(
                self,
                self.recovered,
                "the admin's sync did not load the voucher"
            );
        }
        let mut buyers: Vec<u64> = (1..=BUYERS).collect();
        buyers.extend(100..100 + self.initial + 1);
        for buyer in buyers {
            let (stock, _) = mysql_state(self.sale.voucher).await;
            let had = orders(self.sale.voucher)
                .await
                .into_iter()
                .find(|(_, b)| *b == buyer)
                .map(|(o, _)| o);
            // A 503 here is an order id MySQL already holds (another Redis, the shared
            // one, hands out ids from the same clock): the buyer retries, as told.
            let mut answer = self.purchase(buyer).await?;
            for _ in 0..3 {
                if answer != Answer::Unavailable {
                    break;
                }
                answer = self.purchase(buyer).await?;
            }
            self.log.push(format!("buyer {buyer} buys: {answer:?}"));
            match (had, &answer) {
                (Some(order), _) => promise!(
                    self,
                    answer == Answer::AlreadyOrdered(order),
                    "buyer {buyer} has order {order} in MySQL but hears {answer:?}"
                ),
                (None, Answer::Created(_)) => {}
                (None, Answer::SoldOut) => promise!(
                    self,
                    stock == 0,
                    "buyer {buyer} hears sold_out while MySQL has {stock} units"
                ),
                (None, _) => promise!(self, false, "buyer {buyer} hears {answer:?}"),
            }
            self.check().await?;
        }
        let (stock, _) = mysql_state(self.sale.voucher).await;
        let redis_stock = self.sale.stock().await;
        let pending = self.sale.pending().await;
        promise!(
            self,
            redis_stock == Some(stock as i64) && pending.is_empty(),
            "quiet, yet Redis stock {redis_stock:?} (pending {pending:?}) vs MySQL {stock}"
        );
        Ok(())
    }

    /// A whole purchase with nothing else going on, as the handler runs it.
    async fn purchase(&mut self, buyer: u64) -> Result<Answer, TestCaseError> {
        if let Some(answer) = self.admit(buyer).await? {
            return Ok(answer);
        }
        let mut attempt = self.attempts.pop().unwrap();
        attempt.called = Some(call(attempt.order_id, buyer, self.sale.voucher).await);
        let answer = self.settle(&attempt).await?;
        self.check_answer(buyer, &answer).await?;
        Ok(answer)
    }
}

/// `CALL seckill_purchase` as the component reads its outcome. MySQL is up in the model
/// (its failures are steps of their own), so any other error fails the schedule.
async fn call(order_id: u64, buyer: u64, voucher: u64) -> Called {
    let (outcome, id) = scripts::purchase(order_id, buyer, voucher)
        .await
        .unwrap_or_else(|error| panic!("CALL failed: {error}"));
    match outcome.as_str() {
        "ordered" => Called::Ordered,
        "already_ordered" => Called::AlreadyOrdered(id.unwrap()),
        "sold_out" => Called::SoldOut,
        "id_taken" => Called::IdTaken,
        other => panic!("outcome {other}"),
    }
}

/// The rows a query returns, on a connection of its own.
async fn rows<T: FromRow + Send + 'static>(sql: &str, params: impl Into<Params> + Send) -> Vec<T> {
    let mut conn = scripts::connect().await.unwrap();
    let rows = conn.exec(sql, params).await.unwrap();
    conn.disconnect().await.unwrap();
    rows
}

/// The voucher's sale window in unix milliseconds.
async fn window(voucher: u64) -> (i64, i64) {
    rows(
        "SELECT TIMESTAMPDIFF(SECOND, '1970-01-01', begin_time) * 1000, \
         TIMESTAMPDIFF(SECOND, '1970-01-01', end_time) * 1000 \
         FROM tb_seckill_voucher WHERE voucher_id = ?",
        (voucher,),
    )
    .await[0]
}

/// MySQL's (stock, initial stock).
async fn mysql_state(voucher: u64) -> (u64, u64) {
    rows(
        "SELECT stock, initial_stock FROM tb_seckill_voucher WHERE voucher_id = ?",
        (voucher,),
    )
    .await[0]
}

/// (order id, buyer) of every order of the voucher.
async fn orders(voucher: u64) -> Vec<(u64, u64)> {
    rows(
        "SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = ?",
        (voucher,),
    )
    .await
}

/// `Db::buyers_page` with the explorer's page size, as (user, order id).
async fn buyers_page(voucher: u64, after: u64) -> Vec<(u64, u64)> {
    rows(
        "SELECT user_id, id FROM tb_voucher_order \
         WHERE voucher_id = ? AND id > ? ORDER BY id LIMIT ?",
        (voucher, after, SYNC_PAGE as u64),
    )
    .await
}

async fn delete_voucher(voucher: u64) {
    rows::<u64>("DELETE FROM tb_voucher WHERE id = ?", (voucher,)).await;
}

#[test]
fn every_promise_holds_under_random_schedules() {
    let cases = std::env::var("SCHEDULE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = runtime.block_on(RedisServer::start(Persistence::None));
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let ran = AtomicU64::new(0);
    let first_failure = AtomicU64::new(0);
    let schedules = (1..=3u64, prop::collection::vec(step(), 1..30));
    let result = TestRunner::new(config).run(&schedules, |(stock, steps)| {
        let case = ran.fetch_add(1, Ordering::SeqCst) + 1;
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            runtime.block_on(async {
                let mut world = World::new(&redis, stock).await;
                for step in &steps {
                    world.log.push(format!("> {step:?}"));
                    world.run(step).await?;
                }
                world.quiesce().await
            })
        }))
        .unwrap_or_else(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(TestCaseError::fail(why))
        });
        if outcome.is_err() && first_failure.load(Ordering::SeqCst) == 0 {
            first_failure.store(case, Ordering::SeqCst);
        }
        outcome
    });
    let found = first_failure.load(Ordering::SeqCst);
    println!(
        "{} schedules run (shrinking included)",
        ran.load(Ordering::SeqCst)
    );
    if let Err(failure) = result {
        panic!("a promise broke (first failure at schedule {found}): {failure}");
    }
}
