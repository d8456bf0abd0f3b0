//! `lua/unlock.lua`: a drainer giving its lease up.

use seckill_core::sale::{Claimed, Unlock};
use seckill_tests::drivers::scripts::Sale;

use super::{entries, hold_lease, state};

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
    let [drainer, waiter] = entries(&sale, [1, 2]).await;
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
