//! `lua/view.lua`: what a product page shows of a voucher, from Redis in one round trip
//! whatever the sale's buckets; [`ReadShare`] and [`KeepSummary`], what the one reader a
//! second that sums a sale's other buckets reads and keeps (docs/design.md, "Buckets").

use crate::buckets::parse_ids;
use crate::ids::BucketId;
use crate::redis::{args, Arg, Command, Reply, UnexpectedReply, VIEW};

use super::{Call, Keys, AUDIT_MS, KEPT_AFTER_END_MS, SWEEP_MS};

/// How long the summary of a sale's other buckets stands before one reader sums them
/// again, milliseconds: as long as a page may be cached (`max-age=1`).
pub const SUMMARY_MS: i64 = 1_000;

/// `view.lua`'s reply for a sale, field by field in its order, as its header names them
/// (the contract test holds this against the header; `parse` binds the same names).
pub const VIEW_REPLY: [&str; 16] = [
    "stock",
    "begin_ms",
    "end_ms",
    "initial_stock",
    "title",
    "description",
    "pay_within_s",
    "now_ms",
    "sweep",
    "buckets",
    "draw_ms",
    "per_buyer",
    "summary",
    "refresh",
    "audit",
    "announce_ms",
];

/// The sale terms as Redis keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    pub stock: u64,
    pub begin_ms: i64,
    pub end_ms: i64,
    pub initial_stock: u64,
    pub title: String,
    pub description: String,
    /// How long a winner has to pay before her order expires, in seconds.
    pub pay_within_s: u64,
    /// How long the opening draw takes its entries, from the sale's begin, in
    /// milliseconds; 0 for a sale first come, first served (docs/design.md, "The opening
    /// draw").
    pub draw_ms: u64,
    /// The most units one buyer may hold (docs/design.md, "Quantities").
    pub per_buyer: u64,
    /// When the sale is listed, unix milliseconds (0: from its creation); before it every
    /// public route answers as for an id no voucher has (docs/design.md, "Unlisted until
    /// announced").
    pub announce_ms: i64,
}

impl Terms {
    /// Where the sale stands at `now_ms`, as the API names it: by Redis's clock, which
    /// admission decides by, when the terms come from Redis.
    pub fn status(&self, now_ms: i64) -> &'static str {
        if now_ms < self.begin_ms {
            "upcoming"
        } else if now_ms >= self.end_ms {
            "ended"
        } else if self.stock == 0 {
            "sold_out"
        } else {
            "live"
        }
    }
}

/// A voucher's terms as Redis holds them, and the sale's clock when they were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub terms: Terms,
    /// Redis's clock, never before a boundary of the window the sale has crossed.
    pub now_ms: i64,
    /// A deadline to pay has passed and this read holds the sweep lease: it sweeps.
    pub sweep: bool,
    /// The sale's other buckets, for its first (docs/design.md, "Buckets"): the page
    /// shows the stock of them all.
    pub others: Vec<BucketId>,
    /// The other buckets' stock and initial stock as a reader last summed them.
    pub summary: Option<Share>,
    /// This read is the one of [`SUMMARY_MS`] to sum the other buckets again.
    pub refresh: bool,
    /// Another bucket whose audit is due: this read sweeps it (under its lease), so that
    /// a read audits one bucket at most, the sale's buckets in turn.
    pub audit: Option<BucketId>,
}

/// A bucket's units: left, and at the sale's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Share {
    pub stock: u64,
    pub initial_stock: u64,
}

impl std::ops::AddAssign for Share {
    fn add_assign(&mut self, other: Share) {
        self.stock += other.stock;
        self.initial_stock += other.initial_stock;
    }
}

/// What Redis knows of a voucher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    Sale(View),
    /// No such voucher exists (as admission decides it).
    Unknown,
    /// Redis holds no complete sale state for it: MySQL knows.
    Missing,
}

/// The voucher as Redis holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadView {
    pub voucher_id: BucketId,
}

impl Call for ReadView {
    type Output = Shown;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &VIEW,
            vec![
                keys.voucher(),
                keys.absent(),
                keys.highest_voucher(),
                keys.sweep(),
                keys.summary(),
            ],
            args![
                voucher_id = self.voucher_id.to_string(),
                sweep_ms = SWEEP_MS,
                audit_ms = AUDIT_MS,
                summary_ms = SUMMARY_MS,
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Shown, UnexpectedReply> {
        let number = |value: &Reply| match value {
            Reply::Bytes(bytes) => std::str::from_utf8(bytes).ok()?.parse::<i64>().ok(),
            Reply::Int(n) => Some(*n),
            _ => None,
        };
        let string = |value: &Reply| match value {
            Reply::Bytes(bytes) => String::from_utf8(bytes.clone()).ok(),
            _ => None,
        };
        let view = match reply.as_slice() {
            [] => return Ok(Shown::Missing),
            [tag] if tag.is_tag("unknown") => return Ok(Shown::Unknown),
            // As VIEW_REPLY names them (held against the script's header).
            fields => match <&[Reply; VIEW_REPLY.len()]>::try_from(fields) {
                Ok(
                    [stock, begin_ms, end_ms, initial_stock, title, description, pay_within_s, now_ms, sweep, buckets, draw_ms, per_buyer, summary, refresh, audit, announce_ms],
                ) => (|| {
                    let others = parse_ids(&string(buckets)?)?;
                    let audit = match usize::try_from(number(audit)?).ok()? {
                        0 => None,
                        place => Some(*others.get(place - 1)?),
                    };
                    Some(View {
                        terms: Terms {
                            stock: number(stock)?.max(0) as u64,
                            begin_ms: number(begin_ms)?,
                            end_ms: number(end_ms)?,
                            initial_stock: u64::try_from(number(initial_stock)?).ok()?,
                            title: string(title)?,
                            description: string(description)?,
                            pay_within_s: u64::try_from(number(pay_within_s)?).ok()?,
                            draw_ms: u64::try_from(number(draw_ms)?).ok()?,
                            per_buyer: u64::try_from(number(per_buyer)?).ok()?,
                            announce_ms: number(announce_ms)?,
                        },
                        now_ms: number(now_ms)?,
                        sweep: number(sweep)? == 1,
                        others,
                        summary: match string(summary)?.as_str() {
                            "" => None,
                            text => Some(parse_share(text)?),
                        },
                        refresh: number(refresh)? == 1,
                        audit,
                    })
                })(),
                Err(_) => None,
            },
        };
        view.map(Shown::Sale).ok_or(UnexpectedReply(reply))
    }
}

/// "<stock>,<initial stock>", as [`KeepSummary`] writes it.
fn parse_share(text: &str) -> Option<Share> {
    let (stock, initial) = text.split_once(',')?;
    Some(Share {
        stock: stock.parse().ok()?,
        initial_stock: initial.parse().ok()?,
    })
}

/// One bucket's units, for the reader summing a sale's other buckets; `None` when Redis
/// holds no sale state for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadShare {
    pub voucher_id: BucketId,
}

impl Call for ReadShare {
    type Output = Option<Share>;

    fn command(&self) -> Command {
        Command::plain(
            "HMGET",
            vec![
                Keys::new(self.voucher_id).voucher().into(),
                "stock".into(),
                "initial_stock".into(),
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Option<Share>, UnexpectedReply> {
        let number = |field: &Reply| match field {
            Reply::Bytes(n) => std::str::from_utf8(n).ok()?.parse::<i64>().ok(),
            _ => None,
        };
        match reply.as_slice() {
            [Reply::Nil, _] | [_, Reply::Nil] => Ok(None),
            [stock, initial] => match (number(stock), number(initial)) {
                (Some(stock), Some(initial)) => Ok(Some(Share {
                    stock: stock.max(0) as u64,
                    initial_stock: initial.max(0) as u64,
                })),
                _ => Err(UnexpectedReply(reply)),
            },
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// Keeps the sum of a sale's other buckets beside its first, for the next readers: as
/// long as a sale's keys, so that only the readers of a sale's first moment, before any
/// sum is kept, sum the buckets each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepSummary {
    pub voucher_id: BucketId,
    pub others: Share,
}

impl Call for KeepSummary {
    type Output = ();

    fn command(&self) -> Command {
        let summary = format!("{},{}", self.others.stock, self.others.initial_stock);
        Command::plain(
            "SET",
            vec![
                Keys::new(self.voucher_id).summary().into(),
                summary.into(),
                "PX".into(),
                Arg::Int(KEPT_AFTER_END_MS),
            ],
        )
    }

    fn parse(_: Vec<Reply>) -> Result<(), UnexpectedReply> {
        Ok(())
    }
}

#[cfg(any(test, feature = "samples"))]
impl Terms {
    /// A sale of `stock` units left of `initial_stock`, between `begin_ms` and `end_ms`:
    /// what the state machines' tests install.
    pub fn sample(stock: u64, initial_stock: u64, begin_ms: i64, end_ms: i64) -> Terms {
        Terms {
            stock,
            begin_ms,
            end_ms,
            initial_stock,
            title: "t".into(),
            description: String::new(),
            pay_within_s: 900,
            draw_ms: 0,
            per_buyer: 1,
            announce_ms: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_follows_the_window_and_the_stock() {
        let mut terms = Terms::sample(5, 5, 1_000_000, 2_000_000);
        assert_eq!(terms.status(999_999), "upcoming");
        assert_eq!(terms.status(1_000_000), "live");
        assert_eq!(terms.status(2_000_000), "ended");
        terms.stock = 0;
        assert_eq!(terms.status(1_500_000), "sold_out");
        assert_eq!(terms.status(2_500_000), "ended");
    }

    #[test]
    fn reads_a_view_or_its_absence() {
        let bin = Reply::text;
        let reply = vec![
            bin("7"),
            bin("1000"),
            bin("2000"),
            bin("10"),
            bin("券"),
            bin(""),
            bin("900"),
            Reply::Int(1500),
            Reply::Int(1),
            bin("8,9"),
            bin("0"),
            bin("2"),
            bin("5,12"),
            Reply::Int(0),
            Reply::Int(2),
            bin("1400"),
        ];
        let Shown::Sale(view) = ReadView::parse(reply).unwrap() else {
            panic!("a sale")
        };
        assert_eq!(
            (view.terms.stock, view.terms.initial_stock, view.now_ms),
            (7, 10, 1500)
        );
        assert!(view.sweep);
        assert_eq!(view.others, [8, 9].map(BucketId::from_raw));
        assert_eq!(view.terms.title, "券");
        assert_eq!(view.terms.per_buyer, 2);
        assert_eq!(view.terms.announce_ms, 1400);
        let others = Share {
            stock: 5,
            initial_stock: 12,
        };
        assert_eq!(
            (view.summary, view.refresh, view.audit),
            (Some(others), false, Some(BucketId::from_raw(9)))
        );
        assert_eq!(ReadView::parse(vec![]).unwrap(), Shown::Missing);
        assert_eq!(
            ReadView::parse(vec![bin("unknown")]).unwrap(),
            Shown::Unknown
        );
        assert!(ReadView::parse(vec![bin("7")]).is_err());
    }
}
