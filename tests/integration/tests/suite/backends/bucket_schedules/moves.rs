use std::sync::atomic::Ordering;

use proptest::prelude::*;

use seckill_core::drive;
use seckill_core::purchase::Io;
use seckill_core::returns::{self, Returns};
use seckill_core::sale::{ChangeTerms, Changed, LineAsk};
use seckill_core::{BucketId, OrderId, UserId};
use seckill_tests::drivers::purchases::{self, failed, give_back_failed, InFlight, SaleBackend};
use seckill_tests::drivers::scripts;
use seckill_tests::promise;

use super::world::{Checked, GiveBackRun, Request, World};
use super::{BUYERS, HEALED_ELSEWHERE, LEFT_LINE};

#[derive(Debug, Clone)]
pub(super) enum Step {
    /// A buyer presses "buy", knowing the sale's buckets or learning them from it.
    Press { buyer: u64, knows: bool },
    /// The n-th (modulo their number) of the buyers who walked to another bucket than
    /// their own for their order (whatever became of it, lost included) presses again.
    Walked { n: usize },
    /// The n-th request in flight does what it asked for and goes on with the result.
    Proceed { n: usize },
    /// The n-th request's I/O runs, and its reply is lost on the way back.
    ReplyLost { n: usize },
    /// The n-th request in flight dies where it stands.
    Die { n: usize },
    /// Every bucket's drain lease outlives its TTL.
    ExpireLeases,
    /// The n-th (modulo their number) of the buyers holding an unpaid order cancels it:
    /// its unit goes back to its bucket.
    Cancel { n: usize },
    /// MySQL fails over to a replica that lacks the n-th (as for `Cancel`) unpaid order:
    /// the order, its event, and what it took from the stock are gone.
    LoseCommit { n: usize },
    /// A bucket (by position, modulo their number) sweeps, as a press does once its
    /// audit is due: it audits MySQL and heals what MySQL lost.
    Sweep { bucket: usize },
    /// A buyer joins the sale's line (`POST /vouchers/{id}/line`), or looks at it (`GET`):
    /// a request in flight as a press; a sale in buckets has no line.
    Line { buyer: u64, join: bool },
    /// A buyer leaves the line (`DELETE /vouchers/{id}/line`).
    Leave { buyer: u64 },
    /// The merchant adds `units` to the sale (`PATCH /vouchers/{id}` with a higher
    /// stock): MySQL spreads them over the buckets as restocks, then each bucket's terms go
    /// to its Redis (`change.lua`) and a give-back of its own, in flight, applies its share.
    Restock { units: u64 },
    /// The same, the reply lost once MySQL committed: no bucket hears of it, until its next
    /// sweep or give-back.
    RestockReplyLost { units: u64 },
    /// The n-th give-back in flight (modulo their number) does its next I/O, or runs it and
    /// its reply is lost (`lost`).
    GiveBack { n: usize, lost: bool },
    /// The n-th give-back in flight dies where it stands.
    GiveBackDies { n: usize },
}

pub(super) fn step() -> impl Strategy<Value = Step> {
    let buyer = 1..=BUYERS;
    let n = 0..4usize;
    prop_oneof![
        10 => (buyer, any::<bool>()).prop_map(|(buyer, knows)| Step::Press { buyer, knows }),
        3 => n.clone().prop_map(|n| Step::Walked { n }),
        24 => n.clone().prop_map(|n| Step::Proceed { n }),
        2 => n.clone().prop_map(|n| Step::ReplyLost { n }),
        2 => n.clone().prop_map(|n| Step::Die { n }),
        2 => Just(Step::ExpireLeases),
        3 => n.clone().prop_map(|n| Step::Cancel { n }),
        2 => n.clone().prop_map(|n| Step::LoseCommit { n }),
        2 => (0..3usize).prop_map(|bucket| Step::Sweep { bucket }),
        6 => (1..=BUYERS, any::<bool>()).prop_map(|(buyer, join)| Step::Line { buyer, join }),
        2 => (1..=BUYERS).prop_map(|buyer| Step::Leave { buyer }),
        1 => (1..=3u64).prop_map(|units| Step::Restock { units }),
        1 => (1..=3u64).prop_map(|units| Step::RestockReplyLost { units }),
        3 => n.clone().prop_map(|n| Step::GiveBack { n, lost: false }),
        1 => n.clone().prop_map(|n| Step::GiveBack { n, lost: true }),
        1 => n.prop_map(|n| Step::GiveBackDies { n }),
    ]
}

impl World {
    pub(super) async fn play(&mut self, step: &Step) -> Checked {
        self.steps += 1;
        match *step {
            Step::Press { buyer, knows } => {
                let user = UserId::from_raw(buyer);
                let units = self.units(buyer);
                let flight = if knows {
                    InFlight::knowing(self.buckets.clone(), user, units, self.limits)
                } else {
                    InFlight::of_units(self.sale(), user, units, self.limits)
                };
                let how = if knows {
                    "knowing the buckets"
                } else {
                    "at the voucher"
                };
                self.request(buyer, flight, LineAsk::Press, how).await;
            }
            Step::Line { buyer, join } => {
                let ask = if join { LineAsk::Join } else { LineAsk::Look };
                let user = UserId::from_raw(buyer);
                let flight =
                    InFlight::in_line_with(self.sale(), user, self.units(buyer), self.limits, ask);
                self.request(buyer, flight, ask, "at the line").await;
            }
            Step::Leave { buyer } => self.leave(buyer).await,
            Step::Proceed { n } if n < self.requests.len() => self.proceed(n, false).await?,
            Step::ReplyLost { n } if n < self.requests.len() => self.proceed(n, true).await?,
            Step::Die { n } if n < self.requests.len() => {
                let request = self.requests.remove(n);
                self.log.push(format!("#{} dies", request.id));
            }
            Step::ExpireLeases => {
                for sale in &self.sales {
                    sale.expire_lease().await;
                }
                self.log.push("the drain leases lapse".into());
            }
            Step::Cancel { n } => {
                if let Some((buyer, order, bucket)) = self.unpaid(n).await {
                    self.cancel(buyer, order, bucket).await?
                }
            }
            Step::LoseCommit { n } => {
                if let Some((buyer, order, bucket)) = self.unpaid(n).await {
                    self.lose_commit(buyer, order, bucket).await
                }
            }
            Step::Walked { n } => {
                let walked = self.walked().await;
                if !walked.is_empty() {
                    let buyer = walked[n % walked.len()];
                    self.log
                        .push(format!("buyer {buyer}, who walked, presses again"));
                    return Box::pin(self.play(&Step::Press { buyer, knows: true })).await;
                }
            }
            Step::Sweep { bucket } => self.sweep(bucket % self.sales.len()).await,
            Step::Restock { units } => self.restock(units, false).await?,
            Step::RestockReplyLost { units } => self.restock(units, true).await?,
            // With none in flight, nothing happens: no check either.
            Step::GiveBack { .. } | Step::GiveBackDies { .. } if self.give_backs.is_empty() => {
                return Ok(())
            }
            Step::GiveBack { n, lost } => self.give_back(n % self.give_backs.len(), lost).await,
            Step::GiveBackDies { n } => {
                let gone = self.give_backs.remove(n % self.give_backs.len());
                self.log.push(format!("{} dies", gone.what));
            }
            _ => {}
        }
        self.check().await
    }

    /// `units` more for the sale, as `PATCH /vouchers/{id}` adds them
    /// (`actions::vouchers::change`): MySQL first, then in each bucket its terms and a
    /// give-back of its share (in flight); with `reply_lost`, nothing follows MySQL.
    async fn restock(&mut self, units: u64, reply_lost: bool) -> Checked {
        let sale = self.sale();
        let restocked = {
            let mut db = self.db.lock().await;
            scripts::restock_unless_contended(&mut db, sale, units).await
        };
        match restocked {
            Ok(Some(_)) => {}
            Ok(None) => {
                self.log.push(format!("a restock of {units} meets a lock"));
                return Ok(());
            }
            Err(why) => promise!(self, false, "a restock of {units} failed: {why}"),
        }
        self.stock += units;
        self.restocks.push(units);
        self.sale_events = self.read_sale_events().await;
        self.log.push(format!(
            "the merchant restocks {units} units{}",
            if reply_lost {
                ", the reply is lost"
            } else {
                ""
            }
        ));
        if reply_lost {
            return Ok(());
        }
        for n in 0..self.sales.len() {
            let bucket = self.sales[n].voucher;
            let found = scripts::lookup(bucket).await.unwrap();
            let terms = found.terms.expect("a bucket's terms");
            let installed = self.sales[n]
                .call(&ChangeTerms {
                    voucher_id: bucket,
                    terms: &terms,
                    terms_version: found.terms_version,
                    returned_event: found.ledger.returned_event,
                })
                .await
                .unwrap();
            if installed != Changed::Missing {
                let (run, io) = Returns::restock(bucket);
                let what = format!("bucket {bucket}'s restock give-back");
                self.log.push(format!("{what} begins ({installed:?})"));
                self.give_backs.push(GiveBackRun {
                    what,
                    bucket,
                    run,
                    io,
                });
            }
        }
        Ok(())
    }

    /// The n-th give-back does its next I/O, its reply lost when `lost`.
    async fn give_back(&mut self, n: usize, lost: bool) {
        let mut give_back = self.give_backs.remove(n);
        let io = give_back.io.clone();
        let mut backend = SaleBackend(&self.sales[0]);
        let input = drive::returns_step(&mut backend, give_back.bucket, io.clone()).await;
        self.log.push(format!(
            "{}: {}",
            give_back.what,
            if lost {
                format!("{io:?}, the reply is lost")
            } else {
                format!("{io:?}: {input:?}")
            }
            .chars()
            .take(200)
            .collect::<String>()
        ));
        give_back.io = give_back
            .run
            .resume(if lost { give_back_failed(&io) } else { input });
        match &give_back.io {
            returns::Io::Done(given) => {
                self.log.push(format!("{} ends: {given:?}", give_back.what))
            }
            _ => self.give_backs.insert(n, give_back),
        }
    }

    /// A request of `buyer`'s, `ask`ing the sale, made (`how`): it runs on `Proceed`.
    async fn request(&mut self, buyer: u64, flight: InFlight, ask: LineAsk, how: &str) {
        self.next_request += 1;
        self.log.push(format!(
            "#{} buyer {buyer} {ask:?} ({how})",
            self.next_request
        ));
        let user = UserId::from_raw(buyer);
        let had = self.held_by(buyer).await.is_some();
        if ask != LineAsk::Look {
            self.pressed.insert(buyer);
        }
        self.left.remove(&buyer);
        let stale_elsewhere = self.stale_elsewhere(user).await;
        self.requests.push(Request {
            id: self.next_request,
            buyer,
            units: self.units(buyer),
            flight,
            came_back: self.came_back,
            pressed: self.steps,
            stale_elsewhere,
            ask,
            had,
        });
    }

    /// The buyer leaves the sale's line: out of it, she is handed nothing more, unless a
    /// request of hers is in flight (it may join her again).
    async fn leave(&mut self, buyer: u64) {
        let sale = &self.sales[0];
        let handed = sale.handed_unheard(UserId::from_raw(buyer)).await;
        let was_in = sale.leave_line(UserId::from_raw(buyer)).await;
        if was_in {
            LEFT_LINE.fetch_add(1, Ordering::Relaxed);
        }
        self.log
            .push(format!("buyer {buyer} leaves the line: {was_in}"));
        if let Some(draw) = self.draw.as_mut() {
            // Her place, if she joins again, is a new one.
            draw.line.retain(|&b| b != buyer);
            draw.places.remove(&buyer);
        }
        if !self.requests.iter().any(|r| r.buyer == buyer) {
            self.left.insert(buyer, handed);
        }
    }

    /// The i-th request does what it asked for and goes on with the result (or with a
    /// failure, when `lose` its reply).
    pub(super) async fn proceed(&mut self, i: usize, lose: bool) -> Checked {
        let request = &mut self.requests[i];
        let io = request.flight.io.clone();
        let input = purchases::perform(&self.sales[0], &request.flight.purchase, &io).await;
        self.log.push(format!(
            "#{} at bucket {}: {}{}",
            request.id,
            request.flight.purchase.bucket(),
            describe(&io),
            if lose { ", the reply is lost" } else { "" }
        ));
        request
            .flight
            .resume(if lose { failed(&io) } else { input });
        if let Some(answer) = request.flight.answer().cloned() {
            let request = self.requests.remove(i);
            self.answered(&request, answer).await?;
        }
        Ok(())
    }

    /// The buyer's unpaid order `order` of `bucket` cancelled; its unit restocked there.
    /// The buyer cancels `order`, and its units go back to `bucket`: once that is over, no
    /// bucket of the sale is marked all-out (each one's buyers buy them at once).
    async fn cancel(&mut self, buyer: u64, order: OrderId, bucket: BucketId) -> Checked {
        let settled = scripts::cancel_order(order, UserId::from_raw(buyer))
            .await
            .unwrap();
        if settled.is_some_and(|(_, changed, _)| changed) {
            self.dead.insert(order, self.steps);
        }
        let (mut run, io) = Returns::restock(bucket);
        let mark = self.mark(bucket).await;
        let given = drive::give_back(&mut SaleBackend(&self.sales[0]), bucket, &mut run, io).await;
        self.log.push(format!(
            "buyer {buyer} cancels order {order} of bucket {bucket}: {settled:?}, restocked {given:?}"
        ));
        self.note_restocks_reached(bucket, mark).await;
        if given.is_ok_and(|given| given > 0) {
            for sale in &self.sales {
                promise!(
                    self,
                    !sale.all_out().await,
                    "bucket {} is still marked all-out once units came back to bucket {bucket}",
                    sale.voucher
                );
            }
        }
        Ok(())
    }

    /// The last return `bucket`'s Redis applied.
    async fn mark(&self, bucket: BucketId) -> u64 {
        let sale = self.sales.iter().find(|sale| sale.voucher == bucket);
        let mark = sale
            .expect("a bucket")
            .voucher_field("returned_event")
            .await;
        mark.unwrap_or(0) as u64
    }

    /// Notes a restock of `bucket` that a run other than its own give-back applied (its
    /// mark passed it, from `before`).
    async fn note_restocks_reached(&mut self, bucket: BucketId, before: u64) {
        let after = self.mark(bucket).await;
        let reached = self.sale_events.iter().any(|&(event, of, kind, _)| {
            kind == 5 && of == bucket.raw() && before < event && event <= after
        });
        if reached {
            self.restock_reached.1 = true;
            self.log
                .push(format!("a restock reaches bucket {bucket} by this run"));
        }
    }

    /// The buyer's unpaid order `order` of `bucket` lost by MySQL.
    async fn lose_commit(&mut self, buyer: u64, order: OrderId, bucket: BucketId) {
        scripts::lose_commits(bucket, &[order]).await;
        self.lost.push((order, buyer, bucket));
        self.log.push(format!(
            "MySQL fails over without order {order} of buyer {buyer} (bucket {bucket})"
        ));
    }

    /// The n-th bucket's sweep, run to its end: its audit of MySQL, and its heal.
    pub(super) async fn sweep(&mut self, n: usize) {
        let bucket = self.sales[n].voucher;
        let (mut run, io) = Returns::sweep(bucket);
        let mark = self.mark(bucket).await;
        let given = drive::give_back(&mut SaleBackend(&self.sales[0]), bucket, &mut run, io).await;
        self.note_restocks_reached(bucket, mark).await;
        let report = run.report();
        if report
            .as_deref()
            .is_some_and(|report| report.contains("other buckets"))
        {
            HEALED_ELSEWHERE.fetch_add(1, Ordering::Relaxed);
        }
        self.log.push(format!(
            "bucket {bucket} sweeps: {given:?}{}",
            report.map_or(String::new(), |report| format!(": {report}"))
        ));
    }

    /// The n-th (modulo their number, by buyer) unpaid order: its buyer, id and bucket.
    async fn unpaid(&self, n: usize) -> Option<(u64, OrderId, BucketId)> {
        let mut unpaid: Vec<(u64, OrderId, BucketId)> = self
            .orders()
            .await
            .iter()
            .filter(|o| o.3 == 1)
            .map(|o| (o.1, OrderId::from_raw(o.0), BucketId::from_raw(o.2)))
            .collect();
        unpaid.sort_unstable_by_key(|o| o.0);
        (!unpaid.is_empty()).then(|| unpaid[n % unpaid.len()])
    }

    /// The buyers whose order (in MySQL, whatever became of it, or lost by it) is another
    /// bucket's than their own.
    pub(super) async fn walked(&self) -> Vec<u64> {
        let orders = self.orders().await;
        let mut walked: Vec<u64> = orders
            .iter()
            .map(|o| (o.1, o.2))
            .chain(self.lost.iter().map(|l| (l.1, l.2.raw())))
            .filter(|&(buyer, bucket)| {
                self.buckets.ring(UserId::from_raw(buyer))[0].raw() != bucket
            })
            .map(|(buyer, _)| buyer)
            .collect();
        walked.sort_unstable();
        walked.dedup();
        walked
    }
}

fn describe(io: &Io) -> String {
    match io {
        Io::Redis(command) => format!("{command:?}").chars().take(80).collect(),
        Io::Commit(batch) => format!("commits {batch:?}"),
        Io::ReadVoucher => "reads the voucher from MySQL".into(),
        Io::Sweep(_) => "sweeps".into(),
        Io::Answer(answer) => format!("answered {answer:?}"),
    }
}
