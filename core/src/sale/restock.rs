//! `lua/restock.lua`: the units of cancelled and expired orders back to the live sale,
//! each once, by the event ids MySQL wrote with them ([`ReadMark`] says where the sale
//! is; [`Restock`] applies what came after).

use crate::ids::VoucherId;
use crate::redis::{Arg, Command, Reply, UnexpectedReply, RESTOCK};
use crate::sql::Returned;

use super::{Call, Keys};

/// The last return event the sale applied (0 when none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadMark {
    pub voucher_id: VoucherId,
}

impl Call for ReadMark {
    type Output = u64;

    fn command(&self) -> Command {
        Command::plain(
            "HGET",
            vec![
                Keys::new(self.voucher_id).voucher().into(),
                "returned_event".into(),
            ],
        )
    }

    fn parse(&self, reply: Vec<Reply>) -> Result<u64, UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Nil] => Ok(0),
            [Reply::Bytes(mark)] => std::str::from_utf8(mark)
                .ok()
                .and_then(|mark| mark.parse().ok())
                .ok_or(UnexpectedReply(reply)),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// Applies the returns after the sale's mark, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restock<'a> {
    pub voucher_id: VoucherId,
    pub returns: &'a [Returned],
    /// For the sweep of expiries: when the next one is due (unix ms; `None` when no
    /// order is left unpaid), and the sweep is over.
    pub swept: Option<Option<i64>>,
}

impl Call for Restock<'_> {
    /// Units given back now; `None` when Redis holds no sale for the voucher.
    type Output = Option<u64>;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        let mut args: Vec<Arg> = vec![(self.returns.len() as i64).into()];
        for returned in self.returns {
            args.extend([
                returned.event.to_string().into(),
                (if returned.cancelled { "c" } else { "x" }).into(),
                returned.user.to_string().into(),
                returned.order_id.to_string().into(),
            ]);
        }
        args.push(match self.swept {
            None => "-".into(),
            Some(None) => "".into(),
            Some(Some(due_ms)) => due_ms.into(),
        });
        Command::script(
            &RESTOCK,
            vec![keys.voucher(), keys.buyers(), keys.metrics(), keys.sweep()],
            args,
        )
    }

    fn parse(&self, reply: Vec<Reply>) -> Result<Option<u64>, UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Int(-1)] => Ok(None),
            [Reply::Int(given)] if *given >= 0 => Ok(Some(*given as u64)),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}
