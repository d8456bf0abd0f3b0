//! Settles run in their slot's turn (`seckill_core::sale::TakeTurn` says why): the turn
//! is waited for in Redis, held while MySQL settles, and handed on at once.

use std::future::Future;
use std::time::{Duration, Instant};

use seckill_core::sale::{AwaitTurn, EndTurn, TakeTurn};
use seckill_core::OrderId;

use crate::request_log;
use crate::storage::redis::{Redis, RedisError};

/// Longest wait for a turn: a slot's settles then go on without one, which MySQL keeps
/// whole as ever (only a Galera cluster's writers may meet again).
const MOST_WAIT: Duration = Duration::from_secs(10);

/// Runs `settle` in `order_id`'s turn, or without one when Redis is unavailable (`None`,
/// or failing) or the turn did not come in [`MOST_WAIT`].
pub async fn in_turn<T>(
    redis: Option<&Redis>,
    order_id: OrderId,
    settle: impl Future<Output = T>,
) -> T {
    let Some(redis) = redis else {
        return settle.await;
    };
    let token = uuid::Uuid::new_v4().simple().to_string();
    let taken = take(redis, order_id, &token).await;
    let settled = settle.await;
    if taken {
        if let Err(error) = redis
            .call(&EndTurn {
                order_id,
                token: &token,
            })
            .await
        {
            request_log::note_cause(format!("the turn at settling lapses instead: {error}"));
        }
    }
    settled
}

/// Waits for the turn, looking again at each wake-up: whether it was taken.
async fn take(redis: &Redis, order_id: OrderId, token: &str) -> bool {
    let deadline = Instant::now() + MOST_WAIT;
    let waited = async {
        while !redis.call(&TakeTurn { order_id, token }).await? {
            if Instant::now() > deadline {
                return Ok(false);
            }
            redis.call(&AwaitTurn { order_id }).await?;
        }
        Ok(true)
    };
    match waited.await {
        Ok(true) => true,
        Ok(false) => {
            request_log::note_cause("settled without a turn: none came in 10 s");
            false
        }
        Err::<_, RedisError>(error) => {
            request_log::note_cause(format!("settled without a turn: {error}"));
            false
        }
    }
}
