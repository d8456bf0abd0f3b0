//! `lua/probed.lua`: what a lookup of MySQL leaves for `lua/admission.lua` to tell a
//! voucher that does not exist from a sale Redis lost.

use redis::AsyncCommands;
use seckill_core::sale::{Decision, Probed};
use seckill_core::BucketId;
use seckill_tests::drivers::scripts::{self, Sale};
use seckill_tests::servers::faults::{Persistence, RedisServer};

use super::{buyer, ABOVE_EVERY_ID};
use crate::backends::shared::plain;

#[tokio::test]
async fn a_voucher_without_state_is_missing_unless_it_is_known_not_to_exist() {
    let sale = Sale::created(5).await;
    let mut conn = sale.conn.clone();
    // What MySQL says of it, kept as a lookup keeps it: it exists, and so do the ids up to
    // the highest MySQL handed out. Any id above that does not exist.
    let lookup = scripts::lookup(sale.voucher).await.unwrap();
    assert!(lookup.terms.is_some());
    let probed = |absent| Probed {
        voucher_id: sale.voucher,
        absent,
        highest: lookup.highest,
    };
    sale.call(&probed(false)).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    let above = Sale {
        conn: sale.conn.clone(),
        voucher: ABOVE_EVERY_ID,
    };
    assert_eq!(above.admit(buyer(1)).await, plain(Decision::Unknown));
    // MySQL's word that no such voucher exists.
    sale.call(&probed(true)).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Unknown));
    // A creation disproves it.
    let absent = sale.keys().absent();
    let now = sale.now_ms().await;
    sale.load(3, now - 1000, now + 60_000, &[]).await;
    let exists: bool = conn.exists(&absent).await.unwrap();
    assert!(!exists, "a load left the voucher marked absent");
    sale.lose(&[sale.keys().voucher()]).await;
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    let voucher = sale.keys().voucher();
    let _: () = conn.hset(&voucher, "stock", 5).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    let now = sale.now_ms().await;
    let _: () = conn.hset(&voucher, "begin_ms", now - 1000).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    // The same without `begin_ms`.
    let _: () = conn.hdel(&voucher, "begin_ms").await.unwrap();
    let _: () = conn.hset(&voucher, "end_ms", now + 60_000).await.unwrap();
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Missing));
    assert_eq!(sale.record(buyer(1)).await, None);
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.stock().await, Some(5));
    let _: () = conn.del(&voucher).await.unwrap();
}

#[tokio::test]
async fn with_no_voucher_in_mysql_a_lookup_makes_every_id_unknown() {
    // A Redis of its own: the shared one knows of other tests' vouchers.
    let server = RedisServer::start(Persistence::None).await;
    let conn = ::redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let sale = |raw| Sale {
        conn: conn.clone(),
        voucher: BucketId::from_raw(raw),
    };
    // Before anyone asked MySQL, an id may be a sale Redis lost.
    assert_eq!(sale(7).admit(buyer(1)).await, plain(Decision::Missing));
    sale(7)
        .call(&Probed {
            voucher_id: BucketId::from_raw(7),
            absent: true,
            highest: None,
        })
        .await
        .unwrap();
    for raw in [1, 7, 8, 1 << 40] {
        assert_eq!(
            sale(raw).admit(buyer(1)).await,
            plain(Decision::Unknown),
            "voucher {raw}"
        );
    }
}
