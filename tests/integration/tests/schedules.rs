//! The schedule explorer: random interleavings of purchases as the group commit runs them
//! (admissions, drainers committing and publishing batches, lost MySQL replies, waiters
//! collecting news, claiming, taking the lease over or giving up, requests dying
//! anywhere), lease lapses, admin syncs, Redis losing everything and failing creations,
//! run step by step against the real scripts (a private `redis-server`, so it may be
//! flushed) and the real stored procedures (the shared MariaDB, a fresh voucher per
//! case), with every promise of docs/design.md checked after each step and again once the
//! sale is quiet.
//!
//! Each purchase request is a small state machine, moved on as `src/orders.rs` and
//! `src/group_commit.rs` move it: admission; then, holding the lease, commit and publish
//! batch after batch; or, waiting, news popped from its outcome list or `claim.lua`. A step
//! names what it acts on by position (the n-th drainer, the n-th waiter, the n-th sync)
//! and does nothing when there is nothing there, so every schedule is valid and proptest
//! shrinks a failure to a short one by dropping steps.
//!
//! `SCHEDULE_CASES` sets the number of schedules (CI: 300), `SCHEDULE_BUYERS` the buyers
//! of each (3: few, so that they meet) and `SCHEDULE_STOCK` the most units of its voucher
//! (3: enough for a batch of waiters, short of the buyers in most schedules). The soak:
//! `SCHEDULE_CASES=20000 SCHEDULE_BUYERS=6 SCHEDULE_STOCK=4 cargo test --workspace --test schedules -- --nocapture`.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Conn, Params};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::AsyncCommands;

use seckill_tests::backends::key;
use seckill_tests::faults::{Persistence, RedisServer};
use seckill_tests::scripts::{
    self, order_id_of, outcome_of, split_entry, Admission, Claimed, CommitRow, Decision, Published,
    RowLock, Sale, Terms, BATCH, MAX_QUEUED, SEQUENCE_PREFIX,
};

const DEFAULT_CASES: u32 = 300;
const DEFAULT_BUYERS: u64 = 3;
const DEFAULT_STOCK: u64 = 3;
/// Rows a sync reads from MySQL per page: small, so syncs take several steps.
const SYNC_PAGE: usize = 2;
/// Batch sizes a schedule's drainers take: with few buyers, 1 and 2 make a drain span
/// several batches; 256 is the component's.
const BATCHES: [i64; 3] = [1, 2, BATCH];
/// Steps the quiet phase may take to end every request before it calls it a livelock.
const SETTLE_STEPS: usize = 2_000;

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

#[derive(Debug, Clone)]
enum Step {
    /// A buyer presses "buy": admission runs (and may hand her request the lease).
    Admit {
        buyer: u64,
    },
    /// Every buyer presses, one after the other: a crowd that queues behind one drainer.
    Crowd,
    /// The n-th drainer without MySQL's answer runs `seckill_commit_batch` on its batch.
    Commit {
        n: usize,
    },
    /// Its `CALL` commits but the reply is lost: the drainer tries again later, or gives
    /// up after its second try.
    CommitLost {
        n: usize,
    },
    /// Its `CALL` cannot reach MySQL (nothing committed): tried again, or given up.
    MysqlDown {
        n: usize,
    },
    /// The n-th drainer with MySQL's answer publishes it: it goes on with the next batch,
    /// or its drain ends.
    Publish {
        n: usize,
    },
    /// The n-th request in flight makes its next move as the component would: commit,
    /// publish, take its news, or claim.
    Proceed {
        n: usize,
    },
    /// The n-th request in flight dies where it stands (a drainer before or after its
    /// commit, before publishing; a waiter).
    Die {
        n: usize,
    },
    /// The drainer's lease outlives its TTL.
    ExpireLease,
    /// The n-th waiter's `BLPOP` times out and it runs `claim.lua`.
    Claim {
        n: usize,
    },
    /// The n-th waiter with news in its outcome list pops it.
    Deliver {
        n: usize,
    },
    /// The n-th waiter's 10 s are up: it answers `busy`, her purchase still queued.
    WaiterGivesUp {
        n: usize,
    },
    /// An admin sync: reads the voucher, stages MySQL's buyers a page at a time, then
    /// installs the terms.
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
    /// Redis restarts without persistence, and its order sequence starts below the last
    /// number it handed out (more than 8 ids a millisecond before the restart, see the
    /// docs/design.md): the next admission in the same second gets an order id already used.
    Collide,
    /// A voucher creation whose Redis load reply is lost: MySQL's row is deleted again.
    CreateFails,
}

fn step(buyers: u64) -> impl Strategy<Value = Step> {
    let buyer = 1..=buyers;
    let n = 0..4usize;
    prop_oneof![
        12 => buyer.prop_map(|buyer| Step::Admit { buyer }),
        2 => Just(Step::Crowd),
        6 => n.clone().prop_map(|n| Step::Commit { n }),
        1 => n.clone().prop_map(|n| Step::CommitLost { n }),
        1 => n.clone().prop_map(|n| Step::MysqlDown { n }),
        6 => n.clone().prop_map(|n| Step::Publish { n }),
        8 => n.clone().prop_map(|n| Step::Proceed { n }),
        2 => n.clone().prop_map(|n| Step::Die { n }),
        2 => Just(Step::ExpireLease),
        4 => n.clone().prop_map(|n| Step::Claim { n }),
        4 => n.clone().prop_map(|n| Step::Deliver { n }),
        1 => n.prop_map(|n| Step::WaiterGivesUp { n }),
        1 => (0..2usize).prop_map(|n| Step::SyncBegin { n }),
        1 => (0..2usize).prop_map(|n| Step::SyncStage { n }),
        1 => (0..2usize).prop_map(|n| Step::SyncFinish { n }),
        1 => Just(Step::Sync),
        1 => Just(Step::Flush),
        1 => Just(Step::Collide),
        1 => Just(Step::CreateFails),
    ]
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

/// A drain in progress: the lease token, the batch in hand and MySQL's answer on it.
#[derive(Debug)]
struct Drain {
    token: String,
    /// The entry publish.lua is told is the drainer's own: only a just-admitted
    /// purchase's, or a waiter's that was handed the lease.
    own: Option<String>,
    batch: Vec<String>,
    /// Flushes before the batch was read from Redis.
    epoch: u64,
    rows: Option<Vec<CommitRow>>,
    /// The voucher's orders in MySQL once the batch committed.
    mysql_orders: u64,
    tries: u32,
    /// (entry, outcome, order id) of every purchase this drain committed.
    committed: Vec<(String, &'static str, u64)>,
}

#[derive(Debug)]
enum Phase {
    Draining(Drain),
    /// Blocks on its outcome list; claims when nothing comes.
    Waiting,
}

/// A purchase request in flight.
#[derive(Debug)]
struct Request {
    id: u64,
    buyer: u64,
    decision: Decision,
    /// Her queued purchase `<user>:<ticket>`: admitted by this request, or by an earlier
    /// press (`queued`).
    own: Option<String>,
    /// Flushes before its admission.
    epoch: u64,
    /// When admission decided it: whether Redis knew every order, and the disturbances
    /// so far. An answer it gives after draining stands for that moment.
    decided: (bool, u64),
    phase: Phase,
}

impl Request {
    fn drain(&mut self) -> &mut Drain {
        match &mut self.phase {
            Phase::Draining(drain) => drain,
            Phase::Waiting => panic!("request #{} is not draining", self.id),
        }
    }

    fn draining(&self, matches: impl Fn(&Drain) -> bool) -> bool {
        matches!(&self.phase, Phase::Draining(drain) if matches(drain))
    }

    fn waiting(&self) -> bool {
        matches!(self.phase, Phase::Waiting)
    }
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
    /// Whether, when it began, no drainer could still commit a batch read before the
    /// last flush: then the orders it stages are all the orders Redis lost.
    clean: bool,
}

/// One schedule's world: the real servers, the requests in flight and what the sale has
/// promised so far.
struct World {
    sale: Sale,
    /// For the explorer's own reads of MySQL.
    db: Conn,
    initial: u64,
    buyers: u64,
    batch: i64,
    begin_ms: i64,
    end_ms: i64,
    requests: Vec<Request>,
    syncs: Vec<SyncRun>,
    /// (order id, buyer) of every 201.
    acknowledged: Vec<(u64, u64)>,
    /// (buyer, disturbances then) of every `sold_out` told while Redis knew every order.
    told_sold_out: Vec<(u64, u64)>,
    /// What each request that ended answered, by request id.
    answers: HashMap<u64, Answer>,
    flushes: u64,
    /// Events that may hand out a unit after a `sold_out` was right: Redis losing its
    /// data, a ticket handed out again (its purchase holds a unit it will give back), and
    /// a unit given back for an `id_taken` order id.
    disturbances: u64,
    /// Whether Redis holds the voucher's state: false from a flush until a sync that
    /// began after it finishes.
    loaded: bool,
    /// Whether Redis knows every order: false from a flush until a clean sync finishes. A
    /// drainer holding a batch read before the flush may commit it after a sync read
    /// MySQL; Redis learns that order only from a sync that began after such drainers.
    recovered: bool,
    /// Whether a sync installed MySQL's stock: Redis may be too generous from then on.
    synced: bool,
    next_request: u64,
    /// The ticket of the last admission.
    last_ticket: Option<String>,
    /// Every ticket admission handed out.
    tickets: HashSet<String>,
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
    async fn new(redis: &RedisServer, stock: u64, buyers: u64, batch: i64) -> World {
        let voucher = scripts::create_voucher(stock as u32, -60, 3600).await;
        let mut db = scripts::connect().await.unwrap();
        let (begin_ms, end_ms): (i64, i64) = db
            .exec_first(
                "SELECT TIMESTAMPDIFF(SECOND, '1970-01-01', begin_time) * 1000, \
                 TIMESTAMPDIFF(SECOND, '1970-01-01', end_time) * 1000 \
                 FROM tb_seckill_voucher WHERE voucher_id = ?",
                (voucher,),
            )
            .await
            .unwrap()
            .unwrap();
        let sale = Sale {
            conn: redis.conn().await,
            voucher,
        };
        // Nothing of an earlier schedule (an order sequence set back, say) carries over.
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut sale.conn.clone())
            .await
            .unwrap();
        // As `POST /vouchers` does.
        sale.load(stock as i64, begin_ms, end_ms, &[]).await;
        World {
            sale,
            db,
            initial: stock,
            buyers,
            batch,
            begin_ms,
            end_ms,
            requests: Vec::new(),
            syncs: Vec::new(),
            acknowledged: Vec::new(),
            told_sold_out: Vec::new(),
            answers: HashMap::new(),
            flushes: 0,
            disturbances: 0,
            loaded: true,
            recovered: true,
            synced: false,
            next_request: 0,
            last_ticket: None,
            tickets: HashSet::new(),
            tokens: 0,
            log: vec![format!("voucher with {stock} units, batches of {batch}")],
        }
    }

    fn token(&mut self) -> String {
        self.tokens += 1;
        format!("t{}", self.tokens)
    }

    async fn run(&mut self, step: &Step) -> Checked {
        match *step {
            Step::Admit { buyer } => {
                self.press(buyer).await?;
            }
            Step::Crowd => {
                for buyer in 1..=self.buyers {
                    self.press(buyer).await?;
                    self.check().await?;
                }
            }
            Step::Commit { n } => {
                if let Some(i) = self.nth(n, |r| r.draining(|d| d.rows.is_none())) {
                    self.commit(i).await?;
                }
            }
            Step::CommitLost { n } => {
                let can = |r: &Request| r.draining(|d| d.rows.is_none() && !d.batch.is_empty());
                if let Some(i) = self.nth(n, can) {
                    self.commit_fails(i, true).await?;
                }
            }
            Step::MysqlDown { n } => {
                let can = |r: &Request| r.draining(|d| d.rows.is_none() && !d.batch.is_empty());
                if let Some(i) = self.nth(n, can) {
                    self.commit_fails(i, false).await?;
                }
            }
            Step::Publish { n } => {
                if let Some(i) = self.nth(n, |r| r.draining(|d| d.rows.is_some())) {
                    self.publish(i).await?;
                }
            }
            Step::Proceed { n } => {
                if let Some(i) = self.nth(n, |_| true) {
                    self.proceed(i).await?;
                }
            }
            Step::Die { n } => {
                if let Some(i) = self.nth(n, |_| true) {
                    let request = self.requests.remove(i);
                    let what = match &request.phase {
                        Phase::Waiting => "waiting".to_string(),
                        Phase::Draining(drain) => format!(
                            "draining {:?}, {}",
                            drain.batch,
                            if drain.rows.is_some() {
                                "committed"
                            } else {
                                "not committed"
                            }
                        ),
                    };
                    self.log.push(format!(
                        "#{} (buyer {}) dies {what}",
                        request.id, request.buyer
                    ));
                }
            }
            Step::ExpireLease => {
                self.sale.expire_lease().await;
                self.log.push("the drainer's lease lapses".into());
            }
            Step::Claim { n } => {
                if let Some(i) = self.nth(n, Request::waiting) {
                    self.claim(i).await?;
                }
            }
            Step::Deliver { n } => {
                let mut with_news = Vec::new();
                for (i, request) in self.requests.iter().enumerate() {
                    if request.waiting() && !self.sale.news(own(request)).await.is_empty() {
                        with_news.push(i);
                    }
                }
                if !with_news.is_empty() {
                    self.deliver(with_news[n % with_news.len()]).await?;
                }
            }
            Step::WaiterGivesUp { n } => {
                if let Some(i) = self.nth(n, Request::waiting) {
                    let request = self.requests.remove(i);
                    self.log.push(format!("#{} waited 10 s", request.id));
                    self.answer(request.id, request.buyer, Answer::Busy, self.now())
                        .await?;
                }
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
            Step::Flush => self.flush().await,
            Step::Collide => {
                self.flush().await;
                if let Some(ticket) = self.last_ticket.clone() {
                    let (seconds, sequence) = ticket.split_once(':').unwrap();
                    let day = seconds.parse::<u64>().unwrap() / 86_400;
                    let sequence: u64 = sequence.parse().unwrap();
                    let _: () = self
                        .sale
                        .conn
                        .clone()
                        .set(format!("{SEQUENCE_PREFIX}:{day}"), sequence - 1)
                        .await
                        .unwrap();
                    self.log.push(format!(
                        "its order sequence hands out {ticket} again within its second"
                    ));
                }
            }
            Step::CreateFails => self.create_fails().await?,
        }
        self.check().await
    }

    /// Redis restarts without persistence (and an empty script cache).
    async fn flush(&mut self) {
        let mut conn = self.sale.conn.clone();
        let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        self.flushes += 1;
        self.disturbances += 1;
        self.loaded = false;
        self.recovered = false;
        self.log.push("Redis loses everything".into());
    }

    /// The index of the n-th request (wrapping) that `matches`.
    fn nth(&self, n: usize, matches: impl Fn(&Request) -> bool) -> Option<usize> {
        let found: Vec<usize> = (0..self.requests.len())
            .filter(|&i| matches(&self.requests[i]))
            .collect();
        (!found.is_empty()).then(|| found[n % found.len()])
    }

    /// A press: admission, then the answer at once, or a request in flight (a drainer or
    /// a waiter). Returns the request's id, under which its answer is kept.
    async fn press(&mut self, buyer: u64) -> Result<u64, TestCaseError> {
        self.next_request += 1;
        let id = self.next_request;
        let lease_before = self.sale.lease().await;
        let stock_before = self.sale.stock().await;
        let record_before = self.sale.record(buyer).await;
        let admission = self
            .sale
            .try_admit_limited(buyer, self.batch, MAX_QUEUED)
            .await;
        let Admission { decision, lease } = match admission {
            Ok(admission) => admission,
            Err(error) => {
                promise!(self, false, "admission failed on a healthy Redis: {error}");
                unreachable!()
            }
        };
        self.log.push(format!(
            "#{id} (buyer {buyer}) admission: {decision:?}{}",
            match &lease {
                Some((token, batch)) => format!(", lease {token} with {batch:?}"),
                None => String::new(),
            }
        ));
        let queue = self.sale.queue().await;
        let record = self.sale.record(buyer).await;
        promise!(
            self,
            (decision == Decision::Missing) != self.loaded,
            "admission says {decision:?} while the voucher's state is loaded: {}",
            self.loaded
        );
        let queued_before = record_before.as_deref().and_then(|r| r.strip_prefix("q:"));
        if let Some(queued) = queued_before.filter(|_| self.loaded) {
            promise!(
                self,
                decision == Decision::Queued(queued.to_string()),
                "buyer {buyer}'s purchase {queued} is queued, admission says {decision:?}"
            );
        }
        let own = match &decision {
            Decision::Admitted(ticket) => {
                self.last_ticket = Some(ticket.clone());
                if !self.tickets.insert(ticket.clone()) {
                    self.disturbances += 1;
                    self.log
                        .push(format!("ticket {ticket} was handed out before"));
                }
                let entry = format!("{buyer}:{ticket}");
                promise!(
                    self,
                    record.as_deref() == Some(&format!("q:{ticket}"))
                        && queue.last() == Some(&entry)
                        && self.sale.stock().await == stock_before.map(|s| s - 1),
                    "admitted, yet record {record:?}, queue {queue:?}, stock {stock_before:?} -> {:?}",
                    self.sale.stock().await
                );
                if self.recovered {
                    let held = self.order_of(buyer).await;
                    promise!(
                        self,
                        held.is_none(),
                        "buyer {buyer} admitted again while she holds order {held:?}"
                    );
                }
                Some(entry)
            }
            Decision::Queued(ticket) => Some(format!("{buyer}:{ticket}")),
            Decision::NotStarted | Decision::Ended => {
                promise!(self, false, "the sale is live, admission says {decision:?}");
                unreachable!()
            }
            _ => None,
        };
        if lease_before.is_none() && !queue.is_empty() && decision != Decision::Missing {
            promise!(
                self,
                lease.is_some(),
                "the lease was free, admission kept it"
            );
        }
        let Some((token, batch)) = lease else {
            let answer = match &decision {
                Decision::Admitted(_) => {
                    self.requests.push(Request {
                        id,
                        buyer,
                        decision,
                        own,
                        epoch: self.flushes,
                        decided: self.now(),
                        phase: Phase::Waiting,
                    });
                    return Ok(id);
                }
                Decision::Queued(_) => Answer::Busy,
                other => decision_answer(other),
            };
            self.answer(id, buyer, answer, self.now()).await?;
            return Ok(id);
        };
        let head: Vec<String> = queue.iter().take(self.batch as usize).cloned().collect();
        let expected_token = match &own {
            Some(entry) if matches!(decision, Decision::Admitted(_)) => token == *entry,
            _ => token.starts_with("r:"),
        };
        promise!(
            self,
            batch == head && expected_token,
            "admission handed lease {token} with {batch:?}; the queue is {queue:?}"
        );
        let drain_own = match decision {
            Decision::Admitted(_) => own.clone(),
            _ => None,
        };
        self.requests.push(Request {
            id,
            buyer,
            decision,
            own,
            epoch: self.flushes,
            decided: self.now(),
            phase: Phase::Draining(Drain {
                token,
                own: drain_own,
                batch,
                epoch: self.flushes,
                rows: None,
                mysql_orders: 0,
                tries: 0,
                committed: Vec::new(),
            }),
        });
        Ok(id)
    }

    /// The i-th request's drainer runs `seckill_commit_batch` on its batch.
    async fn commit(&mut self, i: usize) -> Checked {
        let voucher = self.sale.voucher;
        let id = self.requests[i].id;
        let batch = self.requests[i].drain().batch.clone();
        let (rows, mysql_orders) = if batch.is_empty() {
            (Vec::new(), 0)
        } else {
            match commit(voucher, &batch).await {
                Ok(committed) => committed,
                Err(error) => {
                    self.log.push(format!("#{id} commits {batch:?}: {error}"));
                    return self.try_failed(i).await;
                }
            }
        };
        let expected: Vec<u64> = batch
            .iter()
            .map(|e| order_id_of(&split_entry(e).1))
            .collect();
        let got: Vec<u64> = rows.iter().map(|row| row.0).collect();
        self.requests[i].drain().rows = Some(rows.clone());
        self.requests[i].drain().mysql_orders = mysql_orders;
        let outcomes: Vec<_> = rows.into_iter().map(outcome_of).collect();
        self.log
            .push(format!("#{id} commits {batch:?}: {outcomes:?}"));
        promise!(
            self,
            expected == got,
            "commit rows {got:?} for order ids {expected:?}"
        );
        Ok(())
    }

    /// The i-th request's `CALL` fails: committed with its reply lost (`runs`), or never
    /// reaching MySQL.
    async fn commit_fails(&mut self, i: usize, runs: bool) -> Checked {
        let voucher = self.sale.voucher;
        let id = self.requests[i].id;
        let batch = self.requests[i].drain().batch.clone();
        if runs {
            let outcomes = commit(voucher, &batch)
                .await
                .map(|(rows, _)| rows.into_iter().map(outcome_of).collect::<Vec<_>>());
            self.log.push(format!(
                "#{id} commits {batch:?}: {outcomes:?}, the reply is lost"
            ));
        } else {
            self.log
                .push(format!("#{id} cannot reach MySQL for {batch:?}"));
        }
        self.try_failed(i).await
    }

    /// A try of the i-th request's `CALL` got no answer: the drain gives up after its
    /// second try on a batch.
    async fn try_failed(&mut self, i: usize) -> Checked {
        let drain = self.requests[i].drain();
        drain.tries += 1;
        if drain.tries >= 2 {
            return self.drain_ended(i, true).await;
        }
        Ok(())
    }

    /// The i-th request's drainer publishes MySQL's answer on its batch.
    async fn publish(&mut self, i: usize) -> Checked {
        let id = self.requests[i].id;
        let drain = self.requests[i].drain();
        let rows = drain.rows.take().unwrap();
        let entries: Vec<(String, &'static str, u64)> = drain
            .batch
            .iter()
            .zip(rows)
            .map(|(entry, row)| {
                let (outcome, order_id) = outcome_of(row);
                (entry.clone(), outcome, order_id)
            })
            .collect();
        drain.committed.extend(entries.iter().cloned());
        let token = drain.token.clone();
        let own = drain.own.clone().unwrap_or_default();
        let mysql_orders = drain.mysql_orders;
        let id_taken = entries.iter().filter(|e| e.1 == "id_taken").count() as u64;
        let stock_before = self.sale.stock().await;
        let queue_before = self.sale.queue().await;
        let published = self
            .sale
            .publish_counted(&token, &own, &entries, self.batch, mysql_orders)
            .await;
        self.disturbances += id_taken;
        self.log
            .push(format!("#{id} publishes {entries:?}: {published:?}"));
        let published = match published {
            Ok(published) => published,
            Err(error) => {
                promise!(self, false, "publish failed: {error}");
                unreachable!()
            }
        };
        // A publication trims its batch off the queue, zeroes Redis stock for a sold_out
        // and gives an id_taken's unit back; a refused one leaves stock and queue alone.
        let (stock_after, queue_after) = (self.sale.stock().await, self.sale.queue().await);
        let (expected_stock, expected_queue) = if published == Published::Lost {
            (stock_before, queue_before.clone())
        } else {
            let stock =
                entries
                    .iter()
                    .fold(stock_before, |stock, (_, outcome, _)| match *outcome {
                        "sold_out" => stock.map(|_| 0),
                        "id_taken" => stock.map(|s| s + 1),
                        _ => stock,
                    });
            (
                stock,
                queue_before[entries.len().min(queue_before.len())..].to_vec(),
            )
        };
        promise!(
            self,
            stock_after == expected_stock && queue_after == expected_queue,
            "publication left stock {stock_after:?} and queue {queue_after:?} \
             (before: {stock_before:?}, {queue_before:?})"
        );
        match published {
            Published::Next(batch) if !batch.is_empty() => {
                let epoch = self.flushes;
                let drain = self.requests[i].drain();
                drain.batch = batch;
                drain.epoch = epoch;
                drain.tries = 0;
                Ok(())
            }
            _ => self.drain_ended(i, false).await,
        }
    }

    /// The i-th request's drain is over (or `failed`): it answers, or waits for its own
    /// verdict.
    async fn drain_ended(&mut self, i: usize, failed: bool) -> Checked {
        let request = &mut self.requests[i];
        let Phase::Draining(drain) = &request.phase else {
            unreachable!()
        };
        let verdict = request.own.as_ref().and_then(|own| {
            drain
                .committed
                .iter()
                .find(|(entry, _, _)| entry == own)
                .map(|(_, outcome, order_id)| (*outcome, *order_id))
        });
        // Her verdict is MySQL's word now; anything else is admission's, from before.
        let decided = match verdict {
            Some(_) if !failed => (self.recovered, self.disturbances),
            _ => request.decided,
        };
        let answer = if failed {
            // Her purchase stays queued: the next drainer commits it.
            if request.own.is_some() {
                Some(Answer::Unavailable)
            } else {
                Some(decision_answer(&request.decision))
            }
        } else if let Some((outcome, order_id)) = verdict {
            // A second press that committed her order hears it as made by her first.
            match (&request.decision, outcome) {
                (Decision::Queued(_), "ordered") => Some(Answer::AlreadyOrdered(order_id)),
                _ => Some(verdict_answer(outcome, order_id)),
            }
        } else {
            match request.decision {
                Decision::Admitted(_) => None,
                Decision::Queued(_) => Some(Answer::Busy),
                ref other => Some(decision_answer(other)),
            }
        };
        match answer {
            None => {
                request.phase = Phase::Waiting;
                Ok(())
            }
            Some(answer) => {
                let request = self.requests.remove(i);
                self.answer(request.id, request.buyer, answer, decided)
                    .await
            }
        }
    }

    /// The i-th request (a waiter) runs `claim.lua`. Returns whether it still waits on
    /// someone else's lease.
    async fn claim(&mut self, i: usize) -> Result<bool, TestCaseError> {
        let request = &self.requests[i];
        let (id, buyer, epoch) = (request.id, request.buyer, request.epoch);
        let entry = own(request).to_string();
        let (user, ticket) = split_entry(&entry);
        let claimed = self.sale.claim(user, &ticket).await;
        self.log
            .push(format!("#{id} (buyer {buyer}) claims: {claimed:?}"));
        let claimed = match claimed {
            Ok(claimed) => claimed,
            Err(error) => {
                promise!(self, false, "claim failed: {error}");
                unreachable!()
            }
        };
        match claimed {
            Claimed::Outcome(news) => self.news(i, &news).await?,
            Claimed::Lead => self.lead(i),
            Claimed::Wait => return Ok(true),
            // Redis lost the purchase, or a sync replaced it with the order MySQL holds.
            Claimed::Lost => {
                let held = self.order_of(buyer).await;
                promise!(
                    self,
                    epoch < self.flushes || held.is_some(),
                    "purchase {entry} lost without Redis losing anything"
                );
                self.requests.remove(i);
                self.answer(id, buyer, Answer::Unavailable, self.now())
                    .await?;
            }
        }
        Ok(false)
    }

    /// The i-th request (a waiter) pops the news in its outcome list.
    async fn deliver(&mut self, i: usize) -> Checked {
        let done = key(
            self.sale.voucher,
            &format!("done:{}", own(&self.requests[i])),
        );
        let news: Option<String> = self.sale.conn.clone().lpop(done, None).await.unwrap();
        let news = news.expect("news to deliver");
        self.log
            .push(format!("#{} gets news: {news}", self.requests[i].id));
        self.news(i, &news).await
    }

    /// A waiter's news: the lease, or its verdict.
    async fn news(&mut self, i: usize, news: &str) -> Checked {
        if news == "lead" {
            self.lead(i);
            return Ok(());
        }
        let request = &self.requests[i];
        let own_id = order_id_of(&split_entry(own(request)).1);
        let (outcome, order_id) = news.split_once(':').expect("<outcome>:<order id>");
        let order_id: u64 = order_id.parse().unwrap();
        promise!(
            self,
            outcome == "duplicate" || order_id == own_id,
            "news {news} for order {own_id}"
        );
        let outcome = match outcome {
            "ordered" => "ordered",
            "duplicate" => "duplicate",
            "sold_out" => "sold_out",
            "id_taken" => "id_taken",
            other => {
                promise!(self, false, "news with outcome {other}");
                unreachable!()
            }
        };
        let request = self.requests.remove(i);
        let answer = verdict_answer(outcome, order_id);
        self.answer(request.id, request.buyer, answer, self.now())
            .await
    }

    /// The i-th request (a waiter) holds the lease under its entry and drains, starting
    /// with an empty publication that hands it the first batch.
    fn lead(&mut self, i: usize) {
        let epoch = self.flushes;
        let request = &mut self.requests[i];
        request.phase = Phase::Draining(Drain {
            token: own(request).to_string(),
            own: request.own.clone(),
            batch: Vec::new(),
            epoch,
            rows: Some(Vec::new()),
            mysql_orders: 0,
            tries: 0,
            committed: Vec::new(),
        });
    }

    /// Whether Redis knows every order, and the disturbances so far.
    fn now(&self) -> (bool, u64) {
        (self.recovered, self.disturbances)
    }

    /// A request's answer, standing for the moment `decided` (see `Request::decided`).
    async fn answer(
        &mut self,
        id: u64,
        buyer: u64,
        answer: Answer,
        decided: (bool, u64),
    ) -> Checked {
        self.log
            .push(format!("#{id} (buyer {buyer}) answers {answer:?}"));
        self.check_answer(buyer, &answer, decided).await?;
        let (recovered, disturbances) = decided;
        if answer == Answer::SoldOut && recovered {
            self.told_sold_out.push((buyer, disturbances));
        }
        if let Answer::Created(order_id) = answer {
            self.acknowledged.push((order_id, buyer));
        }
        self.answers.insert(id, answer);
        Ok(())
    }

    /// A buyer's answer must agree with MySQL.
    async fn check_answer(&mut self, buyer: u64, answer: &Answer, decided: (bool, u64)) -> Checked {
        let theirs = self.order_of(buyer).await;
        match answer {
            Answer::Created(id) => promise!(
                self,
                theirs == Some(*id),
                "201 {id} but MySQL has {theirs:?}"
            ),
            Answer::AlreadyOrdered(id) => promise!(
                self,
                theirs == Some(*id),
                "already_ordered {id} but MySQL has {theirs:?}"
            ),
            Answer::SoldOut if decided == (true, self.disturbances) => promise!(
                self,
                theirs.is_none(),
                "sold_out, but MySQL holds order {theirs:?} of buyer {buyer}"
            ),
            _ => {}
        }
        Ok(())
    }

    /// Returns whether the sync could begin (no other sync holds the lease).
    async fn sync_begin(&mut self) -> Result<bool, TestCaseError> {
        let (stock, _) = self.mysql_state().await;
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
        let flushes = self.flushes;
        let clean = self
            .requests
            .iter()
            .all(|r| !r.draining(|d| d.epoch < flushes && d.rows.is_none() && !d.batch.is_empty()));
        self.syncs.push(SyncRun {
            token,
            stock: stock as i64,
            begin_ms: self.begin_ms,
            end_ms: self.end_ms,
            after: 0,
            staged_all: false,
            epoch: self.flushes,
            clean,
        });
        Ok(true)
    }

    async fn sync_stage(&mut self, n: usize) -> Checked {
        let after = self.syncs[n].after;
        let page = self.buyers_page(after).await;
        let run = &self.syncs[n];
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
        if finished {
            self.synced = true;
            if run.epoch == self.flushes {
                self.loaded = true;
                self.recovered |= run.clean;
            }
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

    /// A creation whose load reply was lost: the component deletes the MySQL rows again,
    /// and Redis keeps a sale state for a voucher MySQL no longer has.
    async fn create_fails(&mut self) -> Checked {
        let voucher = scripts::create_voucher(1, -60, 3600).await;
        let ghost = Sale {
            conn: self.sale.conn.clone(),
            voucher,
        };
        ghost.load(1, self.begin_ms, self.end_ms, &[]).await;
        self.query::<u64>("DELETE FROM tb_voucher WHERE id = ?", (voucher,))
            .await;
        self.log.push(format!("creating voucher {voucher} fails"));
        // Whatever Redis kept of it, nobody can buy it.
        let admission = ghost.try_admit_limited(1, self.batch, MAX_QUEUED).await;
        if let Ok(Admission {
            decision: Decision::Admitted(ticket),
            lease: Some((token, batch)),
        }) = admission
        {
            let rows = match commit(voucher, &batch).await {
                Ok((rows, _)) => rows,
                Err(error) => {
                    self.log.push(format!("the ghost's commit fails: {error}"));
                    return Ok(());
                }
            };
            let entries: Vec<(String, &'static str, u64)> = batch
                .iter()
                .zip(rows)
                .map(|(entry, row)| {
                    let (outcome, order_id) = outcome_of(row);
                    (entry.clone(), outcome, order_id)
                })
                .collect();
            promise!(
                self,
                entries
                    .iter()
                    .all(|e| e.1 == "sold_out" || e.1 == "id_taken"),
                "deleted voucher {voucher}: {entries:?}"
            );
            let own = format!("1:{ticket}");
            let published = ghost
                .publish_batch(&token, &own, &entries, self.batch)
                .await;
            promise!(self, published.is_ok(), "publish failed: {published:?}");
        }
        let orders: Vec<u64> = self
            .query(
                "SELECT id FROM tb_voucher_order WHERE voucher_id = ?",
                (voucher,),
            )
            .await;
        promise!(
            self,
            orders.is_empty(),
            "orders {orders:?} for deleted voucher {voucher}"
        );
        Ok(())
    }

    /// The promises that hold after every step.
    async fn check(&mut self) -> Checked {
        let (stock, _) = self.mysql_state().await;
        let orders = self.orders().await;
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
        let records: HashMap<u64, String> = self.sale.records().await.into_iter().collect();
        for (buyer, record) in &records {
            if let Some(order) = record.strip_prefix("o:") {
                promise!(
                    self,
                    per_buyer.get(buyer).map(u64::to_string).as_deref() == Some(order),
                    "Redis records buyer {buyer} as {record}, MySQL has {:?}",
                    per_buyer.get(buyer)
                );
            }
        }
        // The queue and the queued records agree: one entry per queued purchase, and an
        // entry whose record is not its own only once MySQL's order replaced it (a sync).
        let queue = self.sale.queue().await;
        let mut entries = HashSet::new();
        for entry in &queue {
            promise!(
                self,
                entries.insert(entry),
                "{entry} queued twice: {queue:?}"
            );
            let (buyer, ticket) = split_entry(entry);
            let record = records.get(&buyer);
            promise!(
                self,
                record == Some(&format!("q:{ticket}"))
                    || record.is_some_and(|r| r.starts_with("o:")),
                "queue entry {entry}, yet buyer {buyer}'s record is {record:?}"
            );
        }
        let mut queued = 0;
        for (buyer, record) in &records {
            if let Some(ticket) = record.strip_prefix("q:") {
                queued += 1;
                promise!(
                    self,
                    entries.contains(&format!("{buyer}:{ticket}")),
                    "buyer {buyer} is {record}, the queue is {queue:?}"
                );
            }
        }
        if self.loaded {
            // Never too stingy: the units Redis can still hand out, and those its queued
            // purchases hold, cover what MySQL has left.
            let redis_stock = self.sale.stock().await;
            promise!(
                self,
                redis_stock.is_some_and(|s| s + queued >= stock as i64),
                "Redis too stingy: stock {redis_stock:?} + {queued} queued < MySQL stock {stock}"
            );
        }
        // A sold_out is final while Redis lost nothing and no unit came back.
        for (buyer, disturbances) in &self.told_sold_out {
            if *disturbances == self.disturbances {
                promise!(
                    self,
                    !per_buyer.contains_key(buyer),
                    "buyer {buyer} was told sold_out, and now holds order {:?}",
                    per_buyer.get(buyer)
                );
            }
        }
        Ok(())
    }

    /// Every request in flight runs to its end, as the component would run it: drainers
    /// commit and publish, waiters take their news or claim; a lease whose holder died
    /// lapses.
    async fn settle_all(&mut self) -> Checked {
        for _ in 0..SETTLE_STEPS {
            if self.requests.is_empty() {
                return Ok(());
            }
            // Drainers first, then waiters with news: a waiter that claims finds only
            // the lease of a request that died, which then lapses.
            let mut next = self.requests.iter().position(|r| r.draining(|_| true));
            for (i, request) in self.requests.iter().enumerate() {
                if next.is_some() {
                    break;
                }
                if !self.sale.news(own(request)).await.is_empty() {
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

    /// The i-th request's next move: a drainer commits or publishes, a waiter takes its
    /// news or claims. Returns whether it waits on someone else's lease.
    async fn proceed(&mut self, i: usize) -> Result<bool, TestCaseError> {
        if self.requests[i].draining(|d| d.rows.is_none()) {
            self.commit(i).await?;
        } else if self.requests[i].draining(|_| true) {
            self.publish(i).await?;
        } else if self.sale.news(own(&self.requests[i])).await.is_empty() {
            return self.claim(i).await;
        } else {
            self.deliver(i).await?;
        }
        Ok(false)
    }

    /// A buyer presses until she gets a final answer (`busy` and `503` are retried, after
    /// the lease a dead waiter was handed lapsed), which must be MySQL's word for her.
    async fn press_until_final(&mut self, buyer: u64) -> Result<Answer, TestCaseError> {
        let had = self.order_of(buyer).await;
        let mut answer = Answer::Unavailable;
        // MySQL's stock and the purchases queued ahead of her when admission decided.
        let mut decided = (0, 0);
        for _ in 0..self.buyers + self.initial + 8 {
            decided = (self.mysql_state().await.0, self.queued().await);
            let id = self.press(buyer).await?;
            self.check().await?;
            self.settle_all().await?;
            answer = self.answers[&id].clone();
            match answer {
                Answer::Busy => {
                    self.sale.expire_lease().await;
                    self.log.push("the drainer's lease lapses".into());
                }
                Answer::Unavailable => {}
                _ => break,
            }
        }
        match (had, &answer) {
            (Some(order), Answer::Created(id) | Answer::AlreadyOrdered(id)) => promise!(
                self,
                *id == order,
                "buyer {buyer} has order {order} in MySQL but hears {answer:?}"
            ),
            // Her queued purchase committed by this press: `check_answer` saw it hers.
            (None, Answer::Created(_) | Answer::AlreadyOrdered(_)) => {}
            // Every unit MySQL had left was held by a purchase queued ahead of her (which
            // may still give it back, its order id taken).
            (None, Answer::SoldOut) => {
                let (stock, queued) = decided;
                promise!(
                    self,
                    stock <= queued,
                    "buyer {buyer} hears sold_out while MySQL has {stock} units for {queued} queued"
                );
            }
            _ => promise!(self, false, "buyer {buyer} ends with {answer:?}"),
        }
        Ok(answer)
    }

    /// The sale goes quiet: every live request runs to its end, leases lapse, the admin
    /// syncs after a loss; then every buyer presses until she is answered for good, then
    /// new buyers until MySQL is sold out, and everyone hears what MySQL holds for her.
    async fn quiesce(&mut self) -> Checked {
        self.log
            .push("-- quiet: every request in flight runs to its end".into());
        self.syncs.clear();
        self.sale.expire_sync_lease().await;
        self.settle_all().await?;
        self.log.push("-- every lease lapses".into());
        self.sale.expire_lease().await;
        if !self.recovered || !self.loaded {
            self.sync().await?;
            promise!(
                self,
                self.recovered && self.loaded,
                "the admin's sync did not load the voucher"
            );
        }
        self.log.push("-- every buyer presses".into());
        for buyer in 1..=self.buyers {
            self.press_until_final(buyer).await?;
        }
        // Every admitted buyer ends with an order or her unit back.
        let (stock, _) = self.mysql_state().await;
        let redis_stock = self.sale.stock().await;
        let queue = self.sale.queue().await;
        let queued: Vec<(u64, String)> = self
            .sale
            .records()
            .await
            .into_iter()
            .filter(|(_, record)| record.starts_with("q:"))
            .collect();
        promise!(
            self,
            queue.is_empty() && queued.is_empty(),
            "every buyer answered, yet queued {queue:?}, records {queued:?}"
        );
        let agrees = match redis_stock {
            Some(s) if self.synced => s >= stock as i64,
            Some(s) => s == stock as i64,
            None => false,
        };
        promise!(
            self,
            agrees,
            "quiet, yet Redis stock {redis_stock:?} vs MySQL {stock} (synced: {})",
            self.synced
        );
        // New buyers until one hears sold_out: the sale is then sold out.
        let mut newcomers = Vec::new();
        for buyer in 100..100 + 2 * self.initial + 4 {
            newcomers.push(buyer);
            if self.press_until_final(buyer).await? == Answer::SoldOut {
                break;
            }
        }
        let (stock, _) = self.mysql_state().await;
        promise!(self, stock == 0, "new buyers left {stock} units in MySQL");
        self.log.push("-- everyone presses once more".into());
        for buyer in (1..=self.buyers).chain(newcomers) {
            let had = self.order_of(buyer).await;
            let id = self.press(buyer).await?;
            self.settle_all().await?;
            let answer = self.answers[&id].clone();
            let expected = match had {
                Some(order) => Answer::AlreadyOrdered(order),
                None => Answer::SoldOut,
            };
            promise!(
                self,
                answer == expected,
                "buyer {buyer} hears {answer:?}, MySQL stands for {expected:?}"
            );
        }
        let redis_stock = self.sale.stock().await;
        let queue = self.sale.queue().await;
        promise!(
            self,
            redis_stock == Some(0) && queue.is_empty(),
            "sold out, yet Redis stock {redis_stock:?}, queue {queue:?}"
        );
        Ok(())
    }

    /// The rows a query returns, on the explorer's connection.
    async fn query<T: FromRow + Send + 'static>(
        &mut self,
        sql: &str,
        params: impl Into<Params> + Send,
    ) -> Vec<T> {
        self.db.exec(sql, params).await.unwrap()
    }

    /// The purchases Redis holds queued (`q:` records).
    async fn queued(&self) -> u64 {
        let records = self.sale.records().await;
        records.iter().filter(|(_, r)| r.starts_with("q:")).count() as u64
    }

    /// MySQL's (stock, initial stock).
    async fn mysql_state(&mut self) -> (u64, u64) {
        let voucher = self.sale.voucher;
        self.query(
            "SELECT stock, initial_stock FROM tb_seckill_voucher WHERE voucher_id = ?",
            (voucher,),
        )
        .await[0]
    }

    /// (order id, buyer) of every order of the voucher.
    async fn orders(&mut self) -> Vec<(u64, u64)> {
        let voucher = self.sale.voucher;
        self.query(
            "SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = ?",
            (voucher,),
        )
        .await
    }

    /// `Db::order_of`: the buyer's order of the voucher.
    async fn order_of(&mut self, buyer: u64) -> Option<u64> {
        let voucher = self.sale.voucher;
        self.query(
            "SELECT id FROM tb_voucher_order WHERE user_id = ? AND voucher_id = ?",
            (buyer, voucher),
        )
        .await
        .first()
        .copied()
    }

    /// `Db::buyers_page` with the explorer's page size, as (user, order id).
    async fn buyers_page(&mut self, after: u64) -> Vec<(u64, u64)> {
        let voucher = self.sale.voucher;
        self.query(
            "SELECT user_id, id FROM tb_voucher_order \
             WHERE voucher_id = ? AND id > ? ORDER BY id LIMIT ?",
            (voucher, after, SYNC_PAGE as u64),
        )
        .await
    }
}

/// A request's queued purchase, `<user>:<ticket>`: its name in the queue, in the lease
/// and in its outcome list.
fn own(request: &Request) -> &str {
    request.own.as_deref().expect("a queued purchase")
}

/// The answer to a decision that queued nothing of the buyer's.
fn decision_answer(decision: &Decision) -> Answer {
    match decision {
        Decision::AlreadyOrdered(id) => Answer::AlreadyOrdered(id.parse().unwrap()),
        Decision::SoldOut => Answer::SoldOut,
        Decision::Throttled => Answer::Throttled,
        Decision::Missing => Answer::Unavailable,
        other => panic!("no answer of its own for {other:?}"),
    }
}

/// The answer to MySQL's verdict on a buyer's purchase (`src/orders.rs`, `answer`).
fn verdict_answer(outcome: &str, order_id: u64) -> Answer {
    match outcome {
        "ordered" => Answer::Created(order_id),
        "duplicate" => Answer::AlreadyOrdered(order_id),
        "sold_out" => Answer::SoldOut,
        "id_taken" => Answer::Unavailable,
        other => panic!("outcome {other}"),
    }
}

/// `seckill_commit_batch` on a batch of queue entries. MySQL is up in the model (its
/// failures are steps of their own), but other suites share it: a deadlock or lock wait
/// that outlasted the procedure's three tries is a failed try, as the component sees it.
/// Any other error fails the schedule.
async fn commit(voucher: u64, batch: &[String]) -> Result<(Vec<CommitRow>, u64), String> {
    let orders: Vec<(u64, u64)> = batch
        .iter()
        .map(|entry| {
            let (user, ticket) = split_entry(entry);
            (order_id_of(&ticket), user)
        })
        .collect();
    match scripts::commit_batch_counted(voucher, &orders).await {
        Ok(committed) => Ok(committed),
        Err(mysql_async::Error::Server(error)) if [1205, 1213].contains(&error.code) => {
            Err(format!("MySQL error {}: {}", error.code, error.message))
        }
        Err(error) => panic!("CALL failed: {error}"),
    }
}

#[test]
fn every_promise_holds_under_random_schedules() {
    let cases = setting("SCHEDULE_CASES", DEFAULT_CASES as u64) as u32;
    let buyers = setting("SCHEDULE_BUYERS", DEFAULT_BUYERS).max(1);
    let most_stock = setting("SCHEDULE_STOCK", DEFAULT_STOCK).max(1);
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
    let started = std::time::Instant::now();
    let schedules = (
        1..=most_stock,
        prop::sample::select(BATCHES.to_vec()),
        prop::collection::vec(step(buyers), 1..60),
    );
    let result = TestRunner::new(config).run(&schedules, |(stock, batch, steps)| {
        let case = ran.fetch_add(1, Ordering::SeqCst) + 1;
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            runtime.block_on(async {
                let mut world = World::new(&redis, stock, buyers, batch).await;
                for step in &steps {
                    world.log.push(format!("> {step:?}"));
                    world.run(step).await?;
                }
                world.quiesce().await?;
                let _ = world.db.disconnect().await;
                Ok(())
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
        "{} schedules run (shrinking included) with {buyers} buyers and up to {most_stock} units in {:.1} s",
        ran.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    );
    if let Err(failure) = result {
        panic!("a promise broke (first failure at schedule {found}): {failure}");
    }
}

/// A live sale of a fresh MySQL voucher with `stock` units, on the shared Redis: one
/// order sequence for every suite, where private servers started in the same millisecond
/// would hand out the same order ids.
async fn live_sale(stock: u32) -> Sale {
    let voucher = scripts::create_voucher(stock, -60, 3600).await;
    let sale = Sale {
        conn: seckill_tests::backends::redis().await,
        voucher,
    };
    let now = sale.now_ms().await;
    sale.load(stock as i64, now - 60_000, now + 3_600_000, &[])
        .await;
    sale
}

/// The (outcome, order id) MySQL reads for each purchase of a batch.
fn outcomes(rows: Vec<CommitRow>) -> Vec<(&'static str, u64)> {
    rows.into_iter().map(outcome_of).collect()
}

/// A buyer is never told a final `sold_out` while her earlier purchase can still commit:
/// a queued buyer pressing again hears `queued` (the component answers `busy`), whatever
/// Redis's stock and however full the queue, and her purchase then commits and is hers.
#[tokio::test]
async fn a_queued_buyer_pressing_again_is_never_told_sold_out() {
    let sale = live_sale(1).await;

    // Buyer 1 takes the last unit; her request holds the lease, its CALL not yet run.
    let first = sale.admit(1).await;
    let ticket = first.ticket().expect("admitted").to_string();
    let entry = format!("1:{ticket}");
    assert_eq!(first.lease, Some((entry.clone(), vec![entry.clone()])));
    let sold_out = Admission {
        decision: Decision::SoldOut,
        lease: None,
    };
    assert_eq!(sale.admit(2).await, sold_out);

    let queued = Admission {
        decision: Decision::Queued(ticket.clone()),
        lease: None,
    };
    for stock in [0, -3, 1, 7, 0] {
        let _: () = sale
            .conn
            .clone()
            .hset(key(sale.voucher, "voucher"), "stock", stock)
            .await
            .unwrap();
        for max_queued in [MAX_QUEUED, 1] {
            let again = sale.try_admit_limited(1, BATCH, max_queued).await.unwrap();
            assert_eq!(
                again, queued,
                "Redis stock {stock}, queue limit {max_queued}"
            );
        }
    }
    assert_eq!(sale.stock().await, Some(0), "a second press took a unit");
    assert_eq!(sale.queue().await, vec![entry.clone()]);

    // Her earlier attempt commits, and her next press hears it.
    let order_id = order_id_of(&ticket);
    let rows = scripts::commit_batch(sale.voucher, &[(order_id, 1)])
        .await
        .unwrap();
    assert_eq!(outcomes(rows), [("ordered", order_id)]);
    let entries = [(entry.clone(), "ordered", order_id)];
    let published = sale.publish_batch(&entry, &entry, &entries, BATCH).await;
    assert_eq!(published.unwrap(), Published::Done);
    assert_eq!(
        sale.admit(1).await.decision,
        Decision::AlreadyOrdered(order_id.to_string())
    );
    assert_eq!(sale.admit(2).await, sold_out);
}

/// The same when the request that held her purchase died before its CALL: once its lease
/// lapses, her next press is handed the queue and commits her purchase (the component
/// answers `already_ordered` with its id), and the news waits for the request she may
/// still have waiting.
#[tokio::test]
async fn a_queued_buyer_s_next_press_commits_her_purchase_after_its_drainer_died() {
    let sale = live_sale(1).await;
    let first = sale.admit(1).await;
    let ticket = first.ticket().expect("admitted").to_string();
    let entry = format!("1:{ticket}");
    assert_eq!(sale.admit(2).await.decision, Decision::SoldOut);

    sale.expire_lease().await;
    let again = sale.admit(1).await;
    assert_eq!(again.decision, Decision::Queued(ticket.clone()));
    let (token, batch) = again.lease.expect("the free lease goes to her press");
    assert!(token.starts_with("r:"), "{token}");
    assert_eq!(batch, vec![entry.clone()]);
    let order_id = order_id_of(&ticket);
    let rows = scripts::commit_batch(sale.voucher, &[(order_id, 1)])
        .await
        .unwrap();
    assert_eq!(outcomes(rows), [("ordered", order_id)]);
    let entries = [(entry.clone(), "ordered", order_id)];
    let published = sale.publish_batch(&token, "", &entries, BATCH).await;
    assert_eq!(published.unwrap(), Published::Done);
    assert_eq!(sale.news(&entry).await, vec![format!("ordered:{order_id}")]);
    assert_eq!(sale.record(1).await, Some(format!("o:{order_id}")));
    assert_eq!(sale.lease().await, None);
    assert_eq!(sale.admit(2).await.decision, Decision::SoldOut);
}

/// Admission decides without waiting on MySQL: while a transaction holds the voucher's
/// stock row (a stuck MySQL: every batch of the voucher blocks on it), every buyer is
/// decided at once, admitted or sold out, never throttled or left waiting; the queued
/// purchases stay queued and commit, once each, when MySQL comes back.
#[tokio::test]
async fn admission_decides_while_mysql_is_stuck() {
    const STOCK: u32 = 5;
    const CROWD: u64 = 40;
    let sale = live_sale(STOCK).await;
    let voucher = sale.voucher;

    let holder = RowLock::hold(voucher).await;

    // A lone buyer drains her own batch of one; its CALL blocks on the row (and gives up
    // after the procedure's lock wait, within its lease).
    let first = sale.admit(1).await;
    let (token, batch) = first.lease.clone().expect("a lone buyer drains");
    let ticket = first.ticket().expect("admitted").to_string();
    let stuck =
        tokio::spawn(
            async move { scripts::commit_batch(voucher, &[(order_id_of(&ticket), 1)]).await },
        );

    // A crowd, each on her own connection, as Spin instances are.
    let mut presses = Vec::new();
    for user in 2..2 + CROWD {
        let sale = sale.another_connection().await;
        presses.push(tokio::spawn(async move { (user, sale.admit(user).await) }));
    }
    let mut admitted = vec![(1, first.ticket().unwrap().to_string())];
    let mut sold_out = 0;
    for press in presses {
        let (user, admission) = press.await.unwrap();
        assert_eq!(admission.lease, None, "the lease is held: {admission:?}");
        match admission.decision {
            Decision::Admitted(ticket) => admitted.push((user, ticket)),
            Decision::SoldOut => sold_out += 1,
            other => panic!("buyer {user}: {other:?} while MySQL is stuck"),
        }
    }
    assert_eq!((admitted.len() as u32, sold_out), (STOCK, CROWD - 4));
    // Pressing again changes nothing and still waits on nothing.
    for (user, ticket) in &admitted {
        let again = sale.admit(*user).await;
        assert_eq!(again.decision, Decision::Queued(ticket.clone()));
    }
    let (mysql_stock, orders): (u64, u64) = scripts::connect()
        .await
        .unwrap()
        .exec_first(
            "SELECT stock, (SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?) \
             FROM tb_seckill_voucher WHERE voucher_id = ?",
            (voucher, voucher),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((mysql_stock, orders), (STOCK as u64, 0));

    // MySQL comes back. The stuck drainer commits its batch, or gave up waiting for the
    // row: either way its lease lapses, and the next press carries the queue on,
    // whatever it is told.
    holder.release().await;
    let purchases: Vec<(u64, u64)> = admitted.iter().map(|(u, t)| (order_id_of(t), *u)).collect();
    let expected: Vec<(&str, u64)> = purchases.iter().map(|(o, _)| ("ordered", *o)).collect();
    match stuck.await.unwrap() {
        Ok(rows) => assert_eq!(outcomes(rows), expected[..1]),
        Err(mysql_async::Error::Server(error)) if error.code == 1205 => {}
        Err(error) => panic!("the stuck CALL: {error}"),
    }
    sale.expire_lease().await;
    let rescue = sale.admit(500).await;
    assert_eq!(rescue.decision, Decision::SoldOut);
    let (rescuer, queue) = rescue.lease.expect("the free lease goes to the press");
    let entries: Vec<String> = admitted.iter().map(|(u, t)| format!("{u}:{t}")).collect();
    assert_eq!(queue, entries);
    let rows = scripts::commit_batch(voucher, &purchases).await.unwrap();
    assert_eq!(outcomes(rows), expected, "each order committed once");
    let published: Vec<(String, &str, u64)> = entries
        .iter()
        .zip(&expected)
        .map(|(entry, (outcome, id))| (entry.clone(), *outcome, *id))
        .collect();
    let late = sale
        .publish_batch(&token, &entries[0], &published[..1], BATCH)
        .await;
    assert_eq!(
        late.unwrap(),
        Published::Lost,
        "the lapsed drainer published"
    );
    assert_eq!(batch, entries[..1]);
    let done = sale.publish_batch(&rescuer, "", &published, BATCH).await;
    assert_eq!(done.unwrap(), Published::Done);
    for (user, ticket) in &admitted {
        let (order_id, entry) = (order_id_of(ticket), format!("{user}:{ticket}"));
        assert_eq!(sale.record(*user).await, Some(format!("o:{order_id}")));
        assert_eq!(sale.news(&entry).await, vec![format!("ordered:{order_id}")]);
    }
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.lease().await, None);
    let record = seckill_tests::invariants::read(voucher).await;
    let ours: HashMap<u64, u64> = purchases.into_iter().collect();
    assert_eq!(record.orders, ours);
    assert_eq!((record.mysql_stock, sale.stock().await), (0, Some(0)));
}

/// A waiting request handed the lease ends, and the queue moves on, also when a sync has
/// meanwhile recorded her order (committed by her second press, which died before
/// publishing it): her drain publishes nothing, and must not hand the lease back to its
/// own entry at the head of the queue with `lead` in its own outcome list, which its
/// wait (`await_verdict`, no deadline on that path) takes up again at once, for ever,
/// while nobody else may drain the voucher.
#[tokio::test]
async fn a_waiter_handed_the_lease_after_a_sync_recorded_her_order_gets_an_answer() {
    let sale = live_sale(2).await;
    let voucher = sale.voucher;
    // Buyer 2 drains; buyer 1's request waits behind her.
    let two = sale.admit(2).await;
    let (token2, _) = two.lease.clone().expect("a lone buyer drains");
    let t2 = two.ticket().unwrap().to_string();
    let one = sale.admit(1).await;
    assert_eq!(one.lease, None);
    let t1 = one.ticket().expect("admitted").to_string();
    let (e1, e2) = (format!("1:{t1}"), format!("2:{t2}"));
    let (id1, id2) = (order_id_of(&t1), order_id_of(&t2));
    let rows = scripts::commit_batch(voucher, &[(id2, 2)]).await.unwrap();
    assert_eq!(outcomes(rows), [("ordered", id2)]);
    let done = sale
        .publish_batch(&token2, &e2, &[(e2.clone(), "ordered", id2)], BATCH)
        .await;
    assert_eq!(done.unwrap(), Published::Done);
    assert_eq!(sale.lease().await.as_deref(), Some(e1.as_str()));

    // Her waiter takes up the lease handed to it, then stalls past the hand-over; her
    // second press takes the free lease, commits her purchase and dies; her waiter's
    // publication is refused, and its next claim takes the lease again.
    let done_key = key(voucher, &format!("done:{e1}"));
    let lead: Option<String> = sale.conn.clone().lpop(&done_key, None).await.unwrap();
    assert_eq!(lead.as_deref(), Some("lead"));
    sale.expire_lease().await;
    let again = sale.admit(1).await;
    assert_eq!(again.decision, Decision::Queued(t1.clone()));
    let (_, batch) = again.lease.expect("the free lease goes to her press");
    assert_eq!(batch, vec![e1.clone()]);
    let rows = scripts::commit_batch(voucher, &[(id1, 1)]).await.unwrap();
    assert_eq!(outcomes(rows), [("ordered", id1)]);
    let refused = sale.publish_batch(&e1, &e1, &[], BATCH).await.unwrap();
    assert_eq!(refused, Published::Lost);
    sale.expire_lease().await;
    assert_eq!(sale.claim(1, &t1).await.unwrap(), Claimed::Lead);

    // An admin sync records both orders.
    assert!(sale.begin_load("sync").await.unwrap());
    assert!(sale
        .stage_buyers("sync", &[(2, id2), (1, id1)])
        .await
        .unwrap());
    let now = sale.now_ms().await;
    let terms = Terms {
        stock: 0,
        begin_ms: now - 60_000,
        end_ms: now + 3_600_000,
        initial_stock: 2,
        title: "voucher",
        description: "",
    };
    assert!(sale.finish_load("sync", &terms).await.unwrap());

    // Her waiter drains and waits as `group_commit::Queue` does.
    let mut ended = None;
    for _ in 0..20 {
        let mut published = sale.publish_batch(&e1, &e1, &[], BATCH).await.unwrap();
        while let Published::Next(batch) = published {
            let orders: Vec<(u64, u64)> = batch
                .iter()
                .map(|e| (order_id_of(&split_entry(e).1), split_entry(e).0))
                .collect();
            let rows = scripts::commit_batch(voucher, &orders).await.unwrap();
            let entries: Vec<(String, &str, u64)> = batch
                .iter()
                .zip(outcomes(rows))
                .map(|(e, (outcome, id))| (e.clone(), outcome, id))
                .collect();
            if let Some((_, outcome, id)) = entries.iter().find(|(e, _, _)| *e == e1) {
                ended = Some(format!("{outcome}:{id}"));
            }
            published = sale.publish_batch(&e1, &e1, &entries, BATCH).await.unwrap();
        }
        if ended.is_some() {
            break;
        }
        let news: Option<String> = sale.conn.clone().lpop(&done_key, None).await.unwrap();
        match news.as_deref() {
            Some("lead") => continue,
            Some(verdict) => ended = Some(verdict.to_string()),
            None => ended = Some(format!("{:?}", sale.claim(1, &t1).await.unwrap())),
        }
        break;
    }
    assert!(
        ended.is_some(),
        "her waiter still drains after 20 rounds: lease {:?}, queue {:?}, news {:?}",
        sale.lease().await,
        sale.queue().await,
        sale.news(&e1).await
    );
}

/// After Redis lost a sale and the admin's sync rebuilt it, a buyer whose purchase was
/// committed hears `already_ordered` (docs/operations.md, "What an admin must do"), also when the
/// drainer that held her purchase at the loss commits it only after the sync read MySQL:
/// it told her 201, and her next press must not be a final `sold_out`.
#[tokio::test]
async fn a_purchase_committed_after_the_sync_is_heard_by_its_buyer() {
    let sale = live_sale(1).await;
    let voucher = sale.voucher;
    // Buyer 1's request drains her own purchase; its CALL is under way.
    let one = sale.admit(1).await;
    let (token, batch) = one.lease.clone().expect("a lone buyer drains");
    let t1 = one.ticket().expect("admitted").to_string();
    let (e1, id1) = (format!("1:{t1}"), order_id_of(&t1));
    assert_eq!(batch, vec![e1.clone()]);

    // Redis loses the sale; the admin syncs it from MySQL (no orders, one unit).
    sale.lose(&["voucher", "buyers", "queue", "lease"]).await;
    assert!(sale.begin_load("sync").await.unwrap());
    assert!(sale.stage_buyers("sync", &[]).await.unwrap());
    let now = sale.now_ms().await;
    let terms = Terms {
        stock: 1,
        begin_ms: now - 60_000,
        end_ms: now + 3_600_000,
        initial_stock: 1,
        title: "voucher",
        description: "",
    };
    assert!(sale.finish_load("sync", &terms).await.unwrap());

    // Her drainer's CALL lands: her order is committed, the publication refused, and
    // her request answers 201 from MySQL's verdict.
    let rows = scripts::commit_batch(voucher, &[(id1, 1)]).await.unwrap();
    assert_eq!(outcomes(rows), [("ordered", id1)]);
    let refused = sale
        .publish_batch(&token, &e1, &[(e1.clone(), "ordered", id1)], BATCH)
        .await;
    assert_eq!(refused.unwrap(), Published::Lost);

    // Buyer 2 takes the unit Redis still counts; MySQL has none for her.
    let two = sale.admit(2).await;
    let (token2, _) = two.lease.clone().expect("a lone buyer drains");
    let t2 = two.ticket().expect("admitted").to_string();
    let (e2, id2) = (format!("2:{t2}"), order_id_of(&t2));
    let rows = scripts::commit_batch(voucher, &[(id2, 2)]).await.unwrap();
    assert_eq!(outcomes(rows), [("sold_out", id2)]);
    let done = sale
        .publish_batch(&token2, &e2, &[(e2.clone(), "sold_out", id2)], BATCH)
        .await;
    assert_eq!(done.unwrap(), Published::Done);

    assert_eq!(
        sale.admit(1).await.decision,
        Decision::AlreadyOrdered(id1.to_string()),
        "buyer 1 holds order {id1}, told 201"
    );
}

/// A voucher whose sale state Redis lost answers `missing` (503 until the admin's sync),
/// also once another voucher was loaded into the restarted Redis: it exists in MySQL, and
/// `unknown` (404) would tell a storefront it does not.
#[tokio::test]
async fn a_voucher_redis_lost_stays_missing_after_another_is_loaded() {
    let redis = RedisServer::start(Persistence::None).await;
    let load = |stock: u32| {
        let redis = &redis;
        async move {
            let sale = Sale {
                conn: redis.conn().await,
                voucher: scripts::create_voucher(stock, -60, 3600).await,
            };
            let now = sale.now_ms().await;
            sale.load(stock as i64, now - 60_000, now + 3_600_000, &[])
                .await;
            sale
        }
    };
    let lost = load(1).await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut lost.conn.clone())
        .await
        .unwrap();
    assert_eq!(lost.admit(1).await.decision, Decision::Missing);
    let _created = load(1).await;
    assert_eq!(lost.admit(1).await.decision, Decision::Missing);
}
