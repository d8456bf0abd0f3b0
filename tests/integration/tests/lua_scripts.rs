//! The Lua scripts in `lua/`, run against the real Redis exactly as the component calls
//! them: the same keys, arguments and replies.

use std::collections::{BTreeMap, HashSet};

use redis::{AsyncCommands, Value};
use seckill_tests::backends::{fresh_voucher_id, key, redis};
use seckill_tests::invariants;
use seckill_tests::scripts::{
    commit_batch, create_voucher, order_id_of, outcome_of, split_entry, Admission, Claimed,
    Decision, Published, Sale, Terms, BATCH, HANDOVER_MS, KEPT_AFTER_END_MS, LEASE_MS, MAX_QUEUED,
    METRICS, STALE, VIEW,
};

/// An answer that does not come with the lease.
fn plain(decision: Decision) -> Admission {
    Admission {
        decision,
        lease: None,
    }
}

/// The ticket of an admission that must have been admitted.
fn ticket(admission: &Admission) -> String {
    admission
        .ticket()
        .unwrap_or_else(|| panic!("not admitted: {admission:?}"))
        .to_string()
}

fn entry(user: u64, ticket: &str) -> String {
    format!("{user}:{ticket}")
}

/// Admits `users` one after the other; their tickets, in order.
async fn admit_all(sale: &Sale, users: impl IntoIterator<Item = u64>) -> Vec<String> {
    let mut tickets = Vec::new();
    for user in users {
        tickets.push(ticket(&sale.admit(user).await));
    }
    tickets
}

/// Keeps the drainer's lease, whoever holds it, for the rest of the test: a slow machine
/// must not let it lapse between two steps.
async fn hold_lease(sale: &Sale) {
    let held: bool = sale
        .conn
        .clone()
        .pexpire(key(sale.voucher, "lease"), 600_000)
        .await
        .unwrap();
    assert!(held, "no lease to hold");
}

async fn pttl(sale: &Sale, name: &str) -> i64 {
    sale.conn
        .clone()
        .pttl(key(sale.voucher, name))
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
    let names: Vec<String> = conn
        .keys(format!("seckill:{{{}}}:*", sale.voucher))
        .await
        .unwrap();
    let mut state = BTreeMap::new();
    // The counters count every decision, even one that changes nothing else; `counters`
    // reads them.
    for name in names.into_iter().filter(|name| !name.ends_with(":metrics")) {
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
async fn records(sale: &Sale) -> BTreeMap<u64, String> {
    sale.records().await.into_iter().collect()
}

/// A sequence prefix of this test's own: tests that reset or use up the day's sequence
/// keep away from the one every other test draws from.
fn private_sequence() -> String {
    format!("seckill-test:order-seq:{}", fresh_voucher_id())
}

/// Admission as the component calls it, drawing from the sequence under `prefix`; the
/// admitted ticket's (seconds, sequence).
async fn admit_from(sale: &Sale, prefix: &str, user: u64) -> redis::RedisResult<(i64, i64)> {
    let admission = sale.try_admit_from(user, BATCH, MAX_QUEUED, prefix).await?;
    let ticket = admission.ticket().expect("admitted");
    let (seconds, sequence) = ticket.split_once(':').unwrap();
    Ok((seconds.parse().unwrap(), sequence.parse().unwrap()))
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
        .map(|(user, sale)| tokio::spawn(async move { (user, sale.admit(user).await) }))
        .collect();
    let mut admitted = BTreeMap::new();
    let mut sold_out = 0;
    let mut leads = Vec::new();
    for task in tasks {
        let (user, admission) = task.await.unwrap();
        match &admission.decision {
            Decision::Admitted(ticket) => {
                assert!(admitted.insert(user, ticket.clone()).is_none());
            }
            Decision::SoldOut => sold_out += 1,
            other => panic!("unexpected {other:?}"),
        }
        if let Some(lease) = admission.lease {
            leads.push((user, admission.decision, lease));
        }
    }
    assert_eq!((admitted.len(), sold_out), (20, 280));
    let tickets: HashSet<&String> = admitted.values().collect();
    assert_eq!(tickets.len(), 20, "a ticket handed out twice");
    assert_eq!(sale.stock().await, Some(0));

    let queue = sale.queue().await;
    assert_eq!(queue.len(), 20);
    let queued: BTreeMap<u64, String> = queue.iter().map(|e| split_entry(e)).collect();
    assert_eq!(queued, admitted);
    let expected: BTreeMap<u64, String> = admitted
        .iter()
        .map(|(user, ticket)| (*user, format!("q:{ticket}")))
        .collect();
    assert_eq!(records(&sale).await, expected);

    // The first admission found a quiet queue: it alone leads, with its own entry.
    let [(user, Decision::Admitted(ticket), (token, batch))] = leads.as_slice() else {
        panic!("not exactly one admitted lead: {leads:?}")
    };
    let own = entry(*user, ticket);
    assert_eq!(token, &own);
    assert_eq!(batch, std::slice::from_ref(&own));
    assert_eq!(queue[0], own);
    assert_eq!(sale.lease().await, Some(own));
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
        .map(|sale| tokio::spawn(async move { sale.admit(7).await }))
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
        Some((entry(7, &t), vec![entry(7, &t)])),
        "the first press leads"
    );
    let queued = replies
        .iter()
        .filter(|r| **r == plain(Decision::Queued(t.clone())))
        .count();
    assert_eq!(queued, 39);
    assert_eq!(sale.stock().await, Some(99));
    assert_eq!(sale.queue().await, [entry(7, &t)]);
    assert_eq!(sale.records().await, [(7, format!("q:{t}"))]);
}

#[tokio::test]
async fn the_window_follows_redis_time_and_a_buyer_hears_of_her_purchase_after_the_end() {
    let sale = Sale::live(5).await;
    let t1 = ticket(&sale.admit(1).await);
    hold_lease(&sale).await;
    let now = sale.now_ms().await;

    // After the end: a buyer with an order, or a purchase still queued, hears of it.
    sale.load(4, now - 120_000, now - 60_000, &[(5, "500")])
        .await;
    let before = state(&sale).await;
    assert_eq!(
        sale.admit(5).await,
        plain(Decision::AlreadyOrdered("500".into()))
    );
    assert_eq!(sale.admit(1).await, plain(Decision::Queued(t1.clone())));
    assert_eq!(sale.admit(6).await, plain(Decision::Ended));
    assert_eq!(state(&sale).await, before);

    // Before the beginning, nobody is read.
    sale.load(4, now + 60_000, now + 120_000, &[]).await;
    let before = state(&sale).await;
    for user in [5, 1, 6] {
        assert_eq!(sale.admit(user).await, plain(Decision::NotStarted));
    }
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.stock().await, Some(4));
    assert_eq!(sale.queue().await, [entry(1, &t1)]);
}

#[tokio::test]
async fn a_voucher_without_state_is_missing_unless_mysql_said_it_does_not_exist() {
    let sale = Sale {
        conn: redis().await,
        voucher: fresh_voucher_id(),
    };
    let mut conn = sale.conn.clone();
    assert_eq!(sale.admit(1).await, plain(Decision::Missing));
    // MySQL's word that no such voucher exists, as the component keeps it.
    let absent = key(sale.voucher, "absent");
    let _: () = conn.set(&absent, 1).await.unwrap();
    assert_eq!(sale.admit(1).await, plain(Decision::Unknown));
    // A creation disproves it.
    let now = sale.now_ms().await;
    sale.load(3, now - 1000, now + 60_000, &[]).await;
    let exists: bool = conn.exists(&absent).await.unwrap();
    assert!(!exists, "a load left the voucher marked absent");
    sale.lose(&["voucher"]).await;
    assert_eq!(sale.admit(1).await, plain(Decision::Missing));
    let voucher = key(sale.voucher, "voucher");
    let _: () = conn.hset(&voucher, "stock", 5).await.unwrap();
    assert_eq!(sale.admit(1).await, plain(Decision::Missing));
    let now = sale.now_ms().await;
    let _: () = conn.hset(&voucher, "begin_ms", now - 1000).await.unwrap();
    assert_eq!(sale.admit(1).await, plain(Decision::Missing));
    // The same without `begin_ms`.
    let _: () = conn.hdel(&voucher, "begin_ms").await.unwrap();
    let _: () = conn.hset(&voucher, "end_ms", now + 60_000).await.unwrap();
    assert_eq!(sale.admit(1).await, plain(Decision::Missing));
    assert_eq!(sale.record(1).await, None);
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.stock().await, Some(5));
    let _: () = conn.del(&voucher).await.unwrap();
}

#[tokio::test]
async fn admission_throttles_at_the_queue_limit_without_taking_anything() {
    let sale = Sale::live(10).await;
    let now = sale.now_ms().await;
    sale.load(10, now - 60_000, now + 3_600_000, &[(9, "900")])
        .await;
    let mut tickets = Vec::new();
    for user in 1..=3 {
        let admission = sale.try_admit_limited(user, BATCH, 3).await.unwrap();
        tickets.push(ticket(&admission));
    }
    hold_lease(&sale).await;
    let before = state(&sale).await;
    assert_eq!(
        sale.try_admit_limited(4, BATCH, 3).await.unwrap(),
        plain(Decision::Throttled)
    );
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.stock().await, Some(7));
    assert_eq!(sale.record(4).await, None);
    assert_eq!(sale.queue().await.len(), 3);
    // A full queue still answers those it knows.
    assert_eq!(
        sale.try_admit_limited(2, BATCH, 3).await.unwrap(),
        plain(Decision::Queued(tickets[1].clone()))
    );
    assert_eq!(
        sale.try_admit_limited(9, BATCH, 3).await.unwrap(),
        plain(Decision::AlreadyOrdered("900".into()))
    );
    assert_eq!(state(&sale).await, before);
    // One place freed, one buyer in.
    let published = sale
        .publish(
            &entry(1, &tickets[0]),
            &entry(1, &tickets[0]),
            &[(entry(1, &tickets[0]), "ordered", order_id_of(&tickets[0]))],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(sale.lease().await, Some(entry(2, &tickets[1])));
    hold_lease(&sale).await;
    let admission = sale.try_admit_limited(4, BATCH, 3).await.unwrap();
    assert!(matches!(admission.decision, Decision::Admitted(_)));
    assert_eq!(
        sale.try_admit_limited(5, BATCH, 3).await.unwrap().decision,
        Decision::Throttled
    );
    // Sold out is still sold out, throttled or not.
    let sold = Sale::live(1).await;
    sold.admit(1).await;
    assert_eq!(
        sold.try_admit_limited(2, BATCH, 1).await.unwrap().decision,
        Decision::SoldOut
    );
}

// ---- the lease ----

#[tokio::test]
async fn the_first_admission_of_a_quiet_queue_leads_with_its_own_entry() {
    let sale = Sale::live(5).await;
    let first = sale.admit(1).await;
    let t1 = ticket(&first);
    assert_eq!(first.lease, Some((entry(1, &t1), vec![entry(1, &t1)])));
    assert_eq!(sale.lease().await, Some(entry(1, &t1)));
    let lease_ttl = pttl(&sale, "lease").await;
    assert!(0 < lease_ttl && lease_ttl <= LEASE_MS, "{lease_ttl}");
    hold_lease(&sale).await;

    let second = sale.admit(2).await;
    let t2 = ticket(&second);
    assert_eq!(second, plain(Decision::Admitted(t2.clone())));
    assert_eq!(sale.lease().await, Some(entry(1, &t1)));
    assert_eq!(sale.queue().await, [entry(1, &t1), entry(2, &t2)]);
    assert_eq!(sale.stock().await, Some(3));
}

/// Checks a rescuer's lease: "r:<seconds>:<microseconds>:<user>", held in Redis.
async fn assert_rescuer(sale: &Sale, admission: &Admission, user: u64, batch: &[String]) {
    let (token, got) = admission.lease.as_ref().expect("no lease");
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
    sale.load(2, now - 60_000, now + 3_600_000, &[(9, "900")])
        .await;
    let tickets = admit_all(&sale, [1, 2]).await;
    hold_lease(&sale).await;
    let queue = vec![entry(1, &tickets[0]), entry(2, &tickets[1])];
    assert_eq!(sale.admit(3).await, plain(Decision::SoldOut));

    for (user, decision) in [
        (3, Decision::SoldOut),
        (9, Decision::AlreadyOrdered("900".into())),
        (1, Decision::Queued(tickets[0].clone())),
    ] {
        sale.expire_lease().await;
        let admission = sale.admit(user).await;
        assert_eq!(admission.decision, decision);
        assert_rescuer(&sale, &admission, user, &queue).await;
        // Held: the next one does not lead.
        assert_eq!(sale.admit(user).await, plain(decision));
    }
    sale.load(0, now - 120_000, now - 60_000, &[]).await;
    sale.expire_lease().await;
    let admission = sale.admit(4).await;
    assert_eq!(admission.decision, Decision::Ended);
    assert_rescuer(&sale, &admission, 4, &queue).await;

    // Rescuers take nothing.
    assert_eq!(sale.queue().await, queue);
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([
            (1, format!("q:{}", tickets[0])),
            (2, format!("q:{}", tickets[1])),
            (9, "o:900".to_string()),
        ])
    );
    assert_eq!(sale.stock().await, Some(0));

    // Nothing queued: nobody leads.
    let quiet = Sale::live(0).await;
    assert_eq!(quiet.admit(1).await, plain(Decision::SoldOut));
    assert_eq!(quiet.lease().await, None);
}

#[tokio::test]
async fn the_first_batch_holds_at_most_the_batch_size() {
    let sale = Sale::live(10).await;
    let mut entries = Vec::new();
    for user in 1..=5 {
        let admission = sale.try_admit_limited(user, 3, MAX_QUEUED).await.unwrap();
        entries.push(entry(user, &ticket(&admission)));
    }
    sale.expire_lease().await;
    let admission = sale.try_admit_limited(6, 3, MAX_QUEUED).await.unwrap();
    let t6 = ticket(&admission);
    // Its own entry is sixth: the batch is the head of the queue.
    assert_eq!(
        admission.lease,
        Some((entry(6, &t6), entries[..3].to_vec()))
    );
    assert_eq!(sale.lease().await, Some(entry(6, &t6)));
    assert_eq!(sale.queue().await.len(), 6);
}

#[tokio::test]
async fn a_full_queue_whose_drainer_is_gone_is_drained_by_a_throttled_request() {
    let sale = Sale::live(10).await;
    let mut queue = Vec::new();
    for user in 1..=3 {
        let admission = sale.try_admit_limited(user, BATCH, 3).await.unwrap();
        queue.push(entry(user, &ticket(&admission)));
    }
    // The queue is at its limit and its drainer died: its lease lapsed.
    sale.expire_lease().await;
    let before = state(&sale).await;
    let admission = sale.try_admit_limited(4, BATCH, 3).await.unwrap();
    assert_eq!(admission.decision, Decision::Throttled);
    assert_rescuer(&sale, &admission, 4, &queue).await;
    hold_lease(&sale).await;
    // The lease is all it took: no unit, no record, no place in the queue.
    let mut after = state(&sale).await;
    let token = admission.lease.clone().unwrap().0;
    assert_eq!(
        after.remove(&key(sale.voucher, "lease")),
        Some(Content::Text(token.clone()))
    );
    assert_eq!(after, before);
    assert_eq!(sale.stock().await, Some(7));
    assert_eq!(sale.record(4).await, None);
    // Held: the next throttled request does not lead.
    assert_eq!(
        sale.try_admit_limited(5, BATCH, 3).await.unwrap(),
        plain(Decision::Throttled)
    );
    // Its batch published, the queue has room again.
    let ordered = |entry: &String| (entry.clone(), "ordered", order_id_of(&split_entry(entry).1));
    let published = sale
        .publish(&token, "", &[ordered(&queue[0]), ordered(&queue[1])])
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(sale.lease().await.as_ref(), Some(&queue[2]));
    let admitted = sale.try_admit_limited(4, BATCH, 3).await.unwrap();
    assert!(
        matches!(admitted.decision, Decision::Admitted(_)),
        "{admitted:?}"
    );
    assert_eq!(sale.stock().await, Some(6));

    // A smaller batch size: the rescuer's batch is the queue's head.
    let sale = Sale::live(10).await;
    let tickets = admit_all(&sale, 1..=3).await;
    sale.expire_lease().await;
    let admission = sale.try_admit_limited(4, 2, 3).await.unwrap();
    assert_eq!(admission.decision, Decision::Throttled);
    let head = [entry(1, &tickets[0]), entry(2, &tickets[1])];
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
    let e: Vec<String> = (0..4).map(|i| entry(i as u64 + 1, &t[i])).collect();
    let published = sale
        .publish(
            &e[0],
            &e[0],
            &[
                (e[0].clone(), "ordered", order_id_of(&t[0])),
                (e[1].clone(), "duplicate", 777),
                (e[2].clone(), "ordered", order_id_of(&t[2])),
                (e[3].clone(), "sold_out", order_id_of(&t[3])),
            ],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([
            (1, format!("o:{}", order_id_of(&t[0]))),
            (2, "o:777".to_string()),
            (3, format!("o:{}", order_id_of(&t[2]))),
        ])
    );
    // MySQL had no unit left: Redis's count was ahead.
    assert_eq!(sale.stock().await, Some(0));
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.lease().await, None);
    assert!(sale.news(&e[0]).await.is_empty());
    assert_eq!(sale.news(&e[1]).await, ["duplicate:777"]);
    assert_eq!(
        sale.news(&e[2]).await,
        [format!("ordered:{}", order_id_of(&t[2]))]
    );
    assert_eq!(
        sale.news(&e[3]).await,
        [format!("sold_out:{}", order_id_of(&t[3]))]
    );
    for entry in &e[1..] {
        let ttl = pttl(&sale, &format!("done:{entry}")).await;
        assert!(0 < ttl && ttl <= 60_000, "{ttl}");
    }
    assert_eq!(
        sale.admit(2).await,
        plain(Decision::AlreadyOrdered("777".into()))
    );
    assert_eq!(sale.admit(4).await, plain(Decision::SoldOut));
}

#[tokio::test]
async fn id_taken_gives_the_unit_back_and_the_buyer_may_buy_again() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, [1, 2]).await;
    hold_lease(&sale).await;
    assert_eq!(sale.stock().await, Some(8));
    let published = sale
        .publish(
            &entry(1, &t[0]),
            &entry(1, &t[0]),
            &[
                (entry(1, &t[0]), "ordered", order_id_of(&t[0])),
                (entry(2, &t[1]), "id_taken", order_id_of(&t[1])),
            ],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(sale.stock().await, Some(9));
    assert_eq!(sale.record(2).await, None);
    assert_eq!(
        sale.news(&entry(2, &t[1])).await,
        [format!("id_taken:{}", order_id_of(&t[1]))]
    );
    let again = sale.admit(2).await;
    let t2 = ticket(&again);
    assert_ne!(t2, t[1]);
    assert_eq!(again.lease, Some((entry(2, &t2), vec![entry(2, &t2)])));
    assert_eq!(sale.stock().await, Some(8));
}

#[tokio::test]
async fn a_publish_without_the_lease_changes_nothing_but_the_orders_mysql_holds() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    let batch = [(entry(1, &t[0]), "sold_out", order_id_of(&t[0]))];
    assert_eq!(sale.lease().await, Some(entry(1, &t[0])));
    let before = state(&sale).await;
    // Another buyer's entry, the drainer's bare ticket, a stranger's token, none.
    let other = entry(2, &t[1]);
    for token in ["someone", other.as_str(), t[0].as_str(), ""] {
        let published = sale.publish(token, &entry(1, &t[0]), &batch).await;
        assert_eq!(published.unwrap(), Published::Lost, "token {token:?}");
        assert_eq!(state(&sale).await, before);
    }
    // Its own lease lapsed.
    sale.expire_lease().await;
    let before = state(&sale).await;
    let published = sale
        .publish(&entry(1, &t[0]), &entry(1, &t[0]), &batch)
        .await;
    assert_eq!(published.unwrap(), Published::Lost);
    assert_eq!(state(&sale).await, before);
    // Only the orders MySQL holds are recorded, true whoever writes them: a buyer told
    // 201 by this drainer is never told sold_out later.
    let id = order_id_of(&t[0]);
    let ordered = [(entry(1, &t[0]), "ordered", id)];
    let published = sale
        .publish(&entry(1, &t[0]), &entry(1, &t[0]), &ordered)
        .await;
    assert_eq!(published.unwrap(), Published::Lost);
    assert_eq!(sale.record(1).await, Some(format!("o:{id}")));
    assert_eq!(orders_recorded(&sale).await, 1);
    // Nothing else: put the record and its count back and compare.
    let _: () = sale
        .conn
        .clone()
        .hset(key(sale.voucher, "buyers"), 1, format!("q:{}", t[0]))
        .await
        .unwrap();
    let _: () = sale
        .conn
        .clone()
        .hdel(key(sale.voucher, "voucher"), "orders")
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
    let e: Vec<(String, &str, u64)> = (0..3)
        .map(|i| (entry(i as u64 + 1, &t[i]), "sold_out", order_id_of(&t[i])))
        .collect();
    let foreign = (entry(1, &t[1]), "sold_out", order_id_of(&t[1]));
    let beyond = (entry(4, &t[2]), "sold_out", order_id_of(&t[2]));
    let before = state(&sale).await;
    for batch in [
        vec![e[1].clone()],
        vec![e[0].clone(), e[2].clone()],
        vec![e[1].clone(), e[0].clone()],
        vec![foreign],
        vec![e[0].clone(), e[1].clone(), e[2].clone(), beyond],
    ] {
        let published = sale.publish(&e[0].0, &e[0].0, &batch).await.unwrap();
        assert_eq!(published, Published::Lost, "{batch:?}");
        assert_eq!(state(&sale).await, before, "{batch:?}");
    }
    // The same drainer with the head itself is heard.
    let published = sale.publish(&e[0].0, &e[0].0, &e[..1]).await.unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(sale.queue().await, [e[1].0.clone(), e[2].0.clone()]);
}

#[tokio::test]
async fn a_drainer_passes_batch_after_batch_until_its_own_is_published_then_the_lease() {
    let sale = Sale::live(300).await;
    let users: Vec<u64> = (1..=260).collect();
    let t = admit_all(&sale, users.iter().copied()).await;
    let e: Vec<String> = users.iter().zip(&t).map(|(u, t)| entry(*u, t)).collect();
    let ordered = |range: std::ops::Range<usize>| -> Vec<(String, &'static str, u64)> {
        range
            .map(|i| (e[i].clone(), "ordered", order_id_of(&t[i])))
            .collect()
    };
    // Buyer 3's request drains: its own purchase is third in the queue.
    sale.expire_lease().await;
    assert_eq!(sale.claim(3, &t[2]).await.unwrap(), Claimed::Lead);
    hold_lease(&sale).await;

    let published = sale.publish(&e[2], &e[2], &ordered(0..2)).await.unwrap();
    assert_eq!(
        published,
        Published::Next(e[2..2 + BATCH as usize].to_vec())
    );
    assert_eq!(sale.lease().await.as_ref(), Some(&e[2]));
    let lease_ttl = pttl(&sale, "lease").await;
    assert!(0 < lease_ttl && lease_ttl <= LEASE_MS, "{lease_ttl}");
    assert_eq!(sale.queue().await, e[2..]);

    let published = sale.publish(&e[2], &e[2], &ordered(2..258)).await.unwrap();
    assert_eq!(published, Published::Done);
    // The oldest queued purchase leads next, under its entry, and its request hears so.
    assert_eq!(sale.lease().await.as_ref(), Some(&e[258]));
    hold_lease(&sale).await;
    assert_eq!(sale.news(&e[258]).await, ["lead"]);
    assert!(sale.news(&e[2]).await.is_empty());
    assert_eq!(
        sale.news(&e[257]).await,
        [format!("ordered:{}", order_id_of(&t[257]))]
    );
    assert_eq!(sale.queue().await, e[258..]);

    // Its request publishes nothing first, to get the batch.
    let published = sale.publish(&e[258], &e[258], &[]).await.unwrap();
    assert_eq!(published, Published::Next(e[258..].to_vec()));
    let published = sale
        .publish(&e[258], &e[258], &ordered(258..260))
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(sale.lease().await, None);
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.records().await.len(), 260);
    assert!(sale
        .records()
        .await
        .iter()
        .all(|(_, record)| record.starts_with("o:")));
    assert_eq!(sale.stock().await, Some(40));
}

#[tokio::test]
async fn a_lease_handed_on_is_short_until_its_new_holder_takes_it_up() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, [1, 2]).await;
    let e = [entry(1, &t[0]), entry(2, &t[1])];
    assert_eq!(sale.lease().await.as_ref(), Some(&e[0]));
    hold_lease(&sale).await;
    let published = sale
        .publish(
            &e[0],
            &e[0],
            &[(e[0].clone(), "ordered", order_id_of(&t[0]))],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    // Handed to the head's request, which may have gone: it lapses within HANDOVER_MS.
    let handed = pttl(&sale, "lease").await;
    assert!(0 < handed && handed <= HANDOVER_MS, "{handed}");
    // Its request takes it up, publishing nothing to get its batch: a drainer's lease.
    let published = sale.publish(&e[1], &e[1], &[]).await.unwrap();
    assert_eq!(published, Published::Next(vec![e[1].clone()]));
    let taken = pttl(&sale, "lease").await;
    assert!(HANDOVER_MS < taken && taken <= LEASE_MS, "{taken}");
    assert_eq!(sale.lease().await.as_ref(), Some(&e[1]));
    assert_eq!(sale.news(&e[1]).await, ["lead"]);
    assert!(sale.news(&e[0]).await.is_empty());
}

#[tokio::test]
async fn a_drainer_without_a_purchase_publishes_one_batch_and_passes_the_lease() {
    let sale = Sale::live(3).await;
    let t = admit_all(&sale, 1..=3).await;
    sale.expire_lease().await;
    let rescue = sale.admit(4).await;
    assert_eq!(rescue.decision, Decision::SoldOut);
    let (token, batch) = rescue.lease.unwrap();
    assert_eq!(batch.len(), 3);
    hold_lease(&sale).await;
    let published = sale
        .publish(
            &token,
            "",
            &[
                (batch[0].clone(), "ordered", order_id_of(&t[0])),
                (batch[1].clone(), "ordered", order_id_of(&t[1])),
            ],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(sale.lease().await, Some(entry(3, &t[2])));
    // Every buyer hears, its first one too.
    assert_eq!(
        sale.news(&batch[0]).await,
        [format!("ordered:{}", order_id_of(&t[0]))]
    );
    assert_eq!(
        sale.news(&batch[1]).await,
        [format!("ordered:{}", order_id_of(&t[1]))]
    );
    assert_eq!(sale.news(&entry(3, &t[2])).await, ["lead"]);

    // The lease passes on under an empty queue: deleted.
    sale.expire_lease().await;
    let rescue = sale.admit(4).await;
    let (token, batch) = rescue.lease.unwrap();
    assert_eq!(batch, [entry(3, &t[2])]);
    let published = sale
        .publish(
            &token,
            "",
            &[(batch[0].clone(), "sold_out", order_id_of(&t[2]))],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(sale.lease().await, None);
    assert_eq!(sale.record(3).await, None);
}

#[tokio::test]
async fn a_publish_repeated_after_it_succeeded_is_lost() {
    // Drainer A's lease lapses with its batch committed but not published; B takes over,
    // commits the same batch again and publishes it. A comes back.
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=3).await;
    let e: Vec<(String, &str, u64)> = (0..3)
        .map(|i| (entry(i as u64 + 1, &t[i]), "ordered", order_id_of(&t[i])))
        .collect();
    sale.expire_lease().await;
    assert_eq!(sale.claim(2, &t[1]).await.unwrap(), Claimed::Lead);
    assert_eq!(sale.lease().await.as_ref(), Some(&e[1].0));
    hold_lease(&sale).await;
    let published = sale.publish(&e[1].0, &e[1].0, &[]).await.unwrap();
    let queue: Vec<String> = e.iter().map(|(entry, _, _)| entry.clone()).collect();
    assert_eq!(published, Published::Next(queue));
    assert_eq!(
        sale.publish(&e[1].0, &e[1].0, &e).await.unwrap(),
        Published::Done
    );
    let before = state(&sale).await;
    assert_eq!(
        sale.publish(&e[0].0, &e[0].0, &e).await.unwrap(),
        Published::Lost
    );
    assert_eq!(
        sale.publish(&e[1].0, &e[1].0, &e).await.unwrap(),
        Published::Lost
    );
    assert_eq!(state(&sale).await, before);

    // The same drainer, still holding the lease, repeating a batch it published.
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=4).await;
    let e: Vec<(String, &str, u64)> = (0..4)
        .map(|i| (entry(i as u64 + 1, &t[i]), "ordered", order_id_of(&t[i])))
        .collect();
    sale.expire_lease().await;
    assert_eq!(sale.claim(4, &t[3]).await.unwrap(), Claimed::Lead);
    hold_lease(&sale).await;
    let published = sale.publish(&e[3].0, &e[3].0, &e[..2]).await.unwrap();
    assert_eq!(
        published,
        Published::Next(vec![e[2].0.clone(), e[3].0.clone()])
    );
    let before = state(&sale).await;
    let published = sale.publish(&e[3].0, &e[3].0, &e[..2]).await.unwrap();
    assert_eq!(published, Published::Lost);
    assert_eq!(state(&sale).await, before);
}

#[tokio::test]
async fn a_publish_after_redis_lost_the_sale_never_passes_for_a_sale() {
    let sale = Sale::live(2).await;
    let t = admit_all(&sale, [1, 2]).await;
    hold_lease(&sale).await;
    // Redis loses the voucher's terms (a restart without persistence).
    sale.lose(&["voucher"]).await;
    let published = sale
        .publish(
            &entry(1, &t[0]),
            &entry(1, &t[0]),
            &[
                (entry(1, &t[0]), "sold_out", order_id_of(&t[0])),
                (entry(2, &t[1]), "id_taken", order_id_of(&t[1])),
            ],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    let voucher = key(sale.voucher, "voucher");
    let exists: bool = sale.conn.clone().exists(&voucher).await.unwrap();
    assert!(!exists, "a publication created the voucher's hash");
    assert!(sale.records().await.is_empty());
    // Buyers hear "missing" (503, sync needed), not a script error.
    assert_eq!(sale.admit(3).await, plain(Decision::Missing));
}

// ---- claim ----

#[tokio::test]
async fn claim_collects_an_outcome_once_then_finds_the_purchase_gone() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    let published = sale
        .publish(
            &entry(1, &t[0]),
            &entry(1, &t[0]),
            &[
                (entry(1, &t[0]), "ordered", order_id_of(&t[0])),
                (entry(2, &t[1]), "ordered", order_id_of(&t[1])),
            ],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(
        sale.claim(2, &t[1]).await.unwrap(),
        Claimed::Outcome(format!("ordered:{}", order_id_of(&t[1])))
    );
    // Ordered, not queued, no outcome left: only MySQL can tell.
    assert_eq!(sale.claim(2, &t[1]).await.unwrap(), Claimed::Lost);
    assert_eq!(sale.claim(1, &t[0]).await.unwrap(), Claimed::Lost);
    assert_eq!(
        sale.claim(3, &t[2]).await.unwrap(),
        Claimed::Outcome("lead".into())
    );
    // Now it holds the lease itself.
    assert_eq!(sale.claim(3, &t[2]).await.unwrap(), Claimed::Wait);
    assert_eq!(sale.lease().await, Some(entry(3, &t[2])));
}

#[tokio::test]
async fn claim_takes_a_free_lease_and_otherwise_waits() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    let before = state(&sale).await;
    assert_eq!(sale.claim(2, &t[1]).await.unwrap(), Claimed::Wait);
    assert_eq!(state(&sale).await, before);
    sale.expire_lease().await;
    assert_eq!(sale.claim(3, &t[2]).await.unwrap(), Claimed::Lead);
    assert_eq!(sale.lease().await, Some(entry(3, &t[2])));
    let lease_ttl = pttl(&sale, "lease").await;
    assert!(0 < lease_ttl && lease_ttl <= LEASE_MS, "{lease_ttl}");
    assert_eq!(sale.claim(2, &t[1]).await.unwrap(), Claimed::Wait);
    assert_eq!(sale.lease().await, Some(entry(3, &t[2])));
    // A ticket that is not the buyer's queued one.
    assert_eq!(sale.claim(2, &t[0]).await.unwrap(), Claimed::Lost);
    assert_eq!(sale.lease().await, Some(entry(3, &t[2])));
}

#[tokio::test]
async fn claim_after_redis_lost_the_purchase_is_lost() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, [1, 2]).await;
    sale.lose(&["buyers", "lease"]).await;
    assert_eq!(sale.claim(2, &t[1]).await.unwrap(), Claimed::Lost);
    assert_eq!(sale.lease().await, None, "a lost purchase took the lease");
}

// ---- the order sequence ----

/// Checks that `sequence` was seeded from the time of day of the script's clock:
/// 8 × (milliseconds into the day) + 1, in the second of the ticket, between `from_ms`
/// and `to_ms` (Redis time around the call).
fn assert_seeded(seconds: i64, sequence: i64, from_ms: i64, to_ms: i64) {
    assert_eq!((sequence - 1) % 8, 0, "{sequence} is not a seed");
    let ms_of_day = (sequence - 1) / 8;
    assert_eq!(
        ms_of_day / 1000,
        seconds % 86_400,
        "{sequence} vs {seconds}"
    );
    let ms = seconds / 86_400 * 86_400_000 + ms_of_day;
    assert!(from_ms <= ms && ms <= to_ms, "{from_ms} <= {ms} <= {to_ms}");
}

#[tokio::test]
async fn a_lost_sequence_key_restarts_from_the_time_of_day() {
    let sale = Sale::live(10).await;
    let prefix = private_sequence();
    let from = sale.now_ms().await;
    let (seconds, first) = admit_from(&sale, &prefix, 1).await.unwrap();
    let to = sale.now_ms().await;
    assert_seeded(seconds, first, from, to);
    let (_, second) = admit_from(&sale, &prefix, 2).await.unwrap();
    assert_eq!(second, first + 1);
    let day_key = format!("{prefix}:{}", seconds / 86_400);
    let ttl: i64 = sale.conn.clone().ttl(&day_key).await.unwrap();
    assert!(86_400 < ttl && ttl <= 172_800, "{ttl}");

    // As after a Redis restart without persistence: the day's key is gone. A millisecond
    // later, the new seed is above every number handed out before.
    let _: () = sale.conn.clone().del(&day_key).await.unwrap();
    while sale.now_ms().await <= to {}
    let from = sale.now_ms().await;
    let (seconds, third) = admit_from(&sale, &prefix, 3).await.unwrap();
    let to = sale.now_ms().await;
    assert_seeded(seconds, third, from, to);
    assert!(third > second, "{third} <= {second}: order ids reused");
    assert_eq!(sale.stock().await, Some(7));
    let _: () = sale.conn.clone().del(&day_key).await.unwrap();
}

#[tokio::test]
async fn a_used_up_sequence_fails_admission_without_taking_anything() {
    let sale = Sale::live(5).await;
    let prefix = private_sequence();
    let day = sale.now_ms().await / 86_400_000;
    let day_keys = [format!("{prefix}:{day}"), format!("{prefix}:{}", day + 1)];
    for day_key in &day_keys {
        let _: () = sale
            .conn
            .clone()
            .set_ex(day_key, 4_294_967_294u64, 600)
            .await
            .unwrap();
    }
    // The last number of the day still fits the order id's 32 bits.
    let (seconds, last) = admit_from(&sale, &prefix, 1).await.unwrap();
    assert_eq!(last, 4_294_967_295);
    let ticket = format!("{seconds}:{last}");
    assert_eq!(order_id_of(&ticket) & 0xffff_ffff, 4_294_967_295);
    hold_lease(&sale).await;

    let before = state(&sale).await;
    let error = admit_from(&sale, &prefix, 2).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the order sequence of the day is used up"),
        "{error}"
    );
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.stock().await, Some(4));
    assert_eq!(sale.record(2).await, None);
    assert_eq!(sale.queue().await, [entry(1, &ticket)]);
    let _: () = sale.conn.clone().del(&day_keys).await.unwrap();
}

#[tokio::test]
async fn two_vouchers_draw_order_ids_from_one_sequence() {
    // The supported set-up (one Redis primary): every voucher's admissions share the
    // day's sequence, so two vouchers admitting in the same second never hand out the
    // same (seconds, sequence). Per-voucher sequences would: both start at 8 × ms + 1.
    let (a, b) = (Sale::live(30).await, Sale::live(30).await);
    let mut ids = HashSet::new();
    for user in 1..=30 {
        for sale in [&a, &b] {
            let id = order_id_of(&ticket(&sale.admit(user).await));
            assert!(ids.insert(id), "order id {id} handed out twice");
        }
    }
}

#[tokio::test]
async fn a_ticket_handed_out_twice_keeps_each_buyers_lease_and_outcome_apart() {
    // A day's sequence set back, as a Redis restart can lose it, hands buyer 2 the ticket
    // buyer 1 holds. A purchase is named by its entry: her lease token and her outcome
    // list are hers alone, and MySQL, holding buyer 1's order under the id, says
    // id_taken for buyer 2's.
    let voucher = create_voucher(5, -60, 3600).await;
    let sale = Sale {
        conn: redis().await,
        voucher,
    };
    let now = sale.now_ms().await;
    sale.load(5, now - 60_000, now + 3_600_000, &[]).await;
    let prefix = private_sequence();
    // Both admissions in one second of Redis's clock: the ticket carries the second.
    while sale.now_ms().await % 1000 >= 500 {}
    let (seconds, sequence) = admit_from(&sale, &prefix, 1).await.unwrap();
    let day_key = format!("{prefix}:{}", seconds / 86_400);
    let _: () = sale.conn.clone().set(&day_key, sequence - 1).await.unwrap();
    let again = admit_from(&sale, &prefix, 2).await.unwrap();
    let _: () = sale.conn.clone().del(&day_key).await.unwrap();
    assert_eq!(again, (seconds, sequence), "not the same ticket");
    let ticket = format!("{seconds}:{sequence}");
    let id = order_id_of(&ticket);
    let (first, second) = (entry(1, &ticket), entry(2, &ticket));
    assert_eq!(sale.queue().await, [first.clone(), second.clone()]);
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([(1, format!("q:{ticket}")), (2, format!("q:{ticket}"))])
    );
    assert_eq!(sale.stock().await, Some(3));

    // Buyer 1's request drains under her entry; buyer 2's is not taken for it.
    assert_eq!(sale.lease().await.as_ref(), Some(&first));
    hold_lease(&sale).await;
    let before = state(&sale).await;
    assert_eq!(sale.claim(2, &ticket).await.unwrap(), Claimed::Wait);
    let published = sale
        .publish(&second, &second, &[(first.clone(), "id_taken", id)])
        .await
        .unwrap();
    assert_eq!(published, Published::Lost);
    assert_eq!(state(&sale).await, before);

    // A rescuer (buyer 1 pressing again after the lease lapsed) commits the pair.
    sale.expire_lease().await;
    let rescue = sale.admit(1).await;
    assert_eq!(rescue.decision, Decision::Queued(ticket.clone()));
    let (token, batch) = rescue.lease.expect("the rescuer leads");
    assert!(token.starts_with("r:"), "{token}");
    assert_eq!(batch, [first.clone(), second.clone()]);
    let rows = commit_batch(voucher, &[(id, 1), (id, 2)]).await.unwrap();
    assert_eq!(rows, [(id, Some(id), true), (id, None, true)]);
    let outcomes: Vec<(&str, u64)> = rows.into_iter().map(outcome_of).collect();
    assert_eq!(outcomes, [("ordered", id), ("id_taken", id)]);
    let entries: Vec<(String, &str, u64)> = batch
        .iter()
        .zip(&outcomes)
        .map(|(entry, (outcome, order))| (entry.clone(), *outcome, *order))
        .collect();
    let published = sale.publish(&token, "", &entries).await.unwrap();
    assert_eq!(published, Published::Done);

    // Each buyer's outcome is in her own list, and only hers.
    assert_eq!(sale.news(&first).await, [format!("ordered:{id}")]);
    assert_eq!(sale.news(&second).await, [format!("id_taken:{id}")]);
    assert_eq!(
        sale.claim(2, &ticket).await.unwrap(),
        Claimed::Outcome(format!("id_taken:{id}"))
    );
    assert_eq!(
        sale.claim(1, &ticket).await.unwrap(),
        Claimed::Outcome(format!("ordered:{id}"))
    );
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([(1, format!("o:{id}"))])
    );
    assert_eq!(sale.lease().await, None);
    // Buyer 2's unit went back, and MySQL agrees.
    let record = invariants::read(voucher).await;
    assert_eq!(record.orders, [(id, 1)].into_iter().collect());
    assert_eq!((record.mysql_stock, record.redis_stock), (4, Some(4)));
    record.assert_redis_agrees();
    assert!(matches!(
        sale.admit(2).await.decision,
        Decision::Admitted(_)
    ));
}

// ---- sync: stage and load ----

/// Terms of a sale live for the minute around now.
async fn live_terms(sale: &Sale, stock: i64, initial_stock: i64) -> Terms<'static> {
    let now = sale.now_ms().await;
    Terms {
        stock,
        begin_ms: now - 60_000,
        end_ms: now + 60_000,
        initial_stock,
        title: "voucher",
        description: "",
    }
}

/// A sale of 2 units, one of them ordered by buyer 1 as order 101.
async fn one_of_two_ordered() -> Sale {
    let sale = Sale::live(2).await;
    let now = sale.now_ms().await;
    sale.load(1, now - 60_000, now + 3_600_000, &[(1, "101")])
        .await;
    sale
}

#[tokio::test]
async fn overlapping_syncs_never_forget_a_buyer() {
    let sale = one_of_two_ordered().await;
    let terms = live_terms(&sale, 1, 2).await;
    // Sync a stages buyer 1; an admin's retry (sync b) cannot begin meanwhile.
    assert!(sale.begin_load("a").await.unwrap());
    assert!(sale.stage_buyers("a", &[(1, 101)]).await.unwrap());
    assert!(!sale.begin_load("b").await.unwrap());
    // Sync a stalls past its lease; b begins, stages and finishes.
    sale.expire_sync_lease().await;
    assert!(sale.begin_load("b").await.unwrap());
    assert!(sale.stage_buyers("b", &[(1, 101)]).await.unwrap());
    assert!(sale.finish_load("b", &terms).await.unwrap());
    // Sync a comes back: refused, changing nothing.
    let before = state(&sale).await;
    assert!(!sale.stage_buyers("a", &[(2, 202)]).await.unwrap());
    assert!(!sale.finish_load("a", &terms).await.unwrap());
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.record(1).await.as_deref(), Some("o:101"));
    assert_eq!(
        sale.admit(1).await,
        plain(Decision::AlreadyOrdered("101".into()))
    );
    assert_eq!(sale.stock().await, Some(1));
}

#[tokio::test]
async fn a_sync_keeps_what_purchases_record_while_it_runs() {
    // Sync a reads MySQL (no orders yet); buyer 2's purchase then commits and is
    // published; sync a finishes: buyer 2's order must still be known.
    let sale = Sale::live(1).await;
    assert!(sale.begin_load("a").await.unwrap());
    let t2 = ticket(&sale.admit(2).await);
    assert!(sale.stage_buyers("a", &[]).await.unwrap());
    let id = order_id_of(&t2);
    let published = sale
        .publish(
            &entry(2, &t2),
            &entry(2, &t2),
            &[(entry(2, &t2), "ordered", id)],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert!(sale
        .finish_load("a", &live_terms(&sale, 1, 1).await)
        .await
        .unwrap());
    assert_eq!(
        sale.admit(2).await,
        plain(Decision::AlreadyOrdered(id.to_string()))
    );
}

#[tokio::test]
async fn a_sync_that_lost_its_lease_changes_nothing() {
    // As after a Redis restart in the middle of a sync: the lease is gone.
    let sale = one_of_two_ordered().await;
    assert!(sale.begin_load("a").await.unwrap());
    sale.expire_sync_lease().await;
    let before = state(&sale).await;
    assert!(!sale.stage_buyers("a", &[(3, 303)]).await.unwrap());
    assert!(!sale
        .finish_load("a", &live_terms(&sale, 0, 2).await)
        .await
        .unwrap());
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.record(3).await, None);
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
        &[(5, "500"), (6, "600"), (7, "700")],
    )
    .await;
    assert_eq!(sale.stock().await, Some(8));
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([
            (1, format!("q:{}", t[0])),
            (5, "o:500".to_string()),
            (6, "o:600".to_string()),
            (7, "o:700".to_string()),
        ])
    );
    assert_eq!(sale.queue().await, [entry(1, &t[0]), entry(7, &t[1])]);
    assert_eq!(
        sale.admit(5).await,
        plain(Decision::AlreadyOrdered("500".into()))
    );
    assert_eq!(
        sale.admit(7).await,
        plain(Decision::AlreadyOrdered("700".into()))
    );
    // Its commit finds her order and publishes it.
    let published = sale
        .publish(
            &entry(1, &t[0]),
            &entry(1, &t[0]),
            &[
                (entry(1, &t[0]), "ordered", order_id_of(&t[0])),
                (entry(7, &t[1]), "duplicate", 700),
            ],
        )
        .await
        .unwrap();
    assert_eq!(published, Published::Done);
    assert_eq!(sale.record(7).await.as_deref(), Some("o:700"));
    assert_eq!(sale.news(&entry(7, &t[1])).await, ["duplicate:700"]);
    assert_eq!(sale.stock().await, Some(8));
}

#[tokio::test]
async fn the_view_reads_the_sale_state_with_redis_time() {
    let sale = Sale::live(3).await;
    ticket(&sale.admit(1).await);
    let view: Vec<Value> = sale
        .run(VIEW, &[key(sale.voucher, "voucher")], &[])
        .await
        .unwrap();
    let fields: Vec<String> = view[..6]
        .iter()
        .map(|v| redis::from_redis_value(v).unwrap())
        .collect();
    assert_eq!((fields[0].as_str(), fields[3].as_str()), ("2", "3"));
    assert_eq!(fields[4], "voucher");
    let now: i64 = redis::from_redis_value(&view[6]).unwrap();
    assert!((now - sale.now_ms().await).abs() < 1000);
    let unknown: Vec<Value> = sale
        .run(VIEW, &[key(fresh_voucher_id(), "voucher")], &[])
        .await
        .unwrap();
    assert!(unknown.is_empty());
}

/// The voucher's counters, as `lua/metrics.lua` hands them to `GET /metrics`.
async fn counters(sale: &Sale) -> BTreeMap<String, i64> {
    sale.conn
        .clone()
        .hgetall(key(sale.voucher, "metrics"))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_counters_count_each_decision_verdict_and_batch_and_each_order_once() {
    let sale = Sale::live(3).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    assert_eq!(sale.admit(1).await, plain(Decision::Queued(t[0].clone())));
    assert_eq!(sale.admit(4).await, plain(Decision::SoldOut));
    let e: Vec<String> = (0..3).map(|i| entry(i as u64 + 1, &t[i])).collect();
    let batch = [
        (e[0].clone(), "ordered", order_id_of(&t[0])),
        (e[1].clone(), "duplicate", 777),
    ];
    assert_eq!(
        sale.publish("someone", "", &batch).await.unwrap(),
        Published::Lost
    );
    // The refused publication recorded the two orders MySQL holds: counted once, there.
    assert_eq!(
        sale.publish(&e[0], &e[0], &batch).await.unwrap(),
        Published::Done
    );
    assert_eq!(
        sale.admit(1).await,
        plain(Decision::AlreadyOrdered(order_id_of(&t[0]).to_string()))
    );
    hold_lease(&sale).await;
    let last = [(e[2].clone(), "sold_out", order_id_of(&t[2]))];
    assert_eq!(
        sale.publish(&e[2], &e[2], &last).await.unwrap(),
        Published::Done
    );

    let expected = [
        ("purchase:admitted", 3),
        ("purchase:queued", 1),
        ("purchase:sold_out", 1),
        ("purchase:already_ordered", 1),
        ("commit:ordered", 1),
        ("commit:duplicate", 1),
        ("commit:sold_out", 1),
        ("batch:le:1", 1),
        ("batch:le:4", 2),
        ("batch:le:16", 2),
        ("batch:le:64", 2),
        ("batch:le:256", 2),
        ("batch:count", 2),
        ("batch:sum", 3),
    ];
    let expected: BTreeMap<String, i64> = expected
        .iter()
        .map(|(name, count)| (name.to_string(), *count))
        .collect();
    assert_eq!(counters(&sale).await, expected);
    // The orders Redis learnt of, each once: the voucher's "orders".
    assert_eq!(orders_recorded(&sale).await, 2);
}

async fn orders_recorded(sale: &Sale) -> i64 {
    let orders: Option<i64> = sale
        .conn
        .clone()
        .hget(key(sale.voucher, "voucher"), "orders")
        .await
        .unwrap();
    orders.unwrap_or(0)
}

/// Whether the voucher is listed as behind MySQL (`GET /health` lists them).
async fn is_stale(sale: &Sale) -> bool {
    sale.conn
        .clone()
        .sismember(STALE, sale.voucher)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_sale_found_behind_mysql_is_missing_until_a_sync() {
    let sale = Sale::live(3).await;
    let t = admit_all(&sale, [1, 2]).await;
    let (e1, e2) = (entry(1, &t[0]), entry(2, &t[1]));
    let (id1, id2) = (order_id_of(&t[0]), order_id_of(&t[1]));
    // MySQL holds exactly the orders Redis learns of: nothing is amiss.
    hold_lease(&sale).await;
    let first = [(e1.clone(), "ordered", id1)];
    let published = sale.publish_counted(&e1, &e1, &first, BATCH, 1).await;
    assert_eq!(published.unwrap(), Published::Done);
    assert_eq!(orders_recorded(&sale).await, 1);
    assert_eq!(
        sale.admit(1).await,
        plain(Decision::AlreadyOrdered(id1.to_string()))
    );

    // MySQL holds an order Redis never learnt of: Redis rolled back past it.
    hold_lease(&sale).await;
    let second = [(e2.clone(), "ordered", id2)];
    let published = sale.publish_counted(&e2, &e2, &second, BATCH, 3).await;
    assert_eq!(published.unwrap(), Published::Done);
    // What MySQL said is recorded all the same; the sale is no sale until a sync.
    assert_eq!(sale.record(2).await, Some(format!("o:{id2}")));
    for user in [1, 3] {
        assert_eq!(sale.admit(user).await, plain(Decision::Missing), "{user}");
    }
    let view: Vec<Value> = sale
        .run(VIEW, &[key(sale.voucher, "voucher")], &[])
        .await
        .unwrap();
    assert!(view.is_empty(), "{view:?}");
    assert!(is_stale(&sale).await);

    // The sync loads MySQL's figures: three orders, no unit left.
    let now = sale.now_ms().await;
    assert!(sale.begin_load("sync").await.unwrap());
    let terms = Terms {
        stock: 0,
        begin_ms: now - 60_000,
        end_ms: now + 60_000,
        initial_stock: 3,
        title: "voucher",
        description: "",
    };
    assert!(sale.finish_load("sync", &terms).await.unwrap());
    assert_eq!(orders_recorded(&sale).await, 3);
    assert_eq!(
        sale.admit(1).await,
        plain(Decision::AlreadyOrdered(id1.to_string()))
    );
    assert_eq!(sale.admit(3).await, plain(Decision::SoldOut));
    assert!(!is_stale(&sale).await);
}

/// `lua/metrics.lua` for the sale, reporting sales that ended up to `after_end_ms` ago.
async fn figures(sale: &Sale, after_end_ms: i64) -> Vec<Value> {
    let keys = ["voucher", "queue", "metrics"].map(|name| key(sale.voucher, name));
    sale.run(METRICS, &keys, &[after_end_ms.to_string()])
        .await
        .unwrap()
}

#[tokio::test]
async fn metrics_reads_a_sale_at_one_instant_until_a_while_after_its_end() {
    let sale = Sale::live(5).await;
    admit_all(&sale, [1, 2]).await;
    let figures_now = figures(&sale, 0).await;
    assert_eq!(
        figures_now,
        [
            Value::Int(3),
            Value::Int(5),
            Value::Int(2),
            Value::Int(0),
            Value::Int(0),
            Value::BulkString(b"purchase:admitted".to_vec()),
            Value::BulkString(b"2".to_vec()),
        ]
    );
    let now = sale.now_ms().await;
    sale.load(3, now - 120_000, now - 60_000, &[]).await;
    assert_eq!(figures(&sale, 61_000).await.len(), 7);
    assert!(figures(&sale, 59_000).await.is_empty());
    sale.lose(&["voucher"]).await;
    assert!(figures(&sale, 61_000).await.is_empty());
}

#[tokio::test]
async fn a_sale_s_keys_expire_a_week_after_its_end() {
    let sale = Sale::live(5).await;
    admit_all(&sale, [1]).await;
    let mut conn = sale.conn.clone();
    let end_ms: i64 = conn
        .hget(key(sale.voucher, "voucher"), "end_ms")
        .await
        .unwrap();
    for name in ["voucher", "buyers", "queue", "metrics"] {
        let expire_at: i64 = redis::cmd("PEXPIRETIME")
            .arg(key(sale.voucher, name))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(expire_at, end_ms + KEPT_AFTER_END_MS, "{name}");
    }
}
