//! Units of cancelled and expired orders back to the live sale, as a state machine that
//! does no I/O of its own (as the purchase is). MySQL gives each unit back to its stock,
//! with an event, in the transaction that cancels or expires its order; this hands
//! the events the sale has not applied yet to `lua/restock.lua`, which applies each once
//! (by event id), so a reply lost or a request dying halfway leaves the rest to the next
//! run, and two runs at once change Redis once per unit.
//!
//! A sweep ([`Returns::sweep`]) reads where the sale stands, expires the voucher's unpaid
//! orders past their deadline, gives back, and ends the sweep lease with the next
//! deadline (or an earlier one a publication set meanwhile, for an order the sweep may
//! not have seen), then wakes the presses that found it under way and wait for its end
//! (`lua/end_sweep.lua`), so that they press again for what it gave back. The component
//! runs it under the sweep lease, for the press admission handed it, for the reads that
//! took it (a product page, an order, the feed) and for `POST /vouchers/{id}/expire`; and
//! (as a plain restock, [`Returns::restock`]) after a cancellation; the schedule explorer
//! runs the same steps with faults between them.
//!
//! Every sweep first audits MySQL, under its lease: it compares the orders Redis learnt of (read first) with
//! those MySQL counts, and when MySQL holds fewer (a failover to a replica that lagged, a
//! restore from an older backup) it heals them: it pages through the buyers' orders Redis
//! holds and hands each page to the group commit again, which creates those MySQL lacks
//! (same ids, same buyers, the stock moved and `order.created` written once) and leaves
//! the others as they are. A buyer's other order that MySQL holds wins; an order MySQL
//! can no longer take (no unit left, its id another order's) is lost for good, and named.
//! The audit also sets Redis's stock to MySQL's units left when the two should agree
//! (nothing queued, the same orders and returns counted) and do not.

use crate::buckets::Spread;
use crate::error::BackendError;
use crate::ids::BucketId;
use crate::ledger::Returned;
use crate::order_id::OrderId;
use crate::redis::{Command, Reply};
use crate::sale::{
    parsed, Audit, Call, EndSweep, Heal, HeldPage, Mark, ReadMark, ReadSpread, Reopen, Restock,
    Restocked, Swept, Unhealed, HEAL_PAGES,
};
use crate::verdict::{Committed, Committing, Verdict};

/// Orders expired, and returns read, per round trip.
pub const PAGE: u32 = 256;

/// What the run needs done next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    /// `sql::EXPIRE_DUE` of the voucher, at most `limit` orders; resume with
    /// [`Input::Expired`].
    ExpireDue { limit: u32 },
    /// `sql::RETURNS_AFTER` of the voucher; resume with [`Input::Returns`].
    ReturnsAfter { after: u64, limit: u32 },
    /// `seckill_commit_batch` of these `(order id, buyer, units)` orders of the voucher (none:
    /// it reads the voucher's ledger); resume with [`Input::Committed`].
    Commit(Vec<Committing>),
    /// Run this on Redis; resume with [`Input::Redis`].
    Redis(Command),
    /// Over: the units given back to the sale now, or why it stopped (MySQL holds the
    /// truth, and the voucher's next sweep gives back what this did not).
    Done(Result<u64, BackendError>),
}

/// The result of what the run asked for; a failure is its cause, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Orders expired, and the earliest deadline left (unix seconds).
    Expired(Result<(usize, Option<i64>), BackendError>),
    Returns(Result<Vec<Returned>, BackendError>),
    Committed(Result<Committed, BackendError>),
    Redis(Result<Vec<Reply>, BackendError>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    ReadingMark,
    Expiring(Mark),
    /// Reading the returns after this mark.
    Reading(u64),
    /// Applying a page of returns; `last` when it was a short page.
    Restocking {
        last: bool,
    },
    /// Units came back: reading where this bucket's sale keeps its buckets, here or (from
    /// a later bucket) at the first, to reopen the others.
    FindingBuckets,
    /// Reopening the sale's other buckets, these still to go.
    Reopening(Vec<BucketId>),
    /// The sweep is over (its last restock freed its lease): waking the presses waiting
    /// for its end.
    Waking,
    /// Reading the orders Redis learnt of again, before MySQL's, after a heal.
    AuditMark,
    /// Reading MySQL's ledger, after Redis's count of orders and its mark.
    Counting {
        orders: u64,
        returned: u64,
    },
    /// Marking the voucher behind by `missing` orders, or clearing it.
    Auditing {
        missing: u64,
    },
    /// Reading the next page of the buyers' orders (recording the last one's outcome).
    Scanning,
    /// MySQL committing a page of them again.
    Recommitting(HeldPage),
    Done,
}

/// What a sweep's heal did, for the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Healing {
    /// The orders MySQL lacked when the heal began.
    missing: u64,
    restored: u64,
    /// Orders MySQL could not take again: lost for good.
    lost: Vec<OrderId>,
    /// Orders that yielded to the buyer's order in another bucket (their units back).
    elsewhere: u64,
    /// The orders MySQL still lacked at the audit after the heal.
    left: u64,
    /// Pages scanned; at [`HEAL_PAGES`] the heal pauses, and the next sweep goes on.
    pages: u32,
}

impl Healing {
    /// Whether the heal goes on from `cursor` in this sweep.
    fn goes_on(&mut self, cursor: Option<String>) -> Option<String> {
        self.pages += 1;
        cursor.filter(|_| self.pages < HEAL_PAGES)
    }

    fn paused(&self) -> bool {
        self.pages >= HEAL_PAGES
    }
}

/// One run for one voucher.
#[derive(Debug, Clone)]
pub struct Returns {
    voucher_id: BucketId,
    page: u32,
    sweeps: bool,
    /// For a sweep, once its expiring is over.
    swept: Option<Swept>,
    /// For a sweep, once its audit is over.
    audited: bool,
    given: u64,
    /// The sale's stock after the last restock.lua this ran.
    stock: Option<i64>,
    /// The sale's first bucket, once this run's voucher (a later bucket) named it.
    first_bucket: Option<BucketId>,
    healing: Option<Healing>,
    phase: Phase,
}

impl Returns {
    /// A sweep of expiries, and what it needs first.
    pub fn sweep(voucher_id: BucketId) -> (Returns, Io) {
        Returns::with_page(voucher_id, true, PAGE)
    }

    /// A sweep of expiries with no audit of MySQL's orders: the feed's sweeps of the sales
    /// with orders past their deadline, many a read, whose presses and page reads audit.
    pub fn expiries(voucher_id: BucketId) -> (Returns, Io) {
        let (mut run, io) = Returns::with_page(voucher_id, true, PAGE);
        run.audited = true;
        (run, io)
    }

    /// The returns MySQL holds and the sale has not applied, and what it needs first.
    pub fn restock(voucher_id: BucketId) -> (Returns, Io) {
        Returns::with_page(voucher_id, false, PAGE)
    }

    /// A sweep (`sweeps`) or a restock in pages of `page`: a test's small pages make a
    /// run take several steps.
    pub fn with_page(voucher_id: BucketId, sweeps: bool, page: u32) -> (Returns, Io) {
        let mut run = Returns {
            voucher_id,
            page,
            sweeps,
            swept: None,
            audited: false,
            given: 0,
            stock: None,
            first_bucket: None,
            healing: None,
            phase: Phase::Done,
        };
        let io = run.read_mark();
        (run, io)
    }

    /// Goes on with the result of the last [`Io`]; returns what it needs next: each phase
    /// and the input it waits for go to the step of that name below.
    pub fn resume(&mut self, input: Input) -> Io {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        match (phase, input) {
            (Phase::ReadingMark, Input::Redis(reply)) => match parsed::<ReadMark>(reply) {
                Ok(mark) => self.marked(mark),
                Err(cause) => Io::Done(Err(cause)),
            },
            (Phase::Expiring(mark), Input::Expired(Ok((expired, next)))) => {
                self.expired(mark, expired, next)
            }
            (Phase::Reading(after), Input::Returns(Ok(returns))) => self.give_back(after, &returns),
            (Phase::Restocking { last }, Input::Redis(reply)) => match parsed::<Restock>(reply) {
                Ok(restocked) => self.restocked(last, restocked),
                Err(cause) => Io::Done(Err(cause)),
            },
            // The sale's other buckets are reopened as far as this gets: a reply lost
            // leaves a mark only until it lapses (`crate::buckets::ALL_OUT_MS`).
            (Phase::FindingBuckets, Input::Redis(reply)) => match parsed::<ReadSpread>(reply) {
                Ok(spread) => self.found_buckets(spread),
                Err(_) => self.ended(),
            },
            (Phase::Reopening(rest), Input::Redis(_)) => self.reopen(rest),
            // A wake-up lost only keeps the waiting presses to the end of their slice.
            (Phase::Waking, Input::Redis(_)) => Io::Done(Ok(self.given)),
            (Phase::AuditMark, Input::Redis(reply)) => match parsed::<ReadMark>(reply) {
                Ok(mark) => self.count(mark),
                Err(cause) => Io::Done(Err(cause)),
            },
            (Phase::Counting { orders, returned }, Input::Committed(Ok(committed))) => {
                self.audit(orders, returned, committed)
            }
            (Phase::Auditing { missing }, Input::Redis(reply)) => match parsed::<Audit>(reply) {
                Ok(behind) => self.audited(missing, behind),
                Err(cause) => Io::Done(Err(cause)),
            },
            (Phase::Scanning, Input::Redis(reply)) => match parsed::<Heal>(reply) {
                Ok(page) => self.scanned(page),
                Err(cause) => Io::Done(Err(cause)),
            },
            (Phase::Recommitting(page), Input::Committed(Ok(committed))) => {
                self.recommitted(page, committed)
            }
            (
                _,
                Input::Expired(Err(cause))
                | Input::Returns(Err(cause))
                | Input::Committed(Err(cause)),
            ) => Io::Done(Err(cause)),
            (phase, input) => unreachable!("{input:?} while {phase:?}"),
        }
    }

    /// Where the sale stands: a sweep audits first, under its lease (Redis's count of
    /// orders, read now, against MySQL's); then it expires (once), and knows the deadlines
    /// it began with; then the returns are read.
    fn marked(&mut self, mark: Mark) -> Io {
        if self.sweeps && !self.audited {
            self.count(mark)
        } else if self.sweeps && self.swept.is_none() {
            self.phase = Phase::Expiring(mark);
            Io::ExpireDue { limit: self.page }
        } else {
            self.read_returns(mark)
        }
    }

    /// A page of expiries done: another while pages come back full.
    fn expired(&mut self, mark: Mark, expired: usize, next: Option<i64>) -> Io {
        if expired < self.page as usize {
            self.swept = Some(Swept {
                next_ms: next.map(|seconds| seconds * 1000),
                deadlines: mark.deadlines,
            });
            self.read_returns(mark)
        } else {
            self.phase = Phase::Expiring(mark);
            Io::ExpireDue { limit: self.page }
        }
    }

    /// A page of returns to the sale; a sweep's last page (a short one) ends its lease.
    fn give_back(&mut self, after: u64, returns: &[Returned]) -> Io {
        let last = returns.len() < self.page as usize;
        let restock = Restock {
            voucher_id: self.voucher_id,
            returns,
            after,
            swept: if last { self.swept } else { None },
        };
        self.phase = Phase::Restocking { last };
        Io::Redis(restock.command())
    }

    /// A page applied (`None`: Redis holds no sale for the voucher, and a sync rebuilds
    /// it, returns included).
    fn restocked(&mut self, last: bool, restocked: Option<Restocked>) -> Io {
        let Some(restocked) = restocked else {
            self.stock = None;
            return self.ended();
        };
        self.given += restocked.given;
        self.stock = Some(restocked.stock);
        if !last {
            self.read_mark()
        } else if self.given > 0 || self.healing.is_some() {
            // Units came back (a heal's, of orders that yielded to others or were lost,
            // among them): the sale's other buckets too.
            self.find_buckets(self.voucher_id)
        } else {
            self.ended()
        }
    }

    /// Where the sale's buckets are: at its first bucket, or here.
    fn found_buckets(&mut self, spread: Spread) -> Io {
        match spread {
            Spread::BucketOf(sale) => self.find_buckets(sale.first_bucket()),
            Spread::First(mut rest) => {
                rest.extend(self.first_bucket.take());
                rest.retain(|bucket| *bucket != self.voucher_id);
                self.reopen(rest)
            }
            Spread::Whole => self.ended(),
        }
    }

    /// Redis's count of orders read: MySQL's ledger next.
    fn count(&mut self, mark: Mark) -> Io {
        self.phase = Phase::Counting {
            orders: mark.orders,
            returned: mark.returned,
        };
        Io::Commit(Vec::new())
    }

    /// MySQL's ledger against Redis's count: the voucher marked behind by the orders
    /// MySQL lacks, or cleared.
    fn audit(&mut self, orders: u64, returned: u64, committed: Committed) -> Io {
        let audit = Audit {
            voucher_id: self.voucher_id,
            missing: orders.saturating_sub(committed.ledger.orders),
            mysql: committed.ledger,
            mark: returned,
        };
        self.phase = Phase::Auditing {
            missing: audit.missing,
        };
        Io::Redis(audit.command())
    }

    /// Audited (`behind`: MySQL lacks orders Redis holds).
    fn audited(&mut self, missing: u64, behind: bool) -> Io {
        match (behind, &mut self.healing) {
            // Once a sweep: a heal that left orders missing (MySQL refused none of them,
            // so a commit raced the count) is tried again by the next.
            (true, None) => {
                self.healing = Some(Healing {
                    missing,
                    ..Healing::default()
                });
                self.scan(Some("start".into()), 0, Vec::new())
            }
            // Audited: the sweep goes on to expire and give back, reading the mark again
            // (the audit may have moved it back).
            (_, healing) => {
                if let Some(healing) = healing {
                    healing.left = missing;
                }
                self.audited = true;
                self.read_mark()
            }
        }
    }

    /// A page of the buyers' orders Redis holds: committed again, or the scan goes on,
    /// pauses or ends.
    fn scanned(&mut self, page: HeldPage) -> Io {
        if !page.orders.is_empty() {
            let io = Io::Commit(page.orders.clone());
            self.phase = Phase::Recommitting(page);
            return io;
        }
        let goes_on = match (page.cursor, self.healing.as_mut()) {
            (Some(cursor), Some(healing)) => healing.goes_on(Some(cursor)),
            _ => None,
        };
        if let Some(cursor) = goes_on {
            self.scan(Some(cursor), 0, Vec::new())
        } else if self.healing.as_ref().is_some_and(Healing::paused) {
            // Paused: the mark stays, and the next sweep goes on from the cursor heal.lua
            // kept.
            self.audited = true;
            self.read_mark()
        } else {
            // The scan is over: the audit again, which clears the mark when MySQL now
            // holds every order.
            self.phase = Phase::AuditMark;
            Io::Redis(self.mark_command())
        }
    }

    /// A page committed again: what MySQL did not take is recorded with the next scan.
    fn recommitted(&mut self, page: HeldPage, committed: Committed) -> Io {
        let unhealed: Vec<Unhealed> = page
            .orders
            .iter()
            .zip(&committed.verdicts)
            .filter(|(_, verdict)| **verdict != Verdict::Ordered)
            .map(|(&(order_id, user, _), &verdict)| Unhealed {
                user,
                order_id,
                verdict,
            })
            .collect();
        let mut next = page.cursor;
        if let Some(healing) = &mut self.healing {
            next = healing.goes_on(next);
            healing.restored += committed.created;
            healing.lost.extend(
                unhealed
                    .iter()
                    .filter(|unhealed| unhealed.lost())
                    .map(|unhealed| unhealed.order_id),
            );
            healing.elsewhere += unhealed
                .iter()
                .filter(|unhealed| unhealed.elsewhere())
                .count() as u64;
        }
        // With no cursor left (or the sweep's pages spent), the call records the page's
        // outcome and scans nothing.
        self.scan(next, committed.created, unhealed)
    }

    /// The sale's stock after the last restock.lua this ran (whoever gave units back), if
    /// Redis holds the sale: a press that was to hear sold_out presses again when it fits.
    pub fn stock(&self) -> Option<i64> {
        self.stock
    }

    /// Reads where `bucket` says its sale's buckets are: this run's voucher first, then
    /// (for a later bucket) the sale's first.
    fn find_buckets(&mut self, bucket: BucketId) -> Io {
        if bucket != self.voucher_id {
            self.first_bucket = Some(bucket);
        }
        self.phase = Phase::FindingBuckets;
        Io::Redis(ReadSpread { voucher_id: bucket }.command())
    }

    /// Reopens the next of the sale's other buckets (`lua/reopen.lua`), so that
    /// their buyers buy the units given back here; then ends.
    fn reopen(&mut self, mut rest: Vec<BucketId>) -> Io {
        let Some(bucket) = rest.pop() else {
            return self.ended();
        };
        self.phase = Phase::Reopening(rest);
        Io::Redis(Reopen { bucket }.command())
    }

    /// The run's last restock.lua applied: a sweep's freed its lease, and it wakes the
    /// presses waiting for its end ([`EndSweep`]); a restock is over.
    fn ended(&mut self) -> Io {
        if !self.sweeps {
            return Io::Done(Ok(self.given));
        }
        self.phase = Phase::Waking;
        Io::Redis(
            EndSweep {
                voucher_id: self.voucher_id,
            }
            .command(),
        )
    }

    /// What the sweep's heal did, once it has audited MySQL and found it lacking orders:
    /// for the request log.
    pub fn report(&self) -> Option<String> {
        let healing = self.healing.as_ref()?;
        let mut report = format!(
            "MySQL lacked {} orders of voucher {} that Redis holds (a failover or a restore lost them): {} committed again",
            healing.missing, self.voucher_id, healing.restored
        );
        if !healing.lost.is_empty() {
            report.push_str(&format!(
                "; {} lost for good, as MySQL has no unit left for them or their ids are other orders' (their buyers may buy again): {:?}",
                healing.lost.len(),
                healing.lost
            ));
        }
        if healing.elsewhere > 0 {
            report.push_str(&format!(
                "; {} yielded to their buyers' orders in other buckets of the sale (their units back here)",
                healing.elsewhere
            ));
        }
        if healing.left > 0 {
            report.push_str(&format!("; {} still missing", healing.left));
        }
        Some(report)
    }

    fn scan(&mut self, cursor: Option<String>, restored: u64, unhealed: Vec<Unhealed>) -> Io {
        self.phase = Phase::Scanning;
        let heal = Heal {
            voucher_id: self.voucher_id,
            cursor: cursor.as_deref(),
            restored,
            unhealed: &unhealed,
        };
        Io::Redis(heal.command())
    }

    fn read_mark(&mut self) -> Io {
        self.phase = Phase::ReadingMark;
        Io::Redis(self.mark_command())
    }

    fn mark_command(&self) -> Command {
        ReadMark {
            voucher_id: self.voucher_id,
        }
        .command()
    }

    fn read_returns(&mut self, mark: Mark) -> Io {
        self.phase = Phase::Reading(mark.returned);
        Io::ReturnsAfter {
            after: mark.returned,
            limit: self.page,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::ReturnKind;
    use crate::order_id::OrderId;
    use crate::UserId;

    fn returned(event: u64) -> Returned {
        Returned {
            event,
            kind: ReturnKind::Cancelled {
                order_id: OrderId::from_raw(event + 100),
                user: UserId::from_raw(event),
            },
            units: 1,
        }
    }

    fn restock_args(io: &Io) -> Vec<String> {
        match io {
            Io::Redis(Command::Script { script, args, .. }) if script.name == "restock" => {
                args.values().map(ToString::to_string).collect()
            }
            other => panic!("expected restock.lua, got {other:?}"),
        }
    }

    /// restock.lua's reply: returns applied, and the stock after.
    fn restocked(given: i64, stock: &str) -> Input {
        Input::Redis(Ok(vec![Reply::Int(given), Reply::text(stock)]))
    }

    fn wakes(voucher_id: BucketId) -> Io {
        Io::Redis(EndSweep { voucher_id }.command())
    }

    fn reads_mark(voucher_id: BucketId) -> Io {
        Io::Redis(ReadMark { voucher_id }.command())
    }

    fn reads_spread(voucher_id: BucketId) -> Io {
        Io::Redis(ReadSpread { voucher_id }.command())
    }

    fn mark(returned: &str, deadlines: &str) -> Input {
        Input::Redis(Ok(vec![
            Reply::text(returned),
            Reply::text(deadlines),
            Reply::text("3"),
        ]))
    }

    fn ledger(orders: u64, returned_event: u64) -> Input {
        committed(Vec::new(), orders, returned_event, 0)
    }

    fn committed(verdicts: Vec<Verdict>, orders: u64, returned_event: u64, created: u64) -> Input {
        Input::Committed(Ok(Committed {
            verdicts,
            ledger: crate::ledger::Ledger {
                orders,
                returned_event,
                stock: 0,
            },
            created,
        }))
    }

    fn script_args(io: &Io, name: &str) -> Vec<String> {
        match io {
            Io::Redis(Command::Script { script, args, .. }) if script.name == name => {
                args.values().map(ToString::to_string).collect()
            }
            other => panic!("expected {name}.lua, got {other:?}"),
        }
    }

    /// A sweep with nothing to expire nor give back, run to its audit, where MySQL counts
    /// `mysql_orders` of the 3 orders Redis learnt of; and the audit's call.
    fn audited_sweep(voucher: BucketId, mysql_orders: u64) -> (Returns, Io) {
        let (mut run, _) = Returns::sweep(voucher);
        assert_eq!(run.resume(mark("0", "0")), Io::Commit(Vec::new()));
        let io = run.resume(ledger(mysql_orders, 0));
        (run, io)
    }

    /// The sweep's audit finding MySQL holding all 3 orders Redis learnt of.
    fn audited(run: &mut Returns, mark_then: Input, returned_event: u64) -> Io {
        assert_eq!(run.resume(mark_then), Io::Commit(Vec::new()));
        let io = run.resume(ledger(3, returned_event));
        assert_eq!(
            script_args(&io, "audit")[..2],
            ["0".to_string(), returned_event.to_string()]
        );
        run.resume(Input::Redis(Ok(vec![Reply::Int(0)])))
    }

    fn texts(values: &[&str]) -> Input {
        Input::Redis(Ok(values.iter().map(|value| Reply::text(value)).collect()))
    }

    /// A page of the heal: its cursor, then each order's buyer, id and units.
    fn held(cursor: &str, orders: &[(&str, &str, i64)]) -> Input {
        let mut page = vec![Reply::text(cursor)];
        for (user, order, units) in orders {
            page.extend([Reply::text(user), Reply::text(order), Reply::Int(*units)]);
        }
        Input::Redis(Ok(page))
    }

    #[test]
    fn a_sweep_reads_the_mark_expires_page_by_page_then_restocks_and_ends_on_the_last_page() {
        let voucher = BucketId::from_raw(7);
        let (mut run, io) = Returns::with_page(voucher, true, 2);
        assert_eq!(io, reads_mark(voucher));
        // It audits first, under its lease: Redis's orders (3), then MySQL's, which holds
        // them all; then it reads the mark again.
        assert_eq!(audited(&mut run, mark("4", "9"), 4), reads_mark(voucher));
        assert_eq!(run.resume(mark("4", "9")), Io::ExpireDue { limit: 2 });
        assert_eq!(
            run.resume(Input::Expired(Ok((2, Some(50))))),
            Io::ExpireDue { limit: 2 }
        );
        let io = run.resume(Input::Expired(Ok((1, Some(60)))));
        assert_eq!(io, Io::ReturnsAfter { after: 4, limit: 2 });
        let io = run.resume(Input::Returns(Ok(vec![returned(5), returned(6)])));
        // A full page: not the last, so the sweep is not over yet; read after the mark 4.
        assert_eq!(restock_args(&io)[..3], ["-", "0", "4"]);
        let io = run.resume(restocked(2, "2"));
        assert_eq!(io, reads_mark(voucher));
        // The next page's mark: it expires nothing again.
        let io = run.resume(mark("6", "10"));
        assert_eq!(io, Io::ReturnsAfter { after: 6, limit: 2 });
        let io = run.resume(Input::Returns(Ok(vec![returned(7)])));
        // The deadlines it began with, not the later ones; read after the mark 6.
        assert_eq!(restock_args(&io)[..3], ["60000", "9", "6"]);
        // Units came back: it reads where the sale keeps its buckets (none but this one).
        let io = run.resume(restocked(1, "3"));
        assert_eq!(io, reads_spread(voucher));
        // The sweep is over: it wakes the presses waiting for its end, and knows the stock.
        let whole = Input::Redis(Ok(vec![Reply::Nil, Reply::Nil]));
        assert_eq!(run.resume(whole), wakes(voucher));
        assert_eq!(run.stock(), Some(3));
        assert_eq!(
            run.resume(Input::Redis(Ok(vec![Reply::Int(1)]))),
            Io::Done(Ok(3))
        );
        assert_eq!(run.report(), None);
    }

    #[test]
    fn units_given_back_to_a_bucket_reopen_every_other_bucket_of_its_sale() {
        let (first, here, last) = (
            BucketId::from_raw(7),
            BucketId::from_raw(8),
            BucketId::from_raw(9),
        );
        let (mut run, io) = Returns::restock(here);
        assert_eq!(io, reads_mark(here));
        assert_eq!(
            run.resume(mark("4", "9")),
            Io::ReturnsAfter {
                after: 4,
                limit: PAGE
            }
        );
        run.resume(Input::Returns(Ok(vec![returned(5)])));
        // A later bucket names the first, whose hash names the others.
        let io = run.resume(restocked(1, "1"));
        assert_eq!(io, reads_spread(here));
        let io = run.resume(texts_or_nil(&[None, Some("7")]));
        assert_eq!(io, reads_spread(first));
        let mut io = run.resume(texts_or_nil(&[Some("8,9"), None]));
        let mut reopened = Vec::new();
        while let Io::Redis(command) = &io {
            let bucket = [first, last]
                .into_iter()
                .find(|bucket| *command == Reopen { bucket: *bucket }.command())
                .unwrap_or_else(|| panic!("{command:?}"));
            reopened.push(bucket);
            io = run.resume(Input::Redis(Ok(vec![Reply::Status("OK".into())])));
        }
        reopened.sort();
        assert_eq!(reopened, [first, last]);
        assert_eq!(io, Io::Done(Ok(1)));

        // Nothing given back: nothing read, nothing reopened.
        let (mut run, _) = Returns::restock(here);
        run.resume(mark("5", "9"));
        run.resume(Input::Returns(Ok(Vec::new())));
        assert_eq!(run.resume(restocked(0, "0")), Io::Done(Ok(0)));
    }

    fn texts_or_nil(values: &[Option<&str>]) -> Input {
        Input::Redis(Ok(values
            .iter()
            .map(|value| value.map_or(Reply::Nil, Reply::text))
            .collect()))
    }

    #[test]
    fn a_sweep_that_finds_mysql_lacking_orders_commits_redis_s_again_page_by_page() {
        let voucher = BucketId::from_raw(7);
        // Redis learnt of 3 orders, MySQL holds 1 (and no unit left).
        let (mut run, io) = audited_sweep(voucher, 1);
        assert_eq!(script_args(&io, "audit"), ["2", "0", "0", "0", "1"]);
        let io = run.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
        assert_eq!(script_args(&io, "heal"), ["start", "256", "0", "[]"]);
        let (a, b) = (OrderId::from_raw(11), OrderId::from_raw(12));
        let (u, v) = (UserId::from_raw(1), UserId::from_raw(2));
        let io = run.resume(held("17", &[("1", "11", 1), ("2", "12", 3)]));
        assert_eq!(io, Io::Commit(vec![(a, u, 1), (b, v, 3)]));
        // Hers is back; his MySQL holds another order of, which wins.
        let io = run.resume(committed(
            vec![
                Verdict::Ordered,
                Verdict::Duplicate(OrderId::from_raw(9), 2),
            ],
            2,
            0,
            1,
        ));
        assert_eq!(
            script_args(&io, "heal"),
            [
                "17",
                "256",
                "1",
                r#"[{"user":"2","order":"12","verdict":"duplicate","about":"9","units":2}]"#
            ]
        );
        // The last page: a buyer whose order MySQL has no unit for any more, and one
        // who bought in another bucket since (that order wins, as a publication has it).
        let io = run.resume(held("0", &[("3", "13", 1), ("4", "14", 1)]));
        let (c, d) = (OrderId::from_raw(13), OrderId::from_raw(14));
        assert_eq!(
            io,
            Io::Commit(vec![
                (c, UserId::from_raw(3), 1),
                (d, UserId::from_raw(4), 1)
            ])
        );
        let elsewhere = Verdict::Elsewhere(OrderId::from_raw(20));
        let io = run.resume(committed(vec![Verdict::SoldOut, elsewhere], 2, 0, 0));
        assert_eq!(
            script_args(&io, "heal"),
            [
                "",
                "256",
                "0",
                concat!(
                    r#"[{"user":"3","order":"13","verdict":"sold_out","about":"13","units":1},"#,
                    r#"{"user":"4","order":"14","verdict":"elsewhere","about":"20","units":1}]"#
                )
            ]
        );
        let io = run.resume(texts(&["0"]));
        // The audit again, which finds nothing missing and clears the mark; then the
        // sweep goes on to expire and give back, and ends.
        assert_eq!(io, reads_mark(voucher));
        assert_eq!(audited(&mut run, mark("0", "0"), 0), reads_mark(voucher));
        assert_eq!(run.resume(mark("0", "0")), Io::ExpireDue { limit: PAGE });
        run.resume(Input::Expired(Ok((0, None))));
        run.resume(Input::Returns(Ok(vec![])));
        // The heal gave units back: the sale's other buckets are reopened (a reply lost
        // ends the reopening, not the sweep).
        let io = run.resume(restocked(0, "0"));
        assert_eq!(io, reads_spread(voucher));
        let lost = || Input::Redis(Err(BackendError::Redis("gone".into())));
        assert_eq!(run.resume(lost()), wakes(voucher));
        assert_eq!(
            run.resume(lost()),
            Io::Done(Ok(0)),
            "a wake-up lost ends nothing"
        );
        let report = run.report().expect("a heal is reported");
        assert!(report.contains("lacked 2 orders of voucher 7"), "{report}");
        assert!(report.contains("1 committed again"), "{report}");
        assert!(report.contains("1 lost for good"), "{report}");
        assert!(report.contains(&c.to_string()), "{report}");
        assert!(
            report.contains("1 yielded to their buyers' orders in other buckets"),
            "{report}"
        );
    }

    #[test]
    fn a_sweep_of_expiries_alone_does_not_audit() {
        let voucher = BucketId::from_raw(7);
        let (mut run, io) = Returns::expiries(voucher);
        assert_eq!(io, reads_mark(voucher));
        assert_eq!(run.resume(mark("0", "0")), Io::ExpireDue { limit: PAGE });
    }

    #[test]
    fn a_heal_pauses_after_its_pages_and_leaves_the_rest_to_the_next_sweep() {
        let (mut run, _) = audited_sweep(BucketId::from_raw(7), 1);
        let io = run.resume(Input::Redis(Ok(vec![Reply::Int(1)])));
        assert_eq!(script_args(&io, "heal")[0], "start");
        for _ in 1..HEAL_PAGES {
            // Pages of records that are no orders (queued purchases, cancellations).
            let io = run.resume(texts(&["17"]));
            assert_eq!(script_args(&io, "heal")[0], "17");
        }
        // Paused, the sweep goes on to expire and give back, which frees its lease.
        let voucher = BucketId::from_raw(7);
        assert_eq!(run.resume(texts(&["17"])), reads_mark(voucher));
        assert_eq!(run.resume(mark("0", "0")), Io::ExpireDue { limit: PAGE });
    }

    #[test]
    fn a_restock_reads_the_mark_first_and_a_sweep_says_when_no_order_is_left_unpaid() {
        let voucher = BucketId::from_raw(7);
        let (mut run, io) = Returns::restock(voucher);
        assert_eq!(io, reads_mark(voucher));
        let io = run.resume(Input::Redis(Ok(vec![Reply::Nil, Reply::Nil, Reply::Nil])));
        assert_eq!(
            io,
            Io::ReturnsAfter {
                after: 0,
                limit: PAGE
            }
        );
        let io = run.resume(Input::Returns(Ok(vec![])));
        assert_eq!(restock_args(&io), ["-", "0", "0", "[]"]);
        assert_eq!(
            run.resume(Input::Redis(Ok(vec![Reply::Int(-1)]))),
            Io::Done(Ok(0)),
            "a restock wakes nobody"
        );
        let (mut sweep, _) = Returns::sweep(voucher);
        audited(&mut sweep, mark("0", "3"), 0);
        sweep.resume(mark("0", "3"));
        sweep.resume(Input::Expired(Ok((0, None))));
        let io = sweep.resume(Input::Returns(Ok(vec![])));
        assert_eq!(restock_args(&io), ["", "3", "0", "[]"]);
        assert_eq!(
            sweep.resume(Input::Redis(Ok(vec![Reply::Int(-1)]))),
            wakes(voucher)
        );
        assert_eq!(sweep.stock(), None);
    }

    #[test]
    fn a_failure_ends_the_run_with_its_cause() {
        let voucher = BucketId::from_raw(7);
        let (mut run, _) = Returns::sweep(voucher);
        assert_eq!(
            run.resume(mark("0", "0")),
            Io::Commit(Vec::new()),
            "the audit first"
        );
        assert_eq!(
            run.resume(Input::Committed(Err(BackendError::Mysql("gone".into())))),
            Io::Done(Err(BackendError::Mysql("gone".into())))
        );
        let (mut run, _) = Returns::sweep(voucher);
        audited(&mut run, mark("0", "0"), 0);
        run.resume(mark("0", "0"));
        assert_eq!(
            run.resume(Input::Expired(Err(BackendError::Mysql("gone".into())))),
            Io::Done(Err(BackendError::Mysql("gone".into())))
        );
        let (mut run, _) = Returns::restock(voucher);
        assert_eq!(
            run.resume(Input::Redis(Err(BackendError::Redis("gone".into())))),
            Io::Done(Err(BackendError::Redis("gone".into())))
        );
        let (mut run, _) = Returns::restock(voucher);
        run.resume(mark("0", "0"));
        run.resume(Input::Returns(Ok(vec![])));
        assert!(matches!(
            run.resume(Input::Redis(Ok(vec![Reply::text("what")]))),
            Io::Done(Err(_))
        ));
    }
}
