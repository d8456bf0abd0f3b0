//! The end of a sweep of expiries, waited for: a press that would answer sold_out while
//! another request sweeps the sale (admission's "sweeping") blocks for the wake-up the
//! sweep leaves as it ends ([`EndSweep`], `lua/end_sweep.lua`), then presses again, so
//! that the units the sweep gave back are hers to buy. One wake-up wakes every waiting
//! press: each `BLMOVE` takes it and puts it back, until it lapses.

use crate::ids::BucketId;
use crate::redis::{args, Command, Reply, UnexpectedReply, END_SWEEP};

use super::{parse_flag, Call, Keys};

/// How long a press blocks for the wake-up before it looks at the sweep again (a sweep
/// whose request died leaves none), in seconds as `BLMOVE` takes them.
pub const SWEEP_SLICE: &str = "0.25";
/// How long a wake-up lasts: long enough for a press that heard "sweeping" just before
/// the end to block on it, short enough not to wake the waiters of the next sweep.
const WAKE_MS: i64 = 100;

/// The list a sweep's end leaves its wake-up in.
fn wake(voucher_id: BucketId) -> String {
    format!("{}-wake", Keys::new(voucher_id).sweep())
}

/// Blocks up to [`SWEEP_SLICE`] for the end of the sweep under way: whether it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwaitSweep {
    pub voucher_id: BucketId,
}

impl Call for AwaitSweep {
    type Output = bool;

    fn command(&self) -> Command {
        let wake = wake(self.voucher_id);
        Command::plain(
            "BLMOVE",
            vec![
                wake.clone().into(),
                wake.into(),
                "LEFT".into(),
                "RIGHT".into(),
                SWEEP_SLICE.into(),
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        match reply.as_slice() {
            [] | [Reply::Nil] => Ok(false),
            [Reply::Bytes(_)] => Ok(true),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

/// Wakes the presses waiting for the voucher's sweep, which just ended, unless another
/// sweep took the lease since (its end wakes them): whether it woke them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndSweep {
    pub voucher_id: BucketId,
}

impl Call for EndSweep {
    type Output = bool;

    fn command(&self) -> Command {
        Command::script(
            &END_SWEEP,
            vec![wake(self.voucher_id), Keys::new(self.voucher_id).sweep()],
            args![wake_ms = WAKE_MS],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_flag(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_cluster::key_slot;

    #[test]
    fn the_wake_up_is_in_its_voucher_s_slot() {
        let voucher = BucketId::from_raw(42);
        let keys = Keys::new(voucher);
        assert_eq!(key_slot(wake(voucher).as_bytes()), keys.slot());
    }
}
