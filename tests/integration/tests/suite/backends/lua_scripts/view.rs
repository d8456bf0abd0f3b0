//! `lua/view.lua`: the sale page's read of a sale.

use redis::AsyncCommands;
use seckill_core::sale::{Shown, View};
use seckill_core::BucketId;
use seckill_tests::drivers::scripts::Sale;

use super::{buyer, read_view, ticket, ABOVE_EVERY_ID};

#[tokio::test]
async fn the_view_reads_the_sale_state_with_redis_time() {
    let sale = Sale::live(3).await;
    ticket(&sale.admit(buyer(1)).await);
    let Shown::Sale(view) = read_view(&sale, sale.voucher).await else {
        panic!("no view of a live sale")
    };
    assert_eq!((view.terms.stock, view.terms.initial_stock), (2, 3));
    assert_eq!(view.terms.title, "voucher");
    assert!((view.now_ms - sale.now_ms().await).abs() < 1000);
    // As admission tells them apart: no such voucher, or a sale Redis lost.
    assert_eq!(read_view(&sale, ABOVE_EVERY_ID).await, Shown::Unknown);
    sale.lose(&[sale.keys().voucher()]).await;
    assert_eq!(read_view(&sale, sale.voucher).await, Shown::Missing);
}

#[tokio::test]
async fn the_view_of_a_sale_in_buckets_reads_its_first_bucket_and_audits_one_bucket_a_read() {
    let buckets = Sale::live_buckets(6, 3).await;
    let first = &buckets[0];
    // A later bucket is no voucher of its own.
    assert_eq!(
        read_view(&buckets[1], buckets[1].voucher).await,
        Shown::Unknown
    );
    let ids: Vec<_> = buckets.iter().map(|bucket| bucket.voucher).collect();

    let mut audited = Vec::new();
    for read in 0..4 {
        let view = read_due(first, &["audit_at"]).await;
        // The first read of the second sums the other buckets; none is kept yet.
        assert_eq!((view.summary, view.refresh), (None, read == 0));
        audited.extend(audited_by(&view, first.voucher));
    }
    assert_eq!(audited, [ids[0], ids[1], ids[2], ids[0]]);

    // A deadline due too: the read sweeps the first bucket (which audits it), and the
    // second's turn waits for the next read.
    let view = read_due(first, &["audit_at", "sweep_at"]).await;
    assert_eq!(audited_by(&view, first.voucher), [ids[0]]);
    first.voucher_del("sweep_at").await;
    let view = read_due(first, &["audit_at"]).await;
    assert_eq!(audited_by(&view, first.voucher), [ids[1]]);
}

/// The first bucket's view once `fields` are due and its sweep lease is free.
async fn read_due(first: &Sale, fields: &[&str]) -> View {
    let due: Vec<_> = fields.iter().map(|field| (*field, 0)).collect();
    let _: () = first
        .conn
        .clone()
        .hset_multiple(first.keys().voucher(), &due)
        .await
        .unwrap();
    first.lose(&[first.keys().sweep()]).await;
    let Shown::Sale(view) = read_view(first, first.voucher).await else {
        panic!("no view of a live sale")
    };
    view
}

/// The buckets a read of the first bucket `first` audits: its own, under the lease
/// view.lua took, and another's.
fn audited_by(view: &View, first: BucketId) -> Vec<BucketId> {
    view.sweep
        .then_some(first)
        .into_iter()
        .chain(view.audit)
        .collect()
}
