//! `lua/admission.lua`: a press's decision, and the queue's lease it takes or leaves.

use std::collections::{BTreeMap, HashSet};

use redis::AsyncCommands;
use seckill_core::sale::{
    Admission, Decision, Entry, Lease, Limits, Next, Record, Ticket, BATCH, KEPT_AFTER_END_MS,
    LEASE_MS, MAX_QUEUED,
};
use seckill_tests::drivers::scripts::Sale;

use super::{
    admit_all, behind_a_sweep, buyer, entry, expire_at, hold_lease, lead, order, ordered, pttl,
    records, state, ticket, Content,
};
use crate::backends::shared::plain;

/// Admission with the queue limit `max_queued`.
fn max_queued(max_queued: i64) -> Limits {
    Limits {
        batch: BATCH,
        max_queued,
        ..Limits::SHIPPED
    }
}

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

/// A press of `user` where at most three purchases may be queued.
async fn admit_in_a_queue_of_3(sale: &Sale, user: u64) -> Admission {
    sale.try_admit_limited(buyer(user), max_queued(3))
        .await
        .unwrap()
}

#[tokio::test]
async fn admission_throttles_at_the_queue_limit_without_taking_anything() {
    let sale = Sale::live(10).await;
    sale.load_live(10, &[(buyer(9), order(900))]).await;
    let mut tickets = Vec::new();
    for user in 1..=3 {
        let admission = admit_in_a_queue_of_3(&sale, user).await;
        tickets.push(ticket(&admission));
    }
    hold_lease(&sale).await;
    let before = state(&sale).await;
    assert_eq!(
        admit_in_a_queue_of_3(&sale, 4).await,
        plain(Decision::Throttled)
    );
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.stock().await, Some(7));
    assert_eq!(sale.record(buyer(4)).await, None);
    assert_eq!(sale.queue().await.len(), 3);
    // A full queue still answers those it knows.
    assert_eq!(
        admit_in_a_queue_of_3(&sale, 2).await,
        plain(Decision::Queued(tickets[1]))
    );
    assert_eq!(
        admit_in_a_queue_of_3(&sale, 9).await,
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
    let admission = admit_in_a_queue_of_3(&sale, 4).await;
    assert!(matches!(admission.decision, Decision::Admitted(_)));
    assert_eq!(
        admit_in_a_queue_of_3(&sale, 5).await.decision,
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
        let admission = admit_in_a_queue_of_3(&sale, user).await;
        queue.push(entry(user, ticket(&admission)));
    }
    // The queue is at its limit and its drainer died: its lease lapsed.
    sale.expire_lease().await;
    let before = state(&sale).await;
    let admission = admit_in_a_queue_of_3(&sale, 4).await;
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
        admit_in_a_queue_of_3(&sale, 5).await,
        plain(Decision::Throttled)
    );
    // Its batch published, the queue has room again.
    let published = sale
        .publish(&token, None, &[ordered(queue[0]), ordered(queue[1])])
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.lease().await, Some(queue[2].to_string()));
    let admitted = admit_in_a_queue_of_3(&sale, 4).await;
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
