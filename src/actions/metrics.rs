//! Every listed sale's figures, read from Redis at scrape time.

use seckill_core::sale::{Figures, Members, ReadFigures, Unlist, VOUCHERS};
use seckill_core::BucketId;

use crate::error::Failure;
use crate::storage::connections::Connections;

/// The figures of each voucher Redis lists; one whose sale Redis no longer holds, or that
/// ended long ago, is unlisted instead, so that a scrape stays small.
pub async fn figures(connections: &Connections) -> Result<Vec<(BucketId, Figures)>, Failure> {
    let redis = connections.redis().await?;
    let mut vouchers = Vec::new();
    for voucher_id in redis.call(&Members { set: VOUCHERS }).await? {
        match redis.call(&ReadFigures { voucher_id }).await? {
            Some(figures) => vouchers.push((voucher_id, figures)),
            None => redis.call(&Unlist { voucher_id }).await?,
        }
    }
    Ok(vouchers)
}
