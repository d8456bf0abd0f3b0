//! The order sequence `lua/admission.lua` draws its tickets (and so order ids) from.

use std::collections::{BTreeMap, BTreeSet};

use redis::AsyncCommands;
use seckill_core::sale::{Claimed, Decision, Lease, News, Next, Record, Ticket};
use seckill_core::verdict::Verdict;
use seckill_tests::drivers::invariants;
use seckill_tests::drivers::scripts::{
    self, commit_batch, create_voucher, orders_of, outcome, Sale,
};
use seckill_tests::servers::local::{fresh_voucher_id, redis};

use super::{
    assert_admitted, buyer, entry, hold_lease, id_of, publish_own, records, state, ticket, verdict,
};

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
    sale.load_live(5, &[]).await;
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
