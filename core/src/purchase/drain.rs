//! The group commit's drain, as the purchase holding the voucher's lease runs it: its
//! batch committed to MySQL in one transaction (tried again once on a fresh connection),
//! then each buyer's outcome published in Redis, which hands the lease to the next batch.

use super::{Io, Purchase, State, COMMIT_TRIES};
use crate::error::{ApiError, BackendError, Unavailable};
use crate::ledger::Ledger;
use crate::order_id::OrderId;
use crate::redis::Reply;
use crate::sale::{Call, Entry, Next, Publish, Published, Unlock};
use crate::verdict::{Committed, Committing, Verdict};

/// A drain in progress: this request holds the lease.
#[derive(Debug, Clone)]
pub(super) struct Drain {
    pub(super) token: String,
    /// The drainer's own queued purchase: it drains until that one is published.
    pub(super) own: Option<Entry>,
    pub(super) batch: Vec<Entry>,
    /// The batch's order ids, in its order, once the batch is sent to MySQL; `None` for
    /// an entry whose ticket makes no order id (see [`Purchase::drain_batch`]).
    pub(super) orders: Vec<Option<OrderId>>,
    pub(super) tries: u32,
    /// MySQL's verdicts on every purchase this request committed.
    pub(super) committed: Vec<(Entry, Verdict)>,
    /// Admission handed this request the lease (and it answers for `decision` once the
    /// drain ends), rather than its wait.
    pub(super) after_admission: bool,
}

impl Purchase {
    /// Sends the batch in hand to MySQL; an empty one (a waiter just handed the lease)
    /// goes straight to its publication, which hands out the first batch. An entry whose
    /// ticket makes no order id (admission hands out none: only a Redis written by
    /// something else holds one) can never commit; it is published as `id_taken`, which
    /// gives its unit back, so that it does not block the queue for ever.
    pub(super) fn drain_batch(&mut self, mut drain: Drain) -> Io {
        drain.orders = drain
            .batch
            .iter()
            .map(|entry| entry.ticket.order_id().ok())
            .collect();
        let orders = commit_of(&drain);
        if orders.is_empty() {
            // Nothing committed, nothing counted: the publication audits nothing.
            return self.publish(drain, Vec::new(), None);
        }
        if orders.len() < drain.batch.len() {
            self.causes
                .push("queue entries with no order id, given up".to_string());
        }
        self.state = State::Committing(drain);
        Io::Commit(orders)
    }

    pub(super) fn committed(
        &mut self,
        mut drain: Drain,
        result: Result<Committed, BackendError>,
    ) -> Io {
        let sent = drain.orders.iter().flatten().count();
        match result {
            Ok(committed) if committed.verdicts.len() == sent => {
                self.publish(drain, committed.verdicts, Some(committed.ledger))
            }
            Ok(committed) => {
                self.causes.push(format!(
                    "mysql: {} verdicts for {sent} purchases",
                    committed.verdicts.len(),
                ));
                self.drain_failed(drain, ApiError::Unavailable(Unavailable::Mysql))
            }
            Err(cause) => {
                self.causes.push(cause.to_string());
                drain.tries += 1;
                if drain.tries < COMMIT_TRIES {
                    let orders = commit_of(&drain);
                    self.state = State::Committing(drain);
                    return Io::Commit(orders);
                }
                self.drain_failed(drain, ApiError::Unavailable(Unavailable::Mysql))
            }
        }
    }

    /// MySQL's verdicts stand even when the publication is refused (the lease lapsed and
    /// someone else published the batch) or fails: the batch then stays queued, and the
    /// next drainer writes it again to no effect and publishes it.
    pub(super) fn publish(
        &mut self,
        mut drain: Drain,
        verdicts: Vec<Verdict>,
        mysql: Option<Ledger>,
    ) -> Io {
        let mut verdicts = verdicts.into_iter();
        let published: Vec<Published> = drain
            .batch
            .iter()
            .zip(&drain.orders)
            .map(|(entry, order_id)| match order_id {
                Some(order_id) => (*entry, *order_id, verdicts.next().expect("one a commit")),
                None => (*entry, OrderId::from_raw(0), Verdict::IdTaken),
            })
            .collect();
        drain.committed.extend(
            published
                .iter()
                .map(|(entry, _, verdict)| (*entry, *verdict)),
        );
        let command = Publish {
            voucher_id: self.bucket,
            token: &drain.token,
            own: drain.own,
            batch: &published,
            mysql,
            limits: self.limits,
        }
        .command();
        self.state = State::Publishing(drain);
        Io::Redis(command)
    }

    pub(super) fn published(
        &mut self,
        mut drain: Drain,
        reply: Result<Vec<Reply>, BackendError>,
    ) -> Io {
        let next = match reply.map(Publish::parse) {
            Ok(Ok(publication)) => {
                self.stock = publication.stock;
                publication.next
            }
            Ok(Err(unexpected)) => {
                self.causes
                    .push(format!("publishing a batch failed: {unexpected}"));
                Next::Done
            }
            Err(cause) => {
                self.causes
                    .push(format!("publishing a batch failed: {cause}"));
                Next::Done
            }
        };
        match next {
            Next::Batch(batch) if !batch.is_empty() => {
                drain.batch = batch;
                drain.tries = 0;
                self.drain_batch(drain)
            }
            _ => self.drain_ended(drain),
        }
    }

    pub(super) fn drain_ended(&mut self, drain: Drain) -> Io {
        if drain.after_admission {
            return self.settle(&drain.committed);
        }
        match verdict_of(&drain.committed, self.own()) {
            Some(verdict) => self.verdict(verdict),
            None => self.wait(),
        }
    }

    /// A drain that could not go on unlocks the queue at once, so that a waiter takes it
    /// over now rather than when the lock lapses. A queued purchase of the buyer's stays
    /// queued (the next drainer commits it) and she hears the failure; anyone else hears
    /// admission's decision.
    pub(super) fn drain_failed(&mut self, drain: Drain, error: ApiError) -> Io {
        let answer = if self.queued().is_some() {
            error
        } else {
            self.causes
                .push(format!("draining the queue failed: {error}"));
            match self.decision_answer() {
                Err(answer) => answer,
                Ok(io) => return io,
            }
        };
        self.state = State::Unlocking(answer);
        Io::Redis(
            Unlock {
                voucher_id: self.bucket,
                token: &drain.token,
            }
            .command(),
        )
    }
}

/// The purchases of a drain's batch that go to MySQL: those with an order id.
pub(super) fn commit_of(drain: &Drain) -> Vec<Committing> {
    drain
        .batch
        .iter()
        .zip(&drain.orders)
        .filter_map(|(entry, order_id)| {
            order_id.map(|order_id| (order_id, entry.user, entry.ticket.units()))
        })
        .collect()
}

/// MySQL's verdict on `entry` among those a drain committed.
pub(super) fn verdict_of(committed: &[(Entry, Verdict)], entry: Entry) -> Option<Verdict> {
    committed
        .iter()
        .find(|(committed, _)| *committed == entry)
        .map(|(_, verdict)| *verdict)
}
