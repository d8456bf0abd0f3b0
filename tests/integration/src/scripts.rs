//! The Lua scripts of `lua/` and the stored procedures of `migrations/`, driven exactly as
//! the component drives them (`src/sale.rs`, `src/db.rs`): the same keys, arguments and
//! replies, against whichever Redis the caller connects to.

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, RedisResult, Value};

use crate::backends::{fresh_voucher_id, key, redis, MYSQL_URL};

pub const ADMISSION: &str = include_str!("../../../lua/admission.lua");
pub const PUBLISH: &str = include_str!("../../../lua/publish.lua");
pub const CLAIM: &str = include_str!("../../../lua/claim.lua");
pub const LOAD: &str = include_str!("../../../lua/load.lua");
pub const STAGE: &str = include_str!("../../../lua/stage.lua");
pub const VIEW: &str = include_str!("../../../lua/view.lua");
pub const METRICS: &str = include_str!("../../../lua/metrics.lua");
/// How long a sync's lease lasts without a page staged (src/sale.rs).
pub const SYNC_LEASE_MS: u64 = 60_000;
pub const SEQUENCE_PREFIX: &str = "seckill:order-seq";
/// The set of vouchers `GET /metrics` reports on, and of those found behind MySQL
/// (src/sale.rs).
pub const VOUCHERS: &str = "seckill:vouchers";
pub const STALE: &str = "seckill:stale";
/// The drainer's lease, the batch size and the queue's safety limit (src/sale.rs).
pub const LEASE_MS: i64 = 2_000;
pub const HANDOVER_MS: i64 = 500;
pub const BATCH: i64 = 256;
pub const MAX_QUEUED: i64 = 512;
/// How long a sale's keys outlive its end (src/sale.rs).
pub const KEPT_AFTER_END_MS: i64 = 7 * 24 * 3_600_000;
/// Order ids count seconds from here (src/order_id.rs).
pub const ORDER_ID_EPOCH: i64 = 1_704_067_200;

/// The order id of a ticket `<unix seconds>:<sequence>` (src/sale.rs, src/order_id.rs).
pub fn order_id_of(ticket: &str) -> u64 {
    let (seconds, sequence) = ticket.split_once(':').expect("a ticket");
    let seconds: i64 = seconds.parse().unwrap();
    let sequence: u64 = sequence.parse().unwrap();
    (((seconds - ORDER_ID_EPOCH) as u64) << 32) | sequence
}

/// A queue entry `<user>:<ticket>`, split.
pub fn split_entry(entry: &str) -> (u64, String) {
    let (user, ticket) = entry.split_once(':').expect("a queue entry");
    (user.parse().unwrap(), ticket.to_string())
}

/// What `lua/admission.lua` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Admitted with this ticket.
    Admitted(String),
    /// Her earlier purchase is queued with this ticket.
    Queued(String),
    AlreadyOrdered(String),
    SoldOut,
    Ended,
    NotStarted,
    Missing,
    Unknown,
    Throttled,
}

/// An admission's whole reply: the decision, and the lease with the first batch when the
/// request was handed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub decision: Decision,
    pub lease: Option<(String, Vec<String>)>,
}

impl Admission {
    /// The ticket of an admitted purchase.
    pub fn ticket(&self) -> Option<&str> {
        match &self.decision {
            Decision::Admitted(ticket) => Some(ticket),
            _ => None,
        }
    }
}

/// What `lua/publish.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Done,
    Lost,
    Next(Vec<String>),
}

/// What `lua/claim.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// `<outcome>:<order id>` or `lead`, from the outcome list.
    Outcome(String),
    Lead,
    Wait,
    Lost,
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).unwrap(),
        Value::SimpleString(text) => text.clone(),
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
            key(self.voucher, "sync"),
            key(self.voucher, "voucher"),
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
        let keys = [
            key(self.voucher, "voucher"),
            key(self.voucher, "sync"),
            key(self.voucher, "absent"),
            VOUCHERS.to_string(),
            STALE.to_string(),
            key(self.voucher, "buyers"),
            key(self.voucher, "metrics"),
        ];
        let args = [
            terms.stock.to_string(),
            terms.begin_ms.to_string(),
            terms.end_ms.to_string(),
            terms.initial_stock.to_string(),
            terms.title.to_string(),
            terms.description.to_string(),
            token.to_string(),
            self.voucher.to_string(),
            KEPT_AFTER_END_MS.to_string(),
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

    /// `Sale::admit` as the component calls it; an error is a script error.
    pub async fn try_admit(&self, user: u64) -> RedisResult<Admission> {
        self.try_admit_limited(user, BATCH, MAX_QUEUED).await
    }

    /// `Sale::admit` with another batch size and queue limit.
    pub async fn try_admit_limited(
        &self,
        user: u64,
        batch: i64,
        max_queued: i64,
    ) -> RedisResult<Admission> {
        self.try_admit_from(user, batch, max_queued, SEQUENCE_PREFIX)
            .await
    }

    /// `Sale::admit` drawing order ids from the sequence under `sequence_prefix`, for a
    /// test that resets or uses up a day's sequence of its own.
    pub async fn try_admit_from(
        &self,
        user: u64,
        batch: i64,
        max_queued: i64,
        sequence_prefix: &str,
    ) -> RedisResult<Admission> {
        let keys = [
            key(self.voucher, "voucher"),
            key(self.voucher, "buyers"),
            key(self.voucher, "queue"),
            key(self.voucher, "lease"),
            sequence_prefix.to_string(),
            key(self.voucher, "absent"),
            key(self.voucher, "metrics"),
        ];
        let args = [
            user.to_string(),
            LEASE_MS.to_string(),
            batch.to_string(),
            max_queued.to_string(),
            KEPT_AFTER_END_MS.to_string(),
        ];
        let reply: Vec<Value> = self.run(ADMISSION, &keys, &args).await?;
        let ticket = |fields: &[Value]| format!("{}:{}", int(&fields[0]), int(&fields[1]));
        let (decision, fields) = match text(&reply[0]).as_str() {
            "admitted" => (Decision::Admitted(ticket(&reply[2..])), 2),
            "queued" => (Decision::Queued(ticket(&reply[2..])), 2),
            "already_ordered" => (Decision::AlreadyOrdered(text(&reply[2])), 1),
            "sold_out" => (Decision::SoldOut, 0),
            "ended" => (Decision::Ended, 0),
            "not_started" => (Decision::NotStarted, 0),
            "missing" => (Decision::Missing, 0),
            "unknown" => (Decision::Unknown, 0),
            "throttled" => (Decision::Throttled, 0),
            tag => panic!("unexpected reply {tag} {reply:?}"),
        };
        let rest = &reply[2 + fields..];
        let lease = match int(&reply[1]) {
            0 => {
                assert!(rest.is_empty(), "{reply:?}");
                None
            }
            1 => Some((text(&rest[0]), rest[1..].iter().map(text).collect())),
            other => panic!("lead flag {other}"),
        };
        Ok(Admission { decision, lease })
    }

    pub async fn admit(&self, user: u64) -> Admission {
        self.try_admit(user).await.unwrap()
    }

    /// `Sale::publish`: `entries` as (queue entry, outcome, order id), where outcome is
    /// `ordered`, `duplicate`, `sold_out` or `id_taken`; `own` the drainer's own entry
    /// or "".
    pub async fn publish(
        &self,
        token: &str,
        own: &str,
        entries: &[(String, &str, u64)],
    ) -> RedisResult<Published> {
        self.publish_batch(token, own, entries, BATCH).await
    }

    /// [`Sale::publish`] with another batch size, saying nothing of MySQL's orders (0).
    pub async fn publish_batch(
        &self,
        token: &str,
        own: &str,
        entries: &[(String, &str, u64)],
        batch: i64,
    ) -> RedisResult<Published> {
        self.publish_counted(token, own, entries, batch, 0).await
    }

    /// [`Sale::publish`] with the voucher's orders in MySQL after the batch, as
    /// [`commit_batch_counted`] read them.
    pub async fn publish_counted(
        &self,
        token: &str,
        own: &str,
        entries: &[(String, &str, u64)],
        batch: i64,
        mysql_orders: u64,
    ) -> RedisResult<Published> {
        let keys = [
            key(self.voucher, "voucher"),
            key(self.voucher, "buyers"),
            key(self.voucher, "queue"),
            key(self.voucher, "lease"),
            key(self.voucher, "done:"),
            key(self.voucher, "metrics"),
            STALE.to_string(),
        ];
        let mut args = vec![
            token.to_string(),
            LEASE_MS.to_string(),
            HANDOVER_MS.to_string(),
            batch.to_string(),
            own.to_string(),
            entries.len().to_string(),
        ];
        for (entry, outcome, order_id) in entries {
            args.extend([entry.clone(), outcome.to_string(), order_id.to_string()]);
        }
        args.push(mysql_orders.to_string());
        let reply: Vec<Value> = self.run(PUBLISH, &keys, &args).await?;
        Ok(match text(&reply[0]).as_str() {
            "done" => Published::Done,
            "lost" => Published::Lost,
            "next" => Published::Next(reply[1..].iter().map(text).collect()),
            tag => panic!("unexpected reply {tag} {reply:?}"),
        })
    }

    /// `Sale::claim` for the queued purchase `ticket` of `user`.
    pub async fn claim(&self, user: u64, ticket: &str) -> RedisResult<Claimed> {
        let keys = [
            key(self.voucher, "buyers"),
            key(self.voucher, "lease"),
            key(self.voucher, &format!("done:{user}:{ticket}")),
        ];
        let args = [user.to_string(), ticket.to_string(), LEASE_MS.to_string()];
        let reply: Vec<Value> = self.run(CLAIM, &keys, &args).await?;
        Ok(match (text(&reply[0]).as_str(), &reply[1..]) {
            ("outcome", [news]) => Claimed::Outcome(text(news)),
            ("lead", []) => Claimed::Lead,
            ("wait", []) => Claimed::Wait,
            ("lost", []) => Claimed::Lost,
            (tag, rest) => panic!("unexpected reply {tag} {rest:?}"),
        })
    }

    /// What publish.lua left in the outcome list of the queue entry `entry`
    /// (`<user>:<ticket>`), without taking it.
    pub async fn news(&self, entry: &str) -> Vec<String> {
        self.conn
            .clone()
            .lrange(key(self.voucher, &format!("done:{entry}")), 0, -1)
            .await
            .unwrap()
    }

    /// The queue, oldest first.
    pub async fn queue(&self) -> Vec<String> {
        self.conn
            .clone()
            .lrange(key(self.voucher, "queue"), 0, -1)
            .await
            .unwrap()
    }

    /// The drainer's lease token, if any.
    pub async fn lease(&self) -> Option<String> {
        self.conn
            .clone()
            .get(key(self.voucher, "lease"))
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

    /// As if the voucher's sync lease had outlived its TTL.
    pub async fn expire_sync_lease(&self) {
        self.lose(&["sync"]).await;
    }

    /// Deletes some of the voucher's keys (`voucher`, `lock:7`, ...), as Redis losing them.
    pub async fn lose(&self, names: &[&str]) {
        let keys: Vec<String> = names.iter().map(|name| key(self.voucher, name)).collect();
        let _: () = self.conn.clone().del(keys).await.unwrap();
    }

    /// As if the drainer's lease had outlived its TTL.
    pub async fn expire_lease(&self) {
        self.lose(&["lease"]).await;
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

/// MySQL's row for one purchase of a group commit: its order id, the buyer's order of
/// the voucher if any, and whether any order has its id (`seckill_commit_batch`).
pub type CommitRow = (u64, Option<u64>, bool);

/// `seckill_commit_batch` of `(order id, user id)` purchases on a connection of its own,
/// as the drainer's Spin request opens its own: the rows, or the error the component
/// would see.
pub async fn commit_batch(
    voucher_id: u64,
    batch: &[(u64, u64)],
) -> Result<Vec<CommitRow>, mysql_async::Error> {
    Ok(commit_batch_counted(voucher_id, batch).await?.0)
}

/// [`commit_batch`], with the voucher's orders in MySQL once the batch committed.
pub async fn commit_batch_counted(
    voucher_id: u64,
    batch: &[(u64, u64)],
) -> Result<(Vec<CommitRow>, u64), mysql_async::Error> {
    let mut conn = connect().await?;
    let committed = call_commit_batch(&mut conn, voucher_id, batch).await?;
    conn.disconnect().await?;
    Ok(committed)
}

/// [`commit_batch`] on a connection the caller opened beforehand.
pub async fn commit_batch_on(
    conn: &mut mysql_async::Conn,
    voucher_id: u64,
    batch: &[(u64, u64)],
) -> Result<Vec<CommitRow>, mysql_async::Error> {
    Ok(call_commit_batch(conn, voucher_id, batch).await?.0)
}

async fn call_commit_batch(
    conn: &mut mysql_async::Conn,
    voucher_id: u64,
    batch: &[(u64, u64)],
) -> Result<(Vec<CommitRow>, u64), mysql_async::Error> {
    use mysql_async::prelude::Queryable;
    let json: Vec<[String; 2]> = batch
        .iter()
        .map(|(order_id, user)| [order_id.to_string(), user.to_string()])
        .collect();
    let rows: Vec<(u64, Option<u64>, i64, u64)> = conn
        .exec(
            "CALL seckill_commit_batch(?, ?)",
            (voucher_id, serde_json::to_string(&json).unwrap()),
        )
        .await?;
    let orders = rows.first().map_or(0, |row| row.3);
    let rows = rows
        .into_iter()
        .map(|(order_id, held, id_used, _)| (order_id, held, id_used != 0))
        .collect();
    Ok((rows, orders))
}

/// The outcome publish.lua takes for a commit row: (outcome, order id).
pub fn outcome_of(row: CommitRow) -> (&'static str, u64) {
    match row {
        (order_id, Some(held), _) if held == order_id => ("ordered", order_id),
        (_, Some(held), _) => ("duplicate", held),
        (order_id, None, true) => ("id_taken", order_id),
        (order_id, None, false) => ("sold_out", order_id),
    }
}

/// The voucher's stock row held by a transaction of the test's own, as a drainer stuck
/// in MySQL holds it, until [`RowLock::release`].
pub struct RowLock {
    conn: mysql_async::Conn,
}

impl RowLock {
    pub async fn hold(voucher: u64) -> RowLock {
        use mysql_async::prelude::Queryable;
        let mut conn = connect().await.unwrap();
        conn.query_drop("START TRANSACTION").await.unwrap();
        let stock: Option<u64> = conn
            .exec_first(
                "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE",
                (voucher,),
            )
            .await
            .unwrap();
        assert!(stock.is_some(), "voucher {voucher} is not in MySQL");
        RowLock { conn }
    }

    pub async fn release(mut self) {
        use mysql_async::prelude::Queryable;
        self.conn.query_drop("ROLLBACK").await.unwrap();
        self.conn.disconnect().await.unwrap();
    }
}
