//! A press that was going to answer `sold_out` (or `not_enough_left`) while units come
//! back presses again in the same request: when its own steps (its sweep, its drain, the
//! restocks they meet) leave Redis with units that fit her, and when it finds another
//! request sweeping the sale's expiries (it waits for that sweep's end). Each interleaving
//! is run step by step with the component's own purchase and sweeps on the real servers.

use redis::AsyncCommands;

use seckill_core::drive;
use seckill_core::purchase::{Io, Receipt};
use seckill_core::redis::Command;
use seckill_core::returns::{self, Returns};
use seckill_core::sale::{AwaitSweep, Decision, EndSweep, Limits, Record, TakeSweep};
use seckill_core::sql::Status;
use seckill_core::{ApiError, OrderId, UserId};
use seckill_tests::drivers::purchases::{self, InFlight, SaleBackend};
use seckill_tests::drivers::scripts::{self, Sale};

/// Steps a press may take to its answer here: a few sweeps and drains.
const STEPS: usize = 60;

fn user(raw: u64) -> UserId {
    UserId::from_raw(raw)
}

/// The buyer's press for `units`, run alone to its `201`: her order.
async fn buy(sale: &Sale, buyer: UserId, units: u32) -> OrderId {
    let mut flight = InFlight::of_units(sale.sale(), buyer, units, Limits::SHIPPED);
    let answer = flight.run(sale, STEPS).await.expect("answered");
    answer.expect("bought").order_id
}

/// The order's deadline to pay passes, in MySQL and in the sale's next sweep.
async fn deadline_passes(sale: &Sale, order: OrderId) {
    let mut db = scripts::connect().await.unwrap();
    scripts::pass_deadline(&mut db, order).await;
    db.disconnect().await.unwrap();
    sale.make_sweep_due().await;
}

/// A press whose request dies once admission queued her purchase (holding the lease):
/// the lease lapses, and her purchase waits in the queue for the next drainer.
async fn queued_alone(sale: &Sale, buyer: UserId, units: u32) {
    let mut flight = InFlight::of_units(sale.sale(), buyer, units, Limits::SHIPPED);
    flight.step(sale).await;
    assert!(flight.purchase.is_draining(), "{:?}", flight.io);
    sale.expire_lease().await;
}

fn is_restock(io: &returns::Io) -> bool {
    matches!(io, returns::Io::Redis(Command::Script { script, .. }) if script.name == "restock")
}

/// MySQL's units left of the sale.
async fn mysql_stock(sale: &Sale) -> Option<u64> {
    scripts::lookup(sale.voucher)
        .await
        .unwrap()
        .terms
        .map(|terms| terms.stock)
}

fn bought(answer: Option<Result<Receipt, ApiError>>, buyer: UserId, units: u32) -> bool {
    matches!(answer, Some(Ok(Receipt { user_id, quantity, .. })) if user_id == buyer && quantity == units)
}

/// Finding: a sold-out press handed both leases forgot the unit its own sweep gave back
/// once it had drained. Q queued with the lease free; L's sweep expires X's order, gives
/// its unit back, L drains Q: L buys that unit.
#[tokio::test]
async fn a_sold_out_press_that_sweeps_then_drains_buys_the_unit_its_sweep_gave_back() {
    let sale = Sale::live(2).await;
    let x = buy(&sale, user(1), 1).await;
    queued_alone(&sale, user(2), 1).await;
    deadline_passes(&sale, x).await;
    let mut l = InFlight::start(sale.sale(), user(3), Limits::SHIPPED);
    l.step(&sale).await;
    assert_eq!(l.purchase.decision(), Some(Decision::SoldOut));
    assert!(matches!(l.io, Io::Sweep(_)), "{:?}", l.io);
    let answer = l.run(&sale, STEPS).await;
    assert!(
        bought(answer.clone(), user(3), 1),
        "{answer:?} {:?}",
        l.purchase.causes()
    );
    assert!(matches!(
        sale.record(user(2)).await,
        Some(Record::Ordered(..))
    ));
    assert_eq!(sale.stock().await, Some(0));
    assert_eq!(mysql_stock(&sale).await, Some(0));
}

/// Finding: a restock by another request took the units a sweeping press's sweep was
/// about to give back (its restock.lua then gives none): she buys one all the same.
#[tokio::test]
async fn a_sweeping_press_buys_a_unit_another_request_s_restock_gave_back_first() {
    let sale = Sale::live(2).await;
    let x = buy(&sale, user(1), 1).await;
    let c = buy(&sale, user(2), 1).await;
    deadline_passes(&sale, x).await;
    let mut l = InFlight::start(sale.sale(), user(3), Limits::SHIPPED);
    l.step(&sale).await;
    assert_eq!(l.purchase.decision(), Some(Decision::SoldOut));
    while !matches!(&l.io, Io::Sweep(io) if is_restock(io)) {
        assert!(l.answer().is_none(), "{:?}", l.io);
        l.step(&sale).await;
    }
    // C cancels, and her request gives back both returns, X's expiry's and hers.
    let mut db = scripts::connect().await.unwrap();
    let settled = scripts::settle_order(&mut db, c, Some(user(2)), Status::Cancelled)
        .await
        .unwrap();
    assert_eq!(settled.map(|(status, ..)| status), Some(Status::Cancelled));
    let (mut restock, io) = Returns::restock(sale.voucher);
    let given = drive::give_back(&mut SaleBackend(&sale), sale.voucher, &mut restock, io).await;
    assert_eq!(given, Ok(2));
    let answer = l.run(&sale, STEPS).await;
    assert!(
        bought(answer.clone(), user(3), 1),
        "{answer:?} {:?}",
        l.purchase.causes()
    );
    assert_eq!(sale.stock().await, Some(1));
    assert_eq!(mysql_stock(&sale).await, Some(1));
}

/// Finding: a sold-out press that drained a `short` verdict (Redis was ahead of MySQL)
/// heard sold_out beside the units that publication set: she buys them.
#[tokio::test]
async fn a_sold_out_press_that_drains_a_short_verdict_buys_the_units_it_set() {
    let sale = Sale::live_per_buyer(1, 2).await;
    // Redis one unit ahead of MySQL, as after a sync while purchases were queued.
    sale.voucher_set("stock", 2).await;
    queued_alone(&sale, user(1), 2).await;
    let mut l = InFlight::of_units(sale.sale(), user(2), 1, Limits::SHIPPED);
    l.step(&sale).await;
    assert_eq!(l.purchase.decision(), Some(Decision::SoldOut));
    assert!(l.purchase.is_draining(), "{:?}", l.io);
    let answer = l.run(&sale, STEPS).await;
    assert!(
        bought(answer.clone(), user(2), 1),
        "{answer:?} {:?}",
        l.purchase.causes()
    );
    assert_eq!(sale.record(user(1)).await, None, "Q heard not_enough_left");
    assert_eq!(sale.stock().await, Some(0));
    assert_eq!(mysql_stock(&sale).await, Some(0));
}

/// The feed's sweep (a read of `GET /events`) of the sale, begun: it took the sweep lease
/// and runs up to its restock.lua.
async fn feed_sweep_until_restock(sale: &Sale) -> (Returns, returns::Io) {
    assert!(sale
        .call(&TakeSweep {
            voucher_id: sale.voucher
        })
        .await
        .unwrap());
    let (mut sweep, mut io) = Returns::expiries(sale.voucher);
    while !is_restock(&io) {
        io = sweep.resume(purchases::give_back(sale, &io).await);
    }
    (sweep, io)
}

/// Finding: a latecomer pressing while another request's sweep gave her unit back heard
/// sold_out: the order_life flake. She waits for that sweep's end, and buys the unit.
#[tokio::test]
async fn a_press_that_finds_another_request_sweeping_waits_for_its_end_and_buys() {
    let sale = Sale::live(1).await;
    let x = buy(&sale, user(1), 1).await;
    deadline_passes(&sale, x).await;
    let (mut feed, mut io) = feed_sweep_until_restock(&sale).await;
    let mut l = InFlight::start(sale.sale(), user(2), Limits::SHIPPED);
    for _ in 0..3 {
        l.step(&sale).await;
        assert_eq!(l.answer(), None, "she waits for the sweep under way");
    }
    while !matches!(io, returns::Io::Done(_)) {
        io = feed.resume(purchases::give_back(&sale, &io).await);
    }
    assert_eq!(io, returns::Io::Done(Ok(1)));
    let answer = l.run(&sale, STEPS).await;
    assert!(
        bought(answer.clone(), user(2), 1),
        "{answer:?} {:?}",
        l.purchase.causes()
    );
}

/// A sweep under way that never ends (its request died holding the lease) holds a press
/// up for a bounded wait only: then she hears what admission says.
#[tokio::test]
async fn a_press_waits_for_another_request_s_sweep_a_bounded_time() {
    let sale = Sale::live(1).await;
    let x = buy(&sale, user(1), 1).await;
    deadline_passes(&sale, x).await;
    let _dies = feed_sweep_until_restock(&sale).await;
    let mut l = InFlight::start(sale.sale(), user(2), Limits::SHIPPED);
    assert_eq!(l.run(&sale, STEPS).await, Some(Err(ApiError::SoldOut)));
}

/// A sweep's end wakes the presses waiting for it only while no other sweep holds the
/// lease: a next sweep under way (it took the lease once this one freed it) wakes them
/// itself, once it has given its units back, rather than leave them to spend their waits
/// on a wake-up that came before.
#[tokio::test]
async fn a_sweep_s_end_wakes_nobody_while_the_next_sweep_is_under_way() {
    let sale = Sale::live(2).await;
    let voucher_id = sale.voucher;
    assert!(sale.call(&TakeSweep { voucher_id }).await.unwrap());
    assert!(!sale.call(&EndSweep { voucher_id }).await.unwrap());
    assert!(!sale.call(&AwaitSweep { voucher_id }).await.unwrap());
    let _: () = sale.conn.clone().del(sale.keys().sweep()).await.unwrap();
    assert!(sale.call(&EndSweep { voucher_id }).await.unwrap());
    assert!(sale.call(&AwaitSweep { voucher_id }).await.unwrap());
}
