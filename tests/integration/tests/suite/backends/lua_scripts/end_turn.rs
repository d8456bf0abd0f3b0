//! `lua/end_turn.lua`: a turn at settling handed on, beside its taking and awaiting
//! (`seckill_core::sale::settling`).

use seckill_core::sale::{AwaitTurn, EndTurn, TakeTurn};
use seckill_core::OrderId;
use seckill_tests::drivers::scripts::Sale;

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
