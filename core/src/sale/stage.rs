//! `lua/stage.lua`: a page of the buyers MySQL holds orders for, merged by an admin's
//! sync before it installs the terms ([`super::Load`]).

use serde::Serialize;

use crate::ids::{BucketId, UserId};
use crate::redis::{args, Command, Reply, UnexpectedReply, STAGE};

use super::{parse_flag, Call, Keys, Record, KEPT_AFTER_END_MS, SYNC_LEASE_MS};

/// Merges a page of the buyers MySQL holds orders for, and extends the sync's lease; see
/// `lua/stage.lua`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage<'a> {
    pub voucher_id: BucketId,
    pub token: &'a str,
    /// When MySQL created the sale the buyers are of, unix seconds.
    pub created: i64,
    pub buyers: &'a [(UserId, Record)],
}

/// One buyer of a page as stage.lua reads it (its `page`, a JSON array): her record as
/// MySQL's orders make it.
#[derive(Debug, Serialize)]
struct StagedBuyer {
    user: String,
    record: String,
}

impl Call for Stage<'_> {
    /// Whether the page was merged (else the sync lost its lease).
    type Output = bool;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        let page: Vec<StagedBuyer> = self
            .buyers
            .iter()
            .map(|(user, record)| StagedBuyer {
                user: user.to_string(),
                record: record.to_string(),
            })
            .collect();
        let args = args![
            token = self.token,
            lease_ms = SYNC_LEASE_MS,
            orphans_ms = KEPT_AFTER_END_MS,
            page = serde_json::to_string(&page).expect("strings encode"),
            created = self.created,
        ];
        Command::script(
            &STAGE,
            vec![keys.buyers(), keys.sync_lease(), keys.voucher()],
            args,
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_flag(reply)
    }
}
