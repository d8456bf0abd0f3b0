//! Runs `seckill_core::returns` on Spin: the units of cancelled and expired orders back to
//! the live sale, each once (see there), and the sweeps of expired orders that reads run
//! when nobody presses.

use std::time::{Duration, Instant};

use seckill_core::drive;
use seckill_core::returns::{Io, Returns};
use seckill_core::sale::{AwaitSweep, Probe, TakeProbe, TakeSweep, SWEEP_MS};
use seckill_core::{BackendError, BucketId};

use crate::error::Failure;
use crate::request_log;
use crate::storage::connections::{Connections, Port};
use crate::storage::db::Db;
use crate::storage::redis::Redis;

/// Orders a read of the feed expires at most (one read a second), in one MySQL
/// transaction: of the longest overdue of every sale, so that a backlog drains oldest
/// first whatever falls due after it, and of the most recently overdue, so that an order
/// just past its deadline expires at once behind a backlog.
const OLDEST_EXPIRED_PER_READ: u32 = 256;
/// See [`OLDEST_EXPIRED_PER_READ`].
const NEWEST_EXPIRED_PER_READ: u32 = 64;
/// How long a read of the feed goes on expiring and giving those units to the sales in
/// Redis: its reader waits, and many sales (or a loaded host) must not make a page slow.
const SWEEPING_PER_READ: Duration = Duration::from_millis(500);
/// Longest wait of the admin's sweep for one under way: the lease of a sweep whose
/// request died lapses within it.
const MOST_SWEEP_WAIT: Duration = Duration::from_millis(SWEEP_MS as u64 + 1_000);

/// After a cancellation: applies the voucher's returns Redis has not seen. A failure is
/// logged, not answered: MySQL holds the truth, and the voucher's next sweep applies them.
pub async fn restock(db: &Db, redis: &Redis, voucher_id: BucketId) {
    if let Err(cause) = give_back(db, redis, voucher_id).await {
        request_log::note_cause(format!(
            "units given back in MySQL, not yet in Redis: {cause}"
        ));
    }
}

/// Applies the voucher's returns and restocks Redis has not seen; returns how many.
pub async fn give_back(db: &Db, redis: &Redis, voucher_id: BucketId) -> Result<u64, BackendError> {
    run(db, redis, voucher_id, Returns::restock(voucher_id)).await
}

/// Expires the voucher's unpaid orders past their deadline and gives their units (and any
/// return not applied yet) back to the sale, under the sweep lease the caller took.
/// Returns the units given back.
pub async fn sweep(db: &Db, redis: &Redis, voucher_id: BucketId) -> Result<u64, BackendError> {
    run(db, redis, voucher_id, Returns::sweep(voucher_id)).await
}

/// [`sweep`] for `POST /vouchers/{id}/expire`, taking the sweep lease first as every
/// sweep does (a press that finds it taken waits for the sweep's end): a sweep under way
/// is waited for, by its wake-up (`end_sweep.lua`) or its lease lapsing.
pub async fn sweep_in_turn(
    db: &Db,
    redis: &Redis,
    voucher_id: BucketId,
) -> Result<u64, BackendError> {
    let deadline = Instant::now() + MOST_SWEEP_WAIT;
    while !redis.call(&TakeSweep { voucher_id }).await? {
        if Instant::now() > deadline {
            return Err(BackendError::Redis(format!(
                "the sweep lease of voucher {voucher_id} stayed taken"
            )));
        }
        redis.call(&AwaitSweep { voucher_id }).await?;
    }
    sweep(db, redis, voucher_id).await
}

/// For a read that found an order past its deadline, or a page read whose turn it is to
/// audit this bucket of its sale: sweeps the voucher unless another request is sweeping
/// it, so that the order expires, its event reaches the feed and its unit the sale, and
/// MySQL is audited, with nobody pressing. A failure is logged: the read's answer stands
/// (it shows the order expired either way), and the next read or press sweeps.
pub async fn sweep_unless_busy(db: &Db, redis: &Redis, voucher_id: BucketId) {
    sweep_if_free(db, redis, voucher_id, Returns::sweep(voucher_id)).await;
}

/// Runs `run` unless another request is sweeping the voucher (whose sweep wakes the
/// presses waiting for it). A failure is logged.
async fn sweep_if_free(db: &Db, redis: &Redis, voucher_id: BucketId, run: (Returns, Io)) {
    let swept = match redis.call(&TakeSweep { voucher_id }).await {
        Ok(false) => return,
        Ok(true) => self::run(db, redis, voucher_id, run).await.map(drop),
        Err(error) => Err(error.into()),
    };
    if let Err(cause) = swept {
        request_log::note_cause(format!("sweeping voucher {voucher_id}: {cause}"));
    }
}

/// For a read of the feed, one a second at most (`Probe::OverdueSweeps`): expires the
/// overdue orders of every sale in MySQL (`Db::expire_overdue`), the longest overdue and
/// the most recently overdue, so that the feed says `order.expired` of each within a bound
/// set by the orders due before it alone, however many fall due after it and whatever the
/// sales' sweeps are doing; then sweeps those sales whose sweep lease is free (the newest
/// first), for what is left of half a second, to give their units to Redis now. A sale
/// whose lease another request holds (a sweep under way on another host, or one that
/// died) has them from that sweep, or from its next (its deadline to sweep has passed),
/// as after a cancellation. A failure is logged: the page is served all the same.
pub async fn sweep_all_overdue(connections: &Connections) {
    let swept = async {
        let db = connections.mysql().await?;
        let redis = connections.redis().await?;
        let probe = TakeProbe {
            probe: Probe::OverdueSweeps,
        };
        if redis.call(&probe).await? {
            let started = Instant::now();
            let expired = db
                .expire_overdue(OLDEST_EXPIRED_PER_READ, NEWEST_EXPIRED_PER_READ)
                .await?;
            for voucher_id in expired {
                if started.elapsed() >= SWEEPING_PER_READ {
                    break;
                }
                // Expiries alone: the presses and page reads of each sale audit it.
                sweep_if_free(db, redis, voucher_id, Returns::expiries(voucher_id)).await;
            }
        }
        Ok::<(), Failure>(())
    };
    if let Err(cause) = swept.await {
        request_log::note_cause(format!("expiring overdue orders: {cause}"));
    }
}

async fn run(
    db: &Db,
    redis: &Redis,
    voucher_id: BucketId,
    (mut returns, io): (Returns, Io),
) -> Result<u64, BackendError> {
    let mut port = Port::with(redis, db);
    let given = drive::give_back(&mut port, voucher_id, &mut returns, io).await;
    if let Some(report) = returns.report() {
        request_log::note_cause(report);
    }
    given
}
