//! `lua/clear.lua`: a voucher id handed out again (docs/operations.md, "After restoring
//! MySQL").

use redis::AsyncCommands;
use seckill_core::sale::{Clear, Decision};
use seckill_tests::drivers::scripts::Sale;

use super::buyer;

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
