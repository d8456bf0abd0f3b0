//! A voucher's sale state in Redis. The rules live in the Lua scripts of `lua/`; each
//! has a file here with the type that calls it and reads its reply ([`Call`]), so that a
//! call cannot be read with another's parser. `keys` says where everything lives.
//!
//! | script / command        | call                                   |
//! |-------------------------|----------------------------------------|
//! | `admission.lua`         | [`Admit`]                              |
//! | `publish.lua`           | [`Publish`]                            |
//! | `unlock.lua`            | [`Unlock`]                             |
//! | `SET NX`, `BLPOP`, `end_turn.lua` | [`TakeTurn`], [`AwaitTurn`], [`EndTurn`] |
//! | `walk_end.lua`          | [`WalkEnd`], [`MarkAllOut`]            |
//! | `clear.lua`             | [`Clear`]                              |
//! | `BLPOP`, `claim.lua`    | [`Wait`], [`Claim`]                    |
//! | `SET NX`, `stage.lua`, `load.lua` | [`BeginSync`], [`Stage`], [`Load`] |
//! | `view.lua`              | [`ReadView`]                           |
//! | `record.lua`            | [`ReadHolding`]                        |
//! | `HMGET`, `restock.lua`  | [`ReadMark`], [`Restock`]              |
//! | `BLMOVE`, `end_sweep.lua` | [`AwaitSweep`], [`EndSweep`]         |
//! | `end.lua`               | [`EndSale`]                            |
//! | `audit.lua`, `heal.lua` | [`Audit`], [`Heal`]                    |
//! | `SADD`, `SREM` after a script | [`listings`]                     |
//! | `metrics.lua`, `HINCRBY`, sets | [`ReadFigures`], [`Count`], [`Members`], [`Unlist`], [`Forget`] |
//! | `SET NX`, `lookup.lua`, `probed.lua`, health | [`TakeProbe`], [`AskMysql`], [`Probed`], [`ReadFinding`], [`KeepFinding`], [`Ping`] |

mod admission;
mod claim;
mod clear;
#[cfg(test)]
mod contracts;
mod end;
mod end_sweep;
mod entry;
mod heal;
mod keys;
mod listings;
mod load;
mod metrics;
mod probe;
mod publish;
mod record;
mod restock;
mod settling;
mod unlock;
mod view;
mod walk_end;

pub use admission::{Admission, Admit, Decision, Lease, Route, Sighting, Sightings};
pub use claim::{Claim, Claimed, News, Wait, WAIT_SLICE};
pub use clear::{Clear, Cleared};
pub use end::EndSale;
pub use end_sweep::{AwaitSweep, EndSweep, SWEEP_SLICE};
pub use entry::{Entry, Record, Ticket};
pub use heal::{Audit, Heal, HeldPage, Unhealed, HEAL_PAGE, HEAL_PAGES};
pub use keys::*;
pub use listings::listings;
pub use load::{BeginSync, Created, Installer, Load, Stage};
pub use metrics::{Count, Counted, Figures, Forget, Members, ReadFigures, Unlist};
pub use probe::{
    AskMysql, Finding, FreeProbe, KeepFinding, MayAsk, Ping, Probe, Probed, ReadFinding, TakeProbe,
    LOOKUP_SLOTS,
};
pub use publish::{Next, Publication, Publish, Published, PublishedEntry};
pub use record::{Holding, ReadHolding};
pub use restock::{Mark, ReadMark, Restock, Restocked, Swept, TakeSweep};
pub use settling::{AwaitTurn, EndTurn, TakeTurn};
pub use unlock::Unlock;
pub use view::{KeepSummary, ReadShare, ReadView, Share, Shown, Terms, View, SUMMARY_MS};
pub use walk_end::{
    MarkAllOut, Marked, Pointer, ReadSpread, Reopen, WalkEnd, WalkEnded, ALL_OUT, REOPENED,
};

use crate::error::BackendError;
use crate::redis::{Command, Reply, UnexpectedReply};

/// One call to Redis and what its reply means.
pub trait Call {
    type Output;

    /// What to send.
    fn command(&self) -> Command;

    /// What the reply to [`Call::command`] says.
    fn parse(&self, reply: Vec<Reply>) -> Result<Self::Output, UnexpectedReply>;
}

/// The reply to `call` as it means it, or why there is none: the backend's failure, or a
/// reply the call does not understand.
pub fn parsed<C: Call>(
    call: &C,
    reply: Result<Vec<Reply>, BackendError>,
) -> Result<C::Output, BackendError> {
    Ok(call.parse(reply?)?)
}

/// Queue entries, as the scripts list them.
fn parse_entries(entries: &[Reply]) -> Option<Vec<Entry>> {
    entries
        .iter()
        .map(|entry| match entry {
            Reply::Bytes(bytes) => Entry::parse(std::str::from_utf8(bytes).ok()?),
            _ => None,
        })
        .collect()
}

/// `SET key holder NX PX ms`: a lease that whoever sets it holds for `ms`, under its own
/// token when it alone may release it early.
fn set_nx(key: String, holder: &str, ms: i64) -> Command {
    Command::plain(
        "SET",
        vec![
            key.into(),
            holder.into(),
            "NX".into(),
            "PX".into(),
            ms.into(),
        ],
    )
}

/// A `SET ... NX` reply: whether it set the key.
fn parse_set_nx(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
    match reply.as_slice() {
        [Reply::Status(ok)] if ok == "OK" => Ok(true),
        [Reply::Nil] => Ok(false),
        _ => Err(UnexpectedReply(reply)),
    }
}

/// A script's `1` (done) or `0` (refused).
fn parse_flag(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
    match reply.as_slice() {
        [Reply::Int(1)] => Ok(true),
        [Reply::Int(0)] => Ok(false),
        _ => Err(UnexpectedReply(reply)),
    }
}

/// A reply that only says the command ran.
fn parse_any(_reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
    Ok(())
}
