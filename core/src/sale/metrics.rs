//! `lua/metrics.lua`: the sale's figures for `GET /metrics` (what no script saw is counted
//! by [`super::Count`]).

use crate::ids::BucketId;
use crate::redis::{args, Command, Reply, UnexpectedReply, METRICS};

use super::{Call, Keys, REPORTED_AFTER_END_MS};

/// A voucher's figures as `lua/metrics.lua` reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub units_left: i64,
    pub units_initial: i64,
    pub queued: i64,
    /// The orders Redis learnt of, whatever became of them.
    pub orders: i64,
    /// Redis was found behind MySQL: the sale waits for a sync.
    pub stale: bool,
    /// The orders MySQL lacks (a failover lost them), while the sale heals them.
    pub mysql_missing: i64,
    /// How many wait in the sale's line.
    pub in_line: i64,
    /// The counters by name (`purchase:<outcome>`, `commit:<outcome>`,
    /// `batch:le:<bound>`, `batch:count`, `batch:sum`); one never counted is absent.
    pub counters: Vec<(String, i64)>,
}

impl Figures {
    pub fn counter(&self, name: &str) -> i64 {
        self.counters
            .iter()
            .find(|(counter, _)| counter == name)
            .map_or(0, |(_, count)| *count)
    }
}

/// One voucher's figures, read at one instant; `None` when Redis no longer holds the
/// sale or it ended more than [`REPORTED_AFTER_END_MS`] ago.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadFigures {
    pub voucher_id: BucketId,
}

impl Call for ReadFigures {
    type Output = Option<Figures>;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &METRICS,
            vec![keys.voucher(), keys.queue(), keys.metrics()]
                .into_iter()
                .chain(keys.lines())
                .collect(),
            args![reported_ms = REPORTED_AFTER_END_MS],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Option<Figures>, UnexpectedReply> {
        if reply.is_empty() {
            return Ok(None);
        }
        let figures = (|| {
            let [Reply::Int(units_left), Reply::Int(units_initial), Reply::Int(queued), Reply::Int(orders), Reply::Int(stale), Reply::Int(mysql_missing), Reply::Int(in_line), counters @ ..] =
                reply.as_slice()
            else {
                return None;
            };
            if counters.len() % 2 != 0 {
                return None;
            }
            let counters = counters
                .chunks(2)
                .map(|pair| match pair {
                    [Reply::Bytes(name), Reply::Bytes(count)] => Some((
                        String::from_utf8(name.clone()).ok()?,
                        std::str::from_utf8(count).ok()?.parse().ok()?,
                    )),
                    _ => None,
                })
                .collect::<Option<_>>()?;
            Some(Figures {
                units_left: *units_left,
                units_initial: *units_initial,
                queued: *queued,
                orders: *orders,
                stale: *stale == 1,
                mysql_missing: *mysql_missing,
                in_line: *in_line,
                counters,
            })
        })();
        figures.map(Some).ok_or(UnexpectedReply(reply))
    }
}
