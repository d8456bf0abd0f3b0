//! Runs `seckill_core::returns` on Spin: the units of cancelled and expired orders back to
//! the live sale, each once (see there).

use seckill_core::returns::{Input, Io, Returns};
use seckill_core::VoucherId;

use crate::db::Db;
use crate::redis::Redis;
use crate::request_log;

/// After a cancellation: applies the voucher's returns Redis has not seen. A failure is
/// logged, not answered: MySQL holds the truth, and the voucher's next sweep applies them.
pub async fn restock(db: &Db, redis: &Redis, voucher_id: VoucherId) {
    if let Err(cause) = run(db, redis, voucher_id, Returns::restock(voucher_id)).await {
        request_log::note_cause(format!(
            "units given back in MySQL, not yet in Redis: {cause}"
        ));
    }
}

/// Expires the voucher's unpaid orders past their deadline and gives their units (and any
/// return not applied yet) back to the sale. Returns the units given back.
pub async fn sweep(db: &Db, redis: &Redis, voucher_id: VoucherId) -> Result<u64, String> {
    run(db, redis, voucher_id, Returns::sweep(voucher_id)).await
}

async fn run(
    db: &Db,
    redis: &Redis,
    voucher_id: VoucherId,
    (mut returns, mut io): (Returns, Io),
) -> Result<u64, String> {
    loop {
        let input = match io {
            Io::Done(given) => return given,
            io => perform(Ok(db), redis, voucher_id, io).await,
        };
        io = returns.resume(input);
    }
}

/// Does one step of a run: on MySQL (`db`, or why the request has no connection), or on
/// Redis.
pub async fn perform(
    db: Result<&Db, String>,
    redis: &Redis,
    voucher_id: VoucherId,
    io: Io,
) -> Input {
    match io {
        Io::ExpireDue { limit } => Input::Expired(db.and_then(|db| {
            db.expire_due(voucher_id, limit)
                .map_err(|error| error.to_string())
        })),
        Io::ReturnsAfter { after, limit } => Input::Returns(db.and_then(|db| {
            db.returns_after(voucher_id, after, limit)
                .map_err(|error| error.to_string())
        })),
        Io::Redis(command) => Input::Redis(
            redis
                .run(&command)
                .await
                .map_err(|error| format!("redis: {error}")),
        ),
        Io::Done(_) => unreachable!("a run that is over asks for nothing"),
    }
}
