//! The Lua scripts in `lua/`, run against the real Redis exactly as the component calls
//! them: the component's own commands (`seckill_core::sale`), keys, arguments and
//! replies.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use redis::AsyncCommands;
use seckill_core::buckets::ALL_OUT_MS;
use seckill_core::ledger::Ledger;
use seckill_core::ledger::Returned;
use seckill_core::redis::{args, Command};
use seckill_core::sale::{
    Admission, Admit, AwaitTurn, Call, Claimed, Clear, Count, Counted, Decision, EndSale, EndTurn,
    Entry, Figures, Installer, Lease, Limits, MarkAllOut, Marked, News, Next, Pointer, Probed,
    Published, ReadFigures, ReadView, Record, Reopen, Restock, Route, Shown, Sighting, Sightings,
    TakeTurn, Terms, Ticket, Unlock, View, WalkEnd, WalkEnded, BATCH, HANDOVER_MS,
    KEPT_AFTER_END_MS, LEASE_MS, MAX_QUEUED, STALE,
};
use seckill_core::verdict::Verdict;
use seckill_core::{BucketId, OrderId, UserId};
use seckill_tests::backends::{fresh_voucher_id, redis};
use seckill_tests::faults::{Persistence, RedisServer};
use seckill_tests::invariants;
use seckill_tests::scripts::{self, commit_batch, create_voucher, orders_of, outcome, Sale};

use super::shared::{plain, terms_at};

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

/// Asserts that a press was admitted, whatever its ticket.
#[track_caller]
fn assert_admitted(admission: &Admission) {
    assert!(
        matches!(admission.decision, Decision::Admitted(_)),
        "{admission:?}"
    );
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

/// A queued purchase with MySQL's verdict on it, as publish.lua takes it.
fn verdict(entry: Entry, verdict: Verdict) -> Published {
    (entry, id_of(entry.ticket), verdict)
}

fn ordered(entry: Entry) -> Published {
    verdict(entry, Verdict::Ordered)
}

/// Admission with the queue limit `max_queued`.
fn max_queued(max_queued: i64) -> Limits {
    Limits {
        batch: BATCH,
        max_queued,
        ..Limits::SHIPPED
    }
}

/// Admits `users` one after the other; their tickets, in order.
async fn admit_all(sale: &Sale, users: impl IntoIterator<Item = u64>) -> Vec<Ticket> {
    let mut tickets = Vec::new();
    for user in users {
        tickets.push(ticket(&sale.admit(buyer(user)).await));
    }
    tickets
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

/// A sequence prefix of this test's own: tests that reset or use up a second's sequence
/// keep away from the one every other test of the slot draws from.
fn private_sequence() -> String {
    format!("seckill-test:order-seq:{}", fresh_voucher_id())
}

/// Admission as the component calls it, drawing from the sequence under `prefix`; the
/// admitted ticket.
async fn admit_from(sale: &Sale, prefix: &str, user: u64) -> redis::RedisResult<Ticket> {
    let admission = sale.try_admit_from(buyer(user), prefix).await?;
    Ok(ticket(&admission))
}

// ---- admission ----

#[tokio::test]
async fn stock_s_admits_exactly_s_of_many_concurrent_buyers() {
    let sale = Sale::live(20).await;
    // One connection per caller, as each Spin instance opens its own.
    let mut callers = Vec::new();
    for user in 1..=300u64 {
        callers.push((user, sale.another_connection().await));
    }
    let tasks: Vec<_> = callers
        .into_iter()
        .map(|(user, sale)| tokio::spawn(async move { (user, sale.admit(buyer(user)).await) }))
        .collect();
    let mut admitted = BTreeMap::new();
    let mut sold_out = 0;
    let mut leads = Vec::new();
    for task in tasks {
        let (user, admission) = task.await.unwrap();
        match &admission.decision {
            Decision::Admitted(ticket) => {
                assert!(admitted.insert(user, *ticket).is_none());
            }
            Decision::SoldOut => sold_out += 1,
            other => panic!("unexpected {other:?}"),
        }
        if let Some(lease) = admission.lease {
            leads.push((user, admission.decision, lease));
        }
    }
    assert_eq!((admitted.len(), sold_out), (20, 280));
    let tickets: HashSet<&Ticket> = admitted.values().collect();
    assert_eq!(tickets.len(), 20, "a ticket handed out twice");
    assert_eq!(sale.stock().await, Some(0));

    let queue = sale.queue().await;
    assert_eq!(queue.len(), 20);
    let queued: BTreeMap<u64, Ticket> = queue.iter().map(|e| (e.user.raw(), e.ticket)).collect();
    assert_eq!(queued, admitted);
    let expected: BTreeMap<u64, Record> = admitted
        .iter()
        .map(|(user, ticket)| (*user, Record::Queued(*ticket)))
        .collect();
    assert_eq!(records(&sale).await, expected);

    // The first admission found a quiet queue: it alone leads, with its own entry.
    let [(user, Decision::Admitted(ticket), Lease { token, batch })] = leads.as_slice() else {
        panic!("not exactly one admitted lead: {leads:?}")
    };
    let own = entry(*user, *ticket);
    assert_eq!(token, &own.to_string());
    assert_eq!(batch, &[own]);
    assert_eq!(queue[0], own);
    assert_eq!(sale.lease().await, Some(own.to_string()));
}

#[tokio::test]
async fn one_buyer_pressing_many_times_at_once_is_admitted_once() {
    let sale = Sale::live(100).await;
    let mut presses = Vec::new();
    for _ in 0..40 {
        presses.push(sale.another_connection().await);
    }
    let tasks: Vec<_> = presses
        .into_iter()
        .map(|sale| tokio::spawn(async move { sale.admit(buyer(7)).await }))
        .collect();
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }
    let admitted: Vec<&Admission> = replies
        .iter()
        .filter(|r| matches!(r.decision, Decision::Admitted(_)))
        .collect();
    let [first] = admitted.as_slice() else {
        panic!("admitted {} times", admitted.len())
    };
    let t = ticket(first);
    assert_eq!(
        first.lease,
        lead(entry(7, t), &[entry(7, t)]),
        "the first press leads"
    );
    let queued = replies
        .iter()
        .filter(|r| **r == plain(Decision::Queued(t)))
        .count();
    assert_eq!(queued, 39);
    assert_eq!(sale.stock().await, Some(99));
    assert_eq!(sale.queue().await, [entry(7, t)]);
    assert_eq!(sale.records().await, [(buyer(7), Record::Queued(t))]);
}

#[tokio::test]
async fn the_window_follows_redis_time_and_a_buyer_hears_of_her_purchase_after_the_end() {
    let sale = Sale::created(5).await;
    let now = sale.now_ms().await;

    // Before the beginning, nobody is read, not even a buyer MySQL holds an order of.
    sale.load(5, now + 60_000, now + 120_000, &[(buyer(5), order(500))])
        .await;
    let before = state(&sale).await;
    for user in [5, 1, 6] {
        assert_eq!(sale.admit(buyer(user)).await, plain(Decision::NotStarted));
    }
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.stock().await, Some(5));

    // An admin's sync moves the window to now: buyer 1 is admitted, and stays queued.
    sale.load(5, now - 60_000, now + 3_600_000, &[]).await;
    let t1 = ticket(&sale.admit(buyer(1)).await);
    hold_lease(&sale).await;

    // After the end: a buyer with an order, or a purchase still queued, hears of it. The
    // first decision after the end marks the sale ended (the sale's clock never goes
    // back); the others change nothing.
    sale.load(4, now - 120_000, now - 60_000, &[]).await;
    assert_eq!(sale.admit(buyer(6)).await, plain(Decision::Ended));
    let before = state(&sale).await;
    assert_eq!(
        sale.admit(buyer(5)).await,
        plain(Decision::AlreadyOrdered(order(500)))
    );
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Queued(t1)));
    assert_eq!(sale.admit(buyer(6)).await, plain(Decision::Ended));
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.stock().await, Some(4));
    assert_eq!(sale.queue().await, [entry(1, t1)]);
}

#[tokio::test]
async fn a_voucher_without_state_is_missing_unless_it_is_known_not_to_exist() {
    let sale = Sale::created(5).await;
    let mut conn = sale.conn.clone();
    // What MySQL says of it, kept as a lookup keeps it: it exists, and so do the ids up to
    // the highest MySQL handed out. Any id above that does not exist.
    let lookup = scripts::lookup(sale.voucher).await.unwrap();
    assert!(lookup.terms.is_some());
    let probed = |absent| Probed {
        voucher_id: sale.voucher,
        absent,
        highest: lookup.highest,
    };
    sale.call(&probed(false)).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    let above = Sale {
        conn: sale.conn.clone(),
        voucher: ABOVE_EVERY_ID,
    };
    assert_eq!(above.admit(buyer(1)).await, plain(Decision::Unknown));
    // MySQL's word that no such voucher exists.
    sale.call(&probed(true)).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Unknown));
    // A creation disproves it.
    let absent = sale.keys().absent();
    let now = sale.now_ms().await;
    sale.load(3, now - 1000, now + 60_000, &[]).await;
    let exists: bool = conn.exists(&absent).await.unwrap();
    assert!(!exists, "a load left the voucher marked absent");
    sale.lose(&[sale.keys().voucher()]).await;
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    let voucher = sale.keys().voucher();
    let _: () = conn.hset(&voucher, "stock", 5).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    let now = sale.now_ms().await;
    let _: () = conn.hset(&voucher, "begin_ms", now - 1000).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    // The same without `begin_ms`.
    let _: () = conn.hdel(&voucher, "begin_ms").await.unwrap();
    let _: () = conn.hset(&voucher, "end_ms", now + 60_000).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    assert_eq!(sale.record(buyer(1)).await, None);
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.stock().await, Some(5));
    let _: () = conn.del(&voucher).await.unwrap();
}

#[tokio::test]
async fn admission_throttles_at_the_queue_limit_without_taking_anything() {
    let sale = Sale::live(10).await;
    let now = sale.now_ms().await;
    sale.load(10, now - 60_000, now + 3_600_000, &[(buyer(9), order(900))])
        .await;
    let mut tickets = Vec::new();
    for user in 1..=3 {
        let admission = sale
            .try_admit_limited(buyer(user), max_queued(3))
            .await
            .unwrap();
        tickets.push(ticket(&admission));
    }
    hold_lease(&sale).await;
    let before = state(&sale).await;
    assert_eq!(
        sale.try_admit_limited(buyer(4), max_queued(3))
            .await
            .unwrap(),
        plain(Decision::Throttled)
    );
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.stock().await, Some(7));
    assert_eq!(sale.record(buyer(4)).await, None);
    assert_eq!(sale.queue().await.len(), 3);
    // A full queue still answers those it knows.
    assert_eq!(
        sale.try_admit_limited(buyer(2), max_queued(3))
            .await
            .unwrap(),
        plain(Decision::Queued(tickets[1]))
    );
    assert_eq!(
        sale.try_admit_limited(buyer(9), max_queued(3))
            .await
            .unwrap(),
        plain(Decision::AlreadyOrdered(order(900)))
    );
    assert_eq!(state(&sale).await, before);
    // One place freed, one buyer in.
    let head = entry(1, tickets[0]);
    let published = sale
        .publish(&head.to_string(), Some(head), &[ordered(head)])
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.lease().await, Some(entry(2, tickets[1]).to_string()));
    hold_lease(&sale).await;
    let admission = sale
        .try_admit_limited(buyer(4), max_queued(3))
        .await
        .unwrap();
    assert!(matches!(admission.decision, Decision::Admitted(_)));
    assert_eq!(
        sale.try_admit_limited(buyer(5), max_queued(3))
            .await
            .unwrap()
            .decision,
        Decision::Throttled
    );
    // Sold out is still sold out, throttled or not.
    let sold = Sale::live(1).await;
    sold.admit(buyer(1)).await;
    assert_eq!(
        sold.try_admit_limited(buyer(2), max_queued(1))
            .await
            .unwrap()
            .decision,
        Decision::SoldOut
    );
}

// ---- the lease ----

#[tokio::test]
async fn the_first_admission_of_a_quiet_queue_leads_with_its_own_entry() {
    let sale = Sale::live(5).await;
    let first = sale.admit(buyer(1)).await;
    let t1 = ticket(&first);
    assert_eq!(first.lease, lead(entry(1, t1), &[entry(1, t1)]));
    assert_eq!(sale.lease().await, Some(entry(1, t1).to_string()));
    let lease_ttl = pttl(&sale, sale.keys().lease()).await;
    assert!(0 < lease_ttl && lease_ttl <= LEASE_MS, "{lease_ttl}");
    hold_lease(&sale).await;

    let second = sale.admit(buyer(2)).await;
    let t2 = ticket(&second);
    assert_eq!(second, plain(Decision::Admitted(t2)));
    assert_eq!(sale.lease().await, Some(entry(1, t1).to_string()));
    assert_eq!(sale.queue().await, [entry(1, t1), entry(2, t2)]);
    assert_eq!(sale.stock().await, Some(3));
}

/// Checks a rescuer's lease: "r:<seconds>:<microseconds>:<user>", held in Redis.
async fn assert_rescuer(sale: &Sale, admission: &Admission, user: u64, batch: &[Entry]) {
    let Lease { token, batch: got } = admission.lease.as_ref().expect("no lease");
    let parts: Vec<&str> = token.split(':').collect();
    assert_eq!(parts.len(), 4, "{token}");
    assert_eq!(parts[0], "r");
    let seconds: i64 = parts[1].parse().unwrap();
    assert!((sale.now_ms().await / 1000 - seconds).abs() <= 2, "{token}");
    assert!(parts[2].parse::<u64>().unwrap() < 1_000_000, "{token}");
    assert_eq!(parts[3], user.to_string());
    assert_eq!(got, batch);
    assert_eq!(sale.lease().await.as_ref(), Some(token));
}

#[tokio::test]
async fn any_request_finding_the_lease_free_over_a_queue_takes_it() {
    let sale = Sale::live(2).await;
    let now = sale.now_ms().await;
    sale.load(2, now - 60_000, now + 3_600_000, &[(buyer(9), order(900))])
        .await;
    let tickets = admit_all(&sale, [1, 2]).await;
    hold_lease(&sale).await;
    let queue = vec![entry(1, tickets[0]), entry(2, tickets[1])];
    assert_eq!(
        sale.admit(buyer(3)).await,
        behind_a_sweep(Decision::SoldOut)
    );

    for (user, decision) in [
        (3, Decision::SoldOut),
        (9, Decision::AlreadyOrdered(order(900))),
        (1, Decision::Queued(tickets[0])),
    ] {
        sale.expire_lease().await;
        let admission = sale.admit(buyer(user)).await;
        assert_eq!(admission.decision, decision);
        assert_rescuer(&sale, &admission, user, &queue).await;
        // Held: the next one does not lead (with nothing for her, she hears of the sweep
        // the first press took).
        let held = match decision {
            Decision::SoldOut => behind_a_sweep(decision),
            _ => plain(decision),
        };
        assert_eq!(sale.admit(buyer(user)).await, held);
    }
    sale.load(0, now - 120_000, now - 60_000, &[]).await;
    sale.expire_lease().await;
    let admission = sale.admit(buyer(4)).await;
    assert_eq!(admission.decision, Decision::Ended);
    assert_rescuer(&sale, &admission, 4, &queue).await;

    // Rescuers take nothing.
    assert_eq!(sale.queue().await, queue);
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([
            (1, Record::Queued(tickets[0])),
            (2, Record::Queued(tickets[1])),
            (9, Record::Ordered(order(900), 1)),
        ])
    );
    assert_eq!(sale.stock().await, Some(0));

    // Nothing queued: nobody leads.
    let quiet = Sale::live(0).await;
    assert_eq!(quiet.admit(buyer(1)).await, plain(Decision::SoldOut));
    assert_eq!(quiet.lease().await, None);
}

#[tokio::test]
async fn the_first_batch_holds_at_most_the_batch_size() {
    let sale = Sale::live(10).await;
    let limits = Limits {
        batch: 3,
        max_queued: MAX_QUEUED,
        ..Limits::SHIPPED
    };
    let mut entries = Vec::new();
    for user in 1..=5 {
        let admission = sale.try_admit_limited(buyer(user), limits).await.unwrap();
        entries.push(entry(user, ticket(&admission)));
    }
    sale.expire_lease().await;
    let admission = sale.try_admit_limited(buyer(6), limits).await.unwrap();
    let t6 = ticket(&admission);
    // Its own entry is sixth: the batch is the head of the queue.
    assert_eq!(admission.lease, lead(entry(6, t6), &entries[..3]));
    assert_eq!(sale.lease().await, Some(entry(6, t6).to_string()));
    assert_eq!(sale.queue().await.len(), 6);
}

#[tokio::test]
async fn a_full_queue_whose_drainer_is_gone_is_drained_by_a_throttled_request() {
    let sale = Sale::live(10).await;
    let mut queue = Vec::new();
    for user in 1..=3 {
        let admission = sale
            .try_admit_limited(buyer(user), max_queued(3))
            .await
            .unwrap();
        queue.push(entry(user, ticket(&admission)));
    }
    // The queue is at its limit and its drainer died: its lease lapsed.
    sale.expire_lease().await;
    let before = state(&sale).await;
    let admission = sale
        .try_admit_limited(buyer(4), max_queued(3))
        .await
        .unwrap();
    assert_eq!(admission.decision, Decision::Throttled);
    assert_rescuer(&sale, &admission, 4, &queue).await;
    hold_lease(&sale).await;
    // The lease is all it took: no unit, no record, no place in the queue.
    let mut after = state(&sale).await;
    let token = admission.lease.clone().unwrap().token;
    assert_eq!(
        after.remove(&sale.keys().lease()),
        Some(Content::Text(token.clone()))
    );
    assert_eq!(after, before);
    assert_eq!(sale.stock().await, Some(7));
    assert_eq!(sale.record(buyer(4)).await, None);
    // Held: the next throttled request does not lead.
    assert_eq!(
        sale.try_admit_limited(buyer(5), max_queued(3))
            .await
            .unwrap(),
        plain(Decision::Throttled)
    );
    // Its batch published, the queue has room again.
    let published = sale
        .publish(&token, None, &[ordered(queue[0]), ordered(queue[1])])
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.lease().await, Some(queue[2].to_string()));
    let admitted = sale
        .try_admit_limited(buyer(4), max_queued(3))
        .await
        .unwrap();
    assert!(
        matches!(admitted.decision, Decision::Admitted(_)),
        "{admitted:?}"
    );
    assert_eq!(sale.stock().await, Some(6));

    // A smaller batch size: the rescuer's batch is the queue's head.
    let sale = Sale::live(10).await;
    let tickets = admit_all(&sale, 1..=3).await;
    sale.expire_lease().await;
    let admission = sale
        .try_admit_limited(
            buyer(4),
            Limits {
                batch: 2,
                max_queued: 3,
                ..Limits::SHIPPED
            },
        )
        .await
        .unwrap();
    assert_eq!(admission.decision, Decision::Throttled);
    let head = [entry(1, tickets[0]), entry(2, tickets[1])];
    assert_rescuer(&sale, &admission, 4, &head).await;
    assert_eq!(sale.queue().await.len(), 3);
    assert_eq!(sale.stock().await, Some(7));
}

// ---- publish ----

#[tokio::test]
async fn publish_records_each_outcome_and_wakes_every_buyer_but_the_drainer() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=4).await;
    hold_lease(&sale).await;
    assert_eq!(sale.stock().await, Some(6));
    let e: Vec<Entry> = (0..4).map(|i| entry(i as u64 + 1, t[i])).collect();
    // MySQL holds the three orders named.
    let published = publish_own_counted(
        &sale,
        e[0],
        &[
            ordered(e[0]),
            verdict(e[1], Verdict::Duplicate(order(777), 1)),
            ordered(e[2]),
            verdict(e[3], Verdict::SoldOut),
        ],
        3,
    )
    .await
    .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([
            (1, Record::Ordered(id_of(t[0]), 1)),
            (2, Record::Ordered(order(777), 1)),
            (3, Record::Ordered(id_of(t[2]), 1)),
        ])
    );
    // MySQL had no unit left: Redis's count was ahead.
    assert_eq!(sale.stock().await, Some(0));
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.lease().await, None);
    assert!(sale.news(e[0]).await.is_empty());
    assert_eq!(
        sale.news(e[1]).await,
        [outcome(Verdict::Duplicate(order(777), 1), id_of(t[1]))]
    );
    assert_eq!(
        sale.news(e[2]).await,
        [outcome(Verdict::Ordered, id_of(t[2]))]
    );
    assert_eq!(
        sale.news(e[3]).await,
        [outcome(Verdict::SoldOut, id_of(t[3]))]
    );
    for entry in &e[1..] {
        let ttl = pttl(&sale, sale.keys().done(*entry)).await;
        assert!(0 < ttl && ttl <= 60_000, "{ttl}");
    }
    assert_eq!(
        sale.admit(buyer(2)).await,
        plain(Decision::AlreadyOrdered(order(777)))
    );
    assert_eq!(sale.admit(buyer(4)).await, plain(Decision::SoldOut));
}

/// A publication is an audit of MySQL's orders: the presses after it do not sweep to
/// audit, unless MySQL holds fewer orders than Redis learnt of once the batch is recorded
/// (a failover lost some): the next press then sweeps, and its audit heals them.
#[tokio::test]
async fn a_publication_finding_mysql_short_of_orders_makes_the_next_press_sweep() {
    for (orders_in_mysql, sweeps) in [(2, false), (1, true)] {
        let sale = Sale::live(5).await;
        let t = admit_all(&sale, 1..=2).await;
        hold_lease(&sale).await;
        let e: Vec<Entry> = (0..2).map(|i| entry(i as u64 + 1, t[i])).collect();
        let batch = [ordered(e[0]), ordered(e[1])];
        let published = publish_own_counted(&sale, e[0], &batch, orders_in_mysql).await;
        assert_eq!(published.unwrap(), Next::Done);
        let sweep_at: Option<i64> = sale
            .conn
            .clone()
            .hget(sale.keys().voucher(), "sweep_at")
            .await
            .unwrap();
        assert_eq!(
            sweep_at == Some(0),
            sweeps,
            "{orders_in_mysql}: {sweep_at:?}"
        );
        assert_eq!(
            sale.admit(buyer(3)).await.sweep,
            sweeps,
            "{orders_in_mysql}"
        );
    }
}

#[tokio::test]
async fn id_taken_gives_the_unit_back_and_the_buyer_may_buy_again() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, [1, 2]).await;
    hold_lease(&sale).await;
    assert_eq!(sale.stock().await, Some(8));
    let drainer = entry(1, t[0]);
    let published = sale
        .publish(
            &drainer.to_string(),
            Some(drainer),
            &[ordered(drainer), verdict(entry(2, t[1]), Verdict::IdTaken)],
        )
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.stock().await, Some(9));
    assert_eq!(sale.record(buyer(2)).await, None);
    assert_eq!(
        sale.news(entry(2, t[1])).await,
        [outcome(Verdict::IdTaken, id_of(t[1]))]
    );
    let again = sale.admit(buyer(2)).await;
    let t2 = ticket(&again);
    assert_ne!(t2, t[1]);
    assert_eq!(again.lease, lead(entry(2, t2), &[entry(2, t2)]));
    assert_eq!(sale.stock().await, Some(8));
}

#[tokio::test]
async fn a_publish_without_the_lease_changes_nothing_but_the_orders_mysql_holds() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    let drainer = entry(1, t[0]);
    let batch = [verdict(drainer, Verdict::SoldOut)];
    assert_eq!(sale.lease().await, Some(drainer.to_string()));
    let before = state(&sale).await;
    // Another buyer's entry, the drainer's bare ticket, a stranger's token, none.
    let other = entry(2, t[1]).to_string();
    let bare = t[0].to_string();
    for token in ["someone", other.as_str(), bare.as_str(), ""] {
        let published = sale.publish(token, Some(drainer), &batch).await;
        assert_eq!(published.unwrap(), Next::Lost, "token {token:?}");
        assert_eq!(state(&sale).await, before);
    }
    // Its own lease lapsed.
    sale.expire_lease().await;
    let before = state(&sale).await;
    let published = sale
        .publish(&drainer.to_string(), Some(drainer), &batch)
        .await;
    assert_eq!(published.unwrap(), Next::Lost);
    assert_eq!(state(&sale).await, before);
    // Only the orders MySQL holds are recorded, true whoever writes them: a buyer told
    // 201 by this drainer is never told sold_out later.
    let id = id_of(t[0]);
    let published = sale
        .publish(&drainer.to_string(), Some(drainer), &[ordered(drainer)])
        .await;
    assert_eq!(published.unwrap(), Next::Lost);
    assert_eq!(sale.record(buyer(1)).await, Some(Record::Ordered(id, 1)));
    assert_eq!(orders_recorded(&sale).await, 1);
    // Nothing else: put the record and its count back and compare.
    let _: () = sale
        .conn
        .clone()
        .hset(sale.keys().buyers(), 1, Record::Queued(t[0]).to_string())
        .await
        .unwrap();
    let _: () = sale
        .conn
        .clone()
        .hdel(sale.keys().voucher(), "orders")
        .await
        .unwrap();
    assert_eq!(state(&sale).await, before);
}

#[tokio::test]
async fn a_publish_of_entries_not_at_the_head_of_the_queue_changes_nothing() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    // Verdicts that a refused publication leaves alone (its orders it records: see
    // a_publish_without_the_lease_changes_nothing_but_the_orders_mysql_holds).
    let e: Vec<Published> = (0..3)
        .map(|i| verdict(entry(i as u64 + 1, t[i]), Verdict::SoldOut))
        .collect();
    // Buyer 1 with buyer 2's ticket; a buyer who is not queued at all.
    let foreign = verdict(entry(1, t[1]), Verdict::SoldOut);
    let beyond = verdict(entry(4, t[2]), Verdict::SoldOut);
    let drainer = e[0].0;
    let before = state(&sale).await;
    for batch in [
        vec![e[1]],
        vec![e[0], e[2]],
        vec![e[1], e[0]],
        vec![foreign],
        vec![e[0], e[1], e[2], beyond],
    ] {
        let published = sale
            .publish(&drainer.to_string(), Some(drainer), &batch)
            .await
            .unwrap();
        assert_eq!(published, Next::Lost, "{batch:?}");
        assert_eq!(state(&sale).await, before, "{batch:?}");
    }
    // The same drainer with the head itself is heard.
    let published = sale
        .publish(&drainer.to_string(), Some(drainer), &e[..1])
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.queue().await, [e[1].0, e[2].0]);
}

#[tokio::test]
async fn a_drainer_passes_batch_after_batch_until_its_own_is_published_then_the_lease() {
    let sale = Sale::live(300).await;
    let users: Vec<u64> = (1..=260).collect();
    let t = admit_all(&sale, users.iter().copied()).await;
    let e: Vec<Entry> = users.iter().zip(&t).map(|(u, t)| entry(*u, *t)).collect();
    let ordered = |range: std::ops::Range<usize>| -> Vec<Published> {
        range.map(|i| ordered(e[i])).collect()
    };
    // Buyer 3's request drains: its own purchase is third in the queue.
    sale.expire_lease().await;
    assert_eq!(sale.claim(entry(3, t[2])).await.unwrap(), Claimed::Lead);
    hold_lease(&sale).await;

    let published = publish_own(&sale, e[2], &ordered(0..2)).await.unwrap();
    assert_eq!(published, Next::Batch(e[2..2 + BATCH as usize].to_vec()));
    assert_eq!(sale.lease().await, Some(e[2].to_string()));
    let lease_ttl = pttl(&sale, sale.keys().lease()).await;
    assert!(0 < lease_ttl && lease_ttl <= LEASE_MS, "{lease_ttl}");
    assert_eq!(sale.queue().await, e[2..]);

    let published = publish_own(&sale, e[2], &ordered(2..258)).await.unwrap();
    assert_eq!(published, Next::Done);
    // The oldest queued purchase leads next, under its entry, and its request hears so.
    assert_eq!(sale.lease().await, Some(e[258].to_string()));
    hold_lease(&sale).await;
    assert_eq!(sale.news(e[258]).await, ["lead"]);
    assert!(sale.news(e[2]).await.is_empty());
    assert_eq!(
        sale.news(e[257]).await,
        [outcome(Verdict::Ordered, id_of(t[257]))]
    );
    assert_eq!(sale.queue().await, e[258..]);

    // Its request publishes nothing first, to get the batch.
    let published = publish_own(&sale, e[258], &[]).await.unwrap();
    assert_eq!(published, Next::Batch(e[258..].to_vec()));
    let published = sale
        .publish(&e[258].to_string(), Some(e[258]), &ordered(258..260))
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.lease().await, None);
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.records().await.len(), 260);
    assert!(sale
        .records()
        .await
        .iter()
        .all(|(_, record)| matches!(record, Record::Ordered(..))));
    assert_eq!(sale.stock().await, Some(40));
}

#[tokio::test]
async fn a_lease_handed_on_is_short_until_its_new_holder_takes_it_up() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, [1, 2]).await;
    let e = [entry(1, t[0]), entry(2, t[1])];
    assert_eq!(sale.lease().await, Some(e[0].to_string()));
    hold_lease(&sale).await;
    let published = publish_own(&sale, e[0], &[ordered(e[0])]).await.unwrap();
    assert_eq!(published, Next::Done);
    // Handed to the head's request, which may have gone: it lapses within HANDOVER_MS.
    let handed = pttl(&sale, sale.keys().lease()).await;
    assert!(0 < handed && handed <= HANDOVER_MS, "{handed}");
    // Its request takes it up, publishing nothing to get its batch: a drainer's lease.
    let published = publish_own(&sale, e[1], &[]).await.unwrap();
    assert_eq!(published, Next::Batch(vec![e[1]]));
    let taken = pttl(&sale, sale.keys().lease()).await;
    assert!(HANDOVER_MS < taken && taken <= LEASE_MS, "{taken}");
    assert_eq!(sale.lease().await, Some(e[1].to_string()));
    assert_eq!(sale.news(e[1]).await, ["lead"]);
    assert!(sale.news(e[0]).await.is_empty());
}

#[tokio::test]
async fn a_drainer_without_a_purchase_publishes_one_batch_and_passes_the_lease() {
    let sale = Sale::live(3).await;
    let t = admit_all(&sale, 1..=3).await;
    sale.expire_lease().await;
    let rescue = sale.admit(buyer(4)).await;
    assert_eq!(rescue.decision, Decision::SoldOut);
    let Lease { token, batch } = rescue.lease.unwrap();
    assert_eq!(batch.len(), 3);
    hold_lease(&sale).await;
    let published = sale
        .publish(&token, None, &[ordered(batch[0]), ordered(batch[1])])
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.lease().await, Some(entry(3, t[2]).to_string()));
    // Every buyer hears, its first one too.
    assert_eq!(
        sale.news(batch[0]).await,
        [outcome(Verdict::Ordered, id_of(t[0]))]
    );
    assert_eq!(
        sale.news(batch[1]).await,
        [outcome(Verdict::Ordered, id_of(t[1]))]
    );
    assert_eq!(sale.news(entry(3, t[2])).await, ["lead"]);

    // The lease passes on under an empty queue: deleted.
    sale.expire_lease().await;
    let rescue = sale.admit(buyer(4)).await;
    let Lease { token, batch } = rescue.lease.unwrap();
    assert_eq!(batch, [entry(3, t[2])]);
    let published = sale
        .publish(&token, None, &[verdict(batch[0], Verdict::SoldOut)])
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.lease().await, None);
    assert_eq!(sale.record(buyer(3)).await, None);
}

/// `lua/unlock.lua` under `token`: whether it released the lease.
async fn unlock(sale: &Sale, token: &str) -> bool {
    sale.call(&Unlock {
        voucher_id: sale.voucher,
        token,
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_drainer_that_gives_up_releases_its_own_lease_and_no_other() {
    let sale = Sale::live(5).await;
    let t = admit_all(&sale, [1, 2]).await;
    let (drainer, waiter) = (entry(1, t[0]), entry(2, t[1]));
    hold_lease(&sale).await;
    let before = state(&sale).await;
    for token in [waiter.to_string(), "someone".to_string()] {
        assert!(!unlock(&sale, &token).await, "{token}");
        assert_eq!(state(&sale).await, before, "{token}");
    }
    assert!(unlock(&sale, &drainer.to_string()).await);
    assert_eq!(sale.lease().await, None);
    // A waiter takes the queue over at once; nothing queued was given up.
    assert_eq!(sale.queue().await, [drainer, waiter]);
    assert_eq!(sale.claim(waiter).await.unwrap(), Claimed::Lead);
    // The drainer unlocking again leaves its successor's lease alone.
    assert!(!unlock(&sale, &drainer.to_string()).await);
    assert_eq!(sale.lease().await, Some(waiter.to_string()));
}

/// Settles take turns per slot (`storage::turns`): a turn taken is nobody else's until
/// its holder hands it on, which only the holder can, and which wakes one waiter once.
#[tokio::test]
async fn a_turn_at_settling_is_one_settle_s_and_its_hand_on_wakes_one_waiter() {
    let sale = Sale::created(1).await;
    let slot = seckill_core::sale::Keys::new(sale.voucher).slot();
    let order_id = OrderId::compose(sale.now_ms().await / 1000, i64::from(slot) << 18).unwrap();
    let (holder, waiter) = ("holder-token", "waiter-token");
    let sale = &sale;
    let take = |token| async move { sale.call(&TakeTurn { order_id, token }).await };
    let hand_on = |token| async move { sale.call(&EndTurn { order_id, token }).await };
    let wake = || async { sale.call(&AwaitTurn { order_id }).await };
    assert!(take(holder).await.unwrap());
    assert!(!take(waiter).await.unwrap());
    assert!(!wake().await.unwrap(), "no wake-up while the turn is held");
    assert!(
        !hand_on(waiter).await.unwrap(),
        "only its holder hands a turn on"
    );
    assert!(!take(waiter).await.unwrap());
    assert!(hand_on(holder).await.unwrap());
    assert!(!hand_on(holder).await.unwrap(), "a turn is handed on once");
    assert!(wake().await.unwrap(), "the hand-on wakes a waiter");
    assert!(!wake().await.unwrap(), "one waiter");
    assert!(take(waiter).await.unwrap());
    assert!(hand_on(waiter).await.unwrap());
}

#[tokio::test]
async fn a_publish_repeated_after_it_succeeded_is_lost() {
    // Drainer A's lease lapses with its batch committed but not published; B takes over,
    // commits the same batch again and publishes it. A comes back.
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=3).await;
    let e: Vec<Published> = (0..3).map(|i| ordered(entry(i as u64 + 1, t[i]))).collect();
    sale.expire_lease().await;
    assert_eq!(sale.claim(entry(2, t[1])).await.unwrap(), Claimed::Lead);
    assert_eq!(sale.lease().await, Some(e[1].0.to_string()));
    hold_lease(&sale).await;
    let published = publish_own(&sale, e[1].0, &[]).await.unwrap();
    let queue: Vec<Entry> = e.iter().map(|(entry, _, _)| *entry).collect();
    assert_eq!(published, Next::Batch(queue));
    assert_eq!(publish_own(&sale, e[1].0, &e).await.unwrap(), Next::Done);
    let before = state(&sale).await;
    assert_eq!(publish_own(&sale, e[0].0, &e).await.unwrap(), Next::Lost);
    assert_eq!(publish_own(&sale, e[1].0, &e).await.unwrap(), Next::Lost);
    assert_eq!(state(&sale).await, before);

    // The same drainer, still holding the lease, repeating a batch it published.
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=4).await;
    let e: Vec<Published> = (0..4).map(|i| ordered(entry(i as u64 + 1, t[i]))).collect();
    sale.expire_lease().await;
    assert_eq!(sale.claim(entry(4, t[3])).await.unwrap(), Claimed::Lead);
    hold_lease(&sale).await;
    let published = publish_own(&sale, e[3].0, &e[..2]).await.unwrap();
    assert_eq!(published, Next::Batch(vec![e[2].0, e[3].0]));
    let before = state(&sale).await;
    let published = publish_own(&sale, e[3].0, &e[..2]).await.unwrap();
    assert_eq!(published, Next::Lost);
    assert_eq!(state(&sale).await, before);
}

#[tokio::test]
async fn a_publish_after_redis_lost_the_sale_never_passes_for_a_sale() {
    let sale = Sale::live(2).await;
    let t = admit_all(&sale, [1, 2]).await;
    hold_lease(&sale).await;
    // Redis loses the voucher's terms (a restart without persistence).
    sale.lose(&[sale.keys().voucher()]).await;
    let published = publish_own(
        &sale,
        entry(1, t[0]),
        &[
            verdict(entry(1, t[0]), Verdict::SoldOut),
            verdict(entry(2, t[1]), Verdict::IdTaken),
        ],
    )
    .await
    .unwrap();
    assert_eq!(published, Next::Done);
    let voucher = sale.keys().voucher();
    let exists: bool = sale.conn.clone().exists(&voucher).await.unwrap();
    assert!(!exists, "a publication created the voucher's hash");
    assert!(sale.records().await.is_empty());
    // Buyers hear "missing" (503, sync needed), not a script error.
    assert_eq!(sale.admit(buyer(3)).await, plain(Decision::Missing));
}

// ---- claim ----

#[tokio::test]
async fn claim_collects_an_outcome_once_then_finds_the_purchase_gone() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    let published = publish_own(
        &sale,
        entry(1, t[0]),
        &[ordered(entry(1, t[0])), ordered(entry(2, t[1]))],
    )
    .await
    .unwrap();
    assert_eq!(published, Next::Done);
    // Claim reads the verdict; the news it takes names the order.
    assert_eq!(
        sale.news(entry(2, t[1])).await,
        [outcome(Verdict::Ordered, id_of(t[1]))]
    );
    assert_eq!(
        sale.claim(entry(2, t[1])).await.unwrap(),
        Claimed::News(News::Verdict(Verdict::Ordered))
    );
    // Ordered, not queued, no outcome left: her record names the order she holds (the
    // caller tells whether it is this purchase's).
    assert_eq!(
        sale.claim(entry(2, t[1])).await.unwrap(),
        Claimed::Held(id_of(t[1]))
    );
    assert_eq!(
        sale.claim(entry(1, t[0])).await.unwrap(),
        Claimed::Held(id_of(t[0]))
    );
    assert_eq!(
        sale.claim(entry(3, t[2])).await.unwrap(),
        Claimed::News(News::Lead)
    );
    // Now it holds the lease itself.
    assert_eq!(sale.claim(entry(3, t[2])).await.unwrap(), Claimed::Wait);
    assert_eq!(sale.lease().await, Some(entry(3, t[2]).to_string()));
}

#[tokio::test]
async fn claim_takes_a_free_lease_and_otherwise_waits() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    let before = state(&sale).await;
    assert_eq!(sale.claim(entry(2, t[1])).await.unwrap(), Claimed::Wait);
    assert_eq!(state(&sale).await, before);
    sale.expire_lease().await;
    assert_eq!(sale.claim(entry(3, t[2])).await.unwrap(), Claimed::Lead);
    assert_eq!(sale.lease().await, Some(entry(3, t[2]).to_string()));
    let lease_ttl = pttl(&sale, sale.keys().lease()).await;
    assert!(0 < lease_ttl && lease_ttl <= LEASE_MS, "{lease_ttl}");
    assert_eq!(sale.claim(entry(2, t[1])).await.unwrap(), Claimed::Wait);
    assert_eq!(sale.lease().await, Some(entry(3, t[2]).to_string()));
    // A ticket that is not the buyer's queued one.
    assert_eq!(sale.claim(entry(2, t[0])).await.unwrap(), Claimed::Lost);
    assert_eq!(sale.lease().await, Some(entry(3, t[2]).to_string()));
}

#[tokio::test]
async fn claim_after_redis_lost_the_purchase_is_lost() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, [1, 2]).await;
    sale.lose(&[sale.keys().buyers(), sale.keys().lease()])
        .await;
    assert_eq!(sale.claim(entry(2, t[1])).await.unwrap(), Claimed::Lost);
    assert_eq!(sale.lease().await, None, "a lost purchase took the lease");
}

// ---- the order sequence ----

/// The slot's count within the second: the sequence's bits 0..18 (its bits 18..32 are
/// the voucher's slot).
fn count_of(sale: &Sale, sequence: i64) -> i64 {
    assert_eq!(
        sequence >> 18,
        i64::from(sale.keys().slot()),
        "{sequence}: not the slot's"
    );
    sequence & 0x3_ffff
}

/// Checks that `count` was seeded from the time within the second of the script's
/// clock: 256 × (milliseconds into the second) + 1, in the second of the ticket, between
/// `from_ms` and `to_ms` (Redis time around the call).
fn assert_seeded(seconds: i64, count: i64, from_ms: i64, to_ms: i64) {
    assert_eq!((count - 1) % 256, 0, "{count} is not a seed");
    let ms = seconds * 1000 + (count - 1) / 256;
    assert!(from_ms <= ms && ms <= to_ms, "{from_ms} <= {ms} <= {to_ms}");
}

#[tokio::test]
async fn a_lost_sequence_key_restarts_from_the_time_within_the_second() {
    let sale = Sale::live(10).await;
    let prefix = private_sequence();
    // Three admissions in one second of Redis's clock.
    while sale.now_ms().await % 1000 >= 500 {}
    let from = sale.now_ms().await;
    let ticket = admit_from(&sale, &prefix, 1).await.unwrap();
    let (seconds, first) = (ticket.seconds(), count_of(&sale, ticket.sequence()));
    let to = sale.now_ms().await;
    assert_seeded(seconds, first, from, to);
    let second = count_of(
        &sale,
        admit_from(&sale, &prefix, 2).await.unwrap().sequence(),
    );
    assert_eq!(second, first + 1);
    let second_key = format!("{prefix}:{seconds}");
    let ttl: i64 = sale.conn.clone().ttl(&second_key).await.unwrap();
    assert!(0 < ttl && ttl <= 60, "{ttl}");

    // As after a Redis restart without persistence: the second's key is gone. A
    // millisecond later, the new seed is above every number handed out before.
    let _: () = sale.conn.clone().del(&second_key).await.unwrap();
    while sale.now_ms().await <= to {}
    let from = sale.now_ms().await;
    let ticket = admit_from(&sale, &prefix, 3).await.unwrap();
    let (seconds, third) = (ticket.seconds(), count_of(&sale, ticket.sequence()));
    let to = sale.now_ms().await;
    assert_seeded(seconds, third, from, to);
    assert!(third > second, "{third} <= {second}: order ids reused");
    assert_eq!(sale.stock().await, Some(7));
    let _: () = sale.conn.clone().del(&second_key).await.unwrap();
}

#[tokio::test]
async fn a_used_up_sequence_fails_admission_without_taking_anything() {
    let sale = Sale::live(5).await;
    let prefix = private_sequence();
    // The next few seconds' keys one short of the end: both admissions fall in one.
    let now = sale.now_ms().await / 1000;
    let second_keys: Vec<String> = (now..now + 5).map(|s| format!("{prefix}:{s}")).collect();
    for second_key in &second_keys {
        let _: () = sale
            .conn
            .clone()
            .set_ex(second_key, 262_142u64, 60)
            .await
            .unwrap();
    }
    // The last number of the second still fits the sequence's 18 bits.
    let ticket = admit_from(&sale, &prefix, 1).await.unwrap();
    assert_eq!(count_of(&sale, ticket.sequence()), 262_143);
    assert_eq!(id_of(ticket).raw() & 0xffff_ffff, ticket.sequence() as u64);
    hold_lease(&sale).await;

    let before = state(&sale).await;
    let error = admit_from(&sale, &prefix, 2).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("order sequence of this second is used up"),
        "{error}"
    );
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.stock().await, Some(4));
    assert_eq!(sale.record(buyer(2)).await, None);
    assert_eq!(sale.queue().await, [entry(1, ticket)]);
    let _: () = sale.conn.clone().del(&second_keys).await.unwrap();
}

#[tokio::test]
async fn vouchers_draw_order_ids_of_their_slots_that_never_meet() {
    // Each slot has a sequence of its own (a Redis Cluster spreads the slots over its
    // primaries) and puts its number in the ids: two vouchers admitting in the same
    // second never hand out the same id, whether their slots differ or not.
    let (a, b) = (Sale::live(30).await, Sale::live(30).await);
    let mut ids = BTreeSet::new();
    for user in 1..=30 {
        for sale in [&a, &b] {
            let ticket = ticket(&sale.admit(buyer(user)).await);
            count_of(sale, ticket.sequence());
            let id = id_of(ticket);
            assert!(ids.insert(id), "order id {id} handed out twice");
        }
    }
}

#[tokio::test]
async fn a_ticket_handed_out_twice_keeps_each_buyers_lease_and_outcome_apart() {
    // A second's sequence set back, as a Redis restart can lose it, hands buyer 2 the ticket
    // buyer 1 holds. A purchase is named by its entry: her lease token and her outcome
    // list are hers alone, and MySQL, holding buyer 1's order under the id, says
    // id_taken for buyer 2's.
    let voucher = create_voucher(5, -60, 3600).await.first_bucket();
    let sale = Sale {
        conn: redis().await,
        voucher,
    };
    let now = sale.now_ms().await;
    sale.load(5, now - 60_000, now + 3_600_000, &[]).await;
    let prefix = private_sequence();
    // Both admissions in one second of Redis's clock: the ticket carries the second. Not
    // in its first millisecond: a second's first count is 1 there, and setting the key
    // back to 0 would make the next admission start the second's count afresh.
    while !(1..500).contains(&(sale.now_ms().await % 1000)) {}
    let ticket = admit_from(&sale, &prefix, 1).await.unwrap();
    let second_key = format!("{prefix}:{}", ticket.seconds());
    let _: () = sale
        .conn
        .clone()
        .set(&second_key, (ticket.sequence() & 0x3_ffff) - 1)
        .await
        .unwrap();
    let again = admit_from(&sale, &prefix, 2).await.unwrap();
    let _: () = sale.conn.clone().del(&second_key).await.unwrap();
    assert_eq!(again, ticket, "not the same ticket");
    let id = id_of(ticket);
    let (first, second) = (entry(1, ticket), entry(2, ticket));
    assert_eq!(sale.queue().await, [first, second]);
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([(1, Record::Queued(ticket)), (2, Record::Queued(ticket))])
    );
    assert_eq!(sale.stock().await, Some(3));

    // Buyer 1's request drains under her entry; buyer 2's is not taken for it.
    assert_eq!(sale.lease().await, Some(first.to_string()));
    hold_lease(&sale).await;
    let before = state(&sale).await;
    assert_eq!(sale.claim(second).await.unwrap(), Claimed::Wait);
    let published = publish_own(&sale, second, &[verdict(first, Verdict::IdTaken)])
        .await
        .unwrap();
    assert_eq!(published, Next::Lost);
    assert_eq!(state(&sale).await, before);

    // A rescuer (buyer 1 pressing again after the lease lapsed) commits the pair.
    sale.expire_lease().await;
    let rescue = sale.admit(buyer(1)).await;
    assert_eq!(rescue.decision, Decision::Queued(ticket));
    let Lease { token, batch } = rescue.lease.expect("the rescuer leads");
    assert!(token.starts_with("r:"), "{token}");
    assert_eq!(batch, [first, second]);
    let orders = orders_of(&batch);
    assert_eq!(orders, [(id, buyer(1), 1), (id, buyer(2), 1)]);
    let committed = commit_batch(voucher, &orders).await.unwrap();
    assert_eq!(committed.verdicts, [Verdict::Ordered, Verdict::IdTaken]);
    let published = sale
        .publish(
            &token,
            None,
            &scripts::published(&batch, &committed.verdicts),
        )
        .await
        .unwrap();
    assert_eq!(published, Next::Done);

    // Each buyer's outcome is in her own list, and only hers.
    assert_eq!(sale.news(first).await, [outcome(Verdict::Ordered, id)]);
    assert_eq!(sale.news(second).await, [outcome(Verdict::IdTaken, id)]);
    assert_eq!(
        sale.claim(second).await.unwrap(),
        Claimed::News(News::Verdict(Verdict::IdTaken))
    );
    assert_eq!(
        sale.claim(first).await.unwrap(),
        Claimed::News(News::Verdict(Verdict::Ordered))
    );
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([(1, Record::Ordered(id, 1))])
    );
    assert_eq!(sale.lease().await, None);
    // Buyer 2's unit went back, and MySQL agrees.
    let record = invariants::read(voucher.raw()).await;
    assert_eq!(record.orders, [(id.raw(), 1)].into_iter().collect());
    assert_eq!((record.mysql_stock, record.redis_stock), (4, Some(4)));
    record.assert_redis_agrees();
    assert_admitted(&sale.admit(buyer(2)).await);
}

// ---- sync: stage and load ----

/// Terms of a sale live for the minute around now.
async fn live_terms(sale: &Sale, stock: u64, initial_stock: u64) -> Terms {
    terms_at(sale.now_ms().await, 60_000, stock, initial_stock)
}

/// A sale of 2 units, one of them ordered by buyer 1 as order 101.
async fn one_of_two_ordered() -> Sale {
    let sale = Sale::live(2).await;
    let now = sale.now_ms().await;
    sale.load(1, now - 60_000, now + 3_600_000, &[(buyer(1), order(101))])
        .await;
    sale
}

#[tokio::test]
async fn overlapping_syncs_never_forget_a_buyer() {
    let sale = one_of_two_ordered().await;
    let terms = live_terms(&sale, 1, 2).await;
    // Sync a stages buyer 1; an admin's retry (sync b) cannot begin meanwhile.
    assert!(sale.begin_load("a").await.unwrap());
    assert!(sale
        .stage_buyers("a", &[(buyer(1), order(101))])
        .await
        .unwrap());
    assert!(!sale.begin_load("b").await.unwrap());
    // Sync a stalls past its lease; b begins, stages and finishes.
    sale.expire_sync_lease().await;
    assert!(sale.begin_load("b").await.unwrap());
    assert!(sale
        .stage_buyers("b", &[(buyer(1), order(101))])
        .await
        .unwrap());
    assert!(sale
        .finish_load(Installer::Sync("b"), &terms)
        .await
        .unwrap());
    // Sync a comes back: refused, changing nothing.
    let before = state(&sale).await;
    assert!(!sale
        .stage_buyers("a", &[(buyer(2), order(202))])
        .await
        .unwrap());
    assert!(!sale
        .finish_load(Installer::Sync("a"), &terms)
        .await
        .unwrap());
    assert_eq!(state(&sale).await, before);
    assert_eq!(
        sale.record(buyer(1)).await,
        Some(Record::Ordered(order(101), 1))
    );
    assert_eq!(
        sale.admit(buyer(1)).await,
        first_after_sync(Decision::AlreadyOrdered(order(101)))
    );
    assert_eq!(sale.stock().await, Some(1));
}

#[tokio::test]
async fn a_sync_keeps_what_purchases_record_while_it_runs() {
    // Sync a reads MySQL (no orders yet); buyer 2's purchase then commits and is
    // published; sync a finishes: buyer 2's order must still be known.
    let sale = Sale::live(1).await;
    assert!(sale.begin_load("a").await.unwrap());
    let t2 = ticket(&sale.admit(buyer(2)).await);
    assert!(sale.stage_buyers("a", &[]).await.unwrap());
    let id = id_of(t2);
    let published = publish_own(&sale, entry(2, t2), &[ordered(entry(2, t2))])
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert!(sale
        .finish_load(Installer::Sync("a"), &live_terms(&sale, 1, 1).await)
        .await
        .unwrap());
    assert_eq!(
        sale.admit(buyer(2)).await,
        first_after_sync(Decision::AlreadyOrdered(id))
    );
}

#[tokio::test]
async fn a_sync_that_lost_its_lease_changes_nothing() {
    // As after a Redis restart in the middle of a sync: the lease is gone.
    let sale = one_of_two_ordered().await;
    assert!(sale.begin_load("a").await.unwrap());
    sale.expire_sync_lease().await;
    let before = state(&sale).await;
    assert!(!sale
        .stage_buyers("a", &[(buyer(3), order(303))])
        .await
        .unwrap());
    assert!(!sale
        .finish_load(Installer::Sync("a"), &live_terms(&sale, 0, 2).await)
        .await
        .unwrap());
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.record(buyer(3)).await, None);
    assert_eq!(sale.stock().await, Some(1));
}

#[tokio::test]
async fn a_load_installs_mysqls_buyers_and_keeps_the_queue() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, [1, 7]).await;
    hold_lease(&sale).await;
    let now = sale.now_ms().await;
    // Buyer 7's queued purchase is a repeat: MySQL already holds her order 700.
    sale.load(
        8,
        now - 1000,
        now + 60_000,
        &[
            (buyer(5), order(500)),
            (buyer(6), order(600)),
            (buyer(7), order(700)),
        ],
    )
    .await;
    assert_eq!(sale.stock().await, Some(8));
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([
            (1, Record::Queued(t[0])),
            (5, Record::Ordered(order(500), 1)),
            (6, Record::Ordered(order(600), 1)),
            (7, Record::Ordered(order(700), 1)),
        ])
    );
    assert_eq!(sale.queue().await, [entry(1, t[0]), entry(7, t[1])]);
    assert_eq!(
        sale.admit(buyer(5)).await,
        first_after_sync(Decision::AlreadyOrdered(order(500)))
    );
    assert_eq!(
        sale.admit(buyer(7)).await,
        plain(Decision::AlreadyOrdered(order(700)))
    );
    // Its commit finds her order and publishes it.
    let published = publish_own(
        &sale,
        entry(1, t[0]),
        &[
            ordered(entry(1, t[0])),
            verdict(entry(7, t[1]), Verdict::Duplicate(order(700), 1)),
        ],
    )
    .await
    .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(
        sale.record(buyer(7)).await,
        Some(Record::Ordered(order(700), 1))
    );
    assert_eq!(
        sale.news(entry(7, t[1])).await,
        [outcome(Verdict::Duplicate(order(700), 1), id_of(t[1]))]
    );
    assert_eq!(sale.stock().await, Some(8));
}

#[tokio::test]
async fn the_view_reads_the_sale_state_with_redis_time() {
    let sale = Sale::live(3).await;
    ticket(&sale.admit(buyer(1)).await);
    let Shown::Sale(view) = read_view(&sale, sale.voucher).await else {
        panic!("no view of a live sale")
    };
    assert_eq!((view.terms.stock, view.terms.initial_stock), (2, 3));
    assert_eq!(view.terms.title, "voucher");
    assert!((view.now_ms - sale.now_ms().await).abs() < 1000);
    // As admission tells them apart: no such voucher, or a sale Redis lost.
    assert_eq!(read_view(&sale, ABOVE_EVERY_ID).await, Shown::Unknown);
    sale.lose(&[sale.keys().voucher()]).await;
    assert_eq!(read_view(&sale, sale.voucher).await, Shown::Missing);
}

#[tokio::test]
async fn the_view_of_a_sale_in_buckets_reads_its_first_bucket_and_audits_one_bucket_a_read() {
    let buckets = Sale::live_buckets(6, 3).await;
    let first = &buckets[0];
    // A later bucket is no voucher of its own.
    assert_eq!(
        read_view(&buckets[1], buckets[1].voucher).await,
        Shown::Unknown
    );
    let ids: Vec<_> = buckets.iter().map(|bucket| bucket.voucher).collect();

    let mut audited = Vec::new();
    for read in 0..4 {
        let view = read_due(first, &["audit_at"]).await;
        // The first read of the second sums the other buckets; none is kept yet.
        assert_eq!((view.summary, view.refresh), (None, read == 0));
        audited.extend(audited_by(&view, first.voucher));
    }
    assert_eq!(audited, [ids[0], ids[1], ids[2], ids[0]]);

    // A deadline due too: the read sweeps the first bucket (which audits it), and the
    // second's turn waits for the next read.
    let view = read_due(first, &["audit_at", "sweep_at"]).await;
    assert_eq!(audited_by(&view, first.voucher), [ids[0]]);
    let _: () = first
        .conn
        .clone()
        .hdel(first.keys().voucher(), "sweep_at")
        .await
        .unwrap();
    let view = read_due(first, &["audit_at"]).await;
    assert_eq!(audited_by(&view, first.voucher), [ids[1]]);
}

/// The first bucket's view once `fields` are due and its sweep lease is free.
async fn read_due(first: &Sale, fields: &[&str]) -> View {
    let due: Vec<_> = fields.iter().map(|field| (*field, 0)).collect();
    let _: () = first
        .conn
        .clone()
        .hset_multiple(first.keys().voucher(), &due)
        .await
        .unwrap();
    first.lose(&[first.keys().sweep()]).await;
    let Shown::Sale(view) = read_view(first, first.voucher).await else {
        panic!("no view of a live sale")
    };
    view
}

/// The buckets a read of the first bucket `first` audits: its own, under the lease
/// view.lua took, and another's.
fn audited_by(view: &View, first: BucketId) -> Vec<BucketId> {
    view.sweep
        .then_some(first)
        .into_iter()
        .chain(view.audit)
        .collect()
}

/// `lua/view.lua` for the voucher `voucher`, as the component reads it.
async fn read_view(sale: &Sale, voucher: BucketId) -> Shown {
    sale.call(&ReadView {
        voucher_id: voucher,
    })
    .await
    .unwrap()
}

/// The voucher's counters, as `lua/metrics.lua` hands them to `GET /metrics`.
async fn counters(sale: &Sale) -> BTreeMap<String, i64> {
    sale.conn
        .clone()
        .hgetall(sale.keys().metrics())
        .await
        .unwrap()
}

#[tokio::test]
async fn the_counters_count_each_decision_verdict_and_batch_and_each_order_once() {
    let sale = Sale::live(3).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Queued(t[0])));
    assert_eq!(sale.admit(buyer(4)).await, plain(Decision::SoldOut));
    let e: Vec<Entry> = (0..3).map(|i| entry(i as u64 + 1, t[i])).collect();
    let batch = [
        ordered(e[0]),
        verdict(e[1], Verdict::Duplicate(order(777), 1)),
    ];
    assert_eq!(
        sale.publish("someone", None, &batch).await.unwrap(),
        Next::Lost
    );
    // The refused publication recorded the two orders MySQL holds: counted once, there.
    let publish = |own, batch| publish_own_counted(&sale, own, batch, 2);
    assert_eq!(publish(e[0], &batch).await.unwrap(), Next::Done);
    assert_eq!(
        sale.admit(buyer(1)).await,
        plain(Decision::AlreadyOrdered(id_of(t[0])))
    );
    hold_lease(&sale).await;
    let last = [verdict(e[2], Verdict::SoldOut)];
    assert_eq!(publish(e[2], &last).await.unwrap(), Next::Done);

    let commit = |verdict: Verdict| format!("commit:{}", verdict.tag());
    let expected = [
        ("purchase:admitted".to_string(), 3),
        ("purchase:queued".to_string(), 1),
        ("purchase:sold_out".to_string(), 1),
        ("purchase:already_ordered".to_string(), 1),
        (commit(Verdict::Ordered), 1),
        (commit(Verdict::Duplicate(order(777), 1)), 1),
        (commit(Verdict::SoldOut), 1),
        ("batch:le:1".to_string(), 1),
        ("batch:le:4".to_string(), 2),
        ("batch:le:16".to_string(), 2),
        ("batch:le:64".to_string(), 2),
        ("batch:le:256".to_string(), 2),
        ("batch:count".to_string(), 2),
        ("batch:sum".to_string(), 3),
        // The units of the orders committed, an order of one unit here.
        ("units:sold".to_string(), 1),
    ];
    let expected = BTreeMap::from(expected);
    assert_eq!(counters(&sale).await, expected);
    // The orders Redis learnt of, each once: the voucher's "orders".
    assert_eq!(orders_recorded(&sale).await, 2);
}

#[tokio::test]
async fn an_outcome_counted_after_admission_never_leaves_a_counter_for_good() {
    let sale = Sale::live(5).await;
    admit_all(&sale, [1]).await;
    let metrics = sale.keys().metrics();
    let count = |outcome: &'static str| Count {
        voucher_id: sale.voucher,
        counted: Counted::Purchase(outcome),
    };
    let sale_s_end = expire_at(&sale, metrics.clone()).await;
    for outcome in ["busy", "busy", "unavailable"] {
        sale.call(&count(outcome)).await.unwrap();
    }
    let counted = counters(&sale).await;
    assert_eq!(
        (counted["purchase:busy"], counted["purchase:unavailable"]),
        (2, 1)
    );
    assert_eq!(
        expire_at(&sale, metrics.clone()).await,
        sale_s_end,
        "the sale's expiry moved"
    );

    // Redis lost the sale meanwhile: the counter it starts expires by itself.
    sale.lose(&[sale.keys().voucher(), metrics.clone()]).await;
    sale.call(&count("busy")).await.unwrap();
    assert_eq!(
        counters(&sale).await,
        BTreeMap::from([("purchase:busy".to_string(), 1)])
    );
    let ttl = pttl(&sale, metrics.clone()).await;
    assert!(0 < ttl && ttl <= KEPT_AFTER_END_MS, "{ttl}");
}

fn orders_in_mysql(orders: u64) -> Ledger {
    Ledger {
        orders,
        returned_event: 0,
        stock: 0,
    }
}

async fn orders_recorded(sale: &Sale) -> i64 {
    let orders: Option<i64> = sale
        .conn
        .clone()
        .hget(sale.keys().voucher(), "orders")
        .await
        .unwrap();
    orders.unwrap_or(0)
}

/// Whether the voucher is listed as behind MySQL (`GET /health` lists them).
async fn is_stale(sale: &Sale) -> bool {
    sale.conn
        .clone()
        .sismember(STALE, sale.voucher.raw())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_sale_found_behind_mysql_is_missing_until_a_sync() {
    let sale = Sale::live(3).await;
    let t = admit_all(&sale, [1, 2]).await;
    let (e1, e2) = (entry(1, t[0]), entry(2, t[1]));
    let (id1, id2) = (id_of(t[0]), id_of(t[1]));
    // MySQL holds exactly the orders Redis learns of: nothing is amiss.
    hold_lease(&sale).await;
    let published = sale
        .publish_counted(
            &e1.to_string(),
            Some(e1),
            &[ordered(e1)],
            orders_in_mysql(1),
            Limits::SHIPPED,
        )
        .await;
    assert_eq!(published.unwrap(), Next::Done);
    assert_eq!(orders_recorded(&sale).await, 1);
    assert_eq!(
        sale.admit(buyer(1)).await,
        plain(Decision::AlreadyOrdered(id1))
    );

    // MySQL holds an order Redis never learnt of: Redis rolled back past it.
    hold_lease(&sale).await;
    let published = sale
        .publish_counted(
            &e2.to_string(),
            Some(e2),
            &[ordered(e2)],
            orders_in_mysql(3),
            Limits::SHIPPED,
        )
        .await;
    assert_eq!(published.unwrap(), Next::Done);
    // What MySQL said is recorded all the same; the sale is no sale until a sync.
    assert_eq!(sale.record(buyer(2)).await, Some(Record::Ordered(id2, 1)));
    for user in [1, 3] {
        assert_eq!(
            sale.admit(buyer(user)).await,
            plain(Decision::Missing),
            "{user}"
        );
    }
    assert_eq!(read_view(&sale, sale.voucher).await, Shown::Missing);
    assert!(is_stale(&sale).await);

    // The sync loads MySQL's figures: three orders, no unit left.
    let now = sale.now_ms().await;
    assert!(sale.begin_load("sync").await.unwrap());
    let terms = terms_at(now, 60_000, 0, 3);
    assert!(sale
        .finish_load(Installer::Sync("sync"), &terms)
        .await
        .unwrap());
    assert_eq!(orders_recorded(&sale).await, 3);
    assert_eq!(
        sale.admit(buyer(1)).await,
        first_after_sync(Decision::AlreadyOrdered(id1))
    );
    assert_eq!(
        sale.admit(buyer(3)).await,
        behind_a_sweep(Decision::SoldOut)
    );
    assert!(!is_stale(&sale).await);
}

/// `lua/metrics.lua` for the sale, reporting sales that ended up to `after_end_ms` ago.
async fn figures(sale: &Sale, after_end_ms: i64) -> Option<Figures> {
    // The component's command reports sales until `REPORTED_AFTER_END_MS` (an hour)
    // after their end; the test puts its own bound in its place.
    let read = ReadFigures {
        voucher_id: sale.voucher,
    };
    let mut command = read.command();
    let Command::Script { args, .. } = &mut command else {
        panic!("metrics is a script")
    };
    *args = args![reported_ms = after_end_ms];
    sale.call_as(&read, &command).await.unwrap()
}

#[tokio::test]
async fn metrics_reads_a_sale_at_one_instant_until_a_while_after_its_end() {
    let sale = Sale::live(5).await;
    admit_all(&sale, [1, 2]).await;
    let figures_now = figures(&sale, 0).await;
    assert_eq!(
        figures_now,
        Some(Figures {
            units_left: 3,
            units_initial: 5,
            queued: 2,
            orders: 0,
            stale: false,
            mysql_missing: 0,
            counters: vec![("purchase:admitted".to_string(), 2)],
        })
    );
    let now = sale.now_ms().await;
    sale.load(3, now - 120_000, now - 60_000, &[]).await;
    assert!(figures(&sale, 61_000).await.is_some());
    assert_eq!(figures(&sale, 59_000).await, None);
    sale.lose(&[sale.keys().voucher()]).await;
    assert_eq!(figures(&sale, 61_000).await, None);
}

#[tokio::test]
async fn a_sale_s_keys_expire_a_week_after_its_end() {
    let sale = Sale::live(5).await;
    admit_all(&sale, [1]).await;
    let keys = sale.keys();
    let end_ms: i64 = sale
        .conn
        .clone()
        .hget(keys.voucher(), "end_ms")
        .await
        .unwrap();
    for key in [keys.voucher(), keys.buyers(), keys.queue(), keys.metrics()] {
        assert_eq!(
            expire_at(&sale, key.clone()).await,
            end_ms + KEPT_AFTER_END_MS,
            "{key}"
        );
    }
}

#[tokio::test]
async fn with_no_voucher_in_mysql_a_lookup_makes_every_id_unknown() {
    // A Redis of its own: the shared one knows of other tests' vouchers.
    let server = RedisServer::start(Persistence::None).await;
    let conn = ::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let sale = |raw| Sale {
        conn: conn.clone(),
        voucher: BucketId::from_raw(raw),
    };
    // Before anyone asked MySQL, an id may be a sale Redis lost.
    assert_eq!(sale(7).admit(buyer(1)).await, plain(Decision::Missing));
    sale(7)
        .call(&Probed {
            voucher_id: BucketId::from_raw(7),
            absent: true,
            highest: None,
        })
        .await
        .unwrap();
    for raw in [1, 7, 8, 1 << 40] {
        assert_eq!(
            sale(raw).admit(buyer(1)).await,
            plain(Decision::Unknown),
            "voucher {raw}"
        );
    }
}

// ---- a sale in buckets (docs/design.md, "Buckets") ----

/// Admission at the bucket `sale`, the buyer's own, by a caller that knows the sale's
/// buckets.
async fn admit_routed(sale: &Sale, user: u64) -> Admission {
    admit_on(sale, user, Route::Home).await
}

async fn admit_on(sale: &Sale, user: u64, route: Route) -> Admission {
    admit_seeing(sale, user, route, Sightings::default()).await
}

/// When `sale`'s bucket last saw the bucket at `place` sold out, as its sightings keep it.
async fn told_at(sale: &Sale, place: usize) -> i64 {
    sale.conn
        .clone()
        .hget(sale.keys().seen_out(), place)
        .await
        .unwrap()
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
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_bucket_marks_itself_all_out_once_presses_and_walks_saw_every_bucket_sold_out() {
    let buckets = Sale::live_buckets(3, 3).await;
    // Buyers 6, 7 and 8 take the buckets' units, each at hers (her id modulo 3).
    for (place, bucket) in buckets.iter().enumerate() {
        assert_admitted(&admit_routed(bucket, 6 + place as u64).await);
    }
    let [first, second, third] = &buckets[..] else {
        panic!("three buckets")
    };
    let at = |here, seen: &[Sighting]| Sightings {
        buckets: 3,
        here,
        seen: seen.to_vec(),
        created: 0,
    };
    let places = |seen: &[Sighting]| seen.iter().map(|(place, _)| *place).collect::<Vec<_>>();
    // Buyer 9's bucket is the first: sold out, it sends her on with what it saw.
    let home = admit_seeing(first, 9, Route::Home, at(0, &[])).await;
    assert_eq!(home.decision, Decision::BucketOut);
    assert_eq!(places(&home.seen_out), [0]);
    // A sighting older than the mark's moment counts for nothing.
    let said = admit_seeing(second, 9, Route::LoneWalk, at(1, &[(0, 1), (2, 1)])).await;
    assert_eq!(places(&said.seen_out), [1]);
    let said = admit_seeing(second, 9, Route::LoneWalk, at(1, &home.seen_out)).await;
    assert_eq!(said.decision, Decision::BucketOut);
    assert_eq!(places(&said.seen_out), [0, 1]);
    assert!(!second.all_out().await);
    // The third, told of the other two, has seen them all: it marks itself, and hands her
    // lone walk every sighting (the walk goes on, to mark the others).
    let told = admit_seeing(third, 9, Route::LoneWalk, at(2, &said.seen_out)).await;
    assert_eq!(told.decision, Decision::BucketOut);
    assert_eq!(places(&told.seen_out), [0, 1, 2]);
    assert!(third.all_out().await);
    // A lone walk meeting that mark later ends there.
    assert_eq!(
        admit_seeing(third, 10, Route::LoneWalk, at(2, &[]))
            .await
            .decision,
        Decision::SoldOut
    );
    assert_eq!(admit_routed(third, 5).await.decision, Decision::SoldOut);
    // A bucket hands a walk what it saw and what other presses told it: buyer 14, whose
    // bucket is the third (marked, so seen sold out just now), asks the first, and brings
    // both sightings to the second, which now has seen all three and marks itself.
    let said = admit_seeing(first, 14, Route::LoneWalk, at(0, &[])).await;
    assert_eq!(places(&said.seen_out), [0]);
    assert!(!first.all_out().await);
    let mut seen = said.seen_out.clone();
    seen.push((2, told_at(third, 2).await));
    let said = admit_seeing(second, 14, Route::LoneWalk, at(1, &seen)).await;
    assert_eq!(
        (said.decision, places(&said.seen_out)),
        (Decision::BucketOut, vec![0, 1, 2])
    );
    assert!(second.all_out().await);
    // A walk with others of hers under way learns nothing from a mark.
    assert_eq!(
        admit_seeing(second, 11, Route::Walk, at(1, &[]))
            .await
            .decision,
        Decision::BucketOut
    );
}

#[tokio::test]
async fn a_sale_in_buckets_names_them_and_a_sold_out_bucket_sends_the_buyer_on() {
    let buckets = Sale::live_buckets(3, 3).await;
    let [first, second, third] = &buckets[..] else {
        panic!("three buckets")
    };
    // A press that does not know the buckets learns them from the first, which decides
    // nothing for it.
    let asked = first.admit(buyer(5)).await;
    assert_eq!(
        asked,
        Admission {
            others: vec![second.voucher, third.voucher],
            ..plain(Decision::Buckets)
        }
    );
    assert_eq!(first.stock().await, Some(1));
    // Each bucket sells its own unit, and then sends buyers on, until a press that found
    // every bucket empty marks its buyer's bucket: that one answers sold_out by itself.
    let admitted = admit_routed(second, 5).await;
    assert!(
        matches!(admitted.decision, Decision::Admitted(_)),
        "{admitted:?}"
    );
    assert_eq!(admit_routed(second, 6).await.decision, Decision::BucketOut);
    assert_eq!(
        admit_routed(second, 5).await.decision,
        admitted_again(&admitted)
    );
    assert_eq!(walk_found_nothing(second, 6).await, WalkEnded::Marked);
    assert_eq!(admit_routed(second, 6).await.decision, Decision::SoldOut);
    // Not while the bucket has a unit: its buyers buy it.
    assert_eq!(walk_found_nothing(third, 7).await, WalkEnded::Open);
    assert_admitted(&admit_routed(third, 7).await);
    // A unit given back clears the mark: the bucket's buyers buy it at once.
    give_one_back(second).await;
    assert_admitted(&admit_routed(second, 6).await);
}

/// The unit of a cancelled order (of a buyer who never pressed) back to a sale that has
/// applied no return yet.
async fn give_one_back(sale: &Sale) {
    let returned = Returned {
        event: 1,
        order_id: order(99),
        user: buyer(98),
        cancelled: true,
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

/// What a second press of an admitted buyer hears: her purchase, still queued.
fn admitted_again(admitted: &Admission) -> Decision {
    Decision::Queued(ticket(admitted))
}

/// The end of a walk of `user`'s that found nothing, counted by her bucket `sale`.
async fn walk_found_nothing(sale: &Sale, user: u64) -> WalkEnded {
    sale.call(&WalkEnd {
        home: sale.voucher,
        buyer: buyer(user),
        found: None,
        started: Some(Pointer::Counted),
        empty: true,
        since: sale.now_ms().await,
    })
    .await
    .unwrap()
}

/// A sale of two buckets of a unit each, the first's sold to buyer 4.
async fn home_sold_out() -> Vec<Sale> {
    let buckets = Sale::live_buckets(2, 2).await;
    assert_admitted(&admit_routed(&buckets[0], 4).await);
    buckets
}

#[tokio::test]
async fn a_walked_buyer_s_bucket_sends_her_to_her_purchase_whatever_its_mark_or_the_end() {
    let buckets = home_sold_out().await;
    let [home, other] = &buckets[..] else {
        panic!("two buckets")
    };
    // Buyer 2 walks from her sold-out bucket to the other and is admitted there; the walk
    // points her bucket at it.
    assert_eq!(admit_routed(home, 2).await.decision, Decision::BucketOut);
    let admitted = admit_on(other, 2, Route::Walk).await;
    assert!(matches!(admitted.decision, Decision::Admitted(_)));
    let pointed = home
        .call(&WalkEnd {
            home: home.voucher,
            buyer: buyer(2),
            found: Some(other.voucher),
            started: Some(Pointer::Counted),
            empty: true,
            since: home.now_ms().await,
        })
        .await
        .unwrap();
    assert_eq!(pointed, WalkEnded::Pointed);
    // Buyer 6 finds every bucket empty and marks it; buyer 2 is still sent to hers.
    assert_eq!(admit_routed(home, 6).await.decision, Decision::BucketOut);
    assert_eq!(walk_found_nothing(home, 6).await, WalkEnded::Marked);
    assert_eq!(admit_routed(home, 6).await.decision, Decision::SoldOut);
    assert_eq!(
        admit_routed(home, 2).await.decision,
        Decision::Walked(other.voucher)
    );
    // A bucket's mark does not stop a walk: it answers bucket_out, never sold_out. But
    // a buyer's only walk under way ends there: no bucket holds a record of hers.
    assert_eq!(
        admit_on(other, 6, Route::LoneWalk).await.decision,
        Decision::BucketOut,
        "not marked yet"
    );
    assert_eq!(
        admit_on(other, 6, Route::Home).await.decision,
        Decision::BucketOut
    );
    assert_eq!(walk_found_nothing(other, 6).await, WalkEnded::Marked);
    assert_eq!(
        admit_on(other, 8, Route::Walk).await.decision,
        Decision::BucketOut
    );
    assert_eq!(
        admit_on(other, 8, Route::LoneWalk).await.decision,
        Decision::SoldOut
    );
    // Her record there answers before the mark.
    assert_eq!(
        admit_on(other, 2, Route::LoneWalk).await.decision,
        admitted_again(&admitted)
    );
    // Buyer 10 has a walk under way (counted at her bucket): every press of hers that
    // her bucket cannot serve walks every bucket too, counted until it ends, and her
    // bucket answers for itself again once the last walk ended.
    assert_eq!(admit_routed(home, 10).await.decision, Decision::SoldOut);
    home.conn
        .clone()
        .hset::<_, _, _, ()>(home.keys().buyers(), "10", "p:1")
        .await
        .unwrap();
    assert_eq!(
        admit_routed(home, 10).await.decision,
        Decision::Walk { ended: false }
    );
    walk_found_nothing(home, 10).await;
    for sale in [home, other] {
        assert!(sale
            .call(&EndSale {
                voucher_id: sale.voucher
            })
            .await
            .unwrap());
    }
    assert_eq!(
        admit_routed(home, 10).await.decision,
        Decision::Walk { ended: true }
    );
    assert_eq!(
        admit_routed(home, 2).await.decision,
        Decision::Walked(other.voucher)
    );
    assert_eq!(
        admit_on(other, 2, Route::Walk).await.decision,
        admitted_again(&admitted)
    );
    assert_eq!(admit_routed(home, 6).await.decision, Decision::Ended);
    // A walk that followed a pointer clears that pointer, not another record.
    home.call(&WalkEnd {
        home: home.voucher,
        buyer: buyer(10),
        found: None,
        started: Some(Pointer::At(other.voucher)),
        empty: true,
        since: home.now_ms().await,
    })
    .await
    .unwrap();
    walk_found_nothing(home, 10).await;
    assert_eq!(
        admit_routed(home, 10).await.decision,
        Decision::Walk { ended: true }
    );
    walk_found_nothing(home, 10).await;
    walk_found_nothing(home, 10).await;
    assert_eq!(admit_routed(home, 10).await.decision, Decision::Ended);
}

#[tokio::test]
async fn an_order_of_another_bucket_gives_the_unit_back_and_answers_already_ordered() {
    let buckets = Sale::live_buckets(4, 2).await;
    let sale = &buckets[1];
    let t = ticket(&admit_routed(sale, 1).await);
    let other = ticket(&admit_routed(sale, 2).await);
    hold_lease(sale).await;
    assert_eq!(sale.stock().await, Some(0));
    let held = order(4242);
    let (mine, theirs) = (entry(1, t), entry(2, other));
    let published = sale
        .publish(
            &mine.to_string(),
            Some(mine),
            &[ordered(mine), verdict(theirs, Verdict::Elsewhere(held))],
        )
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    // Her unit is back in this bucket, no order of this bucket is counted for her, and
    // she hears of her order wherever she asks here.
    assert_eq!(sale.stock().await, Some(1));
    assert_eq!(
        sale.news(theirs).await,
        [outcome(Verdict::Elsewhere(held), held)]
    );
    assert_eq!(
        admit_routed(sale, 2).await.decision,
        Decision::AlreadyOrdered(held)
    );
    assert_eq!(
        sale.claim(theirs).await.unwrap(),
        Claimed::News(News::Verdict(Verdict::Elsewhere(held)))
    );
    assert_eq!(sale.claim(theirs).await.unwrap(), Claimed::Held(held));
    let orders: Option<u64> = sale
        .conn
        .clone()
        .hget(sale.keys().voucher(), "orders")
        .await
        .unwrap();
    assert_eq!(orders, Some(1), "only this bucket's order");
}

#[tokio::test]
async fn a_walk_marks_another_bucket_all_out_only_while_it_is_sold_out() {
    let buckets = home_sold_out().await;
    let [home, other] = &buckets[..] else {
        panic!("two buckets")
    };
    assert!(!other.mark_all_out().await, "it has a unit");
    assert!(!other.all_out().await);
    assert!(home.mark_all_out().await);
    assert_eq!(
        home.call(&MarkAllOut {
            bucket: home.voucher,
            since: home.now_ms().await,
        })
        .await
        .unwrap(),
        Marked::Before,
        "another walk marks the buckets"
    );
    assert_eq!(admit_routed(home, 6).await.decision, Decision::SoldOut);
    // No buyer's record was touched.
    assert!(matches!(
        admit_routed(home, 4).await.decision,
        Decision::Queued(_)
    ));
}

/// A sale of two buckets of a unit each, both sold (to buyers 4 and 5).
async fn both_sold_out() -> Vec<Sale> {
    let buckets = home_sold_out().await;
    assert_admitted(&admit_routed(&buckets[1], 5).await);
    buckets
}

/// A bucket reopened (units came back to another bucket of its sale) refuses every mark
/// resting on what was seen before it, whatever a walk or the sightings say; what is seen
/// after it marks it again.
#[tokio::test]
async fn a_reopened_bucket_is_marked_all_out_by_nothing_seen_before() {
    let buckets = both_sold_out().await;
    let [home, _] = &buckets[..] else {
        panic!("two buckets")
    };
    assert!(home.mark_all_out().await, "both sold out");
    assert_eq!(admit_routed(home, 6).await.decision, Decision::SoldOut);
    let seen = home.now_ms().await;
    home.call(&Reopen {
        bucket: home.voucher,
    })
    .await
    .unwrap();
    assert!(!home.all_out().await);
    // Her press walks again, and no walk resting on what it saw before marks it...
    assert_eq!(admit_routed(home, 6).await.decision, Decision::BucketOut);
    let stale = MarkAllOut {
        bucket: home.voucher,
        since: seen,
    };
    assert_eq!(home.call(&stale).await.unwrap(), Marked::Open);
    // ...nor sightings of both buckets sold out then.
    let sightings = Sightings {
        buckets: 2,
        here: 1,
        seen: vec![(0, seen), (1, seen)],
        created: 0,
    };
    let said = admit_seeing(home, 7, Route::LoneWalk, sightings).await;
    assert_eq!(said.decision, Decision::BucketOut);
    assert!(!home.all_out().await, "sightings marked a reopened bucket");
    // A walk that saw them all empty since marks it again.
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    assert!(home.mark_all_out().await);
    assert_eq!(admit_routed(home, 8).await.decision, Decision::SoldOut);
}

/// A mark handed on lasts no longer than the sightings behind the first: a lone walk that a
/// mark ended marks her bucket until that mark's end, not a full mark's life from now.
#[tokio::test]
async fn a_mark_passed_on_ends_with_the_mark_it_came_from() {
    let buckets = both_sold_out().await;
    let [home, other] = &buckets[..] else {
        panic!("two buckets")
    };
    let now = home.now_ms().await;
    let old = now - ALL_OUT_MS + 1_000;
    let marking = |bucket: &Sale, since| MarkAllOut {
        bucket: bucket.voucher,
        since,
    };
    assert_eq!(other.call(&marking(other, old)).await.unwrap(), Marked::Now);
    let left: i64 = other
        .conn
        .clone()
        .pttl(other.keys().all_out())
        .await
        .unwrap();
    assert!(left > 0 && left <= 1_000, "{left} ms left");
    // The mark hands its age to the walk it ends...
    let said = admit_seeing(
        other,
        7,
        Route::LoneWalk,
        Sightings {
            buckets: 2,
            here: 1,
            seen: Vec::new(),
            created: 0,
        },
    )
    .await;
    assert_eq!(said.decision, Decision::SoldOut);
    assert_eq!(said.seen_out, [(1, old)]);
    // ...whose mark of her bucket then ends with it; one resting on older ones, at once.
    assert_eq!(home.call(&marking(home, old)).await.unwrap(), Marked::Now);
    let left: i64 = home.conn.clone().pttl(home.keys().all_out()).await.unwrap();
    assert!(left > 0 && left <= 1_000, "{left} ms left");
    let _: () = home.conn.clone().del(home.keys().all_out()).await.unwrap();
    let older = now - ALL_OUT_MS - 1;
    assert_eq!(
        home.call(&marking(home, older)).await.unwrap(),
        Marked::Open
    );
}

#[tokio::test]
async fn a_unit_a_publication_gives_back_clears_the_bucket_s_all_out_mark() {
    for given_back in [Verdict::Elsewhere(order(4343)), Verdict::IdTaken] {
        let buckets = Sale::live_buckets(2, 2).await;
        let sale = &buckets[1];
        let mine = entry(1, ticket(&admit_routed(sale, 1).await));
        hold_lease(sale).await;
        assert!(sale.mark_all_out().await, "every bucket's unit taken");
        let published = sale
            .publish(&mine.to_string(), Some(mine), &[verdict(mine, given_back)])
            .await
            .unwrap();
        assert_eq!(published, Next::Done);
        // The unit is back, and the bucket's own buyers buy it at once.
        assert_eq!(sale.stock().await, Some(1), "{given_back:?}");
        assert!(!sale.all_out().await, "{given_back:?}: the mark stands");
        assert!(
            matches!(admit_routed(sale, 3).await.decision, Decision::Admitted(_)),
            "{given_back:?}"
        );
    }
}

#[tokio::test]
async fn no_unit_comes_back_after_a_sold_out_verdict_of_the_same_batch() {
    // MySQL had no unit for the batch (Redis was ahead): a purchase it did not take for
    // another reason gives back no unit MySQL has, whatever its place in the batch.
    for given_back in [
        Verdict::Elsewhere(order(4545)),
        Verdict::Cancelled(order(4545)),
        Verdict::IdTaken,
    ] {
        let buckets = Sale::live_buckets(4, 2).await;
        let sale = &buckets[1];
        let first = entry(1, ticket(&admit_routed(sale, 1).await));
        let second = entry(2, ticket(&admit_routed(sale, 2).await));
        hold_lease(sale).await;
        let batch = [
            verdict(first, Verdict::SoldOut),
            verdict(second, given_back),
        ];
        let published = sale
            .publish(&first.to_string(), None, &batch)
            .await
            .unwrap();
        assert_eq!(published, Next::Done);
        assert_eq!(sale.stock().await, Some(0), "{given_back:?}");
    }
}

#[tokio::test]
async fn a_purchase_no_longer_queued_gives_back_no_unit_a_second_time() {
    // A heal already gave her unit back and recorded her order in the other bucket (her
    // order of this bucket was lost by MySQL, its queue entry left behind by a drainer
    // whose lease lapsed); the entry's commit again says elsewhere.
    let held = order(4646);
    let buckets = Sale::live_buckets(2, 2).await;
    let sale = &buckets[1];
    let mine = entry(1, ticket(&admit_routed(sale, 1).await));
    hold_lease(sale).await;
    let _: () = sale
        .conn
        .clone()
        .hset(sale.keys().buyers(), 1, format!("e:{held}"))
        .await
        .unwrap();
    let _: () = sale
        .conn
        .clone()
        .hincr(sale.keys().voucher(), "stock", 1)
        .await
        .unwrap();
    let published = sale
        .publish(
            &mine.to_string(),
            None,
            &[verdict(mine, Verdict::Elsewhere(held))],
        )
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.stock().await, Some(1), "the one unit, once");
    assert_eq!(sale.raw_record(buyer(1)).await, Some(format!("e:{held}")));
}

#[tokio::test]
async fn a_dead_order_of_another_bucket_is_her_record_here_and_gives_the_unit_back() {
    let held = order(4444);
    for (dead, decision) in [
        (Verdict::Cancelled(held), Decision::Cancelled(held)),
        (Verdict::Expired(held), Decision::Expired(held)),
    ] {
        let buckets = Sale::live_buckets(2, 2).await;
        let sale = &buckets[1];
        let mine = entry(1, ticket(&admit_routed(sale, 1).await));
        hold_lease(sale).await;
        assert!(sale.mark_all_out().await);
        // Published by another buyer's request, which wakes hers.
        let published = sale
            .publish(&mine.to_string(), None, &[verdict(mine, dead)])
            .await
            .unwrap();
        assert_eq!(published, Next::Done);
        // Her unit is back (the mark gone), no order of this bucket is counted for her,
        // and she hears what became of her order wherever she asks here.
        assert_eq!(sale.stock().await, Some(1));
        assert!(!sale.all_out().await);
        assert_eq!(sale.news(mine).await, [outcome(dead, held)]);
        assert_eq!(admit_routed(sale, 1).await.decision, decision);
        let orders = sale.voucher_field("orders").await;
        assert_eq!(orders.unwrap_or(0), 0, "no order of this bucket's");
    }
}

// ---- the opening draw (docs/design.md, "The opening draw") ----

#[tokio::test]
async fn an_opening_draw_hands_its_units_out_by_place_whatever_the_arrival() {
    let sale = Sale::drawing(2, 400).await;
    // Buyers 1 to 5 enter in that order, at places that rank them 2, 4, 5, 3, 1.
    let places = [(1, 50), (2, 10), (3, 40), (4, 20), (5, 30)];
    for (user, place) in places {
        let entered = sale.press_at(buyer(user), place).await;
        assert!(
            matches!(entered.decision, Decision::InDraw { draw_at_ms, now_ms } if now_ms < draw_at_ms),
            "{entered:?}"
        );
    }
    // Pressing again, even at a better place, changes nothing; nobody holds a unit yet.
    assert!(matches!(
        sale.press_at(buyer(1), 1).await.decision,
        Decision::InDraw { .. }
    ));
    assert_eq!(sale.stock().await, Some(2));
    assert!(sale.queue().await.is_empty());

    tokio::time::sleep(std::time::Duration::from_millis(450)).await;
    // The first press after the window hands the units to the first two places.
    let first = sale.press_at(buyer(1), 1).await;
    assert_eq!(first.decision, Decision::Waitlisted(3), "{first:?}");
    let queued: Vec<u64> = sale.queue().await.iter().map(|e| e.user.raw()).collect();
    assert_eq!(queued, [2, 4]);
    assert_eq!(sale.stock().await, Some(0));
    // No request of theirs waits for those purchases: a winner's first press since is
    // her purchase's (it waits for its commit, as an admitted one), later ones hear it
    // queued.
    for winner in [2, 4] {
        let first = sale.press_at(buyer(winner), 0).await;
        assert!(matches!(first.decision, Decision::Admitted(_)), "{first:?}");
        assert!(matches!(
            sale.press_at(buyer(winner), 0).await.decision,
            Decision::Queued(_)
        ));
    }
    assert_eq!(
        sale.press_at(buyer(3), 0).await.decision,
        Decision::Waitlisted(2)
    );
    // Late comers are no entrants: sold out, and the window stays closed.
    assert_eq!(sale.press_at(buyer(9), 0).await.decision, Decision::SoldOut);

    // A unit given back goes to the first in line, whoever presses next.
    give_one_back(&sale).await;
    assert_eq!(sale.press_at(buyer(9), 0).await.decision, Decision::SoldOut);
    assert_admitted(&sale.press_at(buyer(5), 0).await);
    assert_eq!(
        sale.press_at(buyer(1), 0).await.decision,
        Decision::Waitlisted(2)
    );
}

#[tokio::test]
async fn a_draw_s_winners_hear_their_orders_and_its_batches_wait_for_no_lapse() {
    let sale = Sale::drawing(2, 100).await;
    for (user, place) in [(1, 10), (2, 20)] {
        sale.press_at(buyer(user), place).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    // A late comer's press hands both units out, and drains.
    let late = sale.press_at(buyer(9), 0).await;
    assert_eq!(late.decision, Decision::SoldOut);
    let lease = late.lease.expect("the queue's lease");
    let [one, two] = lease.batch[..] else {
        panic!("two winners queued: {lease:?}")
    };
    // The next purchase is one nobody waits for: the lease is not handed to it, to lapse,
    // but freed for the next press.
    let next = sale
        .publish(&lease.token, None, &[ordered(one)])
        .await
        .unwrap();
    assert_eq!(next, Next::Done);
    let held: Option<String> = sale.conn.clone().get(sale.keys().lease()).await.unwrap();
    assert_eq!(held, None);
    // The winner whose order is committed hears it at her first press, as her own; that
    // press takes the free lease, to commit the rest.
    let won = sale.press_at(buyer(1), 0).await;
    assert_eq!(won.decision, Decision::Won(id_of(one.ticket), 1));
    assert_eq!(won.lease.map(|lease| lease.batch), Some(vec![two]));
    assert_eq!(
        sale.press_at(buyer(1), 0).await.decision,
        Decision::AlreadyOrdered(id_of(one.ticket))
    );
    // The other's first press is her purchase's: it waits for its commit.
    let first = sale.press_at(buyer(2), 0).await;
    assert_eq!(first.decision, Decision::Admitted(two.ticket));
    assert_eq!(first.lease, None);
}

#[tokio::test]
async fn a_draw_with_fewer_entrants_than_units_sells_the_rest_first_come_first_served() {
    let sale = Sale::drawing(3, 200).await;
    sale.press_at(buyer(1), 5).await;
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    // The entrant's unit goes out with the first press after the window, and then the
    // rest is anyone's.
    assert_admitted(&sale.press_at(buyer(2), 0).await);
    assert_admitted(&sale.press_at(buyer(1), 0).await);
    assert_admitted(&sale.press_at(buyer(3), 0).await);
    assert_eq!(sale.press_at(buyer(4), 0).await.decision, Decision::SoldOut);
}

#[tokio::test]
async fn presses_racing_after_the_window_hand_each_place_out_once() {
    let sale = Sale::drawing(20, 300).await;
    for user in 1..=60 {
        sale.press_at(buyer(user), user * 7 % 61).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(350)).await;
    // Sixty presses at once, each on a connection of its own, as Spin's requests are.
    let mut presses = Vec::new();
    for user in 1..=60 {
        let sale = sale.another_connection().await;
        presses.push(tokio::spawn(
            async move { sale.press_at(buyer(user), 0).await },
        ));
    }
    let mut waitlisted = BTreeSet::new();
    for press in presses {
        match press.await.unwrap().decision {
            Decision::Queued(_) | Decision::Admitted(_) => {}
            Decision::Waitlisted(place) => assert!(waitlisted.insert(place), "place {place} twice"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(waitlisted, (1..=40).collect(), "every loser her own place");
    let queued: Vec<u64> = sale.queue().await.iter().map(|e| e.user.raw()).collect();
    let mut winners = queued.clone();
    winners.sort_unstable();
    winners.dedup();
    assert_eq!(
        (queued.len(), winners.len()),
        (20, 20),
        "each place handed out once"
    );
    // The first twenty places: the buyers whose place (user * 7 mod 61) is lowest.
    let mut by_place: Vec<u64> = (1..=60).collect();
    by_place.sort_by_key(|user| user * 7 % 61);
    by_place.truncate(20);
    by_place.sort_unstable();
    assert_eq!(winners, by_place);
    assert_eq!(sale.stock().await, Some(0));
}

#[tokio::test]
async fn a_line_redis_lost_leaves_the_units_first_come_first_served() {
    let sale = Sale::drawing(2, 100).await;
    sale.press_at(buyer(1), 5).await;
    sale.press_at(buyer(2), 6).await;
    // Redis loses the line (a failover to a replica that never had it); the sale's terms
    // and its stock are still there.
    sale.lose(&sale.keys().lines()).await;
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert_admitted(&sale.press_at(buyer(3), 0).await);
    assert_admitted(&sale.press_at(buyer(1), 0).await);
    assert_eq!(sale.press_at(buyer(2), 0).await.decision, Decision::SoldOut);
}

// ---- a voucher id handed out again (docs/operations.md, "After restoring MySQL") ----

#[tokio::test]
async fn a_created_voucher_takes_its_id_over_whole() {
    let sale = Sale::live(2).await;
    let admitted = sale.admit(buyer(1)).await;
    assert!(matches!(admitted.decision, Decision::Admitted(_)));
    let keys = sale.keys();
    let held = sale
        .call(&Clear::creation(sale.voucher))
        .await
        .unwrap()
        .removed;
    assert!(
        held >= 3,
        "the voucher, its buyers and its queue at least: {held}"
    );
    for key in [keys.voucher(), keys.buyers(), keys.queue(), keys.metrics()] {
        let exists: bool = sale.conn.clone().exists(&key).await.unwrap();
        assert!(!exists, "{key} left behind");
    }
    assert_eq!(
        sale.admit(buyer(1)).await.decision,
        Decision::Missing,
        "nothing of the lost sale answers for the id"
    );
}

// ---- quantities ----

/// A counter of the voucher's, 0 when it was never counted.
async fn counter(sale: &Sale, name: &str) -> i64 {
    sale.call(&ReadFigures {
        voucher_id: sale.voucher,
    })
    .await
    .unwrap()
    .map_or(0, |figures| figures.counter(name))
}

#[tokio::test]
async fn a_press_takes_every_unit_it_asks_for_or_none() {
    let sale = Sale::live_per_buyer(5, 3).await;
    // Above the sale's limit: refused, with nothing taken or counted.
    assert_eq!(
        sale.admit_units(buyer(1), 4).await,
        plain(Decision::TooMany { per_buyer: 3 })
    );
    let three = ticket(&sale.admit_units(buyer(1), 3).await);
    assert_eq!(three.units(), 3);
    assert_eq!(sale.stock().await, Some(2));
    assert_eq!(sale.record(buyer(1)).await, Some(Record::Queued(three)));
    assert_eq!(sale.queue().await, [entry(1, three)]);
    // Three of the two left: how many are left, and nothing taken.
    assert_eq!(
        sale.admit_units(buyer(2), 3).await.decision,
        Decision::Short { left: 2 }
    );
    assert_eq!(
        (sale.stock().await, sale.record(buyer(2)).await),
        (Some(2), None)
    );
    // Her next press hears her purchase with its units, whatever it asks for.
    assert_eq!(
        sale.admit_units(buyer(1), 1).await.decision,
        Decision::Queued(three)
    );
    let two = ticket(&sale.admit_units(buyer(2), 2).await);
    assert_eq!((two.units(), sale.stock().await), (2, Some(0)));
    assert_eq!(
        sale.admit_units(buyer(3), 1).await.decision,
        Decision::SoldOut
    );
    assert_eq!(
        (
            counter(&sale, "purchase:short").await,
            counter(&sale, "purchase:too_many").await,
            counter(&sale, "purchase:admitted").await,
        ),
        (1, 0, 2)
    );
}

#[tokio::test]
async fn a_publication_records_each_order_s_units_and_gives_refused_ones_back_whole() {
    let sale = Sale::live_per_buyer(8, 4).await;
    let own = entry(1, ticket(&sale.admit_units(buyer(1), 4).await));
    let taken = entry(2, ticket(&sale.admit_units(buyer(2), 3).await));
    let held = entry(3, ticket(&sale.admit_units(buyer(3), 1).await));
    assert_eq!(sale.stock().await, Some(0));
    // Hers is committed; his id was taken (his three go back); the third buyer holds an
    // order of two units MySQL has and Redis never charged (one more unit taken).
    let batch = [
        ordered(own),
        verdict(taken, Verdict::IdTaken),
        verdict(held, Verdict::Duplicate(order(900), 2)),
    ];
    assert_eq!(publish_own(&sale, own, &batch).await.unwrap(), Next::Done);
    assert_eq!(
        sale.record(buyer(1)).await,
        Some(Record::Ordered(id_of(own.ticket), 4))
    );
    assert_eq!(sale.record(buyer(2)).await, None);
    assert_eq!(
        sale.record(buyer(3)).await,
        Some(Record::Ordered(order(900), 2))
    );
    assert_eq!(sale.stock().await, Some(3 - 1));
    assert_eq!(counter(&sale, "units:sold").await, 4);
    // A buyer with an order of several units hears its id.
    assert_eq!(
        sale.admit_units(buyer(1), 1).await.decision,
        Decision::AlreadyOrdered(id_of(own.ticket))
    );
}

#[tokio::test]
async fn a_sold_out_verdict_leaves_mysql_s_units_less_those_queued_after_the_batch() {
    for (mysql_left, expected) in [(1, 0), (4, 2)] {
        // Redis hands out ten units; MySQL commits the first purchase's four and refuses
        // the second's, and has `mysql_left` units once the batch committed (one, or
        // four with returns since); the third's two stay queued after the batch.
        let sale = Sale::live_per_buyer(10, 4).await;
        let own = entry(1, ticket(&sale.admit_units(buyer(1), 4).await));
        let refused = entry(2, ticket(&sale.admit_units(buyer(2), 4).await));
        let queued = entry(3, ticket(&sale.admit_units(buyer(3), 2).await));
        let ledger = Ledger {
            orders: 1,
            returned_event: 0,
            stock: mysql_left,
        };
        // MySQL's word on the second: the one left, or none.
        let refused_verdict = match mysql_left {
            1 => Verdict::Short { left: 1 },
            _ => Verdict::SoldOut,
        };
        let batch = [ordered(own), verdict(refused, refused_verdict)];
        sale.publish_counted(&own.to_string(), Some(own), &batch, ledger, Limits::SHIPPED)
            .await
            .unwrap();
        assert_eq!(sale.queue().await, [queued]);
        assert_eq!(
            sale.stock().await,
            Some(expected),
            "MySQL had {mysql_left} left"
        );
    }
}

#[tokio::test]
async fn a_return_gives_back_its_order_s_units_once() {
    let sale = Sale::live_per_buyer(5, 3).await;
    let own = entry(1, ticket(&sale.admit_units(buyer(1), 3).await));
    assert_eq!(
        publish_own(&sale, own, &[ordered(own)]).await.unwrap(),
        Next::Done
    );
    let returned = Returned {
        event: 1,
        order_id: id_of(own.ticket),
        user: buyer(1),
        cancelled: true,
        units: 3,
    };
    for _ in 0..2 {
        let restock = Restock {
            voucher_id: sale.voucher,
            returns: &[returned],
            after: 0,
            swept: None,
        };
        sale.call(&restock).await.unwrap();
        assert_eq!(sale.stock().await, Some(5));
    }
    assert_eq!(
        sale.record(buyer(1)).await,
        Some(Record::Cancelled(id_of(own.ticket)))
    );
    assert_eq!(counter(&sale, "units:returned").await, 3);
}

#[tokio::test]
async fn a_draw_hands_each_entrant_her_whole_quantity_in_place_order() {
    let sale = Sale::drawing_per_buyer(4, 200, 3).await;
    // Places 1, 2 and 3: three units, two, one.
    for (user, place, units) in [(1, 1, 3), (2, 2, 2), (3, 3, 1)] {
        let entered = sale.press_for(buyer(user), place, units).await;
        assert!(
            matches!(entered.decision, Decision::InDraw { .. }),
            "{entered:?}"
        );
    }
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    // The first press after the window hands the first her three; the second's two do
    // not fit the one left, and she keeps her place while the third gets his one.
    assert_eq!(
        sale.press_for(buyer(9), 0, 1).await.decision,
        Decision::SoldOut
    );
    let units = |record: Option<Record>| match record {
        Some(Record::Queued(ticket)) => ticket.units(),
        _ => 0,
    };
    assert_eq!(units(sale.record(buyer(1)).await), 3);
    assert_eq!(units(sale.record(buyer(3)).await), 1);
    assert_eq!(sale.record(buyer(2)).await, None);
    assert_eq!(
        sale.press_for(buyer(2), 0, 2).await.decision,
        Decision::Waitlisted(1)
    );
}

#[tokio::test]
async fn units_no_entrant_fits_go_to_anyone_after_the_draw() {
    let sale = Sale::drawing_per_buyer(2, 200, 3).await;
    sale.press_for(buyer(1), 1, 3).await;
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    // Her three do not fit the two: she keeps her place, and the two are anyone's.
    let other = sale.press_for(buyer(2), 0, 2).await;
    assert!(matches!(other.decision, Decision::Admitted(_)), "{other:?}");
    assert_eq!(
        sale.press_for(buyer(1), 0, 3).await.decision,
        Decision::Waitlisted(1)
    );
}

#[tokio::test]
async fn a_bucket_with_too_few_units_sends_the_buyer_on_and_marks_nothing() {
    let sales = Sale::live_buckets_per_buyer(3, 2, 3).await;
    // The first bucket has two units: a buyer asking three goes on, told how many it
    // has, and it notes no sighting (it is not sold out).
    let sale = &sales[0];
    let first = sale.admit_routed_units(buyer(1), Route::Walk, 3).await;
    assert_eq!(
        (first.decision, first.left, first.seen_out),
        (Decision::BucketOut, 2, Vec::new())
    );
    assert_eq!(sale.stock().await, Some(2));
    let none: Option<i64> = sale
        .conn
        .clone()
        .hget(sale.keys().seen_out(), 0)
        .await
        .unwrap();
    assert_eq!(none, None);
}
