//! The component's own Redis calls (`seckill_core::sale`) and MySQL statements
//! (`seckill_core::sql`), run on a Redis and MariaDB of the tests' choosing. Nothing here
//! restates a key, an argument or what a reply or a row means: the calls, the statements
//! and their readers are the component's.

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::Params;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, FromRedisValue, RedisResult, ToRedisArgs, Value};

use seckill_core::buckets::{Buckets, Spread};
use seckill_core::ledger::Ledger;
use seckill_core::ledger::{ReturnKind, Returned};
use seckill_core::purchase::Lookup;
use seckill_core::redis::{is_noscript, Arg, Command, Reply};
use seckill_core::sale::{
    listings, Admission, Admit, BeginSync, Call, Claim, Claimed, Decision, Entry, Installer, Keys,
    Leave, Limits, LineAsk, Load, MarkAllOut, Marked, Next, Publish, Published, Record, Restock,
    Route, Sightings, Stage, Terms, ALL_OUT,
};
use seckill_core::sql;
use seckill_core::verdict::{Committed, Committing, Told, Verdict};
use seckill_core::{BackendError, BucketId, OrderId, SaleId, UserId};

use crate::servers::local::{mysql_url, redis};

/// Runs a command as the component does (`Command::send_with`): a script by EVALSHA, by EVAL
/// when Redis has forgotten it, then the updates of the sets of vouchers its reply calls
/// for (`listings`); the reply as Spin hands it over, one level deep.
pub async fn run(conn: &mut MultiplexedConnection, command: &Command) -> RedisResult<Vec<Reply>> {
    let reply = flatten(send_as_the_component(conn, command).await?);
    for listing in listings(command, &reply) {
        send_as_the_component(conn, &listing).await?;
    }
    Ok(reply)
}

async fn send_as_the_component(
    conn: &mut MultiplexedConnection,
    command: &Command,
) -> RedisResult<Value> {
    command
        .send_with(
            |name, args| {
                let mut conn = conn.clone();
                async move { send(&mut conn, name, &args).await }
            },
            |error| is_noscript(&error.to_string()),
        )
        .await
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
    pub voucher: BucketId,
}

impl Sale {
    /// A voucher of `stock` units created in MySQL, with no sale state yet in the shared
    /// Redis. Every voucher a test gives Redis exists in MySQL: admission tells a sale
    /// Redis lost (`missing`) from a made-up id (`unknown`) by the highest id MySQL has
    /// handed out, which Redis learns from each load (see [`Sale::finish_load`]).
    pub async fn created(stock: u64) -> Sale {
        let stock = u32::try_from(stock).expect("a stock MySQL holds");
        Sale {
            conn: redis().await,
            voucher: create_voucher(stock, -60, 3600).await.first_bucket(),
        }
    }

    /// A live sale (begun a minute ago, ending in an hour) with `stock` units, of a
    /// [`Sale::created`] voucher.
    pub async fn live(stock: u64) -> Sale {
        Sale::live_per_buyer(stock, 1).await
    }

    /// [`Sale::live`], letting a buyer hold up to `per_buyer` units.
    pub async fn live_per_buyer(stock: u64, per_buyer: u64) -> Sale {
        let sale = Sale::created(stock).await;
        let now = sale.now_ms().await;
        let terms = Terms {
            per_buyer,
            announce_ms: 0,
            ..terms(stock, now - 60_000, now + 3_600_000)
        };
        assert!(sale.finish_load(Installer::Creation, &terms).await.unwrap());
        sale
    }

    /// A sale of `stock` units that began a second ago with an opening draw whose window
    /// closes `window_left_ms` from now (docs/design.md, "The opening draw").
    pub async fn drawing(stock: u64, window_left_ms: i64) -> Sale {
        Sale::drawing_per_buyer(stock, window_left_ms, 1).await
    }

    /// [`Sale::drawing`], letting a buyer hold up to `per_buyer` units.
    pub async fn drawing_per_buyer(stock: u64, window_left_ms: i64, per_buyer: u64) -> Sale {
        let sale = Sale::created(stock).await;
        let now = sale.now_ms().await;
        let terms = Terms {
            draw_ms: (1_000 + window_left_ms) as u64,
            per_buyer,
            announce_ms: 0,
            ..terms(stock, now - 1_000, now + 3_600_000)
        };
        assert!(sale.finish_load(Installer::Creation, &terms).await.unwrap());
        sale
    }

    /// A press whose place in a draw is `place` (else as the component presses).
    pub async fn press_at(&self, user: UserId, place: u64) -> Admission {
        self.press_for(user, place, 1).await
    }

    /// [`Sale::press_at`] for `units` units.
    pub async fn press_for(&self, user: UserId, place: u64, units: u32) -> Admission {
        self.call(&Admit {
            draw_place: place,
            units,
            ..self.admit_call(user, Route::Unrouted, Limits::SHIPPED)
        })
        .await
        .unwrap()
    }

    /// Gives back `units` units of a cancelled order of buyer 99999's, MySQL's event
    /// `event`, as a sweep's restock does; checks the stock rose by them.
    pub async fn give_back_cancelled(&self, event: u64, units: u32) {
        let returned = Returned {
            event,
            kind: ReturnKind::Cancelled {
                order_id: OrderId::from_raw(event),
                user: UserId::from_raw(99_999),
            },
            units,
        };
        let restock = Restock {
            voucher_id: self.voucher,
            returns: &[returned],
            after: event - 1,
            swept: None,
        };
        let before = self.stock().await.unwrap();
        let restocked = self.call(&restock).await.unwrap().unwrap();
        assert_eq!(restocked.given, 1);
        assert_eq!(restocked.stock, before + i64::from(units));
        assert_eq!(self.stock().await, Some(restocked.stock));
    }

    /// How many wait in the sale's line, of every quantity.
    pub async fn line_length(&self) -> u64 {
        // One round trip for the lines of every quantity.
        let mut pipe = redis::pipe();
        for line in self.keys().lines() {
            pipe.zcard(line);
        }
        let lengths: Vec<u64> = pipe.query_async(&mut self.conn.clone()).await.unwrap();
        lengths.iter().sum()
    }

    /// Who waits in the sale's line: (buyer, place, units asked), first place first.
    pub async fn line_members(&self) -> Vec<(u64, u64, u32)> {
        let mut pipe = redis::pipe();
        for line in self.keys().lines() {
            pipe.zrange_withscores(line, 0, -1);
        }
        let lines: Vec<Vec<(u64, u64)>> = pipe.query_async(&mut self.conn.clone()).await.unwrap();
        let mut members = Vec::new();
        for (n, waiting) in lines.into_iter().enumerate() {
            let units = n as u32 + 1;
            members.extend(
                waiting
                    .into_iter()
                    .map(|(buyer, place)| (buyer, place, units)),
            );
        }
        members.sort_unstable_by_key(|&(_, place, _)| place);
        members
    }

    /// `user` leaves the sale's line, as `DELETE /vouchers/{id}/line` runs it: whether she
    /// was in it.
    pub async fn leave_line(&self, user: UserId) -> bool {
        let leave = Leave {
            sale: self.sale(),
            user,
        };
        self.call(&leave).await.unwrap()
    }

    /// Whether the line handed `user` units she has not heard of yet (the sale's
    /// `drawn`: her next press or look answers them).
    pub async fn handed_unheard(&self, user: UserId) -> bool {
        let drawn = self.keys().drawn();
        self.conn.clone().hexists(drawn, user.raw()).await.unwrap()
    }

    /// The units the sale's line handed out so far (its "line:handed" counter).
    pub async fn line_handed(&self) -> i64 {
        let handed: Option<i64> = self
            .conn
            .clone()
            .hget(self.keys().metrics(), "line:handed")
            .await
            .unwrap();
        handed.unwrap_or(0)
    }

    /// Admission for `units` units, as the component runs it.
    pub async fn admit_units(&self, user: UserId, units: u32) -> Admission {
        self.press_for(user, 0, units).await
    }

    /// Admission of one unit at this bucket by a press at `route`.
    fn admit_call(&self, user: UserId, route: Route, limits: Limits) -> Admit {
        Admit {
            voucher_id: self.voucher,
            user,
            limits,
            route,
            draw_place: 0,
            sightings: Sightings::default(),
            units: 1,
            line: LineAsk::Press,
        }
    }

    /// What `user` asks of the sale's line, for `units` at `place` if her join draws one.
    pub async fn ask_line(&self, user: UserId, line: LineAsk, place: u64, units: u32) -> Admission {
        self.call(&Admit {
            draw_place: place,
            units,
            line,
            ..self.admit_call(user, Route::Unrouted, Limits::SHIPPED)
        })
        .await
        .unwrap()
    }

    /// The buckets of a live sale of `stock` units spread over `buckets` (docs/design.md,
    /// "Buckets"), the voucher first: created in MySQL, each installed in Redis as the
    /// voucher's creation installs it.
    pub async fn live_buckets(stock: u32, buckets: u32) -> Vec<Sale> {
        Sale::live_buckets_per_buyer(stock, buckets, 1).await
    }

    /// [`Sale::live_buckets`], letting a buyer hold up to `per_buyer` units.
    pub async fn live_buckets_per_buyer(stock: u32, buckets: u32, per_buyer: u32) -> Vec<Sale> {
        let created = create_per_buyer(stock, buckets, 0, per_buyer, -60, 3600).await;
        let highest = *created.all().iter().max().expect("a bucket");
        let mut sales = Vec::new();
        for &bucket in created.all() {
            let sale = Sale {
                conn: redis().await,
                voucher: bucket,
            };
            let found = lookup(bucket).await.unwrap();
            let load = Load {
                voucher_id: bucket,
                installer: Installer::Creation,
                terms: &found.terms.expect("a bucket's terms"),
                highest: highest.into(),
                created: found.created,
                ledger: found.ledger,
                spread: &found.spread,
                terms_version: found.terms_version,
            };
            assert!(sale.call(&load).await.unwrap(), "bucket {bucket} installed");
            sales.push(sale);
        }
        sales
    }

    /// The sale a press of this voucher is for: a test's sale of one bucket is that bucket
    /// (of a sale of several, presses go to the first bucket's harness).
    pub fn sale(&self) -> SaleId {
        SaleId::from_raw(self.voucher.raw())
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

    /// Runs one of the component's calls on this sale's connection and reads the reply as
    /// the component does; an error is Redis's (a script error among them).
    pub async fn call<C: Call>(&self, call: &C) -> RedisResult<C::Output> {
        self.call_as(call, &call.command()).await
    }

    /// Runs `command`, a test's variant of `call`'s own, and reads the reply as `call`'s:
    /// a reply the component would not understand fails the test, naming the call.
    pub async fn call_as<C: Call>(&self, _call: &C, command: &Command) -> RedisResult<C::Output> {
        let reply = self.run(command).await?;
        Ok(C::parse(reply)
            .unwrap_or_else(|unexpected| panic!("{}: {unexpected}", std::any::type_name::<C>())))
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
        assert!(
            self.finish_load(Installer::Sync(token), &terms(stock, begin_ms, end_ms))
                .await
                .unwrap(),
            "load refused"
        );
    }

    /// [`Sale::load`] of a sale on since a minute ago, for an hour, by Redis's clock.
    pub async fn load_live(&self, stock: u64, buyers: &[(UserId, OrderId)]) {
        let now = self.now_ms().await;
        self.load(stock, now - 60_000, now + 3_600_000, buyers)
            .await;
    }

    /// Takes the voucher's sync lease; false if another sync holds it.
    pub async fn begin_load(&self, token: &str) -> RedisResult<bool> {
        self.call(&BeginSync {
            voucher_id: self.voucher,
            token,
        })
        .await
    }

    /// One page of a sync, of buyers holding orders; false if the lease was lost.
    pub async fn stage_buyers(
        &self,
        token: &str,
        buyers: &[(UserId, OrderId)],
    ) -> RedisResult<bool> {
        let buyers: Vec<(UserId, Record)> = buyers
            .iter()
            .map(|(user, order_id)| (*user, Record::Ordered(*order_id, 1)))
            .collect();
        self.call(&Stage {
            voucher_id: self.voucher,
            token,
            created: 0,
            buyers: &buyers,
        })
        .await
    }

    /// Installs the terms, as `installer` does; false if refused. It gives the voucher's
    /// own id as the highest known to exist: a [`Sale::created`] voucher's is at most
    /// MySQL's highest, and once Redis loses the sale's state, admission takes it for lost
    /// (`missing`), never for made up (`unknown`).
    pub async fn finish_load(&self, installer: Installer<'_>, terms: &Terms) -> RedisResult<bool> {
        self.call(&Load {
            voucher_id: self.voucher,
            installer,
            terms,
            highest: self.voucher.into(),
            // Unknown, as of a sale created before creations were stamped.
            created: 0,
            // A test's sale: nothing cancelled or expired, so its orders are the units gone.
            ledger: Ledger {
                returned_event: 0,
                orders: terms.initial_stock - terms.stock,
                stock: terms.stock,
            },
            spread: &Spread::Whole,
            terms_version: 0,
        })
        .await
    }

    /// Admission as the component runs it; an error is a script error.
    pub async fn try_admit(&self, user: UserId) -> RedisResult<Admission> {
        self.try_admit_limited(user, Limits::SHIPPED).await
    }

    /// Admission with other limits.
    pub async fn try_admit_limited(&self, user: UserId, limits: Limits) -> RedisResult<Admission> {
        self.call(&self.admit_call(user, Route::Unrouted, limits))
            .await
    }

    /// Admission drawing order ids from the sequence under `sequence_prefix`, for a test
    /// that resets or uses up a day's sequence of its own.
    pub async fn try_admit_from(
        &self,
        user: UserId,
        sequence_prefix: &str,
    ) -> RedisResult<Admission> {
        let admit = self.admit_call(user, Route::Unrouted, Limits::SHIPPED);
        let mut command = admit.command();
        if let Command::Script { keys, .. } = &mut command {
            let shared = Keys::new(self.voucher).order_sequence();
            let sequence = keys
                .iter_mut()
                .find(|key| **key == shared)
                .expect("admission names the order sequence");
            *sequence = sequence_prefix.to_string();
        }
        self.call_as(&admit, &command).await
    }

    /// Marks this bucket as answering sold_out by itself, as a walk that found every bucket
    /// empty just now does (walk_end.lua); whether it was sold out, so marked.
    pub async fn mark_all_out(&self) -> bool {
        self.call(&MarkAllOut {
            bucket: self.voucher,
            since: self.now_ms().await,
        })
        .await
        .unwrap()
            != Marked::Open
    }

    /// Admission at this bucket by a press that knows the sale's buckets.
    pub async fn admit_routed(&self, user: UserId) -> Admission {
        self.call(&self.admit_call(user, Route::Home, Limits::SHIPPED))
            .await
            .unwrap()
    }

    /// [`Sale::admit_routed`] for `units` units at `route`.
    pub async fn admit_routed_units(&self, user: UserId, route: Route, units: u32) -> Admission {
        self.call(&Admit {
            units,
            ..self.admit_call(user, route, Limits::SHIPPED)
        })
        .await
        .unwrap()
    }

    /// Time passes the sale's next sweep (`sweep_at`): the next press or read sweeps.
    pub async fn make_sweep_due(&self) {
        let now = self.now_ms().await;
        self.voucher_set("sweep_at", now - 1).await;
    }

    /// A number of the voucher's hash (`orders`, `behind`, ...), if set.
    pub async fn voucher_field(&self, field: &str) -> Option<i64> {
        self.voucher_get(field).await
    }

    /// A field of the voucher's hash, as `T`.
    pub async fn voucher_get<T: FromRedisValue>(&self, field: &str) -> T {
        self.conn
            .clone()
            .hget(self.keys().voucher(), field)
            .await
            .unwrap()
    }

    /// Sets a field of the voucher's hash, as a test's fault or a time passing does.
    pub async fn voucher_set(&self, field: &str, value: impl ToRedisArgs + Send + Sync) {
        let _: () = self
            .conn
            .clone()
            .hset(self.keys().voucher(), field, value)
            .await
            .unwrap();
    }

    /// Whether a publication marked the sale `stale`: Redis found behind MySQL.
    pub async fn stale(&self) -> bool {
        self.conn
            .clone()
            .hexists(self.keys().voucher(), "stale")
            .await
            .unwrap()
    }

    /// Removes a field of the voucher's hash.
    pub async fn voucher_del(&self, field: &str) {
        let _: () = self
            .conn
            .clone()
            .hdel(self.keys().voucher(), field)
            .await
            .unwrap();
    }

    pub async fn admit(&self, user: UserId) -> Admission {
        self.try_admit(user).await.unwrap()
    }

    /// Publishes MySQL's verdicts on a batch with an empty ledger (MySQL counted no orders,
    /// no returns).
    pub async fn publish(
        &self,
        token: &str,
        own: Option<Entry>,
        batch: &[Published],
    ) -> RedisResult<Next> {
        self.publish_counted(token, own, batch, Ledger::default(), Limits::SHIPPED)
            .await
    }

    /// Publishes with the voucher's ledger in MySQL after the batch, under `limits`.
    pub async fn publish_counted(
        &self,
        token: &str,
        own: Option<Entry>,
        batch: &[Published],
        mysql: Ledger,
        limits: Limits,
    ) -> RedisResult<Next> {
        self.call(&Publish {
            voucher_id: self.voucher,
            token,
            own,
            batch,
            mysql: Some(mysql),
            limits,
        })
        .await
        .map(|publication| publication.next)
    }

    /// What a queued purchase that waited without news runs.
    pub async fn claim(&self, entry: Entry) -> RedisResult<Claimed> {
        self.call(&Claim {
            voucher_id: self.voucher,
            entry,
        })
        .await
    }

    /// What publish.lua left in the outcome list of `entry`, without taking it: "lead", or
    /// a verdict as [`outcome`] writes it (publish.lua's JSON has no key order).
    pub async fn news(&self, entry: Entry) -> Vec<String> {
        let news: Vec<String> = self
            .conn
            .clone()
            .lrange(self.keys().done(entry), 0, -1)
            .await
            .unwrap();
        news.into_iter()
            .map(|news| match serde_json::from_str::<Told>(&news) {
                Ok(told) => serde_json::to_string(&told).unwrap(),
                Err(_) => news,
            })
            .collect()
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

    /// Waits until no purchase is queued and nobody holds the lease, for at most 2 s: a
    /// drainer answers its own buyer before it publishes her batch, so Redis may trail
    /// her `201` by a round trip.
    pub async fn drained(&self) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        while !(self.queue().await.is_empty() && self.lease().await.is_none()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the queue was not drained within 2 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    pub async fn stock(&self) -> Option<i64> {
        self.voucher_get("stock").await
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

    /// As if the sweeper's lease had outlived its TTL.
    pub async fn expire_sweep_lease(&self) {
        self.lose(&[self.keys().sweep()]).await;
    }

    /// The buyer's record as Redis holds it (any kind, "e:" included).
    pub async fn raw_record(&self, user: UserId) -> Option<String> {
        self.conn
            .clone()
            .hget(self.keys().buyers(), user.raw())
            .await
            .unwrap()
    }

    /// Whether the bucket's all-out mark stands (its buyers hear sold_out at once).
    pub async fn all_out(&self) -> bool {
        let mark: Option<String> = self.conn.clone().get(self.keys().all_out()).await.unwrap();
        mark.is_some_and(|mark| mark.starts_with(ALL_OUT))
    }

    /// Deletes some of the voucher's keys, as Redis losing them.
    pub async fn lose(&self, keys: &[String]) {
        let _: () = self.conn.clone().del(keys).await.unwrap();
    }
}

/// The entry of an admitted or queued purchase.
pub fn entry(user: UserId, admission: &Admission) -> Entry {
    match admission.decision {
        Decision::Admitted(ticket) | Decision::Queued(ticket) => Entry { user, ticket },
        other => panic!("buyer {user} has no queued purchase: {other:?}"),
    }
}

/// A connection of its own to the shared MariaDB. While the server turns connections away
/// (`max_connections`, other suites on the machine at their peak), it waits and tries
/// again for up to ten seconds: that is the machine's load, not what a test checks.
/// What an RDB snapshot holds of `key`: its serialised value and its TTL in milliseconds
/// (0 for none), or `None` when it does not exist.
pub async fn dump_key(conn: &mut MultiplexedConnection, key: &str) -> Option<(Vec<u8>, i64)> {
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query_async(conn).await.unwrap();
    let ttl: i64 = conn.pttl(key).await.unwrap();
    dump.map(|dump| (dump, ttl.max(0)))
}

/// `key` as [`dump_key`] saved it, as a restart from that snapshot brings it back.
pub async fn restore_key(conn: &mut MultiplexedConnection, key: &str, dump: &[u8], ttl: i64) {
    let _: () = redis::cmd("RESTORE")
        .arg(key)
        .arg(ttl)
        .arg(dump)
        .query_async(conn)
        .await
        .unwrap();
}

/// The order's deadline to pay passes, by MySQL's clock (the next sweep expires it).
pub async fn pass_deadline(db: &mut mysql_async::Conn, order: OrderId) {
    db.exec_drop(
        "UPDATE tb_voucher_order SET expire_time = UTC_TIMESTAMP() - INTERVAL 1 SECOND \
         WHERE id = ?",
        (order.raw(),),
    )
    .await
    .unwrap();
}

/// A connection to the tests' MySQL ([`crate::servers::local::connect_to`]).
pub async fn connect() -> Result<mysql_async::Conn, mysql_async::Error> {
    crate::servers::local::connect_to(&mysql_url()).await
}

/// A transaction of the test's own that ran `statement` (its first row beside it, if
/// any) and has neither committed nor rolled back: what holds a row or a gap while the
/// test runs the product into it.
pub async fn open_transaction<T: FromRow + Send + 'static>(
    statement: &str,
    params: impl Into<Params> + Send,
) -> (mysql_async::Conn, Option<T>) {
    let mut conn = connect().await.unwrap();
    conn.query_drop("START TRANSACTION").await.unwrap();
    let row = conn.exec_first(statement, params).await.unwrap();
    (conn, row)
}

/// Ends such a transaction (`COMMIT` or `ROLLBACK`), and its connection.
pub async fn end_transaction(mut conn: mysql_async::Conn, end: &str) {
    conn.query_drop(end).await.unwrap();
    conn.disconnect().await.unwrap();
}

/// `seckill_create_voucher` with a window given in seconds from now; returns the id.
pub async fn create_voucher(stock: u32, begin_in: i64, end_in: i64) -> SaleId {
    create_bucketed(stock, 1, begin_in, end_in).await.sale()
}

/// [`create_voucher`] with the stock spread over `buckets`; returns them.
pub async fn create_bucketed(stock: u32, buckets: u32, begin_in: i64, end_in: i64) -> Buckets {
    create_per_buyer(stock, buckets, 0, 1, begin_in, end_in).await
}

/// [`create_voucher`] of a sale that opens with a draw of `draw_ms`.
pub async fn create_drawn(stock: u32, draw_ms: u32, begin_in: i64, end_in: i64) -> SaleId {
    create_per_buyer(stock, 1, draw_ms, 1, begin_in, end_in)
        .await
        .sale()
}

/// [`create_bucketed`] of a sale that lets a buyer hold up to `per_buyer` units, with a
/// draw of `draw_ms` (0: none).
pub async fn create_per_buyer(
    stock: u32,
    buckets: u32,
    draw_ms: u32,
    per_buyer: u32,
    begin_in: i64,
    end_in: i64,
) -> Buckets {
    let at = |offset: i64| {
        (chrono::Utc::now() + chrono::Duration::seconds(offset))
            .format("%Y-%m-%d %H:%M:%S")
            .to_string()
    };
    let mut conn = connect().await.unwrap();
    let created = rows(
        &mut conn,
        sql::CREATE_VOUCHER,
        (
            "sql test",
            "",
            stock,
            at(begin_in),
            at(end_in),
            900,
            buckets,
            draw_ms,
            None::<String>,
            per_buyer,
            None::<String>,
        ),
    )
    .await
    .unwrap();
    conn.disconnect().await.unwrap();
    sql::created(&created).unwrap().expect("a sale").0
}

/// The terms of a test's voucher of `stock` units.
pub fn terms(stock: u64, begin_ms: i64, end_ms: i64) -> Terms {
    Terms {
        title: "voucher".into(),
        ..Terms::sample(stock, stock, begin_ms, end_ms)
    }
}

/// Runs one of the component's statements (`seckill_core::sql`) and hands its rows over
/// as the component does, to the statement's own reader.
async fn rows(
    conn: &mut mysql_async::Conn,
    statement: &str,
    params: impl Into<mysql_async::Params> + Send,
) -> Result<Vec<Vec<sql::Value>>, mysql_async::Error> {
    let rows: Vec<mysql_async::Row> = conn.exec(statement, params).await?;
    Ok(rows
        .into_iter()
        .map(|row| row.unwrap().into_iter().map(value).collect())
        .collect())
}

/// [`rows`], a failure as the state machines take it ([`mysql`]).
async fn read_rows(
    conn: &mut mysql_async::Conn,
    statement: &str,
    params: impl Into<mysql_async::Params> + Send,
) -> Result<Vec<Vec<sql::Value>>, BackendError> {
    rows(conn, statement, params).await.map_err(mysql)
}

/// A column as the statements' readers take it: the statements return nothing but
/// integers and text (times travel as seconds since 1970).
fn value(value: mysql_async::Value) -> sql::Value {
    match value {
        mysql_async::Value::NULL => sql::Value::Null,
        mysql_async::Value::Int(n) => sql::Value::Int(n.into()),
        mysql_async::Value::UInt(n) => sql::Value::Int(n.into()),
        mysql_async::Value::Bytes(bytes) => {
            sql::Value::Text(String::from_utf8(bytes).expect("the statements read UTF-8 text"))
        }
        other => panic!("a column the statements do not read: {other:?}"),
    }
}

/// What a purchase of a voucher Redis holds no sale for asks MySQL (`Io::ReadVoucher`):
/// the voucher's terms and the highest voucher id handed out, on a connection of its own
/// as the purchase's Spin request opens one; a failure as the purchase takes it.
pub async fn lookup(voucher: BucketId) -> Result<Lookup, BackendError> {
    let mut conn = connect().await.map_err(mysql)?;
    let terms = read_rows(&mut conn, sql::VOUCHER, (voucher.raw(),)).await?;
    let highest = read_rows(&mut conn, sql::HIGHEST_VOUCHER, ()).await?;
    conn.disconnect().await.map_err(mysql)?;
    Ok(sql::lookup(&terms, &highest)?)
}

/// The buyer's order of the voucher, as the component reads it.
pub async fn order_of(
    conn: &mut mysql_async::Conn,
    user: UserId,
    voucher: SaleId,
) -> Result<Option<OrderId>, BackendError> {
    let rows = read_rows(conn, sql::ORDER_OF, (user.raw(), voucher.raw())).await?;
    Ok(sql::order_of(&rows)?)
}

/// A page of the voucher's buyers as a sync reads it: those whose order id comes after
/// `after`, at most `limit` of them, in order id order.
pub async fn buyers_page(
    conn: &mut mysql_async::Conn,
    voucher: BucketId,
    after: OrderId,
    limit: u32,
) -> Result<Vec<(UserId, Record)>, BackendError> {
    let rows = read_rows(conn, sql::BUYERS_PAGE, (voucher.raw(), after.raw(), limit)).await?;
    Ok(sql::buyers(&rows)?)
}

/// `POST /orders/{id}/pay` (`to` paid, by the payment system: `buyer` `None`) or
/// `/cancel`'s MySQL call: the order's status after it, whether this call changed it, and
/// its voucher; `None` when there is no such order (of that buyer).
pub async fn settle_order(
    conn: &mut mysql_async::Conn,
    order: OrderId,
    buyer: Option<UserId>,
    to: sql::Status,
) -> Result<Option<(sql::Status, bool, BucketId)>, BackendError> {
    let params = (order.raw(), buyer.map_or(0, UserId::raw), to as u8);
    let rows = read_rows(conn, sql::SETTLE_ORDER, params).await?;
    Ok(sql::settled(&rows)?)
}

/// The buyer's `order` cancelled (`settle_order`), on a connection of its own.
pub async fn cancel_order(
    order: OrderId,
    buyer: UserId,
) -> Result<Option<(sql::Status, bool, BucketId)>, BackendError> {
    let mut conn = connect().await.map_err(mysql)?;
    let settled = settle_order(&mut conn, order, Some(buyer), sql::Status::Cancelled).await;
    conn.disconnect().await.map_err(mysql)?;
    settled
}

/// `PATCH /vouchers/{id}` of an open sale asking for `units` more stock, as its MySQL call
/// (`seckill_change_sale`) makes it, on `conn`: every other term as MySQL holds it (read
/// first), the stock their total and `units` more, at the version read. What the call did,
/// or MySQL's error (a lock wait, a deadlock: the procedure rolled back).
pub async fn restock(
    conn: &mut mysql_async::Conn,
    sale: SaleId,
    units: u64,
) -> Result<sql::SaleChange, mysql_async::Error> {
    // Times as text, which the procedure's DATETIME parameters take back as they were.
    type Held = (
        u64,
        String,
        String,
        String,
        String,
        u64,
        u64,
        u64,
        Option<String>,
        u64,
    );
    let held: Option<Held> = conn
        .exec_first(
            "SELECT s.terms_version, v.title, v.description, CAST(s.begin_time AS CHAR), \
             CAST(s.end_time AS CHAR), s.pay_within_s, s.draw_ms, s.per_buyer, \
             CAST(s.announce_time AS CHAR), \
             CAST((SELECT SUM(b.initial_stock) FROM tb_seckill_voucher b \
               WHERE b.sale_id = s.sale_id) AS UNSIGNED) \
             FROM tb_voucher v JOIN tb_seckill_voucher s ON s.voucher_id = v.id \
             WHERE v.id = ? AND s.sale_id = v.id",
            (sale.raw(),),
        )
        .await?;
    let Some((
        version,
        title,
        description,
        begin,
        end,
        pay_within_s,
        draw_ms,
        per_buyer,
        announce,
        total,
    )) = held
    else {
        return Ok(sql::SaleChange::Missing);
    };
    let params: Vec<mysql_async::Value> = vec![
        sale.raw().into(),
        version.into(),
        0u8.into(),
        0u8.into(),
        title.into(),
        description.into(),
        (total + units).into(),
        begin.into(),
        end.into(),
        pay_within_s.into(),
        draw_ms.into(),
        per_buyer.into(),
        announce.into(),
    ];
    let rows = rows(conn, sql::CHANGE_SALE, Params::Positional(params)).await?;
    Ok(sql::changed(&rows).unwrap_or_else(|error| panic!("{error}")))
}

/// [`restock`] as the explorers play it: the terms' version after it, or `None` when
/// another suite's locks failed it (a lock wait, a deadlock: it rolled back, and nothing
/// changed); any other error or outcome, what it was.
pub async fn restock_unless_contended(
    conn: &mut mysql_async::Conn,
    sale: SaleId,
    units: u64,
) -> Result<Option<u64>, String> {
    match restock(conn, sale, units).await {
        Ok(sql::SaleChange::Changed(version)) => Ok(Some(version)),
        Ok(other) => Err(format!("the sale is {other:?}")),
        Err(mysql_async::Error::Server(error)) if [1205, 1213].contains(&error.code) => Ok(None),
        Err(error) => Err(error.to_string()),
    }
}

/// The voucher's unpaid orders past their deadline expired, at most `limit`, on a
/// connection of its own: how many, and the earliest deadline left (unix seconds).
pub async fn expire_due(
    voucher: BucketId,
    limit: u32,
) -> Result<(usize, Option<i64>), BackendError> {
    let mut conn = connect().await.map_err(mysql)?;
    let rows = read_rows(&mut conn, sql::EXPIRE_DUE, (voucher.raw(), limit)).await?;
    conn.disconnect().await.map_err(mysql)?;
    let (expired, next) = sql::expired(&rows)?;
    Ok((expired.len(), next))
}

/// The feed's expiries (`sql::EXPIRE_OVERDUE`) of the `oldest` longest overdue orders and
/// the `newest` most recently overdue, as MySQL's clock would run them at `at` (unix
/// seconds; orders due later are not overdue yet), on a connection of its own: the
/// buckets whose orders it expired.
pub async fn expire_overdue_at(
    at: u64,
    oldest: u32,
    newest: u32,
) -> Result<Vec<BucketId>, BackendError> {
    let mut conn = connect().await.map_err(mysql)?;
    conn.exec_drop("SET timestamp = ?", (at,))
        .await
        .map_err(mysql)?;
    let rows = read_rows(&mut conn, sql::EXPIRE_OVERDUE, (oldest, newest)).await?;
    conn.disconnect().await.map_err(mysql)?;
    Ok(sql::overdue(&rows)?)
}

/// The voucher's units given back after the event `after`, oldest first, on a connection
/// of its own.
pub async fn returns_after(
    voucher: BucketId,
    after: u64,
    limit: u32,
) -> Result<Vec<Returned>, BackendError> {
    let mut conn = connect().await.map_err(mysql)?;
    let rows = read_rows(&mut conn, sql::RETURNS_AFTER, (voucher.raw(), after, limit)).await?;
    conn.disconnect().await.map_err(mysql)?;
    Ok(sql::returns(&rows)?)
}

/// A MariaDB client's failure as the state machines take it.
pub fn mysql(error: mysql_async::Error) -> BackendError {
    BackendError::Mysql(error.to_string())
}

/// The group commit of `(order id, buyer)` purchases on a connection of its own, as the
/// drainer's Spin request opens its own: MySQL's verdicts, or the error the component
/// would see.
pub async fn commit_batch(
    voucher: BucketId,
    batch: &[impl Purchased],
) -> Result<Committed, mysql_async::Error> {
    let mut conn = connect().await?;
    let committed = commit_batch_on(&mut conn, voucher, batch).await?;
    conn.disconnect().await?;
    Ok(committed)
}

/// [`commit_batch`] on a connection the caller opened beforehand.
pub async fn commit_batch_on(
    conn: &mut mysql_async::Conn,
    voucher: BucketId,
    batch: &[impl Purchased],
) -> Result<Committed, mysql_async::Error> {
    let batch: Vec<Committing> = batch.iter().map(Purchased::committing).collect();
    let rows = rows(
        conn,
        sql::COMMIT_BATCH,
        (voucher.raw(), sql::batch_json(&batch)),
    )
    .await?;
    Ok(sql::committed(&batch, &rows).unwrap_or_else(|error| panic!("{error}")))
}

/// A page of the order feed after the place `after`, as the component reads it.
pub async fn feed_page(after: u64, limit: u32) -> Vec<sql::Event> {
    let mut conn = connect().await.unwrap();
    let rows = rows(&mut conn, sql::EVENTS_PAGE, (after, limit))
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    sql::events(&rows).unwrap_or_else(|error| panic!("{error}"))
}

/// MySQL loses the commits of these unpaid orders of the voucher, as a failover to a
/// replica that had not received them loses them: the orders, their `order.created`
/// events, and what they took from the stock and added to its count of orders.
pub async fn lose_commits(voucher: BucketId, orders: &[OrderId]) {
    let mut conn = connect().await.unwrap();
    for order_id in orders {
        let units: Option<u64> = conn
            .exec_first(
                "SELECT quantity FROM tb_voucher_order WHERE id = ? AND voucher_id = ? AND status = 1",
                (order_id.raw(), voucher.raw()),
            )
            .await
            .unwrap();
        let units = units.unwrap_or_else(|| {
            panic!("order {order_id} is not an unpaid order of voucher {voucher}")
        });
        conn.exec_drop(
            "DELETE FROM tb_order_event WHERE order_id = ?",
            (order_id.raw(),),
        )
        .await
        .unwrap();
        conn.exec_drop(
            "DELETE FROM tb_voucher_order WHERE id = ?",
            (order_id.raw(),),
        )
        .await
        .unwrap();
        conn.exec_drop(
            "UPDATE tb_seckill_voucher SET stock = stock + ?, orders = orders - 1 WHERE voucher_id = ?",
            (units, voucher.raw()),
        )
        .await
        .unwrap();
    }
    conn.disconnect().await.unwrap();
}

/// The order ids and buyers of queued purchases, as a drainer commits them.
pub fn orders_of(batch: &[Entry]) -> Vec<Committing> {
    batch
        .iter()
        .map(|entry| {
            (
                entry.ticket.order_id().expect("a ticket"),
                entry.user,
                entry.ticket.units(),
            )
        })
        .collect()
}

/// A purchase of a batch as a test names it: `(order id, buyer)` for one unit, or
/// [`Committing`] with its units.
pub trait Purchased {
    fn committing(&self) -> Committing;
}

impl Purchased for (OrderId, UserId) {
    fn committing(&self) -> Committing {
        (self.0, self.1, 1)
    }
}

impl Purchased for Committing {
    fn committing(&self) -> Committing {
        *self
    }
}

/// A batch with MySQL's verdicts, as publish.lua takes it.
pub fn published(batch: &[Entry], verdicts: &[Verdict]) -> Vec<Published> {
    batch
        .iter()
        .zip(verdicts)
        .map(|(entry, verdict)| (*entry, entry.ticket.order_id().expect("a ticket"), *verdict))
        .collect()
}

/// What publish.lua leaves in a buyer's outcome list for MySQL's `verdict` on her
/// purchase `order_id`: the verdict's name and the order it is about.
pub fn outcome(verdict: Verdict, order_id: OrderId) -> String {
    serde_json::to_string(&Told::of(verdict, order_id, 1)).unwrap()
}

/// The voucher's stock row held by a transaction of the test's own, as a drainer stuck
/// in MySQL holds it, until [`RowLock::release`].
pub struct RowLock {
    conn: mysql_async::Conn,
}

impl RowLock {
    pub async fn hold(voucher: BucketId) -> RowLock {
        let (conn, stock): (_, Option<u64>) = open_transaction(
            "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE",
            (voucher.raw(),),
        )
        .await;
        assert!(stock.is_some(), "voucher {voucher} is not in MySQL");
        RowLock { conn }
    }

    pub async fn release(self) {
        end_transaction(self.conn, "ROLLBACK").await;
    }
}
