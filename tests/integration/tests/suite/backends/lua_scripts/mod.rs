//! The Lua scripts in `lua/`, run against the real Redis exactly as the component calls
//! them: the component's own commands (`seckill_core::sale`), keys, arguments and
//! replies. A file a script (a few share one, a large one has several); the helpers
//! their tests share are here.

mod admission;
mod buckets;
mod claim;
mod clear;
mod draw;
mod end_turn;
mod metrics;
mod order_sequence;
mod probed;
mod publish;
mod publish_buckets;
mod publish_lease;
mod quantities;
mod sync;
mod unlock;
mod view;

use std::collections::BTreeMap;

use redis::AsyncCommands;
use seckill_core::ledger::{Ledger, ReturnKind, Returned};
use seckill_core::sale::{
    Admission, Admit, Decision, Entry, Lease, Limits, LineAsk, Next, Published, ReadView, Record,
    Restock, Route, Shown, Sightings, Ticket,
};
use seckill_core::verdict::Verdict;
use seckill_core::{BucketId, OrderId, UserId};
use seckill_tests::drivers::scripts::{outcome, Sale};

use crate::backends::shared::{assert_admitted, plain};

/// The first press after a sync: it also sweeps, as MySQL may hold deadlines Redis lost.
fn first_after_sync(decision: Decision) -> Admission {
    Admission {
        sweep: true,
        ..plain(decision)
    }
}

/// A press after one that took the sweep lease and has not ended its sweep: it hears
/// that another request is sweeping.
fn behind_a_sweep(decision: Decision) -> Admission {
    Admission {
        sweeping: true,
        ..plain(decision)
    }
}

/// The lease held under the entry `token`, with the first batch `batch`.
fn lead(token: Entry, batch: &[Entry]) -> Option<Lease> {
    Some(Lease {
        token: token.to_string(),
        batch: batch.to_vec(),
    })
}

/// The ticket of an admission that must have been admitted.
fn ticket(admission: &Admission) -> Ticket {
    match admission.decision {
        Decision::Admitted(ticket) => ticket,
        _ => panic!("not admitted: {admission:?}"),
    }
}

fn buyer(raw: u64) -> UserId {
    UserId::from_raw(raw)
}

fn order(raw: u64) -> OrderId {
    OrderId::from_raw(raw)
}

fn entry(user: u64, ticket: Ticket) -> Entry {
    Entry {
        user: buyer(user),
        ticket,
    }
}

/// The order id of a ticket.
fn id_of(ticket: Ticket) -> OrderId {
    ticket.order_id().expect("a ticket")
}

/// The news a queued purchase of `ticket` finds when MySQL's word on it is `verdict`.
fn told(verdict: Verdict, ticket: Ticket) -> [String; 1] {
    [outcome(verdict, id_of(ticket))]
}

/// A queued purchase with MySQL's verdict on it, as publish.lua takes it.
fn verdict(entry: Entry, verdict: Verdict) -> Published {
    (entry, id_of(entry.ticket), verdict)
}

fn ordered(entry: Entry) -> Published {
    verdict(entry, Verdict::Ordered)
}

/// Admits `users` one after the other; their tickets, in order.
async fn admit_all(sale: &Sale, users: impl IntoIterator<Item = u64>) -> Vec<Ticket> {
    let mut tickets = Vec::new();
    for user in users {
        tickets.push(ticket(&sale.admit(buyer(user)).await));
    }
    tickets
}

/// Admits `users` in order; their purchases as they stand in the queue.
async fn entries<const N: usize>(sale: &Sale, users: [u64; N]) -> [Entry; N] {
    let tickets = admit_all(sale, users).await;
    std::array::from_fn(|i| entry(users[i], tickets[i]))
}

/// Publishes as the drainer whose own purchase is `own`, holding the lease under its
/// entry.
async fn publish_own(sale: &Sale, own: Entry, batch: &[Published]) -> redis::RedisResult<Next> {
    sale.publish(&own.to_string(), Some(own), batch).await
}

/// [`publish_own`], with MySQL holding `orders` of the voucher's orders once the batch
/// committed.
async fn publish_own_counted(
    sale: &Sale,
    own: Entry,
    batch: &[Published],
    orders: u64,
) -> redis::RedisResult<Next> {
    let mysql = Ledger {
        orders,
        returned_event: 0,
        stock: 0,
    };
    let token = own.to_string();
    sale.publish_counted(&token, Some(own), batch, mysql, Limits::SHIPPED)
        .await
}

/// Keeps the drainer's lease, whoever holds it, for the rest of the test: a slow machine
/// must not let it lapse between two steps.
async fn hold_lease(sale: &Sale) {
    let held: bool = sale
        .conn
        .clone()
        .pexpire(sale.keys().lease(), 600_000)
        .await
        .unwrap();
    assert!(held, "no lease to hold");
}

async fn pttl(sale: &Sale, key: String) -> i64 {
    sale.conn.clone().pttl(key).await.unwrap()
}

/// When `key` expires, in unix milliseconds.
async fn expire_at(sale: &Sale, key: String) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query_async(&mut sale.conn.clone())
        .await
        .unwrap()
}

/// The content of one Redis key.
#[derive(Debug, PartialEq, Eq)]
enum Content {
    Text(String),
    Hash(BTreeMap<String, String>),
    List(Vec<String>),
}

/// Every key of the voucher's sale state with its content (TTLs aside): what a script
/// that must change nothing is compared on.
async fn state(sale: &Sale) -> BTreeMap<String, Content> {
    let mut conn = sale.conn.clone();
    // All of a voucher's keys share the hash tag `{<voucher id>}` (`sale::Keys`).
    let names: Vec<String> = conn
        .keys(format!("seckill:{{{}}}:*", sale.voucher))
        .await
        .unwrap();
    let mut state = BTreeMap::new();
    // The counters count every decision, even one that changes nothing else; `counters`
    // reads them.
    let metrics = sale.keys().metrics();
    for name in names.into_iter().filter(|name| *name != metrics) {
        let kind: String = redis::cmd("TYPE")
            .arg(&name)
            .query_async(&mut conn)
            .await
            .unwrap();
        let content = match kind.as_str() {
            "string" => Content::Text(conn.get(&name).await.unwrap()),
            "hash" => Content::Hash(conn.hgetall(&name).await.unwrap()),
            "list" => Content::List(conn.lrange(&name, 0, -1).await.unwrap()),
            other => panic!("{name} is a {other}"),
        };
        state.insert(name, content);
    }
    state
}

/// The buyers' records, by user.
async fn records(sale: &Sale) -> BTreeMap<u64, Record> {
    sale.records()
        .await
        .into_iter()
        .map(|(user, record)| (user.raw(), record))
        .collect()
}

/// An id above any that MySQL hands out or a test loads: once Redis knows the highest
/// voucher id, one above it does not exist.
const ABOVE_EVERY_ID: BucketId = BucketId::from_raw(i64::MAX as u64);

/// `lua/view.lua` for the voucher `voucher`, as the component reads it.
async fn read_view(sale: &Sale, voucher: BucketId) -> Shown {
    sale.call(&ReadView {
        voucher_id: voucher,
    })
    .await
    .unwrap()
}

async fn orders_recorded(sale: &Sale) -> i64 {
    let orders: Option<i64> = sale.voucher_get("orders").await;
    orders.unwrap_or(0)
}

/// Admission at the bucket `sale`, the buyer's own, by a caller that knows the sale's
/// buckets.
async fn admit_routed(sale: &Sale, user: u64) -> Admission {
    admit_on(sale, user, Route::Home).await
}

async fn admit_on(sale: &Sale, user: u64, route: Route) -> Admission {
    admit_seeing(sale, user, route, Sightings::default()).await
}

async fn admit_seeing(sale: &Sale, user: u64, route: Route, sightings: Sightings) -> Admission {
    sale.call(&Admit {
        voucher_id: sale.voucher,
        user: buyer(user),
        limits: Limits::SHIPPED,
        route,
        draw_place: 0,
        sightings,
        units: 1,
        line: LineAsk::Press,
    })
    .await
    .unwrap()
}

/// The unit of a cancelled order (of a buyer who never pressed) back to a sale that has
/// applied no return yet.
async fn give_one_back(sale: &Sale) {
    let returned = Returned {
        event: 1,
        kind: ReturnKind::Cancelled {
            order_id: order(99),
            user: buyer(98),
        },
        units: 1,
    };
    let restock = Restock {
        voucher_id: sale.voucher,
        returns: &[returned],
        after: 0,
        swept: None,
    };
    let restocked = sale.call(&restock).await.unwrap();
    assert_eq!(restocked.map(|restocked| restocked.given), Some(1));
}
