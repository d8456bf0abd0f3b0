//! `lua/heal.lua`: a sweep that found the orders MySQL lost by their count
//! ([`super::Audit`]) pages through the buyers' orders Redis holds, so that MySQL commits those it
//! lacks again, and records what it said ([`Heal`]).

use serde::Serialize;

use crate::ids::{BucketId, UserId};
use crate::order_id::OrderId;
use crate::redis::{args, Command, Reply, UnexpectedReply, HEAL};
use crate::verdict::{Committing, Verdict};

use super::{Call, Keys};

/// Buyers' records a page of the heal scans.
pub const HEAL_PAGE: i64 = 256;
/// Pages one sweep heals at most, so that the press or read that sweeps waits a bounded
/// time; the next sweep goes on where it stopped.
pub const HEAL_PAGES: u32 = 8;

/// An order Redis holds that MySQL would not commit again as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unhealed {
    pub user: UserId,
    pub order_id: OrderId,
    /// MySQL's verdict on committing it again, never [`Verdict::Ordered`]: another order
    /// of hers that MySQL holds wins (in another bucket, as a publication records it);
    /// with none, hers is lost for good.
    pub verdict: Verdict,
}

impl Unhealed {
    /// Whether her order is lost for good: MySQL holds no other order of hers.
    pub fn lost(&self) -> bool {
        matches!(
            self.verdict,
            Verdict::SoldOut | Verdict::Short { .. } | Verdict::IdTaken
        )
    }

    /// Whether it yields to her order in another bucket of the sale (alive or dead).
    pub fn elsewhere(&self) -> bool {
        matches!(
            self.verdict,
            Verdict::Elsewhere(_) | Verdict::Cancelled(_) | Verdict::Expired(_)
        )
    }
}

/// Records what MySQL said of the last page, and reads the next page from `cursor`
/// (`Some("start")`: where the last heal stopped; `None`: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heal<'a> {
    pub voucher_id: BucketId,
    pub cursor: Option<&'a str>,
    /// Orders MySQL created again for the last page.
    pub restored: u64,
    pub unhealed: &'a [Unhealed],
}

/// A page of the buyers' committed orders, as Redis holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldPage {
    /// Where the next page starts; `None` when this was the last.
    pub cursor: Option<String>,
    /// Oldest first: when MySQL has fewer units left than the page lost, the earliest
    /// orders get them.
    pub orders: Vec<Committing>,
}

/// One order of a page as heal.lua reads it (its `unhealed`, a JSON array): the buyer, her
/// order, MySQL's verdict on committing it again, the order that verdict is about and
/// that order's units (told only for a duplicate: heal.lua reads her own from her record).
#[derive(Debug, Serialize)]
struct UnhealedOrder {
    user: String,
    order: String,
    verdict: String,
    about: String,
    units: u32,
}

impl Call for Heal<'_> {
    type Output = HeldPage;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        let unhealed: Vec<UnhealedOrder> = self
            .unhealed
            .iter()
            .map(|unhealed| UnhealedOrder {
                user: unhealed.user.to_string(),
                order: unhealed.order_id.to_string(),
                verdict: unhealed.verdict.tag().to_string(),
                about: unhealed.verdict.order_id(unhealed.order_id).to_string(),
                units: unhealed.verdict.units(1),
            })
            .collect();
        let args = args![
            cursor = self.cursor.unwrap_or(""),
            page_size = HEAL_PAGE,
            restored = self.restored as i64,
            unhealed = serde_json::to_string(&unhealed).expect("strings encode"),
        ];
        Command::script(
            &HEAL,
            vec![
                keys.voucher(),
                keys.buyers(),
                keys.metrics(),
                keys.all_out(),
            ],
            args,
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<HeldPage, UnexpectedReply> {
        let text = |reply: &Reply| match reply {
            Reply::Bytes(bytes) => std::str::from_utf8(bytes).ok().map(str::to_owned),
            _ => None,
        };
        let page = (|| {
            let (cursor, records) = reply.split_first()?;
            let cursor = text(cursor)?;
            if records.len() % 3 != 0 {
                return None;
            }
            let orders = records
                .chunks(3)
                .map(|held| {
                    let user = text(&held[0])?.parse().ok()?;
                    let order_id = text(&held[1])?.parse().ok()?;
                    let Reply::Int(units @ 1..) = held[2] else {
                        return None;
                    };
                    Some((
                        OrderId::from_raw(order_id),
                        UserId::from_raw(user),
                        u32::try_from(units).ok()?,
                    ))
                })
                .collect::<Option<Vec<_>>>()?;
            let mut orders = orders;
            orders.sort_by_key(|(order_id, ..)| *order_id);
            Some(HeldPage {
                cursor: (cursor != "0").then_some(cursor),
                orders,
            })
        })();
        page.ok_or(UnexpectedReply(reply))
    }
}
