//! The lookups of vouchers Redis holds nothing of: one a second per lookup slot, so that
//! reads of such ids hold up only their slots' vouchers, and MySQL is asked a bounded
//! number of times a second however many ids are asked about.

use std::time::{SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use seckill_core::sale::{AskMysql, Call, MayAsk, HIGHEST_VOUCHER, LOOKUP_SLOTS};
use seckill_core::BucketId;
use seckill_tests::drivers::scripts;
use seckill_tests::servers::local::redis;

async fn ask(voucher: u64) -> MayAsk {
    let call = AskMysql {
        voucher_id: BucketId::from_raw(voucher),
        probe: true,
    };
    let reply = scripts::run(&mut redis().await, &call.command())
        .await
        .unwrap();
    AskMysql::parse(reply).unwrap()
}

/// One test, not two: the first part takes the highest id away from the shared Redis,
/// which the second needs.
#[tokio::test]
async fn a_lookup_holds_up_only_the_vouchers_of_its_slot_once_the_highest_id_is_known() {
    // Ids far apart from another run's.
    let spread = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_micros();
    let first = 1_000 + u64::from(spread % 1_000) * 3 * LOOKUP_SLOTS;
    let mut conn = redis().await;

    // While Redis does not know the highest id (after a loss), any id may be made up: the
    // lookups of every slot share one a second, whose answer sets the highest id.
    let highest: Option<String> = conn.get(HIGHEST_VOUCHER).await.unwrap();
    let _: () = conn.del(HIGHEST_VOUCHER).await.unwrap();
    assert_eq!(ask(first + 2 * LOOKUP_SLOTS).await, MayAsk::Yes);
    for voucher in first + 2 * LOOKUP_SLOTS + 1..first + 3 * LOOKUP_SLOTS {
        assert_eq!(ask(voucher).await, MayAsk::NotNow, "voucher {voucher}");
    }
    // The highest id known again: ids below it only, so that the slots decide.
    let known = highest
        .and_then(|highest| highest.parse::<u64>().ok())
        .unwrap_or(0)
        .max(first + 3 * LOOKUP_SLOTS);
    let _: () = conn.set(HIGHEST_VOUCHER, known).await.unwrap();

    assert_eq!(ask(first).await, MayAsk::Yes);
    assert_eq!(
        ask(first).await,
        MayAsk::NotNow,
        "its slot is taken for a second"
    );
    // Every other slot's voucher may still be looked up: an anonymous reader of a voucher
    // Redis lost keeps no other voucher's readers from MySQL.
    for voucher in first + 1..first + LOOKUP_SLOTS {
        assert_eq!(ask(voucher).await, MayAsk::Yes, "voucher {voucher}");
    }
    // And no more than one lookup a slot: the next ids share the slots taken.
    for voucher in first + LOOKUP_SLOTS..first + 2 * LOOKUP_SLOTS {
        assert_eq!(ask(voucher).await, MayAsk::NotNow, "voucher {voucher}");
    }
}
