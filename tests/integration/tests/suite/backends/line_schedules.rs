//! The sale's line (docs/design.md, "The line") with the component's own purchases run
//! step by step on the real servers: a handed buyer who never comes back, replies lost,
//! looks and presses of others between her steps.

use seckill_core::purchase::Receipt;
use seckill_core::sale::{Decision, Limits, LineAsk, Record};
use seckill_core::{ApiError, OrderId, UserId};
use seckill_tests::drivers::purchases::{self, InFlight};
use seckill_tests::drivers::scripts::{self, Sale};

/// Steps a request may take to its answer here: a few sweeps and drains.
const STEPS: usize = 60;

fn user(raw: u64) -> UserId {
    UserId::from_raw(raw)
}

/// The buyer's press, run alone to its `201`: her order.
async fn buy(sale: &Sale, buyer: u64) -> OrderId {
    let mut flight = InFlight::start(sale.sale(), user(buyer), Limits::SHIPPED);
    let answer = flight.run(sale, STEPS).await.expect("answered");
    answer.expect("bought").order_id
}

/// `buyer` joins the line for one unit at `place`.
async fn join(sale: &Sale, buyer: u64, place: u64) {
    let joined = sale.ask_line(user(buyer), LineAsk::Join, place, 1).await;
    assert!(
        matches!(joined.decision, Decision::Waitlisted(_)),
        "{joined:?}"
    );
}

/// `buyer`'s look at the line, run alone to its answer.
async fn look(sale: &Sale, buyer: u64) -> Result<Receipt, ApiError> {
    let mut flight = InFlight::in_line(sale.sale(), user(buyer), 1, LineAsk::Look);
    flight.run(sale, STEPS).await.expect("answered")
}

/// The order's deadline to pay passes, in MySQL and in the sale's next sweep.
async fn deadline_passes(sale: &Sale, order: OrderId) {
    let mut db = scripts::connect().await.unwrap();
    scripts::pass_deadline(&mut db, order).await;
    db.disconnect().await.unwrap();
    sale.make_sweep_due().await;
}

/// Her order, once committed.
async fn ordered(sale: &Sale, buyer: u64) -> Option<OrderId> {
    match sale.record(user(buyer)).await {
        Some(Record::Ordered(order, _)) => Some(order),
        _ => None,
    }
}

#[tokio::test]
async fn a_handed_buyer_who_never_comes_back_is_committed_by_looks_and_her_expiry_goes_on() {
    let sale = Sale::live(1).await;
    let first = buy(&sale, 1).await;
    join(&sale, 10, 1).await;
    join(&sale, 11, 2).await;
    deadline_passes(&sale, first).await;
    // Only strangers look: the first look's sweep gives the unit back, the next hands it
    // to the first in line and commits her purchase, though she never comes back.
    assert!(matches!(
        look(&sale, 50).await,
        Err(ApiError::NotInLine { .. })
    ));
    assert!(matches!(
        look(&sale, 51).await,
        Err(ApiError::NotInLine { .. })
    ));
    let handed = ordered(&sale, 10)
        .await
        .expect("her handed purchase committed");
    // Unpaid, it expires, and its unit goes on to the next in line the same way.
    deadline_passes(&sale, handed).await;
    assert!(matches!(
        look(&sale, 52).await,
        Err(ApiError::NotInLine { .. })
    ));
    assert!(matches!(
        look(&sale, 53).await,
        Err(ApiError::NotInLine { .. })
    ));
    assert!(
        ordered(&sale, 11).await.is_some(),
        "{:?}",
        sale.records().await
    );
    assert_eq!(sale.stock().await, Some(0));
}

#[tokio::test]
async fn a_handed_buyer_whose_look_reply_is_lost_hears_her_order_on_the_next() {
    let sale = Sale::live(1).await;
    let first = buy(&sale, 1).await;
    join(&sale, 10, 1).await;
    deadline_passes(&sale, first).await;
    assert!(matches!(
        look(&sale, 50).await,
        Err(ApiError::NotInLine { .. })
    ));
    // Her look is handed the unit, and its reply is lost on the way.
    let mut lost = InFlight::in_line(sale.sale(), user(10), 1, LineAsk::Look);
    let input = purchases::perform(&sale, &lost.purchase, &lost.io).await;
    drop(input);
    lost.resume(purchases::failed(&lost.io));
    // Others press and look meanwhile.
    assert!(matches!(
        look(&sale, 51).await,
        Err(ApiError::NotInLine { .. })
    ));
    // Her page polls again while her lost request's lease lives: wait a moment, never a
    // place lost nor a 409.
    let again = look(&sale, 10).await;
    assert!(matches!(again, Err(ApiError::Busy { .. })), "{again:?}");
    // Once it lapses, her next poll commits her purchase: her order (the line's `GET`
    // answers an order she already holds as `ordered`, as it does this request's).
    sale.expire_lease().await;
    let again = look(&sale, 10).await;
    let order = ordered(&sale, 10)
        .await
        .expect("her handed purchase committed");
    assert!(
        matches!(again, Ok(Receipt { order_id, .. }) | Err(ApiError::AlreadyOrdered { order_id }) if order_id == order),
        "{again:?}"
    );
}
