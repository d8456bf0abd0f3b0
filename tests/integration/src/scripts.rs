//! The Lua scripts of `lua/` and the stored procedures of `migrations/`, driven exactly as
//! the component drives them (`src/sale.rs`, `src/db.rs`): the same keys, arguments and
//! replies, against whichever Redis the caller connects to.

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, RedisResult, Value};

use crate::backends::{fresh_voucher_id, key, redis, MYSQL_URL};

pub const ADMISSION: &str = include_str!("../../../lua/admission.lua");
pub const UNLOCK: &str = include_str!("../../../lua/unlock.lua");
pub const LOAD: &str = include_str!("../../../lua/load.lua");
pub const STAGE: &str = include_str!("../../../lua/stage.lua");
pub const VIEW: &str = include_str!("../../../lua/view.lua");
/// How long a sync's lease lasts without a page staged (src/sale.rs).
pub const SYNC_LEASE_MS: u64 = 60_000;
pub const SEQUENCE_PREFIX: &str = "seckill:order-seq";
/// A TTL no test outlives.
pub const LONG_TTL: u64 = 60_000;
/// The component's default `max_inflight_purchases` (spin.toml).
pub const MAX_INFLIGHT: u64 = 32;

/// What `lua/admission.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Admitted { seconds: i64, sequence: i64 },
    Missing,
    NotStarted,
    Ended,
    SoldOut,
    AlreadyOrdered(String),
    Busy { lock_left_ms: i64 },
    Throttled,
    Unsettled,
}

impl Admission {
    /// The order id the component composes from an admission (src/order_id.rs).
    pub fn order_id(&self) -> Option<u64> {
        match self {
            Admission::Admitted { seconds, sequence } => {
                Some((((seconds - ORDER_ID_EPOCH) as u64) << 32) | *sequence as u64)
            }
            _ => None,
        }
    }
}

/// Order ids count seconds from here (src/order_id.rs).
pub const ORDER_ID_EPOCH: i64 = 1_704_067_200;

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).unwrap(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// The sale terms a load installs.
pub struct Terms<'a> {
    pub stock: i64,
    pub begin_ms: i64,
    pub end_ms: i64,
    pub initial_stock: i64,
    pub title: &'a str,
    pub description: &'a str,
}

/// One voucher's sale state in a Redis.
#[derive(Clone)]
pub struct Sale {
    pub conn: MultiplexedConnection,
    pub voucher: u64,
}

impl Sale {
    /// A live sale (begun a minute ago, ending in an hour) with `stock` units, on the
    /// shared Redis under a fresh voucher id.
    pub async fn live(stock: i64) -> Sale {
        let sale = Sale {
            conn: redis().await,
            voucher: fresh_voucher_id(),
        };
        let now = sale.now_ms().await;
        sale.load(stock, now - 60_000, now + 3_600_000, &[]).await;
        sale
    }

    /// The same voucher through a connection of its own, as each Spin instance has.
    pub async fn another_connection(&self) -> Sale {
        Sale {
            conn: redis().await,
            voucher: self.voucher,
        }
    }

    pub async fn now_ms(&self) -> i64 {
        let (seconds, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await
            .unwrap();
        seconds * 1000 + micros / 1000
    }

    /// Stages `buyers` as (user, order id) and loads the sale state, as a sync does.
    pub async fn load(&self, stock: i64, begin_ms: i64, end_ms: i64, buyers: &[(u64, &str)]) {
        let token = "load";
        assert!(self.begin_load(token).await.unwrap(), "sync lease taken");
        let staged: Vec<(u64, u64)> = buyers
            .iter()
            .map(|(user, order)| (*user, order.parse().unwrap()))
            .collect();
        assert!(self.stage_buyers(token, &staged).await.unwrap());
        let terms = Terms {
            stock,
            begin_ms,
            end_ms,
            initial_stock: stock,
            title: "voucher",
            description: "",
        };
        let loaded = self.finish_load(token, &terms).await;
        assert!(loaded.unwrap(), "load refused");
    }

    /// `Sale::begin_load`: takes the voucher's sync lease; false if another sync holds it.
    pub async fn begin_load(&self, token: &str) -> RedisResult<bool> {
        let taken: Option<String> = redis::cmd("SET")
            .arg(key(self.voucher, "sync"))
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(SYNC_LEASE_MS)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(taken.is_some())
    }

    /// `Sale::stage_buyers`: one page of (user, order id); false if the lease was lost.
    pub async fn stage_buyers(&self, token: &str, buyers: &[(u64, u64)]) -> RedisResult<bool> {
        let keys = [
            key(self.voucher, "buyers"),
            key(self.voucher, "pending"),
            key(self.voucher, "sync"),
        ];
        let mut args = vec![token.to_string(), SYNC_LEASE_MS.to_string()];
        for (user, order) in buyers {
            args.push(user.to_string());
            args.push(format!("o:{order}"));
        }
        let staged: i64 = self.run(STAGE, &keys, &args).await?;
        Ok(staged == 1)
    }

    /// `Sale::finish_load` (`token` "" for a creation); false if refused.
    pub async fn finish_load(&self, token: &str, terms: &Terms<'_>) -> RedisResult<bool> {
        let keys = [key(self.voucher, "voucher"), key(self.voucher, "sync")];
        let args = [
            terms.stock.to_string(),
            terms.begin_ms.to_string(),
            terms.end_ms.to_string(),
            terms.initial_stock.to_string(),
            terms.title.to_string(),
            terms.description.to_string(),
            token.to_string(),
        ];
        let loaded: i64 = self.run(LOAD, &keys, &args).await?;
        Ok(loaded == 1)
    }

    pub async fn run<T: redis::FromRedisValue>(
        &self,
        source: &str,
        keys: &[String],
        args: &[String],
    ) -> RedisResult<T> {
        let script = redis::Script::new(source);
        let mut invocation = script.prepare_invoke();
        for k in keys {
            invocation.key(k);
        }
        for a in args {
            invocation.arg(a);
        }
        invocation.invoke_async(&mut self.conn.clone()).await
    }

    fn keys(&self, user: u64) -> [String; 4] {
        [
            key(self.voucher, "voucher"),
            key(self.voucher, "buyers"),
            key(self.voucher, "pending"),
            key(self.voucher, &format!("lock:{user}")),
        ]
    }

    /// `Sale::admit` with the default limit; an error is a script error.
    pub async fn try_admit(&self, user: u64, token: &str, ttl_ms: u64) -> RedisResult<Admission> {
        self.try_admit_limited(user, token, ttl_ms, MAX_INFLIGHT)
            .await
    }

    /// `Sale::admit` with `max_inflight` reservations in flight at most.
    pub async fn try_admit_limited(
        &self,
        user: u64,
        token: &str,
        ttl_ms: u64,
        max_inflight: u64,
    ) -> RedisResult<Admission> {
        let mut keys = self.keys(user).to_vec();
        keys.push(SEQUENCE_PREFIX.to_string());
        let args = [
            user.to_string(),
            token.to_string(),
            ttl_ms.to_string(),
            max_inflight.to_string(),
        ];
        let reply: Vec<Value> = self.run(ADMISSION, &keys, &args).await?;
        Ok(match (text(&reply[0]).as_str(), &reply[1..]) {
            ("admitted", [seconds, sequence]) => Admission::Admitted {
                seconds: int(seconds),
                sequence: int(sequence),
            },
            ("missing", []) => Admission::Missing,
            ("not_started", []) => Admission::NotStarted,
            ("ended", []) => Admission::Ended,
            ("sold_out", []) => Admission::SoldOut,
            ("already_ordered", [id]) => Admission::AlreadyOrdered(text(id)),
            ("busy", [ms]) => Admission::Busy {
                lock_left_ms: int(ms),
            },
            ("throttled", []) => Admission::Throttled,
            ("unsettled", []) => Admission::Unsettled,
            (tag, rest) => panic!("unexpected reply {tag} {rest:?}"),
        })
    }

    pub async fn admit(&self, user: u64, token: &str, ttl_ms: u64) -> Admission {
        self.try_admit(user, token, ttl_ms).await.unwrap()
    }

    /// `Sale::settle`: `outcome` is `ordered`, `duplicate`, `sold_out` or `undo`.
    pub async fn try_unlock(
        &self,
        user: u64,
        token: &str,
        outcome: &str,
        order_id: &str,
    ) -> RedisResult<bool> {
        let args = [
            user.to_string(),
            token.to_string(),
            outcome.to_string(),
            order_id.to_string(),
        ];
        let settled: i64 = self.run(UNLOCK, &self.keys(user), &args).await?;
        Ok(settled == 1)
    }

    pub async fn unlock(&self, user: u64, token: &str, outcome: &str, order_id: &str) -> bool {
        self.try_unlock(user, token, outcome, order_id)
            .await
            .unwrap()
    }

    pub async fn stock(&self) -> Option<i64> {
        self.conn
            .clone()
            .hget(key(self.voucher, "voucher"), "stock")
            .await
            .unwrap()
    }

    pub async fn record(&self, user: u64) -> Option<String> {
        self.conn
            .clone()
            .hget(key(self.voucher, "buyers"), user.to_string())
            .await
            .unwrap()
    }

    pub async fn records(&self) -> Vec<(u64, String)> {
        self.conn
            .clone()
            .hgetall(key(self.voucher, "buyers"))
            .await
            .unwrap()
    }

    pub async fn pending(&self) -> Vec<String> {
        self.conn
            .clone()
            .zrange(key(self.voucher, "pending"), 0, -1)
            .await
            .unwrap()
    }

    pub async fn lock(&self, user: u64) -> Option<String> {
        self.conn
            .clone()
            .get(key(self.voucher, &format!("lock:{user}")))
            .await
            .unwrap()
    }

    /// As if the voucher's sync lease had outlived its TTL.
    pub async fn expire_sync_lease(&self) {
        self.lose(&["sync"]).await;
    }

    /// Deletes some of the voucher's keys (`voucher`, `lock:7`, ...), as Redis losing them.
    pub async fn lose(&self, names: &[&str]) {
        let keys: Vec<String> = names.iter().map(|name| key(self.voucher, name)).collect();
        let _: () = self.conn.clone().del(keys).await.unwrap();
    }

    /// As if `user`'s lock and reservation had outlived their TTL.
    pub async fn expire(&self, user: u64) {
        let mut conn = self.conn.clone();
        let _: () = conn
            .del(key(self.voucher, &format!("lock:{user}")))
            .await
            .unwrap();
        let _: () = redis::cmd("ZADD")
            .arg(key(self.voucher, "pending"))
            .arg("XX")
            .arg(0)
            .arg(user)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// A connection of its own to the shared MariaDB. While the server turns connections away
/// (`max_connections`, other suites on the machine at their peak), it waits and tries
/// again for up to ten seconds: that is the machine's load, not what a test checks.
pub async fn connect() -> Result<mysql_async::Conn, mysql_async::Error> {
    let mut tries = 0;
    loop {
        match mysql_async::Conn::from_url(MYSQL_URL).await {
            Err(mysql_async::Error::Server(error)) if error.code == 1040 && tries < 100 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            result => return result,
        }
    }
}

/// `seckill_create_voucher` with a window given in seconds from now; returns the id.
pub async fn create_voucher(stock: u32, begin_in: i64, end_in: i64) -> u64 {
    use mysql_async::prelude::Queryable;
    let at = |offset: i64| {
        (chrono::Utc::now() + chrono::Duration::seconds(offset))
            .format("%Y-%m-%d %H:%M:%S")
            .to_string()
    };
    let mut conn = connect().await.unwrap();
    let id: Option<u64> = conn
        .exec_first(
            "CALL seckill_create_voucher(?, ?, ?, ?, ?)",
            ("sql test", "", stock, at(begin_in), at(end_in)),
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    id.unwrap()
}

/// `seckill_purchase` on a connection of its own, as each Spin request opens its own:
/// the outcome row, or the error the component would see.
pub async fn purchase(
    order_id: u64,
    user_id: u64,
    voucher_id: u64,
) -> Result<(String, Option<u64>), mysql_async::Error> {
    use mysql_async::prelude::Queryable;
    let mut conn = connect().await?;
    let row: Option<mysql_async::Row> = conn
        .exec_first(
            "CALL seckill_purchase(?, ?, ?)",
            (order_id, user_id, voucher_id),
        )
        .await?;
    conn.disconnect().await?;
    Ok(mysql_async::from_row(row.expect("an outcome row")))
}
