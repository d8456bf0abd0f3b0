//! `lua/publish.lua`: records MySQL's verdicts on a committed batch, wakes its buyers,
//! and hands the drainer its next batch or passes the lease on.

use serde::{Deserialize, Serialize};

use crate::ids::BucketId;
use crate::ledger::Ledger;
use crate::order_id::OrderId;
use crate::redis::{args, Command, Reply, UnexpectedReply, PUBLISH};
use crate::verdict::{Told, Verdict};

use super::restock::stock_of;
use super::{
    parse_entries, Call, Entry, Keys, Limits, AUDIT_MS, HANDOVER_MS, KEPT_AFTER_END_MS, LEASE_MS,
};

/// One purchase of a batch as `publish.lua` takes it: its entry, its order id and
/// MySQL's verdict on it.
pub type Published = (Entry, OrderId, Verdict);

/// One entry of a publication as publish.lua reads it (its `published`, a JSON array): the
/// queue entry and MySQL's verdict on it, told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedEntry {
    pub entry: String,
    #[serde(flatten)]
    pub told: Told,
}

/// What `publish.lua` answered the drainer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Its own purchase is published (or it has none): the lease went on.
    Done,
    /// The lease or the batch is no longer its own: nothing was changed.
    Lost,
    /// The next batch to commit, under the extended lease.
    Batch(Vec<Entry>),
}

/// What `publish.lua` answered: what comes next, and the voucher's stock after it (`None`
/// when Redis holds no sale for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    pub next: Next,
    pub stock: Option<i64>,
}

/// Records MySQL's verdicts on `batch` (the head of the queue, in order) and wakes its
/// buyers. `own` is the drainer's own queued purchase; `mysql` what the voucher's stock
/// counted after the batch: its orders tell whether Redis lost orders it had recorded (it
/// rolled back) or MySQL lost some (a failover), and its last return which returns a
/// sold-out verdict must not wipe. None when nothing was committed (a waiter handed the
/// lease publishes its empty batch): no count was read, so nothing is compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish<'a> {
    pub voucher_id: BucketId,
    pub token: &'a str,
    pub own: Option<Entry>,
    pub batch: &'a [Published],
    pub mysql: Option<Ledger>,
    pub limits: Limits,
}

impl Call for Publish<'_> {
    type Output = Publication;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        // "" when no commit counted anything: publish.lua then compares nothing.
        let counted = |count: fn(&Ledger) -> u64| {
            self.mysql
                .as_ref()
                .map(|ledger| count(ledger).to_string())
                .unwrap_or_default()
        };
        let batch: Vec<PublishedEntry> = self
            .batch
            .iter()
            .map(|(entry, order_id, verdict)| PublishedEntry {
                entry: entry.to_string(),
                told: Told::of(*verdict, *order_id, entry.ticket.units()),
            })
            .collect();
        let args = args![
            token = self.token,
            lease_ms = LEASE_MS,
            handover_ms = HANDOVER_MS,
            batch_size = self.limits.batch,
            own = self.own.map(|entry| entry.to_string()).unwrap_or_default(),
            mysql_orders = counted(|ledger| ledger.orders),
            orphans_ms = KEPT_AFTER_END_MS,
            counted_return = counted(|ledger| ledger.returned_event),
            audit_ms = AUDIT_MS,
            published = serde_json::to_string(&batch).expect("strings encode"),
            mysql_stock = counted(|ledger| ledger.stock),
        ];
        Command::script(
            &PUBLISH,
            vec![
                keys.voucher(),
                keys.buyers(),
                keys.queue(),
                keys.lease(),
                keys.done_prefix(),
                keys.metrics(),
                keys.all_out(),
                keys.drawn(),
            ],
            args,
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Publication, UnexpectedReply> {
        // A sale found stale is listed by the client (`listings`); the drainer goes on.
        let answer = match reply.as_slice() {
            [tag, rest @ ..] if tag.is_tag("stale") => rest,
            answer => answer,
        };
        let (next, stock) = match answer {
            [tag, stock] if tag.is_tag("done") => (Some(Next::Done), stock),
            [tag, stock] if tag.is_tag("lost") => (Some(Next::Lost), stock),
            [tag, stock, entries @ ..] if tag.is_tag("next") => {
                (parse_entries(entries).map(Next::Batch), stock)
            }
            _ => (None, &Reply::Nil),
        };
        match (next, stock) {
            (Some(next), Reply::Nil) => Ok(Publication { next, stock: None }),
            (Some(next), stock) => match stock_of(stock) {
                Some(stock) => Ok(Publication {
                    next,
                    stock: Some(stock),
                }),
                None => Err(UnexpectedReply(reply)),
            },
            (None, _) => Err(UnexpectedReply(reply)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::Arg;

    /// The arguments of a publication of `batch` under MySQL's count `mysql`, as
    /// publish.lua reads them.
    fn args_of(batch: &[Published], mysql: Option<Ledger>) -> Vec<String> {
        let call = Publish {
            voucher_id: BucketId::from_raw(1),
            token: "t",
            own: None,
            batch,
            mysql,
            limits: Limits::SHIPPED,
        };
        let Command::Script { args, .. } = call.command() else {
            panic!("a script")
        };
        args.values().map(Arg::to_string).collect()
    }

    #[test]
    fn publish_passes_each_verdict_with_the_order_id_it_is_about() {
        let entry = Entry::parse("3:1704067210:1").unwrap();
        let own = OrderId::from_raw(1);
        let held = OrderId::from_raw(2);
        let batch = [
            (entry, own, Verdict::Ordered),
            (entry, own, Verdict::Duplicate(held, 1)),
        ];
        let mysql = Ledger {
            orders: 9,
            returned_event: 4,
            stock: 3,
        };
        assert_eq!(
            args_of(&batch, Some(mysql)),
            [
                "t",
                "2000",
                "500",
                "256",
                "",
                "9",
                "604800000",
                "4",
                "5000",
                r#"[{"entry":"3:1704067210:1","outcome":"ordered","order":"1","units":1},{"entry":"3:1704067210:1","outcome":"duplicate","order":"2","units":1}]"#,
                "3"
            ]
        );
    }

    /// A publication of nothing committed (a waiter handed the lease) passes no count of
    /// MySQL's, so that publish.lua does not take 0 for MySQL's orders and audit.
    #[test]
    fn an_uncommitted_publication_passes_no_count() {
        assert_eq!(
            args_of(&[], None),
            [
                "t",
                "2000",
                "500",
                "256",
                "",
                "",
                "604800000",
                "",
                "5000",
                "[]",
                ""
            ]
        );
    }
}
