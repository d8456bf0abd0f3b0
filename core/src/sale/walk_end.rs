//! `lua/walk_end.lua`: the end of a buyer's walk round a sale's buckets, kept at her home
//! bucket (docs/design.md, "Buckets").

use crate::buckets::{parse_ids, Spread, ALL_OUT_MS};
use crate::ids::{BucketId, SaleId, UserId};
use crate::redis::{args, Command, Reply, UnexpectedReply, WALK_END};

use super::{Call, Keys, KEPT_AFTER_END_MS};

/// How a walk started at the buyer's home bucket (admission.lua's "p:" and "w:" records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pointer {
    /// Her home counted it among her walks under way (`p:<n>`).
    Counted,
    /// It followed her home's pointer at the bucket that held her purchase (`w:<bucket>`).
    At(BucketId),
}

impl Pointer {
    /// As walk_end.lua's `started` names it.
    fn arg(self) -> String {
        match self {
            Pointer::Counted => "counted".to_string(),
            Pointer::At(bucket) => format!("w:{bucket}"),
        }
    }
}

/// A bucket's all-out mark, as `lua/records.lua` names its two states: all out, and reopened
/// (`ALL_OUT`, `REOPENED`), each followed by a time.
pub const ALL_OUT: &str = "a:";
pub const REOPENED: &str = "r:";

/// Tells the buyer's home bucket where her walk found her record, or that it found none:
/// then the walk is uncounted (or the pointer it followed cleared), and the bucket, while
/// still sold out, answers `sold_out` alone until units come back ([`ALL_OUT_MS`] at most).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkEnd {
    pub home: BucketId,
    pub buyer: UserId,
    /// The bucket holding her record, if the walk found one.
    pub found: Option<BucketId>,
    /// The pointer the walk started from.
    pub started: Option<Pointer>,
    /// The walk found no unit in any bucket: her home may be marked all out (not when a
    /// bucket had units, fewer than she asked for).
    pub empty: bool,
    /// When the oldest sighting the walk rests on was made (unix ms): a mark it leaves
    /// lasts [`ALL_OUT_MS`] after it, and none where units came back since.
    pub since: i64,
}

/// What her home bucket made of the walk's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEnded {
    /// It points at the bucket the walk found.
    Pointed,
    /// It holds a record of hers after all (another press of hers was handed a unit given
    /// back there meanwhile): ask it.
    Home,
    /// Still sold out: marked so.
    Marked,
    /// It has a unit again.
    Open,
}

impl Call for WalkEnd {
    type Output = WalkEnded;

    fn command(&self) -> Command {
        walk_end(
            self.home,
            self.buyer.to_string(),
            self.found
                .map_or_else(String::new, |bucket| bucket.to_string()),
            self.started.map_or_else(String::new, Pointer::arg),
            self.empty,
            self.since,
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<WalkEnded, UnexpectedReply> {
        match reply.as_slice() {
            [tag] if tag.is_tag("pointed") => Ok(WalkEnded::Pointed),
            [tag] if tag.is_tag("home") => Ok(WalkEnded::Home),
            [tag] if tag.is_tag("marked") => Ok(WalkEnded::Marked),
            [tag] if tag.is_tag("open") => Ok(WalkEnded::Open),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// Marks another bucket of the sale all out, as a walk that found every bucket empty
/// marks its home: while still sold out, it answers `sold_out` alone until units come back
/// ([`ALL_OUT_MS`] at most)
/// (walk_end.lua with no buyer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkAllOut {
    pub bucket: BucketId,
    /// As [`WalkEnd::since`].
    pub since: i64,
}

/// What a bucket made of [`MarkAllOut`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// Marked now.
    Now,
    /// Marked already: another walk marks the buckets.
    Before,
    /// It has a unit: not marked.
    Open,
}

impl Call for MarkAllOut {
    type Output = Marked;

    fn command(&self) -> Command {
        walk_end(
            self.bucket,
            String::new(),
            String::new(),
            String::new(),
            true,
            self.since,
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Marked, UnexpectedReply> {
        match reply.as_slice() {
            [tag] if tag.is_tag("marked") => Ok(Marked::Now),
            [tag] if tag.is_tag("marked_before") => Ok(Marked::Before),
            [tag] if tag.is_tag("open") => Ok(Marked::Open),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

fn walk_end(
    bucket: BucketId,
    buyer: String,
    found: String,
    started: String,
    empty: bool,
    since: i64,
) -> Command {
    let keys = Keys::new(bucket);
    Command::script(
        &WALK_END,
        vec![keys.voucher(), keys.buyers(), keys.all_out()],
        args![
            user = buyer,
            found = found,
            started = started,
            mark_ms = ALL_OUT_MS,
            keep_ms = KEPT_AFTER_END_MS,
            empty = i64::from(empty),
            since = since,
        ],
    )
}

/// Where a bucket's hash says its sale's stock lives: the first bucket's names the others,
/// a later one's the first (as a load installs them, `crate::buckets::Spread`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadSpread {
    pub voucher_id: BucketId,
}

impl Call for ReadSpread {
    type Output = Spread;

    fn command(&self) -> Command {
        Command::plain(
            "HMGET",
            vec![
                Keys::new(self.voucher_id).voucher().into(),
                "buckets".into(),
                "sale".into(),
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Spread, UnexpectedReply> {
        let text = |field: &[u8]| std::str::from_utf8(field).ok().map(str::to_string);
        let spread = match reply.as_slice() {
            [Reply::Bytes(others), _] => text(others)
                .as_deref()
                .and_then(parse_ids)
                .map(Spread::First),
            [Reply::Nil, Reply::Bytes(first)] => text(first)
                .as_deref()
                .and_then(SaleId::parse)
                .map(Spread::BucketOf),
            [Reply::Nil, Reply::Nil] => Some(Spread::Whole),
            _ => None,
        };
        spread.ok_or(UnexpectedReply(reply))
    }
}
