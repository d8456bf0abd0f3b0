//! Units of cancelled and expired orders back to the live sale. MySQL gives each back to
//! its stock, with an event, in the transaction that cancels or expires its order; this
//! hands the events the sale has not applied yet to `lua/restock.lua`, which applies each
//! once (by event id), so a request that dies halfway leaves the rest to the next one.

use seckill_core::sale::{ReadMark, Restock};
use seckill_core::VoucherId;

use crate::db::Db;
use crate::redis::Redis;
use crate::request_log;

/// Orders expired, and returns read from MySQL, per round trip.
const PAGE: u32 = 256;

/// After a cancellation or a payment that found its order expired: applies the voucher's
/// returns Redis has not seen. A failure is logged, not answered: MySQL holds the truth,
/// and the voucher's next sweep applies them.
pub fn restock(db: &Db, redis: &Redis, voucher_id: VoucherId) {
    if let Err(cause) = give_back(db, redis, voucher_id, None) {
        request_log::note_cause(format!(
            "units given back in MySQL, not yet in Redis: {cause}"
        ));
    }
}

/// Expires the voucher's unpaid orders past their deadline, gives their units (and any
/// return not applied yet) back to the sale, and says when the next sweep is due; the
/// caller holds the voucher's sweep lease, which this ends. Returns the units given back.
pub fn sweep(db: &Db, redis: &Redis, voucher_id: VoucherId) -> Result<u64, String> {
    let next_due = loop {
        let (expired, next) = db.expire_due(voucher_id, PAGE).map_err(|e| e.to_string())?;
        if expired < PAGE as usize {
            break next;
        }
    };
    give_back(db, redis, voucher_id, Some(next_due.map(|s| s * 1000)))
}

fn give_back(
    db: &Db,
    redis: &Redis,
    voucher_id: VoucherId,
    swept: Option<Option<i64>>,
) -> Result<u64, String> {
    let mut given = 0;
    loop {
        let mark = redis
            .call(&ReadMark { voucher_id })
            .map_err(|e| e.to_string())?;
        let returns = db
            .returns_after(voucher_id, mark, PAGE)
            .map_err(|e| e.to_string())?;
        let last = returns.len() < PAGE as usize;
        let restock = Restock {
            voucher_id,
            returns: &returns,
            swept: if last { swept } else { None },
        };
        match redis.call(&restock).map_err(|e| e.to_string())? {
            Some(now) if !last => given += now,
            Some(now) => return Ok(given + now),
            None => return Ok(given),
        }
    }
}
