//! `lua/raise.lua`: the deployment's highest voucher id, raised after a script raised a
//! slot's copy of it (see [`super::listings`]).

use crate::redis::{args, Arg, Command, Reply, UnexpectedReply, RAISE};

use super::{parse_any, Call, HIGHEST_VOUCHER};

/// Raises the deployment's highest voucher id to `highest` (never lowers it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raise<'a> {
    pub highest: &'a Arg,
}

impl Call for Raise<'_> {
    type Output = ();

    fn command(&self) -> Command {
        Command::script(
            &RAISE,
            vec![HIGHEST_VOUCHER.to_string()],
            args![highest = self.highest.clone()],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
        parse_any(reply)
    }
}

/// [`Raise`] when the script raised a slot's copy (`key`, on a cluster) rather than the
/// deployment's own.
pub(super) fn raise(key: &str, highest: &Arg) -> Option<Command> {
    (key != HIGHEST_VOUCHER).then(|| Raise { highest }.command())
}
