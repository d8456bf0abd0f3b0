//! `lua/walk_end.lua`: the end of a buyer's walk round a sale's buckets, kept at her home
//! bucket (docs/design.md, "Buckets").

use crate::buckets::ALL_OUT_MS;
use crate::ids::{UserId, VoucherId};
use crate::redis::{Command, Reply, UnexpectedReply, WALK_END};

use super::{Call, Keys, KEPT_AFTER_END_MS};

/// How a walk started at the buyer's home bucket (admission.lua's "p:" and "w:" records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pointer {
    /// Her home counted it among her walks under way (`p:<n>`).
    Counted,
    /// It followed her home's pointer at the bucket that held her purchase (`w:<bucket>`).
    At(VoucherId),
}

impl Pointer {
    /// As walk_end.lua's ARGV[3] names it.
    fn arg(self) -> String {
        match self {
            Pointer::Counted => "counted".to_string(),
            Pointer::At(bucket) => format!("w:{bucket}"),
        }
    }
}

/// Tells the buyer's home bucket where her walk found her record, or that it found none:
/// then the walk is uncounted (or the pointer it followed cleared), and the bucket, while
/// still sold out, answers `sold_out` alone for [`ALL_OUT_MS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkEnd {
    pub home: VoucherId,
    pub buyer: UserId,
    /// The bucket holding her record, if the walk found one.
    pub found: Option<VoucherId>,
    /// The pointer the walk started from.
    pub started: Option<Pointer>,
    /// The walk found no unit in any bucket: her home may be marked all out (not when a
    /// bucket had units, fewer than she asked for).
    pub empty: bool,
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
        )
    }

    fn parse(&self, reply: Vec<Reply>) -> Result<WalkEnded, UnexpectedReply> {
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
/// marks its home: while still sold out, it answers `sold_out` alone for [`ALL_OUT_MS`]
/// (walk_end.lua with no buyer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkAllOut {
    pub bucket: VoucherId,
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
        )
    }

    fn parse(&self, reply: Vec<Reply>) -> Result<Marked, UnexpectedReply> {
        match reply.as_slice() {
            [tag] if tag.is_tag("marked") => Ok(Marked::Now),
            [tag] if tag.is_tag("marked_before") => Ok(Marked::Before),
            [tag] if tag.is_tag("open") => Ok(Marked::Open),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

fn walk_end(
    bucket: VoucherId,
    buyer: String,
    found: String,
    started: String,
    empty: bool,
) -> Command {
    let keys = Keys::new(bucket);
    Command::script(
        &WALK_END,
        vec![keys.voucher(), keys.buyers(), keys.all_out()],
        vec![
            buyer.into(),
            found.into(),
            started.into(),
            ALL_OUT_MS.into(),
            KEPT_AFTER_END_MS.into(),
            i64::from(empty).into(),
        ],
    )
}
