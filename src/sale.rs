//! A voucher's sale state in Redis: admission, the queue of admitted purchases and its
//! drainer's lease, and loading state from MySQL. The rules themselves live in `lua/`;
//! this module names the keys, passes the arguments and reads the replies.
//!
//! All of a voucher's keys share the hash tag `{<voucher id>}`, so they sit in one slot
//! of a Redis Cluster. The order sequence is global; see docs/design.md on clusters.

use std::fmt;

use spin_sdk::redis::{self, Connection, RedisParameter, RedisResult};

use crate::db::Verdict;
use crate::ids::{parse_id, UserId};
use crate::order_id::{LayoutError, OrderId};
use crate::scripts::{ADMISSION, CLAIM, LOAD, METRICS, PUBLISH, STAGE, VIEW};

/// The prefix of the per-day order sequence keys (`seckill:order-seq:<day>`).
pub const ORDER_SEQUENCE_PREFIX: &str = "seckill:order-seq";
/// The set of the vouchers Redis holds a sale for: what `GET /metrics` reports on.
const VOUCHERS: &str = "seckill:vouchers";
/// The set of the vouchers whose Redis sale state was found behind MySQL: each waits for
/// an admin's sync (`GET /health` lists them).
const STALE: &str = "seckill:stale";
/// What the last `/health` probe found of MySQL, and how long it is worth reporting: a
/// probe runs once a second while health is asked, so this outlives a few missed ones.
const MYSQL_HEALTH: &str = "seckill:health:mysql";
const MYSQL_HEALTH_MS: i64 = 5_000;
/// How long after its end `GET /metrics` still reports a sale: long enough for the last
/// scrapes to see its final figures, short enough that a scrape stays small.
const REPORTED_AFTER_END_MS: i64 = 3_600_000;
/// How long Redis keeps MySQL's word that a voucher does not exist.
const ABSENT_MS: i64 = 60_000;

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

    /// Hash with `stock`, `begin_ms`, `end_ms`, `initial_stock`, `title`, `description`.
    pub fn voucher(&self) -> String {
        self.key("voucher")
    }

    /// Hash from user id to `q:<ticket>` (queued) or `o:<order id>` (committed).
    pub fn buyers(&self) -> String {
        self.key("buyers")
    }

    /// List of the queued purchases, `<user id>:<ticket>`, oldest first.
    pub fn queue(&self) -> String {
        self.key("queue")
    }

    /// The token of the one request draining the queue into MySQL.
    pub fn lease(&self) -> String {
        self.key("lease")
    }

    /// The prefix of each queued purchase's outcome list (`done:<user id>:<ticket>`).
    pub fn done_prefix(&self) -> String {
        self.key("done:")
    }

    pub fn done(&self, entry: Entry) -> String {
        format!("{}{entry}", self.done_prefix())
    }

    /// The voucher's sync lease: the token of the one sync allowed to run.
    fn sync_lease(&self) -> String {
        self.key("sync")
    }

    /// Set while MySQL's word that no such voucher exists holds (a minute).
    fn absent(&self) -> String {
        self.key("absent")
    }

    /// Held for a second by the one request that may ask MySQL about the voucher.
    fn probe(&self) -> String {
        self.key("probe")
    }

    /// Hash of the voucher's counters, which the scripts keep as they decide; see
    /// `lua/metrics.lua` and [`Figures`].
    fn metrics(&self) -> String {
        self.key("metrics")
    }
}

/// An admitted purchase's place in the order sequence: the two halves of its order id,
/// as the admission script hands them out (Lua numbers are doubles and cannot hold the
/// 64-bit id itself). Written `<unix seconds>:<sequence>`. A sequence lost in a Redis
/// restart can hand one ticket out twice, so a purchase is named by its [`Entry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    seconds: i64,
    sequence: i64,
}

impl Ticket {
    pub fn order_id(self) -> Result<OrderId, LayoutError> {
        OrderId::compose(self.seconds, self.sequence)
    }

    fn parse(text: &str) -> Option<Ticket> {
        let (seconds, sequence) = text.split_once(':')?;
        Some(Ticket {
            seconds: seconds.parse().ok()?,
            sequence: sequence.parse().ok()?,
        })
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seconds, self.sequence)
    }
}

/// A queued purchase, `<user id>:<ticket>`: the buyer and her ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub user: UserId,
    pub ticket: Ticket,
}

impl Entry {
    fn parse(text: &str) -> Option<Entry> {
        let (user, ticket) = text.split_once(':')?;
        Some(Entry {
            user: UserId::from_raw(parse_id(user)?),
            ticket: Ticket::parse(ticket)?,
        })
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.user, self.ticket)
    }
}

/// What admission decided for the buyer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// A unit is the buyer's: her purchase is queued with this ticket.
    Admitted(Ticket),
    /// Her earlier purchase is still queued, with this ticket.
    Queued(Ticket),
    AlreadyOrdered(OrderId),
    SoldOut,
    Ended,
    NotStarted,
    /// Redis holds no sale state for this voucher: it lost it, or the voucher does not
    /// exist.
    Missing,
    /// MySQL said lately that no voucher of this id exists.
    Unknown,
    /// The queue is at its safety limit; nothing was taken.
    Throttled,
}

/// Who asks MySQL, at most once a second each.
#[derive(Debug, Clone, Copy)]
pub enum Probe {
    /// A buyer of a voucher Redis holds no sale for.
    Purchase(u64),
    /// `GET /vouchers/{id}` for any id Redis holds no sale for: one probe for the route,
    /// since every id of a flood of made-up ones is new.
    VoucherLookup,
    /// `GET /health`.
    Health,
}

impl Probe {
    fn key(self) -> String {
        match self {
            Probe::Purchase(voucher_id) => Keys::new(voucher_id).probe(),
            Probe::VoucherLookup => "seckill:probe:voucher-lookup".to_string(),
            Probe::Health => "seckill:probe:health".to_string(),
        }
    }
}

/// The lease to drain the queue, with the first batch to commit.
#[derive(Debug, PartialEq, Eq)]
pub struct Lease {
    pub token: String,
    pub batch: Vec<Entry>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Admission {
    pub decision: Decision,
    /// This request holds the lease and drains before it answers.
    pub lease: Option<Lease>,
}

/// What a waiting purchase found in its outcome list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum News {
    Verdict(Verdict),
    /// The lease was handed to this purchase: its request drains next.
    Lead,
}

/// What `claim.lua` found for a purchase that waited without news.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    News(News),
    /// The lease was free and is now this purchase's.
    Lead,
    /// Still queued, and someone drains.
    Wait,
    /// No longer queued and no outcome left: Redis lost it.
    Lost,
}

/// What `publish.lua` answered the drainer.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Its own purchase is published (or it has none): the lease went on.
    Done,
    /// The lease or the batch is no longer its own: nothing was changed.
    Lost,
    /// The next batch to commit, under the extended lease.
    Batch(Vec<Entry>),
}

/// How long a drainer's lease lives without a batch published: a drainer that died
/// holds the queue up no longer than this.
pub const LEASE_MS: i64 = 2_000;
/// How long a lease handed on lives until its new holder takes it up: its request may
/// have gone.
pub const HANDOVER_MS: i64 = 500;
/// How long a sale's Redis state outlives its end: buyers pressing late still hear their
/// order from Redis, and then the keys expire (`GET /vouchers/{id}/orders/mine` and the
/// order routes read MySQL, which keeps everything).
pub const KEPT_AFTER_END_MS: i64 = 7 * 24 * 3_600_000;
/// Most purchases committed in one MySQL transaction.
pub const BATCH: i64 = 256;
/// Most purchases queued at once: past it buyers hear `throttled`. Each queued purchase
/// has a request waiting on it, and Spin serves a bounded number of requests at once.
pub const MAX_QUEUED: i64 = 512;

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

    /// Decides the buyer, in one round trip; see `lua/admission.lua`.
    pub fn admit(&self, voucher_id: u64, user: UserId) -> Result<Admission, SaleError> {
        let keys = Keys::new(voucher_id);
        let script_keys = [
            keys.voucher(),
            keys.buyers(),
            keys.queue(),
            keys.lease(),
            ORDER_SEQUENCE_PREFIX.to_string(),
            keys.absent(),
            keys.metrics(),
        ];
        let args = vec![
            text(user.to_string()),
            RedisParameter::Int64(LEASE_MS),
            RedisParameter::Int64(BATCH),
            RedisParameter::Int64(MAX_QUEUED),
            RedisParameter::Int64(KEPT_AFTER_END_MS),
        ];
        parse_admission(ADMISSION.run(&self.redis, &script_keys, args)?)
    }

    /// Records MySQL's verdicts on `batch` (the head of the queue, in order) and wakes
    /// its buyers; see `lua/publish.lua`. `own` is the drainer's own queued purchase;
    /// `mysql_orders` the voucher's orders in MySQL after the batch, which tells whether
    /// Redis lost orders it had recorded (it rolled back).
    pub fn publish(
        &self,
        voucher_id: u64,
        token: &str,
        own: Option<Entry>,
        batch: &[(Entry, OrderId, Verdict)],
        mysql_orders: u64,
    ) -> Result<Next, SaleError> {
        let keys = Keys::new(voucher_id);
        let script_keys = [
            keys.voucher(),
            keys.buyers(),
            keys.queue(),
            keys.lease(),
            keys.done_prefix(),
            keys.metrics(),
            STALE.to_string(),
        ];
        let mut args = vec![
            text(token),
            RedisParameter::Int64(LEASE_MS),
            RedisParameter::Int64(HANDOVER_MS),
            RedisParameter::Int64(BATCH),
            text(own.map(|entry| entry.to_string()).unwrap_or_default()),
            RedisParameter::Int64(batch.len() as i64),
        ];
        for (entry, order_id, verdict) in batch {
            let (outcome, order_id) = match verdict {
                Verdict::Ordered => ("ordered", *order_id),
                Verdict::Duplicate(held) => ("duplicate", *held),
                Verdict::SoldOut => ("sold_out", *order_id),
                Verdict::IdTaken => ("id_taken", *order_id),
            };
            args.extend([
                text(entry.to_string()),
                text(outcome),
                text(order_id.to_string()),
            ]);
        }
        args.push(RedisParameter::Int64(mysql_orders as i64));
        let reply = PUBLISH.run(&self.redis, &script_keys, args)?;
        match reply.as_slice() {
            [RedisResult::Binary(tag)] if tag == b"done" => Ok(Next::Done),
            [RedisResult::Binary(tag)] if tag == b"lost" => Ok(Next::Lost),
            [RedisResult::Binary(tag), entries @ ..] if tag == b"next" => parse_entries(entries)
                .map(Next::Batch)
                .ok_or(SaleError::Reply(reply)),
            _ => Err(SaleError::Reply(reply)),
        }
    }

    /// Waits up to `seconds` for news of the queued purchase `entry` (a blocking pop of
    /// its outcome list); `None` when none came.
    pub fn wait(
        &self,
        voucher_id: u64,
        entry: Entry,
        seconds: &str,
    ) -> Result<Option<News>, SaleError> {
        let params = [text(Keys::new(voucher_id).done(entry)), text(seconds)];
        let reply = self.redis.execute("BLPOP", &params)?;
        match reply.as_slice() {
            [] | [RedisResult::Nil] => Ok(None),
            [RedisResult::Binary(_key), RedisResult::Binary(news)] => {
                parse_news(news).map(Some).ok_or(SaleError::Reply(reply))
            }
            _ => Err(SaleError::Reply(reply)),
        }
    }

    /// For a queued purchase that waited without news; see `lua/claim.lua`.
    pub fn claim(&self, voucher_id: u64, entry: Entry) -> Result<Claim, SaleError> {
        let keys = Keys::new(voucher_id);
        let script_keys = [keys.buyers(), keys.lease(), keys.done(entry)];
        let args = vec![
            text(entry.user.to_string()),
            text(entry.ticket.to_string()),
            RedisParameter::Int64(LEASE_MS),
        ];
        let reply = CLAIM.run(&self.redis, &script_keys, args)?;
        let claim = match reply.as_slice() {
            [RedisResult::Binary(tag), RedisResult::Binary(news)] if tag == b"outcome" => {
                parse_news(news).map(Claim::News)
            }
            [RedisResult::Binary(tag)] => match tag.as_slice() {
                b"lead" => Some(Claim::Lead),
                b"wait" => Some(Claim::Wait),
                b"lost" => Some(Claim::Lost),
                _ => None,
            },
            _ => None,
        };
        claim.ok_or(SaleError::Reply(reply))
    }

    /// Whether this request may ask MySQL on behalf of `probe`: one request per probe
    /// and second, so that a crowd (buyers pressing after Redis lost its data, or
    /// anonymous clients asking for ids that do not exist) never becomes a crowd of MySQL
    /// connections.
    pub fn may_ask_mysql(&self, probe: Probe) -> Result<bool, SaleError> {
        let params = [
            text(probe.key()),
            text("1"),
            text("NX"),
            text("PX"),
            RedisParameter::Int64(1_000),
        ];
        match self.redis.execute("SET", &params)?.as_slice() {
            [RedisResult::Status(ok)] if ok == "OK" => Ok(true),
            [RedisResult::Nil] => Ok(false),
            other => Err(SaleError::Reply(other.to_vec())),
        }
    }

    /// Whether MySQL said lately that no voucher of this id exists.
    pub fn is_absent(&self, voucher_id: u64) -> Result<bool, SaleError> {
        let params = [text(Keys::new(voucher_id).absent())];
        match self.redis.execute("EXISTS", &params)?.as_slice() {
            [RedisResult::Int64(n)] => Ok(*n == 1),
            other => Err(SaleError::Reply(other.to_vec())),
        }
    }

    /// MySQL's health as the last `/health` probe found it, if it is recent.
    pub fn mysql_health(&self) -> Result<Option<bool>, SaleError> {
        match self.redis.execute("GET", &[text(MYSQL_HEALTH)])?.as_slice() {
            [RedisResult::Binary(state)] => Ok(Some(state == b"ok")),
            [RedisResult::Nil] => Ok(None),
            other => Err(SaleError::Reply(other.to_vec())),
        }
    }

    /// Keeps what a `/health` probe found of MySQL for the requests of the next seconds.
    pub fn remember_mysql_health(&self, ok: bool) -> Result<(), SaleError> {
        let params = [
            text(MYSQL_HEALTH),
            text(if ok { "ok" } else { "down" }),
            text("PX"),
            RedisParameter::Int64(MYSQL_HEALTH_MS),
        ];
        self.redis.execute("SET", &params)?;
        Ok(())
    }

    /// Keeps MySQL's word that the voucher does not exist, so that admission answers for
    /// it without asking again (until a creation loads it).
    pub fn mark_absent(&self, voucher_id: u64) -> Result<(), SaleError> {
        let params = [
            text(Keys::new(voucher_id).absent()),
            text("1"),
            text("PX"),
            RedisParameter::Int64(ABSENT_MS),
        ];
        self.redis.execute("SET", &params)?;
        Ok(())
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
        let script_keys = [keys.buyers(), keys.sync_lease(), keys.voucher()];
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

    /// Installs the terms at the end of the sync holding `token` (buyers and the queue
    /// stay as they are), and ends its lease.
    pub fn finish_load(
        &self,
        voucher_id: u64,
        token: &str,
        terms: &Terms,
    ) -> Result<(), SaleError> {
        let keys = Keys::new(voucher_id);
        let script_keys = [
            keys.voucher(),
            keys.sync_lease(),
            keys.absent(),
            VOUCHERS.to_string(),
            STALE.to_string(),
            keys.buyers(),
            keys.metrics(),
        ];
        let args = vec![
            RedisParameter::Int64(terms.stock as i64),
            RedisParameter::Int64(terms.begin_ms),
            RedisParameter::Int64(terms.end_ms),
            RedisParameter::Int64(terms.initial_stock as i64),
            text(terms.title.as_str()),
            text(terms.description.as_str()),
            text(token),
            text(voucher_id.to_string()),
            RedisParameter::Int64(KEPT_AFTER_END_MS),
        ];
        expect_done(LOAD.run(&self.redis, &script_keys, args)?)
    }

    /// Removes a voucher's sale state: undoes the load of a creation that failed.
    pub fn forget(&self, voucher_id: u64) -> Result<(), SaleError> {
        let keys = Keys::new(voucher_id);
        self.redis.del(&[
            keys.voucher(),
            keys.buyers(),
            keys.queue(),
            keys.lease(),
            keys.metrics(),
        ])?;
        self.redis.srem(VOUCHERS, &[voucher_id.to_string()])?;
        Ok(())
    }

    /// Counts a purchase outcome that no script saw: one the request reached after
    /// admission (`busy`, an error). An extra round trip, off the sale's hot path.
    pub fn count_outcome(&self, voucher_id: u64, outcome: &str) -> Result<(), SaleError> {
        let params = [
            text(Keys::new(voucher_id).metrics()),
            text(format!("purchase:{outcome}")),
            RedisParameter::Int64(1),
        ];
        self.redis.execute("HINCRBY", &params)?;
        Ok(())
    }

    /// The ids of the vouchers Redis holds a sale for, in order.
    pub fn vouchers(&self) -> Result<Vec<u64>, SaleError> {
        self.ids(VOUCHERS)
    }

    /// The ids of the vouchers whose sale state was found behind MySQL, in order.
    pub fn stale_vouchers(&self) -> Result<Vec<u64>, SaleError> {
        self.ids(STALE)
    }

    fn ids(&self, set: &str) -> Result<Vec<u64>, SaleError> {
        let reply = self.redis.smembers(set)?;
        let mut ids: Vec<u64> = reply.iter().filter_map(|id| parse_id(id)).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// One voucher's figures, read at one instant; `None` (and the voucher leaves the
    /// set, so a scrape stays small) when Redis no longer holds its sale or the sale
    /// ended more than [`REPORTED_AFTER_END_MS`] ago.
    pub fn figures(&self, voucher_id: u64) -> Result<Option<Figures>, SaleError> {
        let keys = Keys::new(voucher_id);
        let script_keys = [keys.voucher(), keys.queue(), keys.metrics()];
        let args = vec![RedisParameter::Int64(REPORTED_AFTER_END_MS)];
        let reply = METRICS.run(&self.redis, &script_keys, args)?;
        if reply.is_empty() {
            self.redis.srem(VOUCHERS, &[voucher_id.to_string()])?;
            return Ok(None);
        }
        parse_figures(&reply)
            .map(Some)
            .ok_or(SaleError::Reply(reply))
    }

    /// The voucher as Redis holds it, with Redis's clock; `None` when Redis has no
    /// complete state for it.
    pub fn view(&self, voucher_id: u64) -> Result<Option<View>, SaleError> {
        let keys = [Keys::new(voucher_id).voucher()];
        let reply = VIEW.run(&self.redis, &keys, Vec::new())?;
        parse_view(reply)
    }
}

/// A voucher's figures as `lua/metrics.lua` reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    pub units_left: i64,
    pub units_initial: i64,
    pub queued: i64,
    /// The orders Redis recorded.
    pub orders: i64,
    /// Redis was found behind MySQL: the sale waits for a sync.
    pub stale: bool,
    /// The counters by name (`purchase:<outcome>`, `commit:<outcome>`,
    /// `batch:le:<bound>`, `batch:count`, `batch:sum`); one never counted is absent.
    pub counters: Vec<(String, i64)>,
}

impl Figures {
    pub fn counter(&self, name: &str) -> i64 {
        self.counters
            .iter()
            .find(|(counter, _)| counter == name)
            .map_or(0, |(_, count)| *count)
    }
}

fn parse_figures(reply: &[RedisResult]) -> Option<Figures> {
    let [RedisResult::Int64(units_left), RedisResult::Int64(units_initial), RedisResult::Int64(queued), RedisResult::Int64(orders), RedisResult::Int64(stale), counters @ ..] =
        reply
    else {
        return None;
    };
    if counters.len() % 2 != 0 {
        return None;
    }
    let counters = counters
        .chunks(2)
        .map(|pair| match pair {
            [RedisResult::Binary(name), RedisResult::Binary(count)] => Some((
                String::from_utf8(name.clone()).ok()?,
                std::str::from_utf8(count).ok()?.parse().ok()?,
            )),
            _ => None,
        })
        .collect::<Option<_>>()?;
    Some(Figures {
        units_left: *units_left,
        units_initial: *units_initial,
        queued: *queued,
        orders: *orders,
        stale: *stale == 1,
        counters,
    })
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
    let parsed = match reply.as_slice() {
        [RedisResult::Binary(tag), RedisResult::Int64(lead), rest @ ..] => {
            parse_decision(tag, rest).and_then(|(decision, rest)| match (*lead, rest) {
                (0, []) => Some(Admission {
                    decision,
                    lease: None,
                }),
                (1, [RedisResult::Binary(token), entries @ ..]) => Some(Admission {
                    decision,
                    lease: Some(Lease {
                        token: String::from_utf8(token.clone()).ok()?,
                        batch: parse_entries(entries)?,
                    }),
                }),
                _ => None,
            })
        }
        _ => None,
    };
    parsed.ok_or(SaleError::Reply(reply))
}

/// The decision named `tag` with its fields, and what follows them.
fn parse_decision<'a>(
    tag: &[u8],
    rest: &'a [RedisResult],
) -> Option<(Decision, &'a [RedisResult])> {
    let ticket = |rest: &'a [RedisResult]| match rest {
        [RedisResult::Int64(seconds), RedisResult::Int64(sequence), rest @ ..] => {
            let ticket = Ticket {
                seconds: *seconds,
                sequence: *sequence,
            };
            ticket.order_id().ok().map(|_| (ticket, rest))
        }
        _ => None,
    };
    Some(match (tag, rest) {
        (b"admitted", rest) => ticket(rest).map(|(t, rest)| (Decision::Admitted(t), rest))?,
        (b"queued", rest) => ticket(rest).map(|(t, rest)| (Decision::Queued(t), rest))?,
        (b"already_ordered", [RedisResult::Binary(id), rest @ ..]) => {
            let order_id = std::str::from_utf8(id).ok().and_then(OrderId::parse)?;
            (Decision::AlreadyOrdered(order_id), rest)
        }
        (b"sold_out", rest) => (Decision::SoldOut, rest),
        (b"ended", rest) => (Decision::Ended, rest),
        (b"not_started", rest) => (Decision::NotStarted, rest),
        (b"missing", rest) => (Decision::Missing, rest),
        (b"unknown", rest) => (Decision::Unknown, rest),
        (b"throttled", rest) => (Decision::Throttled, rest),
        _ => return None,
    })
}

fn parse_entries(entries: &[RedisResult]) -> Option<Vec<Entry>> {
    entries
        .iter()
        .map(|entry| match entry {
            RedisResult::Binary(bytes) => Entry::parse(std::str::from_utf8(bytes).ok()?),
            _ => None,
        })
        .collect()
}

/// `<outcome>:<order id>` or `lead`, as `lua/publish.lua` writes them.
fn parse_news(news: &[u8]) -> Option<News> {
    let news = std::str::from_utf8(news).ok()?;
    if news == "lead" {
        return Some(News::Lead);
    }
    let (outcome, order_id) = news.split_once(':')?;
    let verdict = match outcome {
        "ordered" => Verdict::Ordered,
        "duplicate" => Verdict::Duplicate(OrderId::parse(order_id)?),
        "sold_out" => Verdict::SoldOut,
        "id_taken" => Verdict::IdTaken,
        _ => return None,
    };
    Some(News::Verdict(verdict))
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
        assert_eq!(keys.queue(), "seckill:{42}:queue");
        assert_eq!(keys.lease(), "seckill:{42}:lease");
        let entry = Entry {
            user: UserId::from_raw(9),
            ticket: ticket(EPOCH + 1, 7),
        };
        assert_eq!(keys.done(entry), "seckill:{42}:done:9:1704067201:7");
        assert_eq!(keys.sync_lease(), "seckill:{42}:sync");
    }

    fn ticket(seconds: i64, sequence: i64) -> Ticket {
        Ticket { seconds, sequence }
    }

    fn int(n: i64) -> RedisResult {
        RedisResult::Int64(n)
    }

    #[test]
    fn parses_every_admission_reply() {
        let t = ticket(EPOCH + 10, 3);
        assert_eq!(t.order_id().unwrap(), OrderId::from_raw((10 << 32) | 3));
        let plain = |decision| Admission {
            decision,
            lease: None,
        };
        let cases = [
            (
                vec![bin("admitted"), int(0), int(EPOCH + 10), int(3)],
                plain(Decision::Admitted(t)),
            ),
            (
                vec![bin("queued"), int(0), int(EPOCH + 10), int(3)],
                plain(Decision::Queued(t)),
            ),
            (
                vec![bin("already_ordered"), int(0), bin("99")],
                plain(Decision::AlreadyOrdered(OrderId::from_raw(99))),
            ),
            (vec![bin("sold_out"), int(0)], plain(Decision::SoldOut)),
            (vec![bin("ended"), int(0)], plain(Decision::Ended)),
            (
                vec![bin("not_started"), int(0)],
                plain(Decision::NotStarted),
            ),
            (vec![bin("missing"), int(0)], plain(Decision::Missing)),
            (vec![bin("unknown"), int(0)], plain(Decision::Unknown)),
            (vec![bin("throttled"), int(0)], plain(Decision::Throttled)),
            (
                vec![
                    bin("admitted"),
                    int(1),
                    int(EPOCH + 10),
                    int(3),
                    bin("5:1704067210:3"),
                    bin("8:1704067209:1"),
                    bin("5:1704067210:3"),
                ],
                Admission {
                    decision: Decision::Admitted(t),
                    lease: Some(Lease {
                        token: "5:1704067210:3".into(),
                        batch: vec![
                            Entry {
                                user: UserId::from_raw(8),
                                ticket: ticket(EPOCH + 9, 1),
                            },
                            Entry {
                                user: UserId::from_raw(5),
                                ticket: t,
                            },
                        ],
                    }),
                },
            ),
            (
                vec![bin("sold_out"), int(1), bin("r:1:2:5")],
                Admission {
                    decision: Decision::SoldOut,
                    lease: Some(Lease {
                        token: "r:1:2:5".into(),
                        batch: vec![],
                    }),
                },
            ),
        ];
        for (reply, admission) in cases {
            assert_eq!(parse_admission(reply).unwrap(), admission);
        }
    }

    #[test]
    fn refuses_admission_replies_it_does_not_understand() {
        let odd = [
            vec![],
            vec![RedisResult::Nil],
            vec![bin("sold_out")],
            vec![bin("admitted"), int(0)],
            vec![bin("admitted"), int(0), int(EPOCH), int(1 << 32)],
            vec![bin("admitted"), int(0), int(EPOCH - 1), int(1)],
            vec![bin("already_ordered"), int(0), bin("x")],
            vec![bin("sold_out"), int(0), int(1)],
            vec![bin("sold_out"), int(2)],
            vec![bin("sold_out"), int(1), bin("r:1"), bin("not an entry")],
            vec![bin("whatever"), int(0)],
        ];
        for reply in odd {
            assert!(parse_admission(reply.clone()).is_err(), "{reply:?}");
        }
    }

    #[test]
    fn entries_and_news_read_as_the_scripts_write_them() {
        let entry = Entry::parse("12:1704067210:3").unwrap();
        assert_eq!(entry.user, UserId::from_raw(12));
        assert_eq!(entry.to_string(), "12:1704067210:3");
        for bad in ["", "12", "12:1704067210", "0:1:2", "x:1:2", "12:1:x"] {
            assert_eq!(Entry::parse(bad), None, "{bad:?}");
        }
        let news = [
            ("lead", Some(News::Lead)),
            ("ordered:5", Some(News::Verdict(Verdict::Ordered))),
            (
                "duplicate:6",
                Some(News::Verdict(Verdict::Duplicate(OrderId::from_raw(6)))),
            ),
            ("sold_out:5", Some(News::Verdict(Verdict::SoldOut))),
            ("id_taken:5", Some(News::Verdict(Verdict::IdTaken))),
            ("duplicate:x", None),
            ("ordered", None),
            ("other:5", None),
        ];
        for (text, expected) in news {
            assert_eq!(parse_news(text.as_bytes()), expected, "{text:?}");
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
