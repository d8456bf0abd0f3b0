//! `lua/count.lua`: counts for `GET /metrics` what no script saw.

use crate::ids::BucketId;
use crate::redis::{args, Command, Reply, UnexpectedReply, COUNT};

use super::{parse_any, Call, Keys, KEPT_AFTER_END_MS};

/// What [`Count`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// A purchase outcome that no script saw: one the request reached after admission
    /// (`busy`, `unavailable`).
    Purchase(&'static str),
    /// An order paid (cancelled and expired ones are counted by `restock.lua`).
    Paid,
}

/// Counts what no script saw. A counter written after Redis lost the sale expires anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    pub voucher_id: BucketId,
    pub counted: Counted,
}

impl Call for Count {
    type Output = ();

    fn command(&self) -> Command {
        Command::script(
            &COUNT,
            vec![Keys::new(self.voucher_id).metrics()],
            args![
                counter = match self.counted {
                    Counted::Purchase(outcome) => format!("purchase:{outcome}"),
                    Counted::Paid => "orders:paid".to_string(),
                },
                orphans_ms = KEPT_AFTER_END_MS,
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
        parse_any(reply)
    }
}
