//! `lua/restock.lua`: the units of cancelled and expired orders back to the live sale,
//! each once, by the event ids MySQL wrote with them ([`ReadMark`] says where the sale
//! is; [`Restock`] applies what came after). [`TakeSweep`] is the sweep lease for requests
//! other than a press, whose admission takes it.

use serde::Serialize;

use crate::ids::BucketId;
use crate::ledger::{ReturnKind, Returned};
use crate::redis::{args, Arg, Command, Reply, UnexpectedReply, RESTOCK};

use super::{parse_set_nx, set_nx, Call, Keys, SWEEP_MS};

/// Where the sale stands with returns and deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadMark {
    pub voucher_id: BucketId,
}

/// What [`ReadMark`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    /// The last return event the sale applied (0 when none).
    pub returned: u64,
    /// How many times a publication or a sync set a deadline to pay: a sweep that
    /// began before one may not know its order.
    pub deadlines: u64,
    /// The orders Redis has learnt of (`orders`), whatever became of them.
    pub orders: u64,
}

impl Call for ReadMark {
    type Output = Mark;

    fn command(&self) -> Command {
        Command::plain(
            "HMGET",
            vec![
                Keys::new(self.voucher_id).voucher().into(),
                "returned_event".into(),
                "deadlines".into(),
                "orders".into(),
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Mark, UnexpectedReply> {
        let count = |field: &Reply| match field {
            Reply::Nil => Some(0),
            Reply::Bytes(n) => std::str::from_utf8(n).ok()?.parse().ok(),
            _ => None,
        };
        match reply.as_slice() {
            [returned, deadlines, orders] => {
                match (count(returned), count(deadlines), count(orders)) {
                    (Some(returned), Some(deadlines), Some(orders)) => Ok(Mark {
                        returned,
                        deadlines,
                        orders,
                    }),
                    _ => Err(UnexpectedReply(reply)),
                }
            }
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// Takes the voucher's sweep lease, as admission does for the first press after a
/// deadline: for a read that found an order past its deadline, so that it expires with
/// nobody pressing. False when another request is sweeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakeSweep {
    pub voucher_id: BucketId,
}

impl Call for TakeSweep {
    type Output = bool;

    fn command(&self) -> Command {
        set_nx(Keys::new(self.voucher_id).sweep(), "1", SWEEP_MS)
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_set_nx(reply)
    }
}

/// The end of a sweep of expiries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// When the next sweep is due (unix ms); `None` when no order is left unpaid.
    pub next_ms: Option<i64>,
    /// The sale's [`Mark::deadlines`] when the sweep began.
    pub deadlines: u64,
}

/// One return as restock.lua reads it (its `events`, a JSON array): the event, "c"
/// (cancelled), "x" (expired) or "r" (restocked), the buyer, her order and its units
/// (none for a restock, and the units it added).
#[derive(Debug, Serialize)]
struct ReturnedEvent {
    event: String,
    kind: &'static str,
    user: String,
    order: String,
    units: u32,
}

/// Applies the returns after the sale's mark, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restock<'a> {
    pub voucher_id: BucketId,
    pub returns: &'a [Returned],
    /// The sale's mark the returns were read after: a mark moved back since (a sold-out
    /// publication, see `lua/publish.lua`) applies none of them.
    pub after: u64,
    /// For the sweep of expiries: it is over.
    pub swept: Option<Swept>,
}

/// What [`Restock`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restocked {
    /// Returns applied now (each its order's units).
    pub given: u64,
    /// The sale's stock after them, whoever gave units back.
    pub stock: i64,
}

impl Call for Restock<'_> {
    /// `None` when Redis holds no sale for the voucher.
    type Output = Option<Restocked>;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        let events: Vec<ReturnedEvent> = self
            .returns
            .iter()
            .map(|returned| {
                let (kind, user, order) = match returned.kind {
                    ReturnKind::Cancelled { order_id, user } => {
                        ("c", user.to_string(), order_id.to_string())
                    }
                    ReturnKind::Expired { order_id, user } => {
                        ("x", user.to_string(), order_id.to_string())
                    }
                    ReturnKind::Restocked => ("r", String::new(), String::new()),
                };
                ReturnedEvent {
                    event: returned.event.to_string(),
                    kind,
                    user,
                    order,
                    units: returned.units,
                }
            })
            .collect();
        let (next_sweep, deadlines) = match self.swept {
            None => (Arg::from("-"), 0),
            Some(swept) => (
                swept.next_ms.map_or(Arg::from(""), Arg::from),
                swept.deadlines as i64,
            ),
        };
        let args = args![
            next_sweep = next_sweep,
            deadlines = deadlines,
            after = self.after as i64,
            events = serde_json::to_string(&events).expect("strings encode"),
        ];
        Command::script(
            &RESTOCK,
            vec![
                keys.voucher(),
                keys.buyers(),
                keys.metrics(),
                keys.sweep(),
                keys.all_out(),
            ],
            args,
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Option<Restocked>, UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Int(-1)] => Ok(None),
            [Reply::Int(given @ 0..), stock] => match stock_of(stock) {
                Some(stock) => Ok(Some(Restocked {
                    given: *given as u64,
                    stock,
                })),
                None => Err(UnexpectedReply(reply)),
            },
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// The voucher's stock as a script read it (`HGET`'s bulk string).
pub(super) fn stock_of(reply: &Reply) -> Option<i64> {
    match reply {
        Reply::Bytes(stock) => std::str::from_utf8(stock).ok()?.parse().ok(),
        _ => None,
    }
}
