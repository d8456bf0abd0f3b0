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
use crate::scripts::{ADMISSION, LOAD, STAGE, UNLOCK, VIEW};

/// The prefix of the per-day order sequence keys (`seckill:order-seq:<day>`).
pub const ORDER_SEQUENCE_PREFIX: &str = "seckill:order-seq";

/// How long a sync holds the voucher's sync lease after its last page: a sync that died
/// blocks the next one no longer than this.
const SYNC_LEASE_MS: i64 = 60_000;

#[derive(Debug, thiserror::Error)]
pub enum SaleError {
    #[error("redis: {0}")]
    Redis(#[from] redis::Error),
    #[error("redis: unexpected reply {0:?}")]
    Reply(Vec<RedisResult>),
    #[error("redis: {0}")]
    Layout(#[from] LayoutError),
    /// Another sync of the voucher holds the lease.
    #[error("another sync of this voucher is in progress")]
    SyncInProgress,
    /// The sync lost its lease (another sync took over, or Redis restarted); the terms
    /// were not installed.
    #[error("the sync was interrupted")]
    SyncLost,
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

    /// The voucher's sync lease: the token of the one sync allowed to run.
    fn sync_lease(&self) -> String {
        self.key("sync")
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
    /// Too many purchases of this voucher are in flight; nothing was reserved.
    Throttled,
    /// No unit left, and the buyer's earlier reservation was given up without MySQL's
    /// answer: only MySQL knows whether she has an order.
    Unsettled,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    pub stock: u64,
    pub begin_ms: i64,
    pub end_ms: i64,
    pub initial_stock: u64,
    pub title: String,
    pub description: String,
}

/// A voucher's terms as Redis holds them, and Redis's clock when they were read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub terms: Terms,
    pub now_ms: i64,
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

    /// `max_inflight`: most reservations of the voucher in flight at once.
    pub fn admit(
        &self,
        voucher_id: u64,
        user: UserId,
        token: &str,
        ttl_ms: u64,
        max_inflight: u64,
    ) -> Result<Admission, SaleError> {
        let keys = Keys::new(voucher_id);
        let mut script_keys = keys.for_buyer(user);
        script_keys.push(ORDER_SEQUENCE_PREFIX.to_string());
        let args = vec![
            text(user.to_string()),
            text(token),
            RedisParameter::Int64(ttl_ms as i64),
            RedisParameter::Int64(max_inflight as i64),
        ];
        let reply = ADMISSION.run(&self.redis, &script_keys, args)?;
        parse_admission(reply)
    }

    /// Records the order MySQL holds for a buyer Redis had as unsettled.
    pub fn record_order(
        &self,
        voucher_id: u64,
        user: UserId,
        order_id: OrderId,
    ) -> Result<(), SaleError> {
        self.settle(voucher_id, user, "", Settlement::Duplicate(order_id))
            .map(|_| ())
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

    /// Starts a sync: takes the voucher's sync lease for `token`.
    pub fn begin_load(&self, voucher_id: u64, token: &str) -> Result<(), SaleError> {
        let params = [
            text(Keys::new(voucher_id).sync_lease()),
            text(token),
            text("NX"),
            text("PX"),
            RedisParameter::Int64(SYNC_LEASE_MS),
        ];
        match self.redis.execute("SET", &params)?.as_slice() {
            [RedisResult::Status(ok)] if ok == "OK" => Ok(()),
            [RedisResult::Nil] => Err(SaleError::SyncInProgress),
            other => Err(SaleError::Reply(other.to_vec())),
        }
    }

    /// Merges a page of the buyers MySQL holds orders for, and extends the lease.
    pub fn stage_buyers(
        &self,
        voucher_id: u64,
        token: &str,
        buyers: &[(UserId, OrderId)],
    ) -> Result<(), SaleError> {
        let keys = Keys::new(voucher_id);
        let script_keys = [keys.buyers(), keys.pending(), keys.sync_lease()];
        let mut args = vec![text(token), RedisParameter::Int64(SYNC_LEASE_MS)];
        for (user, order_id) in buyers {
            args.push(text(user.to_string()));
            args.push(text(format!("o:{order_id}")));
        }
        expect_done(STAGE.run(&self.redis, &script_keys, args)?)
    }

    /// Installs a voucher just created: no buyers, no sync lease involved.
    pub fn load_new(&self, voucher_id: u64, terms: &Terms) -> Result<(), SaleError> {
        self.finish_load(voucher_id, "", terms)
    }

    /// Installs the terms at the end of the sync holding `token` (buyers and reservations
    /// in flight stay as they are), and ends its lease.
    pub fn finish_load(
        &self,
        voucher_id: u64,
        token: &str,
        terms: &Terms,
    ) -> Result<(), SaleError> {
        let keys = Keys::new(voucher_id);
        let script_keys = [keys.voucher(), keys.sync_lease()];
        let args = vec![
            RedisParameter::Int64(terms.stock as i64),
            RedisParameter::Int64(terms.begin_ms),
            RedisParameter::Int64(terms.end_ms),
            RedisParameter::Int64(terms.initial_stock as i64),
            text(terms.title.as_str()),
            text(terms.description.as_str()),
            text(token),
        ];
        expect_done(LOAD.run(&self.redis, &script_keys, args)?)
    }

    /// Removes a voucher's sale state: undoes the load of a creation that failed.
    pub fn forget(&self, voucher_id: u64) -> Result<(), SaleError> {
        let keys = Keys::new(voucher_id);
        self.redis
            .del(&[keys.voucher(), keys.buyers(), keys.pending()])?;
        Ok(())
    }

    /// The voucher as Redis holds it, with Redis's clock; `None` when Redis has no
    /// complete state for it.
    pub fn view(&self, voucher_id: u64) -> Result<Option<View>, SaleError> {
        let keys = [Keys::new(voucher_id).voucher()];
        let reply = VIEW.run(&self.redis, &keys, Vec::new())?;
        parse_view(reply)
    }
}

/// Stage and load answer 1 when done and 0 when the sync lost its lease.
fn expect_done(reply: Vec<RedisResult>) -> Result<(), SaleError> {
    match reply.as_slice() {
        [RedisResult::Int64(1)] => Ok(()),
        [RedisResult::Int64(0)] => Err(SaleError::SyncLost),
        other => Err(SaleError::Reply(other.to_vec())),
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
            (b"throttled", []) => Admission::Throttled,
            (b"unsettled", []) => Admission::Unsettled,
            _ => return Err(SaleError::Reply(reply)),
        },
        _ => return Err(SaleError::Reply(reply)),
    };
    Ok(admission)
}

fn parse_view(reply: Vec<RedisResult>) -> Result<Option<View>, SaleError> {
    let number = |value: &RedisResult| match value {
        RedisResult::Binary(bytes) => std::str::from_utf8(bytes).ok()?.parse::<i64>().ok(),
        RedisResult::Int64(n) => Some(*n),
        _ => None,
    };
    let string = |value: &RedisResult| match value {
        RedisResult::Binary(bytes) => String::from_utf8(bytes.clone()).ok(),
        _ => None,
    };
    let view = match reply.as_slice() {
        [] => return Ok(None),
        [stock, begin, end, initial, title, description, now] => (|| {
            Some(View {
                terms: Terms {
                    stock: number(stock)?.max(0) as u64,
                    begin_ms: number(begin)?,
                    end_ms: number(end)?,
                    initial_stock: u64::try_from(number(initial)?).ok()?,
                    title: string(title)?,
                    description: string(description)?,
                },
                now_ms: number(now)?,
            })
        })(),
        _ => None,
    };
    view.map(Some).ok_or(SaleError::Reply(reply))
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
        assert_eq!(keys.sync_lease(), "seckill:{42}:sync");
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
        let cases = [
            (vec![bin("missing")], Admission::Missing),
            (vec![bin("not_started")], Admission::NotStarted),
            (vec![bin("ended")], Admission::Ended),
            (vec![bin("sold_out")], Admission::SoldOut),
            (
                vec![bin("already_ordered"), bin("99")],
                Admission::AlreadyOrdered(OrderId::from_raw(99)),
            ),
            (
                vec![bin("busy"), RedisResult::Int64(1500)],
                Admission::Busy {
                    lock_left: Duration::from_millis(1500),
                },
            ),
            (vec![bin("throttled")], Admission::Throttled),
            (vec![bin("unsettled")], Admission::Unsettled),
        ];
        for (reply, admission) in cases {
            assert_eq!(parse_admission(reply).unwrap(), admission);
        }
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

    #[test]
    fn reads_a_view_or_its_absence() {
        let reply = vec![
            bin("7"),
            bin("1000"),
            bin("2000"),
            bin("10"),
            bin("券"),
            bin(""),
            RedisResult::Int64(1500),
        ];
        let view = parse_view(reply).unwrap().unwrap();
        assert_eq!(
            (view.terms.stock, view.terms.initial_stock, view.now_ms),
            (7, 10, 1500)
        );
        assert_eq!(view.terms.title, "券");
        assert_eq!(parse_view(vec![]).unwrap(), None);
        assert!(parse_view(vec![bin("7")]).is_err());
    }
}
