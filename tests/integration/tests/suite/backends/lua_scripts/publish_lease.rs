//! `lua/publish.lua` and the drainer's lease: who may publish, and the lease a publication
//! passes on.

use redis::AsyncCommands;
use seckill_core::sale::{
    Claimed, Decision, Entry, Lease, Next, Published, Record, BATCH, HANDOVER_MS, LEASE_MS,
};
use seckill_core::verdict::Verdict;
use seckill_tests::drivers::scripts::Sale;

use super::{
    admit_all, buyer, entries, entry, hold_lease, id_of, ordered, orders_recorded, pttl,
    publish_own, state, told, verdict,
};

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
    assert_eq!(sale.news(e[257]).await, told(Verdict::Ordered, t[257]));
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
    sale.voucher_del("orders").await;
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
async fn a_lease_handed_on_is_short_until_its_new_holder_takes_it_up() {
    let sale = Sale::live(10).await;
    let e = entries(&sale, [1, 2]).await;
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
    assert_eq!(sale.news(batch[0]).await, told(Verdict::Ordered, t[0]));
    assert_eq!(sale.news(batch[1]).await, told(Verdict::Ordered, t[1]));
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
