//! `lua/claim.lua`: a waiting request collecting its purchase's outcome, or the lease.

use seckill_core::sale::{Claimed, News, Next, LEASE_MS};
use seckill_core::verdict::Verdict;
use seckill_tests::drivers::scripts::Sale;

use super::{admit_all, entry, hold_lease, id_of, ordered, pttl, publish_own, state, told};

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
        told(Verdict::Ordered, t[1])
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
