//! `lua/ask_mysql.lua`: whether MySQL may be asked about a voucher Redis holds no sale for.

use crate::ids::{BucketId, VoucherId};
use crate::redis::{args, Command, Reply, UnexpectedReply, ASK_MYSQL};

use super::{Call, Probe, HIGHEST_VOUCHER};

/// Before MySQL is asked about a voucher Redis holds no sale for (see `lua/ask_mysql.lua`):
/// whether the deployment's highest voucher id says it does not exist (on a Redis
/// Cluster, a slot that has learnt nothing cannot tell), and, with `probe`, whether this
/// request may ask now ([`Probe::VoucherLookup`]: its slot's probe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AskMysql {
    pub voucher_id: BucketId,
    pub probe: bool,
}

/// What [`AskMysql`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MayAsk {
    /// No such voucher: its id is above this, the highest (`None`: MySQL has none), which
    /// the caller teaches the voucher's slot ([`super::Probed`]). Any row's id, a sale's or
    /// a later bucket's: a [`VoucherId`].
    Unknown(Option<VoucherId>),
    /// Ask MySQL (or, without `probe`, nothing says it does not exist).
    Yes,
    /// Another request holds the probe: retry in a second.
    NotNow,
}

impl Call for AskMysql {
    type Output = MayAsk;

    fn command(&self) -> Command {
        let mut keys = vec![HIGHEST_VOUCHER.to_string()];
        if self.probe {
            keys.push(Probe::VoucherLookup(self.voucher_id).key());
            keys.push(Probe::AnyVoucherLookup.key());
        }
        Command::script(
            &ASK_MYSQL,
            keys,
            args![voucher_id = self.voucher_id.to_string(), probe_ms = 1_000],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<MayAsk, UnexpectedReply> {
        let asked = match reply.as_slice() {
            [tag, Reply::Bytes(highest)] if tag.is_tag("unknown") => std::str::from_utf8(highest)
                .ok()
                .and_then(|highest| highest.parse::<u64>().ok())
                .map(|raw| MayAsk::Unknown((raw > 0).then(|| VoucherId::from_raw(raw)))),
            [tag] if tag.is_tag("ask") => Some(MayAsk::Yes),
            [tag] if tag.is_tag("wait") => Some(MayAsk::NotNow),
            _ => None,
        };
        asked.ok_or(UnexpectedReply(reply))
    }
}
