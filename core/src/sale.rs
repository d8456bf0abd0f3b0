//! A voucher's sale state in Redis: the keys, the commands that read and change it (the
//! rules themselves live in `lua/`) and what their replies mean.
//!
//! All of a voucher's keys share the hash tag `{<voucher id>}`, so they sit in one slot
//! of a Redis Cluster. The order sequence is global; see docs/design.md on clusters.

use std::fmt;

use crate::ids::{parse_id, UserId, VoucherId};
use crate::order_id::{LayoutError, OrderId};
use crate::redis::{
    Arg, Command, Reply, UnexpectedReply, ADMISSION, CLAIM, LOAD, METRICS, PUBLISH, STAGE, VIEW,
};
use crate::verdict::Verdict;

/// The prefix of the per-day order sequence keys (`seckill:order-seq:<day>`).
pub const ORDER_SEQUENCE_PREFIX: &str = "seckill:order-seq";
/// The set of the vouchers Redis holds a sale for: what `GET /metrics` reports on.
pub const VOUCHERS: &str = "seckill:vouchers";
/// The set of the vouchers whose Redis sale state was found behind MySQL: each waits for
/// an admin's sync (`GET /health` lists them).
pub const STALE: &str = "seckill:stale";
/// What the last `/health` probe found of MySQL, and how long it is worth reporting: a
/// probe runs once a second while health is asked, so this outlives a few missed ones.
pub const MYSQL_HEALTH: &str = "seckill:health:mysql";
pub const MYSQL_HEALTH_MS: i64 = 5_000;
/// How long after its end `GET /metrics` still reports a sale: long enough for the last
/// scrapes to see its final figures, short enough that a scrape stays small.
pub const REPORTED_AFTER_END_MS: i64 = 3_600_000;
/// How long Redis keeps MySQL's word that a voucher does not exist.
pub const ABSENT_MS: i64 = 60_000;
/// How long a sync holds the voucher's sync lease after its last page: a sync that died
/// blocks the next one no longer than this.
pub const SYNC_LEASE_MS: i64 = 60_000;
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
/// How many purchases a drainer takes at once and may be queued at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most purchases committed in one MySQL transaction.
    pub batch: i64,
    /// Most purchases queued at once: past it buyers hear `throttled`. Each queued
    /// purchase has a request waiting on it, and Spin serves a bounded number of
    /// requests at once.
    pub max_queued: i64,
}

impl Limits {
    /// The component's.
    pub const SHIPPED: Limits = Limits {
        batch: BATCH,
        max_queued: MAX_QUEUED,
    };
}

/// How long a queued purchase's request blocks for news in one `BLPOP` before it checks
/// on the drainer (Redis takes fractional timeouts from 6.0 on).
pub const WAIT_SLICE: &str = "0.5";

/// The keys of one voucher's sale state.
#[derive(Debug, Clone, Copy)]
pub struct Keys {
    voucher_id: VoucherId,
}

impl Keys {
    pub fn new(voucher_id: VoucherId) -> Keys {
        Keys { voucher_id }
    }

    fn key(&self, name: &str) -> String {
        format!("seckill:{{{}}}:{name}", self.voucher_id)
    }

    /// Hash with `stock`, `begin_ms`, `end_ms`, `initial_stock`, `title`, `description`,
    /// `orders` (the orders Redis recorded) and `stale` (found behind MySQL).
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

    /// The outcome list of the queued purchase `entry`.
    pub fn done(&self, entry: Entry) -> String {
        format!("{}{entry}", self.done_prefix())
    }

    /// The voucher's sync lease: the token of the one sync allowed to run.
    pub fn sync_lease(&self) -> String {
        self.key("sync")
    }

    /// Set while MySQL's word that no such voucher exists holds (a minute).
    pub fn absent(&self) -> String {
        self.key("absent")
    }

    /// Held for a second by the one request that may ask MySQL about the voucher.
    pub fn probe(&self) -> String {
        self.key("probe")
    }

    /// Hash of the voucher's counters, which the scripts keep as they decide; see
    /// `lua/metrics.lua` and [`Figures`].
    pub fn metrics(&self) -> String {
        self.key("metrics")
    }
}

/// An admitted purchase's place in the order sequence: the two halves of its order id,
/// as the admission script hands them out (Lua numbers are doubles and cannot hold the
/// 64-bit id itself). Written `<unix seconds>:<sequence>`. A sequence lost in a Redis
/// restart can hand one ticket out twice, so a purchase is named by its [`Entry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    seconds: i64,
    sequence: i64,
}

impl Ticket {
    pub fn new(seconds: i64, sequence: i64) -> Ticket {
        Ticket { seconds, sequence }
    }

    pub fn order_id(self) -> Result<OrderId, LayoutError> {
        OrderId::compose(self.seconds, self.sequence)
    }

    pub fn seconds(self) -> i64 {
        self.seconds
    }

    pub fn sequence(self) -> i64 {
        self.sequence
    }

    pub fn parse(text: &str) -> Option<Ticket> {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    pub user: UserId,
    pub ticket: Ticket,
}

impl Entry {
    pub fn parse(text: &str) -> Option<Entry> {
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

/// A buyer's record in the voucher's `buyers` hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// Her purchase is queued with this ticket: it holds a unit.
    Queued(Ticket),
    /// Her order is committed.
    Ordered(OrderId),
}

impl Record {
    pub fn parse(text: &str) -> Option<Record> {
        match text.split_once(':')? {
            ("q", ticket) => Ticket::parse(ticket).map(Record::Queued),
            ("o", order_id) => OrderId::parse(order_id).map(Record::Ordered),
            _ => None,
        }
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Queued(ticket) => write!(f, "q:{ticket}"),
            Record::Ordered(order_id) => write!(f, "o:{order_id}"),
        }
    }
}

/// What admission decided for the buyer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A unit is the buyer's: her purchase is queued with this ticket.
    Admitted(Ticket),
    /// Her earlier purchase is still queued, with this ticket.
    Queued(Ticket),
    AlreadyOrdered(OrderId),
    SoldOut,
    Ended,
    NotStarted,
    /// Redis holds no sale state for this voucher (it lost it, or the voucher does not
    /// exist), or one found behind MySQL.
    Missing,
    /// MySQL said lately that no voucher of this id exists.
    Unknown,
    /// The queue is at its safety limit; nothing was taken.
    Throttled,
}

/// The lease to drain the queue, with the first batch to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub token: String,
    pub batch: Vec<Entry>,
}

/// Admission's whole reply.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// No outcome, but her record says she holds this order (a sync recorded it).
    Held(OrderId),
    /// No longer queued and no outcome left: Redis lost it.
    Lost,
}

/// What `publish.lua` answered the drainer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Its own purchase is published (or it has none): the lease went on.
    Done,
    /// The lease or the batch is no longer its own: nothing was changed.
    Lost,
    /// The next batch to commit, under the extended lease.
    Batch(Vec<Entry>),
}

/// Who asks MySQL, at most once a second each.
#[derive(Debug, Clone, Copy)]
pub enum Probe {
    /// A buyer of a voucher Redis holds no sale for.
    Purchase(VoucherId),
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

type Parsed<T> = Result<T, UnexpectedReply>;

/// Decides the buyer in one round trip; see `lua/admission.lua`.
pub fn admit(voucher_id: VoucherId, user: UserId, limits: Limits) -> Command {
    let keys = Keys::new(voucher_id);
    Command::script(
        &ADMISSION,
        vec![
            keys.voucher(),
            keys.buyers(),
            keys.queue(),
            keys.lease(),
            ORDER_SEQUENCE_PREFIX.to_string(),
            keys.absent(),
            keys.metrics(),
        ],
        vec![
            user.to_string().into(),
            LEASE_MS.into(),
            limits.batch.into(),
            limits.max_queued.into(),
            KEPT_AFTER_END_MS.into(),
        ],
    )
}

pub fn parse_admission(reply: Vec<Reply>) -> Parsed<Admission> {
    let parsed = match reply.as_slice() {
        [Reply::Bytes(tag), Reply::Int(lead), rest @ ..] => {
            parse_decision(tag, rest).and_then(|(decision, rest)| match (*lead, rest) {
                (0, []) => Some(Admission {
                    decision,
                    lease: None,
                }),
                (1, [Reply::Bytes(token), entries @ ..]) => Some(Admission {
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
    parsed.ok_or(UnexpectedReply(reply))
}

/// The decision named `tag` with its fields, and what follows them.
fn parse_decision<'a>(tag: &[u8], rest: &'a [Reply]) -> Option<(Decision, &'a [Reply])> {
    let ticket = |rest: &'a [Reply]| match rest {
        [Reply::Int(seconds), Reply::Int(sequence), rest @ ..] => {
            let ticket = Ticket::new(*seconds, *sequence);
            ticket.order_id().ok().map(|_| (ticket, rest))
        }
        _ => None,
    };
    Some(match (tag, rest) {
        (b"admitted", rest) => ticket(rest).map(|(t, rest)| (Decision::Admitted(t), rest))?,
        (b"queued", rest) => ticket(rest).map(|(t, rest)| (Decision::Queued(t), rest))?,
        (b"already_ordered", [Reply::Bytes(id), rest @ ..]) => {
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

fn parse_entries(entries: &[Reply]) -> Option<Vec<Entry>> {
    entries
        .iter()
        .map(|entry| match entry {
            Reply::Bytes(bytes) => Entry::parse(std::str::from_utf8(bytes).ok()?),
            _ => None,
        })
        .collect()
}

/// One purchase of a batch as `publish.lua` takes it: its entry, its order id and
/// MySQL's verdict on it.
pub type Published = (Entry, OrderId, Verdict);

/// Records MySQL's verdicts on `batch` (the head of the queue, in order) and wakes its
/// buyers; see `lua/publish.lua`. `own` is the drainer's own queued purchase;
/// `mysql_orders` the voucher's orders in MySQL after the batch, which tells whether
/// Redis lost orders it had recorded (it rolled back).
pub fn publish(
    voucher_id: VoucherId,
    token: &str,
    own: Option<Entry>,
    batch: &[Published],
    mysql_orders: u64,
    limits: Limits,
) -> Command {
    let keys = Keys::new(voucher_id);
    let mut args: Vec<Arg> = vec![
        token.into(),
        LEASE_MS.into(),
        HANDOVER_MS.into(),
        limits.batch.into(),
        own.map(|entry| entry.to_string())
            .unwrap_or_default()
            .into(),
        (batch.len() as i64).into(),
    ];
    for (entry, order_id, verdict) in batch {
        let (outcome, order_id) = match verdict {
            Verdict::Ordered => ("ordered", *order_id),
            Verdict::Duplicate(held) => ("duplicate", *held),
            Verdict::SoldOut => ("sold_out", *order_id),
            Verdict::IdTaken => ("id_taken", *order_id),
        };
        args.extend([
            entry.to_string().into(),
            outcome.into(),
            order_id.to_string().into(),
        ]);
    }
    args.push((mysql_orders as i64).into());
    args.push(voucher_id.to_string().into());
    Command::script(
        &PUBLISH,
        vec![
            keys.voucher(),
            keys.buyers(),
            keys.queue(),
            keys.lease(),
            keys.done_prefix(),
            keys.metrics(),
            STALE.to_string(),
        ],
        args,
    )
}

pub fn parse_next(reply: Vec<Reply>) -> Parsed<Next> {
    let next = match reply.as_slice() {
        [tag] if tag.is_tag("done") => Some(Next::Done),
        [tag] if tag.is_tag("lost") => Some(Next::Lost),
        [tag, entries @ ..] if tag.is_tag("next") => parse_entries(entries).map(Next::Batch),
        _ => None,
    };
    next.ok_or(UnexpectedReply(reply))
}

/// Waits up to [`WAIT_SLICE`] for news of the queued purchase `entry`: a blocking pop of
/// its outcome list.
pub fn wait(voucher_id: VoucherId, entry: Entry) -> Command {
    Command::plain(
        "BLPOP",
        vec![Keys::new(voucher_id).done(entry).into(), WAIT_SLICE.into()],
    )
}

/// The news the wait popped; `None` when none came.
pub fn parse_wait(reply: Vec<Reply>) -> Parsed<Option<News>> {
    match reply.as_slice() {
        [] | [Reply::Nil] => Ok(None),
        [Reply::Bytes(_key), Reply::Bytes(news)] => {
            parse_news(news).map(Some).ok_or(UnexpectedReply(reply))
        }
        _ => Err(UnexpectedReply(reply)),
    }
}

/// For a queued purchase that waited without news; see `lua/claim.lua`.
pub fn claim(voucher_id: VoucherId, entry: Entry) -> Command {
    let keys = Keys::new(voucher_id);
    Command::script(
        &CLAIM,
        vec![keys.buyers(), keys.lease(), keys.done(entry)],
        vec![
            entry.user.to_string().into(),
            entry.ticket.to_string().into(),
            LEASE_MS.into(),
        ],
    )
}

pub fn parse_claim(reply: Vec<Reply>) -> Parsed<Claim> {
    let claim = match reply.as_slice() {
        [tag, Reply::Bytes(news)] if tag.is_tag("outcome") => parse_news(news).map(Claim::News),
        [tag] if tag.is_tag("lead") => Some(Claim::Lead),
        [tag] if tag.is_tag("wait") => Some(Claim::Wait),
        [tag, Reply::Bytes(order_id)] if tag.is_tag("held") => std::str::from_utf8(order_id)
            .ok()
            .and_then(OrderId::parse)
            .map(Claim::Held),
        [tag] if tag.is_tag("lost") => Some(Claim::Lost),
        _ => None,
    };
    claim.ok_or(UnexpectedReply(reply))
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

/// Takes `probe` for a second: whether this request may ask MySQL on its behalf. One
/// request per probe and second, so that a crowd (buyers pressing after Redis lost its
/// data, or anonymous clients asking for ids that do not exist) never becomes a crowd of
/// MySQL connections.
pub fn take_probe(probe: Probe) -> Command {
    Command::plain(
        "SET",
        vec![
            probe.key().into(),
            "1".into(),
            "NX".into(),
            "PX".into(),
            1_000.into(),
        ],
    )
}

/// A `SET ... NX` reply: whether it set the key.
pub fn parse_set_nx(reply: Vec<Reply>) -> Parsed<bool> {
    match reply.as_slice() {
        [Reply::Status(ok)] if ok == "OK" => Ok(true),
        [Reply::Nil] => Ok(false),
        _ => Err(UnexpectedReply(reply)),
    }
}

/// Whether MySQL said lately that no voucher of this id exists.
pub fn is_absent(voucher_id: VoucherId) -> Command {
    Command::plain("EXISTS", vec![Keys::new(voucher_id).absent().into()])
}

pub fn parse_exists(reply: Vec<Reply>) -> Parsed<bool> {
    match reply.as_slice() {
        [Reply::Int(n)] => Ok(*n == 1),
        _ => Err(UnexpectedReply(reply)),
    }
}

/// Keeps MySQL's word that the voucher does not exist, so that admission answers for it
/// without asking again (until a creation loads it).
pub fn mark_absent(voucher_id: VoucherId) -> Command {
    Command::plain(
        "SET",
        vec![
            Keys::new(voucher_id).absent().into(),
            "1".into(),
            "PX".into(),
            ABSENT_MS.into(),
        ],
    )
}

/// Counts a purchase outcome that no script saw: one the request reached after admission
/// (`busy`, `unavailable`).
pub fn count_outcome(voucher_id: VoucherId, outcome: &str) -> Command {
    Command::plain(
        "HINCRBY",
        vec![
            Keys::new(voucher_id).metrics().into(),
            format!("purchase:{outcome}").into(),
            1.into(),
        ],
    )
}

/// MySQL's health as the last `/health` probe found it.
pub fn mysql_health() -> Command {
    Command::plain("GET", vec![MYSQL_HEALTH.into()])
}

/// `Some(ok)` when a recent probe left its finding.
pub fn parse_mysql_health(reply: Vec<Reply>) -> Parsed<Option<bool>> {
    match reply.as_slice() {
        [Reply::Bytes(state)] => Ok(Some(state == b"ok")),
        [Reply::Nil] => Ok(None),
        _ => Err(UnexpectedReply(reply)),
    }
}

/// Keeps what a `/health` probe found of MySQL for the requests of the next seconds.
pub fn remember_mysql_health(ok: bool) -> Command {
    Command::plain(
        "SET",
        vec![
            MYSQL_HEALTH.into(),
            (if ok { "ok" } else { "down" }).into(),
            "PX".into(),
            MYSQL_HEALTH_MS.into(),
        ],
    )
}

/// Starts a sync: takes the voucher's sync lease for `token` (a `SET ... NX`).
pub fn begin_load(voucher_id: VoucherId, token: &str) -> Command {
    Command::plain(
        "SET",
        vec![
            Keys::new(voucher_id).sync_lease().into(),
            token.into(),
            "NX".into(),
            "PX".into(),
            SYNC_LEASE_MS.into(),
        ],
    )
}

/// Merges a page of the buyers MySQL holds orders for, and extends the sync's lease; see
/// `lua/stage.lua`.
pub fn stage_buyers(voucher_id: VoucherId, token: &str, buyers: &[(UserId, OrderId)]) -> Command {
    let keys = Keys::new(voucher_id);
    let mut args: Vec<Arg> = vec![token.into(), SYNC_LEASE_MS.into()];
    for (user, order_id) in buyers {
        args.push(user.to_string().into());
        args.push(Record::Ordered(*order_id).to_string().into());
    }
    Command::script(
        &STAGE,
        vec![keys.buyers(), keys.sync_lease(), keys.voucher()],
        args,
    )
}

/// Installs the terms at the end of the sync holding `token` ("" for a voucher just
/// created: no buyers, no lease involved); see `lua/load.lua`. Buyers and the queue stay
/// as they are.
pub fn load(voucher_id: VoucherId, token: &str, terms: &Terms) -> Command {
    let keys = Keys::new(voucher_id);
    Command::script(
        &LOAD,
        vec![
            keys.voucher(),
            keys.sync_lease(),
            keys.absent(),
            VOUCHERS.to_string(),
            STALE.to_string(),
            keys.buyers(),
            keys.metrics(),
        ],
        vec![
            (terms.stock as i64).into(),
            terms.begin_ms.into(),
            terms.end_ms.into(),
            (terms.initial_stock as i64).into(),
            terms.title.as_str().into(),
            terms.description.as_str().into(),
            token.into(),
            voucher_id.to_string().into(),
            KEPT_AFTER_END_MS.into(),
        ],
    )
}

/// Stage and load answer 1 when done and 0 when the sync lost its lease.
pub fn parse_done(reply: Vec<Reply>) -> Parsed<bool> {
    match reply.as_slice() {
        [Reply::Int(1)] => Ok(true),
        [Reply::Int(0)] => Ok(false),
        _ => Err(UnexpectedReply(reply)),
    }
}

/// The keys a failed creation leaves behind, for a `DEL`.
pub fn forget(voucher_id: VoucherId) -> Command {
    let keys = Keys::new(voucher_id);
    Command::plain(
        "DEL",
        [
            keys.voucher(),
            keys.buyers(),
            keys.queue(),
            keys.lease(),
            keys.metrics(),
        ]
        .into_iter()
        .map(Arg::from)
        .collect(),
    )
}

/// Takes the voucher off the set `GET /metrics` reports on.
pub fn unlist(voucher_id: VoucherId) -> Command {
    Command::plain("SREM", vec![VOUCHERS.into(), voucher_id.to_string().into()])
}

/// The members of one of the sets of voucher ids ([`VOUCHERS`], [`STALE`]).
pub fn voucher_set(set: &'static str) -> Command {
    Command::plain("SMEMBERS", vec![set.into()])
}

/// The ids of a set of voucher ids, in order; a member that is no id is skipped.
pub fn parse_voucher_set(reply: Vec<Reply>) -> Parsed<Vec<VoucherId>> {
    let mut ids = Vec::with_capacity(reply.len());
    for member in &reply {
        match member {
            Reply::Bytes(bytes) => {
                ids.extend(std::str::from_utf8(bytes).ok().and_then(VoucherId::parse))
            }
            _ => return Err(UnexpectedReply(reply)),
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// One voucher's figures, read at one instant; see `lua/metrics.lua`.
pub fn figures(voucher_id: VoucherId) -> Command {
    let keys = Keys::new(voucher_id);
    Command::script(
        &METRICS,
        vec![keys.voucher(), keys.queue(), keys.metrics()],
        vec![REPORTED_AFTER_END_MS.into()],
    )
}

/// `None` when Redis no longer holds the sale or it ended more than
/// [`REPORTED_AFTER_END_MS`] ago.
pub fn parse_figures(reply: Vec<Reply>) -> Parsed<Option<Figures>> {
    if reply.is_empty() {
        return Ok(None);
    }
    let figures = (|| {
        let [Reply::Int(units_left), Reply::Int(units_initial), Reply::Int(queued), Reply::Int(orders), Reply::Int(stale), counters @ ..] =
            reply.as_slice()
        else {
            return None;
        };
        if counters.len() % 2 != 0 {
            return None;
        }
        let counters = counters
            .chunks(2)
            .map(|pair| match pair {
                [Reply::Bytes(name), Reply::Bytes(count)] => Some((
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
    })();
    figures.map(Some).ok_or(UnexpectedReply(reply))
}

/// The voucher as Redis holds it, with Redis's clock; see `lua/view.lua`.
pub fn view(voucher_id: VoucherId) -> Command {
    Command::script(&VIEW, vec![Keys::new(voucher_id).voucher()], Vec::new())
}

/// `None` when Redis has no complete state for the voucher.
pub fn parse_view(reply: Vec<Reply>) -> Parsed<Option<View>> {
    let number = |value: &Reply| match value {
        Reply::Bytes(bytes) => std::str::from_utf8(bytes).ok()?.parse::<i64>().ok(),
        Reply::Int(n) => Some(*n),
        _ => None,
    };
    let string = |value: &Reply| match value {
        Reply::Bytes(bytes) => String::from_utf8(bytes.clone()).ok(),
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
    view.map(Some).ok_or(UnexpectedReply(reply))
}

/// `PING`'s reply.
pub fn parse_pong(reply: Vec<Reply>) -> Parsed<()> {
    match reply.as_slice() {
        [Reply::Status(pong)] if pong == "PONG" => Ok(()),
        _ => Err(UnexpectedReply(reply)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order_id::EPOCH;

    fn bin(text: &str) -> Reply {
        Reply::text(text)
    }

    fn int(n: i64) -> Reply {
        Reply::Int(n)
    }

    fn voucher(raw: u64) -> VoucherId {
        VoucherId::from_raw(raw)
    }

    #[test]
    fn keys_share_the_voucher_hash_tag() {
        let keys = Keys::new(voucher(42));
        assert_eq!(keys.voucher(), "seckill:{42}:voucher");
        assert_eq!(keys.buyers(), "seckill:{42}:buyers");
        assert_eq!(keys.queue(), "seckill:{42}:queue");
        assert_eq!(keys.lease(), "seckill:{42}:lease");
        let entry = Entry {
            user: UserId::from_raw(9),
            ticket: Ticket::new(EPOCH + 1, 7),
        };
        assert_eq!(keys.done(entry), "seckill:{42}:done:9:1704067201:7");
        assert_eq!(keys.sync_lease(), "seckill:{42}:sync");
    }

    #[test]
    fn parses_every_admission_reply() {
        let t = Ticket::new(EPOCH + 10, 3);
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
                                ticket: Ticket::new(EPOCH + 9, 1),
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
            vec![Reply::Nil],
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
    fn entries_records_and_news_read_as_the_scripts_write_them() {
        let entry = Entry::parse("12:1704067210:3").unwrap();
        assert_eq!(entry.user, UserId::from_raw(12));
        assert_eq!(entry.to_string(), "12:1704067210:3");
        for bad in ["", "12", "12:1704067210", "0:1:2", "x:1:2", "12:1:x"] {
            assert_eq!(Entry::parse(bad), None, "{bad:?}");
        }
        for text in ["q:1704067210:3", "o:77"] {
            assert_eq!(Record::parse(text).unwrap().to_string(), text);
        }
        for bad in ["", "q:", "o:0", "x:1", "q:1"] {
            assert_eq!(Record::parse(bad), None, "{bad:?}");
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
            Reply::Int(1500),
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

    #[test]
    fn publish_passes_each_verdict_with_the_order_id_it_is_about() {
        let entry = Entry::parse("3:1704067210:1").unwrap();
        let own = OrderId::from_raw(1);
        let held = OrderId::from_raw(2);
        let batch = [
            (entry, own, Verdict::Ordered),
            (entry, own, Verdict::Duplicate(held)),
        ];
        let Command::Script { args, .. } =
            publish(voucher(1), "t", None, &batch, 9, Limits::SHIPPED)
        else {
            panic!("a script")
        };
        let args: Vec<String> = args.iter().map(Arg::to_string).collect();
        assert_eq!(
            args,
            [
                "t",
                "2000",
                "500",
                "256",
                "",
                "2",
                "3:1704067210:1",
                "ordered",
                "1",
                "3:1704067210:1",
                "duplicate",
                "2",
                "9",
                "1"
            ]
        );
    }
}
