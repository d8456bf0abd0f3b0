//! `lua/clear.lua`: a voucher just created takes its id over whole, whatever Redis holds
//! under it of a voucher MySQL lost (docs/operations.md, "After restoring MySQL"), and
//! the lost sale's other buckets go with it.

use crate::buckets::{parse_ids, Buckets};
use crate::ids::{BucketId, SaleId};
use crate::redis::{args, Command, Reply, UnexpectedReply, CLEAR};

use super::{Call, Keys};

/// Removes every key of `voucher_id`'s sale: before its creation installs it, or, for a
/// bucket of a lost sale, while it is still that sale's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clear {
    pub voucher_id: BucketId,
    /// The lost sale the voucher must still be a later bucket of; `None`: whatever it is.
    pub of_sale: Option<SaleId>,
}

/// What a [`Clear`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleared {
    /// How many keys held state of a lost voucher of this id.
    pub removed: i64,
    /// The lost sale's other buckets, when the voucher was its first.
    pub others: Vec<BucketId>,
}

impl Clear {
    /// The clearing of a bucket of a sale being created.
    pub fn creation(voucher_id: BucketId) -> Clear {
        Clear {
            voucher_id,
            of_sale: None,
        }
    }

    /// The clearings of the lost sale's buckets that `cleared` (this clearing's output)
    /// named and the new sale `created` does not take: a press routed by a list of the
    /// lost sale's buckets kept since (`src/platform/p1/known_buckets.rs`) finds none of them.
    pub fn lost_buckets(&self, cleared: &Cleared, created: &Buckets) -> Vec<Clear> {
        // Its hash named other buckets: this bucket was the lost sale's first.
        let lost_sale = SaleId::from_raw(self.voucher_id.raw());
        cleared
            .others
            .iter()
            .filter(|bucket| !created.all().contains(bucket))
            .map(|&voucher_id| Clear {
                voucher_id,
                of_sale: Some(lost_sale),
            })
            .collect()
    }
}

impl Call for Clear {
    type Output = Cleared;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &CLEAR,
            vec![
                keys.voucher(),
                keys.buyers(),
                keys.queue(),
                keys.lease(),
                keys.sweep(),
                keys.drawn(),
                keys.all_out(),
                keys.metrics(),
                keys.absent(),
                keys.sync_lease(),
                keys.seen_out(),
            ]
            .into_iter()
            .chain(keys.lines())
            .collect(),
            args![of_sale = self.of_sale.map_or(String::new(), |sale| sale.to_string())],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Cleared, UnexpectedReply> {
        let others = match reply.as_slice() {
            [Reply::Int(_), Reply::Bytes(ids)] => std::str::from_utf8(ids).ok().and_then(parse_ids),
            _ => None,
        };
        match (reply.as_slice(), others) {
            ([Reply::Int(removed), _], Some(others)) => Ok(Cleared {
                removed: *removed,
                others,
            }),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}
