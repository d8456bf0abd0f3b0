//! The component's own commands (`seckill_core::sale`) and stored procedures, run on a
//! Redis and MariaDB of the tests' choosing. Nothing here restates a key, an argument or
//! a reply's meaning: the commands and their parsers are the component's.

use mysql_async::prelude::Queryable;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, RedisResult, Value};

use seckill_core::redis::{is_noscript, Arg, Command, Reply};
use seckill_core::sale::{
    self, Admission, Claim, Entry, Keys, Limits, Next, Published, Record, Terms,
    ORDER_SEQUENCE_PREFIX,
};
use seckill_core::verdict::{batch_json, Committed, Verdict, COMMIT_BATCH};
use seckill_core::{OrderId, UserId, VoucherId};

use crate::backends::{fresh_voucher_id, redis, MYSQL_URL};

/// Runs a command as the component does (`src/sale.rs`): a script by EVALSHA, by EVAL
/// when Redis has forgotten it; the reply as Spin hands it over, one level deep.
pub async fn run(conn: &mut MultiplexedConnection, command: &Command) -> RedisResult<Vec<Reply>> {
    let (name, args) = command.parts();
    let value = match send(conn, name, &args).await {
        Err(error) if is_noscript(&error.to_string()) => {
            let (name, args) = command.eval_fallback().expect("only scripts are EVALSHA");
            send(conn, name, &args).await?
        }
        result => result?,
    };
    Ok(flatten(value))
}

async fn send(conn: &mut MultiplexedConnection, name: &str, args: &[Arg]) -> RedisResult<Value> {
    let mut cmd = redis::cmd(name);
    for arg in args {
        match arg {
            Arg::Int(n) => cmd.arg(*n),
            Arg::Text(text) => cmd.arg(text.as_bytes()),
        };
    }
    cmd.query_async(conn).await
}

fn flatten(value: Value) -> Vec<Reply> {
    match value {
        Value::Array(values) => values.into_iter().map(reply).collect(),
        value => vec![reply(value)],
    }
}

fn reply(value: Value) -> Reply {
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(bytes) => Reply::Bytes(bytes),
        Value::SimpleString(status) => Reply::Status(status),
        Value::Okay => Reply::Status("OK".into()),
        other => panic!("a reply Spin does not hand over: {other:?}"),
    }
}

/// One voucher's sale state in a Redis.
#[derive(Clone)]
pub struct Sale {
    pub conn: MultiplexedConnection,
    pub voucher: VoucherId,
}

impl Sale {
    /// A live sale (begun a minute ago, ending in an hour) with `stock` units, on the
    /// shared Redis under a fresh voucher id.
    pub async fn live(stock: u64) -> Sale {
        let sale = Sale {
            conn: redis().await,
            voucher: VoucherId::from_raw(fresh_voucher_id()),
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

    pub fn keys(&self) -> Keys {
        Keys::new(self.voucher)
    }

    /// Runs one of the component's commands on this sale's connection.
    pub async fn run(&self, command: &Command) -> RedisResult<Vec<Reply>> {
        run(&mut self.conn.clone(), command).await
    }

    pub async fn now_ms(&self) -> i64 {
        let (seconds, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await
            .unwrap();
        seconds * 1000 + micros / 1000
    }

    /// Stages `buyers` and loads the sale state, as a sync does.
    pub async fn load(&self, stock: u64, begin_ms: i64, end_ms: i64, buyers: &[(UserId, OrderId)]) {
        let token = "load";
        assert!(self.begin_load(token).await.unwrap(), "sync lease taken");
        assert!(self.stage_buyers(token, buyers).await.unwrap());
        let terms = Terms {
            stock,
            begin_ms,
            end_ms,
            initial_stock: stock,
            title: "voucher".into(),
            description: String::new(),
        };
        assert!(
            self.finish_load(token, &terms).await.unwrap(),
            "load refused"
        );
    }

    /// Takes the voucher's sync lease; false if another sync holds it.
    pub async fn begin_load(&self, token: &str) -> RedisResult<bool> {
        let reply = self.run(&sale::begin_load(self.voucher, token)).await?;
        Ok(sale::parse_set_nx(reply).expect("SET NX"))
    }

    /// One page of a sync; false if the lease was lost.
    pub async fn stage_buyers(
        &self,
        token: &str,
        buyers: &[(UserId, OrderId)],
    ) -> RedisResult<bool> {
        let reply = self
            .run(&sale::stage_buyers(self.voucher, token, buyers))
            .await?;
        Ok(sale::parse_done(reply).expect("stage's reply"))
    }

    /// The end of a sync (`token` "" for a creation); false if refused.
    pub async fn finish_load(&self, token: &str, terms: &Terms) -> RedisResult<bool> {
        let reply = self.run(&sale::load(self.voucher, token, terms)).await?;
        Ok(sale::parse_done(reply).expect("load's reply"))
    }

    /// Admission as the component runs it; an error is a script error.
    pub async fn try_admit(&self, user: UserId) -> RedisResult<Admission> {
        self.try_admit_limited(user, Limits::SHIPPED).await
    }

    /// Admission with other limits.
    pub async fn try_admit_limited(&self, user: UserId, limits: Limits) -> RedisResult<Admission> {
        let reply = self.run(&sale::admit(self.voucher, user, limits)).await?;
        Ok(sale::parse_admission(reply).expect("admission's reply"))
    }

    /// Admission drawing order ids from the sequence under `sequence_prefix`, for a test
    /// that resets or uses up a day's sequence of its own.
    pub async fn try_admit_from(
        &self,
        user: UserId,
        sequence_prefix: &str,
    ) -> RedisResult<Admission> {
        let mut command = sale::admit(self.voucher, user, Limits::SHIPPED);
        if let Command::Script { keys, .. } = &mut command {
            let sequence = keys
                .iter_mut()
                .find(|key| *key == ORDER_SEQUENCE_PREFIX)
                .expect("admission names the order sequence");
            *sequence = sequence_prefix.to_string();
        }
        let reply = self.run(&command).await?;
        Ok(sale::parse_admission(reply).expect("admission's reply"))
    }

    pub async fn admit(&self, user: UserId) -> Admission {
        self.try_admit(user).await.unwrap()
    }

    /// Publishes MySQL's verdicts on a batch, saying nothing of MySQL's orders (0).
    pub async fn publish(
        &self,
        token: &str,
        own: Option<Entry>,
        batch: &[Published],
    ) -> RedisResult<Next> {
        self.publish_counted(token, own, batch, 0, Limits::SHIPPED)
            .await
    }

    /// Publishes with the voucher's orders in MySQL after the batch, under `limits`.
    pub async fn publish_counted(
        &self,
        token: &str,
        own: Option<Entry>,
        batch: &[Published],
        mysql_orders: u64,
        limits: Limits,
    ) -> RedisResult<Next> {
        let command = sale::publish(self.voucher, token, own, batch, mysql_orders, limits);
        let reply = self.run(&command).await?;
        Ok(sale::parse_next(reply).expect("publish's reply"))
    }

    /// What a queued purchase that waited without news runs.
    pub async fn claim(&self, entry: Entry) -> RedisResult<Claim> {
        let reply = self.run(&sale::claim(self.voucher, entry)).await?;
        Ok(sale::parse_claim(reply).expect("claim's reply"))
    }

    /// What publish.lua left in the outcome list of `entry`, without taking it.
    pub async fn news(&self, entry: Entry) -> Vec<String> {
        self.conn
            .clone()
            .lrange(self.keys().done(entry), 0, -1)
            .await
            .unwrap()
    }

    /// The queue, oldest first.
    pub async fn queue(&self) -> Vec<Entry> {
        let entries: Vec<String> = self
            .conn
            .clone()
            .lrange(self.keys().queue(), 0, -1)
            .await
            .unwrap();
        entries
            .iter()
            .map(|entry| Entry::parse(entry).unwrap_or_else(|| panic!("queue entry {entry}")))
            .collect()
    }

    /// The drainer's lease token, if any.
    pub async fn lease(&self) -> Option<String> {
        self.conn.clone().get(self.keys().lease()).await.unwrap()
    }

    pub async fn stock(&self) -> Option<i64> {
        self.conn
            .clone()
            .hget(self.keys().voucher(), "stock")
            .await
            .unwrap()
    }

    pub async fn record(&self, user: UserId) -> Option<Record> {
        let record: Option<String> = self
            .conn
            .clone()
            .hget(self.keys().buyers(), user.raw())
            .await
            .unwrap();
        record.map(|record| Record::parse(&record).unwrap_or_else(|| panic!("record {record}")))
    }

    pub async fn records(&self) -> Vec<(UserId, Record)> {
        let records: Vec<(u64, String)> = self
            .conn
            .clone()
            .hgetall(self.keys().buyers())
            .await
            .unwrap();
        records
            .into_iter()
            .map(|(user, record)| {
                let parsed = Record::parse(&record).unwrap_or_else(|| panic!("record {record}"));
                (UserId::from_raw(user), parsed)
            })
            .collect()
    }

    /// As if the voucher's sync lease had outlived its TTL.
    pub async fn expire_sync_lease(&self) {
        self.lose(&[self.keys().sync_lease()]).await;
    }

    /// As if the drainer's lease had outlived its TTL.
    pub async fn expire_lease(&self) {
        self.lose(&[self.keys().lease()]).await;
    }

    /// Deletes some of the voucher's keys, as Redis losing them.
    pub async fn lose(&self, keys: &[String]) {
        let _: () = self.conn.clone().del(keys).await.unwrap();
    }
}

/// The entry of an admitted or queued purchase.
pub fn entry(user: UserId, admission: &Admission) -> Entry {
    match admission.decision {
        sale::Decision::Admitted(ticket) | sale::Decision::Queued(ticket) => Entry { user, ticket },
        other => panic!("buyer {user} has no queued purchase: {other:?}"),
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
pub async fn create_voucher(stock: u32, begin_in: i64, end_in: i64) -> VoucherId {
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
    VoucherId::from_raw(id.unwrap())
}

/// The group commit of `(order id, buyer)` purchases on a connection of its own, as the
/// drainer's Spin request opens its own: MySQL's verdicts, or the error the component
/// would see.
pub async fn commit_batch(
    voucher: VoucherId,
    batch: &[(OrderId, UserId)],
) -> Result<Committed, mysql_async::Error> {
    let mut conn = connect().await?;
    let committed = commit_batch_on(&mut conn, voucher, batch).await?;
    conn.disconnect().await?;
    Ok(committed)
}

/// [`commit_batch`] on a connection the caller opened beforehand.
pub async fn commit_batch_on(
    conn: &mut mysql_async::Conn,
    voucher: VoucherId,
    batch: &[(OrderId, UserId)],
) -> Result<Committed, mysql_async::Error> {
    let rows: Vec<(u64, Option<u64>, i64, u64)> = conn
        .exec(COMMIT_BATCH, (voucher.raw(), batch_json(batch)))
        .await?;
    assert_eq!(rows.len(), batch.len(), "a row per purchase");
    let verdicts = rows
        .iter()
        .zip(batch)
        .map(|((order_id, held, id_used, _), (own, _))| {
            assert_eq!(*order_id, own.raw(), "rows in the batch's order");
            Verdict::of(*own, held.map(OrderId::from_raw), *id_used != 0)
        })
        .collect();
    let orders = rows.first().map_or(0, |row| row.3);
    Ok(Committed { verdicts, orders })
}

/// The order ids and buyers of queued purchases, as a drainer commits them.
pub fn orders_of(batch: &[Entry]) -> Vec<(OrderId, UserId)> {
    batch
        .iter()
        .map(|entry| (entry.ticket.order_id().expect("a ticket"), entry.user))
        .collect()
}

/// A batch with MySQL's verdicts, as publish.lua takes it.
pub fn published(batch: &[Entry], verdicts: &[Verdict]) -> Vec<Published> {
    batch
        .iter()
        .zip(verdicts)
        .map(|(entry, verdict)| (*entry, entry.ticket.order_id().expect("a ticket"), *verdict))
        .collect()
}

/// The voucher's stock row held by a transaction of the test's own, as a drainer stuck
/// in MySQL holds it, until [`RowLock::release`].
pub struct RowLock {
    conn: mysql_async::Conn,
}

impl RowLock {
    pub async fn hold(voucher: VoucherId) -> RowLock {
        let mut conn = connect().await.unwrap();
        conn.query_drop("START TRANSACTION").await.unwrap();
        let stock: Option<u64> = conn
            .exec_first(
                "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE",
                (voucher.raw(),),
            )
            .await
            .unwrap();
        assert!(stock.is_some(), "voucher {voucher} is not in MySQL");
        RowLock { conn }
    }

    pub async fn release(mut self) {
        self.conn.query_drop("ROLLBACK").await.unwrap();
        self.conn.disconnect().await.unwrap();
    }
}
