//! `lua/change.lua`: a sale's changed terms into one bucket, once MySQL holds them
//! (`sql::CHANGE_SALE`; docs/design.md, "Changing a sale").

use crate::ids::BucketId;
use crate::redis::{args, Command, Reply, UnexpectedReply, CHANGE};

use super::{Call, Keys, Terms, KEPT_AFTER_END_MS};

/// Installs the terms MySQL holds at `terms_version` in the bucket, with its units
/// (`terms.stock`, `terms.initial_stock`) and the last return or restock they count
/// (`returned_event`), which change.lua takes only for a bucket that has not begun and
/// holds no order (units reach an open sale as restocks, `lua/restock.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeTerms<'a> {
    pub voucher_id: BucketId,
    pub terms: &'a Terms,
    pub terms_version: u64,
    pub returned_event: u64,
}

/// What [`ChangeTerms`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    Installed,
    /// Newer terms are installed: a later change went first.
    Newer,
    /// Redis holds no sale for the bucket: a sync installs MySQL's terms.
    Missing,
}

impl Call for ChangeTerms<'_> {
    type Output = Changed;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        let terms = self.terms;
        Command::script(
            &CHANGE,
            vec![keys.voucher(), keys.queue(), keys.buyers(), keys.metrics()],
            args![
                terms_version = self.terms_version as i64,
                title = terms.title.as_str(),
                description = terms.description.as_str(),
                begin_ms = terms.begin_ms,
                end_ms = terms.end_ms,
                pay_within_s = terms.pay_within_s as i64,
                draw_ms = terms.draw_ms as i64,
                per_buyer = terms.per_buyer as i64,
                announce_ms = terms.announce_ms,
                stock = terms.stock as i64,
                initial_stock = terms.initial_stock as i64,
                returned_event = self.returned_event.to_string(),
                keep_ms = KEPT_AFTER_END_MS,
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Changed, UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Int(1)] => Ok(Changed::Installed),
            [Reply::Int(0)] => Ok(Changed::Newer),
            [Reply::Int(-1)] => Ok(Changed::Missing),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}
