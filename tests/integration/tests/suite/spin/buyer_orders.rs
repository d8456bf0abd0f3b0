//! What a buyer holds, under real Spin: `GET /vouchers/{id}/orders/mine` before, during
//! and after the sale, and her press after the sale's end, which names her order rather
//! than saying the sale ended.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use seckill_tests::drivers::app::{buyer_token, Answer, App, ADMIN_TOKEN};
use serde_json::json;

async fn mine(app: &App, voucher: u64, token: &str) -> Answer {
    let path = format!("/vouchers/{voucher}/orders/mine");
    app.get(&path, token).await
}

#[tokio::test]
async fn a_buyer_learns_her_order_before_during_and_after_the_sale() {
    let app = App::start().await;
    // The sale ends 3 s from now; the test waits for the clock to pass that.
    let voucher = app.voucher(2, -60, 3).await;
    let created = Instant::now();
    let (buyer, other) = (4101, 4102);
    let token = buyer_token(buyer);

    let none = mine(&app, voucher, &token).await;
    assert_eq!(
        (none.status, none.error()),
        (StatusCode::NOT_FOUND, "not_found")
    );

    let receipt = app.buy(voucher, buyer).await;
    assert_eq!(receipt.status, StatusCode::CREATED, "{receipt:?}");
    let order = receipt.order_id().unwrap();
    let expected = |answer: &Answer| {
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        assert_eq!(answer.body["order_id"], json!(order.to_string()));
        assert_eq!(answer.body["voucher_id"], json!(voucher));
        assert_eq!(answer.body["user_id"], json!(buyer.to_string()));
        assert_eq!(answer.body["status"], "unpaid");
    };
    expected(&mine(&app, voucher, &token).await);

    // Only her own: another buyer has none, the admin is no buyer, an unknown voucher
    // holds nothing.
    let stranger = mine(&app, voucher, &buyer_token(other)).await;
    assert_eq!(stranger.status, StatusCode::NOT_FOUND, "{stranger:?}");
    let admin = mine(&app, voucher, ADMIN_TOKEN).await;
    assert_eq!(
        (admin.status, admin.error()),
        (StatusCode::FORBIDDEN, "forbidden")
    );
    let unknown = mine(&app, 9_000_000_000_000_000, &token).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{unknown:?}");

    let after_end = created + Duration::from_secs(4);
    tokio::time::sleep(after_end.saturating_duration_since(Instant::now())).await;
    expected(&mine(&app, voucher, &token).await);
    let again = app.buy(voucher, buyer).await;
    assert_eq!(
        (again.status, again.error(), again.order_id()),
        (StatusCode::CONFLICT, "already_ordered", Some(order)),
        "{again:?}"
    );
    let late = app.buy(voucher, other).await;
    assert_eq!((late.status, late.error()), (StatusCode::CONFLICT, "ended"));
}
