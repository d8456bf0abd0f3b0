//! `lua/reopen.lua`: a bucket of a sale reopened when another was given units back.

use crate::buckets::ALL_OUT_MS;
use crate::ids::BucketId;
use crate::redis::{args, Command, Reply, UnexpectedReply, REOPEN};

use super::{Call, Keys};

/// Reopens a bucket of a sale whose other bucket was given units back (`lua/reopen.lua`):
/// its all-out mark goes, and no sighting made before now marks it again, so that its
/// buyers buy them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reopen {
    pub bucket: BucketId,
}

impl Call for Reopen {
    type Output = ();

    fn command(&self) -> Command {
        Command::script(
            &REOPEN,
            vec![Keys::new(self.bucket).all_out()],
            args![mark_ms = ALL_OUT_MS],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Int(1)] => Ok(()),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}
