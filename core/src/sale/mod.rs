//! A voucher's sale state in Redis. The rules live in the Lua scripts of `lua/`: each
//! `lua/<name>.lua` has one file here, `<name>.rs`, with the type(s) that run it and read
//! its reply ([`Call`]), so that a call cannot be read with another's parser, and no other
//! file runs it (`records.lua` is the prelude every script shares, `lua/admission/` parts
//! of `admission.lua`). A script's file also keeps the plain commands that read or
//! prepare what its script writes: [`Wait`] (`BLPOP`) in `claim.rs`; [`TakeSweep`]
//! (`SET NX`) and [`ReadMark`] (`HMGET`) in `restock.rs`; [`AwaitSweep`] (`BLMOVE`) in
//! `end_sweep.rs`; [`ReadShare`] and [`KeepSummary`] in `view.rs`; [`BeginSync`] (`SET
//! NX`), [`Created`] (`HGET`) and [`Forget`] (`DEL`) in `load.rs`; [`ReadSpread`]
//! (`HMGET`) in `walk_end.rs`. The plain commands of no one script live in files named
//! for what they do:
//!
//! | file          | what                                                              |
//! |---------------|-------------------------------------------------------------------|
//! | `settling.rs` | turns at settling: `SET NX`, `BLPOP` ([`TakeTurn`], [`AwaitTurn`]) |
//! | `probe.rs`    | asking MySQL once a second, health: `SET NX`, `DEL`, `GET`, `SET`, `PING` |
//! | `listings.rs` | the sets of vouchers: `SADD`/`SREM` after a script, `SMEMBERS`    |
//! | `keys.rs`     | where everything lives                                            |
//! | `entry.rs`    | queue entries and buyers' records as the scripts write them       |
//! | `contracts.rs`| (tests) each call's keys and arguments held against its script's header |
//!
//! A test (`layout` below) holds this: a script without its file, or a file that is
//! neither a script's nor one of these, fails it.

mod admission;
mod ask_mysql;
mod audit;
mod change;
mod claim;
mod clear;
#[cfg(test)]
mod contracts;
mod count;
mod end;
mod end_sweep;
mod end_turn;
mod entry;
mod heal;
mod keys;
mod leave;
mod listings;
mod load;
mod metrics;
mod probe;
mod probed;
mod publish;
mod raise;
mod record;
mod reopen;
mod restock;
mod settling;
mod stage;
mod unlock;
mod view;
mod walk_end;

pub use admission::{
    Admission, Admit, Decision, Lease, LineAsk, LineFigures, Route, Sighting, Sightings,
};
pub use ask_mysql::{AskMysql, MayAsk};
pub use audit::Audit;
pub use change::{ChangeTerms, Changed};
pub use claim::{Claim, Claimed, News, Wait, WAIT_SLICE};
pub use clear::{Clear, Cleared};
pub use count::{Count, Counted};
pub use end::EndSale;
pub use end_sweep::{AwaitSweep, EndSweep, SWEEP_SLICE};
pub use end_turn::EndTurn;
pub use entry::{Entry, Record, Ticket};
pub use heal::{Heal, HeldPage, Unhealed, HEAL_PAGE, HEAL_PAGES};
pub use keys::*;
pub use leave::Leave;
pub use listings::{listings, Members, Unlist};
pub use load::{BeginSync, Created, Forget, Installer, Load};
pub use metrics::{Figures, ReadFigures};
pub use probe::{
    Finding, FreeProbe, KeepFinding, Ping, Probe, ReadFinding, TakeProbe, LOOKUP_SLOTS,
};
pub use probed::Probed;
pub use publish::{Next, Publication, Publish, Published, PublishedEntry};
pub use raise::Raise;
pub use record::{Holding, ReadHolding, Seek};
pub use reopen::Reopen;
pub use restock::{Mark, ReadMark, Restock, Restocked, Swept, TakeSweep};
pub use settling::{AwaitTurn, TakeTurn};
pub use stage::Stage;
pub use unlock::Unlock;
pub use view::{KeepSummary, ReadShare, ReadView, Share, Shown, Terms, View, SUMMARY_MS};
pub use walk_end::{
    MarkAllOut, Marked, Pointer, ReadSpread, WalkEnd, WalkEnded, ALL_OUT, REOPENED,
};

use crate::error::BackendError;
use crate::redis::{Command, Reply, UnexpectedReply};

/// One call to Redis and what its reply means.
pub trait Call {
    type Output;

    /// What to send.
    fn command(&self) -> Command;

    /// What the reply to [`Call::command`] says.
    fn parse(reply: Vec<Reply>) -> Result<Self::Output, UnexpectedReply>;
}

/// The reply to a call `C` as it means it, or why there is none: the backend's failure,
/// or a reply the call does not understand.
pub fn parsed<C: Call>(reply: Result<Vec<Reply>, BackendError>) -> Result<C::Output, BackendError> {
    Ok(C::parse(reply?)?)
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

#[cfg(test)]
mod layout {
    use std::collections::BTreeSet;
    use std::path::Path;

    /// The files here named for what they do rather than for a script.
    const PLAIN: [&str; 7] = [
        "contracts",
        "entry",
        "keys",
        "listings",
        "mod",
        "probe",
        "settling",
    ];

    /// The stems of the files in `dir` that end in `.{ext}`.
    fn stems(dir: &Path, ext: &str) -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|entry| {
                let path = entry.unwrap().path();
                (path.extension()? == ext).then(|| path.file_stem()?.to_str().map(str::to_owned))?
            })
            .collect()
    }

    #[test]
    fn each_script_has_one_file_of_its_name_and_no_other_runs_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let here = root.join("src/sale");
        let mut scripts = stems(&root.join("../lua"), "lua");
        scripts.remove("records");
        let files = stems(&here, "rs");
        let orphans: Vec<_> = scripts.difference(&files).collect();
        assert!(
            orphans.is_empty(),
            "scripts with no file of their name: {orphans:?}"
        );
        let strays: Vec<_> = files
            .iter()
            .filter(|file| !scripts.contains(*file) && !PLAIN.contains(&file.as_str()))
            .collect();
        assert!(
            strays.is_empty(),
            "files neither a script's nor plain: {strays:?}"
        );
        for file in &files {
            let text = std::fs::read_to_string(here.join(format!("{file}.rs"))).unwrap();
            for script in &scripts {
                let runs = format!("&{},", script.to_uppercase());
                assert!(
                    file == script || !text.contains(&runs),
                    "{file}.rs runs {script}.lua"
                );
            }
        }
    }
}
