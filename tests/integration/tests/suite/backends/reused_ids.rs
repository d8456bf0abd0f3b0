//! A voucher id MySQL hands out again (it lost the voucher that had it) takes nothing of
//! the lost sale, whatever of that sale is in flight across the new one's creation: a
//! drainer's or a heal's commit, a sync. The shipped procedures and scripts, with the
//! component's own calls and state machines, on the real MariaDB and Redis.

use mysql_async::prelude::Queryable;
use redis::AsyncCommands;
use seckill_core::buckets::{Buckets, Spread};
use seckill_core::drive;
use seckill_core::ledger::Ledger;
use seckill_core::sale::{Clear, Decision, Entry, Installer, Limits, Load, Record, Terms, Ticket};
use seckill_core::sql::Lookup;
use seckill_core::sync::{self, VoucherSync};
use seckill_core::verdict::Verdict;
use seckill_core::{BucketId, OrderId, UserId};
use seckill_tests::drivers::purchases::{InFlight, SaleBackend};
use seckill_tests::drivers::scripts::{self, commit_batch, connect, Sale};

/// The one value `query` reads of the voucher.
async fn read<T: mysql_async::prelude::FromValue + Send + 'static>(
    query: &str,
    voucher: BucketId,
) -> T {
    let mut conn = connect().await.unwrap();
    let value = conn.exec_first(query, (voucher.raw(),)).await.unwrap();
    conn.disconnect().await.unwrap();
    value.expect("a row")
}

/// When MySQL created the voucher, unix seconds.
async fn created_at(voucher: BucketId) -> i64 {
    let query =
        "SELECT TIMESTAMPDIFF(SECOND, '1970-01-01', create_time) FROM tb_voucher WHERE id = ?";
    read(query, voucher).await
}

/// MySQL's stock of the voucher and how many orders it holds of it.
async fn stock_and_orders(voucher: BucketId) -> (u64, u64) {
    let stock = "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?";
    let orders = "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?";
    (read(stock, voucher).await, read(orders, voucher).await)
}

/// An order id admitted at unix second `at`, unique to the voucher.
fn admitted_at(at: i64, voucher: BucketId, n: i64) -> OrderId {
    OrderId::compose(at, (voucher.raw() as i64 % 4096) << 20 | n).unwrap()
}

#[tokio::test]
async fn a_commit_of_orders_admitted_before_the_voucher_s_creation_takes_nothing() {
    // A drainer or a heal of the lost sale commits its orders, all admitted before the new
    // voucher existed, once MySQL handed the id out again: none is the new sale's.
    let voucher = scripts::create_voucher(2, -60, 3600).await.first_bucket();
    let created = created_at(voucher).await;
    let lost = admitted_at(created - 1, voucher, 1);
    let own = admitted_at(created, voucher, 2);
    let committed = commit_batch(
        voucher,
        &[(lost, UserId::from_raw(1)), (own, UserId::from_raw(2))],
    )
    .await
    .unwrap();
    assert_eq!(committed.verdicts, [Verdict::IdTaken, Verdict::Ordered]);
    assert_eq!(committed.created, 1);
    assert_eq!(stock_and_orders(voucher).await, (1, 1));
}

/// A test's terms of `stock` units, live for an hour.
fn terms(stock: u64, title: &str, per_buyer: u64, now_ms: i64) -> Terms {
    Terms {
        stock,
        begin_ms: now_ms - 60_000,
        end_ms: now_ms + 3_600_000,
        initial_stock: stock,
        title: title.into(),
        description: String::new(),
        pay_within_s: 900,
        draw_ms: 0,
        per_buyer,
        announce_ms: 0,
    }
}

/// The new voucher's creation in Redis, as `POST /vouchers` runs it once MySQL has it.
async fn create_in_redis(sale: &Sale, terms: &Terms, created: i64) {
    sale.call(&Clear::creation(sale.voucher)).await.unwrap();
    let load = Load {
        voucher_id: sale.voucher,
        installer: Installer::Creation,
        terms,
        highest: sale.voucher.into(),
        created,
        ledger: Ledger {
            returned_event: 0,
            orders: 0,
            stock: terms.stock,
        },
        spread: &Spread::Whole,
        terms_version: 0,
    };
    assert!(sale.call(&load).await.unwrap());
}

/// A sync of the lost sale, as it read MySQL before MySQL lost it: its terms (title
/// "lost", one unit a buyer) and creation, and a page of one buyer of it.
fn lost_sale_s_sync(sale: &Sale, created: i64, now_ms: i64) -> (VoucherSync, sync::Io) {
    let (mut run, io) = VoucherSync::with_page(sale.voucher, "lost sale's sync".into(), 1);
    assert_eq!(io, sync::Io::ReadVoucher);
    let io = run.resume(sync::Input::Voucher(Ok(Lookup {
        terms: Some(terms(3, "lost", 1, now_ms)),
        highest: Some(sale.voucher.into()),
        created,
        unlisted: false,
        terms_version: 0,
        ledger: Ledger {
            returned_event: 0,
            orders: 1,
            stock: 3,
        },
        spread: Spread::Whole,
    })));
    (run, io)
}

/// The lost sale's buyer as its sync read her from MySQL.
fn lost_buyer(created: i64, sale: &Sale) -> (UserId, Record) {
    (
        UserId::from_raw(7),
        Record::Ordered(admitted_at(created, sale.voucher, 7), 1),
    )
}

/// Steps the lost sale's sync on the sale's Redis; its pages of buyers are `pages`, in
/// turn.
async fn step(
    sale: &Sale,
    run: &mut VoucherSync,
    io: sync::Io,
    pages: &mut Vec<Vec<(UserId, Record)>>,
) -> sync::Io {
    let input = match io {
        sync::Io::BuyersPage { .. } => sync::Input::Page(Ok(pages.remove(0))),
        io => drive::sync_step(&mut SaleBackend(sale), sale.voucher, io).await,
    };
    run.resume(input)
}

/// What the new sale holds in Redis: its title, stock and `per_buyer`, and its buyers.
async fn held(sale: &Sale) -> (String, i64, i64, Vec<(UserId, Record)>) {
    let keys = sale.keys();
    let (title, stock, per_buyer): (String, i64, i64) = redis::cmd("HMGET")
        .arg(keys.voucher())
        .arg(&["title", "stock", "per_buyer"])
        .query_async(&mut sale.conn.clone())
        .await
        .unwrap();
    (title, stock, per_buyer, sale.records().await)
}

#[tokio::test]
async fn a_sync_of_the_lost_sale_holding_its_lease_across_the_creation_installs_nothing() {
    let sale = Sale::created(8).await;
    let created = created_at(sale.voucher).await;
    let now = sale.now_ms().await;
    let lost = created - 100;
    let (mut run, io) = lost_sale_s_sync(&sale, lost, now);
    let mut pages = vec![vec![lost_buyer(lost, &sale)], Vec::new()];
    // It takes the lease and stages its first page, then the new voucher is created.
    let io = step(&sale, &mut run, io, &mut pages).await;
    let io = step(&sale, &mut run, io, &mut pages).await;
    let io = step(&sale, &mut run, io, &mut pages).await;
    assert!(matches!(io, sync::Io::BuyersPage { .. }), "{io:?}");
    let new = terms(8, "new", 3, now);
    create_in_redis(&sale, &new, created).await;
    let mut io = io;
    while !matches!(io, sync::Io::Answer(_)) {
        io = step(&sale, &mut run, io, &mut pages).await;
    }
    assert!(matches!(io, sync::Io::Answer(Err(_))), "{io:?}");
    assert_eq!(held(&sale).await, ("new".into(), 8, 3, Vec::new()));
}

#[tokio::test]
async fn a_sync_of_the_lost_sale_that_takes_its_lease_after_the_creation_installs_nothing() {
    let sale = Sale::created(8).await;
    let created = created_at(sale.voucher).await;
    let now = sale.now_ms().await;
    let new = terms(8, "new", 3, now);
    create_in_redis(&sale, &new, created).await;
    let lost = created - 100;
    let (mut run, mut io) = lost_sale_s_sync(&sale, lost, now);
    let mut pages = vec![vec![lost_buyer(lost, &sale)], Vec::new()];
    while !matches!(io, sync::Io::Answer(_)) {
        io = step(&sale, &mut run, io, &mut pages).await;
    }
    assert!(matches!(io, sync::Io::Answer(Err(_))), "{io:?}");
    assert_eq!(held(&sale).await, ("new".into(), 8, 3, Vec::new()));
    // The new sale's own sync installs it.
    let (mut own, mut io) = VoucherSync::start(sale.voucher, "own sync".into());
    while !matches!(io, sync::Io::Answer(_)) {
        let input = drive::sync_step(&mut SaleBackend(&sale), sale.voucher, io).await;
        io = own.resume(input);
    }
    assert!(matches!(io, sync::Io::Answer(Ok(_))), "{io:?}");
}

#[tokio::test]
async fn a_creation_clears_every_key_of_the_id() {
    let sale = Sale::live(5).await;
    let keys = sale.keys();
    let every = [
        keys.voucher(),
        keys.buyers(),
        keys.queue(),
        keys.lease(),
        keys.sync_lease(),
        keys.absent(),
        keys.sweep(),
        keys.drawn(),
        keys.all_out(),
        keys.seen_out(),
        keys.metrics(),
    ]
    .into_iter()
    .chain(keys.lines())
    .collect::<Vec<_>>();
    // Whatever each key holds of the lost sale: its value does not matter here.
    let mut conn = sale.conn.clone();
    for key in &every[1..] {
        let _: () = conn.del(key).await.unwrap();
        let _: () = conn.set_ex(key, 1, 60).await.unwrap();
    }
    let cleared = sale.call(&Clear::creation(sale.voucher)).await.unwrap();
    assert_eq!(cleared.removed, every.len() as i64);
    for key in &every {
        let exists: bool = conn.exists(key).await.unwrap();
        assert!(!exists, "{key} left behind");
    }
}

/// A sale of three buckets lost by MySQL, and a sale of one bucket created under its id
/// since, as `POST /vouchers` creates it: the lost sale's buckets, and when it was created.
async fn one_bucket_over_a_lost_sale_of_three() -> (Vec<Sale>, Buckets) {
    let lost = Sale::live_buckets(6, 3).await;
    let created = scripts::lookup(lost[0].voucher).await.unwrap().created;
    let all: Vec<BucketId> = lost.iter().map(|bucket| bucket.voucher).collect();
    let kept = Buckets::new(lost[0].sale(), &all[1..]).with_created(created);
    let sale = &lost[0];
    let clear = Clear::creation(sale.voucher);
    let cleared = sale.call(&clear).await.unwrap();
    assert_eq!(cleared.others, all[1..]);
    for clear in clear.lost_buckets(&cleared, &Buckets::new(sale.sale(), &[])) {
        assert!(sale.call(&clear).await.unwrap().removed > 0);
    }
    let now = sale.now_ms().await;
    create_in_redis(sale, &terms(4, "new", 1, now), created + 100).await;
    (lost, kept)
}

#[tokio::test]
async fn a_press_routed_by_the_buckets_of_a_lost_sale_of_the_id_buys_from_the_new_sale() {
    let (lost, kept) = one_bucket_over_a_lost_sale_of_three().await;
    // Buyer 4's bucket of the three is the second: the lost sale's, its keys cleared.
    let mut press = InFlight::knowing(kept, UserId::from_raw(4), 1, Limits::SHIPPED);
    let answer = press.run(&lost[0], 20).await.expect("an answer");
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!(press.purchase.bucket(), lost[0].voucher);
    assert_eq!(
        press.purchase.buckets(),
        Some(&Buckets::new(lost[0].sale(), &[]))
    );
    for bucket in &lost[1..] {
        assert_eq!(bucket.records().await, Vec::new());
    }
    assert_eq!(lost[0].stock().await, Some(3));
}

/// The lost sale's drainer, publishing after the new creation (its lease gone), records
/// nothing of a purchase admitted before it: the new sale's buyer is no buyer yet.
#[tokio::test]
async fn a_lost_sale_s_drainer_publishing_after_the_creation_records_nothing() {
    let sale = Sale::created(3).await;
    let created = created_at(sale.voucher).await;
    let now = sale.now_ms().await;
    let ticket = Ticket::new(created - 5, sale.voucher.raw() as i64 % 1000 + 1);
    let purchase = Entry {
        user: UserId::from_raw(1),
        ticket,
    };
    create_in_redis(&sale, &terms(3, "new", 1, now), created).await;
    sale.publish(
        "the lost sale's drainer",
        Some(purchase),
        &scripts::published(&[purchase], &[Verdict::Ordered]),
    )
    .await
    .unwrap();
    assert_eq!(sale.record(purchase.user).await, None);
    assert!(matches!(
        sale.admit(purchase.user).await.decision,
        Decision::Admitted(_)
    ));
}
