//! MySQL's word on the purchases of a group commit (`seckill_commit_batch` in
//! `migrations/999_procedures.sql`, read by `sql::committed`). It travels from SQL to
//! Rust, from Rust to `lua/publish.lua`, and from there to each waiting buyer as one
//! [`Told`]: the verdict's name ([`Verdict::tag`]) and the order it is about, by name.

use serde::{Deserialize, Serialize};

use crate::ids::UserId;
use crate::ledger::Ledger;
use crate::order_id::OrderId;

/// One purchase of a group commit as MySQL takes it (`sql::batch_json`): its order id, its
/// buyer and its units.
pub type Committing = (OrderId, UserId, u32);

/// MySQL's verdict on one queued purchase of a group commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its order is committed.
    Ordered,
    /// The buyer holds this other order of the voucher, of these units; nothing was taken.
    Duplicate(OrderId, u32),
    /// The buyer holds this order from another bucket of the sale (docs/design.md,
    /// "Buckets"); nothing was taken, and the unit Redis charged goes back.
    Elsewhere(OrderId),
    /// The buyer's order from another bucket of the sale, cancelled: she holds none, and
    /// may not buy again (one order per buyer per sale); the unit goes back, as for
    /// [`Verdict::Elsewhere`].
    Cancelled(OrderId),
    /// The buyer's order from another bucket of the sale, expired unpaid: as
    /// [`Verdict::Cancelled`].
    Expired(OrderId),
    /// No unit was left; nothing was taken.
    SoldOut,
    /// Units were left, fewer than the purchase's (`left` of them when it came to it);
    /// nothing was taken.
    Short { left: u32 },
    /// Its order id is another order's (see docs/design.md, "Order ids"); nothing was taken.
    IdTaken,
}

impl Verdict {
    /// One verdict of each kind (a duplicate of no order in particular).
    fn kinds(order_id: OrderId) -> [Verdict; 8] {
        [
            Verdict::Ordered,
            Verdict::Duplicate(order_id, 1),
            Verdict::Elsewhere(order_id),
            Verdict::Cancelled(order_id),
            Verdict::Expired(order_id),
            Verdict::SoldOut,
            Verdict::Short { left: 1 },
            Verdict::IdTaken,
        ]
    }

    /// Every verdict's name, as MySQL, the scripts and the counters write it.
    pub fn tags() -> [&'static str; 8] {
        Verdict::kinds(OrderId::from_raw(0)).map(Verdict::tag)
    }

    /// The verdict's name.
    pub fn tag(self) -> &'static str {
        match self {
            Verdict::Ordered => "ordered",
            Verdict::Duplicate(..) => "duplicate",
            Verdict::Elsewhere(_) => "elsewhere",
            Verdict::Cancelled(_) => "cancelled",
            Verdict::Expired(_) => "expired",
            Verdict::SoldOut => "sold_out",
            Verdict::Short { .. } => "short",
            Verdict::IdTaken => "id_taken",
        }
    }

    /// The order a published verdict is about: the buyer's other order for a duplicate
    /// (or one in another bucket), else the purchase's own `order_id`.
    pub fn order_id(self, order_id: OrderId) -> OrderId {
        match self {
            Verdict::Duplicate(held, _)
            | Verdict::Elsewhere(held)
            | Verdict::Cancelled(held)
            | Verdict::Expired(held) => held,
            _ => order_id,
        }
    }

    /// The units a verdict on a purchase of `units` names: those of the order it is about
    /// (see [`Verdict::order_id`]), or for [`Verdict::Short`] those that were left.
    pub fn units(self, units: u32) -> u32 {
        match self {
            Verdict::Duplicate(_, held) => held,
            Verdict::Short { left } => left,
            _ => units,
        }
    }

    /// The verdict named `tag`, about `order_id` of `units` (see [`Verdict::order_id`]
    /// and [`Verdict::units`]).
    pub fn from_tag(tag: &str, order_id: OrderId, units: u32) -> Option<Verdict> {
        Verdict::kinds(order_id)
            .into_iter()
            .map(|verdict| match verdict {
                Verdict::Duplicate(held, _) => Verdict::Duplicate(held, units),
                Verdict::Short { .. } => Verdict::Short { left: units },
                verdict => verdict,
            })
            .find(|verdict| verdict.tag() == tag)
    }
}

/// A verdict as it crosses a language: a JSON object `{"outcome": <tag>, "order": <id>,
/// "units": <its units>}`, the order a decimal string (Lua's numbers lose 64-bit ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Told {
    pub outcome: String,
    pub order: String,
    pub units: u32,
}

impl Told {
    /// `verdict` on the purchase of `order_id`, of `units`, told.
    pub fn of(verdict: Verdict, order_id: OrderId, units: u32) -> Told {
        Told {
            outcome: verdict.tag().to_string(),
            order: verdict.order_id(order_id).to_string(),
            units: verdict.units(units),
        }
    }

    /// The verdict told and the order it is about; `None` for an unknown name or an id
    /// that is none.
    pub fn verdict(&self) -> Option<(Verdict, OrderId)> {
        let about = OrderId::parse(&self.order)?;
        Some((Verdict::from_tag(&self.outcome, about, self.units)?, about))
    }
}

/// What a batch's commit decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// MySQL's verdict on each purchase, in the batch's order.
    pub verdicts: Vec<Verdict>,
    /// What the voucher's stock counted once the batch's transaction committed: its
    /// orders, cancelled and expired ones included, and the last unit given back.
    pub ledger: Ledger,
    /// The orders this transaction inserted: 0 for a batch written again.
    pub created: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_verdict_reads_back_from_its_tag() {
        let id = OrderId::from_raw(6);
        for verdict in [
            Verdict::Ordered,
            Verdict::Duplicate(id, 3),
            Verdict::Elsewhere(id),
            Verdict::Cancelled(id),
            Verdict::Expired(id),
            Verdict::SoldOut,
            Verdict::Short { left: 1 },
            Verdict::IdTaken,
        ] {
            let about = verdict.order_id(OrderId::from_raw(5));
            let units = verdict.units(2);
            assert_eq!(
                Verdict::from_tag(verdict.tag(), about, units),
                Some(verdict)
            );
        }
        assert_eq!(Verdict::from_tag("other", id, 1), None);
    }

    #[test]
    fn a_verdict_told_reads_back_with_the_order_it_is_about() {
        let own = OrderId::from_raw(5);
        let held = OrderId::from_raw(6);
        for verdict in Verdict::kinds(held) {
            let told = Told::of(verdict, own, 2);
            let json = serde_json::to_string(&told).unwrap();
            let read: Told = serde_json::from_str(&json).unwrap();
            assert_eq!(read.verdict(), Some((verdict, verdict.order_id(own))));
        }
        let told = |outcome: &str, order: &str| Told {
            outcome: outcome.into(),
            order: order.into(),
            units: 1,
        };
        assert_eq!(told("other", "5").verdict(), None);
        assert_eq!(told("ordered", "x").verdict(), None);
        assert_eq!(told("ordered", "").verdict(), None);
    }
}
