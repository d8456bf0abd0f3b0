//! Group commit: admitted purchases wait in the voucher's Redis queue, and one request at
//! a time (the holder of the voucher's lease, which lapses by itself) writes them to
//! MySQL in batches of one transaction each, then publishes each buyer's outcome. The
//! other admitted requests wait for their own outcome with a blocking pop, and take the
//! lease over when its holder died or stalled. There is no background process in Spin:
//! draining rides on the purchase requests themselves.
//!
//! Each order is committed once: a batch written again (after a lost reply, or by two
//! drainers after a lease lapsed) finds its orders in MySQL and changes nothing, and
//! only the batch at the head of the queue can be published.

use std::time::{Duration, Instant};

use crate::config;
use crate::db::{Committed, Db, Verdict};
use crate::error::ApiError;
use crate::ids::UserId;
use crate::order_id::OrderId;
use crate::request_log;
use crate::sale::{Claim, Entry, News, Next, Sale};

/// How long a queued purchase's request blocks for news before it checks on the
/// drainer (Redis takes fractional BLPOP timeouts from 6.0 on).
const WAIT_SLICE: &str = "0.5";
/// How long a queued purchase's request waits in all before it answers `busy`: the
/// purchase stays queued, and the buyer's next press hears its outcome.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// One voucher's queue, as one request sees it.
pub struct Queue<'a> {
    sale: &'a Sale,
    voucher_id: u64,
    /// Opened by the first batch this request commits, and kept for the next ones.
    db: Option<Db>,
}

impl<'a> Queue<'a> {
    pub fn new(sale: &'a Sale, voucher_id: u64) -> Queue<'a> {
        Queue {
            sale,
            voucher_id,
            db: None,
        }
    }

    /// Drains the queue as the holder of the lease `token`, starting with `batch`, until
    /// `own` (this request's queued purchase) is published, or after one batch when it
    /// has none; the lease then passes to the oldest queued purchase. Returns MySQL's
    /// verdicts on every purchase this request committed.
    pub fn drain(
        &mut self,
        token: &str,
        own: Option<Entry>,
        mut batch: Vec<Entry>,
    ) -> Result<Vec<(Entry, Verdict)>, ApiError> {
        let mut committed = Vec::new();
        loop {
            let orders = batch
                .iter()
                .map(|entry| Ok((entry.ticket.order_id()?, entry.user)))
                .collect::<Result<Vec<(OrderId, UserId)>, ApiError>>()?;
            let Committed {
                verdicts,
                orders: mysql_orders,
            } = self.commit(&orders)?;
            let published: Vec<_> = batch
                .iter()
                .zip(&orders)
                .zip(&verdicts)
                .map(|((entry, (order_id, _)), verdict)| (*entry, *order_id, *verdict))
                .collect();
            // MySQL's verdicts stand even when the publication is refused (the lease
            // lapsed and someone else published the batch) or fails: the batch then
            // stays queued, and the next drainer writes it again to no effect and
            // publishes it.
            committed.extend(batch.iter().copied().zip(verdicts));
            match self
                .sale
                .publish(self.voucher_id, token, own, &published, mysql_orders)
            {
                Ok(Next::Batch(next)) if !next.is_empty() => batch = next,
                Ok(_) => return Ok(committed),
                Err(error) => {
                    request_log::note_cause(format!("publishing a batch failed: {error}"));
                    return Ok(committed);
                }
            }
        }
    }

    /// One transaction for the whole batch; tried again once on a fresh connection,
    /// since a batch written twice is committed once.
    fn commit(&mut self, orders: &[(OrderId, UserId)]) -> Result<Committed, ApiError> {
        if orders.is_empty() {
            return Ok(Committed {
                verdicts: Vec::new(),
                orders: 0,
            });
        }
        let mut last_error = None;
        for _ in 0..2 {
            let db = match self.db.take() {
                Some(db) => db,
                None => match config::mysql_url().and_then(|url| Ok(Db::connect(&url)?)) {
                    Ok(db) => db,
                    Err(error) => {
                        last_error = Some(error);
                        continue;
                    }
                },
            };
            match db.commit_batch(self.voucher_id, orders) {
                Ok(committed) => {
                    self.db = Some(db);
                    return Ok(committed);
                }
                Err(error) => last_error = Some(error.into()),
            }
        }
        Err(last_error.expect("two tries"))
    }

    /// Waits for MySQL's verdict on the queued purchase `own`, draining when the lease
    /// comes to this request.
    pub fn await_verdict(&mut self, own: Entry) -> Result<Verdict, ApiError> {
        let deadline = Instant::now() + MAX_WAIT;
        while Instant::now() < deadline {
            let news = match self.sale.wait(self.voucher_id, own, WAIT_SLICE)? {
                Some(news) => news,
                None => match self.sale.claim(self.voucher_id, own)? {
                    Claim::News(news) => news,
                    Claim::Lead => News::Lead,
                    Claim::Wait => continue,
                    // Redis lost the purchase (a restart): after the admin's sync, her
                    // next press hears whether it was committed before.
                    Claim::Lost => {
                        return Err(ApiError::Unavailable(
                            "the sale state was lost; retry after it is loaded again".into(),
                        ))
                    }
                },
            };
            match news {
                News::Verdict(verdict) => return Ok(verdict),
                News::Lead => {
                    let committed = self.drain(&own.to_string(), Some(own), Vec::new())?;
                    if let Some(verdict) = verdict_of(&committed, own) {
                        return Ok(verdict);
                    }
                }
            }
        }
        Err(ApiError::Busy {
            retry_after_secs: 1,
        })
    }
}

/// MySQL's verdict on `entry` among those a drain committed.
pub fn verdict_of(committed: &[(Entry, Verdict)], entry: Entry) -> Option<Verdict> {
    committed
        .iter()
        .find(|(committed, _)| *committed == entry)
        .map(|(_, verdict)| *verdict)
}
