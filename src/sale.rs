//! A voucher's sale state in Redis: admission, settling a reservation, and loading state
//! from MySQL. The rules themselves live in `lua/`; this module names the keys, passes
//! the arguments and reads the replies.
//!
//! All of a voucher's keys share the hash tag `{<voucher id>}`, so they sit in one slot
//! of a Redis Cluster. The order sequence is global; see the README on clusters.

use std::time::Duration;

use spin_sdk::redis::{self, Connection, RedisParameter, RedisResult};

use crate::auth::UserId;
use crate::order_id::{LayoutError, OrderId};
use crate::scripts::{ADMISSION, LOAD, UNLOCK};

/// The prefix of the per-day order sequence keys (`seckill:order-seq:<day>`).
pub const ORDER_SEQUENCE_PREFIX: &str = "seckill:order-seq";

#[derive(Debug, thiserror::Error)]
pub enum SaleError {
    #[error("redis: {0}")]
    Redis(#[from] redis::Error),
    #[error("redis: unexpected reply {0:?}")]
    Reply(Vec<RedisResult>),
    #[error("redis: {0}")]
    Layout(#[from] LayoutError),
}

/// The keys of one voucher's sale state.
pub struct Keys {
    voucher_id: u64,
}

impl Keys {
    pub fn new(voucher_id: u64) -> Keys {
        Keys { voucher_id }
    }

    fn key(&self, name: &str) -> String {
        format!("seckill:{{{}}}:{name}", self.voucher_id)
    }

    /// Hash with `stock`, `begin_ms` and `end_ms`.
    pub fn voucher(&self) -> String {
        self.key("voucher")
    }

    /// Hash from user id to `p:<token>` (reservation in flight) or `o:<order id>`.
    pub fn buyers(&self) -> String {
        self.key("buyers")
    }

    /// Sorted set of the users with a reservation in flight, scored by its expiry.
    pub fn pending(&self) -> String {
        self.key("pending")
    }

    pub fn lock(&self, user: UserId) -> String {
        self.key(&format!("lock:{user}"))
    }

    /// Where a sync stages the buyers read from MySQL before swapping them in.
    fn staged_buyers(&self) -> String {
        self.key("buyers:staged")
    }

    fn for_buyer(&self, user: UserId) -> Vec<String> {
        vec![
            self.voucher(),
            self.buyers(),
            self.pending(),
            self.lock(user),
        ]
    }
}

/// What admission decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// A unit is reserved for the buyer, who holds the lock, and this is the order id.
    Admitted(OrderId),
    /// Redis holds no sale state for this voucher.
    Missing,
    NotStarted,
    Ended,
    SoldOut,
    AlreadyOrdered(OrderId),
    Busy {
        lock_left: Duration,
    },
}

/// How MySQL ended an admitted purchase; see `lua/unlock.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    Ordered(OrderId),
    Duplicate(OrderId),
    SoldOut,
    Undo,
}

/// The sale terms as Redis keeps them.
pub struct Terms {
    pub stock: u64,
    pub begin_ms: i64,
    pub end_ms: i64,
}

pub struct Sale {
    redis: Connection,
}

impl Sale {
    /// Spin opens a new connection per `open`, so a request opens one and reuses it.
    pub fn connect(url: &str) -> Result<Sale, SaleError> {
        Ok(Sale {
            redis: Connection::open(url)?,
        })
    }

    pub fn ping(&self) -> Result<(), SaleError> {
        match self.redis.execute("PING", &[])?.as_slice() {
            [RedisResult::Status(pong)] if pong == "PONG" => Ok(()),
            other => Err(SaleError::Reply(other.to_vec())),
        }
    }

    pub fn admit(
        &self,
        voucher_id: u64,
        user: UserId,
        token: &str,
        ttl_ms: u64,
    ) -> Result<Admission, SaleError> {
        let keys = Keys::new(voucher_id);
        let mut script_keys = keys.for_buyer(user);
        script_keys.push(ORDER_SEQUENCE_PREFIX.to_string());
        let args = vec![
            text(user.to_string()),
            text(token),
            RedisParameter::Int64(ttl_ms as i64),
        ];
        let reply = ADMISSION.run(&self.redis, &script_keys, args)?;
        parse_admission(reply)
    }

    /// Returns whether this token's reservation was still there to settle.
    pub fn settle(
        &self,
        voucher_id: u64,
        user: UserId,
        token: &str,
        settlement: Settlement,
    ) -> Result<bool, SaleError> {
        let (outcome, order_id) = match settlement {
            Settlement::Ordered(id) => ("ordered", id.to_string()),
            Settlement::Duplicate(id) => ("duplicate", id.to_string()),
            Settlement::SoldOut => ("sold_out", String::new()),
            Settlement::Undo => ("undo", String::new()),
        };
        let keys = Keys::new(voucher_id).for_buyer(user);
        let args = vec![
            text(user.to_string()),
            text(token),
            text(outcome),
            text(order_id),
        ];
        match UNLOCK.run(&self.redis, &keys, args)?.as_slice() {
            [RedisResult::Int64(settled)] => Ok(*settled == 1),
            other => Err(SaleError::Reply(other.to_vec())),
        }
    }

    /// Starts a load: forgets buyers staged by an earlier, unfinished load.
    pub fn begin_load(&self, voucher_id: u64) -> Result<(), SaleError> {
        self.redis.del(&[Keys::new(voucher_id).staged_buyers()])?;
        Ok(())
    }

    /// Stages a page of the buyers MySQL holds orders for.
    pub fn stage_buyers(
        &self,
        voucher_id: u64,
        buyers: &[(UserId, OrderId)],
    ) -> Result<(), SaleError> {
        if buyers.is_empty() {
            return Ok(());
        }
        let mut params = vec![text(Keys::new(voucher_id).staged_buyers())];
        for (user, order_id) in buyers {
            params.push(text(user.to_string()));
            params.push(text(format!("o:{order_id}")));
        }
        self.redis.execute("HSET", &params)?;
        Ok(())
    }

    /// Atomically replaces the voucher's sale state with the terms and the staged buyers;
    /// reservations in flight are dropped (MySQL still decides their fate).
    pub fn finish_load(&self, voucher_id: u64, terms: &Terms) -> Result<(), SaleError> {
        let keys = Keys::new(voucher_id);
        let script_keys = vec![
            keys.voucher(),
            keys.buyers(),
            keys.pending(),
            keys.staged_buyers(),
        ];
        let args = vec![
            RedisParameter::Int64(terms.stock as i64),
            RedisParameter::Int64(terms.begin_ms),
            RedisParameter::Int64(terms.end_ms),
        ];
        LOAD.run(&self.redis, &script_keys, args)?;
        Ok(())
    }
}

fn text(value: impl Into<String>) -> RedisParameter {
    RedisParameter::Binary(value.into().into_bytes())
}

fn parse_admission(reply: Vec<RedisResult>) -> Result<Admission, SaleError> {
    let admission = match reply.as_slice() {
        [RedisResult::Binary(tag), rest @ ..] => match (tag.as_slice(), rest) {
            (b"admitted", [RedisResult::Int64(seconds), RedisResult::Int64(sequence)]) => {
                Admission::Admitted(OrderId::compose(*seconds, *sequence)?)
            }
            (b"missing", []) => Admission::Missing,
            (b"not_started", []) => Admission::NotStarted,
            (b"ended", []) => Admission::Ended,
            (b"sold_out", []) => Admission::SoldOut,
            (b"already_ordered", [RedisResult::Binary(id)]) => {
                match std::str::from_utf8(id).ok().and_then(OrderId::parse) {
                    Some(order_id) => Admission::AlreadyOrdered(order_id),
                    None => return Err(SaleError::Reply(reply)),
                }
            }
            (b"busy", [RedisResult::Int64(ms)]) => Admission::Busy {
                lock_left: Duration::from_millis((*ms).max(0) as u64),
            },
            _ => return Err(SaleError::Reply(reply)),
        },
        _ => return Err(SaleError::Reply(reply)),
    };
    Ok(admission)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order_id::EPOCH;

    fn bin(text: &str) -> RedisResult {
        RedisResult::Binary(text.as_bytes().to_vec())
    }

    #[test]
    fn keys_share_the_voucher_hash_tag() {
        let keys = Keys::new(42);
        assert_eq!(keys.voucher(), "seckill:{42}:voucher");
        assert_eq!(keys.buyers(), "seckill:{42}:buyers");
        assert_eq!(keys.pending(), "seckill:{42}:pending");
        assert_eq!(keys.lock(UserId::from_raw(7)), "seckill:{42}:lock:7");
        assert_eq!(keys.staged_buyers(), "seckill:{42}:buyers:staged");
    }

    #[test]
    fn parses_every_admission_reply() {
        let admitted = parse_admission(vec![
            bin("admitted"),
            RedisResult::Int64(EPOCH + 10),
            RedisResult::Int64(3),
        ]);
        assert_eq!(
            admitted.unwrap(),
            Admission::Admitted(OrderId::from_raw((10 << 32) | 3))
        );
        assert_eq!(
            parse_admission(vec![bin("missing")]).unwrap(),
            Admission::Missing
        );
        assert_eq!(
            parse_admission(vec![bin("not_started")]).unwrap(),
            Admission::NotStarted
        );
        assert_eq!(
            parse_admission(vec![bin("ended")]).unwrap(),
            Admission::Ended
        );
        assert_eq!(
            parse_admission(vec![bin("sold_out")]).unwrap(),
            Admission::SoldOut
        );
        assert_eq!(
            parse_admission(vec![bin("already_ordered"), bin("99")]).unwrap(),
            Admission::AlreadyOrdered(OrderId::from_raw(99))
        );
        assert_eq!(
            parse_admission(vec![bin("busy"), RedisResult::Int64(1500)]).unwrap(),
            Admission::Busy {
                lock_left: Duration::from_millis(1500)
            }
        );
    }

    #[test]
    fn refuses_replies_it_does_not_understand() {
        let odd = [
            vec![],
            vec![RedisResult::Nil],
            vec![bin("admitted")],
            vec![
                bin("admitted"),
                RedisResult::Int64(EPOCH),
                RedisResult::Int64(1 << 32),
            ],
            vec![bin("already_ordered"), bin("x")],
            vec![bin("sold_out"), RedisResult::Int64(1)],
            vec![bin("whatever")],
        ];
        for reply in odd {
            assert!(parse_admission(reply.clone()).is_err(), "{reply:?}");
        }
    }
}
