//! `lua/audit.lua`: a sweep finds the orders MySQL lost (a failover to a lagging replica)
//! by their count, and Redis's units apart from MySQL's, before it heals them
//! ([`super::Heal`]).

use crate::ids::BucketId;
use crate::ledger::Ledger;
use crate::redis::{args, Command, Reply, UnexpectedReply, AUDIT};

use super::{parse_flag, Call, Keys};

/// Marks the voucher as behind in MySQL (`missing` > 0) or clears it, and sets Redis's
/// stock to MySQL's units left when they should agree and do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Audit {
    pub voucher_id: BucketId,
    /// The orders Redis learnt of before MySQL's count was read, less that count.
    pub missing: u64,
    /// MySQL's count: its orders, its units left and the last return its stock counts.
    pub mysql: Ledger,
    /// The sale's mark (its last return applied) as the sweep read it before MySQL's
    /// count: the mark goes back to `returned_event` only if it is still that. A sweep
    /// whose lease lapsed while it read MySQL may audit after another has applied returns
    /// MySQL had not counted yet at its read: moved back, they would be given twice.
    pub mark: u64,
}

impl Call for Audit {
    /// Whether the voucher is marked behind.
    type Output = bool;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &AUDIT,
            vec![keys.voucher(), keys.queue(), keys.metrics(), keys.all_out()],
            args![
                missing = self.missing as i64,
                counted_return = self.mysql.returned_event as i64,
                read_mark = self.mark as i64,
                mysql_stock = self.mysql.stock as i64,
                mysql_orders = self.mysql.orders as i64,
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_flag(reply)
    }
}
