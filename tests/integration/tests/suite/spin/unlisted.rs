//! A sale created unlisted until its `announce_at`: before it, a stranger walking ids finds
//! nothing of it (every public route answers as for an id that does not exist), while the
//! admin sees it; at `announce_at` it appears.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use redis::AsyncCommands;
use reqwest::{Method, StatusCode};
use serde_json::json;

use seckill_core::SaleId;
use seckill_tests::drivers::app::{buyer_token, Answer, App, ADMIN_TOKEN};
use seckill_tests::drivers::scripts;
use seckill_tests::servers::local;

/// What a stranger can tell of an answer: its status, body and headers, but the date.
fn seen(answer: &Answer) -> (StatusCode, String, Vec<(String, String)>) {
    let mut headers: Vec<(String, String)> = answer
        .headers
        .iter()
        // The date, and the request id each answer names afresh.
        .filter(|(name, _)| !["date", "x-request-id"].contains(&name.as_str()))
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_string()))
        .collect();
    headers.sort();
    (answer.status, answer.body.to_string(), headers)
}

/// Every public read and a buyer's press of `id`, as a stranger walking ids sends them.
async fn walk(app: &App, id: u64) -> Vec<Answer> {
    let buyer = buyer_token(4_242);
    vec![
        app.call(Method::GET, &format!("/vouchers/{id}"), None, None)
            .await,
        app.get(&format!("/vouchers/{id}/orders/mine"), &buyer)
            .await,
        app.post(&format!("/vouchers/{id}/orders"), &buyer).await,
    ]
}

/// A sale of `buckets` buckets, unlisted until `announce`; returns its buckets' ids.
async fn create_unlisted(
    app: &App,
    title: &str,
    announce: DateTime<Utc>,
    buckets: u64,
) -> Vec<u64> {
    let body = json!({
        "title": title,
        "description": "embargoed until Friday",
        "stock": 5,
        "buckets": buckets,
        "begin_time": announce.to_rfc3339(),
        "end_time": (announce + chrono::Duration::hours(1)).to_rfc3339(),
        "announce_at": announce.to_rfc3339(),
    });
    let created = app
        .call(Method::POST, "/vouchers", Some(ADMIN_TOKEN), Some(body))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{created:?}");
    assert_eq!(
        created.body["announce_at"],
        announce.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    let id = SaleId::from_raw(created.body["id"].as_u64().unwrap());
    let found = scripts::lookup(id.first_bucket()).await.unwrap();
    let ids: Vec<u64> = found
        .spread
        .buckets(id)
        .all()
        .iter()
        .map(|b| b.raw())
        .collect();
    assert_eq!(ids.len() as u64, buckets);
    ids
}

#[tokio::test]
async fn an_unlisted_sale_is_unseen_until_its_announce_time() {
    let app = App::start().await;
    let announce = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(6);
    // A sale in buckets: each bucket's id is one a stranger may walk.
    let buckets = create_unlisted(&app, "Unannounced launch: 90% off", announce, 3).await;
    let unlisted = buckets[0];
    // Another unlisted sale whose Redis state is lost: a read asks MySQL, which hides it too.
    let lost = create_unlisted(&app, "Unannounced launch: 80% off", announce, 1).await[0];
    let mut redis = local::redis().await;
    let _: () = redis
        .del(format!("seckill:{{{lost}}}:voucher"))
        .await
        .unwrap();
    // An id no voucher has: above the highest one.
    let made_up = walk(&app, lost + 1_000).await;
    assert_eq!(made_up[0].status, StatusCode::NOT_FOUND, "{:?}", made_up[0]);

    for &id in buckets.iter().chain([&lost]) {
        let answers = walk(&app, id).await;
        for (answer, unknown) in answers.iter().zip(&made_up) {
            assert_eq!(seen(answer), seen(unknown), "voucher {id}");
        }
    }
    // The admin sees it in her list.
    let listed = app.get("/vouchers", ADMIN_TOKEN).await;
    let titles: Vec<&str> = listed.body["vouchers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|voucher| voucher["id"] == unlisted)
        .map(|voucher| voucher["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["Unannounced launch: 90% off"]);

    // At its announce time it appears, and sells.
    let wait = announce - Utc::now() + chrono::Duration::milliseconds(300);
    tokio::time::sleep(wait.to_std().unwrap_or(Duration::ZERO)).await;
    let shown = app
        .call(Method::GET, &format!("/vouchers/{unlisted}"), None, None)
        .await;
    assert_eq!(shown.status, StatusCode::OK, "{shown:?}");
    assert_eq!(shown.body["title"], "Unannounced launch: 90% off");
    let bought = app.buy(unlisted, 4_243).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
}
