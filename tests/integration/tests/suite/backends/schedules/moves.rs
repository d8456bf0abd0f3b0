use std::sync::atomic::Ordering;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redis::AsyncCommands;

use seckill_core::purchase::{Input, Io};
use seckill_core::redis::{Command, Reply};
use seckill_core::returns::{self, Returns};
use seckill_core::sale::{
    ChangeTerms, Changed, Decision, Entry, LineAsk, Record, TakeSweep, Terms,
};
use seckill_core::sql::{self, Status};
use seckill_core::sync::{self, VoucherSync};
use seckill_core::{order_id, ApiError, BackendError, OrderId, Unavailable};
use seckill_tests::drivers::purchases::{self, InFlight};
use seckill_tests::drivers::scripts::{self, Sale};
use seckill_tests::promise;

use super::checks::{publication_outcomes, restock_command, show, swept_restock};
use super::world::{commit, user, Checked, GiveBackRun, Phase, Request, SyncRun, World};
use super::{GIVE_BACK_PAGE, LEFT_IN_LINE, SYNC_PAGE};

#[derive(Debug, Clone)]
pub(super) enum Step {
    /// A buyer presses "buy": her request runs its admission.
    Press {
        buyer: u64,
    },
    /// Every buyer presses, one after the other: a crowd that queues behind one drainer.
    Crowd,
    /// A buyer presses; admission runs, and its reply is lost: she hears a 503.
    PressReplyLost {
        buyer: u64,
    },
    /// The n-th request in flight does what it asked for, and goes on with the result.
    Proceed {
        n: usize,
    },
    /// The n-th request's I/O runs, and its reply is lost on the way back.
    ReplyLost {
        n: usize,
    },
    /// The n-th request's I/O cannot reach its server: nothing runs.
    Unreachable {
        n: usize,
    },
    /// Two requests' commits run at once, each on its own MySQL connection.
    CommitsRace {
        n: usize,
        m: usize,
    },
    /// The n-th request in flight dies where it stands.
    Die {
        n: usize,
    },
    /// The drainer's lease outlives its TTL.
    ExpireLease,
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
    /// Redis takes a snapshot (RDB) it may later restart from.
    Snapshot,
    /// Redis restarts from its last snapshot: what it wrote since is lost.
    Rollback,
    /// Redis restarts without persistence.
    Flush,
    /// Redis restarts without persistence, and its order sequence starts below the last
    /// number it handed out (more than 8 ids a millisecond before the restart, see
    /// docs/design.md): the next admission in the same second gets an order id already used.
    Collide,
    /// Time passes: the sale moves to its next phase (not started, live, ending in a few
    /// milliseconds, ended).
    Advance,
    /// A voucher creation whose Redis load reply is lost: MySQL's row is deleted again.
    CreateFails,
    /// The payment system pays the buyer's order (if she has one).
    Pay {
        buyer: u64,
    },
    /// The buyer cancels her order; the request then gives its unit back to the sale.
    Cancel {
        buyer: u64,
    },
    /// A payment or a cancellation runs in MySQL and its reply is lost: nothing follows
    /// it in Redis (the sale's next sweep gives the unit back).
    SettleReplyLost {
        buyer: u64,
        pay: bool,
    },
    /// Time passes every unpaid order's deadline to pay, and the sale's next sweep.
    Due,
    /// The admin's (or a cron job's) `POST /vouchers/{id}/expire`: a sweep of its own,
    /// under the sweep lease (when another request holds it, the admin waits for that
    /// sweep's end: its own then finds nothing more, and is not run).
    AdminExpire,
    /// A read of the feed (`GET /events`) that finds the sale's orders overdue: it sweeps
    /// their expiries under the sweep lease, unless another request holds it.
    FeedSweep,
    /// The n-th give-back in flight (a cancellation's restock, an admin's sweep) does its
    /// next I/O; or that I/O fails, run with its reply lost (`ran`) or not at all; or the
    /// request dies.
    GiveBack {
        n: usize,
    },
    GiveBackFails {
        n: usize,
        ran: bool,
    },
    GiveBackDies {
        n: usize,
    },
    /// MySQL loses its last commits: a failover to a replica that had not received the
    /// newest `k` unpaid orders (their rows, their events, what they took from the stock).
    MysqlLoses {
        k: u64,
    },
    /// A buyer joins the sale's line (`POST /vouchers/{id}/line`): a press that enters
    /// her in the line, at a place drawn at random in its first moments, where it would
    /// hear `sold_out` or `not_enough_left`. Its request stays in flight as a press's.
    Join {
        buyer: u64,
    },
    /// A buyer looks at the line (`GET /vouchers/{id}/line`): it hands units to the
    /// line, and answers her purchase the line queued, her order, or her place.
    Look {
        buyer: u64,
    },
    /// A buyer leaves the line (`DELETE /vouchers/{id}/line`).
    Leave {
        buyer: u64,
    },
    /// The merchant adds `units` to the live sale (`PATCH /vouchers/{id}` with a higher
    /// stock): MySQL's change, on the explorer's connection, writes them as a restock;
    /// then its terms go to Redis (`change.lua`) and a give-back in flight applies it,
    /// driven (and lost, failed, killed) by the `GiveBack` steps.
    Restock {
        units: u64,
    },
    /// The same, its reply lost once MySQL committed: nothing reaches Redis, and the sale's
    /// next sweep, give-back or sync must deliver the units.
    RestockReplyLost {
        units: u64,
    },
}

pub(super) fn step(buyers: u64) -> impl Strategy<Value = Step> {
    let buyer = 1..=buyers;
    let n = 0..4usize;
    prop_oneof![
        12 => buyer.clone().prop_map(|buyer| Step::Press { buyer }),
        2 => Just(Step::Crowd),
        1 => buyer.clone().prop_map(|buyer| Step::PressReplyLost { buyer }),
        24 => n.clone().prop_map(|n| Step::Proceed { n }),
        2 => n.clone().prop_map(|n| Step::ReplyLost { n }),
        2 => n.clone().prop_map(|n| Step::Unreachable { n }),
        1 => (n.clone(), n.clone()).prop_map(|(n, m)| Step::CommitsRace { n, m }),
        2 => n.clone().prop_map(|n| Step::Die { n }),
        2 => Just(Step::ExpireLease),
        1 => (0..2usize).prop_map(|n| Step::SyncBegin { n }),
        1 => (0..2usize).prop_map(|n| Step::SyncStage { n }),
        1 => (0..2usize).prop_map(|n| Step::SyncFinish { n }),
        1 => Just(Step::Sync),
        1 => Just(Step::Snapshot),
        1 => Just(Step::Rollback),
        1 => Just(Step::Flush),
        1 => Just(Step::Collide),
        1 => Just(Step::Advance),
        1 => Just(Step::CreateFails),
        2 => buyer.clone().prop_map(|buyer| Step::Pay { buyer }),
        2 => buyer.clone().prop_map(|buyer| Step::Cancel { buyer }),
        1 => (buyer.clone(), any::<bool>()).prop_map(|(buyer, pay)| Step::SettleReplyLost { buyer, pay }),
        1 => Just(Step::Due),
        1 => Just(Step::AdminExpire),
        1 => Just(Step::FeedSweep),
        4 => n.clone().prop_map(|n| Step::GiveBack { n }),
        1 => (n.clone(), any::<bool>()).prop_map(|(n, ran)| Step::GiveBackFails { n, ran }),
        1 => n.clone().prop_map(|n| Step::GiveBackDies { n }),
        1 => (1..=3u64).prop_map(|k| Step::MysqlLoses { k }),
        8 => buyer.clone().prop_map(|buyer| Step::Join { buyer }),
        8 => buyer.clone().prop_map(|buyer| Step::Look { buyer }),
        3 => buyer.prop_map(|buyer| Step::Leave { buyer }),
        2 => (1..=2u64).prop_map(|units| Step::Restock { units }),
        1 => (1..=2u64).prop_map(|units| Step::RestockReplyLost { units }),
    ]
}

fn is_commit(io: &Io) -> bool {
    matches!(io, Io::Commit(_))
}

/// Whether a request may still commit a batch it read: one committing, or one sweeping
/// before the drain its admission handed it.
fn holds_batch(io: &Io) -> bool {
    matches!(io, Io::Commit(_) | Io::Sweep(_))
}

impl World {
    pub(super) async fn run(&mut self, step: &Step) -> Checked {
        match *step {
            Step::Press { buyer } => {
                self.press(buyer).await?;
            }
            Step::Join { buyer } => {
                self.ask(buyer, LineAsk::Join).await?;
            }
            Step::Look { buyer } => {
                self.ask(buyer, LineAsk::Look).await?;
            }
            Step::Leave { buyer } => self.leave(buyer).await,
            Step::Crowd => {
                for buyer in 1..=self.buyers {
                    self.press(buyer).await?;
                    self.check().await?;
                }
            }
            Step::PressReplyLost { buyer } => {
                let mut flight = self.flight(buyer);
                let ran = purchases::perform(&self.sale, &flight.purchase, &flight.io).await;
                flight.resume(Input::Redis(Err(BackendError::Redis(
                    "the reply was lost".into(),
                ))));
                self.log.push(format!(
                    "buyer {buyer} presses, admission's reply is lost: {}",
                    describe_input(&ran)
                ));
                let answer = flight.answer();
                promise!(
                    self,
                    answer == Some(&Err(ApiError::Unavailable(Unavailable::Redis))),
                    "a lost admission reply answers {answer:?}"
                );
            }
            Step::Proceed { n } => {
                if let Some(i) = self.nth(n, |_| true) {
                    self.proceed(i).await?;
                }
            }
            Step::ReplyLost { n } => {
                if let Some(i) = self.nth(n, |_| true) {
                    self.fail(i, true).await?;
                }
            }
            Step::Unreachable { n } => {
                if let Some(i) = self.nth(n, |_| true) {
                    self.fail(i, false).await?;
                }
            }
            Step::CommitsRace { n, m } => {
                let (i, j) = (
                    self.nth(n, |r| r.waits_on(is_commit)),
                    self.nth(m, |r| r.waits_on(is_commit)),
                );
                if let (Some(i), Some(j)) = (i, j) {
                    if i != j {
                        self.commits_race(i, j).await?;
                    }
                }
            }
            Step::Die { n } => {
                if let Some(i) = self.nth(n, |_| true) {
                    let request = self.requests.remove(i);
                    self.log.push(format!(
                        "#{} (buyer {}) dies before {}",
                        request.id,
                        request.buyer,
                        describe(&request.flight.io)
                    ));
                }
            }
            Step::ExpireLease => {
                self.sale.expire_lease().await;
                self.sale.expire_sweep_lease().await;
                self.log
                    .push("the drainer's and the sweeper's leases lapse".into());
            }
            Step::SyncBegin { n } => {
                if n >= self.syncs.len() && self.syncs.len() < 2 {
                    self.sync_begin().await?;
                }
            }
            Step::SyncStage { n } => {
                if n < self.syncs.len() && !self.syncs[n].staged_all() {
                    self.sync_stage(n).await?;
                }
            }
            Step::SyncFinish { n } => {
                if n < self.syncs.len() && self.syncs[n].staged_all() {
                    self.sync_finish(n).await?;
                }
            }
            Step::Sync => self.sync().await?,
            Step::Snapshot => self.take_snapshot().await,
            Step::Rollback => self.roll_back().await,
            Step::Flush => self.flush().await,
            Step::Collide => {
                self.flush().await;
                if let Some(entry) = self.last_admitted {
                    let ticket = entry.ticket;
                    let prefix = self.sale.keys().order_sequence();
                    let _: () = self
                        .sale
                        .conn
                        .clone()
                        .set(
                            format!("{prefix}:{}", ticket.seconds()),
                            (ticket.sequence() & 0x3_ffff) - 1,
                        )
                        .await
                        .unwrap();
                    self.log.push(format!(
                        "its order sequence hands out {ticket} again within its second"
                    ));
                }
            }
            Step::Advance => {
                let next = match self.phase_now().await {
                    Phase::NotStarted => Phase::Live,
                    Phase::Live => Phase::EndingSoon,
                    Phase::EndingSoon | Phase::Ended => Phase::Ended,
                };
                self.set_window(next).await;
                self.log.push(format!("time passes: the sale is {next:?}"));
            }
            Step::CreateFails => self.create_fails().await?,
            Step::Pay { buyer } => self.settle(buyer, Status::Paid, false).await?,
            Step::Cancel { buyer } => self.settle(buyer, Status::Cancelled, false).await?,
            Step::SettleReplyLost { buyer, pay } => {
                let to = if pay { Status::Paid } else { Status::Cancelled };
                self.settle(buyer, to, true).await?
            }
            Step::Due => self.pass_deadlines().await,
            Step::MysqlLoses { k } => self.mysql_loses(k).await,
            Step::AdminExpire => {
                if self.take_sweep("the admin's sweep").await {
                    let (run, io) = Returns::with_page(self.sale.voucher, true, GIVE_BACK_PAGE);
                    self.start_give_back("the admin's sweep".into(), run, io);
                }
            }
            Step::FeedSweep => {
                if self.take_sweep("a read of the feed").await {
                    let (run, io) = Returns::expiries(self.sale.voucher);
                    self.start_give_back("a read of the feed's sweep".into(), run, io);
                }
            }
            Step::GiveBack { n } => {
                if !self.give_backs.is_empty() {
                    self.give_back(n % self.give_backs.len(), None).await?;
                }
            }
            Step::GiveBackFails { n, ran } => {
                if !self.give_backs.is_empty() {
                    self.give_back(n % self.give_backs.len(), Some(ran)).await?;
                }
            }
            Step::GiveBackDies { n } => {
                if !self.give_backs.is_empty() {
                    let gone = self.give_backs.remove(n % self.give_backs.len());
                    self.log.push(format!("{} dies", gone.what));
                }
            }
            Step::Restock { units } => self.restock(units, false).await?,
            Step::RestockReplyLost { units } => self.restock(units, true).await?,
        }
        self.check().await
    }

    /// A payment (by the payment system) or a cancellation (by the buyer) of the buyer's
    /// order, as `POST /orders/{id}/pay` and `/cancel` run it: MySQL settles it, and a
    /// unit it gave back goes to the sale. With `reply_lost`, nothing follows MySQL.
    async fn settle(&mut self, buyer: u64, to: Status, reply_lost: bool) -> Checked {
        let Some(order) = self.order_of(buyer).await else {
            return Ok(());
        };
        let by = (to == Status::Cancelled).then(|| user(buyer));
        let settled = match scripts::settle_order(&mut self.db, order, by, to).await {
            Ok(settled) => settled,
            // A lock wait or deadlock (other suites share the server): nothing changed.
            Err(error) => {
                self.log
                    .push(format!("buyer {buyer}'s {to:?} fails: {error}"));
                return Ok(());
            }
        };
        let Some((status, changed, _)) = settled else {
            promise!(self, false, "MySQL knows no order {order} of buyer {buyer}");
            unreachable!()
        };
        self.log.push(format!(
            "buyer {buyer}'s order {order} to {to:?}: {status:?}{}{}",
            if changed { ", changed" } else { "" },
            if reply_lost {
                ", the reply is lost"
            } else {
                ""
            }
        ));
        if reply_lost {
            return Ok(());
        }
        if status == to {
            self.told_settled.push((order, to));
        }
        if changed && matches!(status, Status::Cancelled | Status::Expired) {
            let (run, io) = Returns::with_page(self.sale.voucher, false, GIVE_BACK_PAGE);
            self.start_give_back(format!("buyer {buyer}'s {to:?} restock"), run, io);
        }
        Ok(())
    }

    /// `units` more for the sale, as `PATCH /vouchers/{id}` adds them
    /// (`actions::vouchers::change`): MySQL first, then the terms in Redis, then a give-back
    /// of the restock (in flight); with `reply_lost`, nothing follows MySQL. A sale not
    /// begun would be reshaped instead, and an ended one takes no stock: neither is asked.
    async fn restock(&mut self, units: u64, reply_lost: bool) -> Checked {
        let phase = self.phase_now().await;
        if !matches!(phase, Phase::Live | Phase::EndingSoon) {
            return Ok(());
        }
        let sale = self.sale.sale();
        let restocked = scripts::restock_unless_contended(&mut self.db, sale, units).await;
        promise!(self, restocked.is_ok(), "a restock failed: {restocked:?}");
        let Ok(Some(version)) = restocked else {
            self.log.push(format!("a restock of {units} meets a lock"));
            return Ok(());
        };
        self.initial += units;
        self.restocks.push(units);
        self.restock_events = self.read_restock_events().await;
        self.log.push(format!(
            "the merchant restocks {units} units (terms version {version}){}",
            if reply_lost {
                ", the reply is lost"
            } else {
                ""
            }
        ));
        if reply_lost {
            return Ok(());
        }
        // MySQL's terms as the component reads them, in the explorer's window (it moves the
        // window rather than the clock).
        let found = scripts::lookup(self.sale.voucher).await.unwrap();
        let held = found.terms.expect("the sale's terms");
        let terms = Terms {
            stock: held.stock,
            initial_stock: held.initial_stock,
            ..self.terms(0)
        };
        let installed = self
            .sale
            .call(&ChangeTerms {
                voucher_id: self.sale.voucher,
                terms: &terms,
                terms_version: found.terms_version,
                returned_event: found.ledger.returned_event,
            })
            .await
            .unwrap();
        self.log
            .push(format!("the restock's terms into Redis: {installed:?}"));
        // As the component: with no sale in Redis, a sync installs MySQL's, units and all.
        if installed != Changed::Missing {
            let (run, io) = Returns::with_page(self.sale.voucher, false, GIVE_BACK_PAGE);
            self.start_give_back(format!("the restock of {units}'s give-back"), run, io);
        }
        Ok(())
    }

    /// A request other than a press takes the sale's sweep lease (`TakeSweep`): whether
    /// it was free.
    async fn take_sweep(&mut self, what: &str) -> bool {
        let taken = self
            .sale
            .call(&TakeSweep {
                voucher_id: self.sale.voucher,
            })
            .await
            .unwrap();
        if !taken {
            self.log
                .push(format!("{what} finds another request sweeping"));
        }
        taken
    }

    pub(super) fn start_give_back(&mut self, what: String, run: Returns, io: returns::Io) {
        self.log.push(format!("{what} begins"));
        self.give_backs.push(GiveBackRun { what, run, io });
    }

    /// The n-th give-back does its next I/O (`fails`: `None`), or the I/O fails: run with
    /// its reply lost (`Some(true)`) or not at all (`Some(false)`).
    pub(super) async fn give_back(&mut self, n: usize, fails: Option<bool>) -> Checked {
        let mut give_back = self.give_backs.remove(n);
        let io = give_back.io.clone();
        let input = match fails {
            Some(false) => purchases::give_back_failed(&io),
            ran => {
                let watch = self.restocks_before(restock_command(&io)).await;
                let input = purchases::give_back(&self.sale, &io).await;
                self.restocks_applied(watch).await;
                if ran.is_some() {
                    purchases::give_back_failed(&io)
                } else {
                    input
                }
            }
        };
        self.log.push(format!(
            "{} {}: {}",
            give_back.what,
            describe_give_back(&io),
            match fails {
                None => describe_give_back_input(&input),
                Some(true) => "the reply is lost".into(),
                Some(false) => "out of reach".into(),
            }
        ));
        give_back.io = give_back.run.resume(input);
        match &give_back.io {
            returns::Io::Done(given) => {
                self.log.push(format!("{} ends: {given:?}", give_back.what))
            }
            _ => self.give_backs.insert(n, give_back),
        }
        Ok(())
    }

    /// Time passes the deadline to pay of every order so far (and so the sale's next
    /// sweep, if Redis has one for them).
    pub(super) async fn pass_deadlines(&mut self) {
        self.passed = self.admitted.clone();
        // The clock jumps past every deadline so far: MySQL's (counted from each commit)
        // and publish.lua's (from each admission's second, the orders' and the tickets',
        // a request admitting again after its sweep with no press of its own).
        let voucher = self.sale.voucher.raw();
        let latest_in_mysql: Vec<Option<i64>> = self
            .query(
                "SELECT MAX(TIMESTAMPDIFF(SECOND, '1970-01-01', expire_time)) \
                 FROM tb_voucher_order WHERE voucher_id = ?",
                (voucher,),
            )
            .await;
        let pay_within_s = self.terms(0).pay_within_s as i64;
        let orders = self.orders().await;
        let admitted_s = |order: &OrderId| (order.raw() >> 32) as i64 + order_id::EPOCH;
        let admitted = orders
            .iter()
            .map(|(order, _, _)| admitted_s(order))
            .chain(self.passed.iter().map(|entry| entry.ticket.seconds()));
        self.passed_s = admitted
            .map(|seconds| seconds + pay_within_s)
            .chain(latest_in_mysql.into_iter().flatten())
            .max();
        // Whatever MySQL holds unpaid now, however it was admitted.
        self.query::<u64>(
            "UPDATE tb_voucher_order SET expire_time = UTC_TIMESTAMP() - INTERVAL 1 SECOND \
             WHERE voucher_id = ? AND status = 1",
            (self.sale.voucher.raw(),),
        )
        .await;
        self.deadlines_passed().await;
        // A payment window is many audit periods: the sale's next press sweeps to audit,
        // and gives back what Redis has not applied (a restock whose reply was lost).
        let key = self.sale.keys().voucher();
        let mut conn = self.sale.conn.clone();
        if conn.exists(&key).await.unwrap() {
            let now = self.sale.now_ms().await;
            let _: () = conn.hset(&key, "audit_at", now - 1).await.unwrap();
        }
        self.log.push("time passes every deadline to pay".into());
    }

    /// Deadlines time has passed are past, in MySQL and in Redis's next sweep, even those
    /// written after it passed them (a commit or a publication of an order admitted
    /// before), and after a snapshot brought an old one back.
    pub(super) async fn deadlines_passed(&mut self) {
        let Some(latest) = self.passed_s else {
            return;
        };
        let voucher = self.sale.voucher.raw();
        let unpaid: Vec<(u64, u64)> = self
            .query(
                "SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = ? AND status = 1 \
                 AND expire_time > UTC_TIMESTAMP()",
                (voucher,),
            )
            .await;
        for (order, buyer) in unpaid {
            let passed = self.passed.iter().any(|entry| {
                entry.user == user(buyer) && entry.ticket.order_id() == Ok(OrderId::from_raw(order))
            });
            if passed {
                self.query::<u64>(
                    "UPDATE tb_voucher_order SET expire_time = UTC_TIMESTAMP() - INTERVAL 1 \
                     SECOND WHERE id = ?",
                    (order,),
                )
                .await;
            }
        }
        // A next sweep up to the clock's jump is past (one for an order admitted later in
        // the same second sweeps early: harmless).
        let deadline_ms = (latest + 1) * 1000;
        let key = self.sale.keys().voucher();
        let mut conn = self.sale.conn.clone();
        let at: Option<i64> = conn.hget(&key, "sweep_at").await.unwrap();
        let now = self.sale.now_ms().await;
        if at.is_some_and(|at| at > now && at < deadline_ms) {
            let _: () = conn.hset(&key, "sweep_at", now - 1).await.unwrap();
        }
    }

    /// Redis restarts and everything is gone (and its script cache).
    /// MySQL loses the newest `k` unpaid orders' commits (see [`Step::MysqlLoses`]).
    async fn mysql_loses(&mut self, k: u64) {
        let newest: Vec<u64> = self
            .query(
                "SELECT id FROM tb_voucher_order WHERE voucher_id = ? AND status = 1 \
                 ORDER BY id DESC LIMIT ?",
                (self.sale.voucher.raw(), k),
            )
            .await;
        let lost: Vec<OrderId> = newest.into_iter().map(OrderId::from_raw).collect();
        if lost.is_empty() {
            return;
        }
        scripts::lose_commits(self.sale.voucher, &lost).await;
        self.lost_orders.extend(&lost);
        // Their units are MySQL's to hand out again: a buyer told sold_out may get one.
        self.disturbances += 1;
        self.log.push(format!(
            "MySQL fails over to a replica without the commits of orders {lost:?}"
        ));
    }

    async fn flush(&mut self) {
        // Redis's loss disturbs the sale anyway (lose_redis).
        self.forgive_lost_orders().await;
        self.lose_redis().await;
        self.loaded = Some(false);
        self.log.push("Redis loses everything".into());
    }

    async fn lose_redis(&mut self) {
        let mut conn = self.sale.conn.clone();
        let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        self.losses += 1;
        self.disturbances += 1;
        self.recovered = false;
    }

    /// What an RDB snapshot holds: every key, with its TTL.
    async fn take_snapshot(&mut self) {
        let mut conn = self.sale.conn.clone();
        let keys: Vec<String> = conn.keys("*").await.unwrap();
        let mut snapshot = Vec::new();
        for key in keys {
            if let Some((dump, ttl)) = scripts::dump_key(&mut conn, &key).await {
                snapshot.push((key, dump, ttl));
            }
        }
        self.log
            .push(format!("Redis snapshots {} keys", snapshot.len()));
        self.snapshot = Some(snapshot);
    }

    /// Redis restarts from its last snapshot (or empty, without one).
    async fn roll_back(&mut self) {
        self.forgive_lost_orders().await;
        self.lose_redis().await;
        self.rollbacks += 1;
        let snapshot = self.snapshot.clone().unwrap_or_default();
        let mut conn = self.sale.conn.clone();
        for (key, dump, ttl) in &snapshot {
            scripts::restore_key(&mut conn, key, dump, *ttl).await;
        }
        self.window_to_redis().await;
        self.deadlines_passed().await;
        self.loaded = None;
        self.log.push(format!(
            "Redis restarts from its snapshot of {} keys",
            snapshot.len()
        ));
    }

    /// The index of the n-th request (wrapping) that `matches`.
    fn nth(&self, n: usize, matches: impl Fn(&Request) -> bool) -> Option<usize> {
        let found: Vec<usize> = (0..self.requests.len())
            .filter(|&i| matches(&self.requests[i]))
            .collect();
        (!found.is_empty()).then(|| found[n % found.len()])
    }

    /// A press: its request runs admission, then stays in flight or answers at once.
    /// Returns the request's id, under which its answer is kept.
    async fn press(&mut self, buyer: u64) -> Result<u64, TestCaseError> {
        self.ask(buyer, LineAsk::Press).await
    }

    /// The buyer leaves the sale's line; the line hands her nothing from then on.
    async fn leave(&mut self, buyer: u64) {
        let handed = self.handed_unheard(buyer).await;
        let was_in = self.sale.leave_line(user(buyer)).await;
        if was_in {
            LEFT_IN_LINE.fetch_add(1, Ordering::Relaxed);
            // Units that waited for her go back to the sale: a buyer told sold_out while
            // they waited may get one, as after a return.
            self.disturbances += 1;
        }
        self.left.insert(buyer, (self.losses, handed));
        self.log.push(format!(
            "buyer {buyer} leaves the line: {}",
            if was_in {
                "she was in it"
            } else {
                "she was not in it"
            }
        ));
    }

    /// What `buyer` asks of the sale, a press or a join or a look of its line: its
    /// request runs admission, then stays in flight or answers at once. Returns the
    /// request's id, under which its answer is kept.
    pub(super) async fn ask(&mut self, buyer: u64, ask: LineAsk) -> Result<u64, TestCaseError> {
        self.next_request += 1;
        let id = self.next_request;
        let lease_before = self.sale.lease().await;
        let stock_before = self.sale.stock().await;
        let record_before = self.sale.record(user(buyer)).await;
        let phase = self.phase_now().await;
        let had = self.joined.contains(&buyer)
            || self.admitted.iter().any(|entry| entry.user == user(buyer))
            || self.order_of(buyer).await.is_some();
        let in_line_before = self.in_line(buyer).await;
        let (handed_before, unheard_before) = (
            self.sale.line_handed().await,
            self.handed_unheard(buyer).await,
        );
        if ask == LineAsk::Join {
            // A `sold_out` told before is hers no longer once she waits in line: units that
            // waited for the first in line then may go to her, once that one leaves.
            self.joined.insert(buyer);
            self.left.remove(&buyer);
            self.told_final.retain(|&(told, _)| told != buyer);
        }
        let mut flight = self.asking(buyer, ask);
        let reply = purchases::perform(&self.sale, &flight.purchase, &flight.io).await;
        if let Input::Redis(Err(error)) = &reply {
            promise!(self, false, "admission failed on a healthy Redis: {error}");
        }
        flight.resume(reply);
        let decision = flight.purchase.decision().expect("admission decided");
        let drain = flight
            .purchase
            .drain()
            .map(|(token, batch)| (token.to_string(), batch.to_vec()));
        self.log.push(format!(
            "#{id} (buyer {buyer}) {ask:?} admission: {decision:?}{}",
            match &drain {
                Some((token, batch)) => format!(", lease {token} with {batch:?}"),
                None => String::new(),
            }
        ));
        let queue = self.sale.queue().await;
        let record = self.sale.record(user(buyer)).await;
        if let Some(loaded) = self.loaded {
            promise!(
                self,
                (decision == Decision::Missing) != loaded,
                "admission says {decision:?} while the voucher's state is loaded: {loaded}"
            );
        }
        if let (Some(Record::Queued(ticket)), Some(true)) = (record_before, self.loaded) {
            // A purchase the line queued is her request's to commit: admitted.
            promise!(
                self,
                decision == Decision::Queued(ticket)
                    || unheard_before && decision == Decision::Admitted(ticket),
                "buyer {buyer}'s purchase {ticket} is queued, admission says {decision:?}"
            );
        }
        // Before the sale nobody is admitted; after it only what she holds is told.
        let in_window = match decision {
            Decision::NotStarted => phase == Phase::NotStarted,
            Decision::Ended => phase >= Phase::EndingSoon,
            // A purchase the line queued while the sale lasted is hers after its end too,
            // as a queued one is.
            Decision::Admitted(_) if unheard_before => true,
            Decision::Admitted(_) | Decision::SoldOut | Decision::Throttled => {
                matches!(phase, Phase::Live | Phase::EndingSoon)
            }
            _ => true,
        };
        promise!(
            self,
            in_window,
            "the sale is {phase:?}, admission says {decision:?}"
        );
        if let Decision::Admitted(ticket) = decision {
            let entry = Entry {
                user: user(buyer),
                ticket,
            };
            // The line handed her units, before this request or in its own hand-out: it
            // answers her purchase queued then, taking nothing more.
            let handed_here = in_line_before && !self.in_line(buyer).await;
            let from_line = unheard_before || handed_here;
            promise!(
                self,
                from_line || ask != LineAsk::Look,
                "a look of buyer {buyer} took units: {decision:?}"
            );
            if let Some((losses, _)) = self.left.get(&buyer) {
                promise!(
                    self,
                    !handed_here || *losses != self.losses,
                    "buyer {buyer} left the line, and its hand-out handed her {ticket}"
                );
            }
            if !self.admitted.contains(&entry) {
                self.admitted.push(entry);
            }
            let fresh = self.tickets.insert((ticket.seconds(), ticket.sequence()));
            if !from_line {
                self.last_admitted = Some(entry);
                if !fresh {
                    self.disturbances += 1;
                    self.log
                        .push(format!("ticket {ticket} was handed out before"));
                }
            }
            let stock_after = self.sale.stock().await;
            // What the line handed out first, to her or to others.
            let handed = self.sale.line_handed().await - handed_before;
            let taken = if from_line {
                0
            } else {
                i64::from(ticket.units())
            };
            promise!(
                self,
                record == Some(Record::Queued(ticket))
                    && (queue.last() == Some(&entry) || from_line && queue.contains(&entry))
                    && stock_after == stock_before.map(|s| s - handed - taken)
                    && (from_line || ticket.units() == self.units(buyer)),
                "admitted, yet record {record:?}, queue {queue:?}, stock {stock_before:?} -> \
                 {stock_after:?}, {handed} units handed to the line"
            );
            // (The line's purchase, answered as hers, may be committed already, before its
            // publication: her request then hears its order.)
            if self.recovered && !from_line {
                let held = self.order_of(buyer).await;
                promise!(
                    self,
                    held.is_none(),
                    "buyer {buyer} admitted again while she holds order {held:?}"
                );
            }
        }
        let sweeps = matches!(flight.io, Io::Sweep(_));
        if lease_before.is_none() && !queue.is_empty() && decision != Decision::Missing && !sweeps {
            promise!(
                self,
                drain.is_some() || flight.answer().is_some(),
                "the lease was free, admission kept it"
            );
        }
        if let Some((token, batch)) = &drain {
            let head: Vec<Entry> = queue
                .iter()
                .take(self.limits.batch as usize)
                .copied()
                .collect();
            let expected_token = match decision {
                Decision::Admitted(ticket) => *token == format!("{buyer}:{ticket}"),
                _ => token.starts_with("r:"),
            };
            promise!(
                self,
                (batch.is_empty() || *batch == head) && expected_token,
                "admission handed lease {token} with {batch:?}; the queue is {queue:?}"
            );
        }
        let request = Request {
            id,
            buyer,
            units: self.units(buyer),
            flight,
            batch_epoch: self.losses,
            decided: self.now(),
            heard: false,
            ask,
            had,
        };
        self.requests.push(request);
        self.ended(self.requests.len() - 1).await?;
        Ok(id)
    }

    /// The i-th request does what it asked for and goes on with the result. Returns
    /// whether it claimed and found someone else draining.
    pub(super) async fn proceed(&mut self, i: usize) -> Result<bool, TestCaseError> {
        let io = self.requests[i].flight.io.clone();
        let before = self.publication_before(&io).await;
        let watch = self.restocks_before(swept_restock(&io)).await;
        let input = self.perform(i, &io).await?;
        self.restocks_applied(watch).await;
        self.disturb_for_id_taken(&io);
        let waits = matches!(&io, Io::Redis(Command::Script { script, .. }) if script.name == "claim")
            && matches!(&input, Input::Redis(Ok(reply)) if reply.first().is_some_and(|tag| tag.is_tag("wait")));
        self.log.push(format!(
            "#{} {}: {}",
            self.requests[i].id,
            describe(&io),
            describe_input(&input)
        ));
        self.check_publication(&io, &input, before).await?;
        self.resume(i, input).await?;
        Ok(waits)
    }

    /// The i-th request's I/O fails: run with its reply lost (`ran`), or not run at all.
    async fn fail(&mut self, i: usize, ran: bool) -> Checked {
        let io = self.requests[i].flight.io.clone();
        if ran {
            let watch = self.restocks_before(swept_restock(&io)).await;
            let input = self.perform(i, &io).await?;
            self.restocks_applied(watch).await;
            self.disturb_for_id_taken(&io);
            self.log.push(format!(
                "#{} {}: {}, the reply is lost",
                self.requests[i].id,
                describe(&io),
                describe_input(&input)
            ));
            if publication_outcomes(&io).is_some() {
                self.note_stale().await?;
            }
        } else {
            self.log.push(format!(
                "#{} {}: out of reach",
                self.requests[i].id,
                describe(&io)
            ));
        }
        self.resume(i, purchases::failed(&io)).await
    }

    /// Two requests' commits run at once on two connections, racing inside MySQL.
    async fn commits_race(&mut self, i: usize, j: usize) -> Checked {
        let (Io::Commit(a), Io::Commit(b)) = (
            self.requests[i].flight.io.clone(),
            self.requests[j].flight.io.clone(),
        ) else {
            unreachable!("both commit")
        };
        let (at_a, at_b) = (
            self.requests[i].flight.purchase.bucket(),
            self.requests[j].flight.purchase.bucket(),
        );
        let (ra, rb) = tokio::join!(commit(at_a, &a), commit(at_b, &b));
        let (ra, rb) = (
            ra.map_err(TestCaseError::fail)?,
            rb.map_err(TestCaseError::fail)?,
        );
        self.log.push(format!(
            "#{} and #{} commit at once: {} | {}",
            self.requests[i].id,
            self.requests[j].id,
            describe_input(&ra),
            describe_input(&rb)
        ));
        // Resume the later index first, so that the earlier one's index still holds.
        let (first, second) = if i > j {
            ((i, ra), (j, rb))
        } else {
            ((j, rb), (i, ra))
        };
        self.resume(first.0, first.1).await?;
        self.resume(second.0, second.1).await
    }

    /// A publication gives back the units of each `id_taken` purchase in its batch (and of
    /// a `duplicate` holding fewer than it): a buyer told `sold_out` before may buy them.
    fn disturb_for_id_taken(&mut self, io: &Io) {
        if let Some((outcomes, _)) = publication_outcomes(io) {
            self.disturbances += outcomes
                .iter()
                .filter(|told| told.outcome == "id_taken" || told.outcome == "duplicate")
                .count() as u64;
        }
    }

    /// Returns whether the sync could begin (no other sync holds the lease).
    async fn sync_begin(&mut self) -> Result<bool, TestCaseError> {
        let token = self.token();
        let (sync, io) = VoucherSync::with_page(self.sale.voucher, token.clone(), SYNC_PAGE as u32);
        let mut run = SyncRun {
            sync,
            io,
            epoch: self.losses,
            clean: false,
        };
        // It reads MySQL, then takes the lease.
        self.sync_step(&mut run).await?;
        self.sync_step(&mut run).await?;
        if let sync::Io::Answer(answer) = &run.io {
            promise!(
                self,
                *answer == Err(ApiError::SyncInProgress),
                "sync begin answered {answer:?}"
            );
            self.log
                .push("a sync begins: 409, another holds the lease".into());
            return Ok(false);
        }
        let stock = run.sync.terms().map_or(0, |terms| terms.stock);
        self.log
            .push(format!("sync {token} begins (MySQL stock {stock})"));
        let losses = self.losses;
        run.clean = self
            .requests
            .iter()
            .all(|r| !(r.waits_on(holds_batch) && r.batch_epoch < losses));
        self.syncs.push(run);
        Ok(true)
    }

    /// Reads a page of MySQL's buyers and merges it.
    async fn sync_stage(&mut self, n: usize) -> Checked {
        let mut run = self.syncs.remove(n);
        self.sync_step(&mut run).await?;
        self.sync_step(&mut run).await?;
        let token = run.sync.token().to_string();
        if let sync::Io::Answer(answer) = &run.io {
            // The lease is gone: the sync answers 503 and stops.
            self.log
                .push(format!("sync {token} stops staging: {answer:?}"));
            return Ok(());
        }
        self.log.push(format!("sync {token} stages a page"));
        self.syncs.insert(n, run);
        Ok(())
    }

    async fn sync_finish(&mut self, n: usize) -> Checked {
        let mut run = self.syncs.remove(n);
        self.sync_step(&mut run).await?;
        let finished = matches!(run.io, sync::Io::Answer(Ok(_)));
        self.log
            .push(format!("sync {} finishes: {finished}", run.sync.token()));
        if finished {
            // The sync read the window when it began; the explorer moves the window
            // rather than the clock, so time that passed since moves the one installed.
            self.window_to_redis().await;
            self.synced = true;
            // A unit of a lost order, for sale again: a buyer told sold_out since the loss
            // may get it.
            if self.forgive_lost_orders().await {
                self.disturbances += 1;
            }
            if run.epoch == self.losses {
                self.loaded = Some(true);
                self.recovered |= run.clean;
            }
        }
        Ok(())
    }

    /// A whole sync, as `POST /vouchers/{id}/sync` runs it.
    pub(super) async fn sync(&mut self) -> Checked {
        if !self.sync_begin().await? {
            return Ok(());
        }
        loop {
            let n = self.syncs.len() - 1;
            if self.syncs[n].staged_all() {
                return self.sync_finish(n).await;
            }
            let before = self.syncs.len();
            self.sync_stage(n).await?;
            if self.syncs.len() < before {
                return Ok(());
            }
        }
    }

    /// A creation whose load reply was lost: the component deletes the MySQL rows again,
    /// and Redis keeps a sale state for a voucher MySQL no longer has. Whatever Redis
    /// kept of it, nobody can buy it.
    async fn create_fails(&mut self) -> Checked {
        let voucher = scripts::create_voucher(1, -60, 3600).await;
        let ghost = Sale {
            conn: self.sale.conn.clone(),
            voucher: voucher.first_bucket(),
        };
        let now = ghost.now_ms().await;
        ghost.load(1, now - 60_000, now + 3_600_000, &[]).await;
        self.query::<u64>(sql::DELETE_VOUCHER, (voucher.raw(),))
            .await;
        let mut flight = InFlight::start(voucher, user(1), self.limits);
        let answer = flight.run(&ghost, 100).await;
        self.log.push(format!(
            "creating voucher {voucher} fails; a buyer of it hears {answer:?}"
        ));
        promise!(
            self,
            !matches!(answer, Some(Ok(_))),
            "deleted voucher {voucher} sold: {answer:?}"
        );
        let orders: Vec<u64> = self
            .query(
                "SELECT id FROM tb_voucher_order WHERE voucher_id = ?",
                (voucher.raw(),),
            )
            .await;
        promise!(
            self,
            orders.is_empty(),
            "orders {orders:?} for deleted voucher {voucher}"
        );
        Ok(())
    }

    /// A press while nothing else is in flight: a lease left (handed on to a request that
    /// has gone, say, after a lost publication left its entry queued) has lapsed by then,
    /// as it does within a second, and this press takes it up.
    pub(super) async fn quiet_press(&mut self, buyer: u64) -> Result<u64, TestCaseError> {
        self.quiet_ask(buyer, LineAsk::Press).await
    }

    /// [`World::quiet_press`] asking `ask` of the sale's line.
    pub(super) async fn quiet_ask(
        &mut self,
        buyer: u64,
        ask: LineAsk,
    ) -> Result<u64, TestCaseError> {
        if self.sale.lease().await.is_some() {
            self.sale.expire_lease().await;
            self.log
                .push("the lease of a request that has gone lapses".into());
        }
        self.sale.expire_sweep_lease().await;
        self.ask(buyer, ask).await
    }
}

fn describe(io: &Io) -> String {
    match io {
        Io::Redis(Command::Script { script, .. }) => format!("runs {}.lua", script.name),
        Io::Redis(Command::Plain { name, args }) => format!(
            "{name} {}",
            args.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Io::Commit(batch) => format!("commits {batch:?}"),
        Io::ReadVoucher => "reads the voucher from MySQL".into(),
        Io::Sweep(step) => format!("sweeps: {}", describe_give_back(step)),
        Io::Answer(answer) => format!("answered {}", show(answer)),
    }
}

fn describe_input(input: &Input) -> String {
    match input {
        Input::Redis(Ok(reply)) => reply
            .iter()
            .map(|value| match value {
                Reply::Bytes(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => format!("{other:?}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Input::Committed(Ok(committed)) => format!("{:?}", committed.verdicts),
        Input::Voucher(Ok(lookup)) => format!("{lookup:?}"),
        Input::Sweep(input) => describe_give_back_input(input),
        Input::Redis(Err(e)) | Input::Committed(Err(e)) | Input::Voucher(Err(e)) => e.to_string(),
    }
}

fn describe_give_back(io: &returns::Io) -> String {
    match io {
        returns::Io::ExpireDue { limit } => format!("expires up to {limit} orders in MySQL"),
        returns::Io::ReturnsAfter { after, .. } => format!("reads MySQL's returns after {after}"),
        returns::Io::Commit(batch) => describe(&Io::Commit(batch.clone())),
        returns::Io::Redis(command) => describe(&Io::Redis(command.clone())),
        returns::Io::Done(given) => format!("ended: {given:?}"),
    }
}

fn describe_give_back_input(input: &returns::Input) -> String {
    match input {
        returns::Input::Expired(Ok((expired, next))) => {
            format!("{expired} expired, next at {next:?}")
        }
        returns::Input::Returns(Ok(returns)) => format!("{returns:?}"),
        returns::Input::Redis(reply) => describe_input(&Input::Redis(reply.clone())),
        returns::Input::Committed(committed) => {
            describe_input(&Input::Committed(committed.clone()))
        }
        returns::Input::Expired(Err(e)) | returns::Input::Returns(Err(e)) => e.to_string(),
    }
}
