//! `lua/end_turn.lua`: hands a slot's turn at settling on ([`super::TakeTurn`]).

use crate::order_id::OrderId;
use crate::redis::{args, Command, Reply, UnexpectedReply, END_TURN};

use super::settling::{settling, wake};
use super::{parse_flag, Call, SETTLE_TURN_MS};

/// Hands the turn on while it is still `token`'s (a turn that lapsed and was taken is
/// left alone), waking the settle that has waited longest: whether it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndTurn<'a> {
    pub order_id: OrderId,
    pub token: &'a str,
}

impl Call for EndTurn<'_> {
    type Output = bool;

    fn command(&self) -> Command {
        Command::script(
            &END_TURN,
            vec![settling(self.order_id), wake(self.order_id)],
            args![token = self.token, wake_ms = SETTLE_TURN_MS],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_flag(reply)
    }
}
