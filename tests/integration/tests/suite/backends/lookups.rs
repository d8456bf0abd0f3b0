//! The lookups of vouchers Redis holds nothing of: one a second per lookup slot, so that
//! reads of such ids hold up only their slots' vouchers, and MySQL is asked a bounded
//! number of times a second however many ids are asked about.

use std::time::{SystemTime, UNIX_EPOCH};

use seckill_core::sale::{AskMysql, Call, MayAsk, LOOKUP_SLOTS};
use seckill_core::VoucherId;
use seckill_tests::backends::redis;
use seckill_tests::scripts;

async fn ask(voucher: u64) -> MayAsk {
    let call = AskMysql {
        voucher_id: VoucherId::from_raw(voucher),
        probe: true,
    };
    let reply = scripts::run(&mut redis().await, &call.command())
        .await
        .unwrap();
    call.parse(reply).unwrap()
}

#[tokio::test]
async fn a_lookup_holds_up_only_the_vouchers_of_its_slot() {
    // Ids below the highest any test created, so that only the slots decide; far apart
    // from another run's.
    let spread = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_micros();
    let first = 1_000 + u64::from(spread % 1_000) * 2 * LOOKUP_SLOTS;
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
